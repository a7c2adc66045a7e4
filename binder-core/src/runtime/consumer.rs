//! Input bindings: handler attempts with back-off, and the failure pipeline. The loop that
//! feeds them is in `queue`; what is in flight is counted in `inflight`.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::Instrument;

use super::bindings::Context;
use super::condition::Condition;
use super::error::HandlerError;
use super::handler::{Call, Handler, Outcome, ReplyBody};
use super::inflight::Inflight;
use super::output::OutputInner;
use super::panics;
use super::retry::BackOff;
use super::trace;
use crate::binder::{
    BinderFuture, DeadLetter, Fitted, FrameBudget, Inbound, Producer, Published, Settlement,
    Settler, republish_headers,
};
use crate::codec::Codecs;
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

/// Where exhausted messages are republished.
#[derive(Debug)]
pub(crate) struct DeadLetterTarget {
    pub producer: Box<dyn Producer>,
    pub exchange: String,
    pub routing_key: String,
}

/// One listener of an input binding: its condition, handler and reply output.
pub(crate) struct Route {
    pub name: String,
    pub condition: Option<Condition>,
    pub handler: Arc<dyn Handler>,
    pub output: Option<Arc<OutputInner>>,
}

/// Everything an input binding needs at run time.
pub(crate) struct InputRuntime {
    pub name: Arc<str>,
    pub config: BindingConfig,
    pub routes: Vec<Route>,
    pub context: Arc<Context>,
    pub dead_letter: Option<DeadLetterTarget>,
    pub codecs: Arc<Codecs>,
    pub hook: Option<ErrorHook>,
    pub backoff: BackOff,
    pub permits: Arc<Semaphore>,
    pub inflight: Arc<Inflight>,
    pub health: super::health::HealthTracker,
    pub content_type: Arc<str>,
}

impl std::fmt::Debug for InputRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InputRuntime")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl InputRuntime {
    fn manual(&self) -> bool {
        self.config.rabbit_consumer.acknowledge_mode == AcknowledgeMode::Manual
    }

    fn auto_ack(&self) -> bool {
        self.config.rabbit_consumer.acknowledge_mode == AcknowledgeMode::None
    }

    /// The listener for a message: the one conditional listener whose condition matches,
    /// else the unconditional one. None matching, or several, is a failure (never a silent
    /// drop).
    fn route(&self, message: &Message) -> Result<&Route, HandlerError> {
        if self.routes.len() == 1 && self.routes[0].condition.is_none() {
            return Ok(&self.routes[0]);
        }
        let header = |name: &str| message.headers.get(name).map(|v| v.to_string());
        let matching: Vec<&Route> = self
            .routes
            .iter()
            .filter(|r| r.condition.as_ref().is_some_and(|c| c.matches(&header)))
            .collect();
        match matching.as_slice() {
            [one] => Ok(one),
            [] => self
                .routes
                .iter()
                .find(|r| r.condition.is_none())
                .ok_or_else(|| {
                    HandlerError::fatal(format!(
                        "no listener of binding `{}` accepts this message (their conditions: {})",
                        self.name,
                        self.routes
                            .iter()
                            .map(|r| r.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                }),
            several => Err(HandlerError::fatal(format!(
                "the conditions of several listeners of binding `{}` match this message: {}",
                self.name,
                several
                    .iter()
                    .map(|r| r.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }

    /// One attempt: the handler, then its reply, sent before the input is acknowledged; all
    /// of it in the message's trace context. A panic anywhere in it (the handler's body or
    /// the synchronous part of its call, the reply's encoding) is caught and becomes a
    /// failure of the attempt, so the binding keeps running, with where it happened (noted
    /// by the runtime's panic hook on this thread, see `panics`).
    ///
    /// Built from combinators rather than as an `async fn`: each async layer would keep its
    /// own copy of the future it wraps, and the whole is moved once per delivery.
    fn attempt<'a>(
        &'a self,
        pending: &'a Pending,
        attempt: u32,
    ) -> impl Future<Output = Result<(), HandlerError>> + 'a {
        let guarded = AssertUnwindSafe(self.attempt_unguarded(pending, attempt)).catch_unwind();
        trace::scope(&pending.content.message, guarded).map(|outcome| match outcome {
            Ok(result) => result,
            Err(panic) => {
                let said = panics::text(&*panic);
                let (location, backtrace) =
                    panics::take(&said).map_or((None, None), |n| (n.location, n.backtrace));
                Err(HandlerError::panic(said, location.as_deref(), backtrace))
            }
        })
    }

    async fn attempt_unguarded(&self, pending: &Pending, attempt: u32) -> Result<(), HandlerError> {
        let message = &pending.content.message;
        let route = self.route(message)?;
        let call = Call {
            message,
            attempt,
            redelivered: pending.redelivered,
            binding: &self.name,
            content_type: &self.content_type,
            codecs: &self.codecs,
            settler: pending.settler.shared(),
            context: &self.context,
        };
        let Outcome::Reply(body) = route.handler.call(call).await? else {
            return Ok(());
        };
        let Some(output) = &route.output else {
            return Err(HandlerError::fatal(format!(
                "the handler `{}` returned a reply but binding `{}` has no output binding for it",
                route.name, self.name
            )));
        };
        // Boxed: most handlers return no reply, and a publish inlined here would make every
        // delivery's future (moved once per delivery) several times larger.
        let sent = match body {
            ReplyBody::Value(v) => Box::pin(output.send(&*v)).await,
            ReplyBody::Message(m) => Box::pin(output.send_message(*m)).await,
        };
        sent.map_err(|e| {
            HandlerError::retryable(format!(
                "sending the reply to `{}` failed: {e}",
                output.binding
            ))
        })
    }

    fn retryable(&self, error: &HandlerError, attempt: u32) -> bool {
        attempt < self.backoff.max_attempts
            && error.should_retry(
                self.config.consumer.default_retryable,
                &self.config.consumer.retryable_exceptions,
            )
    }

    fn pending(&self, inbound: Inbound, queue: Arc<str>) -> Pending {
        // The attempt number is not a span field: a subscriber that formats spans appends
        // every recorded value (`attempt=1 attempt=2 ...`); events that need it carry it.
        // At debug level: with the default `info` logging a disabled span costs nothing per
        // delivery, and the runtime's own warnings name their binding and queue themselves.
        let span = tracing::debug_span!(
            "delivery",
            binding = %self.name,
            destination = %self.config.destination,
            message_id = tracing::field::Empty,
        );
        if let Some(id) = inbound.message().properties.message_id.as_deref() {
            span.record("message_id", id);
        }
        Pending {
            content: inbound.content,
            queue,
            redelivered: inbound.redelivered,
            // Shared only where a handler may keep it: no allocation per delivery otherwise.
            settler: if self.manual() {
                HeldSettler::Shared(Arc::new(inbound.settler))
            } else {
                HeldSettler::Owned(inbound.settler)
            },
            span,
        }
    }

    /// Attempt number `attempt` of a delivery, in the delivery's span.
    fn run_attempt<'a>(
        &'a self,
        pending: &'a Pending,
        attempt: u32,
    ) -> impl Future<Output = Result<(), HandlerError>> + 'a {
        self.attempt(pending, attempt)
            .instrument(pending.span.clone())
    }

    /// Handles a delivery holding a handler slot: its first attempt runs here (in the queue
    /// loop at `concurrency` 1, so no task is spawned per message); when that attempt fails
    /// and may be retried, the retries go on in a task of their own, so the back-off never
    /// holds up the deliveries behind it.
    ///
    /// The delivery becomes a [`Pending`] before the future is built, so the future holds
    /// it once rather than beside the [`Inbound`] it came from. `queue` is the queue it
    /// came from (for the log of a failure).
    pub(crate) fn handle(
        self: Arc<Self>,
        inbound: Inbound,
        queue: Arc<str>,
        permit: OwnedSemaphorePermit,
    ) -> impl Future<Output = ()> + Send {
        let pending = self.pending(inbound, queue);
        async move {
            let result = self.run_attempt(&pending, 1).await;
            drop(permit);
            match result {
                Err(error) if self.retryable(&error, 1) => {
                    let me = self.clone();
                    self.inflight.spawn(me.retry(pending, error, 1));
                }
                result => self.conclude(&pending, result, 1).await,
            }
        }
    }

    /// Retries a delivery whose attempt number `attempt` failed with `error`: waits the
    /// back-off without holding a handler slot, then takes one for the next attempt.
    async fn retry(self: Arc<Self>, pending: Pending, mut error: HandlerError, mut attempt: u32) {
        loop {
            let wait = self.backoff.delay(attempt);
            tracing::debug!(parent: &pending.span, %error, attempt, ?wait, "attempt failed, retrying");
            tokio::time::sleep(wait).await;
            // The semaphore is never closed; were it, the last error would stand.
            let Ok(permit) = self.permits.clone().acquire_owned().await else {
                break;
            };
            attempt += 1;
            let result = self.run_attempt(&pending, attempt).await;
            drop(permit);
            match result {
                Err(e) if self.retryable(&e, attempt) => error = e,
                result => return self.conclude(&pending, result, attempt).await,
            }
        }
        self.conclude(&pending, Err(error), attempt).await;
    }

    /// Settles a delivery after its last attempt: acked after a success (unless the broker
    /// or the handler settles), else down the failure pipeline.
    /// An ack that completes at once costs no allocation; the failure pipeline is boxed,
    /// so that the future of every delivery stays small.
    fn conclude<'a>(
        &'a self,
        pending: &'a Pending,
        result: Result<(), HandlerError>,
        attempts: u32,
    ) -> BinderFuture<'a, ()> {
        match result {
            Ok(()) if self.auto_ack() || self.manual() => BinderFuture::ready(()),
            Ok(()) => match pending.settler.get().settle(Settlement::Ack) {
                BinderFuture::Ready(Some(Ok(()))) => BinderFuture::ready(()),
                acked => BinderFuture::boxed(async move {
                    if let Err(e) = acked.await {
                        tracing::warn!(parent: &pending.span, error = %e, "ack failed; the broker will redeliver");
                    }
                }),
            },
            Err(error) => {
                let failed = FailedDelivery {
                    content: pending.content.clone(),
                    error,
                    attempts,
                };
                // Boxed: the failure pipeline's future is large and rarely needed.
                BinderFuture::boxed(
                    self.fail(pending.settler.get(), failed, &pending.queue)
                        .instrument(pending.span.clone()),
                )
            }
        }
    }

    /// The failure pipeline: republish to the DLX with diagnostics, or reject, or requeue;
    /// whichever it is, one warning says so, with the binding, queue, attempts and error.
    /// A republish that fails (or that the message's own headers leave no room for) never
    /// loses the message: it is rejected into the queue's own dead-lettering instead (or
    /// requeued when the queue has none).
    async fn fail(&self, settler: &Settler, failed: FailedDelivery, queue: &str) {
        let rabbit = &self.config.rabbit_consumer;
        let (action, outcome) = if self.auto_ack() {
            (
                FailureAction::Dropped,
                "message dropped: acknowledgeMode NONE leaves nothing to dead-letter".to_owned(),
            )
        } else if let (true, true, Some(target)) = (
            rabbit.republish_to_dlq,
            rabbit.common.auto_bind_dlq,
            &self.dead_letter,
        ) {
            match self.republish(target, &failed).await {
                Ok(fitted) => (
                    self.settle(settler, Settlement::Ack).await,
                    format!(
                        "message dead-lettered: republished to exchange `{}` with key `{}`{}",
                        target.exchange,
                        target.routing_key,
                        cut_note(&fitted)
                    ),
                ),
                Err(reason) => (
                    self.settle(settler, Settlement::Reject).await,
                    format!(
                        "message dead-lettered: republishing to the DLQ failed ({reason}), so it was rejected into the queue's dead-letter exchange"
                    ),
                ),
            }
        } else if rabbit.requeue_rejected {
            (
                self.settle(settler, Settlement::Requeue).await,
                "message requeued (requeueRejected)".to_owned(),
            )
        } else {
            (
                self.settle(settler, Settlement::Reject).await,
                "message rejected: the broker dead-letters it if the queue has a dead-letter exchange"
                    .to_owned(),
            )
        };
        tracing::warn!(
            binding = %self.name,
            queue,
            attempts = failed.attempts,
            error = %failed.error,
            kind = failed.error.kind(),
            ?action,
            "{outcome}"
        );
        if let Some(hook) = &self.hook {
            let report = Failure {
                binding: self.name.to_string(),
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
    ) -> Result<Fitted, String> {
        let rabbit = &self.config.rabbit_consumer;
        let frame_max = target
            .producer
            .frame_max()
            .await
            .map_err(|e| e.to_string())?;
        let mut copy = failed.content.message.clone();
        // Set before the headers are sized: it is in the frame too.
        copy.properties.delivery_mode = Some(rabbit.republish_delivery_mode);
        let dead = DeadLetter {
            reason: failed.error.message().to_owned(),
            trace: failed.error.stack_trace(),
            original_exchange: failed.content.exchange.to_string(),
            original_routing_key: failed.content.routing_key.to_string(),
            attempts: failed.attempts,
        };
        let budget = FrameBudget {
            frame_max,
            headroom: rabbit.frame_max_headroom,
        };
        let fitted = republish_headers(&mut copy, &dead, budget).map_err(|e| e.to_string())?;
        target
            .producer
            .publish_to(&target.exchange, &target.routing_key, copy)
            .await
            .map_err(|e| e.to_string())?;
        Ok(fitted)
    }

    async fn settle(&self, settler: &Settler, settlement: Settlement) -> FailureAction {
        if let Err(e) = settler.settle(settlement).await {
            tracing::warn!(error = %e, ?settlement, "settling failed; the broker will redeliver");
        }
        match settlement {
            Settlement::Ack => FailureAction::Republished,
            Settlement::Reject => FailureAction::Rejected,
            Settlement::Requeue => FailureAction::Requeued,
        }
    }
}

/// A delivery being handled: what its attempts and its settlement need.
struct Pending {
    /// The message, shared with the binder: a payload handler decodes from it in place
    /// (an `Incoming` handler gets its own copy).
    content: Arc<Published>,
    /// The queue it came from.
    queue: Arc<str>,
    redelivered: bool,
    settler: HeldSettler,
    span: tracing::Span,
}

/// A delivery's settler as the runtime holds it: shared only with a `MANUAL` handler, which
/// may keep it beyond its call.
enum HeldSettler {
    Owned(Settler),
    Shared(Arc<Settler>),
}

impl HeldSettler {
    fn get(&self) -> &Settler {
        match self {
            HeldSettler::Owned(s) => s,
            HeldSettler::Shared(s) => s,
        }
    }

    /// The settler a `MANUAL` handler is given.
    fn shared(&self) -> Option<&Arc<Settler>> {
        match self {
            HeldSettler::Owned(_) => None,
            HeldSettler::Shared(s) => Some(s),
        }
    }
}

struct FailedDelivery {
    content: Arc<Published>,
    error: HandlerError,
    attempts: u32,
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
