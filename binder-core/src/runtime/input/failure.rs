//! The failure policy of an input binding, decided once, at startup, from its configuration
//! and topology: what happens to a delivery whose attempts are exhausted (republish to the
//! dead-letter exchange, reject into the queue's own dead-lettering, requeue, or nothing to
//! settle), and the one place that carries it out, logs it, and tells the hook and observers.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use super::super::error::HandlerError;
use super::super::observe::{DeadLetterRoute, DeadLettered, Observers, Settle, Settled};
use crate::binder::{
    BinderError, DeadLetter, Fitted, FrameBudget, HeadersTooLarge, Producer, Published, Settlement,
    Settler, republish_headers,
};
use crate::config::{AcknowledgeMode, BindingConfig};
use crate::message::Message;

/// What happened to a message that failed for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureAction {
    /// Republished to the dead-letter exchange with diagnostic headers, then acked.
    Republished,
    /// Rejected without requeue (the broker dead-letters it if the queue has a DLX).
    Rejected,
    /// Requeued (`requeueRejected`, or a republish that failed without a DLX to fall back on).
    Requeued,
    /// Nothing to settle (`acknowledgeMode: NONE`): the message is gone.
    Dropped,
}

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

/// What a binding does with a delivery that failed for good, as its configuration decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// `acknowledgeMode: NONE`: nothing to settle, the message is gone.
    Drop,
    /// `republishToDlq` with `autoBindDlq`: republish to this exchange with this key.
    Republish {
        /// The dead-letter exchange.
        exchange: String,
        /// The routing key.
        routing_key: String,
    },
    /// `requeueRejected`.
    Requeue,
    /// Reject without requeue: the broker dead-letters it if the queue has a DLX.
    Reject,
}

impl Decision {
    /// Decides for a binding; `dead_letter` is the exchange and routing key its topology
    /// plan gives dead letters, if it has any.
    pub(crate) fn of(binding: &BindingConfig, dead_letter: Option<&(String, String)>) -> Self {
        let rabbit = &binding.rabbit_consumer;
        if rabbit.acknowledge_mode == AcknowledgeMode::None {
            return Decision::Drop;
        }
        match dead_letter {
            Some((exchange, routing_key))
                if rabbit.republish_to_dlq && rabbit.common.auto_bind_dlq =>
            {
                Decision::Republish {
                    exchange: exchange.clone(),
                    routing_key: routing_key.clone(),
                }
            }
            _ if rabbit.requeue_rejected => Decision::Requeue,
            _ => Decision::Reject,
        }
    }
}

/// Where exhausted messages are republished.
#[derive(Debug)]
pub(crate) struct DeadLetterTarget {
    pub producer: Box<dyn Producer>,
    pub exchange: String,
    pub routing_key: String,
}

/// What the policy does, with the producer a republish needs.
#[derive(Debug)]
enum Exhausted {
    Drop,
    Republish(DeadLetterTarget),
    Requeue,
    Reject,
}

/// Why a republish to the dead-letter exchange did not happen.
#[derive(Debug, Clone, thiserror::Error)]
enum RepublishError {
    /// The connection's `frame_max` could not be learnt.
    #[error(transparent)]
    FrameMax(BinderError),
    /// The message's own headers leave no room for the dead-letter headers.
    #[error(transparent)]
    TooLarge(#[from] HeadersTooLarge),
    /// The publish failed or was not confirmed.
    #[error(transparent)]
    Publish(#[from] BinderError),
}

/// A delivery whose last attempt failed.
pub(crate) struct FailedDelivery {
    pub content: Arc<Published>,
    pub error: HandlerError,
    pub attempts: u32,
}

/// The failure policy of one input binding.
pub(crate) struct FailurePolicy {
    binding: Arc<str>,
    exhausted: Exhausted,
    republish_delivery_mode: crate::message::DeliveryMode,
    frame_max_headroom: u32,
    hook: Option<ErrorHook>,
    observers: Observers,
}

impl std::fmt::Debug for FailurePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FailurePolicy")
            .field("binding", &self.binding)
            .field("exhausted", &self.exhausted)
            .finish_non_exhaustive()
    }
}

impl FailurePolicy {
    /// The policy `decision` names; `dead_letter` is the republish producer, which a
    /// [`Decision::Republish`] needs (without one it falls back to rejecting).
    pub(crate) fn new(
        binding: &BindingConfig,
        decision: Decision,
        dead_letter: Option<Box<dyn Producer>>,
        hook: Option<ErrorHook>,
        observers: Observers,
    ) -> Self {
        let exhausted = match (decision, dead_letter) {
            (Decision::Drop, _) => Exhausted::Drop,
            (
                Decision::Republish {
                    exchange,
                    routing_key,
                },
                Some(producer),
            ) => Exhausted::Republish(DeadLetterTarget {
                producer,
                exchange,
                routing_key,
            }),
            (Decision::Republish { .. }, None) | (Decision::Reject, _) => Exhausted::Reject,
            (Decision::Requeue, _) => Exhausted::Requeue,
        };
        FailurePolicy {
            binding: Arc::from(binding.name.as_str()),
            exhausted,
            republish_delivery_mode: binding.rabbit_consumer.republish_delivery_mode,
            frame_max_headroom: binding.rabbit_consumer.frame_max_headroom,
            hook,
            observers,
        }
    }

    /// Carries out the policy for a delivery that failed for good; whichever it is, one
    /// warning says so, with the binding, queue, attempts and error. A republish that fails
    /// (or that the message's own headers leave no room for) never loses the message: it is
    /// rejected into the queue's own dead-lettering instead (or requeued when the queue has
    /// none).
    pub(crate) async fn apply(&self, settler: &Settler, failed: FailedDelivery, queue: &str) {
        let (action, outcome) = match &self.exhausted {
            Exhausted::Drop => {
                self.settled(Settle::AutoAcked, None);
                (
                    FailureAction::Dropped,
                    "message dropped: acknowledgeMode NONE leaves nothing to dead-letter"
                        .to_owned(),
                )
            }
            Exhausted::Republish(target) => match self.republish(target, &failed).await {
                Ok(fitted) => {
                    self.dead_lettered(
                        &failed,
                        queue,
                        DeadLetterRoute::Republished {
                            exchange: &target.exchange,
                            routing_key: &target.routing_key,
                        },
                    );
                    (
                        self.settle(settler, Settlement::Ack).await,
                        format!(
                            "message dead-lettered: republished to exchange `{}` with key `{}`{}",
                            target.exchange,
                            target.routing_key,
                            cut_note(&fitted)
                        ),
                    )
                }
                Err(reason) => {
                    self.dead_lettered(&failed, queue, DeadLetterRoute::Rejected);
                    (
                        self.settle(settler, Settlement::Reject).await,
                        format!(
                            "message dead-lettered: republishing to the DLQ failed ({reason}), so it was rejected into the queue's dead-letter exchange"
                        ),
                    )
                }
            },
            Exhausted::Requeue => (
                self.settle(settler, Settlement::Requeue).await,
                "message requeued (requeueRejected)".to_owned(),
            ),
            Exhausted::Reject => {
                self.dead_lettered(&failed, queue, DeadLetterRoute::Rejected);
                (
                    self.settle(settler, Settlement::Reject).await,
                    "message rejected: the broker dead-letters it if the queue has a dead-letter exchange"
                        .to_owned(),
                )
            }
        };
        tracing::warn!(
            binding = %self.binding,
            queue,
            attempts = failed.attempts,
            error = %failed.error,
            kind = failed.error.kind(),
            ?action,
            "{outcome}"
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

    /// Republishes a copy of the failed message to the DLX with the diagnostic headers,
    /// sized to the producer's `frame_max`; says what was cut, or why it could not.
    async fn republish(
        &self,
        target: &DeadLetterTarget,
        failed: &FailedDelivery,
    ) -> Result<Fitted, RepublishError> {
        let frame_max = target
            .producer
            .frame_max()
            .await
            .map_err(RepublishError::FrameMax)?;
        let mut copy = failed.content.message.clone();
        // Set before the headers are sized: it is in the frame too.
        copy.properties.delivery_mode = Some(self.republish_delivery_mode);
        let dead = DeadLetter {
            reason: failed.error.message().to_owned(),
            trace: failed.error.stack_trace(),
            original_exchange: failed.content.exchange.to_string(),
            original_routing_key: failed.content.routing_key.to_string(),
            attempts: failed.attempts,
        };
        let budget = FrameBudget {
            frame_max,
            headroom: self.frame_max_headroom,
        };
        let fitted = republish_headers(&mut copy, &dead, budget)?;
        target
            .producer
            .publish_to(&target.exchange, &target.routing_key, copy)
            .await?;
        Ok(fitted)
    }

    /// Settles, logging a failure (the broker will redeliver), and says what was done.
    async fn settle(&self, settler: &Settler, settlement: Settlement) -> FailureAction {
        let settled = settler.settle(settlement).await;
        if let Err(e) = &settled {
            tracing::warn!(error = %e, ?settlement, "settling failed; the broker will redeliver");
        }
        self.settled(settlement.into(), settled.as_ref().err());
        match settlement {
            Settlement::Ack => FailureAction::Republished,
            Settlement::Reject => FailureAction::Rejected,
            Settlement::Requeue => FailureAction::Requeued,
        }
    }

    fn settled(&self, how: Settle, error: Option<&BinderError>) {
        self.observers.emit(|o| {
            o.settled(&Settled {
                binding: &self.binding,
                how,
                error,
            })
        });
    }

    fn dead_lettered(&self, failed: &FailedDelivery, queue: &str, route: DeadLetterRoute<'_>) {
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
}

/// What the log of a republish says of the headers cut to fit the frame.
fn cut_note(fitted: &Fitted) -> String {
    if !fitted.is_cut() {
        return String::new();
    }
    format!(
        " (to fit the connection's frame_max, less frameMaxHeadroom, {} bytes of x-exception-message and {} of the stack trace were cut)",
        fitted.reason_cut, fitted.trace_cut
    )
}
