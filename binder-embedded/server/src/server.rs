//! The listeners: accept connections (plain, and over TLS with a `[tls]` table), run each
//! one's handshake (the TLS one first) and life, and shut down gracefully (stop accepting,
//! close every connection with 320 CONNECTION_FORCED, flush, and end TLS sessions with
//! `close_notify`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use stream_engine::{Broker, BrokerConfig, Native};
use stream_store::{DEFAULT_DISK_FREE_LIMIT, DiskMonitor, DiskStore, StoreConfig};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

use crate::auth::Users;
use crate::config::{ConsumerTimeout, Limits, ServerConfig};
use crate::connection::Conn;
use crate::envelope::WireEnvelope;
use crate::error::ServerError;
use crate::handshake::{self, ConnectionSlot, Reader, Refused, Terms};
use crate::management::Listener;
use crate::registry::{ConnectionInfo, OpenConnections};

/// Imports the definitions file `path` before the server listens
/// ([`ServerConfig::load_definitions`]).
fn load_definitions<E: WireEnvelope>(
    shared: &Shared<E>,
    path: &std::path::Path,
) -> Result<(), ServerError> {
    let body = std::fs::read(path).map_err(|source| crate::ConfigError::Read {
        path: path.display().to_string(),
        source,
    })?;
    let count = crate::management::load_definitions(shared, &body).map_err(|reason| {
        crate::ConfigError::Invalid(format!("load_definitions {}: {reason}", path.display()))
    })?;
    tracing::info!(file = %path.display(), declarations = count, "definitions loaded");
    Ok(())
}

#[derive(Debug)]
pub(crate) struct Shared<E: WireEnvelope> {
    users: Users,
    limits: Limits,
    brokers: HashMap<String, Broker<E>>,
    open: Arc<AtomicUsize>,
    /// Who is connected, for the management API.
    pub(crate) listed: OpenConnections,
    /// The data directory whose free space blocks publishers, and the limit (a standalone
    /// server's `data_dir`), for the management API's node.
    disk_watch: std::sync::OnceLock<(std::path::PathBuf, u64)>,
}

impl<E: WireEnvelope> Shared<E> {
    /// Checks the configuration against the brokers and builds what every connection reads.
    pub(crate) fn new(
        config: &ServerConfig,
        brokers: HashMap<String, Broker<E>>,
    ) -> Result<Self, ServerError> {
        if config.data_dir.is_some()
            || config.durability.is_some()
            || config.disk_free_limit.is_some()
            || config.memory_paging_ratio.is_some()
        {
            return Err(crate::ConfigError::Invalid(
                "data_dir, durability, disk_free_limit and memory_paging_ratio belong to the brokers the standalone \
                 server creates; \
                 give the brokers passed to Server::bind their stores (Broker::with_store)"
                    .into(),
            )
            .into());
        }
        if config.memory_high_watermark.is_some() {
            return Err(crate::ConfigError::Invalid(
                "memory_high_watermark is set on the brokers passed to Server::bind, not in its configuration".into(),
            )
            .into());
        }
        if config.consumer_timeout.is_some() {
            return Err(crate::ConfigError::Invalid(
                "consumer_timeout is set on the brokers passed to Server::bind \
                 (BrokerConfig::consumer_timeout), not in its configuration"
                    .into(),
            )
            .into());
        }
        for vhost in &config.vhosts {
            if !brokers.contains_key(vhost) {
                return Err(ServerError::VhostMismatch {
                    vhost: vhost.clone(),
                    problem: "is configured but has no broker",
                });
            }
        }
        for vhost in brokers.keys() {
            if !config.vhosts.contains(vhost) {
                return Err(ServerError::VhostMismatch {
                    vhost: vhost.clone(),
                    problem: "has a broker but is not configured",
                });
            }
        }
        Ok(Shared {
            users: Users::from_config(config)?,
            limits: config.limits.clone(),
            brokers,
            open: Arc::new(AtomicUsize::new(0)),
            listed: OpenConnections::default(),
            disk_watch: std::sync::OnceLock::new(),
        })
    }

    /// The users, for the management API's logins.
    pub(crate) fn users(&self) -> &Users {
        &self.users
    }

    /// The limits (the management API's publish honours `max_message_size`).
    pub(crate) fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Each virtual host's broker.
    pub(crate) fn brokers(&self) -> &HashMap<String, Broker<E>> {
        &self.brokers
    }

    /// The time from accept to `connection.open-ok` (the TLS handshake included).
    pub(crate) fn handshake_timeout(&self) -> std::time::Duration {
        self.limits.handshake_timeout()
    }

    /// The data directory whose free space is watched, and its limit, if any.
    pub(crate) fn disk_watch(&self) -> Option<&(std::path::PathBuf, u64)> {
        self.disk_watch.get()
    }

    /// Connections open now (past their handshake).
    pub(crate) fn connections(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }
}

/// A running AMQP 0-9-1 listener over one engine broker per virtual host.
///
/// ```no_run
/// # async fn run() -> Result<(), stream_broker::ServerError> {
/// use stream_broker::{Server, ServerConfig};
/// let server = Server::standalone(ServerConfig::default()).await?;
/// println!("listening on {}", server.local_addr());
/// server.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Server<E: WireEnvelope = Native> {
    local_addr: SocketAddr,
    /// The TLS listener's address (`[tls]`), with the port chosen for port 0.
    tls_addr: Option<SocketAddr>,
    stop: watch::Sender<bool>,
    accept: JoinHandle<()>,
    shared: Arc<Shared<E>>,
    /// The stores of the brokers the server created ([`Server::standalone`] with
    /// `data_dir`), closed at shutdown.
    stores: Vec<DiskStore>,
    /// Blocks the stores' brokers' publishers while the disk is nearly full (`data_dir`'s
    /// `disk_free_limit`); stopped at shutdown.
    disk_monitor: Option<DiskMonitor>,
    /// The management listener (`[management]`).
    management: Option<crate::management::Management>,
}

impl Server<Native> {
    /// Binds a server that creates its own brokers, one per configured virtual host (with
    /// the configuration's `memory_high_watermark` and `consumer_timeout`). With `data_dir`, each broker keeps its
    /// durable entities and persistent messages in a [`DiskStore`] of its own (recovered
    /// before the server listens; closed cleanly by [`Server::shutdown`]).
    pub async fn standalone(config: ServerConfig) -> Result<Self, ServerError> {
        config.validate()?;
        let mut brokers = HashMap::new();
        let mut stores = Vec::new();
        for vhost in &config.vhosts {
            let mut engine = BrokerConfig {
                vhost: vhost.clone(),
                consumer_timeout: ConsumerTimeout::for_engine(config.consumer_timeout),
                ..BrokerConfig::default()
            };
            if let Some(watermark) = config.memory_high_watermark {
                engine.memory_high_watermark = Some(watermark);
            }
            if let Some(ratio) = config.memory_paging_ratio {
                engine.memory_paging_ratio = ratio;
            }
            let broker = match &config.data_dir {
                None => Broker::with_config(engine),
                Some(data_dir) => {
                    let store_config = StoreConfig {
                        mode: config.durability.unwrap_or_default(),
                        ..StoreConfig::default()
                    };
                    let (broker, store) = open_store(engine, data_dir, vhost, store_config)?;
                    stores.push(store);
                    broker
                }
            };
            brokers.insert(vhost.clone(), broker);
        }
        let mut disk_watch = None;
        let disk_monitor = match &config.data_dir {
            None => None,
            Some(data_dir) => {
                let limit = config.disk_free_limit.unwrap_or(DEFAULT_DISK_FREE_LIMIT);
                disk_watch = Some((data_dir.clone(), limit));
                let watched = brokers.values().cloned().collect();
                let monitor =
                    DiskMonitor::for_brokers(data_dir, limit, watched).map_err(|source| {
                        ServerError::DiskSpace {
                            dir: data_dir.clone(),
                            source,
                        }
                    })?;
                Some(monitor)
            }
        };
        let config = ServerConfig {
            memory_high_watermark: None,
            data_dir: None,
            durability: None,
            disk_free_limit: None,
            memory_paging_ratio: None,
            consumer_timeout: None,
            ..config
        };
        let mut server = Self::bind(config, brokers).await?;
        server.stores = stores;
        server.disk_monitor = disk_monitor;
        if let Some((dir, limit)) = disk_watch {
            server.watches_disk(dir, limit);
        }
        Ok(server)
    }
}

/// A vhost's broker over its store in `data_dir`, with what the store kept rebuilt.
fn open_store(
    engine: BrokerConfig,
    data_dir: &std::path::Path,
    vhost: &str,
    config: StoreConfig,
) -> Result<(Broker, DiskStore), ServerError> {
    let dir = crate::config::vhost_dir(data_dir, vhost);
    let failed = |source: Box<dyn std::error::Error + Send + Sync>| ServerError::Store {
        vhost: vhost.to_owned(),
        dir: dir.clone(),
        detail: error_chain(source.as_ref()),
        source,
    };
    let store = DiskStore::open(&dir, config).map_err(|e| failed(Box::new(e)))?;
    let broker = Broker::with_store(engine, store.clone()).map_err(|e| failed(Box::new(e)))?;
    tracing::info!(
        vhost,
        dir = %dir.display(),
        clean = store.started_clean(),
        truncated_bytes = store.truncated_at_start(),
        "message store opened"
    );
    Ok((broker, store))
}

/// An error and its sources, `: `-separated.
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

impl<E: WireEnvelope> Server<E> {
    /// Binds a server over these brokers, one per virtual host; the configuration's
    /// `vhosts` must name exactly them. `memory_high_watermark` belongs to brokers the
    /// server creates ([`Server::standalone`]) and is refused here: set it on the brokers.
    pub async fn bind(
        config: ServerConfig,
        brokers: HashMap<String, Broker<E>>,
    ) -> Result<Self, ServerError> {
        Self::bind_now(config, brokers)
    }

    /// [`Server::bind`] for a caller that cannot wait (a binder created from configuration):
    /// the socket is bound at once, and the server runs on the current Tokio runtime, which
    /// must exist (outside one this panics, as `tokio::spawn` does). The configuration is
    /// checked ([`ServerConfig::validate`]); with `[tls]`, its files are read and checked
    /// before anything is bound, and the TLS listener is bound too.
    pub fn bind_now(
        config: ServerConfig,
        brokers: HashMap<String, Broker<E>>,
    ) -> Result<Self, ServerError> {
        config.validate()?;
        let shared = Arc::new(Shared::new(&config, brokers)?);
        if let Some(path) = &config.load_definitions {
            load_definitions(&shared, path)?;
        }
        // The TLS files are read and checked before anything listens.
        let acceptor = match &config.tls {
            Some(tls) => Some(crate::tls::acceptor(tls)?),
            None => None,
        };
        let (listener, local_addr) = listen(config.listen).map_err(|source| ServerError::Bind {
            addr: config.listen,
            source,
        })?;
        let mut listeners = vec![Listener {
            protocol: "amqp",
            addr: local_addr,
            certificates: None,
        }];
        let tls = match (&config.tls, acceptor) {
            (Some(tls), Some((acceptor, served))) => {
                let (listener, addr) =
                    listen(tls.listen).map_err(|source| ServerError::BindTls {
                        addr: tls.listen,
                        source,
                    })?;
                listeners.push(Listener {
                    protocol: "amqp/ssl",
                    addr,
                    certificates: Some(served),
                });
                Some((listener, addr, acceptor))
            }
            _ => None,
        };
        let management = match &config.management {
            Some(m) => Some(
                listen(m.listen).map_err(|source| ServerError::BindManagement {
                    addr: m.listen,
                    source,
                })?,
            ),
            None => None,
        };
        let tls_addr = tls.as_ref().map(|(_, addr, _)| *addr);
        let tls = tls.map(|(listener, _, acceptor)| (listener, acceptor));
        let (stop, stop_rx) = watch::channel(false);
        let management = match (&config.management, management) {
            (Some(m), Some((listener, addr))) => {
                listeners.push(Listener {
                    protocol: "http",
                    addr,
                    certificates: None,
                });
                Some(crate::management::Management::start(
                    m,
                    listener,
                    addr,
                    listeners,
                    shared.clone(),
                    stop_rx.clone(),
                ))
            }
            _ => None,
        };
        let accept = tokio::spawn(accept_loop(listener, tls, shared.clone(), stop_rx));
        match tls_addr {
            Some(tls_addr) => tracing::info!(%local_addr, %tls_addr, "stream-broker listening"),
            None => tracing::info!(%local_addr, "stream-broker listening"),
        }
        Ok(Server {
            local_addr,
            tls_addr,
            stop,
            accept,
            shared,
            stores: Vec::new(),
            disk_monitor: None,
            management,
        })
    }

    /// Tells the management API (`/api/nodes`' `disk_free` and `disk_free_limit`) which
    /// data directory's free space blocks the brokers' publishers below `limit` bytes, for a
    /// caller that watches it itself (an embedded binder's `data-dir`; a standalone server
    /// with `data_dir` does it). The first call counts; later ones are ignored.
    pub fn watches_disk(&self, dir: impl Into<std::path::PathBuf>, limit: u64) {
        let _ = self.shared.disk_watch.set((dir.into(), limit));
    }

    /// The address the server listens on (with the port chosen when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The address the TLS listener listens on (`[tls]`'s `listen`, with the port chosen
    /// when bound to port 0); `None` without a `[tls]` table.
    pub fn tls_addr(&self) -> Option<SocketAddr> {
        self.tls_addr
    }

    /// Connections open now (past their handshake).
    pub fn connections(&self) -> usize {
        self.shared.connections()
    }

    /// The address the HTTP management API listens on (`[management]`'s `listen`, with
    /// the port chosen when bound to port 0); `None` without a `[management]` table.
    pub fn management_addr(&self) -> Option<SocketAddr> {
        self.management.as_ref().map(|m| m.addr)
    }

    /// Successful syncs of the message stores this server opened ([`Server::standalone`]
    /// with `data_dir`), summed over its virtual hosts' stores (see `DiskStore::syncs`);
    /// 0 without a data dir.
    pub fn store_syncs(&self) -> u64 {
        self.stores.iter().map(DiskStore::syncs).sum()
    }

    /// Stops accepting, closes every connection with 320 CONNECTION_FORCED (waiting briefly
    /// for each client's close-ok), flushes, and returns once every connection has ended.
    pub async fn shutdown(self) {
        self.stop.send_replace(true);
        let _ = self.accept.await;
        if let Some(management) = self.management {
            management.stopped().await;
        }
        drop(self.disk_monitor);
        for store in &self.stores {
            // Everything is written and synced, and the clean-shutdown marker spares the
            // next start a full scan.
            if let Err(e) = store.close() {
                tracing::error!(dir = %store.dir().display(), error = %error_chain(&e), "message store did not close cleanly");
            }
        }
        tracing::info!(local_addr = %self.local_addr, "stream-broker stopped");
    }
}

/// A listening socket bound with the standard library (binding does not block), handed to
/// Tokio, and the address it got.
fn listen(addr: SocketAddr) -> std::io::Result<(TcpListener, SocketAddr)> {
    let listener = std::net::TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    let listener = TcpListener::from_std(listener)?;
    let local_addr = listener.local_addr()?;
    Ok((listener, local_addr))
}

/// The next connection on the TLS listener; never resolves without one.
async fn accept_tls(
    tls: &Option<(TcpListener, TlsAcceptor)>,
) -> std::io::Result<(TcpStream, SocketAddr, TlsAcceptor)> {
    match tls {
        Some((listener, acceptor)) => {
            let (socket, peer) = listener.accept().await?;
            Ok((socket, peer, acceptor.clone()))
        }
        None => std::future::pending().await,
    }
}

async fn accept_loop<E: WireEnvelope>(
    listener: TcpListener,
    tls: Option<(TcpListener, TlsAcceptor)>,
    shared: Arc<Shared<E>>,
    mut stop: watch::Receiver<bool>,
) {
    let mut connections = JoinSet::new();
    let failed = |e: std::io::Error, tls: bool| async move {
        tracing::warn!(error = %e, tls, "accept failed");
        // Out of descriptors and the like: do not spin.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    loop {
        tokio::select! {
            _ = stopped(&mut stop) => break,
            accepted = listener.accept() => match accepted {
                Ok((socket, peer)) => {
                    connections.spawn(connection(socket, peer, shared.clone(), stop.clone()));
                }
                Err(e) => failed(e, false).await,
            },
            accepted = accept_tls(&tls) => match accepted {
                Ok((socket, peer, acceptor)) => {
                    connections.spawn(tls_connection(
                        socket,
                        peer,
                        acceptor,
                        shared.clone(),
                        stop.clone(),
                    ));
                }
                Err(e) => failed(e, true).await,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    drop(tls);
    while connections.join_next().await.is_some() {}
}

async fn connection<E: WireEnvelope>(
    socket: TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared<E>>,
    stop: watch::Receiver<bool>,
) {
    let deadline = Instant::now() + shared.limits.handshake_timeout();
    let _ = socket.set_nodelay(true);
    let local = socket.local_addr().unwrap_or(peer);
    let (read, write) = socket.into_split();
    serve(read, write, (peer, local), shared, stop, deadline, None).await;
}

/// What a connection's log lines say about its TLS session.
#[derive(Debug)]
pub(crate) struct TlsSession {
    /// `TLSv1_2` or `TLSv1_3`.
    version: String,
    /// Whether the client gave a certificate (checked against `cacertfile`).
    client_certificate: bool,
}

/// A connection on the TLS listener: the TLS handshake, then AMQP over it. The TLS
/// handshake counts toward the handshake timeout. A failed one closes this connection
/// only, with one log line naming the peer.
async fn tls_connection<E: WireEnvelope>(
    socket: TcpStream,
    peer: SocketAddr,
    acceptor: TlsAcceptor,
    shared: Arc<Shared<E>>,
    mut stop: watch::Receiver<bool>,
) {
    let deadline = Instant::now() + shared.limits.handshake_timeout();
    let _ = socket.set_nodelay(true);
    let local = socket.local_addr().unwrap_or(peer);
    let accept = tokio::time::timeout_at(deadline, acceptor.accept(socket));
    let stream = tokio::select! {
        _ = stopped(&mut stop) => return,
        accepted = accept => match accepted {
            Err(_) => {
                tracing::info!(%peer, "closing connection: TLS handshake timeout");
                return;
            }
            Ok(Err(e)) => {
                let hint = if e.to_string().contains("InvalidContentType") {
                    " (not TLS: a plain AMQP client on the TLS port?)"
                } else {
                    ""
                };
                tracing::warn!(%peer, error = %e, "TLS handshake failed{hint}");
                return;
            }
            Ok(Ok(stream)) => stream,
        },
    };
    let session = {
        let (_, session) = stream.get_ref();
        TlsSession {
            version: session
                .protocol_version()
                .and_then(|v| v.as_str())
                .unwrap_or("TLS")
                .to_owned(),
            client_certificate: session.peer_certificates().is_some_and(|c| !c.is_empty()),
        }
    };
    // Shutting the write half down sends the TLS close_notify, then closes the socket.
    let (read, write) = tokio::io::split(stream);
    serve(
        read,
        write,
        (peer, local),
        shared,
        stop,
        deadline,
        Some(session),
    )
    .await;
}

/// One connection's handshake and life over any transport.
pub(crate) async fn serve<E: WireEnvelope>(
    read: impl AsyncRead + Send + Unpin + 'static,
    write: impl AsyncWrite + Send + Unpin + 'static,
    (peer, local): (SocketAddr, SocketAddr),
    shared: Arc<Shared<E>>,
    mut stop: watch::Receiver<bool>,
    deadline: Instant,
    tls: Option<TlsSession>,
) {
    // Every octet counted, the handshake's too (the management API's `recv_oct`, `send_oct`).
    let traffic = crate::traffic::Traffic::default();
    let mut write = traffic.writing(write);
    let mut reader = Reader::new(traffic.reading(read), shared.limits.frame_max as usize);
    let vhost_exists = |v: &str| shared.brokers.contains_key(v);
    let max = shared.limits.max_connections;
    let take_slot = || ConnectionSlot::take(&shared.open, max);
    let terms = Terms {
        users: &shared.users,
        limits: &shared.limits,
        vhost_exists: &vhost_exists,
        take_slot: &take_slot,
    };
    let handshake = tokio::time::timeout_at(
        deadline,
        handshake::run(&mut reader, &mut write, peer, &terms),
    );
    let mut agreed = tokio::select! {
        _ = stopped(&mut stop) => return,
        result = handshake => match result {
            Err(_) => {
                tracing::info!(%peer, "closing connection: handshake timeout");
                return;
            }
            Ok(Err(Refused::Closed(close))) => {
                tracing::info!(%peer, reason = %close.reply_text(), "refused connection");
                handshake::close(&mut reader, &mut write, &close).await;
                return;
            }
            Ok(Err(e)) => {
                tracing::info!(%peer, reason = %e, "refused connection");
                return;
            }
            Ok(Ok(agreed)) => agreed,
        },
    };
    let user = agreed.user.name.clone();
    let vhost = agreed.vhost.clone();
    let Some(broker) = shared.brokers.get(&vhost).cloned() else {
        return;
    };
    let listed = shared.listed.list(ConnectionInfo {
        peer,
        local,
        user: user.clone(),
        vhost: vhost.clone(),
        tls: tls.as_ref().map(|t| t.version.clone()),
        connected_at: std::time::SystemTime::now(),
        mechanism: agreed.mechanism.clone(),
        client_properties: std::mem::take(&mut agreed.client_properties),
        frame_max: agreed.frame_max,
        channel_max: agreed.channel_max,
        heartbeat: agreed.heartbeat,
        traffic,
    });
    // Listed before the client hears it is open: the management API shows it from then on.
    match tokio::time::timeout_at(deadline, handshake::open_ok(&mut write)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::info!(%peer, reason = %e, "connection lost before connection.open-ok");
            return;
        }
        Err(_) => {
            tracing::info!(%peer, "closing connection: handshake timeout");
            return;
        }
    }
    let tags = agreed.user.tags.join(",");
    match &tls {
        Some(t) => tracing::info!(
            %peer, %user, %vhost, %tags, tls = %t.version, client_certificate = t.client_certificate,
            "connection opened"
        ),
        None => tracing::info!(%peer, %user, %vhost, %tags, "connection opened"),
    }
    let ended = Conn::serve(
        agreed,
        reader,
        write,
        (peer, listed.listing.clone()),
        broker,
        shared.limits.max_message_size,
        stop,
    )
    .await;
    tracing::info!(%peer, %user, %vhost, reason = %ended, "connection closed");
}

/// Resolves once the stop signal is set (or its sender is gone).
pub(crate) async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}
