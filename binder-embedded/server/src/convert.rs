//! The engine's messages and field tables to and from amq-protocol's types.
//!
//! Every field type round-trips, with two conversions the engine's types force: a long
//! string that is not UTF-8 becomes a byte array (`x`), and a short string value (which only
//! a non-RabbitMQ client sends) becomes a long string. The deprecated `cluster-id` property
//! has no place in the engine's message and is dropped, as RabbitMQ 3.8+ drops it too.

use std::sync::Arc;

use amq_protocol::protocol::BasicProperties;
use amq_protocol::types::{
    AMQPValue, ByteArray, DecimalValue, FieldArray, FieldTable as WireTable, LongString,
    ShortString,
};
use bytes::Bytes;
use stream_engine::{Decimal, FieldTable, FieldValue, Message, Properties};

/// A short string, truncated at a character boundary to AMQP's 255-byte limit (names and
/// texts the engine makes can be longer; the wire cannot carry more).
pub fn short(s: &str) -> ShortString {
    let mut end = s.len().min(255);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    ShortString::from(&s[..end])
}

/// A wire value as an engine value.
pub fn value_from_wire(value: &AMQPValue) -> FieldValue {
    match value {
        AMQPValue::Void => FieldValue::Void,
        AMQPValue::Boolean(v) => FieldValue::Bool(*v),
        AMQPValue::ShortShortInt(v) => FieldValue::I8(*v),
        AMQPValue::ShortShortUInt(v) => FieldValue::U8(*v),
        AMQPValue::ShortInt(v) => FieldValue::I16(*v),
        AMQPValue::ShortUInt(v) => FieldValue::U16(*v),
        AMQPValue::LongInt(v) => FieldValue::I32(*v),
        AMQPValue::LongUInt(v) => FieldValue::U32(*v),
        AMQPValue::LongLongInt(v) => FieldValue::I64(*v),
        AMQPValue::Float(v) => FieldValue::F32(*v),
        AMQPValue::Double(v) => FieldValue::F64(*v),
        AMQPValue::DecimalValue(d) => FieldValue::Decimal(Decimal {
            scale: d.scale,
            value: d.value as i32,
        }),
        AMQPValue::ShortString(s) => FieldValue::String(s.as_str().to_owned()),
        AMQPValue::LongString(s) => match std::str::from_utf8(s.as_bytes()) {
            Ok(text) => FieldValue::String(text.to_owned()),
            Err(_) => FieldValue::Bytes(Bytes::copy_from_slice(s.as_bytes())),
        },
        AMQPValue::ByteArray(b) => FieldValue::Bytes(Bytes::copy_from_slice(b.as_slice())),
        AMQPValue::Timestamp(t) => FieldValue::Timestamp(*t),
        AMQPValue::FieldArray(items) => {
            FieldValue::Array(items.as_slice().iter().map(value_from_wire).collect())
        }
        AMQPValue::FieldTable(t) => FieldValue::Table(table_from_wire(t)),
    }
}

/// An engine value as a wire value.
pub fn value_to_wire(value: &FieldValue) -> AMQPValue {
    match value {
        FieldValue::Void => AMQPValue::Void,
        FieldValue::Bool(v) => AMQPValue::Boolean(*v),
        FieldValue::I8(v) => AMQPValue::ShortShortInt(*v),
        FieldValue::U8(v) => AMQPValue::ShortShortUInt(*v),
        FieldValue::I16(v) => AMQPValue::ShortInt(*v),
        FieldValue::U16(v) => AMQPValue::ShortUInt(*v),
        FieldValue::I32(v) => AMQPValue::LongInt(*v),
        FieldValue::U32(v) => AMQPValue::LongUInt(*v),
        FieldValue::I64(v) => AMQPValue::LongLongInt(*v),
        FieldValue::F32(v) => AMQPValue::Float(*v),
        FieldValue::F64(v) => AMQPValue::Double(*v),
        FieldValue::Decimal(d) => AMQPValue::DecimalValue(DecimalValue {
            scale: d.scale,
            value: d.value as u32,
        }),
        FieldValue::String(s) => AMQPValue::LongString(LongString::from(s.as_bytes().to_vec())),
        FieldValue::Bytes(b) => AMQPValue::ByteArray(ByteArray::from(b.to_vec())),
        FieldValue::Timestamp(t) => AMQPValue::Timestamp(*t),
        FieldValue::Array(items) => AMQPValue::FieldArray(FieldArray::from(
            items.iter().map(value_to_wire).collect::<Vec<_>>(),
        )),
        FieldValue::Table(t) => AMQPValue::FieldTable(table_to_wire(t)),
    }
}

/// A wire table as an engine table.
pub fn table_from_wire(table: &WireTable) -> FieldTable {
    table
        .inner()
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), value_from_wire(v)))
        .collect()
}

/// An engine table as a wire table (names longer than 255 bytes are truncated).
pub fn table_to_wire(table: &FieldTable) -> WireTable {
    let mut out = WireTable::default();
    for (k, v) in table {
        out.insert(short(k), value_to_wire(v));
    }
    out
}

/// A published message from its content header's properties and its body.
pub fn message_from_wire(properties: &BasicProperties, payload: Bytes) -> Message {
    let s = |v: &Option<ShortString>| v.as_ref().map(|v| v.as_str().to_owned());
    let headers = properties
        .headers()
        .as_ref()
        .map(table_from_wire)
        .unwrap_or_default();
    Message {
        payload,
        headers,
        properties: Properties {
            content_type: properties
                .content_type()
                .as_ref()
                .map(|v| Arc::<str>::from(v.as_str())),
            content_encoding: s(properties.content_encoding()),
            correlation_id: s(properties.correlation_id()),
            message_id: s(properties.message_id()),
            reply_to: s(properties.reply_to()),
            expiration: s(properties.expiration()),
            timestamp: *properties.timestamp(),
            kind: s(properties.kind()),
            user_id: s(properties.user_id()),
            app_id: s(properties.app_id()),
            delivery_mode: *properties.delivery_mode(),
            priority: *properties.priority(),
        }
        .into(),
    }
}

/// A message's properties (headers included) for its content header.
pub fn properties_to_wire(message: &Message) -> BasicProperties {
    let p = &message.properties;
    let mut out = BasicProperties::default();
    if let Some(v) = &p.content_type {
        out = out.with_content_type(short(v));
    }
    if let Some(v) = &p.content_encoding {
        out = out.with_content_encoding(short(v));
    }
    if !message.headers.is_empty() {
        out = out.with_headers(table_to_wire(&message.headers));
    }
    if let Some(v) = p.delivery_mode {
        out = out.with_delivery_mode(v);
    }
    if let Some(v) = p.priority {
        out = out.with_priority(v);
    }
    if let Some(v) = &p.correlation_id {
        out = out.with_correlation_id(short(v));
    }
    if let Some(v) = &p.reply_to {
        out = out.with_reply_to(short(v));
    }
    if let Some(v) = &p.expiration {
        out = out.with_expiration(short(v));
    }
    if let Some(v) = &p.message_id {
        out = out.with_message_id(short(v));
    }
    if let Some(v) = p.timestamp {
        out = out.with_timestamp(v);
    }
    if let Some(v) = &p.kind {
        out = out.with_type(short(v));
    }
    if let Some(v) = &p.user_id {
        out = out.with_user_id(short(v));
    }
    if let Some(v) = &p.app_id {
        out = out.with_app_id(short(v));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_type_round_trips() {
        let inner: FieldTable = [("n", FieldValue::I32(-1))].into_iter().collect();
        let table: FieldTable = [
            ("void", FieldValue::Void),
            ("bool", FieldValue::Bool(true)),
            ("i8", FieldValue::I8(-8)),
            ("u8", FieldValue::U8(8)),
            ("i16", FieldValue::I16(-16)),
            ("u16", FieldValue::U16(16)),
            ("i32", FieldValue::I32(-32)),
            ("u32", FieldValue::U32(32)),
            ("i64", FieldValue::I64(-64)),
            ("f32", FieldValue::F32(1.5)),
            ("f64", FieldValue::F64(2.5)),
            (
                "dec",
                FieldValue::Decimal(Decimal {
                    scale: 2,
                    value: -5,
                }),
            ),
            ("s", FieldValue::String("text".into())),
            ("x", FieldValue::Bytes(Bytes::from_static(b"\xff\x00"))),
            ("t", FieldValue::Timestamp(7)),
            ("a", FieldValue::Array(vec![FieldValue::U8(1), "b".into()])),
            ("tab", FieldValue::Table(inner)),
        ]
        .into_iter()
        .collect();
        assert_eq!(table_from_wire(&table_to_wire(&table)), table);
    }

    #[test]
    fn properties_round_trip() {
        let message = Message::new("body")
            .with_header("h", "v")
            .with_properties(Properties {
                content_type: Some("application/json".into()),
                content_encoding: Some("gzip".into()),
                correlation_id: Some("c".into()),
                message_id: Some("m".into()),
                reply_to: Some("r".into()),
                expiration: Some("100".into()),
                timestamp: Some(9),
                kind: Some("k".into()),
                user_id: Some("u".into()),
                app_id: Some("a".into()),
                delivery_mode: Some(2),
                priority: Some(3),
            });
        let back = message_from_wire(&properties_to_wire(&message), message.payload.clone());
        assert_eq!(back, message);
    }

    #[test]
    fn long_names_are_truncated_on_char_boundaries() {
        let long = "é".repeat(200);
        let s = short(&long);
        assert_eq!(s.as_str().len(), 254);
    }
}
