//! One delivery of an input binding: its attempts (the handler and its reply), retries with
//! back-off that never hold up the deliveries behind them, and its settlement; a delivery
//! that fails for good goes to the binding's [`FailurePolicy`]. The loop that feeds
//! deliveries is in [`queue_loop`](super::queue_loop).

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::Instrument;

use super::super::bindings::Context;
use super::super::error::HandlerError;
use super::super::handler::{Call, Outcome, ReplyBody};
use super::super::health::HealthTracker;
use super::super::inflight::Inflight;
use super::super::observe::{
    Failed, Handled, Observers, Received, Retried, Settle, Settled, Stamp,
};
use super::super::panics;
use super::super::retry::BackOff;
use super::super::trace;
use super::failure::{FailedDelivery, FailurePolicy};
use super::route::Routes;
use crate::binder::{Batching, BinderFuture, Inbound, Published, Settlement, Settler};
use crate::codec::Codecs;
use crate::config::AcknowledgeMode;

/// Everything an input binding needs at run time.
pub(crate) struct InputRuntime {
    pub name: Arc<str>,
    /// The binding's destination (named in each delivery's span).
    pub destination: Arc<str>,
    /// `consumer.concurrency`: handlers run in the queue loop at 1, in tasks above.
    pub concurrency: u32,
    /// How deliveries are assembled into batches, for a `consumer.batchMode` binding
    /// ([`batch`](super::batch)); `None`: one at a time.
    pub batch: Option<Batching>,
    /// `consumer.defaultRetryable`.
    pub default_retryable: bool,
    /// `consumer.retryableExceptions`.
    pub retryable_exceptions: BTreeMap<String, bool>,
    /// Who settles deliveries, as the binder's consumer says.
    pub acknowledge_mode: AcknowledgeMode,
    pub routes: Routes,
    pub context: Arc<Context>,
    pub failure: FailurePolicy,
    pub codecs: Arc<Codecs>,
    pub backoff: BackOff,
    pub permits: Arc<Semaphore>,
    pub inflight: Arc<Inflight>,
    pub health: HealthTracker,
    pub content_type: Arc<str>,
    pub observers: Observers,
}

impl std::fmt::Debug for InputRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InputRuntime")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl InputRuntime {
    pub(super) fn manual(&self) -> bool {
        self.acknowledge_mode == AcknowledgeMode::Manual
    }

    fn auto_ack(&self) -> bool {
        self.acknowledge_mode == AcknowledgeMode::None
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
            Err(panic) => Err(caught(&*panic)),
        })
    }

    async fn attempt_unguarded(&self, pending: &Pending, attempt: u32) -> Result<(), HandlerError> {
        let message = &pending.content.message;
        let route = self.routes.choose(message)?;
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
        // Boxed: most handlers return no reply, and a publish inlined here would make every
        // delivery's future (moved once per delivery) several times larger.
        Box::pin(self.send_reply(route, body)).await
    }

    /// Sends a handler's reply to its listener's output binding.
    pub(super) async fn send_reply(
        &self,
        route: &super::route::Route,
        body: ReplyBody,
    ) -> Result<(), HandlerError> {
        let Some(output) = &route.output else {
            return Err(HandlerError::fatal(format!(
                "the handler `{}` returned a reply but binding `{}` has no output binding for it",
                route.name, self.name
            )));
        };
        let sent = match body {
            ReplyBody::Value(v) => output.send(&*v).await,
            ReplyBody::Message(m) => output.send_message(*m).await,
        };
        sent.map_err(|e| {
            HandlerError::retryable(format!(
                "sending the reply to `{}` failed: {e}",
                output.binding
            ))
        })
    }

    pub(super) fn retryable(&self, error: &HandlerError, attempt: u32) -> bool {
        attempt < self.backoff.max_attempts
            && error.should_retry(self.default_retryable, &self.retryable_exceptions)
    }

    pub(super) fn pending(&self, inbound: Inbound, queue: Arc<str>) -> Pending {
        // The attempt number is not a span field: a subscriber that formats spans appends
        // every recorded value (`attempt=1 attempt=2 ...`); events that need it carry it.
        // At debug level: with the default `info` logging a disabled span costs nothing per
        // delivery, and the runtime's own warnings name their binding and queue themselves.
        let span = tracing::debug_span!(
            "delivery",
            binding = %self.name,
            destination = %self.destination,
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
            if self.observers.any() {
                self.observers.emit(|o| {
                    o.received(&Received {
                        binding: &self.name,
                        binding_index: self.observers.binding_index(),
                        queue: &pending.queue,
                        redelivered: pending.redelivered,
                    })
                });
            }
            let started = self.observers.clock();
            let result = self.run_attempt(&pending, 1).await;
            drop(permit);
            self.observe_attempt(started, 1, &result);
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
            self.retried(attempt, wait);
            let started = self.observers.clock();
            let result = self.run_attempt(&pending, attempt).await;
            drop(permit);
            self.observe_attempt(started, attempt, &result);
            match result {
                Err(e) if self.retryable(&e, attempt) => error = e,
                result => return self.conclude(&pending, result, attempt).await,
            }
        }
        self.conclude(&pending, Err(error), attempt).await;
    }

    /// Tells observers that attempt number `attempt` is about to run after `delay`.
    pub(super) fn retried(&self, attempt: u32, delay: std::time::Duration) {
        self.observers.emit(|o| {
            o.retried(&Retried {
                binding: &self.name,
                binding_index: self.observers.binding_index(),
                attempt,
                delay,
            })
        });
    }

    /// Tells observers how an attempt that started at `started` (when someone observes)
    /// ended.
    pub(super) fn observe_attempt(
        &self,
        started: Option<Stamp>,
        attempt: u32,
        result: &Result<(), HandlerError>,
    ) {
        let Some(started) = started else {
            return;
        };
        let duration = self.observers.elapsed(started);
        match result {
            Ok(()) => self.observers.emit(|o| {
                o.handled(&Handled {
                    binding: &self.name,
                    binding_index: self.observers.binding_index(),
                    attempt,
                    duration,
                })
            }),
            Err(error) => {
                let will_retry = self.retryable(error, attempt);
                self.observers.emit(|o| {
                    o.failed(&Failed {
                        binding: &self.name,
                        binding_index: self.observers.binding_index(),
                        attempt,
                        duration,
                        error,
                        will_retry,
                    })
                })
            }
        }
    }

    fn settled(&self, how: Settle, error: Option<&crate::binder::BinderError>) {
        self.observers.emit(|o| {
            o.settled(&Settled {
                binding: &self.name,
                binding_index: self.observers.binding_index(),
                how,
                error,
            })
        });
    }

    /// Settles a delivery after its last attempt: acked after a success (unless the broker
    /// or the handler settles), else down the failure pipeline.
    /// An ack that completes at once costs no allocation; the failure pipeline is boxed,
    /// so that the future of every delivery stays small.
    pub(super) fn conclude<'a>(
        &'a self,
        pending: &'a Pending,
        result: Result<(), HandlerError>,
        attempts: u32,
    ) -> BinderFuture<'a, ()> {
        match result {
            Ok(()) if self.manual() => BinderFuture::ready(()),
            Ok(()) if self.auto_ack() => {
                self.settled(Settle::AutoAcked, None);
                BinderFuture::ready(())
            }
            Ok(()) => match pending.settler.get().settle(Settlement::Ack) {
                BinderFuture::Ready(Some(Ok(()))) => {
                    self.settled(Settle::Ack, None);
                    BinderFuture::ready(())
                }
                acked => BinderFuture::boxed(async move {
                    let acked = acked.await;
                    if let Err(e) = &acked {
                        tracing::warn!(parent: &pending.span, error = %e, "ack failed; the broker will redeliver");
                    }
                    self.settled(Settle::Ack, acked.as_ref().err());
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
                    self.failure
                        .apply(pending.settler.get(), failed, &pending.queue)
                        .instrument(pending.span.clone()),
                )
            }
        }
    }
}

/// The failure of an attempt whose handler panicked with `panic`, with where it happened
/// (noted by the runtime's panic hook on this thread).
pub(super) fn caught(panic: &(dyn std::any::Any + Send)) -> HandlerError {
    let said = panics::text(panic);
    let (location, backtrace) =
        panics::take(&said).map_or((None, None), |n| (n.location, n.backtrace));
    HandlerError::panic(said, location.as_deref(), backtrace)
}

/// A delivery being handled: what its attempts and its settlement need.
pub(crate) struct Pending {
    /// The message, shared with the binder: a payload handler decodes from it in place
    /// (an `Incoming` handler gets its own copy).
    pub(super) content: Arc<Published>,
    /// The queue it came from.
    pub(super) queue: Arc<str>,
    pub(super) redelivered: bool,
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
