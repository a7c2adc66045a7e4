//! The failure policy of an input binding: what the runtime does with a delivery whose
//! attempts are exhausted. The binder's consumer decides and settles
//! ([`BoundConsumer::give_up`]: republish to a dead-letter destination, reject, requeue, or
//! nothing to settle); this is the one place that asks it, logs what it did, and tells the
//! hook and observers.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use super::super::error::HandlerError;
use super::super::observe::{DeadLetterRoute, DeadLettered, Observers, Settle, Settled};
pub use crate::binder::FailureAction;
use crate::binder::{self, BoundConsumer, GaveUp, Published, Settler};
use crate::message::Message;

/// A failure, as the error hook sees it.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The input binding.
    pub binding: String,
    /// The last error.
    pub error: HandlerError,
    /// Attempts made.
    pub attempts: u32,
    /// What the runtime did with the message.
    pub action: FailureAction,
    /// The failed message.
    pub message: Message,
}

/// Observes failures. It cannot change what happens to the message: the dead-letter path
/// runs whatever the hook does.
pub type ErrorHook = Arc<dyn Fn(&Failure) + Send + Sync>;

/// A delivery whose last attempt failed.
pub(crate) struct FailedDelivery {
    pub content: Arc<Published>,
    pub error: HandlerError,
    pub attempts: u32,
}

/// The failure policy of one input binding.
pub(crate) struct FailurePolicy {
    binding: Arc<str>,
    consumer: Arc<dyn BoundConsumer>,
    hook: Option<ErrorHook>,
    observers: Observers,
}

impl std::fmt::Debug for FailurePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FailurePolicy")
            .field("binding", &self.binding)
            .field("consumer", &self.consumer)
            .finish_non_exhaustive()
    }
}

impl FailurePolicy {
    /// The policy of the binding named `binding`, whose messages `consumer` reads.
    pub(crate) fn new(
        binding: Arc<str>,
        consumer: Arc<dyn BoundConsumer>,
        hook: Option<ErrorHook>,
        observers: Observers,
    ) -> Self {
        FailurePolicy {
            binding,
            consumer,
            hook,
            observers,
        }
    }

    /// Carries out the policy for a delivery that failed for good; whichever it is, one
    /// warning says so, with the binding, queue, attempts and error.
    pub(crate) async fn apply(&self, settler: &Settler, failed: FailedDelivery, queue: &str) {
        let trace = || failed.error.stack_trace();
        let report = binder::FailedDelivery {
            content: &failed.content,
            reason: failed.error.message(),
            trace: &trace,
            attempts: failed.attempts,
            source: queue,
        };
        let gave_up = self.consumer.give_up(settler, &report).await;
        self.observe(&gave_up, &failed, queue);
        if let Some(e) = &gave_up.settle_error {
            tracing::warn!(error = %e, settlement = ?gave_up.settlement, "settling failed; the broker will redeliver");
        }
        let action = gave_up.action;
        tracing::warn!(
            binding = %self.binding,
            queue,
            attempts = failed.attempts,
            error = %failed.error,
            kind = failed.error.kind(),
            ?action,
            "{}",
            gave_up.note
        );
        if let Some(hook) = &self.hook {
            let report = Failure {
                binding: self.binding.to_string(),
                error: failed.error,
                attempts: failed.attempts,
                action,
                message: failed.content.message.clone(),
            };
            // The hook only observes; a panic in it must not stop the binding.
            let _ = std::panic::catch_unwind(AssertUnwindSafe(|| hook(&report)));
        }
    }

    /// Tells the observers where the message went and how it was settled. A reject that
    /// failed dead-lettered nothing (the broker redelivers), so it is only a settlement.
    fn observe(&self, gave_up: &GaveUp, failed: &FailedDelivery, queue: &str) {
        let went = gave_up.dead_letter.as_ref().filter(|route| {
            matches!(route, binder::DeadLetterRoute::Republished { .. })
                || gave_up.settle_error.is_none()
        });
        if let Some(route) = went {
            let route = match route {
                binder::DeadLetterRoute::Republished {
                    exchange,
                    routing_key,
                } => DeadLetterRoute::Republished {
                    exchange,
                    routing_key,
                },
                binder::DeadLetterRoute::Rejected => DeadLetterRoute::Rejected,
            };
            self.observers.emit(|o| {
                o.dead_lettered(&DeadLettered {
                    binding: &self.binding,
                    queue,
                    attempts: failed.attempts,
                    reason: &failed.error,
                    route,
                })
            });
        }
        let how = match gave_up.settlement {
            Some(settlement) => Settle::from(settlement),
            None => Settle::AutoAcked,
        };
        self.observers.emit(|o| {
            o.settled(&Settled {
                binding: &self.binding,
                binding_index: self.observers.binding_index(),
                how,
                error: gave_up.settle_error.as_ref(),
            })
        });
    }
}
