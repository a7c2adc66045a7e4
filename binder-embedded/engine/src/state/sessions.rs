//! Connections, channels and consumers: who is attached to the broker, with each channel's
//! delivery tags, unacknowledged deliveries, prefetch, confirm and transaction state.

use std::collections::BTreeSet;
use std::sync::Arc;

use rustc_hash::FxHashMap as HashMap;

use super::route_cache::RouteCache;
use super::unacked::UnackedLog;
use crate::envelope::{Envelope, Native};
use crate::error::{AmqpError, AmqpResult, ReplyCode};
use crate::events::EventSender;
use crate::inbox::Inbox;
use crate::inspect::DeliveryCounts;
use crate::storage::QueuedMessage;
use crate::types::{ChannelEvent, Delivery};

/// A consumer as the broker tracks it.
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

/// A delivery awaiting its acknowledgement.
#[derive(Debug)]
pub(crate) struct Unacked<E: Envelope> {
    pub queue: Arc<str>,
    pub message: QueuedMessage<E>,
    /// The consumer whose prefetch it uses (`None` after a cancel, or for `basic.get`).
    pub consumer: Option<u64>,
    /// Whether it counts against the channel's global prefetch.
    pub counted: bool,
    /// When it was delivered, in checks of the acknowledgement timeout ([`super::ack_timeout`]).
    pub epoch: u32,
}

/// What a delivery awaiting its acknowledgement costs beyond its queue entry: the channel's
/// record of it and the delivery handed to the consumer's inbox. (The queue entry stays
/// counted: a queue's ring buffer keeps its capacity when messages leave it.) Counted
/// against the memory high watermark from delivery to settlement. The same for every
/// envelope: both hold the record by `Arc`.
pub(crate) const DELIVERED: usize =
    std::mem::size_of::<Option<Unacked<Native>>>() + std::mem::size_of::<Delivery<Native>>();

/// How deliveries are settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settle {
    Ack,
    Requeue,
    Discard,
}

/// An operation held by a channel's transaction until commit.
#[derive(Debug)]
pub(crate) enum TxOp<E: Envelope> {
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

/// One channel.
#[derive(Debug)]
pub(crate) struct ChannelState<E: Envelope> {
    pub connection: u64,
    /// The number errors name it by (the AMQP channel number, else its id).
    pub label: u64,
    pub next_tag: u64,
    pub unacked: UnackedLog<E>,
    pub consumer_prefetch: u32,
    pub channel_prefetch: u32,
    pub channel_unacked: u32,
    pub confirm: bool,
    pub next_seq: u64,
    pub tx: Option<Vec<TxOp<E>>>,
    /// How many of `tx`'s operations are publishes (the rest are settlements).
    pub tx_publishes: u32,
    /// Publishes on the channel since it opened (each counted as it reaches the broker).
    pub published: u64,
    /// Deliveries acknowledged on the channel since it opened.
    pub acknowledged: u64,
    /// What the channel's deliveries and gets were, since it opened (RabbitMQ's channel
    /// statistics; every delivery and get also takes a delivery tag).
    pub counts: DeliveryCounts,
    /// Deliveries a cancelled consumer's handle never took, given back to their queues:
    /// their tags were used, but they count as no delivery.
    pub given_back: u64,
    /// The route (exchange and routing key) of the last publish, shared with the next one
    /// that has the same.
    pub last_route: Option<E::Route>,
    /// Whether the last publish had the same route as the one before it.
    pub route_repeated: bool,
    /// The queues the channel's last routed publish reached, for the next with the same route.
    pub route_cache: Option<RouteCache>,
    pub consumers: HashMap<Arc<str>, u64>,
    pub events: EventSender<E>,
}

/// One connection: its channels, in the order they were opened (ids only grow), so that a
/// connection with thousands of channels closes one in log time.
#[derive(Debug, Default)]
pub(crate) struct ConnectionState {
    pub channels: BTreeSet<u64>,
}

/// Every connection, channel and consumer, by id (ids are shared by all three).
#[derive(Debug)]
pub(crate) struct Sessions<E: Envelope> {
    pub connections: HashMap<u64, ConnectionState>,
    pub channels: HashMap<u64, ChannelState<E>>,
    pub consumers: HashMap<u64, ConsumerState<E>>,
    next_id: u64,
}

impl<E: Envelope> Sessions<E> {
    pub(crate) fn new() -> Self {
        Sessions {
            connections: HashMap::default(),
            channels: HashMap::default(),
            consumers: HashMap::default(),
            next_id: 1,
        }
    }

    /// A fresh id for a connection, channel or consumer.
    pub(crate) fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    pub(crate) fn open_connection(&mut self) -> u64 {
        let id = self.id();
        self.connections.insert(id, ConnectionState::default());
        id
    }

    /// Registers a channel of `connection`.
    pub(crate) fn open_channel(
        &mut self,
        connection: u64,
        number: Option<u16>,
        events: EventSender<E>,
    ) -> AmqpResult<u64> {
        let id = self.id();
        let conn = self
            .connections
            .get_mut(&connection)
            .ok_or_else(|| AmqpError::new(ReplyCode::ChannelError, "connection is closed"))?;
        conn.channels.insert(id);
        self.channels.insert(
            id,
            ChannelState {
                connection,
                label: number.map_or(id, u64::from),
                next_tag: 0,
                unacked: UnackedLog::default(),
                consumer_prefetch: 0,
                channel_prefetch: 0,
                channel_unacked: 0,
                confirm: false,
                next_seq: 0,
                tx: None,
                tx_publishes: 0,
                published: 0,
                acknowledged: 0,
                counts: DeliveryCounts::default(),
                given_back: 0,
                last_route: None,
                route_repeated: false,
                route_cache: None,
                consumers: HashMap::default(),
                events,
            },
        );
        Ok(id)
    }

    pub(crate) fn channel(&mut self, id: u64) -> AmqpResult<&mut ChannelState<E>> {
        self.channels
            .get_mut(&id)
            .ok_or_else(AmqpError::channel_closed)
    }

    pub(crate) fn connection_of(&self, channel: u64) -> AmqpResult<u64> {
        self.channels
            .get(&channel)
            .map(|c| c.connection)
            .ok_or_else(AmqpError::channel_closed)
    }

    /// Deliveries from `queue` (its name as the registry holds it) awaiting their
    /// acknowledgement, on every channel; not those of a queue of the same name deleted since.
    pub(crate) fn unacked_from(&self, queue: &Arc<str>) -> usize {
        self.channels
            .values()
            .flat_map(|ch| ch.unacked.iter())
            .filter(|u| Arc::ptr_eq(&u.queue, queue))
            .count()
    }

    pub(crate) fn notify_all(&self, event: &ChannelEvent<E>) {
        for ch in self.channels.values() {
            // Cloned only for a channel whose events are read.
            ch.events.send_with(|| event.clone());
        }
    }
}
