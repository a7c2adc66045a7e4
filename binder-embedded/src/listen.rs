//! `spring.embedded.listen`: the embedded binder's in-process broker served on the network
//! by `stream-broker`'s server (the code the standalone `stream-broker` runs), so one service
//! hosts the broker and services in other processes reach it with the `rabbit` binder.
//! A `[tls]` table in `spring.embedded.server-config` adds the server's TLS listener (at its
//! `tls.listen`), the same code path as the standalone server's; a `[management]` table
//! adds its HTTP management API and page (at its `management.listen`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use binder_core::binder::{BinderError, BinderResult};
use stream_broker::{Server, ServerConfig};

use crate::Framework;
use crate::engine::Broker;
use crate::settings::{EmbeddedSettings, PREFIX};

/// A binder's listener, shared by the clones of the binder (and, for the broker every binder
/// created from configuration shares, by all of them).
#[derive(Debug, Default)]
pub(crate) struct Listener {
    running: Mutex<Option<Running>>,
}

#[derive(Debug)]
struct Running {
    /// The address as configured (port 0 stays 0 here).
    asked: SocketAddr,
    server: Server<Framework>,
}

impl Listener {
    /// Serves `broker` as the settings say, unless it is served already. The broker shared
    /// by every binder created from configuration is served once: a second configuration
    /// asking for another address is refused, since one of them would not get it.
    pub(crate) fn serve(&self, broker: &Broker, settings: &EmbeddedSettings) -> BinderResult<()> {
        let Some(asked) = settings.listen else {
            return Ok(());
        };
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = running.as_ref() {
            return if r.asked == asked {
                Ok(())
            } else {
                Err(BinderError::config(format!(
                    "`{PREFIX}.listen` is {asked} here, but the broker is served on {} already \
                     (another embedded binder configuration of this process set it); every \
                     `embedded` binder created from configuration shares one broker, so give \
                     the address in one of them only",
                    r.asked
                )))
            };
        }
        let config = server_config(settings, asked)?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(BinderError::config(format!(
                "`{PREFIX}.listen` serves the broker on the application's Tokio runtime, \
                 but this binder was created outside one"
            )));
        }
        let brokers = HashMap::from([("/".to_owned(), broker.clone())]);
        let server = Server::bind_now(config, brokers)
            .map_err(|e| BinderError::config(format!("`{PREFIX}.listen`: {e}")).with_source(e))?;
        if let Some(dir) = &settings.data_dir {
            // The binder watches its data directory's free space itself.
            let limit = settings
                .disk_free_limit
                .unwrap_or(stream_store::DEFAULT_DISK_FREE_LIMIT);
            server.watches_disk(dir.clone(), limit);
        }
        match server.tls_addr() {
            Some(tls_address) => tracing::info!(
                address = %server.local_addr(),
                %tls_address,
                "embedded broker served on the network (AMQP 0-9-1, and over TLS at tls_address)"
            ),
            None => tracing::info!(
                address = %server.local_addr(),
                "embedded broker served on the network (AMQP 0-9-1)"
            ),
        }
        *running = Some(Running { asked, server });
        Ok(())
    }

    /// Where the broker is served, if it is (with the port chosen for port 0).
    pub(crate) fn local_addr(&self) -> Option<SocketAddr> {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        running.as_ref().map(|r| r.server.local_addr())
    }

    /// Where the broker is served over TLS (the server file's `[tls]` table), if it is.
    pub(crate) fn tls_addr(&self) -> Option<SocketAddr> {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        running.as_ref().and_then(|r| r.server.tls_addr())
    }

    /// Where the broker's HTTP management API is served (the server file's `[management]`
    /// table), if it is.
    pub(crate) fn management_addr(&self) -> Option<SocketAddr> {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        running.as_ref().and_then(|r| r.server.management_addr())
    }

    /// Stops serving: closes every network connection with 320 CONNECTION_FORCED.
    pub(crate) async fn stop(&self) {
        let running = self
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(r) = running {
            r.server.shutdown().await;
        }
    }
}

/// The server's configuration: `server-config`'s file (or the defaults: `guest`/`guest` from
/// loopback only), listening at `listen` (and, with the file's `[tls]` table, over TLS at its
/// `tls.listen`), serving the binder's one broker as vhost `/`.
fn server_config(settings: &EmbeddedSettings, listen: SocketAddr) -> BinderResult<ServerConfig> {
    let mut config = match &settings.server_config {
        Some(path) => ServerConfig::from_file(path).map_err(|e| {
            BinderError::config(format!("`{PREFIX}.server-config`: {e}")).with_source(e)
        })?,
        None => ServerConfig::default(),
    };
    if config.vhosts != ["/"] {
        return Err(BinderError::config(format!(
            "`{PREFIX}.server-config` names the virtual hosts {:?}; the embedded binder serves \
             its one broker as `/` (a standalone `stream-broker` serves several)",
            config.vhosts
        )));
    }
    if config.memory_high_watermark.is_some() {
        return Err(BinderError::config(format!(
            "`{PREFIX}.server-config` sets memory_high_watermark; the embedded binder's broker \
             takes `{PREFIX}.memory-high-watermark`"
        )));
    }
    for (set, file_key, binder_key) in [
        // The settings that need `data_dir` first, so that each is named.
        (config.durability.is_some(), "durability", "durability"),
        (
            config.disk_free_limit.is_some(),
            "disk_free_limit",
            "disk-free-limit",
        ),
        (config.data_dir.is_some(), "data_dir", "data-dir"),
    ] {
        if set {
            return Err(BinderError::config(format!(
                "`{PREFIX}.server-config` sets {file_key}; the embedded binder's broker takes \
                 `{PREFIX}.{binder_key}`"
            )));
        }
    }
    config.listen = listen;
    Ok(config)
}

/// Where the settings serve the broker: its AMQP address, then its TLS address if the
/// server configuration has one (none without `listen`). Port 0 stays 0: it is chosen when
/// the listener starts.
pub(crate) fn served_at(settings: &EmbeddedSettings) -> BinderResult<Vec<(SocketAddr, bool)>> {
    let Some(asked) = settings.listen else {
        return Ok(Vec::new());
    };
    let config = server_config(settings, asked)?;
    let mut at = vec![(config.listen, false)];
    at.extend(config.tls.map(|tls| (tls.listen, true)));
    Ok(at)
}

/// The listener of the broker every binder created from configuration shares.
pub(crate) fn shared() -> Arc<Listener> {
    static SHARED: std::sync::LazyLock<Arc<Listener>> = std::sync::LazyLock::new(Default::default);
    SHARED.clone()
}
