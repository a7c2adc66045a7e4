//! The framework's envelope: the engine holds the framework's own records.
//!
//! The engine (`stream-engine`) knows nothing of the framework; it is generic over an
//! [`Envelope`](stream_engine::Envelope), the type of record its queues share. The `embedded`
//! binder runs it with [`Framework`], whose record is binder-core's [`Published`]: a publish
//! moves the framework's [`Message`] into the record the queues share, and a delivery hands
//! the runtime that very record (`Inbound::content`), so the hot path converts and copies
//! nothing. The engine converts a record to its own types only where it rewrites or inspects
//! headers (dead-lettering, headers exchanges), at the store seam and for network clients
//! (`spring.embedded.listen`); those conversions, and the arguments of declarations, are here.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::mem::size_of;
use std::sync::Arc;
use std::time::Duration;

use binder_amqp::ExchangeType;
use binder_core::binder::{Published, Route};
use binder_core::message::{
    Decimal, DeliveryMode, HeaderValue, Headers, Message, Properties, SharedProperties,
};
use stream_engine as engine;
use stream_engine::memory::{block, btree_nodes, shared_str};

/// The envelope of the `embedded` binder's broker: records are binder-core's [`Published`],
/// messages its [`Message`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Framework;

impl engine::Envelope for Framework {
    type Message = Message;
    type Record = Published;
    type Route = Route;

    #[inline]
    fn seal(message: Message, route: Route) -> Arc<Published> {
        Arc::new(Published { route, message })
    }

    #[inline]
    fn new_route(exchange: Arc<str>, routing_key: Arc<str>) -> Route {
        Route::new(exchange, routing_key)
    }

    #[inline]
    fn is_route(route: &Route, exchange: &str, routing_key: &str) -> bool {
        route.is(exchange, routing_key)
    }

    #[inline]
    fn route_holders(record: &Published) -> usize {
        record.route.holders()
    }

    #[inline]
    fn set_route(record: &mut Published, route: Route) {
        record.route = route;
    }

    #[inline]
    fn message(record: &Published) -> &Message {
        &record.message
    }

    #[inline]
    fn exchange(record: &Published) -> &Arc<str> {
        record.route.exchange()
    }

    #[inline]
    fn routing_key(record: &Published) -> &Arc<str> {
        record.route.routing_key()
    }

    #[inline]
    fn payload_len(record: &Published) -> usize {
        record.message.payload.len()
    }

    #[inline]
    fn priority(record: &Published) -> Option<u8> {
        record.message.properties.priority
    }

    #[inline]
    fn expiration(record: &Published) -> Option<Duration> {
        record.message.properties.expiration_duration()
    }

    #[inline]
    fn persistent(record: &Published) -> bool {
        record.message.properties.delivery_mode == Some(DeliveryMode::Persistent)
    }

    #[inline]
    fn headers(record: &Published) -> Cow<'_, engine::FieldTable> {
        Cow::Owned(table_to_engine(record.message.headers.clone()))
    }

    #[inline]
    fn message_heap(record: &Published) -> usize {
        let m = &record.message;
        block(m.payload.len()) + headers_heap(&m.headers) + properties_heap(&m.properties)
    }

    #[inline]
    fn to_native(record: &Published) -> engine::Published {
        engine::Published::new(
            record.exchange().clone(),
            record.routing_key().clone(),
            to_engine(record.message.clone()),
        )
    }

    #[inline]
    fn into_native(record: Arc<Published>) -> engine::Published {
        let record = Arc::unwrap_or_clone(record);
        engine::Published::new(
            record.exchange().clone(),
            record.routing_key().clone(),
            to_engine(record.message),
        )
    }

    #[inline]
    fn from_native(published: engine::Published) -> Published {
        Published::new(
            published.exchange().clone(),
            published.routing_key().clone(),
            to_framework(published.message),
        )
    }
}

/// The in-process broker served on the network (`spring.embedded.listen`): a message a
/// client publishes becomes a framework message, and a record is encoded from the engine's
/// types (a delivery to a network client converts; one in process does not).
impl stream_broker::WireEnvelope for Framework {
    fn from_wire(message: engine::Message) -> Message {
        to_framework(message)
    }

    fn to_wire(record: &Published) -> Cow<'_, engine::Message> {
        Cow::Owned(to_engine(record.message.clone()))
    }
}

/// The properties' allocation and its strings, unless other messages share it (the
/// properties an output gives every message it sends: they are none of them's to count).
fn properties_heap(p: &SharedProperties) -> usize {
    if !p.is_allocated() || p.is_shared() {
        return 0;
    }
    let strings = [
        &p.content_encoding,
        &p.correlation_id,
        &p.message_id,
        &p.reply_to,
        &p.expiration,
        &p.kind,
        &p.user_id,
        &p.app_id,
    ];
    block(2 * size_of::<usize>() + size_of::<Properties>())
        + shared_str(p.content_type.as_ref())
        + strings
            .iter()
            .map(|s| s.as_ref().map_or(0, |s| block(s.len())))
            .sum::<usize>()
}

/// A header map's box, nodes and the blocks of its names and values (nothing when it is
/// empty), as the engine counts a field table.
fn headers_heap(h: &Headers) -> usize {
    if !h.is_allocated() {
        return 0;
    }
    block(size_of::<BTreeMap<String, HeaderValue>>())
        + btree_nodes(h.len(), size_of::<String>() + size_of::<HeaderValue>())
        + h.iter()
            .map(|(name, value)| block(name.len()) + value_heap(value))
            .sum::<usize>()
}

fn value_heap(v: &HeaderValue) -> usize {
    match v {
        HeaderValue::String(s) => block(s.len()),
        HeaderValue::Bytes(b) => block(b.len()),
        HeaderValue::Array(items) => {
            block(items.len() * size_of::<HeaderValue>())
                + items.iter().map(value_heap).sum::<usize>()
        }
        HeaderValue::Table(t) => headers_heap(t),
        _ => 0,
    }
}

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
fn to_engine(message: Message) -> engine::Message {
    let Message {
        payload,
        headers,
        properties,
    } = message;
    let p = properties.into_inner();
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
        }
        .into(),
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

/// An engine message moved into the framework's type (the payload is moved, not copied).
fn to_framework(message: engine::Message) -> Message {
    let engine::Message {
        payload,
        headers,
        properties,
    } = message;
    let p = properties.into_inner();
    Message {
        payload,
        headers: table_to_framework(headers),
        properties: Properties {
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
            delivery_mode: p.delivery_mode.map(DeliveryMode::from_u8),
            priority: p.priority,
        }
        .into(),
    }
}

/// Framework headers from a field table (entries moved).
fn table_to_framework(table: engine::FieldTable) -> Headers {
    if table.is_empty() {
        return Headers::new();
    }
    table
        .into_iter()
        .map(|(name, value)| (name, value_to_framework(value)))
        .collect()
}

fn value_to_framework(v: engine::FieldValue) -> HeaderValue {
    use engine::FieldValue as F;
    match v {
        F::Void => HeaderValue::Void,
        F::Bool(v) => HeaderValue::Bool(v),
        F::I8(v) => HeaderValue::I8(v),
        F::U8(v) => HeaderValue::U8(v),
        F::I16(v) => HeaderValue::I16(v),
        F::U16(v) => HeaderValue::U16(v),
        F::I32(v) => HeaderValue::I32(v),
        F::U32(v) => HeaderValue::U32(v),
        F::I64(v) => HeaderValue::I64(v),
        F::F32(v) => HeaderValue::F32(v),
        F::F64(v) => HeaderValue::F64(v),
        F::Decimal(d) => HeaderValue::Decimal(Decimal {
            scale: d.scale,
            value: d.value,
        }),
        F::String(v) => HeaderValue::String(v),
        F::Bytes(v) => HeaderValue::Bytes(v),
        F::Timestamp(v) => HeaderValue::Timestamp(v),
        F::Array(items) => HeaderValue::Array(items.into_iter().map(value_to_framework).collect()),
        F::Table(t) => HeaderValue::Table(table_to_framework(t)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stream_engine::Envelope;

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
    fn a_message_survives_the_round_trip_through_the_engines_types_with_every_field_type() {
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
        let published = engine::Published::new("x", "k", engine_message);
        let back = Framework::from_native(published);
        assert_eq!(back.message, original);
        assert_eq!(&**back.exchange(), "x");
        assert_eq!(&**back.routing_key(), "k");
        assert_eq!(back.message.payload.as_ptr(), payload_at);
        assert_eq!(Framework::to_native(&back).message.headers.len(), 17);
    }

    #[test]
    fn a_record_counts_its_own_headers_and_properties_and_not_shared_ones() {
        assert_eq!(size_of::<Message>(), 48, "payload, and a pointer each");
        assert_eq!(
            size_of::<Published>(),
            56,
            "the message and one route pointer"
        );
        let record = |message: Message| Published::new("", "q", message);
        let bare = Framework::message_heap(&record(Message::new(vec![0u8; 100])));
        assert_eq!(bare, block(100), "nothing but the payload");
        let output: SharedProperties = Properties {
            content_type: Some("application/json".into()),
            delivery_mode: Some(DeliveryMode::Persistent),
            ..Properties::default()
        }
        .into();
        let shared = record(Message::new(vec![0u8; 100]).with_properties(output.clone()));
        assert_eq!(
            Framework::message_heap(&shared),
            bare,
            "properties shared with the output count nothing"
        );
        drop(output);
        let own_properties = block(16 + size_of::<Properties>()) + block(16 + 16);
        assert_eq!(
            Framework::message_heap(&shared),
            bare + own_properties,
            "the last holder counts them, and its content type"
        );
        let mut with_id = Message::new(vec![0u8; 100]);
        with_id.properties.message_id = Some("m".repeat(40));
        assert_eq!(
            Framework::message_heap(&record(with_id)),
            bare + block(16 + size_of::<Properties>()) + block(40)
        );
        let one =
            Framework::message_heap(&record(Message::new(vec![0u8; 100]).with_header("k", "v")));
        assert_eq!(
            one - bare,
            block(24)
                + btree_nodes(1, size_of::<String>() + size_of::<HeaderValue>())
                + 2 * block(1)
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
