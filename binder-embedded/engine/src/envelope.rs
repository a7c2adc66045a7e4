//! Envelopes: how a front end's messages are held by the engine.
//!
//! The engine routes, queues and delivers a *record* (a message plus the exchange and routing
//! key it was published with), shared by reference between the queues it reaches and the
//! deliveries handed out. Which type that record is, is the front end's choice: the
//! [`Native`] envelope uses the engine's own [`Published`]; a front end with a message model of
//! its own (the framework's `embedded` binder) implements [`Envelope`] for its record type, so
//! that a delivery hands the front end its own record without converting or copying it.
//!
//! The engine reads a record only through this trait. The hot path (publish, route to a
//! direct, fanout or topic exchange, enqueue, deliver, settle) uses the cheap accessors;
//! [`Envelope::headers`], [`Envelope::to_native`] and [`Envelope::from_native`] are used only
//! by headers-exchange routing, dead-lettering and the store seam, where a conversion is
//! acceptable.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::field::FieldTable;
use crate::memory;
use crate::message::{Message, Published};

/// How messages are held: the record type queues share, and the message type publishers hand
/// over. Implemented on a marker type (so a front end can choose a record type it does not
/// own).
pub trait Envelope: fmt::Debug + Default + Clone + Copy + Send + Sync + 'static {
    /// What `basic.publish` takes.
    type Message: fmt::Debug + Send + 'static;
    /// The shared record of a published message.
    type Record: fmt::Debug + Clone + Send + Sync + 'static;

    /// Wraps a message for publishing, with the exchange and routing key it goes to, in the
    /// shared allocation queues will hold (built in place: `Arc::new` of a struct literal
    /// moves the message once).
    fn seal(message: Self::Message, exchange: Arc<str>, routing_key: Arc<str>)
    -> Arc<Self::Record>;
    /// The message a record carries.
    fn message(record: &Self::Record) -> &Self::Message;
    /// The exchange it was published to.
    fn exchange(record: &Self::Record) -> &Arc<str>;
    /// The routing key it was published with.
    fn routing_key(record: &Self::Record) -> &Arc<str>;
    /// Sets the exchange (the engine shares one name per exchange).
    fn set_exchange(record: &mut Self::Record, exchange: Arc<str>);
    /// Sets the routing key (the engine shares it between consecutive publishes).
    fn set_routing_key(record: &mut Self::Record, routing_key: Arc<str>);
    /// Payload bytes (for `x-max-length-bytes`).
    fn payload_len(record: &Self::Record) -> usize;
    /// The `priority` property.
    fn priority(record: &Self::Record) -> Option<u8>;
    /// The `expiration` property as a duration, if it is a valid millisecond count.
    fn expiration(record: &Self::Record) -> Option<Duration>;
    /// Whether the message is persistent (delivery mode 2): in a durable queue it goes to
    /// the message store.
    fn persistent(record: &Self::Record) -> bool;
    /// The header table (borrowed when the record holds one; headers exchanges and the
    /// dead-letter cycle check read it).
    fn headers(record: &Self::Record) -> Cow<'_, FieldTable>;
    /// The heap the record's message owns beyond the record itself: payload, headers and
    /// property strings, as `malloc` rounds each block (see [`memory`](crate::memory)).
    fn message_heap(record: &Self::Record) -> usize;
    /// The record in the engine's own types (the store seam).
    fn to_native(record: &Self::Record) -> Published;
    /// The record in the engine's own types, taking it (dead-lettering): moved rather than
    /// copied when nothing else holds it.
    fn into_native(record: Arc<Self::Record>) -> Published {
        Self::to_native(&record)
    }
    /// A record from the engine's own types (dead-lettering, recovery from a store).
    fn from_native(published: Published) -> Self::Record;
}

/// The engine's own envelope: records are [`Published`], messages [`Message`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Native;

impl Envelope for Native {
    type Message = Message;
    type Record = Published;

    #[inline]
    fn seal(message: Message, exchange: Arc<str>, routing_key: Arc<str>) -> Arc<Published> {
        Arc::new(Published {
            exchange,
            routing_key,
            message,
        })
    }

    #[inline]
    fn message(record: &Published) -> &Message {
        &record.message
    }

    #[inline]
    fn exchange(record: &Published) -> &Arc<str> {
        &record.exchange
    }

    #[inline]
    fn routing_key(record: &Published) -> &Arc<str> {
        &record.routing_key
    }

    #[inline]
    fn set_exchange(record: &mut Published, exchange: Arc<str>) {
        record.exchange = exchange;
    }

    #[inline]
    fn set_routing_key(record: &mut Published, routing_key: Arc<str>) {
        record.routing_key = routing_key;
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
        record.message.properties.is_persistent()
    }

    #[inline]
    fn headers(record: &Published) -> Cow<'_, FieldTable> {
        Cow::Borrowed(&record.message.headers)
    }

    #[inline]
    fn message_heap(record: &Published) -> usize {
        memory::message_heap(&record.message)
    }

    #[inline]
    fn to_native(record: &Published) -> Published {
        record.clone()
    }

    #[inline]
    fn into_native(record: Arc<Published>) -> Published {
        Arc::unwrap_or_clone(record)
    }

    #[inline]
    fn from_native(published: Published) -> Published {
        published
    }
}
