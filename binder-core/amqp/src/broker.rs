//! What an AMQP 0-9-1 binder does at the broker's level: apply a [`TopologyPlan`], open
//! producers on exchanges and subscriptions on queues. Both AMQP binders implement
//! [`AmqpBroker`]; [`crate::bind`] builds the framework's binder SPI on it.

use std::fmt;

use async_trait::async_trait;
use binder_core::binder::{Backlog, BinderFuture, BinderResult, Subscription};
use binder_core::message::{DeliveryMode, Message};

use crate::topology::TopologyPlan;

/// What a producer publishes to and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerSpec {
    /// The exchange (destination with prefix).
    pub exchange: String,
    /// Default delivery mode of messages without one.
    pub delivery_mode: DeliveryMode,
}

/// What a subscription consumes and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionSpec {
    /// The queue.
    pub queue: String,
    /// Unsettled deliveries at most (`basic.qos`); 0 is unlimited.
    pub prefetch: u16,
    /// The broker forgets a message once delivered (`acknowledgeMode: NONE`).
    pub auto_ack: bool,
    /// The only consumer of the queue.
    pub exclusive: bool,
    /// Consumer tag, or `None` for a broker-generated one.
    pub consumer_tag: Option<String>,
}

impl SubscriptionSpec {
    /// Manual acknowledgement of `queue` with `prefetch` deliveries at most unsettled, not
    /// exclusive, with a broker-generated consumer tag.
    pub fn manual_ack(queue: impl Into<String>, prefetch: u16) -> Self {
        SubscriptionSpec {
            queue: queue.into(),
            prefetch,
            auto_ack: false,
            exclusive: false,
            consumer_tag: None,
        }
    }
}

/// What [`AmqpBroker::inspect`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueInfo {
    /// Ready messages (not counting unacknowledged deliveries).
    pub messages: u32,
    /// Consumers.
    pub consumers: u32,
}

impl From<QueueInfo> for Backlog {
    fn from(q: QueueInfo) -> Self {
        Backlog {
            messages: q.messages,
            consumers: q.consumers,
        }
    }
}

/// Publishes to exchanges with confirms (see the framework's
/// [`Producer`](binder_core::binder::Producer) for when a publish takes effect).
pub trait AmqpProducer: fmt::Debug + Send + Sync {
    /// The exchange of [`AmqpProducer::publish`].
    fn exchange(&self) -> &str;
    /// Publishes to `exchange` (dead-letter republishing uses this) and waits for the
    /// broker's confirm.
    fn publish_to<'a>(
        &'a self,
        exchange: &'a str,
        routing_key: &'a str,
        message: Message,
    ) -> BinderFuture<'a, BinderResult<()>>;
    /// The largest frame the producer's connection takes: the `frame_max` negotiated with
    /// the broker, or `None` when it has no limit. A message's properties and headers travel
    /// in one frame (its payload in frames of its own), so dead-letter republishing sizes its
    /// headers by this: a frame over the limit costs the whole connection. A binder that
    /// connects lazily may connect here.
    fn frame_max(&self) -> BinderFuture<'_, BinderResult<Option<u32>>>;
    /// Publishes to the producer's exchange and waits for the broker's confirm.
    fn publish<'a>(
        &'a self,
        routing_key: &'a str,
        message: Message,
    ) -> BinderFuture<'a, BinderResult<()>> {
        self.publish_to(self.exchange(), routing_key, message)
    }
}

/// An AMQP 0-9-1 broker as a binder reaches it.
#[async_trait]
pub trait AmqpBroker: fmt::Debug + Send + Sync {
    /// Declares every exchange, queue and binding of the plan (idempotently).
    async fn provision(&self, plan: &TopologyPlan) -> BinderResult<()>;
    /// Opens a producer.
    async fn producer(&self, spec: ProducerSpec) -> BinderResult<Box<dyn AmqpProducer>>;
    /// Starts consuming a queue.
    async fn subscribe(&self, spec: SubscriptionSpec) -> BinderResult<Box<dyn Subscription>>;
    /// Ready messages and consumers of a queue (a passive declare).
    async fn inspect(&self, queue: &str) -> BinderResult<QueueInfo>;
    /// Deletes the queues and exchanges of a plan (tests, `streamctl`); missing ones are fine.
    async fn remove(&self, plan: &TopologyPlan) -> BinderResult<()>;
}
