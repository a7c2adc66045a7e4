//! Partition selection as Spring Cloud Stream's default selector makes it, so a Java and a
//! Rust producer put the same key on the same partition.
//!
//! Spring takes `key.hashCode()` (0 if it is `Integer.MIN_VALUE`), its absolute value, and
//! that modulo `partitionCount`. The hash is Java's for the type Spring would see the key as:
//!
//! | key | Java type | hash |
//! |---|---|---|
//! | text: a literal, a string header or field, several terms joined with `+` | `String` | `String.hashCode` |
//! | a JSON integer in `i32` range; an `i8`, `i16`, `i32`, `u8`, `u16` header, or a `u32` one in range | `Integer` (`Byte`, `Short`) | the value |
//! | a JSON integer beyond `i32` but in `i64`; an `i64` header (whatever its value), a `u32` one beyond `i32` | `Long` | `(int) (v ^ (v >>> 32))` |
//! | a JSON integer beyond `i64`, up to `u64::MAX` | `BigInteger` | `BigInteger.hashCode` |
//! | a JSON number with a fraction or exponent, or an integer beyond `u64` (JSON reads it as a float); an `f64` header | `Double` | `Long.hashCode(doubleToLongBits(v))` |
//! | an `f32` header | `Float` | `floatToIntBits(v)` |
//! | `true` / `false` | `Boolean` | 1231 / 1237 |
//! | a decimal header | `BigDecimal` | `BigDecimal.hashCode` (unscaled value and scale) |
//! | a timestamp header (seconds) | `Date` | `Long.hashCode` of the milliseconds |
//!
//! A null key (JSON `null`, a void header) is refused, as Spring refuses it. So are keys Java
//! has no stable hash for (byte arrays hash by identity) and arrays and tables.

use super::spel::expression::PartitionKey;
use crate::message::HeaderValue;

/// A partition key Spring would refuse, or that Java has no stable hash for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UnhashableKey {
    /// A JSON `null`.
    #[error("the partition key is null")]
    NullJson,
    /// A void header.
    #[error("the partition key is null (a void header)")]
    VoidHeader,
    /// A JSON array or object.
    #[error("a JSON {0} is not supported as a partition key; use a field of it")]
    JsonContainer(&'static str),
    /// A header of this type (bytes, array, table).
    #[error("a {0} header is not supported as a partition key (Java has no stable hash for it)")]
    Header(&'static str),
}

/// Java's `String.hashCode`: over the UTF-16 code units.
pub(crate) fn string_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}

/// Java's `Long.hashCode`: `(int) (v ^ (v >>> 32))`.
fn long_hash(v: i64) -> i32 {
    let bits = v as u64;
    (bits ^ (bits >> 32)) as u32 as i32
}

/// Java's `Double.hashCode`, on `doubleToLongBits` (one NaN).
fn double_hash(v: f64) -> i32 {
    let bits = if v.is_nan() {
        0x7ff8_0000_0000_0000
    } else {
        v.to_bits()
    };
    long_hash(bits as i64)
}

/// Java's `Float.hashCode`: `floatToIntBits` (one NaN).
fn float_hash(v: f32) -> i32 {
    let bits = if v.is_nan() { 0x7fc0_0000 } else { v.to_bits() };
    bits as i32
}

/// Java's `Boolean.hashCode`.
fn boolean_hash(v: bool) -> i32 {
    if v { 1231 } else { 1237 }
}

/// An integer as the narrowest of `Integer` and `Long` that holds it.
fn integer_or_long_hash(v: i64) -> i32 {
    match i32::try_from(v) {
        Ok(v) => v,
        Err(_) => long_hash(v),
    }
}

/// Java's `BigInteger.hashCode` for a value beyond `Long.MAX_VALUE` (two magnitude words).
fn big_integer_hash(v: u64) -> i32 {
    let (high, low) = ((v >> 32) as u32 as i32, v as u32 as i32);
    high.wrapping_mul(31).wrapping_add(low)
}

/// Java's `BigDecimal.hashCode` for a compact unscaled value: `31 * ±|v| folded + scale`.
fn big_decimal_hash(unscaled: i32, scale: u8) -> i32 {
    let magnitude = i64::from(unscaled).unsigned_abs();
    let folded = ((magnitude >> 32) as u32 as i32)
        .wrapping_mul(31)
        .wrapping_add(magnitude as u32 as i32);
    let signed = if unscaled < 0 {
        folded.wrapping_neg()
    } else {
        folded
    };
    signed.wrapping_mul(31).wrapping_add(i32::from(scale))
}

fn json_hash(v: &serde_json::Value) -> Result<i32, UnhashableKey> {
    use serde_json::Value;
    match v {
        Value::String(s) => Ok(string_hash(s)),
        Value::Bool(b) => Ok(boolean_hash(*b)),
        Value::Number(n) => Ok(if let Some(v) = n.as_i64() {
            integer_or_long_hash(v)
        } else if let Some(v) = n.as_u64() {
            big_integer_hash(v)
        } else {
            double_hash(n.as_f64().unwrap_or(f64::NAN))
        }),
        Value::Null => Err(UnhashableKey::NullJson),
        Value::Array(_) | Value::Object(_) => Err(UnhashableKey::JsonContainer(if v.is_array() {
            "array"
        } else {
            "object"
        })),
    }
}

fn header_hash(v: &HeaderValue) -> Result<i32, UnhashableKey> {
    Ok(match *v {
        HeaderValue::String(ref s) => string_hash(s),
        HeaderValue::Bool(b) => boolean_hash(b),
        HeaderValue::I8(v) => i32::from(v),
        HeaderValue::U8(v) => i32::from(v),
        HeaderValue::I16(v) => i32::from(v),
        HeaderValue::U16(v) => i32::from(v),
        HeaderValue::I32(v) => v,
        HeaderValue::U32(v) => integer_or_long_hash(i64::from(v)),
        HeaderValue::I64(v) => long_hash(v),
        HeaderValue::F32(v) => float_hash(v),
        HeaderValue::F64(v) => double_hash(v),
        HeaderValue::Decimal(d) => big_decimal_hash(d.value, d.scale),
        // The Java client reads a timestamp as `new Date(seconds * 1000)`.
        HeaderValue::Timestamp(secs) => long_hash((secs as i64).wrapping_mul(1000)),
        HeaderValue::Void => return Err(UnhashableKey::VoidHeader),
        HeaderValue::Bytes(_) | HeaderValue::Array(_) | HeaderValue::Table(_) => {
            return Err(UnhashableKey::Header(v.type_name()));
        }
    })
}

/// Java's `hashCode` of the key, as Spring would compute it.
pub(crate) fn java_hash(key: &PartitionKey) -> Result<i32, UnhashableKey> {
    match key {
        PartitionKey::Text(s) => Ok(string_hash(s)),
        PartitionKey::Header(v) => header_hash(v),
        PartitionKey::Json(v) => json_hash(v),
    }
}

/// SCSt's default selector and `PartitionHandler`: a hash of `Integer.MIN_VALUE` counts as
/// 0 (its absolute value would be negative), then `abs(hash) % count`.
pub(crate) fn partition_of(hash: i32, count: u32) -> u32 {
    let h = if hash == i32::MIN { 0 } else { hash.abs() };
    (h as u32) % count.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Decimal;

    fn json(src: &str) -> PartitionKey {
        PartitionKey::Json(serde_json::from_str(src).unwrap())
    }

    fn header(v: impl Into<HeaderValue>) -> PartitionKey {
        PartitionKey::Header(v.into())
    }

    /// Keys, their hash and partitions out of 3 and 7, as `jshell` computes them with
    /// `k.hashCode()` and Spring's selector.
    #[test]
    fn hashes_and_partitions_match_java() {
        let text = |s: &str| PartitionKey::Text(s.to_owned());
        let table: Vec<(&str, PartitionKey, i32, u32, u32)> = vec![
            ("Integer 42", json("42"), 42, 0, 0),
            ("Integer -1", json("-1"), -1, 1, 1),
            ("Integer 0", json("0"), 0, 0, 0),
            ("Integer MIN", json("-2147483648"), i32::MIN, 0, 0),
            ("Integer MAX", json("2147483647"), i32::MAX, 1, 1),
            ("Long 4294967296", json("4294967296"), 1, 1, 1),
            ("Long 2147483648", json("2147483648"), i32::MIN, 0, 0),
            ("Long -2147483649", json("-2147483649"), i32::MIN, 0, 0),
            ("Long MIN", json("-9223372036854775808"), i32::MIN, 0, 0),
            ("Long MAX", json("9223372036854775807"), i32::MIN, 0, 0),
            ("Long -1 (i64 header)", header(-1i64), 0, 0, 0),
            ("Long 42 (i64 header)", header(42i64), 42, 0, 0),
            (
                "Long 4294967296 (i64 header)",
                header(4_294_967_296i64),
                1,
                1,
                1,
            ),
            ("BigInteger 2^64-1", json("18446744073709551615"), -32, 2, 4),
            (
                "BigInteger 2^63",
                json("9223372036854775808"),
                i32::MIN,
                0,
                0,
            ),
            ("Double 1.5", json("1.5"), 1_073_217_536, 2, 6),
            ("Double -0.0", json("-0.0"), i32::MIN, 0, 0),
            ("Double 0.0", json("0.0"), 0, 0, 0),
            ("Double 0.1", json("0.1"), -1_507_852_285, 1, 2),
            ("Double 2.5E10", json("2.5e10"), -1_441_314_698, 2, 5),
            (
                "Double -2.75 (f64 header)",
                header(-2.75f64),
                -1_073_348_608,
                1,
                3,
            ),
            ("Float 1.5", header(1.5f32), 1_069_547_520, 0, 6),
            ("Float -0.0", header(-0.0f32), i32::MIN, 0, 0),
            ("Boolean true", json("true"), 1231, 1, 6),
            ("Boolean false", header(false), 1237, 1, 5),
            (
                "BigDecimal -0.5",
                header(Decimal {
                    scale: 1,
                    value: -5,
                }),
                -154,
                1,
                0,
            ),
            (
                "BigDecimal 123.45",
                header(Decimal {
                    scale: 2,
                    value: 12_345,
                }),
                382_697,
                2,
                0,
            ),
            (
                "BigDecimal -21474836.48",
                header(Decimal {
                    scale: 2,
                    value: i32::MIN,
                }),
                -2_147_483_646,
                0,
                0,
            ),
            (
                "BigDecimal 0.000",
                header(Decimal { scale: 3, value: 0 }),
                3,
                0,
                3,
            ),
            (
                "BigDecimal 1.0",
                header(Decimal {
                    scale: 1,
                    value: 10,
                }),
                311,
                2,
                3,
            ),
            (
                "Date 1700000000 s",
                PartitionKey::Header(HeaderValue::Timestamp(1_700_000_000)),
                -807_048_821,
                2,
                5,
            ),
            ("String empty", text(""), 0, 0, 0),
            ("String a", text("a"), 97, 1, 6),
            ("String hello", text("hello"), 99_162_322, 1, 0),
            (
                "String customer-42",
                text("customer-42"),
                -1_772_111_155,
                1,
                3,
            ),
            ("String héllo (header)", header("héllo"), 103_094_734, 1, 1),
            ("String 😀 (field)", json(r#""😀""#), 1_772_899, 1, 2),
            (
                "String polygenelubricants",
                text("polygenelubricants"),
                i32::MIN,
                0,
                0,
            ),
            ("Byte -8", header(-8i8), -8, 2, 1),
            ("Short -16000", header(-16_000i16), -16_000, 1, 5),
            ("Integer from u32 header", header(7u32), 7, 1, 0),
            ("Long from u32 header", header(4_294_967_295u32), -1, 1, 1),
        ];
        for (what, key, hash, of3, of7) in table {
            assert_eq!(java_hash(&key), Ok(hash), "{what}: hash");
            assert_eq!(partition_of(hash, 3), of3, "{what}: of 3");
            assert_eq!(partition_of(hash, 7), of7, "{what}: of 7");
        }
    }

    #[test]
    fn null_and_unhashable_keys_are_refused() {
        for (key, what) in [
            (json("null"), "null"),
            (header(HeaderValue::Void), "null"),
            (json("[1]"), "JSON array"),
            (json("{}"), "JSON object"),
            (
                header(HeaderValue::Bytes(bytes::Bytes::from_static(b"x"))),
                "bytes header",
            ),
            (header(HeaderValue::Array(vec![])), "array header"),
        ] {
            let e = java_hash(&key).unwrap_err().to_string();
            assert!(e.contains(what), "{key:?}: {e}");
        }
    }

    #[test]
    fn one_partition_takes_everything() {
        assert_eq!(partition_of(12345, 1), 0);
        assert_eq!(partition_of(-7, 0), 0);
    }
}
