//! The `embedded` binder's broker engine: RabbitMQ semantics inside the process.
//!
//! The engine is usable on its own as a library ([`engine::Broker`]); the binder on top of it
//! arrives with the runtime.

pub mod engine;
