//! The broker's state and every operation on it, one concern per submodule. All state sits behind one lock (see
//! [`super::Broker`]): each operation runs to completion, so cross-queue effects (routing,
//! dead-lettering, transactions, exclusive-queue cleanup) are atomic without further care.

use rustc_hash::FxHashMap as HashMap;

use super::inbox::Inbox;
use super::memory;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

mod consume;
mod declare;
mod expiry;
mod publish;
mod settle;
mod unacked;

use crate::field::FieldTable;
use crate::envelope::{Envelope, Native};
use crate::message::Published;
use tokio::sync::mpsc::UnboundedSender;
use tokio::time::Instant;

use super::dead_letter::{DeathReason, is_cycle, record_death};
use super::error::{AmqpError, AmqpResult, ReplyCode};
use super::exchange::{Exchange, Target};
use super::queue::{Overflow, Queue, QueueArgs, QueueConsumer};
use super::storage::QueuedMessage;
use super::types::{
    BrokerConfig, ChannelEvent, ConsumeOptions, Delivery, ExchangeKind, ExchangeOptions,
    QueueDeclareOk, QueueOptions,
};

/// What became of a publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublishStatus {
    /// Enqueued in this many queues.
    Routed(usize),
    /// No queue took it (returned first if mandatory).
    Unroutable,
    /// A full queue refused it (`x-overflow: reject-publish`); a confirm is a nack.
    Rejected,
    /// Held in the channel's transaction until commit.
    Buffered,
}

/// The result of `basic.publish`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublishOutcome {
    /// The confirm sequence number, in confirm mode.
    pub seq: Option<u64>,
    /// What happened to the message.
    pub status: PublishStatus,
}

impl PublishOutcome {
    /// Whether a publisher confirm for it is an ack (everything but a rejection).
    pub fn is_ack(&self) -> bool {
        self.status != PublishStatus::Rejected
    }
}

#[derive(Debug)]
pub(crate) struct ConsumerState<E: Envelope> {
    pub tag: Arc<str>,
    pub channel: u64,
    pub queue: Arc<str>,
    pub no_ack: bool,
    pub prefetch: u32,
    pub unacked: u32,
    /// Deliveries on their way to the handle.
    pub inbox: Arc<Inbox<E>>,
    /// The handle waits for deliveries, so a publish dispatches to it at once. A busy
    /// consumer is not parked: messages wait in the queue and its next ack (or wait) moves
    /// a whole batch into its inbox.
    pub parked: bool,
}

#[derive(Debug)]
struct Unacked<E: Envelope> {
    queue: Arc<str>,
    message: QueuedMessage<E>,
    /// The consumer whose prefetch it uses (`None` after a cancel, or for `basic.get`).
    consumer: Option<u64>,
    /// Whether it counts against the channel's global prefetch.
    counted: bool,
}

/// What a delivery awaiting its acknowledgement costs beyond its queue entry: the channel's
/// record of it and the delivery handed to the consumer's inbox. (The queue entry stays
/// counted: a queue's ring buffer keeps its capacity when messages leave it.) Counted
/// against the memory high watermark from delivery to settlement.
pub(crate) const DELIVERED: usize = std::mem::size_of::<Option<Unacked<Native>>>()
    + std::mem::size_of::<Delivery<Native>>();

/// A message goes out to a consumer that must acknowledge it: it now costs [`DELIVERED`] more.
fn delivered<E: Envelope>(memory: &mut usize, message: &mut QueuedMessage<E>) {
    message.footprint += DELIVERED;
    *memory += DELIVERED;
}

/// A delivery's record is gone (settled, requeued, its channel closed): back to the cost of a
/// queue entry.
fn undelivered<E: Envelope>(memory: &mut usize, message: &mut QueuedMessage<E>) {
    message.footprint -= DELIVERED;
    *memory -= DELIVERED;
}

#[derive(Debug)]
enum TxOp<E: Envelope> {
    Publish {
        exchange: String,
        mandatory: bool,
        body: Arc<E::Record>,
    },
    Settle {
        tag: u64,
        multiple: bool,
        outcome: Settle,
    },
}

/// How deliveries are settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settle {
    Ack,
    Requeue,
    Discard,
}

#[derive(Debug)]
struct ChannelState<E: Envelope> {
    connection: u64,
    next_tag: u64,
    unacked: unacked::UnackedLog<E>,
    consumer_prefetch: u32,
    channel_prefetch: u32,
    channel_unacked: u32,
    confirm: bool,
    next_seq: u64,
    tx: Option<Vec<TxOp<E>>>,
    /// The routing key of the last publish, shared with the next one that uses it.
    last_routing_key: Option<Arc<str>>,
    consumers: HashMap<Arc<str>, u64>,
    events: UnboundedSender<ChannelEvent<E>>,
}

#[derive(Debug, Default)]
struct ConnectionState {
    channels: Vec<u64>,
}

/// Everything the broker knows.
#[derive(Debug)]
pub(crate) struct State<E: Envelope> {
    pub config: BrokerConfig,
    exchanges: HashMap<Arc<str>, Exchange>,
    queues: HashMap<Arc<str>, Queue<E>>,
    consumers: HashMap<u64, ConsumerState<E>>,
    channels: HashMap<u64, ChannelState<E>>,
    connections: HashMap<u64, ConnectionState>,
    next_id: u64,
    /// Memory held by messages (see [`memory`]): in queues, unacknowledged, or in no-ack
    /// consumers' inboxes.
    pub memory: usize,
    /// Memory of deliveries that left no-ack consumers' inboxes since the last operation
    /// (their handles take them without the engine's lock); taken off `memory` by
    /// [`State::fold_released`].
    pub released: Arc<AtomicUsize>,
    pub blocked: bool,
    /// Queues with work to do (dispatch, overflow), handled by `settle`.
    dirty: Vec<Arc<str>>,
    /// Messages waiting to be dead-lettered: message, queue it died in, reason.
    dying: Vec<(QueuedMessage<E>, Arc<str>, DeathReason)>,
    /// Set when a message with an expiry or a queue with `x-expires` appears, so the timer
    /// recomputes its deadline.
    pub timer_dirty: bool,
    /// Settled messages, dropped by the caller after the lock is released (freeing payloads
    /// under the lock cost an eighth of the ack path).
    pub garbage: Vec<Arc<E::Record>>,
    /// Inboxes that received deliveries while empty: their handles are woken once the
    /// lock is released.
    pub wakes: Vec<Arc<Inbox<E>>>,
    /// The default exchange's name (`""`), shared by every message published to it.
    default_exchange: Arc<str>,
    /// Reused list of routing targets (saves an allocation per publish).
    route_scratch: Vec<Arc<str>>,
}

const PREDECLARED: &[(&str, ExchangeKind)] = &[
    ("amq.direct", ExchangeKind::Direct),
    ("amq.fanout", ExchangeKind::Fanout),
    ("amq.topic", ExchangeKind::Topic),
    ("amq.headers", ExchangeKind::Headers),
    ("amq.match", ExchangeKind::Headers),
];

/// Queues a dispatch of `queue`, skipping a repeat of the last entry (settling a batch of
/// acks would otherwise dispatch the same queue once per message).
fn mark_dirty(dirty: &mut Vec<Arc<str>>, queue: Arc<str>) {
    if dirty.last() != Some(&queue) {
        dirty.push(queue);
    }
}

fn random_name(prefix: &str) -> String {
    crate::naming::server_name(prefix)
}

impl<E: Envelope> State<E> {
    pub(crate) fn new(config: BrokerConfig) -> Self {
        let mut exchanges = HashMap::default();
        for (name, kind) in PREDECLARED {
            let name: Arc<str> = Arc::from(*name);
            exchanges.insert(
                name.clone(),
                Exchange::new(name, *kind, true, false, false, FieldTable::new()),
            );
        }
        State {
            config,
            exchanges,
            queues: HashMap::default(),
            consumers: HashMap::default(),
            channels: HashMap::default(),
            connections: HashMap::default(),
            next_id: 1,
            memory: 0,
            released: Arc::new(AtomicUsize::new(0)),
            blocked: false,
            dirty: Vec::new(),
            dying: Vec::new(),
            timer_dirty: false,
            garbage: Vec::new(),
            wakes: Vec::new(),
            default_exchange: Arc::from(""),
            route_scratch: Vec::new(),
        }
    }

    /// Takes the memory released by no-ack consumers' handles off the count.
    pub(crate) fn fold_released(&mut self) {
        if self.released.load(Ordering::Acquire) != 0 {
            self.memory -= self.released.swap(0, Ordering::AcqRel);
        }
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    // ---- connections and channels -------------------------------------------------------

    pub(crate) fn open_connection(&mut self) -> u64 {
        let id = self.id();
        self.connections.insert(id, ConnectionState::default());
        id
    }

    pub(crate) fn open_channel(
        &mut self,
        connection: u64,
        events: UnboundedSender<ChannelEvent<E>>,
    ) -> AmqpResult<u64> {
        let id = self.id();
        let conn = self
            .connections
            .get_mut(&connection)
            .ok_or_else(|| AmqpError::new(ReplyCode::ChannelError, "connection is closed"))?;
        conn.channels.push(id);
        if self.blocked {
            let _ = events.send(ChannelEvent::Blocked {
                reason: "low on memory".to_owned(),
            });
        }
        self.channels.insert(
            id,
            ChannelState {
                connection,
                next_tag: 0,
                unacked: Default::default(),
                consumer_prefetch: 0,
                channel_prefetch: 0,
                channel_unacked: 0,
                confirm: false,
                next_seq: 0,
                tx: None,
                last_routing_key: None,
                consumers: HashMap::default(),
                events,
            },
        );
        Ok(id)
    }

    fn channel(&mut self, id: u64) -> AmqpResult<&mut ChannelState<E>> {
        self.channels
            .get_mut(&id)
            .ok_or_else(AmqpError::channel_closed)
    }

    fn connection_of(&self, channel: u64) -> AmqpResult<u64> {
        self.channels
            .get(&channel)
            .map(|c| c.connection)
            .ok_or_else(AmqpError::channel_closed)
    }

    /// Closes a channel: cancels its consumers and requeues its unacknowledged deliveries.
    pub(crate) fn close_channel(&mut self, id: u64, error: Option<AmqpError>) {
        let Some(ch) = self.channels.remove(&id) else {
            return;
        };
        if let Some(conn) = self.connections.get_mut(&ch.connection) {
            conn.channels.retain(|c| *c != id);
        }
        for consumer in ch.consumers.values() {
            self.remove_consumer(*consumer, false);
        }
        let mut ch = ch;
        for unacked in ch.unacked.take_all() {
            let mut message = unacked.message;
            undelivered(&mut self.memory, &mut message);
            self.memory -= message.footprint();
            self.requeue(unacked.queue, message);
        }
        if let Some(error) = error {
            let _ = ch.events.send(ChannelEvent::Closed { error });
        }
        self.settle();
    }

    /// Closes a connection: its channels, then its exclusive queues.
    pub(crate) fn close_connection(&mut self, id: u64) {
        let Some(conn) = self.connections.remove(&id) else {
            return;
        };
        for ch in conn.channels {
            self.close_channel(ch, None);
        }
        let owned: Vec<Arc<str>> = self
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
        if !self.channels.contains_key(&channel) {
            return Err(AmqpError::channel_closed());
        }
        let result = op(self);
        if let Err(e) = &result {
            if e.code.is_connection_error() {
                if let Ok(conn) = self.connection_of(channel) {
                    self.close_channel(channel, Some(e.clone()));
                    self.close_connection(conn);
                }
            } else if e.code != ReplyCode::ChannelError {
                self.close_channel(channel, Some(e.clone()));
            }
        }
        self.settle();
        result
    }

    // ---- introspection ------------------------------------------------------------------

    pub(crate) fn queue_counts(&self, queue: &str) -> Option<(u32, u32)> {
        self.queues
            .get(queue)
            .map(|q| (q.storage.len() as u32, q.consumers.len() as u32))
    }

    pub(crate) fn queue_unacked(&self, queue: &str) -> Option<u32> {
        self.queues.get(queue)?;
        let n = self
            .channels
            .values()
            .flat_map(|ch| ch.unacked.iter())
            .filter(|u| &*u.queue == queue)
            .count();
        Some(n as u32)
    }

    pub(crate) fn exchange_exists(&self, name: &str) -> bool {
        self.exchanges.contains_key(name)
    }

    /// Durable queues an exchange can route to, directly, through exchange-to-exchange
    /// bindings or through its alternate exchange; sorted, each once.
    pub(crate) fn durable_queues_reached(&self, exchange: &str) -> Vec<String> {
        let mut seen: Vec<&str> = Vec::new();
        let mut todo: Vec<&str> = vec![exchange];
        let mut found = Vec::new();
        while let Some(name) = todo.pop() {
            let Some(x) = self.exchanges.get(name) else {
                continue;
            };
            if seen.contains(&name) {
                continue;
            }
            seen.push(name);
            for b in &x.bindings {
                match &b.target {
                    Target::Queue(q) => {
                        if self.queues.get(q).is_some_and(|q| q.durable) {
                            found.push(q.to_string());
                        }
                    }
                    Target::Exchange(e) => todo.push(e),
                }
            }
            if let Some(alt) = &x.alternate {
                todo.push(alt);
            }
        }
        found.sort();
        found.dedup();
        found
    }

    pub(crate) fn notify_all(&self, event: &ChannelEvent<E>) {
        for ch in self.channels.values() {
            let _ = ch.events.send(event.clone());
        }
    }
}
