//! The standard AMQP basic properties of a message.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
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
    /// No property set (what an unallocated [`SharedProperties`] reads as).
    pub const EMPTY: Properties = Properties {
        content_type: None,
        content_encoding: None,
        correlation_id: None,
        message_id: None,
        reply_to: None,
        expiration: None,
        timestamp: None,
        kind: None,
        user_id: None,
        app_id: None,
        delivery_mode: None,
        priority: None,
    };

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

/// What every unallocated [`SharedProperties`] reads as.
static NO_PROPERTIES: Properties = Properties::EMPTY;

/// A message's [`Properties`] in one pointer: unallocated while none is set, and shared
/// (copy-on-write) between messages that carry the same ones, such as every message an
/// output sends with its binding's content type and delivery mode. A queued message then
/// holds 8 bytes of properties instead of the struct's 232.
///
/// It reads as the properties it holds, or as [`Properties::EMPTY`] ([`Deref`]). Writing a
/// field through it ([`DerefMut`]: `message.properties.priority = Some(5)`) allocates the
/// properties if there are none, and copies them first if another message shares them, so
/// a write never shows in another message. Equality is the properties', however held.
#[derive(Clone, Default)]
pub struct SharedProperties(Option<Arc<Properties>>);

impl SharedProperties {
    /// No properties (allocates nothing).
    pub const fn new() -> Self {
        SharedProperties(None)
    }

    /// Whether the properties are allocated.
    pub fn is_allocated(&self) -> bool {
        self.0.is_some()
    }

    /// Whether other holders share this allocation (a memory count charges it to none of
    /// them then).
    pub fn is_shared(&self) -> bool {
        self.0.as_ref().is_some_and(|p| Arc::strong_count(p) > 1)
    }

    /// Whether both hold the very same allocation (or both none).
    pub fn ptr_eq(&self, other: &SharedProperties) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }

    /// The properties, taken out (moved when nothing else shares them, else copied).
    pub fn into_inner(self) -> Properties {
        self.0.map(Arc::unwrap_or_clone).unwrap_or_default()
    }
}

impl Deref for SharedProperties {
    type Target = Properties;

    #[inline]
    fn deref(&self) -> &Properties {
        self.0.as_deref().unwrap_or(&NO_PROPERTIES)
    }
}

impl DerefMut for SharedProperties {
    #[inline]
    fn deref_mut(&mut self) -> &mut Properties {
        Arc::make_mut(self.0.get_or_insert_with(Arc::default))
    }
}

/// Allocates the properties, unless none is set.
impl From<Properties> for SharedProperties {
    fn from(p: Properties) -> Self {
        if p == Properties::EMPTY {
            SharedProperties(None)
        } else {
            SharedProperties(Some(Arc::new(p)))
        }
    }
}

impl From<SharedProperties> for Properties {
    fn from(p: SharedProperties) -> Self {
        p.into_inner()
    }
}

impl PartialEq for SharedProperties {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for SharedProperties {}

impl PartialEq<Properties> for SharedProperties {
    fn eq(&self, other: &Properties) -> bool {
        **self == *other
    }
}

impl fmt::Debug for SharedProperties {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_properties_read_as_empty_allocate_on_write_and_copy_before_a_shared_write() {
        let mut a = SharedProperties::new();
        assert!(!a.is_allocated());
        assert_eq!(a.priority, None, "reads as no properties");
        assert_eq!(a, Properties::EMPTY);
        a.content_type = Some("application/json".into());
        assert!(a.is_allocated() && !a.is_shared());
        let mut b = a.clone();
        assert!(a.ptr_eq(&b) && a.is_shared());
        b.priority = Some(4);
        assert!(!a.ptr_eq(&b), "a write to a shared copy copies it first");
        assert_eq!(a.priority, None, "and does not show in the other message");
        assert_eq!(b.content_type.as_deref(), Some("application/json"));
        assert!(!a.is_shared());
        assert!(!SharedProperties::from(Properties::default()).is_allocated());
        let p = Properties {
            message_id: Some("m".into()),
            ..Default::default()
        };
        assert_eq!(SharedProperties::from(p.clone()).into_inner(), p);
        assert_eq!(SharedProperties::from(p.clone()), p);
    }

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
