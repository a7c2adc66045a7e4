//! The binder's edge: the framework's message model (`binder_core`) to the engine's
//! (`stream_engine`) and back.
//!
//! Both sides mirror the AMQP 0-9-1 field types and basic properties one to one, so a
//! conversion moves (publish) or shares (delivery) what it can: the payload is a `Bytes`
//! handle either way and never copied, and the content type is a shared `Arc<str>`. A
//! message without headers or string properties converts without allocating on publish;
//! a delivery costs one allocation (its `Arc<Published>` record for the runtime) and copies
//! only the headers and property strings the message has.

use std::sync::Arc;

use binder_core::binder::Published;
use binder_core::config::ExchangeType;
use binder_core::message::{Decimal, DeliveryMode, HeaderValue, Headers, Message, Properties};
use stream_engine as engine;

/// The engine's exchange kind for a configured exchange type.
pub(crate) fn exchange_kind(t: ExchangeType) -> engine::ExchangeKind {
    match t {
        ExchangeType::Direct => engine::ExchangeKind::Direct,
        ExchangeType::Fanout => engine::ExchangeKind::Fanout,
        ExchangeType::Topic => engine::ExchangeKind::Topic,
        ExchangeType::Headers => engine::ExchangeKind::Headers,
    }
}

/// A framework message moved into the engine's type (the payload is moved, not copied).
pub(crate) fn to_engine(message: Message) -> engine::Message {
    let Message {
        payload,
        headers,
        properties: p,
    } = message;
    engine::Message {
        payload,
        headers: table_to_engine(headers),
        properties: engine::Properties {
            content_type: p.content_type,
            content_encoding: p.content_encoding,
            correlation_id: p.correlation_id,
            message_id: p.message_id,
            reply_to: p.reply_to,
            expiration: p.expiration,
            timestamp: p.timestamp,
            kind: p.kind,
            user_id: p.user_id,
            app_id: p.app_id,
            delivery_mode: p.delivery_mode.map(DeliveryMode::as_u8),
            priority: p.priority,
        },
    }
}

/// A field table from framework headers (entries moved).
pub(crate) fn table_to_engine(headers: Headers) -> engine::FieldTable {
    if headers.is_empty() {
        return engine::FieldTable::new();
    }
    headers
        .into_iter()
        .map(|(name, value)| (name, value_to_engine(value)))
        .collect()
}

fn value_to_engine(v: HeaderValue) -> engine::FieldValue {
    use engine::FieldValue as F;
    match v {
        HeaderValue::Void => F::Void,
        HeaderValue::Bool(v) => F::Bool(v),
        HeaderValue::I8(v) => F::I8(v),
        HeaderValue::U8(v) => F::U8(v),
        HeaderValue::I16(v) => F::I16(v),
        HeaderValue::U16(v) => F::U16(v),
        HeaderValue::I32(v) => F::I32(v),
        HeaderValue::U32(v) => F::U32(v),
        HeaderValue::I64(v) => F::I64(v),
        HeaderValue::F32(v) => F::F32(v),
        HeaderValue::F64(v) => F::F64(v),
        HeaderValue::Decimal(d) => F::Decimal(engine::Decimal {
            scale: d.scale,
            value: d.value,
        }),
        HeaderValue::String(v) => F::String(v),
        HeaderValue::Bytes(v) => F::Bytes(v),
        HeaderValue::Timestamp(v) => F::Timestamp(v),
        HeaderValue::Array(items) => F::Array(items.into_iter().map(value_to_engine).collect()),
        HeaderValue::Table(t) => F::Table(table_to_engine(t)),
    }
}

/// The runtime's record of a delivered message: the payload and content type shared with
/// the engine's record, headers and property strings copied.
pub(crate) fn to_framework(published: &engine::Published) -> Arc<Published> {
    let m = &published.message;
    let p = &m.properties;
    Arc::new(Published {
        exchange: published.exchange.clone(),
        routing_key: published.routing_key.clone(),
        message: Message {
            payload: m.payload.clone(),
            headers: table_to_framework(&m.headers),
            properties: Properties {
                content_type: p.content_type.clone(),
                content_encoding: p.content_encoding.clone(),
                correlation_id: p.correlation_id.clone(),
                message_id: p.message_id.clone(),
                reply_to: p.reply_to.clone(),
                expiration: p.expiration.clone(),
                timestamp: p.timestamp,
                kind: p.kind.clone(),
                user_id: p.user_id.clone(),
                app_id: p.app_id.clone(),
                delivery_mode: p.delivery_mode.map(DeliveryMode::from_u8),
                priority: p.priority,
            },
        },
    })
}

/// Framework headers from a field table (copied).
pub(crate) fn table_to_framework(table: &engine::FieldTable) -> Headers {
    if table.is_empty() {
        return Headers::new();
    }
    table
        .iter()
        .map(|(name, value)| (name.clone(), value_to_framework(value)))
        .collect()
}

fn value_to_framework(v: &engine::FieldValue) -> HeaderValue {
    use engine::FieldValue as F;
    match v {
        F::Void => HeaderValue::Void,
        F::Bool(v) => HeaderValue::Bool(*v),
        F::I8(v) => HeaderValue::I8(*v),
        F::U8(v) => HeaderValue::U8(*v),
        F::I16(v) => HeaderValue::I16(*v),
        F::U16(v) => HeaderValue::U16(*v),
        F::I32(v) => HeaderValue::I32(*v),
        F::U32(v) => HeaderValue::U32(*v),
        F::I64(v) => HeaderValue::I64(*v),
        F::F32(v) => HeaderValue::F32(*v),
        F::F64(v) => HeaderValue::F64(*v),
        F::Decimal(d) => HeaderValue::Decimal(Decimal {
            scale: d.scale,
            value: d.value,
        }),
        F::String(v) => HeaderValue::String(v.clone()),
        F::Bytes(v) => HeaderValue::Bytes(v.clone()),
        F::Timestamp(v) => HeaderValue::Timestamp(*v),
        F::Array(items) => HeaderValue::Array(items.iter().map(value_to_framework).collect()),
        F::Table(t) => HeaderValue::Table(table_to_framework(t)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_type() -> Headers {
        let nested: Headers = [("n", HeaderValue::I32(1))].into_iter().collect();
        [
            ("void", HeaderValue::Void),
            ("bool", HeaderValue::Bool(true)),
            ("i8", HeaderValue::I8(-1)),
            ("u8", HeaderValue::U8(2)),
            ("i16", HeaderValue::I16(-3)),
            ("u16", HeaderValue::U16(4)),
            ("i32", HeaderValue::I32(-5)),
            ("u32", HeaderValue::U32(6)),
            ("i64", HeaderValue::I64(-7)),
            ("f32", HeaderValue::F32(1.5)),
            ("f64", HeaderValue::F64(2.5)),
            (
                "decimal",
                HeaderValue::Decimal(Decimal {
                    scale: 2,
                    value: -12345,
                }),
            ),
            ("string", HeaderValue::from("s")),
            ("bytes", HeaderValue::Bytes(bytes::Bytes::from_static(b"x"))),
            ("timestamp", HeaderValue::Timestamp(1_700_000_000)),
            (
                "array",
                HeaderValue::Array(vec![HeaderValue::from("a"), nested.clone().into()]),
            ),
            ("table", nested.into()),
        ]
        .into_iter()
        .collect()
    }

    #[test]
    fn a_message_survives_the_round_trip_through_the_engine_with_every_field_type() {
        let mut message = Message::new("payload").with_content_type("application/json");
        message.headers = every_type();
        message.properties.message_id = Some("m-1".into());
        message.properties.expiration = Some("500".into());
        message.properties.timestamp = Some(42);
        message.properties.delivery_mode = Some(DeliveryMode::NonPersistent);
        message.properties.priority = Some(7);
        let original = message.clone();
        let payload_at = message.payload.as_ptr();
        let engine_message = to_engine(message);
        assert_eq!(
            engine_message.payload.as_ptr(),
            payload_at,
            "the payload is moved, not copied"
        );
        assert_eq!(engine_message.properties.delivery_mode, Some(1));
        assert_eq!(
            engine_message.headers.get("decimal"),
            Some(&engine::FieldValue::Decimal(engine::Decimal {
                scale: 2,
                value: -12345
            }))
        );
        let published = engine::Published {
            exchange: Arc::from("x"),
            routing_key: Arc::from("k"),
            message: engine_message,
        };
        let back = to_framework(&published);
        assert_eq!(back.message, original);
        assert_eq!(&*back.exchange, "x");
        assert_eq!(&*back.routing_key, "k");
        assert_eq!(
            back.message.payload.as_ptr(),
            payload_at,
            "a delivery shares the engine's payload"
        );
    }

    #[test]
    fn every_exchange_type_maps_to_its_kind() {
        for (t, name) in [
            (ExchangeType::Direct, "direct"),
            (ExchangeType::Fanout, "fanout"),
            (ExchangeType::Topic, "topic"),
            (ExchangeType::Headers, "headers"),
        ] {
            assert_eq!(exchange_kind(t).as_str(), name);
        }
    }
}
