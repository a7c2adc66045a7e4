//! The headers of a failed message republished to its dead-letter exchange, as Spring Cloud
//! Stream's `republishToDlq` writes them, sized so that the republished message still fits
//! the connection's `frame_max`.
//!
//! AMQP carries a message's properties and headers in one content-header frame (the payload
//! follows in body frames of its own, split as needed), and a broker closes the whole
//! connection when that frame is larger than the negotiated `frame_max` (RabbitMQ's
//! `FRAME_ERROR`). So the room for `x-exception-message` and `x-exception-stacktrace` is
//! `frame_max`, less `frameMaxHeadroom`, less the encoded size of every other header and
//! property; the payload does not count.

use binder_core::message::{HeaderValue, Headers, Message};

/// Header carrying the number of attempts made before the message was dead-lettered.
pub const ATTEMPTS_HEADER: &str = "x-attempts";
const MESSAGE_HEADER: &str = "x-exception-message";
const TRACE_HEADER: &str = "x-exception-stacktrace";
const EXCHANGE_HEADER: &str = "x-original-exchange";
const ROUTING_KEY_HEADER: &str = "x-original-routingKey";

/// RabbitMQ's default `frame_max` (128 KiB). The embedded engine has no frame limit; its
/// binder reports this one, so that a message it dead-letters would also fit a RabbitMQ
/// connection with default settings.
pub const DEFAULT_FRAME_MAX: u32 = 131_072;

/// A frame's bytes around its payload: type (1), channel (2), payload size (4), end (1).
const FRAME_OVERHEAD: usize = 8;
/// A content header's payload before its properties: class id (2), weight (2), body size
/// (8), property flags (2; the 14 basic properties need one flag word).
const CONTENT_HEADER_FIXED: usize = 2 + 2 + 8 + 2;

/// Why and where a message failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// The error's message (`x-exception-message`), cut if the frame has no room for it.
    pub reason: String,
    /// The error's chain, panic location or backtrace (`x-exception-stacktrace`), cut to the
    /// room the frame has left, or dropped when it has none.
    pub trace: String,
    /// The exchange the message was published to (`x-original-exchange`).
    pub original_exchange: String,
    /// The routing key it was published with (`x-original-routingKey`).
    pub original_routing_key: String,
    /// Handler attempts made.
    pub attempts: u32,
}

/// The frame the republished message's headers must fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameBudget {
    /// The connection's negotiated `frame_max`, or `None` when it has no limit.
    pub frame_max: Option<u32>,
    /// Bytes kept free below `frame_max` (`frameMaxHeadroom`).
    pub headroom: u32,
}

/// What [`republish_headers`] had to leave out for the message to fit its frame.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fitted {
    /// Bytes cut from the end of `x-exception-message`.
    pub reason_cut: usize,
    /// Bytes cut from the end of the stack trace (all of them when the header was dropped).
    pub trace_cut: usize,
}

impl Fitted {
    /// Whether anything was cut.
    pub fn is_cut(&self) -> bool {
        self.reason_cut > 0 || self.trace_cut > 0
    }
}

/// The message's own headers and properties, with the dead-letter headers that cannot be
/// cut, do not fit one frame: republishing it would cost the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "its headers and properties with the dead-letter headers take a {needed}-byte frame, more than the connection's frame_max of {frame_max}"
)]
pub struct HeadersTooLarge {
    /// The content-header frame the message needs, in bytes.
    pub needed: usize,
    /// The connection's `frame_max`.
    pub frame_max: u32,
}

/// Adds the dead-letter headers to a message (replacing those of an earlier dead-lettering).
///
/// With a `frame_max`, `x-exception-message` takes the room first, then the stack trace;
/// what does not fit is cut (on a character boundary), and a trace with no room at all is
/// dropped, so the message's content-header frame never exceeds `frame_max`. When even the
/// headers that cannot be cut (the message's own, the original exchange and routing key,
/// the attempt count) leave no room, the message is not fit to republish: the error says
/// so, and the message is left with some of the headers added.
pub fn republish_headers(
    message: &mut Message,
    dead: &DeadLetter,
    budget: FrameBudget,
) -> Result<Fitted, HeadersTooLarge> {
    let headers = &mut message.headers;
    headers.insert(EXCHANGE_HEADER, dead.original_exchange.as_str());
    headers.insert(ROUTING_KEY_HEADER, dead.original_routing_key.as_str());
    headers.insert(ATTEMPTS_HEADER, HeaderValue::I64(i64::from(dead.attempts)));
    let Some(frame_max) = budget.frame_max else {
        headers.insert(MESSAGE_HEADER, dead.reason.as_str());
        headers.insert(TRACE_HEADER, dead.trace.as_str());
        return Ok(Fitted::default());
    };
    headers.insert(MESSAGE_HEADER, "");
    headers.remove(TRACE_HEADER);
    let fixed = header_frame_size(message);
    if fixed > frame_max as usize {
        return Err(HeadersTooLarge {
            needed: fixed,
            frame_max,
        });
    }
    let mut room = (frame_max as usize)
        .saturating_sub(budget.headroom as usize)
        .saturating_sub(fixed);
    let reason = truncate(&dead.reason, room);
    room -= reason.len();
    let mut fitted = Fitted {
        reason_cut: dead.reason.len() - reason.len(),
        trace_cut: dead.trace.len(),
    };
    message.headers.insert(MESSAGE_HEADER, reason);
    // The trace's entry costs its name, type tag and length before any of its text.
    let entry = field_entry_size(TRACE_HEADER, &HeaderValue::String(String::new()));
    if room >= entry {
        let trace = truncate(&dead.trace, room - entry);
        fitted.trace_cut = dead.trace.len() - trace.len();
        message.headers.insert(TRACE_HEADER, trace);
    }
    Ok(fitted)
}

/// The size of a message's content-header frame on an AMQP 0-9-1 connection: the frame
/// around it, the fixed part of the content header, and every property and header as a
/// binder maps it to the wire (strings as long strings, properties as short strings). The
/// payload is not in it: it travels in body frames.
pub fn header_frame_size(message: &Message) -> usize {
    let p = &message.properties;
    let short = |s: Option<&str>| s.map_or(0, short_string_size);
    let properties = short(p.content_type.as_deref())
        + short(p.content_encoding.as_deref())
        + if message.headers.is_empty() {
            0
        } else {
            table_size(&message.headers)
        }
        + p.delivery_mode.map_or(0, |_| 1)
        + p.priority.map_or(0, |_| 1)
        + short(p.correlation_id.as_deref())
        + short(p.reply_to.as_deref())
        + short(p.expiration.as_deref())
        + short(p.message_id.as_deref())
        + p.timestamp.map_or(0, |_| 8)
        + short(p.kind.as_deref())
        + short(p.user_id.as_deref())
        + short(p.app_id.as_deref());
    FRAME_OVERHEAD + CONTENT_HEADER_FIXED + properties
}

/// The encoded size of a field table: its 4-byte length, then each entry.
pub fn table_size(headers: &Headers) -> usize {
    4 + headers
        .iter()
        .map(|(k, v)| field_entry_size(k, v))
        .sum::<usize>()
}

/// One table entry: the name as a short string, then the tagged value.
fn field_entry_size(name: &str, value: &HeaderValue) -> usize {
    short_string_size(name) + value_size(value)
}

fn short_string_size(s: &str) -> usize {
    1 + s.len()
}

/// The encoded size of a field value with its one-byte type tag.
pub fn value_size(value: &HeaderValue) -> usize {
    1 + match value {
        HeaderValue::Void => 0,
        HeaderValue::Bool(_) | HeaderValue::I8(_) | HeaderValue::U8(_) => 1,
        HeaderValue::I16(_) | HeaderValue::U16(_) => 2,
        HeaderValue::I32(_) | HeaderValue::U32(_) | HeaderValue::F32(_) => 4,
        HeaderValue::I64(_) | HeaderValue::F64(_) | HeaderValue::Timestamp(_) => 8,
        // Scale (1) and unscaled value (4).
        HeaderValue::Decimal(_) => 5,
        HeaderValue::String(s) => 4 + s.len(),
        HeaderValue::Bytes(b) => 4 + b.len(),
        HeaderValue::Array(items) => 4 + items.iter().map(value_size).sum::<usize>(),
        HeaderValue::Table(t) => table_size(t),
    }
}

/// The longest prefix of `text` within `max` bytes, on a character boundary.
fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while end > 0 && !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use binder_core::message::{Decimal, DeliveryMode};

    fn dead(trace: &str) -> DeadLetter {
        DeadLetter {
            reason: "boom".into(),
            trace: trace.into(),
            original_exchange: "orders".into(),
            original_routing_key: "order.created".into(),
            attempts: 3,
        }
    }

    fn budget(frame_max: u32, headroom: u32) -> FrameBudget {
        FrameBudget {
            frame_max: Some(frame_max),
            headroom,
        }
    }

    #[test]
    fn headers_are_those_of_spring_cloud_stream() {
        let mut m = Message::new("x");
        let fitted =
            republish_headers(&mut m, &dead("at handler\nat runtime"), budget(10_000, 0)).unwrap();
        assert!(!fitted.is_cut());
        let h = &m.headers;
        assert_eq!(h.get_str("x-exception-message"), Some("boom"));
        assert_eq!(
            h.get_str("x-exception-stacktrace"),
            Some("at handler\nat runtime")
        );
        assert_eq!(h.get_str("x-original-exchange"), Some("orders"));
        assert_eq!(h.get_str("x-original-routingKey"), Some("order.created"));
        assert_eq!(h.get(ATTEMPTS_HEADER), Some(&HeaderValue::I64(3)));
    }

    #[test]
    fn an_empty_message_has_the_bare_content_header() {
        // 8 bytes of frame, 14 of content header, no properties (as lapin encodes it).
        let mut m = Message::new("payload");
        assert_eq!(header_frame_size(&m), 22);
        m.properties.content_type = Some("text/plain".into());
        m.headers.insert("a", HeaderValue::I32(1));
        // content type: 1 + 10; table: 4 + name (1 + 1) + tag 1 + value 4.
        assert_eq!(header_frame_size(&m), 22 + 11 + 11);
    }

    #[test]
    fn every_value_type_has_its_wire_size() {
        let cases: Vec<(HeaderValue, usize)> = vec![
            (HeaderValue::Void, 1),
            (HeaderValue::Bool(true), 2),
            (HeaderValue::I8(1), 2),
            (HeaderValue::U8(1), 2),
            (HeaderValue::I16(1), 3),
            (HeaderValue::U16(1), 3),
            (HeaderValue::I32(1), 5),
            (HeaderValue::U32(1), 5),
            (HeaderValue::I64(1), 9),
            (HeaderValue::F32(1.0), 5),
            (HeaderValue::F64(1.0), 9),
            (HeaderValue::Decimal(Decimal { scale: 1, value: 5 }), 6),
            (HeaderValue::from("héllo"), 1 + 4 + 6),
            (HeaderValue::Bytes(bytes::Bytes::from_static(&[1, 2, 3])), 8),
            (HeaderValue::Timestamp(9), 9),
            (
                HeaderValue::Array(vec![HeaderValue::I8(1), HeaderValue::Void]),
                1 + 4 + 2 + 1,
            ),
            (
                HeaderValue::Table([("k", HeaderValue::Bool(false))].into_iter().collect()),
                1 + 4 + 2 + 2,
            ),
        ];
        for (value, size) in cases {
            assert_eq!(value_size(&value), size, "{value:?}");
        }
    }

    #[test]
    fn every_property_counts() {
        let mut m = Message::new("x");
        let p = &mut m.properties;
        p.content_type = Some("a".into());
        p.content_encoding = Some("bb".into());
        p.correlation_id = Some("ccc".into());
        p.message_id = Some("d".into());
        p.reply_to = Some("e".into());
        p.expiration = Some("1000".into());
        p.timestamp = Some(1);
        p.kind = Some("f".into());
        p.user_id = Some("g".into());
        p.app_id = Some("h".into());
        p.delivery_mode = Some(DeliveryMode::Persistent);
        p.priority = Some(1);
        let strings = [1, 2, 3, 1, 1, 4, 1, 1, 1]
            .iter()
            .map(|n| 1 + n)
            .sum::<usize>();
        assert_eq!(header_frame_size(&m), 22 + strings + 8 + 1 + 1);
    }

    #[test]
    fn a_cut_trace_fills_the_budget_exactly() {
        let mut m = Message::new("x").with_header("tenant", "acme");
        let trace = "t".repeat(5_000);
        let fitted = republish_headers(&mut m, &dead(&trace), budget(4_096, 1_000)).unwrap();
        assert_eq!(
            header_frame_size(&m),
            4_096 - 1_000,
            "the budget, to the byte"
        );
        assert_eq!(fitted.reason_cut, 0);
        let kept = m.headers.get_str("x-exception-stacktrace").unwrap().len();
        assert_eq!(fitted.trace_cut, 5_000 - kept);
        assert!(kept > 2_000, "{kept}");
    }

    #[test]
    fn the_payload_does_not_count() {
        let mut m = Message::new(vec![7u8; 1 << 20]);
        let trace = "t".repeat(50_000);
        let fitted =
            republish_headers(&mut m, &dead(&trace), budget(DEFAULT_FRAME_MAX, 20_000)).unwrap();
        assert!(!fitted.is_cut());
        assert_eq!(
            m.headers.get_str("x-exception-stacktrace").unwrap().len(),
            50_000
        );
    }

    #[test]
    fn foreign_headers_leave_no_room_so_the_trace_is_dropped_and_the_message_cut() {
        let mut m = Message::new("x").with_header("big", "b".repeat(130_000));
        let fitted =
            republish_headers(&mut m, &dead("a trace"), budget(DEFAULT_FRAME_MAX, 20_000)).unwrap();
        assert!(header_frame_size(&m) <= DEFAULT_FRAME_MAX as usize);
        assert_eq!(m.headers.get("x-exception-stacktrace"), None, "dropped");
        assert_eq!(m.headers.get_str("x-exception-message"), Some(""));
        assert_eq!(
            fitted,
            Fitted {
                reason_cut: 4,
                trace_cut: 7
            }
        );
        assert_eq!(m.headers.get_str("big").map(str::len), Some(130_000));
        assert_eq!(m.headers.get_str("x-original-exchange"), Some("orders"));
        assert_eq!(m.headers.get(ATTEMPTS_HEADER), Some(&HeaderValue::I64(3)));
    }

    #[test]
    fn without_headroom_the_message_takes_the_room_before_the_trace() {
        let mut m = Message::new("x").with_header("big", "b".repeat(130_000));
        let mut d = dead("a trace");
        d.reason = "r".repeat(2_000);
        let fitted = republish_headers(&mut m, &d, budget(DEFAULT_FRAME_MAX, 0)).unwrap();
        assert_eq!(header_frame_size(&m), DEFAULT_FRAME_MAX as usize);
        assert!(
            fitted.reason_cut > 0 && fitted.reason_cut < 2_000,
            "{fitted:?}"
        );
        assert_eq!(m.headers.get("x-exception-stacktrace"), None);
    }

    #[test]
    fn headers_larger_than_the_frame_are_refused() {
        let mut m = Message::new("x").with_header("big", "b".repeat(131_000));
        let err = republish_headers(&mut m, &dead("t"), budget(DEFAULT_FRAME_MAX, 0)).unwrap_err();
        assert_eq!(err.frame_max, DEFAULT_FRAME_MAX);
        assert!(err.needed > DEFAULT_FRAME_MAX as usize, "{err}");
    }

    #[test]
    fn the_headers_of_an_earlier_dead_lettering_are_replaced_not_counted() {
        let mut m = Message::new("x")
            .with_header("x-exception-stacktrace", "old".repeat(30_000))
            .with_header("x-exception-message", "old".repeat(10_000));
        let trace = "t".repeat(60_000);
        let fitted =
            republish_headers(&mut m, &dead(&trace), budget(DEFAULT_FRAME_MAX, 20_000)).unwrap();
        assert!(!fitted.is_cut());
        assert_eq!(
            m.headers.get_str("x-exception-stacktrace"),
            Some(trace.as_str())
        );
        assert_eq!(m.headers.get_str("x-exception-message"), Some("boom"));
    }

    #[test]
    fn without_a_frame_limit_nothing_is_cut() {
        let mut m = Message::new("x").with_header("big", "b".repeat(200_000));
        let trace = "t".repeat(200_000);
        let fitted = republish_headers(
            &mut m,
            &dead(&trace),
            FrameBudget {
                frame_max: None,
                headroom: 20_000,
            },
        )
        .unwrap();
        assert!(!fitted.is_cut());
        assert_eq!(
            m.headers.get_str("x-exception-stacktrace").unwrap().len(),
            200_000
        );
    }

    #[test]
    fn long_traces_are_cut_on_char_boundaries() {
        // The frame the headers take with an empty trace, the trace's entry included.
        let mut probe = Message::new("x");
        republish_headers(&mut probe, &dead(""), budget(10_000, 0)).unwrap();
        let used = header_frame_size(&probe);
        let mut m = Message::new("x");
        let trace = "é".repeat(100);
        let fitted =
            republish_headers(&mut m, &dead(&trace), budget((used + 51) as u32, 0)).unwrap();
        let t = m.headers.get_str("x-exception-stacktrace").unwrap();
        assert_eq!(t.len(), 50, "51 bytes of room, cut back to a boundary");
        assert!(t.chars().all(|c| c == 'é'));
        assert_eq!(fitted.trace_cut, 150);
        assert_eq!(header_frame_size(&m), used + 50);
    }
}
