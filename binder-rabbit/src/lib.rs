//! The `rabbit` binder: AMQP 0-9-1 servers (RabbitMQ) through `lapin`.
//!
//! Registered as binder type `rabbit`; connection settings are Spring Boot's
//! `spring.rabbitmq.*` ([`RabbitSettings`]).

mod admin;
mod binder;
mod keys;
mod settings;
mod tls;

pub use admin::{Kept, PeekedMessage, Replay, origin};
pub use binder::{RabbitBinder, link};
pub use settings::{RabbitSettings, uri_component};
pub use tls::{KeyStore, TlsSettings, TlsVersion, TrustStore};

/// The README's examples, compiled as doctests so they cannot go stale.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
