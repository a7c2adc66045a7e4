//! Header values with the AMQP 0-9-1 field-table types, so that nothing is lost between binders.

use std::collections::BTreeMap;
use std::fmt;

use bytes::Bytes;

/// An AMQP `decimal-value`: `value / 10^scale`.
///
/// The unscaled value is signed, as RabbitMQ, the Java client and pika read it: `-5` with
/// scale 1 is `-0.5`.
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

/// One header value. The variants are exactly the AMQP 0-9-1 field types that RabbitMQ and lapin
/// carry, so a header written on one binder is read back with the same type on another.
#[derive(Debug, Clone, PartialEq)]
pub enum HeaderValue {
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
    Array(Vec<HeaderValue>),
    /// `F`
    Table(Headers),
}

impl HeaderValue {
    /// The string, if this is a [`HeaderValue::String`].
    pub fn as_str(&self) -> Option<&str> {
        match self {
            HeaderValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// The value as a signed integer if it is any integer type that fits.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            HeaderValue::I8(v) => Some(v.into()),
            HeaderValue::U8(v) => Some(v.into()),
            HeaderValue::I16(v) => Some(v.into()),
            HeaderValue::U16(v) => Some(v.into()),
            HeaderValue::I32(v) => Some(v.into()),
            HeaderValue::U32(v) => Some(v.into()),
            HeaderValue::I64(v) => Some(v),
            HeaderValue::Timestamp(v) => i64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The AMQP type name, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            HeaderValue::Void => "void",
            HeaderValue::Bool(_) => "bool",
            HeaderValue::I8(_) => "i8",
            HeaderValue::U8(_) => "u8",
            HeaderValue::I16(_) => "i16",
            HeaderValue::U16(_) => "u16",
            HeaderValue::I32(_) => "i32",
            HeaderValue::U32(_) => "u32",
            HeaderValue::I64(_) => "i64",
            HeaderValue::F32(_) => "f32",
            HeaderValue::F64(_) => "f64",
            HeaderValue::Decimal(_) => "decimal",
            HeaderValue::String(_) => "string",
            HeaderValue::Bytes(_) => "bytes",
            HeaderValue::Timestamp(_) => "timestamp",
            HeaderValue::Array(_) => "array",
            HeaderValue::Table(_) => "table",
        }
    }
}

/// Renders the value the way an expression or a log line would show it: strings bare, numbers
/// in decimal, arrays and tables in a JSON-like form.
impl fmt::Display for HeaderValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeaderValue::Void => f.write_str("null"),
            HeaderValue::Bool(v) => write!(f, "{v}"),
            HeaderValue::F32(v) => write!(f, "{v}"),
            HeaderValue::F64(v) => write!(f, "{v}"),
            HeaderValue::Decimal(v) => write!(f, "{v}"),
            HeaderValue::String(v) => f.write_str(v),
            HeaderValue::Bytes(v) => write!(f, "<{} bytes>", v.len()),
            HeaderValue::Array(items) => {
                f.write_str("[")?;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{item}")?;
                }
                f.write_str("]")
            }
            HeaderValue::Table(t) => write!(f, "{t}"),
            other => write!(f, "{}", other.as_i64().unwrap_or_default()),
        }
    }
}

macro_rules! header_from {
    ($($t:ty => $variant:ident),* $(,)?) => {
        $(impl From<$t> for HeaderValue {
            fn from(v: $t) -> Self {
                HeaderValue::$variant(v.into())
            }
        })*
    };
}

header_from! {
    bool => Bool, i8 => I8, u8 => U8, i16 => I16, u16 => U16, i32 => I32, u32 => U32,
    i64 => I64, f32 => F32, f64 => F64, Decimal => Decimal, String => String, &str => String,
    Bytes => Bytes, Vec<HeaderValue> => Array, Headers => Table,
}

type Map = BTreeMap<String, HeaderValue>;

/// What every empty table reads as.
static EMPTY: Map = BTreeMap::new();

/// An AMQP field table: header names to values, kept sorted by name.
///
/// One pointer: an empty table (most messages carry none) allocates nothing; the map is
/// boxed on the first insert and dropped again when its last entry is removed, so an empty
/// table is always the null pointer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Headers(Option<Box<Map>>);

impl Headers {
    /// An empty table (allocates nothing).
    pub const fn new() -> Self {
        Headers(None)
    }

    fn map(&self) -> &Map {
        self.0.as_deref().unwrap_or(&EMPTY)
    }

    /// Whether the map is allocated (it is exactly when the table has entries).
    pub fn is_allocated(&self) -> bool {
        self.0.is_some()
    }

    /// The value of `name`, if present.
    pub fn get(&self, name: &str) -> Option<&HeaderValue> {
        self.map().get(name)
    }

    /// The value of `name` if it is a string.
    pub fn get_str(&self, name: &str) -> Option<&str> {
        self.get(name).and_then(HeaderValue::as_str)
    }

    /// Sets `name`, returning the previous value.
    pub fn insert(
        &mut self,
        name: impl Into<String>,
        value: impl Into<HeaderValue>,
    ) -> Option<HeaderValue> {
        self.0
            .get_or_insert_with(Box::default)
            .insert(name.into(), value.into())
    }

    /// Removes `name`, returning its value.
    pub fn remove(&mut self, name: &str) -> Option<HeaderValue> {
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

    /// Number of headers.
    pub fn len(&self) -> usize {
        self.map().len()
    }

    /// Whether there are no headers.
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// Iterates in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &HeaderValue)> {
        self.map().iter()
    }
}

impl fmt::Display for Headers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, (k, v)) in self.map().iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{k}: {v}")?;
        }
        f.write_str("}")
    }
}

impl<K: Into<String>, V: Into<HeaderValue>> FromIterator<(K, V)> for Headers {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let map: Map = iter
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        Headers((!map.is_empty()).then(|| Box::new(map)))
    }
}

impl IntoIterator for Headers {
    type Item = (String, HeaderValue);
    type IntoIter = std::collections::btree_map::IntoIter<String, HeaderValue>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.map(|m| *m).unwrap_or_default().into_iter()
    }
}

impl<'a> IntoIterator for &'a Headers {
    type Item = (&'a String, &'a HeaderValue);
    type IntoIter = std::collections::btree_map::Iter<'a, String, HeaderValue>;
    fn into_iter(self) -> Self::IntoIter {
        self.map().iter()
    }
}

/// JSON-friendly rendering (plans, diagnostics): numbers as numbers, bytes as arrays,
/// decimals as strings, void as null.
impl serde::Serialize for HeaderValue {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            HeaderValue::Void => s.serialize_none(),
            HeaderValue::Bool(v) => s.serialize_bool(*v),
            HeaderValue::I8(v) => s.serialize_i8(*v),
            HeaderValue::U8(v) => s.serialize_u8(*v),
            HeaderValue::I16(v) => s.serialize_i16(*v),
            HeaderValue::U16(v) => s.serialize_u16(*v),
            HeaderValue::I32(v) => s.serialize_i32(*v),
            HeaderValue::U32(v) => s.serialize_u32(*v),
            HeaderValue::I64(v) => s.serialize_i64(*v),
            HeaderValue::F32(v) => s.serialize_f32(*v),
            HeaderValue::F64(v) => s.serialize_f64(*v),
            HeaderValue::Decimal(v) => s.collect_str(v),
            HeaderValue::String(v) => s.serialize_str(v),
            HeaderValue::Bytes(v) => s.collect_seq(v.iter()),
            HeaderValue::Timestamp(v) => s.serialize_u64(*v),
            HeaderValue::Array(v) => s.collect_seq(v.iter()),
            HeaderValue::Table(v) => v.serialize(s),
        }
    }
}

impl serde::Serialize for Headers {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.map().iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_table_is_one_null_pointer_and_is_freed_when_emptied() {
        assert_eq!(std::mem::size_of::<Headers>(), 8);
        let mut h = Headers::new();
        assert!(!h.is_allocated() && h.is_empty() && h.get("a").is_none());
        h.insert("a", 1i32);
        assert!(h.is_allocated() && h.len() == 1 && h.contains("a"));
        assert_eq!(h.remove("b"), None);
        assert_eq!(h.remove("a"), Some(HeaderValue::I32(1)));
        assert!(!h.is_allocated(), "emptied: freed");
        assert_eq!(h, Headers::new(), "equal to a table never allocated");
        let none: Headers = Vec::<(String, HeaderValue)>::new().into_iter().collect();
        assert!(!none.is_allocated());
        assert_eq!(none.into_iter().count(), 0);
    }

    #[test]
    fn decimal_renders_with_scale() {
        assert_eq!(
            Decimal {
                scale: 2,
                value: 12345
            }
            .to_string(),
            "123.45"
        );
        assert_eq!(Decimal { scale: 3, value: 5 }.to_string(), "0.005");
        assert_eq!(Decimal { scale: 0, value: 7 }.to_string(), "7");
        assert_eq!(
            Decimal {
                scale: 1,
                value: -5
            }
            .to_string(),
            "-0.5"
        );
        assert_eq!(
            Decimal {
                scale: 0,
                value: -7
            }
            .to_string(),
            "-7"
        );
        assert_eq!(
            Decimal {
                scale: 2,
                value: i32::MIN
            }
            .to_string(),
            "-21474836.48"
        );
    }

    #[test]
    fn integers_of_every_width_read_as_i64() {
        let values: Vec<HeaderValue> = vec![
            (-1i8).into(),
            2u8.into(),
            (-3i16).into(),
            4u16.into(),
            (-5i32).into(),
            6u32.into(),
            (-7i64).into(),
        ];
        let read: Vec<i64> = values.iter().map(|v| v.as_i64().unwrap()).collect();
        assert_eq!(read, vec![-1, 2, -3, 4, -5, 6, -7]);
        assert_eq!(HeaderValue::from("x").as_i64(), None);
    }

    #[test]
    fn nested_tables_and_arrays_display() {
        let inner: Headers = [("n", HeaderValue::I32(1))].into_iter().collect();
        let v = HeaderValue::Array(vec!["a".into(), inner.into(), HeaderValue::Void]);
        assert_eq!(v.to_string(), "[a, {n: 1}, null]");
    }
}
