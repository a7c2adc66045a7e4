//! The standard AMQP basic properties of a message.

use std::time::Duration;

crate::keyword_enum! {
    /// Whether the broker writes a message to disk (`PERSISTENT`, AMQP 2) or may keep it in
    /// memory only (`NON_PERSISTENT`, AMQP 1).
    #[derive(Default)]
    pub enum DeliveryMode {
        /// AMQP delivery mode 1.
        NonPersistent => "NON_PERSISTENT",
        /// AMQP delivery mode 2 (Spring Cloud Stream's default for producers).
        #[default]
        Persistent => "PERSISTENT",
    }
}

impl DeliveryMode {
    /// The AMQP wire value (1 or 2).
    pub fn as_u8(self) -> u8 {
        match self {
            DeliveryMode::NonPersistent => 1,
            DeliveryMode::Persistent => 2,
        }
    }

    /// From the AMQP wire value; anything but 2 is non-persistent, as brokers treat it.
    pub fn from_u8(v: u8) -> Self {
        if v == 2 {
            DeliveryMode::Persistent
        } else {
            DeliveryMode::NonPersistent
        }
    }
}

/// The AMQP 0-9-1 basic properties. Every field is optional, as on the wire.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Properties {
    /// MIME type of the payload; chooses the codec. Shared, since most messages of a binding
    /// carry the same one: copying a message does not copy it.
    pub content_type: Option<std::sync::Arc<str>>,
    /// MIME content encoding (e.g. `gzip`).
    pub content_encoding: Option<String>,
    /// Correlates a reply with its request.
    pub correlation_id: Option<String>,
    /// Application message identifier.
    pub message_id: Option<String>,
    /// Address to reply to.
    pub reply_to: Option<String>,
    /// Per-message TTL in milliseconds, as the decimal string AMQP carries.
    pub expiration: Option<String>,
    /// Seconds since the Unix epoch.
    pub timestamp: Option<u64>,
    /// Application message type name (AMQP `type`).
    pub kind: Option<String>,
    /// Creating user id (validated by RabbitMQ against the connection's user).
    pub user_id: Option<String>,
    /// Creating application id.
    pub app_id: Option<String>,
    /// Persistent or not.
    pub delivery_mode: Option<DeliveryMode>,
    /// Priority 0–9 (up to `x-max-priority` of the queue).
    pub priority: Option<u8>,
}

impl Properties {
    /// The `expiration` as a duration, if it is a valid millisecond count.
    pub fn expiration_duration(&self) -> Option<Duration> {
        self.expiration
            .as_deref()
            .and_then(|s| s.parse::<u64>().ok())
            .map(Duration::from_millis)
    }

    /// Sets `expiration` from a duration (whole milliseconds).
    pub fn set_expiration(&mut self, ttl: Duration) {
        self.expiration = Some(ttl.as_millis().to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiration_round_trips_as_milliseconds() {
        let mut p = Properties::default();
        p.set_expiration(Duration::from_millis(1500));
        assert_eq!(p.expiration.as_deref(), Some("1500"));
        assert_eq!(p.expiration_duration(), Some(Duration::from_millis(1500)));
        p.expiration = Some("soon".into());
        assert_eq!(p.expiration_duration(), None);
    }

    #[test]
    fn delivery_mode_wire_values() {
        assert_eq!(DeliveryMode::from_u8(2), DeliveryMode::Persistent);
        assert_eq!(DeliveryMode::from_u8(1), DeliveryMode::NonPersistent);
        assert_eq!(DeliveryMode::Persistent.as_u8(), 2);
    }
}
