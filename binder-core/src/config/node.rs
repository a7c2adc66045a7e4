//! Reading typed values out of the merged `config::Value` tree, with errors that carry the key
//! path and the origin of each value.

use std::collections::BTreeMap;

use config::{Value, ValueKind};

use super::error::{Problems, unknown_key_message};
use super::key::canonical;

/// A configuration table as the `config` crate stores it.
pub(crate) type Table = config::Map<String, Value>;

/// The entries of a table in name order, so problems are reported deterministically.
pub(crate) fn sorted(table: &Table) -> Vec<(&String, &Value)> {
    let mut entries: Vec<_> = table.iter().collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    entries
}

/// `parent.key`, or `key` at the root.
pub(crate) fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_owned()
    } else {
        format!("{parent}.{key}")
    }
}

#[doc(hidden)]
/// A short description of what a value is, for "expected X, found Y" messages.
pub fn describe(value: &Value) -> String {
    match &value.kind {
        ValueKind::Nil => "nothing (null)".to_owned(),
        ValueKind::Boolean(b) => format!("`{b}`"),
        ValueKind::I64(n) => format!("`{n}`"),
        ValueKind::I128(n) => format!("`{n}`"),
        ValueKind::U64(n) => format!("`{n}`"),
        ValueKind::U128(n) => format!("`{n}`"),
        ValueKind::Float(n) => format!("`{n}`"),
        ValueKind::String(s) => format!("`{s}`"),
        ValueKind::Table(_) => "a table".to_owned(),
        ValueKind::Array(_) => "a list".to_owned(),
    }
}

/// The table inside `value`, or a problem saying a table was expected.
pub(crate) fn as_table<'a>(
    value: &'a Value,
    path: &str,
    problems: &mut Problems,
) -> Option<&'a Table> {
    match &value.kind {
        ValueKind::Table(t) => Some(t),
        ValueKind::Nil => None,
        _ => {
            problems.push(
                value.origin(),
                path,
                format!("expected a table of properties, found {}", describe(value)),
            );
            None
        }
    }
}

/// A property value type: knows how to read itself from a configuration value (booleans,
/// integers, strings, lists, maps, `Option`s, the enums of [`keyword_enum!`](crate::keyword_enum)
/// and the sections of [`properties!`](crate::properties) are).
pub trait FieldValue: Sized {
    /// A human description of the expected value, e.g. "a whole number from 1 to 65535".
    fn expected() -> String;

    /// Reads a value; on failure pushes a problem and returns `None`.
    fn parse(value: &Value, path: &str, problems: &mut Problems) -> Option<Self>;

    /// Merges `value` into `slot` (replacement for scalars, key-wise merge for tables).
    fn merge(slot: &mut Self, value: &Value, path: &str, problems: &mut Problems) {
        if let Some(v) = Self::parse(value, path, problems) {
            *slot = v;
        }
    }
}

fn mismatch<T: FieldValue>(value: &Value, path: &str, problems: &mut Problems) -> Option<T> {
    problems.push(
        value.origin(),
        path,
        format!("expected {}, found {}", T::expected(), describe(value)),
    );
    None
}

impl FieldValue for bool {
    fn expected() -> String {
        "a boolean (true or false)".to_owned()
    }
    fn parse(value: &Value, path: &str, problems: &mut Problems) -> Option<Self> {
        match &value.kind {
            ValueKind::Boolean(b) => Some(*b),
            ValueKind::String(s) if s.eq_ignore_ascii_case("true") => Some(true),
            ValueKind::String(s) if s.eq_ignore_ascii_case("false") => Some(false),
            _ => mismatch::<Self>(value, path, problems),
        }
    }
}

fn integer(value: &Value) -> Option<i128> {
    match &value.kind {
        ValueKind::I64(n) => Some((*n).into()),
        ValueKind::I128(n) => Some(*n),
        ValueKind::U64(n) => Some((*n).into()),
        ValueKind::U128(n) => i128::try_from(*n).ok(),
        ValueKind::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

macro_rules! integer_field {
    ($($t:ty),*) => {$(
        impl FieldValue for $t {
            fn expected() -> String {
                format!("a whole number from {} to {}", <$t>::MIN, <$t>::MAX)
            }
            fn parse(value: &Value, path: &str, problems: &mut Problems) -> Option<Self> {
                match integer(value).and_then(|n| <$t>::try_from(n).ok()) {
                    Some(n) => Some(n),
                    None => mismatch::<Self>(value, path, problems),
                }
            }
        }
    )*};
}

integer_field!(u8, u16, u32, u64, i32, i64);

impl FieldValue for f64 {
    fn expected() -> String {
        "a number".to_owned()
    }
    fn parse(value: &Value, path: &str, problems: &mut Problems) -> Option<Self> {
        let n = match &value.kind {
            ValueKind::Float(f) => Some(*f),
            ValueKind::String(s) => s.trim().parse().ok(),
            _ => integer(value).map(|n| n as f64),
        };
        match n {
            Some(n) if n.is_finite() => Some(n),
            _ => mismatch::<Self>(value, path, problems),
        }
    }
}

impl FieldValue for String {
    fn expected() -> String {
        "a string".to_owned()
    }
    fn parse(value: &Value, path: &str, problems: &mut Problems) -> Option<Self> {
        match &value.kind {
            ValueKind::String(s) => Some(s.clone()),
            // YAML turns `ttl: 10` or `group: 1` into numbers; a string property takes them
            // as written.
            ValueKind::I64(_)
            | ValueKind::I128(_)
            | ValueKind::U64(_)
            | ValueKind::U128(_)
            | ValueKind::Float(_)
            | ValueKind::Boolean(_) => Some(value.to_string()),
            _ => mismatch::<Self>(value, path, problems),
        }
    }
}

impl<T: FieldValue> FieldValue for Option<T> {
    fn expected() -> String {
        T::expected()
    }
    fn parse(value: &Value, path: &str, problems: &mut Problems) -> Option<Self> {
        match value.kind {
            ValueKind::Nil => Some(None),
            _ => T::parse(value, path, problems).map(Some),
        }
    }
    /// A later layer merges into what an earlier one set (so a binding can refine
    /// `alternateExchange` from the defaults); `null` unsets.
    fn merge(slot: &mut Self, value: &Value, path: &str, problems: &mut Problems) {
        match (slot.as_mut(), &value.kind) {
            (_, ValueKind::Nil) => *slot = None,
            (Some(inner), _) => T::merge(inner, value, path, problems),
            (None, _) => {
                if let Some(v) = T::parse(value, path, problems) {
                    *slot = Some(v);
                }
            }
        }
    }
}

/// Lists are written as YAML/TOML lists or as one comma-separated string (`a,b,c`), as Spring
/// accepts both.
impl<T: FieldValue> FieldValue for Vec<T> {
    fn expected() -> String {
        format!("a list (or a comma-separated string) of {}", T::expected())
    }
    fn parse(value: &Value, path: &str, problems: &mut Problems) -> Option<Self> {
        let before = problems.len();
        let items: Vec<Option<T>> = match &value.kind {
            ValueKind::Nil => return Some(Vec::new()),
            ValueKind::Array(items) => items
                .iter()
                .enumerate()
                .map(|(i, item)| T::parse(item, &format!("{path}[{i}]"), problems))
                .collect(),
            ValueKind::String(s) => s
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .enumerate()
                .map(|(i, item)| {
                    let v = Value::new(value.origin().map(str::to_owned).as_ref(), item);
                    T::parse(&v, &format!("{path}[{i}]"), problems)
                })
                .collect(),
            ValueKind::Table(_) => return mismatch::<Self>(value, path, problems),
            _ => vec![T::parse(value, &format!("{path}[0]"), problems)],
        };
        if problems.len() > before {
            return None;
        }
        Some(items.into_iter().flatten().collect())
    }
}

/// Maps (`queueBindingArguments`, `retryableExceptions`, …) merge key by key; names are kept
/// exactly as written.
impl<T: FieldValue> FieldValue for BTreeMap<String, T> {
    fn expected() -> String {
        format!("a table of names to {}", T::expected())
    }
    fn parse(value: &Value, path: &str, problems: &mut Problems) -> Option<Self> {
        let mut out = BTreeMap::new();
        <Self as FieldValue>::merge(&mut out, value, path, problems);
        Some(out)
    }
    fn merge(slot: &mut Self, value: &Value, path: &str, problems: &mut Problems) {
        let Some(table) = as_table(value, path, problems) else {
            return;
        };
        for (k, v) in sorted(table) {
            if let Some(parsed) = T::parse(v, &join(path, k), problems) {
                slot.insert(k.clone(), parsed);
            }
        }
    }
}

/// A group of properties read from one table (e.g. the consumer properties of a binding),
/// declared with [`properties!`](crate::properties).
pub trait Section: Default {
    /// The property names, as Spring Cloud Stream spells them.
    fn keys() -> Vec<&'static str>;

    /// Applies one key if it belongs to this section; `false` if it is unknown here.
    fn merge_key(&mut self, key: &str, value: &Value, path: &str, problems: &mut Problems) -> bool;

    /// Writes the section's properties, by their Spring names, into a map being serialized
    /// (what `Serialize` of a [`properties!`](crate::properties) section does).
    #[doc(hidden)]
    fn serialize_entries<M: serde::ser::SerializeMap>(&self, map: &mut M) -> Result<(), M::Error>;

    /// Applies every key of a table, reporting unknown keys and keys set twice in two
    /// spellings.
    fn merge_table(&mut self, value: &Value, path: &str, problems: &mut Problems) {
        let Some(table) = as_table(value, path, problems) else {
            return;
        };
        let mut seen: BTreeMap<String, &str> = BTreeMap::new();
        for (key, v) in sorted(table) {
            let key_path = join(path, key);
            if let Some(first) = seen.insert(canonical(key), key) {
                problems.push(
                    v.origin(),
                    &key_path,
                    format!("set twice, also as `{first}`: keep one spelling"),
                );
                continue;
            }
            if !self.merge_key(key, v, &key_path, problems) {
                let keys = Self::keys();
                problems.push(
                    v.origin(),
                    &key_path,
                    unknown_key_message("property", key, &keys),
                );
            }
        }
    }
}

/// Declares a property section: the struct with its SCSt defaults, the list of keys, and the
/// reading code. Each field is `name: Type = default => "sccsName" [| "alias"] [, check expr]`,
/// where the check is a `fn(&Type) -> Result<(), String>`. A leading `..name: Type;`
/// includes another section's keys at the same level.
#[macro_export]
macro_rules! properties {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( .. $flat:ident : $flat_ty:ty; )?
            $(
                $(#[$fmeta:meta])*
                $field:ident : $ty:ty = $default:expr => $key:literal $(| $alias:literal)* $(, check $check:expr)?;
            )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq)]
        pub struct $name {
            $(
                #[doc = concat!("Properties shared with other sections (`", stringify!($flat_ty), "`).")]
                pub $flat: $flat_ty,
            )?
            $( $(#[$fmeta])* pub $field: $ty, )*
        }

        impl Default for $name {
            fn default() -> Self {
                Self {
                    $( $flat: Default::default(), )?
                    $( $field: $default, )*
                }
            }
        }

        impl $crate::config::Section for $name {
            fn keys() -> Vec<&'static str> {
                #[allow(unused_mut)]
                let mut keys = vec![$($key),*];
                $( keys.extend(<$flat_ty as $crate::config::Section>::keys()); )?
                keys
            }

            fn serialize_entries<M: $crate::__private::serde::ser::SerializeMap>(
                &self,
                map: &mut M,
            ) -> Result<(), M::Error> {
                $( <$flat_ty as $crate::config::Section>::serialize_entries(&self.$flat, map)?; )?
                $( map.serialize_entry($key, &self.$field)?; )*
                Ok(())
            }

            fn merge_key(
                &mut self,
                key: &str,
                value: &$crate::__private::config::Value,
                path: &str,
                problems: &mut $crate::config::Problems,
            ) -> bool {
                let canon = $crate::config::canonical(key);
                $(
                    if canon == $crate::config::canonical($key)
                        $(|| canon == $crate::config::canonical($alias))*
                    {
                        let before = problems.len();
                        <$ty as $crate::config::FieldValue>::merge(
                            &mut self.$field, value, path, problems,
                        );
                        $(
                            if problems.len() == before {
                                let check: fn(&$ty) -> Result<(), String> = $check;
                                if let Err(msg) = check(&self.$field) {
                                    problems.push(value.origin(), path, msg);
                                }
                            }
                        )?
                        let _ = before;
                        return true;
                    }
                )*
                $(
                    if <$flat_ty as $crate::config::Section>::merge_key(
                        &mut self.$flat, key, value, path, problems,
                    ) {
                        return true;
                    }
                )?
                false
            }
        }

        impl $crate::__private::serde::Serialize for $name {
            fn serialize<S: $crate::__private::serde::Serializer>(
                &self,
                serializer: S,
            ) -> Result<S::Ok, S::Error> {
                use $crate::__private::serde::ser::SerializeMap;
                let mut map = serializer.serialize_map(None)?;
                <Self as $crate::config::Section>::serialize_entries(self, &mut map)?;
                map.end()
            }
        }

        impl $crate::config::FieldValue for $name {
            fn expected() -> String {
                "a table of properties".to_owned()
            }
            fn parse(
                value: &$crate::__private::config::Value,
                path: &str,
                problems: &mut $crate::config::Problems,
            ) -> Option<Self> {
                let mut out = Self::default();
                <Self as $crate::config::FieldValue>::merge(&mut out, value, path, problems);
                Some(out)
            }
            fn merge(
                slot: &mut Self,
                value: &$crate::__private::config::Value,
                path: &str,
                problems: &mut $crate::config::Problems,
            ) {
                <Self as $crate::config::Section>::merge_table(slot, value, path, problems);
            }
        }
    };
}

/// Declares a string-valued enum property: variants with their spellings, read
/// case-insensitively and separator-insensitively, rendered in the canonical SCSt spelling.
#[macro_export]
macro_rules! keyword_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident => $text:literal ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )*
        }

        impl $name {
            /// Every accepted spelling, canonical form.
            pub const ALL: &'static [&'static str] = &[$($text),*];

            /// The canonical spelling, as Spring Cloud Stream writes it.
            pub fn as_str(self) -> &'static str {
                match self { $( $name::$variant => $text, )* }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = $crate::config::UnknownValue;
            fn from_str(s: &str) -> Result<Self, $crate::config::UnknownValue> {
                let canon = $crate::config::canonical(s);
                $( if canon == $crate::config::canonical($text) { return Ok($name::$variant); } )*
                Err($crate::config::UnknownValue::new(s, Self::ALL))
            }
        }

        impl $crate::__private::serde::Serialize for $name {
            fn serialize<S: $crate::__private::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl $crate::config::FieldValue for $name {
            fn expected() -> String {
                format!("one of {}", Self::ALL.join(", "))
            }
            fn parse(
                value: &$crate::__private::config::Value,
                path: &str,
                problems: &mut $crate::config::Problems,
            ) -> Option<Self> {
                match &value.kind {
                    $crate::__private::config::ValueKind::String(s) => match s.parse() {
                        Ok(v) => Some(v),
                        Err(unknown) => {
                            problems.push(value.origin(), path, unknown.to_string());
                            None
                        }
                    },
                    _ => {
                        problems.push(
                            value.origin(),
                            path,
                            format!(
                                "expected {}, found {}",
                                Self::expected(),
                                $crate::__private::describe(value)
                            ),
                        );
                        None
                    }
                }
            }
        }
    };
}
