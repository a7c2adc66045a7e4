//! The `embedded` binder and its broker engine: RabbitMQ semantics inside the process.
//!
//! The engine is usable on its own as a library ([`engine::Broker`]); [`EmbeddedBinder`]
//! implements the binder SPI on it and registers itself as binder type `embedded`.

mod binder;
pub mod engine;
mod settings;

pub use binder::{EmbeddedBinder, link};
pub use settings::{EmbeddedSettings, MemoryWatermark};
