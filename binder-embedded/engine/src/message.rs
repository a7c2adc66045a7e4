//! Messages as the engine holds them: AMQP basic properties, a header table and a payload,
//! and the published record (message plus exchange and routing key) queues share.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::field::{FieldTable, FieldValue};

/// The AMQP 0-9-1 basic properties. Every field is optional, as on the wire.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Properties {
    /// MIME type of the payload. Shared (`Arc`), since most messages of a publisher carry
    /// the same one.
    pub content_type: Option<Arc<str>>,
    /// MIME content encoding.
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
    /// Creating user id.
    pub user_id: Option<String>,
    /// Creating application id.
    pub app_id: Option<String>,
    /// The AMQP delivery mode: 2 is persistent, anything else transient.
    pub delivery_mode: Option<u8>,
    /// Priority (served up to the queue's `x-max-priority`).
    pub priority: Option<u8>,
}

impl Properties {
    /// No property set (what an empty [`PropertiesBox`] reads as).
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

    /// Whether the message asks to be persisted (delivery mode 2).
    pub fn is_persistent(&self) -> bool {
        self.delivery_mode == Some(2)
    }
}

/// The properties every empty [`PropertiesBox`] reads as.
static NO_PROPERTIES: Properties = Properties::EMPTY;

/// A message's [`Properties`], allocated only once one is written: most messages set none
/// (or share a content type), so an unset box is one null pointer instead of the 200-odd
/// bytes of the struct in every queued message.
///
/// It reads as the properties it holds ([`Deref`]), or as [`Properties::EMPTY`]; writing a
/// field through it ([`DerefMut`]: `message.properties.priority = Some(5)`) allocates the box
/// if it has none. Equality is the properties', whether boxed or not.
#[derive(Clone, Default)]
pub struct PropertiesBox(Option<Box<Properties>>);

impl PropertiesBox {
    /// Whether the properties are allocated (the memory count charges the box then, even if
    /// every field was set back to `None`).
    pub fn is_allocated(&self) -> bool {
        self.0.is_some()
    }

    /// The properties, taken out of the box (a default struct when none is allocated).
    pub fn into_inner(self) -> Properties {
        self.0.map(|p| *p).unwrap_or_default()
    }
}

impl Deref for PropertiesBox {
    type Target = Properties;

    #[inline]
    fn deref(&self) -> &Properties {
        self.0.as_deref().unwrap_or(&NO_PROPERTIES)
    }
}

impl DerefMut for PropertiesBox {
    #[inline]
    fn deref_mut(&mut self) -> &mut Properties {
        self.0.get_or_insert_with(Box::default)
    }
}

/// Boxes the properties, unless none is set.
impl From<Properties> for PropertiesBox {
    fn from(p: Properties) -> Self {
        if p == Properties::EMPTY {
            PropertiesBox(None)
        } else {
            PropertiesBox(Some(Box::new(p)))
        }
    }
}

impl PartialEq for PropertiesBox {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for PropertiesBox {}

impl PartialEq<Properties> for PropertiesBox {
    fn eq(&self, other: &Properties) -> bool {
        **self == *other
    }
}

impl fmt::Debug for PropertiesBox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// A message: properties, application headers and the payload.
///
/// Compact for the common case of a message without headers or properties: 48 bytes (the
/// payload's `Bytes`, and a null pointer each for the headers and the properties).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Message {
    /// The payload.
    pub payload: Bytes,
    /// Application headers.
    pub headers: FieldTable,
    /// The basic properties (boxed when any is set).
    pub properties: PropertiesBox,
}

impl Message {
    /// A message with this payload and no headers or properties.
    pub fn new(payload: impl Into<Bytes>) -> Self {
        Message {
            payload: payload.into(),
            ..Default::default()
        }
    }

    /// Sets the content type.
    pub fn with_content_type(mut self, content_type: impl Into<Arc<str>>) -> Self {
        self.properties.content_type = Some(content_type.into());
        self
    }

    /// Sets one header.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<FieldValue>) -> Self {
        self.headers.insert(name, value);
        self
    }

    /// Replaces the properties.
    pub fn with_properties(mut self, properties: Properties) -> Self {
        self.properties = properties.into();
        self
    }

    /// The content type, if set.
    pub fn content_type(&self) -> Option<&str> {
        self.properties.content_type.as_deref()
    }
}

/// A message as published: where it was sent and what it carries. Shared (`Arc`) by the
/// queues it was routed to and with the deliveries handed to consumers, so routing and
/// delivery copy nothing.
///
/// 56 bytes: the message (48) and one pointer to its [`Route`], which the messages a channel
/// publishes with the same exchange and routing key share.
#[derive(Debug, Clone, PartialEq)]
pub struct Published {
    /// Where it was published: the exchange and the routing key.
    pub route: Route,
    /// The message.
    pub message: Message,
}

impl Published {
    /// A message published to `exchange` with `routing_key`, with a route of its own.
    pub fn new(
        exchange: impl Into<Arc<str>>,
        routing_key: impl Into<Arc<str>>,
        message: Message,
    ) -> Self {
        Published {
            route: Route::new(exchange, routing_key),
            message,
        }
    }

    /// The exchange it was published to.
    pub fn exchange(&self) -> &Arc<str> {
        self.route.exchange()
    }

    /// The routing key it was published with.
    pub fn routing_key(&self) -> &Arc<str> {
        self.route.routing_key()
    }
}

/// Where a message was published: an exchange and a routing key behind one shared pointer
/// (cloning it clones the pointer). The engine shares one between consecutive publishes of a
/// channel with the same exchange and key, so a queued message carries one pointer instead
/// of two names.
#[derive(Clone, PartialEq, Eq)]
pub struct Route(Arc<RouteNames>);

/// What a [`Route`] points to.
#[derive(PartialEq, Eq)]
pub(crate) struct RouteNames {
    exchange: Arc<str>,
    routing_key: Arc<str>,
}

impl Route {
    /// The route of `exchange` and `routing_key`.
    pub fn new(exchange: impl Into<Arc<str>>, routing_key: impl Into<Arc<str>>) -> Self {
        Route(Arc::new(RouteNames {
            exchange: exchange.into(),
            routing_key: routing_key.into(),
        }))
    }

    /// The exchange.
    pub fn exchange(&self) -> &Arc<str> {
        &self.0.exchange
    }

    /// The routing key.
    pub fn routing_key(&self) -> &Arc<str> {
        &self.0.routing_key
    }

    /// How many values hold this route (records, and the engine's per-channel cache): the
    /// memory count charges it to a message that holds it with at most one other.
    pub fn holders(&self) -> usize {
        Arc::strong_count(&self.0)
    }

    /// Whether this is the route of `exchange` and `routing_key`.
    pub fn is(&self, exchange: &str, routing_key: &str) -> bool {
        *self.0.exchange == *exchange && *self.0.routing_key == *routing_key
    }
}

impl fmt::Debug for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Route")
            .field("exchange", &self.0.exchange)
            .field("routing_key", &self.0.routing_key)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_without_headers_or_properties_allocates_nothing_beyond_its_payload() {
        assert_eq!(std::mem::size_of::<Message>(), 48);
        let mut m = Message::new("x");
        assert!(!m.properties.is_allocated() && m.headers.is_empty());
        assert_eq!(m.properties.priority, None, "reads as no properties");
        assert_eq!(m, Message::new("x"));
        m.properties.priority = Some(3);
        assert!(m.properties.is_allocated());
        assert_ne!(m, Message::new("x"));
        m.properties.priority = None;
        assert_eq!(m, Message::new("x"), "equal whether boxed or not");
        let with = Message::new("x").with_properties(Properties::default());
        assert!(
            !with.properties.is_allocated(),
            "empty properties are not boxed"
        );
        let p = Properties {
            message_id: Some("m".into()),
            ..Default::default()
        };
        assert_eq!(
            Message::new("x")
                .with_properties(p.clone())
                .properties
                .into_inner(),
            p
        );
    }
}
