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

/// Counts deliveries being handled, wherever they run, and holds the tasks of those handled
/// away from their queue loop (retries, `concurrency` above 1), so shutdown can wait for them
/// and abort what outlives its timeout.
#[derive(Debug, Default)]
pub(crate) struct Inflight {
    count: AtomicUsize,
    /// Someone waits for `count` to reach 0 (shutdown): only then is `idle` notified, so
    /// the usual delivery does not take the notifier's lock.
    waiting: std::sync::atomic::AtomicBool,
    idle: Notify,
    tasks: StdMutex<Tasks>,
}

/// The tasks of deliveries handled away from their loop; once closed (shutdown gave up on
/// them), no new one starts.
#[derive(Debug, Default)]
struct Tasks {
    set: JoinSet<()>,
    closed: bool,
}

/// One delivery counted in flight until dropped (also when its task is aborted).
pub(crate) struct InflightGuard(Arc<Inflight>);

impl Drop for InflightGuard {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 && self.0.waiting.load(Ordering::SeqCst)
        {
            self.0.idle.notify_waiters();
        }
    }
}

impl Inflight {
    /// Counts one delivery in flight until the guard drops.
    fn enter(self: &Arc<Self>) -> InflightGuard {
        self.count.fetch_add(1, Ordering::SeqCst);
        InflightGuard(self.clone())
    }

    /// Runs a delivery's work in a task of its own. After shutdown aborted the others, the
    /// work is dropped instead (its delivery returns to the queue).
    fn spawn(self: &Arc<Self>, fut: impl std::future::Future<Output = ()> + Send + 'static) {
        let guard = self.enter();
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        if tasks.closed {
            return;
        }
        while tasks.set.try_join_next().is_some() {}
        tasks.set.spawn(async move {
            fut.await;
            drop(guard);
        });
    }

    /// Waits until nothing is in flight.
    pub(crate) async fn idle(&self) {
        // Set before reading the count: a guard that brings it to 0 after the read sees it
        // (both sequentially consistent) and notifies.
        self.waiting.store(true, Ordering::SeqCst);
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.count.load(Ordering::SeqCst) == 0 {
                return;
            }
            idle.await;
        }
    }

    /// Aborts the tasks still running (after the shutdown timeout) and waits until they are
    /// gone, so their deliveries are unsettled (and return to their queues) when it returns.
    pub(crate) async fn abort_all(&self) {
        let mut tasks = {
            let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
            tasks.closed = true;
            std::mem::take(&mut tasks.set)
        };
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
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

    /// One attempt: the handler, then its reply, sent before the input is acknowledged; all
    /// of it in the message's trace context. A panic anywhere in it (the handler's body or
    /// the synchronous part of its call, the reply's encoding) is caught and becomes a
    /// failure of the attempt, so the binding keeps running.
    async fn attempt(&self, incoming: Incoming, message: &Message) -> Result<(), HandlerError> {
        let attempt = AssertUnwindSafe(self.attempt_unguarded(incoming, message)).catch_unwind();
        match trace::scope(message, attempt).await {
            Ok(result) => result,
            Err(panic) => Err(HandlerError::panic(panic_text(&*panic))),
        }
    }

    async fn attempt_unguarded(
        &self,
        incoming: Incoming,
        message: &Message,
    ) -> Result<(), HandlerError> {
        let route = self.route(message)?;
        let Outcome::Reply(body) = route.handler.call(incoming).await? else {
            return Ok(());
        };
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

    fn retryable(&self, error: &HandlerError, attempt: u32) -> bool {
        attempt < self.backoff.max_attempts
            && error.should_retry(
                self.config.consumer.default_retryable,
                &self.config.consumer.retryable_exceptions,
            )
    }

    fn pending(&self, inbound: Inbound) -> Pending {
        let span = tracing::info_span!(
            "delivery",
            binding = %self.name,
            destination = %self.config.destination,
            message_id = inbound.message.properties.message_id.as_deref().unwrap_or(""),
            attempt = tracing::field::Empty,
        );
        Pending {
            message: inbound.message,
            exchange: inbound.exchange,
            routing_key: inbound.routing_key,
            redelivered: inbound.redelivered,
            settler: inbound.settler,
            span,
        }
    }

    /// Runs attempt number `attempt` of a delivery.
    async fn run_attempt(&self, pending: &Pending, attempt: u32) -> Result<(), HandlerError> {
        pending.span.record("attempt", attempt);
        let incoming = Incoming {
            message: pending.message.clone(),
            binding: self.name.clone(),
            attempt,
            redelivered: pending.redelivered,
            content_type: self.content_type.clone(),
            codecs: self.codecs.clone(),
            settler: self.manual().then(|| pending.settler.clone()),
            context: self.context.clone(),
        };
        self.attempt(incoming, &pending.message)
            .instrument(pending.span.clone())
            .await
    }

    /// Handles a delivery holding a handler slot: its first attempt runs here (in the queue
    /// loop at `concurrency` 1, so no task is spawned per message); when that attempt fails
    /// and may be retried, the retries go on in a task of their own, so the back-off never
    /// holds up the deliveries behind it.
    async fn handle(self: Arc<Self>, inbound: Inbound, permit: OwnedSemaphorePermit) {
        let pending = self.pending(inbound);
        let result = self.run_attempt(&pending, 1).await;
        drop(permit);
        match result {
            Err(error) if self.retryable(&error, 1) => {
                let me = self.clone();
                self.inflight.spawn(me.retry(pending, error, 1));
            }
            result => self.conclude(pending, result, 1).await,
        }
    }

    /// Retries a delivery whose attempt number `attempt` failed with `error`: waits the
    /// back-off without holding a handler slot, then takes one for the next attempt.
    async fn retry(self: Arc<Self>, pending: Pending, mut error: HandlerError, mut attempt: u32) {
        loop {
            let wait = self.backoff.delay(attempt);
            tracing::debug!(parent: &pending.span, %error, ?wait, "attempt failed, retrying");
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
                result => return self.conclude(pending, result, attempt).await,
            }
        }
        self.conclude(pending, Err(error), attempt).await;
    }

    /// Settles a delivery after its last attempt: acked after a success (unless the broker
    /// or the handler settles), else down the failure pipeline.
    async fn conclude(&self, pending: Pending, result: Result<(), HandlerError>, attempts: u32) {
        match result {
            Ok(()) if self.auto_ack() || self.manual() => {}
            Ok(()) => {
                if let Err(e) = pending.settler.settle(Settlement::Ack).await {
                    tracing::warn!(parent: &pending.span, error = %e, "ack failed; the broker will redeliver");
                }
            }
            Err(error) => {
                let span = pending.span.clone();
                let settler = pending.settler.clone();
                let failed = FailedDelivery {
                    message: pending.message,
                    exchange: pending.exchange,
                    routing_key: pending.routing_key,
                    error,
                    attempts,
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
                    original_exchange: failed.exchange.to_string(),
                    original_routing_key: failed.routing_key.to_string(),
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

/// A delivery being handled: what its attempts and its settlement need.
struct Pending {
    message: Message,
    exchange: Arc<str>,
    routing_key: Arc<str>,
    redelivered: bool,
    settler: Arc<dyn Settle>,
    span: tracing::Span,
}

struct FailedDelivery {
    message: Message,
    exchange: Arc<str>,
    routing_key: Arc<str>,
    error: HandlerError,
    attempts: u32,
}

/// Consumes one queue of an input binding, following its desired state.
pub(crate) async fn run_queue(
    rt: Arc<InputRuntime>,
    binder: Arc<dyn Binder>,
    spec: SubscriptionSpec,
    desired: watch::Receiver<BindingState>,
    actual: watch::Sender<BindingState>,
) {
    let recovery = Duration::from_millis(rt.config.rabbit_consumer.recovery_interval);
    let reported = *actual.borrow();
    let mut queue = QueueLoop {
        rt,
        binder,
        spec,
        desired,
        reported,
        actual,
        subscription: None,
        recovery,
    };
    queue.run().await;
    if let Some(mut sub) = queue.subscription.take() {
        let _ = sub.cancel().await;
    }
    queue.report(BindingState::Stopped);
}

/// The loop of one queue: subscribes, takes deliveries and hands them to the handlers, and
/// follows the binding's desired state.
struct QueueLoop {
    rt: Arc<InputRuntime>,
    binder: Arc<dyn Binder>,
    spec: SubscriptionSpec,
    desired: watch::Receiver<BindingState>,
    actual: watch::Sender<BindingState>,
    /// What `actual` holds (checked on every delivery without taking its lock).
    reported: BindingState,
    subscription: Option<Box<dyn Subscription>>,
    /// Wait before subscribing again after a failure (`recoveryInterval`).
    recovery: Duration,
}

/// What the loop does next.
enum Step {
    Continue,
    /// The control side is gone (shutdown): stop.
    End,
}

impl QueueLoop {
    async fn run(&mut self) {
        loop {
            let want = *self.desired.borrow_and_update();
            let step = match want {
                BindingState::Running => self.running().await,
                BindingState::Paused => {
                    self.flush().await;
                    self.report(BindingState::Paused);
                    self.wait_for_change().await
                }
                BindingState::Stopped => {
                    if let Some(mut sub) = self.subscription.take() {
                        let _ = sub.cancel().await;
                    }
                    self.report(BindingState::Stopped);
                    self.wait_for_change().await
                }
            };
            if let Step::End = step {
                return;
            }
        }
    }

    /// Reports the state the loop is in, when it changes.
    fn report(&mut self, state: BindingState) {
        if self.reported != state {
            self.reported = state;
            self.actual.send_replace(state);
        }
    }

    /// Sends the settlements the subscription holds back, before a wait.
    async fn flush(&mut self) {
        if let Some(sub) = self.subscription.as_mut()
            && let Err(e) = sub.flush().await
        {
            tracing::warn!(binding = %self.rt.name, error = %e, "sending held-back acks failed; the broker will redeliver");
        }
    }

    async fn wait_for_change(&mut self) -> Step {
        match self.desired.changed().await {
            Ok(()) => Step::Continue,
            Err(_) => Step::End,
        }
    }

    /// Waits `recovery`, or less if the desired state changes.
    async fn back_off(&mut self) -> Step {
        tokio::select! {
            _ = tokio::time::sleep(self.recovery) => Step::Continue,
            changed = self.desired.changed() => match changed {
                Ok(()) => Step::Continue,
                Err(_) => Step::End,
            },
        }
    }

    /// One step of a running binding: subscribe if needed, else take the next delivery.
    async fn running(&mut self) -> Step {
        if self.subscription.is_none() {
            match self.binder.subscribe(self.spec.clone()).await {
                Ok(s) => {
                    self.subscription = Some(s);
                    self.report(BindingState::Running);
                    return Step::Continue;
                }
                Err(e) => {
                    tracing::error!(binding = %self.rt.name, queue = %self.spec.queue, error = %e, "cannot consume; retrying");
                    return self.back_off().await;
                }
            }
        }
        // Resumed after a pause: the subscription is still there.
        self.report(BindingState::Running);
        let Some(sub) = self.subscription.as_mut() else {
            return Step::Continue;
        };
        // Control changes win over deliveries, so a stop takes effect at once. A delivery
        // that is already there is taken without waiting on the control channel (cheaper:
        // no waiter to register); `next` is cancel-safe, so trying it is harmless.
        match self.desired.has_changed() {
            Ok(false) => {}
            Ok(true) => return Step::Continue,
            Err(_) => return Step::End,
        }
        let inbound = {
            let mut next = sub.next();
            match (&mut next).now_or_never() {
                Some(inbound) => inbound,
                None => tokio::select! {
                    biased;
                    changed = self.desired.changed() => return match changed {
                        Ok(()) => Step::Continue,
                        Err(_) => Step::End,
                    },
                    inbound = next => inbound,
                },
            }
        };
        let Some(inbound) = inbound else {
            // The broker cancelled the consumer (queue deleted, connection lost): subscribe
            // again after the recovery interval.
            self.subscription = None;
            return self.back_off().await;
        };
        // A free handler slot, so `concurrency` bounds work in progress and, at 1, messages
        // start in queue order. It is taken after the delivery: a retry waiting for a slot
        // must not wait on a loop that holds one while no delivery can come (prefetch
        // exhausted).
        let permit = match self.rt.permits.clone().try_acquire_owned() {
            Ok(p) => Some(p),
            Err(_) => {
                // Every slot is taken (retries, or `concurrency` handlers): held-back acks
                // go out before the wait.
                self.flush().await;
                tokio::select! {
                    biased;
                    _ = self.desired.changed() => None,
                    p = self.rt.permits.clone().acquire_owned() => p.ok(),
                }
            }
        };
        // Deliveries that are always ready would otherwise keep this task from yielding.
        tokio::task::consume_budget().await;
        let Some(permit) = permit else {
            // Paused, stopped or shutting down before it started: the delivery goes back to
            // the queue untouched.
            let _ = inbound.settler.settle(Settlement::Requeue).await;
            return Step::Continue;
        };
        if self.rt.config.consumer.concurrency > 1 {
            let rt = self.rt.clone();
            self.rt.inflight.spawn(rt.handle(inbound, permit));
            return Step::Continue;
        }
        // Concurrency 1: the handler runs here, in queue order, and control changes that
        // arrive meanwhile take effect at once.
        let _counted = self.rt.inflight.enter();
        let work = self.rt.clone().handle(inbound, permit);
        tokio::pin!(work);
        let mut watching = true;
        let mut flushed = false;
        loop {
            tokio::select! {
                biased;
                () = &mut work => return Step::Continue,
                // The handler waits (I/O, a timer): the acks held back for earlier
                // deliveries go out now rather than after it.
                () = std::future::ready(()), if !flushed => {
                    flushed = true;
                    self.flush().await;
                }
                changed = self.desired.changed(), if watching => match changed {
                    Ok(()) => self.apply_while_busy().await,
                    // Shutting down: finish this delivery; the next step ends the loop.
                    Err(_) => watching = false,
                },
            }
        }
    }

    /// A control change that arrives while the loop runs a handler. A pause or stop takes
    /// effect at once (no delivery is taken until the handler ends, and a stop cancels the
    /// subscription, returning the deliveries buffered in it); a resume too when the
    /// subscription is still open. A start after a stop waits for the handler to end.
    async fn apply_while_busy(&mut self) {
        let want = *self.desired.borrow_and_update();
        match want {
            BindingState::Paused => {
                self.report(BindingState::Paused);
            }
            BindingState::Stopped => {
                if let Some(mut sub) = self.subscription.take() {
                    let _ = sub.cancel().await;
                }
                self.report(BindingState::Stopped);
            }
            BindingState::Running if self.subscription.is_some() => {
                self.report(BindingState::Running);
            }
            BindingState::Running => {}
        }
    }
}
