//! Input bindings: the consume loop, handler attempts with back-off, and the failure pipeline.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::Mutex as StdMutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;
use tracing::Instrument;

use super::bindings::Context;
use super::condition::Condition;
use super::error::HandlerError;
use super::handler::{Handler, Incoming, Outcome, ReplyBody};
use super::lifecycle::BindingState;
use super::output::OutputInner;
use super::retry::BackOff;
use super::trace;
use crate::binder::{
    Binder, DeadLetter, Inbound, Producer, Settle, Settlement, Subscription, SubscriptionSpec,
    republish_headers,
};
use crate::codec::Codecs;
use crate::config::{AcknowledgeMode, BindingConfig};
use crate::message::Message;

/// RabbitMQ's default `frame_max`; the stack-trace header is cut to fit it, less
/// `frameMaxHeadroom`, on every binder alike.
const FRAME_MAX: usize = 131_072;

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

/// Counts deliveries being processed and holds their tasks, so shutdown can wait for them
/// and abort what outlives its timeout.
#[derive(Debug, Default)]
pub(crate) struct Inflight {
    count: AtomicUsize,
    idle: Notify,
    tasks: StdMutex<JoinSet<()>>,
}

impl Inflight {
    fn spawn(self: &Arc<Self>, fut: impl std::future::Future<Output = ()> + Send + 'static) {
        self.count.fetch_add(1, Ordering::AcqRel);
        let me = self.clone();
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        while tasks.try_join_next().is_some() {}
        tasks.spawn(async move {
            fut.await;
            if me.count.fetch_sub(1, Ordering::AcqRel) == 1 {
                me.idle.notify_waiters();
            }
        });
    }

    /// Waits until nothing is in flight or `timeout` passes; returns whether it drained.
    pub(crate) async fn drain(&self, timeout: Duration) -> bool {
        let wait = async {
            loop {
                let idle = self.idle.notified();
                tokio::pin!(idle);
                idle.as_mut().enable();
                if self.count.load(Ordering::Acquire) == 0 {
                    return;
                }
                idle.await;
            }
        };
        tokio::time::timeout(timeout, wait).await.is_ok()
    }

    /// Aborts what is still running (after the shutdown timeout).
    pub(crate) fn abort_all(&self) {
        self.tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .abort_all();
    }

    pub(crate) fn len(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }
}

/// Where exhausted messages are republished.
#[derive(Debug)]
pub(crate) struct DeadLetterTarget {
    pub producer: Box<dyn Producer>,
    pub exchange: String,
    pub routing_key: String,
}

/// Everything an input binding needs at run time.
/// One listener of an input binding: its condition, handler and reply output.
pub(crate) struct Route {
    pub name: String,
    pub condition: Option<Condition>,
    pub handler: Arc<dyn Handler>,
    pub output: Option<Arc<OutputInner>>,
}

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
    pub content_type: Arc<str>,
}

impl std::fmt::Debug for InputRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InputRuntime")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic payload".to_owned())
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

    /// One attempt: the handler (panics caught), then its reply, sent before the input is
    /// acknowledged.
    async fn attempt(&self, incoming: Incoming, message: &Message) -> Result<(), HandlerError> {
        let route = self.route(message)?;
        let call = AssertUnwindSafe(route.handler.call(incoming)).catch_unwind();
        let outcome = match trace::scope(message, call).await {
            Ok(result) => result?,
            Err(panic) => return Err(HandlerError::panic(panic_text(&*panic))),
        };
        let Outcome::Reply(body) = outcome else {
            return Ok(());
        };
        let Some(output) = &route.output else {
            return Err(HandlerError::fatal(format!(
                "the handler `{}` returned a reply but binding `{}` has no output binding for it",
                route.name, self.name
            )));
        };
        let sent = match body {
            ReplyBody::Value(v) => trace::scope(message, output.send(&*v)).await,
            ReplyBody::Message(m) => trace::scope(message, output.send_message(*m)).await,
        };
        sent.map_err(|e| {
            HandlerError::retryable(format!(
                "sending the reply to `{}` failed: {e}",
                output.binding
            ))
        })
    }

    /// Handles one delivery to the end: attempts with back-off (other deliveries go on while
    /// it waits), then settlement.
    async fn process(self: Arc<Self>, inbound: Inbound, permit: OwnedSemaphorePermit) {
        let mut permit = Some(permit);
        let Inbound {
            message,
            exchange,
            routing_key,
            redelivered,
            settler,
        } = inbound;
        let settler: Arc<dyn Settle> = Arc::from(settler);
        let span = tracing::info_span!(
            "delivery",
            binding = %self.name,
            destination = %self.config.destination,
            message_id = message.properties.message_id.as_deref().unwrap_or(""),
            attempt = tracing::field::Empty,
        );
        let mut attempt = 1;
        let result = loop {
            span.record("attempt", attempt);
            let incoming = Incoming {
                message: message.clone(),
                binding: self.name.clone(),
                attempt,
                redelivered,
                content_type: self.content_type.clone(),
                codecs: self.codecs.clone(),
                settler: self.manual().then(|| settler.clone()),
                context: self.context.clone(),
            };
            match self
                .attempt(incoming, &message)
                .instrument(span.clone())
                .await
            {
                Ok(()) => break Ok(()),
                Err(e)
                    if attempt < self.backoff.max_attempts
                        && e.should_retry(
                            self.config.consumer.default_retryable,
                            &self.config.consumer.retryable_exceptions,
                        ) =>
                {
                    let wait = self.backoff.delay(attempt);
                    tracing::debug!(parent: &span, error = %e, ?wait, "attempt failed, retrying");
                    // The slot is free while waiting: a retry never blocks other deliveries.
                    permit = None;
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                    permit = match self.permits.clone().acquire_owned().await {
                        Ok(p) => Some(p),
                        Err(_) => break Err(e),
                    };
                }
                Err(e) => break Err(e),
            }
        };
        drop(permit);
        match result {
            Ok(()) if self.auto_ack() || self.manual() => {}
            Ok(()) => {
                if let Err(e) = settler.settle(Settlement::Ack).await {
                    tracing::warn!(parent: &span, error = %e, "ack failed; the broker will redeliver");
                }
            }
            Err(error) => {
                let failed = FailedDelivery {
                    message,
                    exchange,
                    routing_key,
                    error,
                    attempts: attempt,
                };
                self.fail(settler.as_ref(), failed).instrument(span).await;
            }
        }
    }

    /// The failure pipeline: republish to the DLX with diagnostics, or reject, or requeue.
    /// A republish that is not confirmed never loses the message: it is rejected into the
    /// queue's own dead-lettering instead (or requeued when the queue has none).
    async fn fail(&self, settler: &dyn Settle, failed: FailedDelivery) {
        let rabbit = &self.config.rabbit_consumer;
        let action = if self.auto_ack() {
            FailureAction::Dropped
        } else if let (true, true, Some(target)) = (
            rabbit.republish_to_dlq,
            rabbit.common.auto_bind_dlq,
            &self.dead_letter,
        ) {
            let mut copy = failed.message.clone();
            republish_headers(
                &mut copy,
                &DeadLetter {
                    reason: failed.error.message().to_owned(),
                    trace: failed.error.trace().to_owned(),
                    original_exchange: failed.exchange.clone(),
                    original_routing_key: failed.routing_key.clone(),
                    attempts: failed.attempts,
                },
                FRAME_MAX.saturating_sub(rabbit.frame_max_headroom as usize),
            );
            copy.properties.delivery_mode = Some(rabbit.republish_delivery_mode);
            match target
                .producer
                .publish_to(&target.exchange, &target.routing_key, copy)
                .await
            {
                Ok(()) => self.settle(settler, Settlement::Ack).await,
                Err(e) => {
                    tracing::warn!(error = %e, "republishing to the DLQ failed; rejecting into the queue's dead-letter exchange instead");
                    self.settle(settler, Settlement::Reject).await
                }
            }
        } else if rabbit.requeue_rejected {
            self.settle(settler, Settlement::Requeue).await
        } else {
            self.settle(settler, Settlement::Reject).await
        };
        tracing::warn!(
            error = %failed.error,
            kind = failed.error.kind(),
            attempts = failed.attempts,
            ?action,
            "message failed"
        );
        if let Some(hook) = &self.hook {
            let report = Failure {
                binding: self.name.to_string(),
                error: failed.error,
                attempts: failed.attempts,
                action,
                message: failed.message,
            };
            // The hook only observes; a panic in it must not stop the binding.
            let _ = std::panic::catch_unwind(AssertUnwindSafe(|| hook(&report)));
        }
    }

    async fn settle(&self, settler: &dyn Settle, settlement: Settlement) -> FailureAction {
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

struct FailedDelivery {
    message: Message,
    exchange: String,
    routing_key: String,
    error: HandlerError,
    attempts: u32,
}

/// Consumes one queue of an input binding, following its desired state.
pub(crate) async fn run_queue(
    rt: Arc<InputRuntime>,
    binder: Arc<dyn Binder>,
    spec: SubscriptionSpec,
    mut desired: watch::Receiver<BindingState>,
    actual: watch::Sender<BindingState>,
) {
    let mut subscription: Option<Box<dyn Subscription>> = None;
    let retry = Duration::from_millis(rt.config.rabbit_consumer.recovery_interval);
    loop {
        let want = *desired.borrow_and_update();
        match want {
            BindingState::Running => {
                let Some(sub) = subscription.as_mut() else {
                    match binder.subscribe(spec.clone()).await {
                        Ok(s) => {
                            subscription = Some(s);
                            actual.send_replace(BindingState::Running);
                        }
                        Err(e) => {
                            tracing::error!(binding = %rt.name, queue = %spec.queue, error = %e, "cannot consume; retrying");
                            tokio::select! {
                                _ = tokio::time::sleep(retry) => {}
                                changed = desired.changed() => if changed.is_err() { break },
                            }
                        }
                    }
                    continue;
                };
                // Resumed after a pause: the subscription is still there.
                actual.send_if_modified(|s| {
                    let changed = *s != BindingState::Running;
                    *s = BindingState::Running;
                    changed
                });
                // Control changes win over deliveries, so a stop takes effect at once.
                tokio::select! {
                    biased;
                    changed = desired.changed() => if changed.is_err() { break },
                    next = sub.next() => match next {
                        Some(inbound) => {
                            // A free handler slot, so `concurrency` bounds work in progress
                            // and, at 1, messages start in queue order. It is taken after the
                            // delivery: a retry waiting for a slot must not wait on a loop
                            // that holds one while no delivery can come (prefetch exhausted).
                            let permit = tokio::select! {
                                biased;
                                _ = desired.changed() => None,
                                p = rt.permits.clone().acquire_owned() => p.ok(),
                            };
                            match permit {
                                Some(permit) => {
                                    let rt2 = rt.clone();
                                    rt.inflight.spawn(rt2.process(inbound, permit));
                                }
                                None => {
                                    // Paused, stopped or shutting down before it started:
                                    // the delivery goes back to the queue untouched.
                                    let _ = inbound.settler.settle(Settlement::Requeue).await;
                                }
                            }
                        }
                        None => {
                            // The broker cancelled the consumer (queue deleted, connection
                            // lost): subscribe again after the recovery interval.
                            subscription = None;
                            tokio::select! {
                                _ = tokio::time::sleep(retry) => {}
                                changed = desired.changed() => if changed.is_err() { break },
                            }
                        }
                    },
                }
            }
            BindingState::Paused => {
                actual.send_replace(BindingState::Paused);
                if desired.changed().await.is_err() {
                    break;
                }
            }
            BindingState::Stopped => {
                if let Some(mut sub) = subscription.take() {
                    let _ = sub.cancel().await;
                }
                actual.send_replace(BindingState::Stopped);
                if desired.changed().await.is_err() {
                    break;
                }
            }
        }
    }
    if let Some(mut sub) = subscription.take() {
        let _ = sub.cancel().await;
    }
    actual.send_replace(BindingState::Stopped);
}
