//! The message model: payload bytes, AMQP headers and AMQP properties.

mod header;
mod properties;

pub use header::{Decimal, HeaderValue, Headers};
pub use properties::{DeliveryMode, Properties, SharedProperties};

use bytes::Bytes;

/// A message as every binder carries it: bytes, headers and properties, nothing lost between
/// binders.
///
/// ```
/// use binder_core::{Message, HeaderValue};
///
/// let msg = Message::new(&b"{\"id\":1}"[..])
///     .with_content_type("application/json")
///     .with_header("type", "created")
///     .with_header("attempt", 2i32);
/// assert_eq!(msg.headers.get_str("type"), Some("created"));
/// assert_eq!(msg.headers.get("attempt"), Some(&HeaderValue::I32(2)));
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Message {
    /// The payload, encoded according to `properties.content_type`.
    pub payload: Bytes,
    /// Application headers (an AMQP field table).
    pub headers: Headers,
    /// The standard AMQP properties (one pointer, shared copy-on-write; reads and writes of
    /// its fields go through to [`Properties`]).
    pub properties: SharedProperties,
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
    pub fn with_content_type(mut self, content_type: impl Into<std::sync::Arc<str>>) -> Self {
        self.properties.content_type = Some(content_type.into());
        self
    }

    /// Sets one header.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<HeaderValue>) -> Self {
        self.headers.insert(name, value);
        self
    }

    /// Replaces the properties (a [`Properties`], or [`SharedProperties`] to share them with
    /// other messages).
    pub fn with_properties(mut self, properties: impl Into<SharedProperties>) -> Self {
        self.properties = properties.into();
        self
    }

    /// The content type, if set.
    pub fn content_type(&self) -> Option<&str> {
        self.properties.content_type.as_deref()
    }
}
