//! The connections open now, as the management API lists them (`/api/connections`): who,
//! from where, on which virtual host, since when.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

/// One open connection.
#[derive(Debug, Clone)]
pub(crate) struct ConnectionInfo {
    pub peer: SocketAddr,
    pub local: SocketAddr,
    pub user: String,
    pub vhost: String,
    /// The TLS version (`TLSv1_3`), for a connection on the TLS listener.
    pub tls: Option<String>,
    pub connected_at: SystemTime,
}

/// Every open connection, by an id of its own.
#[derive(Debug, Default)]
pub(crate) struct OpenConnections {
    next: AtomicU64,
    open: Mutex<BTreeMap<u64, ConnectionInfo>>,
}

/// Keeps a connection listed until dropped.
#[derive(Debug)]
pub(crate) struct Listed<'a> {
    id: u64,
    registry: &'a OpenConnections,
}

impl Drop for Listed<'_> {
    fn drop(&mut self) {
        self.registry.lock().remove(&self.id);
    }
}

impl OpenConnections {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, ConnectionInfo>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Lists a connection while the guard lives.
    pub(crate) fn list(&self, info: ConnectionInfo) -> Listed<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(id, info);
        Listed { id, registry: self }
    }

    /// The open connections, oldest first.
    pub(crate) fn snapshot(&self) -> Vec<ConnectionInfo> {
        self.lock().values().cloned().collect()
    }
}
