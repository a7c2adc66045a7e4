//! `stream-broker`: an AMQP 0-9-1 listener in front of the [`stream_engine`] broker.
//!
//! A [`Server`] accepts TCP connections and speaks AMQP 0-9-1 to them as RabbitMQ does
//! (connection handshake with SASL `PLAIN`/`AMQPLAIN`, tune, heartbeats, channels, exchanges,
//! queues, basic, confirm, tx), driving one engine [`Broker`](stream_engine::Broker) per
//! virtual host. Users, permissions and limits come from a [`ServerConfig`]; the standalone
//! `stream-broker` binary reads one from a TOML file, a service embedding the engine passes
//! its own brokers to [`Server::bind`].
//!
//! Modules, one concept each:
//! * [`config`]: what the server is told (listen address, vhosts, users, limits) and its TOML
//!   form;
//! * [`auth`]: SASL mechanisms, password hashes, permissions and the loopback rule;
//! * `wire`: frames on the socket (decoding with the size limit, encoding with body
//!   splitting);
//! * `convert`: engine messages and field tables to and from amq-protocol's types;
//! * [`envelope`]: how a broker's records become wire messages ([`WireEnvelope`]);
//! * `handshake`, `connection`, `channel`, `consumer`: one connection's life;
//! * [`server`]: the listeners (plain, TLS and management) and graceful shutdown;
//! * `registry`: the connections open now (for the management API);
//! * `traffic`: the octets each connection's socket carried;
//! * `management`: the HTTP management API (RabbitMQ's paths and shapes) and page;
//! * [`tls`]: the TLS listener's certificate, key, client verification and versions
//!   (rustls);
//! * `fuzzing` (hidden): what the fuzz targets in `fuzz/` drive.

pub mod auth;
mod channel;
pub mod config;
mod connection;
mod consumer;
mod convert;
pub mod envelope;
mod error;
#[doc(hidden)]
pub mod fuzzing;
mod handshake;
mod management;
mod registry;
mod reply;
pub mod server;
pub mod tls;
mod traffic;
mod wire;

pub use config::{
    ConfigError, ConsumerTimeout, DEFAULT_CONSUMER_TIMEOUT, Limits, ManagementConfig,
    PermissionConfig, ServerConfig, TlsConfig, TlsVerify, TlsVersion, UserConfig,
};
pub use envelope::WireEnvelope;
pub use error::ServerError;
pub use server::Server;
