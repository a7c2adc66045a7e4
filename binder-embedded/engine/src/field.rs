//! Field tables: the AMQP 0-9-1 typed key/value tables that carry message headers, queue and
//! exchange arguments and consumer arguments.

use std::collections::BTreeMap;
use std::fmt;

use bytes::Bytes;

/// An AMQP `decimal-value`: `value / 10^scale` (the unscaled value is signed, as RabbitMQ
/// reads it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Decimal {
    /// Number of decimal digits after the point.
    pub scale: u8,
    /// The unscaled value.
    pub value: i32,
}

impl fmt::Display for Decimal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.value < 0 { "-" } else { "" };
        let digits = self.value.unsigned_abs().to_string();
        let scale = usize::from(self.scale);
        if scale == 0 {
            return write!(f, "{sign}{digits}");
        }
        let padded = format!("{digits:0>width$}", width = scale + 1);
        let (int, frac) = padded.split_at(padded.len() - scale);
        write!(f, "{sign}{int}.{frac}")
    }
}

/// One field value: exactly the AMQP 0-9-1 field types RabbitMQ carries (with its reading of
/// the ambiguous type letters).
#[derive(Debug, Clone, PartialEq)]
pub enum FieldValue {
    /// `V`: no value.
    Void,
    /// `t`
    Bool(bool),
    /// `b`
    I8(i8),
    /// `B`
    U8(u8),
    /// `s` (RabbitMQ's short int)
    I16(i16),
    /// `u`
    U16(u16),
    /// `I`
    I32(i32),
    /// `i`
    U32(u32),
    /// `l`
    I64(i64),
    /// `f`
    F32(f32),
    /// `d`
    F64(f64),
    /// `D`
    Decimal(Decimal),
    /// `S`, a UTF-8 long string.
    String(String),
    /// `x`, raw bytes.
    Bytes(Bytes),
    /// `T`, seconds since the Unix epoch.
    Timestamp(u64),
    /// `A`
    Array(Vec<FieldValue>),
    /// `F`
    Table(FieldTable),
}

impl FieldValue {
    /// The string, if this is a [`FieldValue::String`].
    pub fn as_str(&self) -> Option<&str> {
        match self {
            FieldValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// The value as a signed integer if it is any integer type that fits.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            FieldValue::I8(v) => Some(v.into()),
            FieldValue::U8(v) => Some(v.into()),
            FieldValue::I16(v) => Some(v.into()),
            FieldValue::U16(v) => Some(v.into()),
            FieldValue::I32(v) => Some(v.into()),
            FieldValue::U32(v) => Some(v.into()),
            FieldValue::I64(v) => Some(v),
            FieldValue::Timestamp(v) => i64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The AMQP type name, for error texts.
    pub fn type_name(&self) -> &'static str {
        match self {
            FieldValue::Void => "void",
            FieldValue::Bool(_) => "bool",
            FieldValue::I8(_) => "i8",
            FieldValue::U8(_) => "u8",
            FieldValue::I16(_) => "i16",
            FieldValue::U16(_) => "u16",
            FieldValue::I32(_) => "i32",
            FieldValue::U32(_) => "u32",
            FieldValue::I64(_) => "i64",
            FieldValue::F32(_) => "f32",
            FieldValue::F64(_) => "f64",
            FieldValue::Decimal(_) => "decimal",
            FieldValue::String(_) => "string",
            FieldValue::Bytes(_) => "bytes",
            FieldValue::Timestamp(_) => "timestamp",
            FieldValue::Array(_) => "array",
            FieldValue::Table(_) => "table",
        }
    }
}

/// Strings bare, numbers in decimal, arrays and tables in a JSON-like form (as error texts
/// show them).
impl fmt::Display for FieldValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FieldValue::Void => f.write_str("null"),
            FieldValue::Bool(v) => write!(f, "{v}"),
            FieldValue::F32(v) => write!(f, "{v}"),
            FieldValue::F64(v) => write!(f, "{v}"),
            FieldValue::Decimal(v) => write!(f, "{v}"),
            FieldValue::String(v) => f.write_str(v),
            FieldValue::Bytes(v) => write!(f, "<{} bytes>", v.len()),
            FieldValue::Array(items) => {
                f.write_str("[")?;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{item}")?;
                }
                f.write_str("]")
            }
            FieldValue::Table(t) => write!(f, "{t}"),
            other => write!(f, "{}", other.as_i64().unwrap_or_default()),
        }
    }
}

macro_rules! field_from {
    ($($t:ty => $variant:ident),* $(,)?) => {
        $(impl From<$t> for FieldValue {
            fn from(v: $t) -> Self {
                FieldValue::$variant(v.into())
            }
        })*
    };
}

field_from! {
    bool => Bool, i8 => I8, u8 => U8, i16 => I16, u16 => U16, i32 => I32, u32 => U32,
    i64 => I64, f32 => F32, f64 => F64, Decimal => Decimal, String => String, &str => String,
    Bytes => Bytes, Vec<FieldValue> => Array, FieldTable => Table,
}

type Map = BTreeMap<String, FieldValue>;

/// The map every empty table reads as.
static EMPTY: Map = BTreeMap::new();

/// An AMQP field table: names to values, kept sorted by name.
///
/// Most messages carry no headers, so an empty table is one null pointer and allocates
/// nothing; the map is boxed on the first insert and dropped again when its last entry is
/// removed (an empty table is always the null pointer, so equality is the maps').
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldTable(Option<Box<Map>>);

impl FieldTable {
    /// An empty table (allocates nothing).
    pub const fn new() -> Self {
        FieldTable(None)
    }

    fn map(&self) -> &Map {
        self.0.as_deref().unwrap_or(&EMPTY)
    }

    /// The value of `name`, if present.
    pub fn get(&self, name: &str) -> Option<&FieldValue> {
        self.0.as_ref()?.get(name)
    }

    /// The value of `name` if it is a string.
    pub fn get_str(&self, name: &str) -> Option<&str> {
        self.get(name).and_then(FieldValue::as_str)
    }

    /// Sets `name`, returning the previous value.
    pub fn insert(
        &mut self,
        name: impl Into<String>,
        value: impl Into<FieldValue>,
    ) -> Option<FieldValue> {
        self.0
            .get_or_insert_with(Box::default)
            .insert(name.into(), value.into())
    }

    /// Removes `name`, returning its value.
    pub fn remove(&mut self, name: &str) -> Option<FieldValue> {
        let map = self.0.as_mut()?;
        let removed = map.remove(name);
        if map.is_empty() {
            self.0 = None;
        }
        removed
    }

    /// Whether `name` is present.
    pub fn contains(&self, name: &str) -> bool {
        self.map().contains_key(name)
    }

    /// Number of fields.
    pub fn len(&self) -> usize {
        self.map().len()
    }

    /// Whether there are no fields.
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// Iterates in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &FieldValue)> {
        self.map().iter()
    }
}

impl fmt::Display for FieldTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, (k, v)) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{k}: {v}")?;
        }
        f.write_str("}")
    }
}

impl<K: Into<String>, V: Into<FieldValue>> FromIterator<(K, V)> for FieldTable {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let map: Map = iter
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        FieldTable((!map.is_empty()).then(|| Box::new(map)))
    }
}

impl IntoIterator for FieldTable {
    type Item = (String, FieldValue);
    type IntoIter = std::collections::btree_map::IntoIter<String, FieldValue>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.map(|map| *map).unwrap_or_default().into_iter()
    }
}

impl<'a> IntoIterator for &'a FieldTable {
    type Item = (&'a String, &'a FieldValue);
    type IntoIter = std::collections::btree_map::Iter<'a, String, FieldValue>;
    fn into_iter(self) -> Self::IntoIter {
        self.map().iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_table_is_a_null_pointer_and_is_one_again_once_emptied() {
        assert_eq!(std::mem::size_of::<FieldTable>(), 8);
        let mut t = FieldTable::new();
        assert_eq!(t.get("a"), None);
        assert_eq!(t.iter().count(), 0);
        assert_eq!(t.insert("a", 1i32), None);
        assert_eq!(t.insert("b", "x"), None);
        assert_eq!((t.len(), t.contains("a"), t.is_empty()), (2, true, false));
        assert_eq!(t.remove("a"), Some(FieldValue::I32(1)));
        assert_ne!(t, FieldTable::new());
        assert_eq!(t.remove("b"), Some(FieldValue::from("x")));
        assert!(t.is_empty());
        assert_eq!(t, FieldTable::new(), "emptied, it equals a new table");
        assert_eq!(t.remove("b"), None);
        let collected: FieldTable = std::iter::empty::<(String, FieldValue)>().collect();
        assert!(collected.is_empty() && collected == FieldTable::new());
        assert_eq!(collected.into_iter().count(), 0);
    }

    #[test]
    fn decimal_renders_with_scale_and_sign() {
        let d = |scale, value| Decimal { scale, value }.to_string();
        assert_eq!(d(2, 12345), "123.45");
        assert_eq!(d(3, 5), "0.005");
        assert_eq!(d(0, 7), "7");
        assert_eq!(d(1, -5), "-0.5");
        assert_eq!(d(2, i32::MIN), "-21474836.48");
    }

    #[test]
    fn integers_of_every_width_read_as_i64_and_tables_display() {
        let values: Vec<FieldValue> = vec![
            (-1i8).into(),
            2u8.into(),
            (-3i16).into(),
            4u16.into(),
            (-5i32).into(),
        ];
        let read: Vec<i64> = values.iter().map(|v| v.as_i64().unwrap()).collect();
        assert_eq!(read, vec![-1, 2, -3, 4, -5]);
        assert_eq!(FieldValue::from("x").as_i64(), None);
        let inner: FieldTable = [("n", FieldValue::I32(1))].into_iter().collect();
        let v = FieldValue::Array(vec!["a".into(), inner.into(), FieldValue::Void]);
        assert_eq!(v.to_string(), "[a, {n: 1}, null]");
    }
}
