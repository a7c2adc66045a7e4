//! The headers of a failed message republished to its dead-letter exchange, as Spring Cloud
//! Stream's `republishToDlq` writes them.

use crate::message::{HeaderValue, Message};

/// Header carrying the number of attempts made before the message was dead-lettered.
pub const ATTEMPTS_HEADER: &str = "x-attempts";

/// Why and where a message failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// The error's message (`x-exception-message`).
    pub reason: String,
    /// The error's chain or backtrace (`x-exception-stacktrace`), truncated to fit a frame.
    pub trace: String,
    /// The exchange the message was published to (`x-original-exchange`).
    pub original_exchange: String,
    /// The routing key it was published with (`x-original-routingKey`).
    pub original_routing_key: String,
    /// Handler attempts made.
    pub attempts: u32,
}

/// Adds the dead-letter headers to a message. `frame_budget` is the room for the stack trace:
/// the connection's `frame_max` minus `frameMaxHeadroom`, minus what the rest takes.
pub fn republish_headers(message: &mut Message, dead: &DeadLetter, frame_budget: usize) {
    let used: usize = message.payload.len()
        + dead.reason.len()
        + dead.original_exchange.len()
        + dead.original_routing_key.len();
    let room = frame_budget.saturating_sub(used);
    let trace = truncate(&dead.trace, room);
    let headers = &mut message.headers;
    headers.insert("x-exception-message", dead.reason.as_str());
    headers.insert("x-exception-stacktrace", trace);
    headers.insert("x-original-exchange", dead.original_exchange.as_str());
    headers.insert("x-original-routingKey", dead.original_routing_key.as_str());
    headers.insert(ATTEMPTS_HEADER, HeaderValue::I64(i64::from(dead.attempts)));
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

    fn dead(trace: &str) -> DeadLetter {
        DeadLetter {
            reason: "boom".into(),
            trace: trace.into(),
            original_exchange: "orders".into(),
            original_routing_key: "order.created".into(),
            attempts: 3,
        }
    }

    #[test]
    fn headers_are_those_of_spring_cloud_stream() {
        let mut m = Message::new("x");
        republish_headers(&mut m, &dead("at handler\nat runtime"), 10_000);
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
    fn long_traces_are_truncated_to_the_frame_budget_on_char_boundaries() {
        let mut m = Message::new("x");
        let trace = "é".repeat(100);
        republish_headers(&mut m, &dead(&trace), 1 + 4 + 6 + 13 + 51);
        let t = m.headers.get_str("x-exception-stacktrace").unwrap();
        assert_eq!(t.len(), 50, "51 bytes of room, cut back to a boundary");
        assert!(t.chars().all(|c| c == 'é'));
    }
}
