//! The engine's values in the management API's JSON, as RabbitMQ's management plugin
//! renders them: field tables as objects, message properties by their AMQP names, payloads
//! as strings or base64; and JSON back to field tables and properties for `publish`.

use std::sync::Arc;

use base64::Engine as _;
use serde_json::{Map, Value, json};
use stream_engine::{FieldTable, FieldValue, Message, Properties};

/// A field value as JSON: numbers as numbers, strings and UTF-8 byte strings as strings
/// (other bytes base64), timestamps as seconds, arrays and tables nested.
pub(crate) fn field(value: &FieldValue) -> Value {
    match value {
        FieldValue::Void => Value::Null,
        FieldValue::Bool(b) => json!(b),
        FieldValue::I8(n) => json!(n),
        FieldValue::U8(n) => json!(n),
        FieldValue::I16(n) => json!(n),
        FieldValue::U16(n) => json!(n),
        FieldValue::I32(n) => json!(n),
        FieldValue::U32(n) => json!(n),
        FieldValue::I64(n) => json!(n),
        FieldValue::F32(n) => json!(n),
        FieldValue::F64(n) => json!(n),
        FieldValue::Decimal(d) => json!(d.to_string()),
        FieldValue::String(s) => json!(s),
        FieldValue::Bytes(b) => match std::str::from_utf8(b) {
            Ok(s) => json!(s),
            Err(_) => json!(base64::engine::general_purpose::STANDARD.encode(b)),
        },
        FieldValue::Timestamp(t) => json!(t),
        FieldValue::Array(items) => Value::Array(items.iter().map(field).collect()),
        FieldValue::Table(t) => table(t),
    }
}

/// A field table as a JSON object.
pub(crate) fn table(table: &FieldTable) -> Value {
    let mut out = Map::new();
    for (name, value) in table {
        out.insert(name.as_str().to_owned(), field(value));
    }
    Value::Object(out)
}

/// JSON as a field value: integers as `l` (64-bit), other numbers as `d`, strings as `S`.
pub(crate) fn to_field(value: &Value) -> FieldValue {
    match value {
        Value::Null => FieldValue::Void,
        Value::Bool(b) => FieldValue::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => FieldValue::I64(i),
            None => FieldValue::F64(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => FieldValue::String(s.clone()),
        Value::Array(items) => FieldValue::Array(items.iter().map(to_field).collect()),
        Value::Object(map) => FieldValue::Table(to_table(map)),
    }
}

/// A JSON object as a field table.
pub(crate) fn to_table(map: &Map<String, Value>) -> FieldTable {
    let mut out = FieldTable::new();
    for (name, value) in map {
        out.insert(name.clone(), to_field(value));
    }
    out
}

/// A message's properties and headers as RabbitMQ's `properties` object (only those set).
pub(crate) fn properties(message: &Message) -> Value {
    let p = &message.properties;
    let mut out = Map::new();
    let mut put = |k: &str, v: Value| {
        out.insert(k.to_owned(), v);
    };
    if let Some(v) = &p.content_type {
        put("content_type", json!(&**v));
    }
    if let Some(v) = &p.content_encoding {
        put("content_encoding", json!(v));
    }
    if let Some(v) = p.priority {
        put("priority", json!(v));
    }
    if let Some(v) = &p.correlation_id {
        put("correlation_id", json!(v));
    }
    if let Some(v) = &p.reply_to {
        put("reply_to", json!(v));
    }
    if let Some(v) = &p.expiration {
        put("expiration", json!(v));
    }
    if let Some(v) = &p.message_id {
        put("message_id", json!(v));
    }
    if let Some(v) = p.timestamp {
        put("timestamp", json!(v));
    }
    if let Some(v) = &p.kind {
        put("type", json!(v));
    }
    if let Some(v) = &p.user_id {
        put("user_id", json!(v));
    }
    if let Some(v) = &p.app_id {
        put("app_id", json!(v));
    }
    if let Some(v) = p.delivery_mode {
        put("delivery_mode", json!(v));
    }
    if !message.headers.is_empty() {
        put("headers", table(&message.headers));
    }
    Value::Object(out)
}

/// A bad `properties` object in a publish.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct BadProperties(String);

/// RabbitMQ's `properties` object back to properties and headers; unknown keys are
/// refused by name.
pub(crate) fn to_properties(
    value: &Map<String, Value>,
) -> Result<(Properties, FieldTable), BadProperties> {
    let mut p = Properties::default();
    let mut headers = FieldTable::new();
    let text = |k: &str, v: &Value| -> Result<String, BadProperties> {
        v.as_str()
            .map(str::to_owned)
            .ok_or_else(|| BadProperties(format!("property '{k}' must be a string")))
    };
    let small = |k: &str, v: &Value| -> Result<u8, BadProperties> {
        v.as_u64()
            .and_then(|n| u8::try_from(n).ok())
            .ok_or_else(|| BadProperties(format!("property '{k}' must be an integer 0-255")))
    };
    for (k, v) in value {
        match k.as_str() {
            "content_type" => p.content_type = Some(Arc::from(text(k, v)?)),
            "content_encoding" => p.content_encoding = Some(text(k, v)?),
            "priority" => p.priority = Some(small(k, v)?),
            "correlation_id" => p.correlation_id = Some(text(k, v)?),
            "reply_to" => p.reply_to = Some(text(k, v)?),
            "expiration" => p.expiration = Some(text(k, v)?),
            "message_id" => p.message_id = Some(text(k, v)?),
            "timestamp" => {
                p.timestamp = Some(v.as_u64().ok_or_else(|| {
                    BadProperties("property 'timestamp' must be a non-negative integer".into())
                })?)
            }
            "type" => p.kind = Some(text(k, v)?),
            "user_id" => p.user_id = Some(text(k, v)?),
            "app_id" => p.app_id = Some(text(k, v)?),
            "delivery_mode" => p.delivery_mode = Some(small(k, v)?),
            "headers" => match v {
                Value::Object(map) => headers = to_table(map),
                _ => return Err(BadProperties("property 'headers' must be an object".into())),
            },
            other => return Err(BadProperties(format!("unknown property '{other}'"))),
        }
    }
    Ok((p, headers))
}

/// A payload as RabbitMQ's `get` returns it: `auto` gives a string when the (possibly
/// truncated) bytes are UTF-8, base64 otherwise; `base64` always base64.
pub(crate) fn payload(bytes: &[u8], always_base64: bool) -> (Value, &'static str) {
    match std::str::from_utf8(bytes) {
        Ok(s) if !always_base64 => (json!(s), "string"),
        _ => (
            json!(base64::engine::general_purpose::STANDARD.encode(bytes)),
            "base64",
        ),
    }
}

/// A body's boolean: `true` or `false`, or the strings `"true"` and `"false"` (which
/// `rabbitmqadmin` sends, and RabbitMQ takes).
pub(crate) fn as_bool(value: &Value) -> Option<bool> {
    match value {
        Value::Bool(b) => Some(*b),
        Value::String(s) if s == "true" => Some(true),
        Value::String(s) if s == "false" => Some(false),
        _ => None,
    }
}

/// A body's non-negative integer: a number, or a string of digits (`rabbitmqadmin` sends
/// `"count": "1"`).
pub(crate) fn as_u64(value: &Value) -> Option<u64> {
    match value {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_round_trip_through_json() {
        let mut death = FieldTable::new();
        death.insert("count", FieldValue::I64(2));
        death.insert("queue", FieldValue::String("q".into()));
        death.insert(
            "routing-keys",
            FieldValue::Array(vec![FieldValue::String("k".into())]),
        );
        let mut headers = FieldTable::new();
        headers.insert("x-death", FieldValue::Array(vec![FieldValue::Table(death)]));
        let v = table(&headers);
        assert_eq!(
            v,
            json!({"x-death": [{"count": 2, "queue": "q", "routing-keys": ["k"]}]})
        );
        assert_eq!(to_table(v.as_object().unwrap()), headers);
    }

    #[test]
    fn properties_use_rabbitmqs_names_and_refuse_unknown_ones() {
        let m = Message::new("x")
            .with_content_type("text/plain")
            .with_header("a", "b");
        let v = properties(&m);
        assert_eq!(
            v,
            json!({"content_type": "text/plain", "headers": {"a": "b"}})
        );
        let (p, h) = to_properties(v.as_object().unwrap()).unwrap();
        assert_eq!(p.content_type.as_deref(), Some("text/plain"));
        assert_eq!(h, m.headers);
        let e = to_properties(json!({"colour": 1}).as_object().unwrap()).unwrap_err();
        assert_eq!(e.to_string(), "unknown property 'colour'");
    }

    #[test]
    fn payloads_are_strings_when_utf8() {
        assert_eq!(payload(b"hi", false), (json!("hi"), "string"));
        assert_eq!(payload(b"hi", true), (json!("aGk="), "base64"));
        assert_eq!(payload(&[0xff], false), (json!("/w=="), "base64"));
    }

    #[test]
    fn booleans_and_counts_may_come_as_strings() {
        assert_eq!(as_bool(&json!("true")), Some(true));
        assert_eq!(as_bool(&json!(false)), Some(false));
        assert_eq!(as_bool(&json!("yes")), None);
        assert_eq!(as_u64(&json!("12")), Some(12));
        assert_eq!(as_u64(&json!(3)), Some(3));
        assert_eq!(as_u64(&json!("-1")), None);
    }
}
