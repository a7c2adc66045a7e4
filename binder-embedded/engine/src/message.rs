//! Messages as the engine holds them: AMQP basic properties, a header table and a payload,
//! and the published record (message plus exchange and routing key) queues share.

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

/// A message: properties, application headers and the payload.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Message {
    /// The payload.
    pub payload: Bytes,
    /// Application headers.
    pub headers: FieldTable,
    /// The basic properties.
    pub properties: Properties,
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
        self.properties = properties;
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
#[derive(Debug, Clone, PartialEq)]
pub struct Published {
    /// The exchange it was published to.
    pub exchange: Arc<str>,
    /// The routing key it was published with.
    pub routing_key: Arc<str>,
    /// The message.
    pub message: Message,
}
