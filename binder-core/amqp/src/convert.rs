//! Between the framework's message model and AMQP 0-9-1's properties and field tables (the
//! `amq-protocol` types lapin speaks), losing nothing: every field type round-trips, text
//! stays text and bytes stay bytes, decimals keep their sign.

use amq_protocol::protocol::BasicProperties;
use amq_protocol::types::{
    AMQPValue, ByteArray, DecimalValue, FieldArray, FieldTable, LongString, ShortString,
};
use binder_core::message::{
    Decimal, DeliveryMode, HeaderValue, Headers, Message, Properties, SharedProperties,
};
use bytes::Bytes;

use crate::recent::Recent;

/// A header value as an AMQP field value.
pub fn to_amqp(value: &HeaderValue) -> AMQPValue {
    match value {
        HeaderValue::Void => AMQPValue::Void,
        HeaderValue::Bool(v) => AMQPValue::Boolean(*v),
        HeaderValue::I8(v) => AMQPValue::ShortShortInt(*v),
        HeaderValue::U8(v) => AMQPValue::ShortShortUInt(*v),
        HeaderValue::I16(v) => AMQPValue::ShortInt(*v),
        HeaderValue::U16(v) => AMQPValue::ShortUInt(*v),
        HeaderValue::I32(v) => AMQPValue::LongInt(*v),
        HeaderValue::U32(v) => AMQPValue::LongUInt(*v),
        HeaderValue::I64(v) => AMQPValue::LongLongInt(*v),
        HeaderValue::F32(v) => AMQPValue::Float(*v),
        HeaderValue::F64(v) => AMQPValue::Double(*v),
        // amq-protocol holds the unscaled value as the u32 it reads off the wire; AMQP (and
        // the Java client, pika and RabbitMQ) mean a signed 32-bit value: same bits.
        HeaderValue::Decimal(d) => AMQPValue::DecimalValue(DecimalValue {
            scale: d.scale,
            value: d.value as u32,
        }),
        HeaderValue::String(s) => AMQPValue::LongString(LongString::from(s.as_bytes().to_vec())),
        HeaderValue::Bytes(b) => AMQPValue::ByteArray(ByteArray::from(b.to_vec())),
        HeaderValue::Timestamp(t) => AMQPValue::Timestamp(*t),
        HeaderValue::Array(items) => AMQPValue::FieldArray(FieldArray::from(
            items.iter().map(to_amqp).collect::<Vec<_>>(),
        )),
        HeaderValue::Table(t) => AMQPValue::FieldTable(to_table(t)),
    }
}

/// An AMQP field value as a header value (long strings that are UTF-8 become text).
pub fn from_amqp(value: &AMQPValue) -> HeaderValue {
    match value {
        AMQPValue::Void => HeaderValue::Void,
        AMQPValue::Boolean(v) => HeaderValue::Bool(*v),
        AMQPValue::ShortShortInt(v) => HeaderValue::I8(*v),
        AMQPValue::ShortShortUInt(v) => HeaderValue::U8(*v),
        AMQPValue::ShortInt(v) => HeaderValue::I16(*v),
        AMQPValue::ShortUInt(v) => HeaderValue::U16(*v),
        AMQPValue::LongInt(v) => HeaderValue::I32(*v),
        AMQPValue::LongUInt(v) => HeaderValue::U32(*v),
        AMQPValue::LongLongInt(v) => HeaderValue::I64(*v),
        AMQPValue::Float(v) => HeaderValue::F32(*v),
        AMQPValue::Double(v) => HeaderValue::F64(*v),
        AMQPValue::DecimalValue(d) => HeaderValue::Decimal(Decimal {
            scale: d.scale,
            value: d.value as i32,
        }),
        AMQPValue::ShortString(s) => HeaderValue::String(s.as_str().to_owned()),
        // Long strings are bytes on the wire; text stays text, anything else stays bytes.
        AMQPValue::LongString(s) => match std::str::from_utf8(s.as_bytes()) {
            Ok(text) => HeaderValue::String(text.to_owned()),
            Err(_) => HeaderValue::Bytes(Bytes::copy_from_slice(s.as_bytes())),
        },
        AMQPValue::ByteArray(b) => HeaderValue::Bytes(Bytes::copy_from_slice(b.as_slice())),
        AMQPValue::Timestamp(t) => HeaderValue::Timestamp(*t),
        AMQPValue::FieldArray(items) => {
            HeaderValue::Array(items.as_slice().iter().map(from_amqp).collect())
        }
        AMQPValue::FieldTable(t) => HeaderValue::Table(from_table(t)),
    }
}

/// Headers as an AMQP field table.
pub fn to_table(headers: &Headers) -> FieldTable {
    let mut table = FieldTable::default();
    for (k, v) in headers {
        table.insert(ShortString::from(k.as_str()), to_amqp(v));
    }
    table
}

/// An AMQP field table as headers.
pub fn from_table(table: &FieldTable) -> Headers {
    table
        .inner()
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), from_amqp(v)))
        .collect()
}

fn short<S: std::ops::Deref<Target = str>>(s: &Option<S>) -> Option<ShortString> {
    s.as_deref().map(ShortString::from)
}

/// The AMQP properties of a message (headers included).
pub fn properties(message: &Message) -> BasicProperties {
    let p = &message.properties;
    let mut props = BasicProperties::default();
    if let Some(v) = short(&p.content_type) {
        props = props.with_content_type(v);
    }
    if let Some(v) = short(&p.content_encoding) {
        props = props.with_content_encoding(v);
    }
    if !message.headers.is_empty() {
        props = props.with_headers(to_table(&message.headers));
    }
    if let Some(v) = p.delivery_mode {
        props = props.with_delivery_mode(v.as_u8());
    }
    if let Some(v) = p.priority {
        props = props.with_priority(v);
    }
    if let Some(v) = short(&p.correlation_id) {
        props = props.with_correlation_id(v);
    }
    if let Some(v) = short(&p.reply_to) {
        props = props.with_reply_to(v);
    }
    if let Some(v) = short(&p.expiration) {
        props = props.with_expiration(v);
    }
    if let Some(v) = short(&p.message_id) {
        props = props.with_message_id(v);
    }
    if let Some(v) = p.timestamp {
        props = props.with_timestamp(v);
    }
    if let Some(v) = short(&p.kind) {
        props = props.with_type(v);
    }
    if let Some(v) = short(&p.user_id) {
        props = props.with_user_id(v);
    }
    if let Some(v) = short(&p.app_id) {
        props = props.with_app_id(v);
    }
    props
}

fn text(s: &Option<ShortString>) -> Option<String> {
    s.as_ref().map(|v| v.as_str().to_owned())
}

/// A message from a delivery's payload and properties.
pub fn message(payload: Vec<u8>, props: &BasicProperties) -> Message {
    message_sharing(payload, props, &mut Recent::default())
}

/// A message from a delivery's payload and properties, sharing the properties of the
/// delivery before when they are the same (see [`Recent::properties`]).
pub fn message_sharing(payload: Vec<u8>, props: &BasicProperties, recent: &mut Recent) -> Message {
    Message {
        payload: Bytes::from(payload),
        headers: props.headers().as_ref().map(from_table).unwrap_or_default(),
        properties: recent.properties(props),
    }
}

/// A delivery's properties as a message's (its headers apart).
pub fn properties_of(props: &BasicProperties) -> SharedProperties {
    Properties {
        content_type: props.content_type().as_ref().map(|v| v.as_str().into()),
        content_encoding: text(props.content_encoding()),
        correlation_id: text(props.correlation_id()),
        message_id: text(props.message_id()),
        reply_to: text(props.reply_to()),
        expiration: text(props.expiration()),
        timestamp: *props.timestamp(),
        kind: text(props.kind()),
        user_id: text(props.user_id()),
        app_id: text(props.app_id()),
        delivery_mode: props.delivery_mode().map(DeliveryMode::from_u8),
        priority: *props.priority(),
    }
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every property set.
    fn every_property() -> Properties {
        Properties {
            content_type: Some("application/json".into()),
            content_encoding: Some("gzip".into()),
            correlation_id: Some("c".into()),
            message_id: Some("m".into()),
            reply_to: Some("r".into()),
            expiration: Some("100".into()),
            timestamp: Some(5),
            kind: Some("t".into()),
            user_id: Some("guest".into()),
            app_id: Some("a".into()),
            delivery_mode: Some(DeliveryMode::NonPersistent),
            priority: Some(4),
        }
    }

    /// One header of every AMQP field type, nested tables and arrays included.
    fn every_type() -> Headers {
        let nested: Headers = [
            ("n", HeaderValue::I32(1)),
            (
                "deep",
                HeaderValue::Array(vec![HeaderValue::from("x"), HeaderValue::Void]),
            ),
        ]
        .into_iter()
        .collect();
        [
            ("a", HeaderValue::Bool(true)),
            ("b", HeaderValue::I8(-1)),
            ("c", HeaderValue::U8(2)),
            ("d", HeaderValue::I16(-3)),
            ("e", HeaderValue::U16(4)),
            ("f", HeaderValue::I32(-5)),
            ("g", HeaderValue::U32(6)),
            ("h", HeaderValue::I64(-7)),
            ("i", HeaderValue::F32(0.5)),
            ("j", HeaderValue::F64(0.25)),
            ("k", HeaderValue::Decimal(Decimal { scale: 1, value: 5 })),
            ("l", HeaderValue::from("text with é")),
            ("m", HeaderValue::Bytes(Bytes::from_static(&[0, 255]))),
            ("n", HeaderValue::Timestamp(9)),
            (
                "o",
                HeaderValue::Array(vec![HeaderValue::Void, HeaderValue::I64(1)]),
            ),
            ("p", HeaderValue::Table(nested)),
            ("q", HeaderValue::Void),
        ]
        .into_iter()
        .collect()
    }

    #[test]
    fn every_header_type_round_trips() {
        let headers = every_type();
        assert_eq!(from_table(&to_table(&headers)), headers);
    }

    #[test]
    fn decimals_are_signed_on_the_wire() {
        // `D`, scale 1, then the unscaled value as a big-endian signed int: -5, as the Java
        // client writes `new BigDecimal("-0.5")`.
        let wire: &[u8] = &[b'D', 1, 0xFF, 0xFF, 0xFF, 0xFB];
        let (rest, value) = amq_protocol::types::parsing::parse_value(wire).unwrap();
        assert!(rest.is_empty());
        let minus_half = HeaderValue::Decimal(Decimal {
            scale: 1,
            value: -5,
        });
        assert_eq!(from_amqp(&value), minus_half);
        assert_eq!(
            to_amqp(&minus_half),
            AMQPValue::DecimalValue(DecimalValue {
                scale: 1,
                value: 0xFFFF_FFFB
            })
        );
        for v in [i32::MIN, -1, 0, 1, i32::MAX] {
            let d = HeaderValue::Decimal(Decimal { scale: 2, value: v });
            assert_eq!(from_amqp(&to_amqp(&d)), d);
        }
    }

    #[test]
    fn properties_round_trip() {
        let mut m = Message::new("x").with_header("h", 1i32);
        m.properties = every_property().into();
        let back = message(m.payload.to_vec(), &properties(&m));
        assert_eq!(back, m);
    }

    /// The encoded size of a message's content-header frame, as amq-protocol (and lapin)
    /// writes it.
    fn wire_size(m: &Message) -> usize {
        use amq_protocol::frame::{AMQPContentHeader, AMQPFrame, WriteContext, gen_frame};
        let frame = AMQPFrame::Header(
            1,
            AMQPContentHeader {
                class_id: 60,
                body_size: m.payload.len() as u64,
                properties: properties(m),
            },
        );
        let (bytes, _) = gen_frame(&frame)(WriteContext::from(Vec::new()))
            .unwrap()
            .into_inner();
        bytes.len()
    }

    #[test]
    fn the_dead_letter_frame_arithmetic_matches_the_wire() {
        use crate::header_frame_size;
        let mut m = Message::new(vec![0u8; 300_000]);
        assert_eq!(header_frame_size(&m), wire_size(&m), "no properties");
        m.headers = every_type();
        m.headers.insert(
            "a-longer-header-name",
            HeaderValue::from("v".repeat(70_000)),
        );
        m.properties = every_property().into();
        assert_eq!(
            header_frame_size(&m),
            wire_size(&m),
            "every header and property"
        );
    }

    #[test]
    fn consecutive_deliveries_share_their_properties_but_keep_their_headers() {
        let mut m = Message::new("x").with_header("h", 1i32);
        m.properties = every_property().into();
        let wire = properties(&m);
        let mut recent = Recent::default();
        let first = message_sharing(b"1".to_vec(), &wire, &mut recent);
        let other_headers = wire
            .clone()
            .with_headers(to_table(&Message::new("y").with_header("h", 2i32).headers));
        let second = message_sharing(b"2".to_vec(), &other_headers, &mut recent);
        assert!(
            first.properties.ptr_eq(&second.properties),
            "converted once"
        );
        assert_eq!(first, message(b"1".to_vec(), &wire));
        assert_eq!(second, message(b"2".to_vec(), &other_headers));

        // Any other property differs: converted again (each case against `wire` itself).
        let cases: [fn(BasicProperties) -> BasicProperties; 12] = [
            |w| w.with_content_type("text/plain".into()),
            |w| w.with_content_encoding("br".into()),
            |w| w.with_delivery_mode(2),
            |w| w.with_priority(5),
            |w| w.with_correlation_id("other".into()),
            |w| w.with_reply_to("other".into()),
            |w| w.with_expiration("200".into()),
            |w| w.with_message_id("other".into()),
            |w| w.with_timestamp(6),
            |w| w.with_type("other".into()),
            |w| w.with_user_id("other".into()),
            |w| w.with_app_id("other".into()),
        ];
        for change in cases {
            let again = message_sharing(b"1".to_vec(), &wire, &mut recent);
            let changed = change(wire.clone());
            let other = message_sharing(b"3".to_vec(), &changed, &mut recent);
            assert!(!other.properties.ptr_eq(&again.properties), "{changed:?}");
            assert_eq!(other, message(b"3".to_vec(), &changed));
        }
    }
}
