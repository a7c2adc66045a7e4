//! How a broker's records become wire messages and wire messages become what its publishers
//! hand over: the one thing the server needs of an [`Envelope`] beyond the engine's trait.

use std::borrow::Cow;

use stream_engine::{Envelope, Message, Native};

/// An [`Envelope`] the server can serve: it builds the envelope's message from a message read
/// off the wire, and reads a record as a wire message. The engine's [`Native`] envelope is
/// one; a front end with its own records (the `embedded` binder) implements it on its marker
/// type to put its in-process broker on the network.
pub trait WireEnvelope: Envelope {
    /// What `basic.publish` hands the broker, from the message a client published.
    fn from_wire(message: Message) -> Self::Message;
    /// A record's message in the engine's types, to encode as a delivery (borrowed when the
    /// record holds one).
    fn to_wire(record: &Self::Record) -> Cow<'_, Message>;
}

impl WireEnvelope for Native {
    fn from_wire(message: Message) -> Message {
        message
    }

    fn to_wire(record: &stream_engine::Published) -> Cow<'_, Message> {
        Cow::Borrowed(&record.message)
    }
}
