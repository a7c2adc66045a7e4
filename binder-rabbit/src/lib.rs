//! The `rabbit` binder: AMQP 0-9-1 servers (RabbitMQ) through `lapin`.
//!
//! Registered as binder type `rabbit`; connection settings are Spring Boot's
//! `spring.rabbitmq.*` ([`RabbitSettings`]).

mod binder;
mod convert;
mod settings;

pub use binder::{RabbitBinder, link};
pub use settings::RabbitSettings;
