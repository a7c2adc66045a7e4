//! Values that cross the engine's API: options, deliveries, channel events.

use std::sync::Arc;

use std::fmt;

use crate::envelope::{Envelope, Native};
use crate::error::AmqpError;
use crate::field::FieldTable;

/// The AMQP exchange types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExchangeKind {
    /// Routes on an exact routing-key match.
    Direct,
    /// Routes to every bound queue.
    Fanout,
    /// Routes on routing-key patterns (`*`, `#`).
    Topic,
    /// Routes on header values (`x-match`).
    Headers,
}

impl ExchangeKind {
    /// The AMQP name (`direct`, `fanout`, `topic`, `headers`).
    pub fn as_str(self) -> &'static str {
        match self {
            ExchangeKind::Direct => "direct",
            ExchangeKind::Fanout => "fanout",
            ExchangeKind::Topic => "topic",
            ExchangeKind::Headers => "headers",
        }
    }

    /// The type of an AMQP name (`direct`, `fanout`, `topic`, `headers`), if it is one.
    ///
    /// ```
    /// use stream_engine::ExchangeKind;
    /// assert_eq!(ExchangeKind::from_name("topic"), Some(ExchangeKind::Topic));
    /// assert_eq!(ExchangeKind::from_name("x-delayed-message"), None);
    /// ```
    pub fn from_name(name: &str) -> Option<ExchangeKind> {
        [
            ExchangeKind::Direct,
            ExchangeKind::Fanout,
            ExchangeKind::Topic,
            ExchangeKind::Headers,
        ]
        .into_iter()
        .find(|k| k.as_str() == name)
    }
}

impl fmt::Display for ExchangeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `exchange.declare` flags.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExchangeOptions {
    /// Only check that it exists.
    pub passive: bool,
    /// Survives a restart.
    pub durable: bool,
    /// Deleted when its last binding goes.
    pub auto_delete: bool,
    /// Cannot be published to directly.
    pub internal: bool,
}

/// `queue.declare` flags.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueOptions {
    /// Only check that it exists.
    pub passive: bool,
    /// Survives a restart.
    pub durable: bool,
    /// Owned by this connection and deleted with it.
    pub exclusive: bool,
    /// Deleted when its last consumer goes.
    pub auto_delete: bool,
}

/// `basic.consume` options.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConsumeOptions {
    /// The consumer tag; the engine makes one (`amq.ctag-…`) when `None`.
    pub consumer_tag: Option<String>,
    /// Deliveries need no acknowledgement.
    pub no_ack: bool,
    /// The only consumer of the queue.
    pub exclusive: bool,
    /// Consumer arguments (`x-priority`).
    pub arguments: FieldTable,
}

/// `queue.declare-ok`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueDeclareOk {
    /// The queue name (server-generated when declared with an empty name).
    pub name: String,
    /// Ready messages.
    pub message_count: u32,
    /// Active consumers.
    pub consumer_count: u32,
}

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

/// `basic.publish` parameters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PublishOptions {
    /// Return the message (`basic.return`) if no queue takes it.
    pub mandatory: bool,
}

/// A message handed to a consumer or returned by `basic.get`.
#[derive(Debug, Clone)]
pub struct Delivery<E: Envelope = Native> {
    /// The consumer it was delivered to (empty for `basic.get`).
    pub consumer_tag: Arc<str>,
    /// Channel-scoped tag for ack/nack/reject (0 for no-ack deliveries is never used: tags
    /// are always assigned).
    pub delivery_tag: u64,
    /// It was delivered before and requeued.
    pub redelivered: bool,
    /// The message and where it was published: the record the queue holds, shared.
    pub body: Arc<E::Record>,
}

impl<E: Envelope> Delivery<E> {
    /// The message.
    pub fn message(&self) -> &E::Message {
        E::message(&self.body)
    }

    /// The exchange the message was published to.
    pub fn exchange(&self) -> &str {
        E::exchange(&self.body)
    }

    /// The routing key it was published with.
    pub fn routing_key(&self) -> &str {
        E::routing_key(&self.body)
    }
}

/// Asynchronous notifications of a channel, in the order they happened.
#[derive(Debug, Clone)]
pub enum ChannelEvent<E: Envelope = Native> {
    /// Publisher confirm: `seq` (and all before it when `multiple`) were accepted.
    Ack {
        /// The publish sequence number.
        seq: u64,
        /// Covers every earlier unconfirmed number too.
        multiple: bool,
    },
    /// Publisher confirm: `seq` was refused (e.g. `x-overflow: reject-publish`).
    Nack {
        /// The publish sequence number.
        seq: u64,
        /// Covers every earlier unconfirmed number too.
        multiple: bool,
    },
    /// A mandatory message no queue took (`basic.return`).
    Return {
        /// 312 NO_ROUTE.
        reply_code: u16,
        /// `NO_ROUTE`.
        reply_text: String,
        /// The returned message.
        body: Arc<E::Record>,
    },
    /// The broker cancelled a consumer (its queue was deleted).
    ConsumerCancelled {
        /// The cancelled consumer.
        consumer_tag: String,
    },
    /// Publishing is blocked (memory above the high watermark).
    Blocked {
        /// Why.
        reason: String,
    },
    /// Publishing may resume.
    Unblocked,
    /// The channel was closed by the broker.
    Closed {
        /// The error that closed it.
        error: AmqpError,
    },
}

/// The resource alarms in effect ([`Broker::alarms`](crate::Broker::alarms)): either blocks
/// publishers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Alarms {
    /// The memory counted against the high watermark is above it.
    pub memory: bool,
    /// The disk alarm is set ([`Broker::set_disk_alarm`](crate::Broker::set_disk_alarm)).
    pub disk: bool,
}

/// Broker-wide settings.
#[derive(Debug, Clone, PartialEq)]
pub struct BrokerConfig {
    /// Bytes of memory held by messages above which publishers are blocked; `None`
    /// disables the check. Default: 400 MiB.
    ///
    /// Each message in a queue, or delivered and awaiting its acknowledgement, counts at its
    /// estimated footprint: its payload, headers and property strings and the engine's shared
    /// record of it, as `malloc` rounds each block, plus the queue's entry for it and, while
    /// it is unacknowledged, the record of the delivery. A 20-byte message without headers
    /// counts 216 bytes (its measured cost is about 184): the overhead counts whatever the
    /// payload size. A message routed to several queues counts once per queue. A delivery
    /// to a `no_ack` consumer counts until the consumer's handle takes it from its inbox.
    pub memory_high_watermark: Option<usize>,
    /// Publishers resume at or below this fraction of the watermark (the low watermark).
    /// Default 0.9.
    pub memory_resume_ratio: f64,
    /// Above this fraction of the memory high watermark, persistent messages entering a
    /// durable queue are paged: the queue keeps a stub of each (what delivery needs without
    /// the body: its place in the queue, size, priority, expiry, delivery count) and the
    /// body stays on disk only, read back from the message store when the message is
    /// delivered, fetched, inspected or dead-lettered (RabbitMQ's
    /// `vm_memory_high_watermark_paging_ratio`, and the behaviour of its lazy queues).
    /// Applies only with a store that pages ([`MessageStore::pages`](crate::MessageStore::pages))
    /// and a watermark set. Default 0.5; must be above 0 and at most 1
    /// ([`Broker::with_store`](crate::Broker::with_store) refuses anything else).
    ///
    /// A stub counts as its queue entry (56 bytes) against the watermark; the queue's first
    /// 512 ready messages always keep their bodies, so a consumer that keeps up never waits
    /// for a read.
    pub memory_paging_ratio: f64,
    /// The virtual host name used in error texts.
    pub vhost: String,
    /// RabbitMQ's delivery acknowledgement timeout (`consumer_timeout`): a channel holding a
    /// delivery unacknowledged for longer is closed with 406 `PRECONDITION_FAILED`
    /// (`delivery acknowledgement on channel N timed out. Timeout value used: T ms. ...`,
    /// RabbitMQ's text) and its deliveries are requeued. Checked every tenth of the
    /// timeout, at most every minute: a channel is closed after at least the timeout and
    /// within two checks of it; a timeout under a millisecond counts as one. Deliveries to
    /// `no_ack` consumers are not waited for, nor those a transaction has settled pending its
    /// commit. `None` (the default) never closes a channel for it; the standalone
    /// `stream-broker` sets RabbitMQ's default, 30 minutes.
    pub consumer_timeout: Option<std::time::Duration>,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            memory_high_watermark: Some(400 * 1024 * 1024),
            memory_resume_ratio: 0.9,
            memory_paging_ratio: 0.5,
            vhost: "/".to_owned(),
            consumer_timeout: None,
        }
    }
}
