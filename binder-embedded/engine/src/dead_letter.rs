//! Dead-lettering: the `x-death` history RabbitMQ writes, and its cycle rule.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::field::{FieldTable, FieldValue};
use crate::message::Message;

/// Why a message was dead-lettered, as RabbitMQ names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeathReason {
    /// Rejected or nacked without requeue.
    Rejected,
    /// Its TTL ran out.
    Expired,
    /// Dropped or refused by a length limit.
    MaxLen,
    /// Redelivered more often than `x-delivery-limit`.
    DeliveryLimit,
}

impl DeathReason {
    /// The reason string of `x-death`.
    pub fn as_str(self) -> &'static str {
        match self {
            DeathReason::Rejected => "rejected",
            DeathReason::Expired => "expired",
            DeathReason::MaxLen => "maxlen",
            DeathReason::DeliveryLimit => "delivery_limit",
        }
    }
}

fn now_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

/// Records a death in `x-death` (one entry per queue and reason, most recent first, with a
/// count), sets `x-first-death-*` once and `x-last-death-*` each time, and moves a per-message
/// `expiration` into `original-expiration` so the message does not expire again.
pub(crate) fn record_death(
    message: &mut Message,
    queue: &str,
    reason: DeathReason,
    exchange: &str,
    routing_keys: &[String],
) {
    let mut deaths: Vec<FieldValue> = match message.headers.remove("x-death") {
        Some(FieldValue::Array(items)) => items,
        _ => Vec::new(),
    };
    let same = |entry: &FieldValue| match entry {
        FieldValue::Table(t) => {
            t.get_str("queue") == Some(queue) && t.get_str("reason") == Some(reason.as_str())
        }
        _ => false,
    };
    let previous = deaths.iter().position(same).map(|i| deaths.remove(i));
    let mut entry = match previous {
        Some(FieldValue::Table(t)) => t,
        _ => FieldTable::new(),
    };
    let count = entry.get("count").and_then(FieldValue::as_i64).unwrap_or(0) + 1;
    entry.insert("count", FieldValue::I64(count));
    entry.insert("reason", reason.as_str());
    entry.insert("queue", queue);
    entry.insert("time", FieldValue::Timestamp(now_seconds()));
    entry.insert("exchange", exchange);
    entry.insert(
        "routing-keys",
        FieldValue::Array(routing_keys.iter().map(|k| k.as_str().into()).collect()),
    );
    if let Some(exp) = message.properties.expiration.take() {
        entry.insert("original-expiration", exp);
    }
    deaths.insert(0, FieldValue::Table(entry));
    message.headers.insert("x-death", FieldValue::Array(deaths));
    for (suffix, value) in [
        ("queue", queue),
        ("reason", reason.as_str()),
        ("exchange", exchange),
    ] {
        let first = format!("x-first-death-{suffix}");
        if !message.headers.contains(&first) {
            message.headers.insert(first, value);
        }
        message
            .headers
            .insert(format!("x-last-death-{suffix}"), value);
    }
}

/// RabbitMQ's cycle rule: a dead-lettered message is not delivered to a queue it already died
/// in unless some death in its history was a rejection (a client decision, not a loop).
pub(crate) fn is_cycle(message: &Message, target_queue: &str) -> bool {
    let Some(FieldValue::Array(deaths)) = message.headers.get("x-death") else {
        return false;
    };
    let tables = || {
        deaths.iter().filter_map(|d| match d {
            FieldValue::Table(t) => Some(t),
            _ => None,
        })
    };
    let seen_target = tables().any(|t| t.get_str("queue") == Some(target_queue));
    let any_rejected = tables().any(|t| t.get_str("reason") == Some("rejected"));
    seen_target && !any_rejected
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deaths(m: &Message) -> Vec<FieldTable> {
        match m.headers.get("x-death") {
            Some(FieldValue::Array(items)) => items
                .iter()
                .map(|i| match i {
                    FieldValue::Table(t) => t.clone(),
                    _ => panic!("not a table"),
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    #[test]
    fn x_death_counts_per_queue_and_reason_most_recent_first() {
        let mut m = Message::new("x");
        m.properties.expiration = Some("500".into());
        record_death(&mut m, "q1", DeathReason::Expired, "ex", &["k".into()]);
        record_death(&mut m, "q2", DeathReason::Rejected, "dlx", &["k".into()]);
        record_death(&mut m, "q1", DeathReason::Expired, "ex", &["k".into()]);
        let d = deaths(&m);
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].get_str("queue"), Some("q1"));
        assert_eq!(d[0].get("count"), Some(&FieldValue::I64(2)));
        assert_eq!(d[0].get_str("original-expiration"), Some("500"));
        assert_eq!(
            d[0].get("routing-keys"),
            Some(&FieldValue::Array(vec!["k".into()]))
        );
        assert!(matches!(d[0].get("time"), Some(FieldValue::Timestamp(_))));
        assert_eq!(d[1].get_str("reason"), Some("rejected"));
        assert_eq!(m.properties.expiration, None);
        assert_eq!(m.headers.get_str("x-first-death-queue"), Some("q1"));
        assert_eq!(m.headers.get_str("x-first-death-reason"), Some("expired"));
        assert_eq!(m.headers.get_str("x-last-death-queue"), Some("q1"));
    }

    #[test]
    fn cycles_are_detected_unless_a_rejection_intervened() {
        let mut m = Message::new("x");
        record_death(&mut m, "a", DeathReason::Expired, "e", &[]);
        assert!(is_cycle(&m, "a"));
        assert!(!is_cycle(&m, "b"));
        record_death(&mut m, "b", DeathReason::Rejected, "e", &[]);
        assert!(!is_cycle(&m, "a"));
    }
}
