//! What the broker holds, as plain values for a management front end: its queues (with
//! message counts and cumulative publish/deliver counters), exchanges, bindings and
//! consumers. Each call copies a snapshot under the broker's lock; nothing here is on the
//! publish path.

use crate::field::FieldTable;
use crate::types::ExchangeKind;

/// A queue and its counts ([`Broker::queues`](crate::Broker::queues)).
#[derive(Debug, Clone, PartialEq)]
pub struct QueueInfo {
    /// The name.
    pub name: String,
    /// Survives a restart.
    pub durable: bool,
    /// Deleted when its last consumer goes.
    pub auto_delete: bool,
    /// Owned by one connection.
    pub exclusive: bool,
    /// The declaration's arguments.
    pub arguments: FieldTable,
    /// The policy it follows ([`Broker::set_policy`](crate::Broker::set_policy)), if any.
    pub policy: Option<String>,
    /// The operator policy it follows
    /// ([`Broker::set_operator_policy`](crate::Broker::set_operator_policy)), if any.
    pub operator_policy: Option<String>,
    /// The definition it follows, taken in the same snapshot (RabbitMQ's
    /// `effective_policy_definition`): its policy's, with its operator policy's keys added
    /// (the smaller value where both set one); empty without either.
    pub policy_definition: FieldTable,
    /// Messages ready for delivery.
    pub messages_ready: u64,
    /// Deliveries not yet acknowledged.
    pub messages_unacknowledged: u64,
    /// Payload bytes of the ready messages.
    pub message_bytes_ready: u64,
    /// Consumers attached.
    pub consumers: u32,
    /// Messages enqueued since the queue was declared (cumulative).
    pub published: u64,
    /// Deliveries to consumers and `basic.get` since the queue was declared (cumulative,
    /// redeliveries included).
    pub delivered: u64,
}

/// An exchange ([`Broker::exchanges`](crate::Broker::exchanges)); the default exchange is
/// listed with the empty name.
#[derive(Debug, Clone, PartialEq)]
pub struct ExchangeInfo {
    /// The name (`""` for the default exchange).
    pub name: String,
    /// The type.
    pub kind: ExchangeKind,
    /// Survives a restart.
    pub durable: bool,
    /// Deleted when its last binding goes.
    pub auto_delete: bool,
    /// Cannot be published to directly.
    pub internal: bool,
    /// Its alternate exchange in effect (its `alternate-exchange` argument, else its
    /// policy's), if any.
    pub alternate_exchange: Option<String>,
    /// Its arguments as declared (`alternate-exchange` among them; the others are kept and
    /// shown, as RabbitMQ keeps them, and do nothing here).
    pub arguments: FieldTable,
    /// The policy it follows, if any (its `alternate-exchange` applies when the exchange
    /// declares none).
    pub policy: Option<String>,
}

/// A binding ([`Broker::bindings`](crate::Broker::bindings)).
#[derive(Debug, Clone, PartialEq)]
pub struct BindingInfo {
    /// The exchange it belongs to (`""`: the default exchange's implicit binding).
    pub source: String,
    /// The queue or exchange it routes to.
    pub destination: String,
    /// Whether `destination` is an exchange (else a queue).
    pub destination_is_exchange: bool,
    /// The binding key.
    pub routing_key: String,
    /// The binding's arguments.
    pub arguments: FieldTable,
}

/// A consumer ([`Broker::consumers`](crate::Broker::consumers)).
#[derive(Debug, Clone, PartialEq)]
pub struct ConsumerInfo {
    /// The consumer tag.
    pub consumer_tag: String,
    /// The queue it consumes from.
    pub queue: String,
    /// Deliveries need an acknowledgement.
    pub ack_required: bool,
    /// The queue's only consumer.
    pub exclusive: bool,
    /// Its prefetch window (0: unlimited).
    pub prefetch_count: u32,
    /// Deliveries it holds unacknowledged.
    pub unacknowledged: u32,
    /// The channel it was started on ([`Channel::id`](crate::Channel::id)).
    pub channel: u64,
}

/// A channel ([`Broker::channels`](crate::Broker::channels)): its prefetch, acknowledgement,
/// confirm and transaction state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelInfo {
    /// Its id ([`Channel::id`](crate::Channel::id)).
    pub id: u64,
    /// The prefetch window of consumers started from now on (`basic.qos`, `global = false`;
    /// 0: unlimited).
    pub prefetch_count: u32,
    /// The window shared by the channel's consumers (`global = true`; 0: unlimited).
    pub global_prefetch_count: u32,
    /// Deliveries waiting for their acknowledgement.
    pub unacknowledged: u32,
    /// Its consumers.
    pub consumers: u32,
    /// In confirm mode (`confirm.select`).
    pub confirm: bool,
    /// In a transaction (`tx.select`).
    pub transactional: bool,
    /// Publishes held by the transaction until `tx.commit`.
    pub uncommitted_publishes: u32,
    /// Acknowledgements (acks, nacks, rejects) held by the transaction until `tx.commit`.
    pub uncommitted_acks: u32,
    /// Publishes on the channel since it opened (RabbitMQ's `publish` statistic; one held by
    /// a transaction counts once committed).
    pub published: u64,
    /// Deliveries and `basic.get` answers since it opened (`deliver_get`).
    pub delivered: u64,
    /// Deliveries acknowledged since it opened (`ack`; a `multiple` ack counts each).
    pub acknowledged: u64,
    /// Deliveries to consumers that acknowledge, since it opened (`deliver`).
    pub delivered_to_consumers: u64,
    /// The rest of RabbitMQ's channel statistics.
    pub counts: DeliveryCounts,
}

/// What a channel's deliveries, gets and unroutable publishes were since it opened, by
/// RabbitMQ's channel statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeliveryCounts {
    /// Deliveries to `no_ack` consumers (`deliver_no_ack`).
    pub no_ack: u64,
    /// `basic.get`s answered with a message awaiting its acknowledgement (`get`).
    pub got: u64,
    /// `basic.get`s answered with `no_ack` (`get_no_ack`).
    pub got_no_ack: u64,
    /// `basic.get`s that found the queue empty (`get_empty`).
    pub got_empty: u64,
    /// Deliveries and gets of messages delivered before (`redeliver`).
    pub redelivered: u64,
    /// Mandatory publishes no queue took, returned (`return_unroutable`).
    pub returned: u64,
    /// Other publishes no queue took, dropped (`drop_unroutable`).
    pub dropped_unroutable: u64,
}

/// Broker-wide counts ([`Broker::totals`](crate::Broker::totals)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Totals {
    /// Publishes through the broker since it started (unroutable ones and re-drive copies
    /// included; dead-lettering is not a publish).
    pub published: u64,
    /// Open connections.
    pub connections: u32,
    /// Open channels.
    pub channels: u32,
    /// Consumers.
    pub consumers: u32,
}

/// A ready message seen in place ([`Broker::peek`](crate::Broker::peek)): not delivered,
/// not marked redelivered.
#[derive(Debug, Clone)]
pub struct PeekedMessage<R> {
    /// Its arrival position in the queue: what [`Broker::redrive`](crate::Broker::redrive)
    /// and [`Broker::discard`](crate::Broker::discard) name it by (unique in the queue).
    pub seq: u64,
    /// It was delivered before and requeued.
    pub redelivered: bool,
    /// The record the queue holds (shared).
    pub record: std::sync::Arc<R>,
}

/// What [`Broker::redrive`](crate::Broker::redrive) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redrive {
    /// Published to this many queues and removed from its queue.
    Moved(usize),
    /// No queue took the copy: the message stays where it was.
    Unroutable,
    /// A full queue (`x-overflow: reject-publish`) refused the copy: the message stays
    /// where it was (queues that took the copy keep it).
    Rejected,
    /// No ready message has this position (delivered, expired or removed meanwhile).
    NotFound,
}
