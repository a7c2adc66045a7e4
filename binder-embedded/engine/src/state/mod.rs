//! The broker's state, split by concern, and the operations on it.
//!
//! All state sits behind one lock (see [`crate::Broker`]): each operation runs to
//! completion, so cross-queue effects (routing, dead-lettering, transactions, exclusive-queue
//! cleanup) are atomic without further care. The data lives in one module per concern, each
//! with the `impl` that keeps it consistent:
//!
//! * [`registry`]: exchanges, queues and bindings, and routing through them;
//! * [`sessions`]: connections, channels (tags, unacknowledged deliveries, prefetch, confirms,
//!   transactions) and consumers;
//! * [`work`]: what an operation leaves to do before and after the lock is released;
//! * [`accounting`]: the memory count behind the memory high watermark.
//!
//! [`State`] ties them together with the broker's settings and its message store
//! ([`crate::store`]), which it keeps informed under the lock (the store only hands work
//! off) and rebuilds from at start ([`State::recover`]). The AMQP
//! operations touch several concerns at once (a publish routes through the registry, counts
//! memory, tells the store, and queues dispatch work), so they are methods of [`State`], one
//! module per group of methods: [`declare`], [`publish`], [`consume`], [`settle`], [`expiry`].

mod accounting;
mod ack_timeout;
mod consume;
mod declare;
mod expiry;
mod inspect;
mod operate;
mod paging;
mod policies;
mod publish;
mod recover;
mod registry;
mod route_cache;
mod sessions;
mod settle;
mod unacked;
mod work;

use std::sync::Arc;

use self::accounting::MemoryCount;
#[cfg(test)]
pub(crate) use self::paging::BATCH;
pub(crate) use self::paging::check_ratio as check_paging_ratio;
use self::registry::Registry;
use self::sessions::Sessions;
pub(crate) use self::sessions::{DELIVERED, Settle};
use self::work::{AfterLock, Work};
use crate::envelope::Envelope;
use crate::error::{AmqpError, AmqpResult, ReplyCode};
use crate::events::EventSender;
use crate::message::Published;
use crate::store::{Durability, MessageStore, RecordView};
use crate::types::{BrokerConfig, ChannelEvent};

/// Everything the broker knows.
#[derive(Debug)]
pub(crate) struct State<E: Envelope> {
    pub config: BrokerConfig,
    registry: Registry<E>,
    sessions: Sessions<E>,
    work: Work<E>,
    memory: MemoryCount,
    /// Publishers are blocked because the disk the store writes to is nearly full
    /// ([`Broker::set_disk_alarm`](crate::Broker::set_disk_alarm)).
    disk_alarm: bool,
    /// Where durable declarations and persistent messages are reported.
    store: Arc<dyn MessageStore>,
    /// The store keeps messages (asked once): otherwise no per-message calls are made.
    keeps_messages: bool,
    /// Counts publications (a publish, or one dead-lettering): the queues one publication
    /// reaches share its number ([`crate::StoredMessage::publication`]).
    publication: u64,
    /// Publishes routed through the broker's exchanges (unroutable ones included), for
    /// management's overview.
    published: u64,
    /// The store pages (asked once): stored messages may be kept as stubs ([`paging`]).
    pages: bool,
    /// Paged messages read back from the store.
    paged_in: u64,
    /// Read-backs that failed (each reported to a client or, for a dead letter, kept in the
    /// store).
    read_failures: u64,
    /// The policies queues and exchanges follow ([`crate::policy`]).
    policies: crate::policy::Policies,
    /// The operator policies queues follow.
    operator_policies: crate::policy::Policies,
    /// Policies the store kept that this broker refuses (see [`State::recover`]): kept in
    /// the store, not applied, until one of the same kind and name is set or cleared.
    refused_policies: Vec<(crate::policy::PolicyKind, String)>,
    /// The delivery acknowledgement timeout ([`ack_timeout`]).
    acks: ack_timeout::AckClock,
}

/// A record as the store reads it: converted to the engine's types only when asked.
struct View<'a, E: Envelope>(&'a E::Record);

impl<E: Envelope> RecordView for View<'_, E> {
    fn published(&self) -> Published {
        E::to_native(self.0)
    }
}

impl<E: Envelope> State<E> {
    pub(crate) fn new(config: BrokerConfig, store: Arc<dyn MessageStore>) -> Self {
        State {
            acks: ack_timeout::AckClock::new(config.consumer_timeout),
            config,
            registry: Registry::new(),
            sessions: Sessions::new(),
            work: Work::new(),
            memory: MemoryCount::default(),
            disk_alarm: false,
            keeps_messages: store.keeps_messages(),
            pages: store.keeps_messages() && store.pages(),
            paged_in: 0,
            read_failures: 0,
            policies: Default::default(),
            operator_policies: Default::default(),
            refused_policies: Vec::new(),
            store,
            publication: 0,
            published: 0,
        }
    }

    /// Whether the store keeps messages.
    pub(crate) fn keeps_messages(&self) -> bool {
        self.keeps_messages
    }

    /// The message store (the one the broker keeps for good once it has recovered).
    pub(crate) fn store(&self) -> Arc<dyn MessageStore> {
        self.store.clone()
    }

    /// The registry's index of binding sources, and the same counted from the bindings.
    #[cfg(test)]
    #[allow(clippy::type_complexity)]
    pub(crate) fn binding_sources(
        &self,
    ) -> (
        &rustc_hash::FxHashMap<crate::exchange::Target, rustc_hash::FxHashMap<Arc<str>, u32>>,
        rustc_hash::FxHashMap<crate::exchange::Target, rustc_hash::FxHashMap<Arc<str>, u32>>,
    ) {
        (
            &self.registry.sources,
            self.registry.sources_from_bindings(),
        )
    }

    /// Exchanges whose routing index is not what their bindings say.
    #[cfg(test)]
    pub(crate) fn inexact_indexes(&self) -> Vec<Arc<str>> {
        self.registry.inexact_indexes()
    }

    /// Bindings that repeat an earlier one of their exchange.
    #[cfg(test)]
    pub(crate) fn repeated_bindings(&self) -> usize {
        self.registry.repeated_bindings()
    }

    /// The durability points of the publish just made, if it has any (see
    /// [`crate::store`]).
    pub(crate) fn take_durability(&mut self) -> Option<Vec<Durability>> {
        if self.work.durability.is_empty() {
            None
        } else {
            Some(std::mem::take(&mut self.work.durability))
        }
    }

    // ---- bookkeeping the broker's handles do around each operation ----------------------

    /// Takes the memory released by no-ack consumers' handles off the count, and returns it.
    pub(crate) fn memory_used(&mut self) -> usize {
        self.memory.fold_released();
        self.memory.used
    }

    /// Whether publishers are blocked: by the memory alarm, the disk alarm or both.
    pub(crate) fn is_blocked(&self) -> bool {
        self.memory.blocked || self.disk_alarm
    }

    /// Whether the memory alarm is on (the count went above the high watermark and has not
    /// yet come down to the low one).
    pub(crate) fn memory_alarm(&self) -> bool {
        self.memory.blocked
    }

    /// Sets the memory alarm (not telling anyone: see [`State::set_blocked`]).
    pub(crate) fn set_memory_alarm(&mut self, on: bool) {
        self.memory.blocked = on;
    }

    /// Sets the disk alarm (not telling anyone: see [`State::set_blocked`]).
    pub(crate) fn set_disk_alarm(&mut self, on: bool) {
        self.disk_alarm = on;
    }

    /// The resource alarms in effect.
    pub(crate) fn alarms(&self) -> crate::types::Alarms {
        crate::types::Alarms {
            memory: self.memory.blocked,
            disk: self.disk_alarm,
        }
    }

    /// Why publishers are blocked, in RabbitMQ's words (`connection.blocked`'s reason):
    /// `low on memory`, `low on disk`, or both joined by ` & `.
    pub(crate) fn blocked_reason(&self) -> Option<String> {
        match (self.memory.blocked, self.disk_alarm) {
            (false, false) => None,
            (true, false) => Some("low on memory".to_owned()),
            (false, true) => Some("low on disk".to_owned()),
            (true, true) => Some("low on memory & low on disk".to_owned()),
        }
    }

    /// Tells every channel that publishers are now blocked (with the reason) or free again.
    pub(crate) fn set_blocked(&mut self, blocked: bool) {
        let event = match self.blocked_reason() {
            Some(reason) if blocked => ChannelEvent::Blocked { reason },
            _ => ChannelEvent::Unblocked,
        };
        self.sessions.notify_all(&event);
    }

    /// What is to be done once the lock is released.
    pub(crate) fn take_after_lock(&mut self) -> AfterLock<E> {
        self.work.take_after_lock()
    }

    // ---- connections and channels -------------------------------------------------------

    pub(crate) fn open_connection(&mut self) -> u64 {
        self.sessions.open_connection()
    }

    pub(crate) fn open_channel(
        &mut self,
        connection: u64,
        number: Option<u16>,
        events: EventSender<E>,
    ) -> AmqpResult<u64> {
        if let Some(reason) = self.blocked_reason() {
            events.send(ChannelEvent::Blocked { reason });
        }
        self.sessions.open_channel(connection, number, events)
    }

    /// Whether `queue` (a delivery's record of its queue) names the queue that exists now,
    /// not one deleted since whose name was declared again.
    pub(super) fn is_current(&self, queue: &Arc<str>) -> bool {
        self.registry
            .queues
            .get(queue)
            .is_some_and(|q| Arc::ptr_eq(&q.name, queue))
    }

    /// Closes a channel: cancels its consumers and requeues its unacknowledged deliveries.
    pub(crate) fn close_channel(&mut self, id: u64, error: Option<AmqpError>) {
        let Some(mut ch) = self.sessions.channels.remove(&id) else {
            return;
        };
        if let Some(conn) = self.sessions.connections.get_mut(&ch.connection) {
            conn.channels.remove(&id);
        }
        for consumer in ch.consumers.values() {
            self.remove_consumer(*consumer, false);
        }
        for unacked in ch.unacked.take_all() {
            let mut message = unacked.message;
            self.memory.undelivered(&mut message);
            self.memory.used -= message.footprint();
            self.requeue(unacked.queue, message);
        }
        if let Some(error) = error {
            ch.events.send(ChannelEvent::Closed { error });
        }
        self.settle();
    }

    /// Closes a connection: its channels, then its exclusive queues.
    pub(crate) fn close_connection(&mut self, id: u64) {
        let Some(conn) = self.sessions.connections.remove(&id) else {
            return;
        };
        for ch in conn.channels {
            self.close_channel(ch, None);
        }
        let owned: Vec<Arc<str>> = self
            .registry
            .queues
            .values()
            .filter(|q| q.owner == Some(id))
            .map(|q| q.name.clone())
            .collect();
        for q in owned {
            self.delete_queue(&q);
        }
        self.settle();
    }

    /// Runs an operation on a channel; a channel-level error closes the channel and a
    /// connection-level error the connection, as AMQP requires.
    pub(crate) fn on_channel<T>(
        &mut self,
        channel: u64,
        op: impl FnOnce(&mut Self) -> AmqpResult<T>,
    ) -> AmqpResult<T> {
        if !self.sessions.channels.contains_key(&channel) {
            return Err(AmqpError::channel_closed());
        }
        let result = op(self);
        if let Err(e) = &result {
            if e.code.is_connection_error() {
                if let Ok(conn) = self.sessions.connection_of(channel) {
                    self.close_channel(channel, Some(e.clone()));
                    self.close_connection(conn);
                }
            } else if e.code != ReplyCode::ChannelError {
                self.close_channel(channel, Some(e.clone()));
            }
        }
        result
    }

    // ---- introspection ------------------------------------------------------------------

    pub(crate) fn queue_counts(&self, queue: &str) -> Option<(u32, u32)> {
        self.registry.queue_counts(queue)
    }

    pub(crate) fn queue_unacked(&self, queue: &str) -> Option<u32> {
        let q = self.registry.queues.get(queue)?;
        Some(self.sessions.unacked_from(&q.name) as u32)
    }

    pub(crate) fn exchange_exists(&self, name: &str) -> bool {
        self.registry.exchange_exists(name)
    }

    /// Durable queues an exchange can route to (see [`Registry::durable_queues_reached`]).
    pub(crate) fn durable_queues_reached(&self, exchange: &str) -> Vec<String> {
        self.registry.durable_queues_reached(exchange)
    }
}
