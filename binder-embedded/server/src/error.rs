//! The server's own errors (a refused configuration, a listener that cannot bind).

use std::io;

/// Why a [`Server`](crate::Server) could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// A configured virtual host has no broker, or a broker was given for a virtual host the
    /// configuration does not name.
    #[error("virtual host '{vhost}' {problem}")]
    VhostMismatch {
        /// The virtual host.
        vhost: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// A virtual host's message store could not be opened or recovered.
    #[error("virtual host '{vhost}': cannot open its message store in {dir}: {detail}")]
    Store {
        /// The virtual host.
        vhost: String,
        /// The store's directory.
        dir: std::path::PathBuf,
        /// What went wrong.
        detail: String,
        /// The store's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The free space of the data directory's file system cannot be measured (for the
    /// free-disk watermark).
    #[error("cannot measure the free disk space of data_dir {dir}: {source}")]
    DiskSpace {
        /// The data directory.
        dir: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The TLS listener's files could not be used (`[tls]`: certfile, keyfile, cacertfile).
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    /// The TLS listen address (`tls.listen`) could not be bound.
    #[error("cannot listen for TLS (tls.listen) on {addr}: {source}")]
    BindTls {
        /// The address.
        addr: std::net::SocketAddr,
        /// The system's error.
        source: io::Error,
    },
    /// The management listen address (`management.listen`) could not be bound.
    #[error("cannot listen for the management API (management.listen) on {addr}: {source}")]
    BindManagement {
        /// The address.
        addr: std::net::SocketAddr,
        /// The system's error.
        source: io::Error,
    },
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: std::net::SocketAddr,
        /// The system's error.
        source: io::Error,
    },
}
