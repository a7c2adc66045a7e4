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
use crate::message::{Message, Published, Route};

/// How messages are held: the record type queues share, and the message type publishers hand
/// over. Implemented on a marker type (so a front end can choose a record type it does not
/// own).
pub trait Envelope: fmt::Debug + Default + Clone + Copy + Send + Sync + 'static {
    /// What `basic.publish` takes.
    type Message: fmt::Debug + Send + 'static;
    /// The shared record of a published message.
    type Record: fmt::Debug + Clone + Send + Sync + 'static;
    /// Where a record was published (exchange and routing key), shared by the records a
    /// channel publishes with the same pair: one pointer, cheap to clone (see
    /// [`Route`](crate::Route), the native one). The engine counts it as an `Arc` of two
    /// `Arc<str>` names (see [`memory`]).
    type Route: fmt::Debug + Clone + Send + Sync + 'static;

    /// Wraps a message for publishing, with its route (a placeholder until the engine sets
    /// the real one under its lock), in the shared allocation queues will hold (built in
    /// place: `Arc::new` of a struct literal moves the message once).
    fn seal(message: Self::Message, route: Self::Route) -> Arc<Self::Record>;
    /// A route of `exchange` and `routing_key`.
    fn new_route(exchange: Arc<str>, routing_key: Arc<str>) -> Self::Route;
    /// Whether `route` is the route of `exchange` and `routing_key`.
    fn is_route(route: &Self::Route, exchange: &str, routing_key: &str) -> bool;
    /// How many values hold the record's route ([`Arc::strong_count`] of its pointer; the
    /// memory count charges the route to a record that shares it with at most one other,
    /// the channel's cache).
    fn route_holders(record: &Self::Record) -> usize;
    /// Sets where a record was published (the engine shares one route between consecutive
    /// publishes of a channel to the same exchange with the same key).
    fn set_route(record: &mut Self::Record, route: Self::Route);
    /// The message a record carries.
    fn message(record: &Self::Record) -> &Self::Message;
    /// The exchange it was published to.
    fn exchange(record: &Self::Record) -> &Arc<str>;
    /// The routing key it was published with.
    fn routing_key(record: &Self::Record) -> &Arc<str>;
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
    type Route = Route;

    #[inline]
    fn seal(message: Message, route: Route) -> Arc<Published> {
        Arc::new(Published { route, message })
    }

    #[inline]
    fn new_route(exchange: Arc<str>, routing_key: Arc<str>) -> Route {
        Route::new(exchange, routing_key)
    }

    #[inline]
    fn is_route(route: &Route, exchange: &str, routing_key: &str) -> bool {
        route.is(exchange, routing_key)
    }

    #[inline]
    fn route_holders(record: &Published) -> usize {
        record.route.holders()
    }

    #[inline]
    fn set_route(record: &mut Published, route: Route) {
        record.route = route;
    }

    #[inline]
    fn message(record: &Published) -> &Message {
        &record.message
    }

    #[inline]
    fn exchange(record: &Published) -> &Arc<str> {
        record.route.exchange()
    }

    #[inline]
    fn routing_key(record: &Published) -> &Arc<str> {
        record.route.routing_key()
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
