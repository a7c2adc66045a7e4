//! The consumer side of a binding: subscriptions to its sources, and the binder's last word on
//! a delivery the application gave up on.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

use super::{BinderError, BinderResult, Published, Settlement, Settler, Subscription};
use crate::config::AcknowledgeMode;

/// A binding's consumer, as a binder prepared it ([`Binder::bind_consumer`](super::Binder)).
///
/// It reads one or more sources (an AMQP binder's queues: one per partition or group); the
/// runtime keeps one subscription open per source, and opens it again after a loss.
#[async_trait]
pub trait BoundConsumer: fmt::Debug + Send + Sync {
    /// The sources it reads, in the middleware's terms (queue names), for logs and
    /// [`subscribe`](Self::subscribe).
    fn sources(&self) -> &[String];
    /// Who settles deliveries: the runtime after the handler (`AUTO`), the handler
    /// (`MANUAL`), or nobody, the broker forgetting each message as it delivers it (`NONE`).
    fn acknowledge_mode(&self) -> AcknowledgeMode;
    /// The longest wait between tries to subscribe again after a subscription was lost.
    fn recovery_interval(&self) -> Duration;
    /// Subscribes to source `index` of [`sources`](Self::sources).
    async fn subscribe(&self, index: usize) -> BinderResult<Box<dyn Subscription>>;
    /// Settles, the binder's way, a delivery whose attempts are exhausted (or whose error is
    /// not retryable): an AMQP binder republishes it to the dead-letter exchange with
    /// diagnostic headers, rejects it into the queue's own dead-lettering, or requeues it, as
    /// its extension properties say. It never loses the message: a dead-lettering that fails
    /// falls back to a settlement that keeps it. Says what it did, for the runtime's log,
    /// hook and observers.
    async fn give_up(&self, settler: &Settler, failed: &FailedDelivery<'_>) -> GaveUp;
    /// How the runtime assembles this consumer's deliveries into batches for a
    /// `consumer.batchMode` binding (an AMQP binder's `enableBatching`, `batchSize` and
    /// `receiveTimeout`); `None`, the default, for a binder that assembles none, whose
    /// `batchMode` bindings are refused at startup.
    fn batching(&self) -> Option<Batching> {
        None
    }
}

/// How deliveries are assembled into batches ([`BoundConsumer::batching`]): up to `size`,
/// a shorter batch when no further delivery arrives within `receive_timeout` (Spring AMQP's
/// consumer-side batching: the wait is for each delivery, not for the whole batch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batching {
    /// The most deliveries in a batch (at least 1).
    pub size: usize,
    /// The longest wait for the next delivery before a shorter batch goes out.
    pub receive_timeout: Duration,
}

/// A delivery the application gave up on.
pub struct FailedDelivery<'a> {
    /// The message and where it was published.
    pub content: &'a Published,
    /// The last error's message.
    pub reason: &'a str,
    /// Where the error happened: its source chain and, when captured, its backtrace. Built
    /// when called, since only a binder that writes it (an AMQP republish) needs it.
    pub trace: &'a (dyn Fn() -> String + Sync),
    /// Attempts made.
    pub attempts: u32,
    /// The source (queue) it was delivered from.
    pub source: &'a str,
}

impl fmt::Debug for FailedDelivery<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FailedDelivery")
            .field("content", &self.content)
            .field("reason", &self.reason)
            .field("attempts", &self.attempts)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// What happened to a message that failed for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureAction {
    /// Republished to a dead-letter destination with diagnostic headers, then acked.
    Republished,
    /// Rejected without requeue (the broker dead-letters it if the queue has a DLX).
    Rejected,
    /// Requeued (`requeueRejected`).
    Requeued,
    /// Nothing to settle (`acknowledgeMode: NONE`): the message is gone.
    Dropped,
}

/// Where a dead-lettered message went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeadLetterRoute {
    /// Republished to this exchange with this routing key.
    Republished {
        /// The dead-letter exchange.
        exchange: String,
        /// The routing key.
        routing_key: String,
    },
    /// Rejected into the queue's own dead-letter exchange (if it has one).
    Rejected,
}

/// What [`BoundConsumer::give_up`] did.
#[derive(Debug)]
#[non_exhaustive]
pub struct GaveUp {
    /// What became of the message.
    pub action: FailureAction,
    /// The settlement sent, if any (none in `acknowledgeMode: NONE`).
    pub settlement: Option<Settlement>,
    /// Why the settlement failed (the broker then redelivers).
    pub settle_error: Option<BinderError>,
    /// Where the message was dead-lettered, if it was.
    pub dead_letter: Option<DeadLetterRoute>,
    /// One sentence for the log: what was done and why.
    pub note: String,
}

impl GaveUp {
    /// A report of `action`, after `settlement` settled as `settled` says.
    pub fn new(
        action: FailureAction,
        settlement: Option<Settlement>,
        settled: BinderResult<()>,
        note: impl Into<String>,
    ) -> Self {
        GaveUp {
            action,
            settlement,
            settle_error: settled.err(),
            dead_letter: None,
            note: note.into(),
        }
    }

    /// The same report, saying where the message was dead-lettered.
    pub fn dead_lettered(mut self, route: DeadLetterRoute) -> Self {
        self.dead_letter = Some(route);
        self
    }
}
