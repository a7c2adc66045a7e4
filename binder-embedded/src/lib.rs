//! The `embedded` binder and its broker engine: RabbitMQ semantics inside the process.
//!
//! The engine is its own crate, `stream-engine`, which knows nothing of the framework; it is
//! re-exported here as [`engine`] so that `binder_embedded::engine::Broker` keeps working.
//! [`EmbeddedBinder`] implements the binder SPI on it and registers itself as binder type
//! `embedded`; it converts between the framework's messages and the engine's at its edge
//! (see the `convert` module).

mod binder;
mod convert;
mod settings;

/// The broker engine (the `stream-engine` crate).
pub use stream_engine as engine;

pub use binder::{EmbeddedBinder, link};
pub use settings::{EmbeddedSettings, MemoryWatermark};
