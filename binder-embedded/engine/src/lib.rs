//! The broker engine: RabbitMQ's AMQP 0-9-1 model in process, standing alone (it knows
//! nothing of the framework that drives it; see the crate's README for the API in brief, the
//! envelope and the store seam).
//!
//! Exchanges (default, direct, fanout, topic, headers, exchange-to-exchange bindings,
//! alternate exchanges, internal, auto-delete), queues (durable, exclusive, auto-delete,
//! `x-expires`, server-named), publisher confirms and `mandatory` returns, push consumers with
//! round-robin, `basic.qos`, consumer priorities, exclusive and single active consumers,
//! `basic.get`, ack/nack/reject with requeue, message and queue TTL, length limits with
//! overflow policies, priority queues, dead-lettering with `x-death`, transactions, and a
//! memory high watermark that blocks publishers.
//!
//! The engine knows nothing of bindings in the framework's sense; the `embedded` binder drives
//! it through the [`Envelope`] of its choice, and what must survive a restart goes behind the
//! [`MessageStore`] seam. All state sits behind one mutex: every operation is short and runs
//! to completion, which makes multi-queue effects atomic. Deliveries leave through
//! per-consumer channels, so consumers never hold the lock while they work.

mod broker;
mod dead_letter;
mod deadline;
mod envelope;
mod error;
mod events;
mod exchange;
mod field;
mod inbox;
pub mod inspect;
pub mod memory;
mod message;
mod naming;
mod policy;
mod queue;
mod state;
mod storage;
pub mod store;
mod topic;
mod types;

pub use broker::{Broker, Channel, Connection, Consumer, GetOk, PendingConfirm, TryPublish};
pub use dead_letter::DeathReason;
pub use deadline::Deadline;
pub use envelope::{Envelope, Native};
pub use error::{AmqpError, AmqpResult, ReplyCode};
pub use events::{ChannelEvents, TryRecvError};
pub use field::{Decimal, FieldTable, FieldValue};
pub use inspect::{
    BindingInfo, ChannelInfo, ConsumerInfo, DeliveryCounts, ExchangeInfo, PeekedMessage, QueueInfo,
    Redrive, Totals,
};
pub use message::{Message, Properties, PropertiesBox, Published, Route};
pub use policy::{OPERATOR_POLICY_KEYS, POLICY_KEYS, PolicyDef, PolicyKind, PolicyTarget};
pub use storage::{
    FifoStorage, HOLD_AFTER, MAX_DELIVERIES, MAX_SEQ, PriorityStorage, QueueStorage, QueuedMessage,
    RUN_AFTER, RUN_REFILL, Ready,
};
pub use store::{
    BindingDef, DestinationKind, Durability, ExchangeDef, MemoryStore, MessageStore, QueueDef,
    Recovered, RecoveredMessage, Removal, StoreError, StoredMessage,
};
/// Whether a topic-exchange binding pattern matches a routing key (`*` is one word, `#` is
/// zero or more words).
///
/// ```
/// use stream_engine::topic_matches;
/// assert!(topic_matches("orders.#", "orders.eu.created"));
/// assert!(!topic_matches("orders.*", "orders.eu.created"));
/// ```
pub fn topic_matches(pattern: &str, routing_key: &str) -> bool {
    topic::TopicPattern::new(pattern).matches(routing_key)
}

/// The largest payload the engine takes, in bytes (2 GiB): a publish of more is refused with
/// `PRECONDITION_FAILED`, as RabbitMQ refuses one above its `max_message_size`. Queue entries
/// keep sizes as `u32`.
pub const MAX_PAYLOAD: usize = 1 << 31;

pub use types::{
    Alarms, BrokerConfig, ChannelEvent, ConsumeOptions, Delivery, ExchangeKind, ExchangeOptions,
    PublishOptions, PublishOutcome, PublishStatus, QueueDeclareOk, QueueOptions,
};

/// The README's examples, compiled as doctests so they cannot go stale.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// A seeded xorshift generator for the randomized walk tests: `next(n)` is in `0..n`.
#[cfg(test)]
pub(crate) fn xorshift(mut seed: u64) -> impl FnMut(u64) -> u64 {
    move |n| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    }
}
