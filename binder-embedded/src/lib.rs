//! The `embedded` binder and its broker engine: RabbitMQ semantics inside the process.
//!
//! The engine is its own crate, `stream-engine`, which knows nothing of the framework. The
//! binder runs it with the [`Framework`] envelope, so that its queues hold the framework's own
//! records and a delivery hands the runtime the record the engine holds, unconverted.
//! [`engine`] re-exports the engine with its handles bound to that envelope, so that
//! `binder_embedded::engine::Broker` is the broker an [`EmbeddedBinder`] runs on.
//! [`EmbeddedBinder`] implements the binder SPI and registers itself as binder type
//! `embedded`.

mod binder;
mod envelope;
mod listen;
mod settings;

pub use envelope::Framework;

/// The README's examples, compiled as doctests so they cannot go stale.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// The broker engine (`stream-engine`) with its handles bound to the [`Framework`] envelope:
/// publishers hand over binder-core [`Message`](binder_core::Message)s and deliveries carry
/// binder-core [`Published`](binder_core::binder::Published) records. Everything else
/// (options, field tables, errors, the store seam) is the engine's own.
pub mod engine {
    pub use stream_engine::*;

    use crate::Framework;

    /// The broker, holding framework records.
    pub type Broker = stream_engine::Broker<Framework>;
    /// A connection to a [`Broker`].
    pub type Connection = stream_engine::Connection<Framework>;
    /// A channel of a [`Connection`].
    pub type Channel = stream_engine::Channel<Framework>;
    /// A consumer's deliveries.
    pub type Consumer = stream_engine::Consumer<Framework>;
    /// A delivery of a framework record.
    pub type Delivery = stream_engine::Delivery<Framework>;
    /// A `basic.get` result.
    pub type GetOk = stream_engine::GetOk<Framework>;
    /// What a publish that does not wait did.
    pub type TryPublish = stream_engine::TryPublish<Framework>;
    /// A channel notification.
    pub type ChannelEvent = stream_engine::ChannelEvent<Framework>;
    /// A channel's notifications.
    pub type ChannelEvents = stream_engine::ChannelEvents<Framework>;
}

pub use binder::{EmbeddedBinder, link};
pub use settings::{EmbeddedSettings, MemoryWatermark};
