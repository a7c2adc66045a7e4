//! The connections open now, as the management API lists and closes them
//! (`/api/connections`, `/api/channels`): who, from where, on which virtual host, since when,
//! with which channels; and the request to close one.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use stream_engine::FieldTable;
use tokio::sync::watch;

/// One open connection, as its handshake agreed it.
#[derive(Debug, Clone)]
pub(crate) struct ConnectionInfo {
    pub peer: SocketAddr,
    pub local: SocketAddr,
    pub user: String,
    pub vhost: String,
    /// The TLS version (`TLSv1_3`), for a connection on the TLS listener.
    pub tls: Option<String>,
    pub connected_at: SystemTime,
    /// The SASL mechanism the client logged in with (`PLAIN`, `AMQPLAIN`, `EXTERNAL`).
    pub mechanism: String,
    /// What the client said of itself in `connection.start-ok`.
    pub client_properties: FieldTable,
    pub frame_max: usize,
    pub channel_max: u16,
    /// The heartbeat interval in seconds (0: none).
    pub heartbeat: u16,
    /// The octets its socket carried.
    pub traffic: crate::traffic::Traffic,
}

impl ConnectionInfo {
    /// RabbitMQ's name for the connection: `peer -> local`.
    pub(crate) fn name(&self) -> String {
        format!("{} -> {}", self.peer, self.local)
    }
}

/// One of a connection's open channels.
#[derive(Debug, Clone)]
pub(crate) struct ListedChannel {
    /// The engine channel's id ([`stream_engine::Channel::id`]).
    pub engine_id: u64,
    /// Publishes in confirm mode whose confirm is not sent yet (waiting for the store).
    pub unconfirmed: Arc<AtomicUsize>,
    /// Publishes confirmed with an ack since the channel opened (RabbitMQ's `confirm`).
    pub confirmed: Arc<AtomicU64>,
}

/// A listed connection: what it agreed, its channels by number, and a close request.
#[derive(Debug)]
pub(crate) struct Listing {
    pub info: ConnectionInfo,
    /// [`ConnectionInfo::name`], made once.
    name: String,
    channels: Mutex<BTreeMap<u16, ListedChannel>>,
    /// Set to the reason when somebody asks the connection to close.
    close: watch::Sender<Option<String>>,
    /// The connection is closing: it serves nothing more and leaves the list shortly.
    closing: AtomicBool,
    /// A publish of the connection is held back by an alarm: it reads nothing meanwhile.
    blocked: AtomicBool,
}

impl Listing {
    /// The connection's name (`peer -> local`).
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Marks the connection as closing.
    pub(crate) fn set_closing(&self) {
        self.closing.store(true, Ordering::Relaxed);
    }

    /// Records whether an alarm holds a publish of the connection back.
    pub(crate) fn set_blocked(&self, blocked: bool) {
        self.blocked.store(blocked, Ordering::Relaxed);
    }

    /// RabbitMQ's connection state: `closing`, `blocked` (a publish held back by an alarm),
    /// else `running`.
    pub(crate) fn state(&self) -> &'static str {
        if self.closing.load(Ordering::Relaxed) {
            "closing"
        } else if self.blocked.load(Ordering::Relaxed) {
            "blocked"
        } else {
            "running"
        }
    }

    /// How many channels are open.
    pub(crate) fn channel_count(&self) -> usize {
        self.channels_lock().len()
    }

    fn channels_lock(&self) -> MutexGuard<'_, BTreeMap<u16, ListedChannel>> {
        self.channels.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Lists a channel opened on the connection.
    pub(crate) fn open_channel(&self, number: u16, channel: ListedChannel) {
        self.channels_lock().insert(number, channel);
    }

    /// Takes a closed channel off the list.
    pub(crate) fn close_channel(&self, number: u16) {
        self.channels_lock().remove(&number);
    }

    /// The open channels, by number.
    pub(crate) fn channels(&self) -> Vec<(u16, ListedChannel)> {
        self.channels_lock()
            .iter()
            .map(|(n, c)| (*n, c.clone()))
            .collect()
    }

    /// Asks the connection to close with 320 CONNECTION_FORCED and this reason (the first
    /// request's reason is kept).
    pub(crate) fn request_close(&self, reason: String) {
        self.close.send_if_modified(|r| {
            if r.is_none() {
                *r = Some(reason);
                true
            } else {
                false
            }
        });
    }

    /// Where the connection hears close requests.
    pub(crate) fn close_requests(&self) -> CloseRequests {
        CloseRequests(self.close.subscribe())
    }
}

/// A connection's end of [`Listing::request_close`].
#[derive(Debug)]
pub(crate) struct CloseRequests(watch::Receiver<Option<String>>);

impl CloseRequests {
    /// Resolves with the reason once a close is requested.
    pub(crate) async fn requested(&mut self) -> String {
        let reason = self
            .0
            .wait_for(Option::is_some)
            .await
            .map(|r| r.clone().unwrap_or_default());
        match reason {
            Ok(reason) => reason,
            // The listing (and so the sender) is gone: nobody can ask any more.
            Err(_) => std::future::pending().await,
        }
    }
}

/// Every open connection, by an id of its own.
#[derive(Debug, Default)]
pub(crate) struct OpenConnections {
    next: AtomicU64,
    open: Mutex<BTreeMap<u64, Arc<Listing>>>,
}

/// Keeps a connection listed until dropped.
#[derive(Debug)]
pub(crate) struct Listed<'a> {
    id: u64,
    registry: &'a OpenConnections,
    /// The connection's entry, which its owner updates.
    pub listing: Arc<Listing>,
}

impl Drop for Listed<'_> {
    fn drop(&mut self) {
        self.registry.lock().remove(&self.id);
    }
}

impl OpenConnections {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<u64, Arc<Listing>>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Lists a connection while the guard lives.
    pub(crate) fn list(&self, info: ConnectionInfo) -> Listed<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let listing = Arc::new(Listing {
            name: info.name(),
            info,
            channels: Mutex::default(),
            close: watch::Sender::new(None),
            closing: AtomicBool::new(false),
            blocked: AtomicBool::new(false),
        });
        self.lock().insert(id, listing.clone());
        Listed {
            id,
            registry: self,
            listing,
        }
    }

    /// The open connections, oldest first.
    pub(crate) fn snapshot(&self) -> Vec<Arc<Listing>> {
        self.lock().values().cloned().collect()
    }

    /// The open connection of this name (`peer -> local`).
    pub(crate) fn named(&self, name: &str) -> Option<Arc<Listing>> {
        self.lock().values().find(|l| l.name == name).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> ConnectionInfo {
        ConnectionInfo {
            peer: SocketAddr::from(([127, 0, 0, 1], 40000)),
            local: SocketAddr::from(([127, 0, 0, 1], 5673)),
            user: "guest".into(),
            vhost: "/".into(),
            tls: None,
            connected_at: SystemTime::now(),
            mechanism: "PLAIN".into(),
            client_properties: FieldTable::new(),
            frame_max: 131072,
            channel_max: 2047,
            heartbeat: 60,
            traffic: Default::default(),
        }
    }

    #[tokio::test]
    async fn a_listed_connection_is_found_by_name_and_asked_to_close_once() {
        let open = OpenConnections::default();
        let listed = open.list(info());
        let found = open.named("127.0.0.1:40000 -> 127.0.0.1:5673").unwrap();
        assert!(Arc::ptr_eq(&found, &listed.listing));
        found.open_channel(
            1,
            ListedChannel {
                engine_id: 7,
                unconfirmed: Arc::default(),
                confirmed: Arc::default(),
            },
        );
        assert_eq!(listed.listing.channels()[0].1.engine_id, 7);
        let mut requests = listed.listing.close_requests();
        found.request_close("first".into());
        found.request_close("second".into());
        assert_eq!(requests.requested().await, "first");
        drop(listed);
        assert!(open.named("127.0.0.1:40000 -> 127.0.0.1:5673").is_none());
        assert!(open.snapshot().is_empty());
    }
}
