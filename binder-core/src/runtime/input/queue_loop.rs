//! The loop that consumes one queue of an input binding: it subscribes, takes deliveries,
//! runs their handlers (in the loop at `concurrency` 1, in tasks above), and follows the
//! binding's desired state (pause, resume, stop, start).

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use futures::FutureExt;
use futures::task::AtomicWaker;
use tokio::sync::{OwnedSemaphorePermit, watch};

use super::super::lifecycle::{BindingState, DesiredWatch};
use super::super::observe::{BindingStateChanged, Settle, Settled};
use super::super::panics;
use super::delivery::InputRuntime;
use crate::binder::{Batching, BinderErrorKind, BoundConsumer, Inbound, Settlement, Subscription};
use crate::config::AcknowledgeMode;

/// The first wait after a subscribe fails; each failure doubles it, up to `recoveryInterval`.
const FIRST_RETRY: Duration = Duration::from_millis(100);

/// How long a subscription must have lasted for its loss to be retried at once.
const STABLE: Duration = Duration::from_secs(1);

/// The longest wait while the broker cannot be reached at all: trying costs a refused TCP
/// connection, and a consumer is back within about this long of the broker's return.
const UNREACHABLE_RETRY: Duration = Duration::from_millis(500);

/// Consumes one queue of an input binding, following its desired state.
pub(crate) async fn run_queue(
    rt: Arc<InputRuntime>,
    consumer: Arc<dyn BoundConsumer>,
    source: usize,
    desired: DesiredWatch,
    actual: watch::Sender<BindingState>,
) {
    let recovery = consumer.recovery_interval();
    let reported = *actual.borrow();
    // Before any handler runs: panics are then reported with where they happened.
    panics::install();
    let mut queue = QueueLoop {
        queue: Arc::from(consumer.sources()[source].as_str()),
        auto_ack: rt.acknowledge_mode == AcknowledgeMode::None,
        rt,
        consumer,
        source,
        desired: desired.rx,
        changed: desired.waker,
        reported,
        actual,
        subscription: None,
        stash: VecDeque::new(),
        recovery,
        retry: Duration::ZERO,
        subscribed_at: None,
        lost: None,
    };
    queue.run().await;
    // The rare paths (shutdown, stop, pause, back-off, control changes during a handler) are
    // boxed where they are awaited: the loop's future is held once per queue, thousands of
    // times with thousands of destinations, and without boxing it is as large as its
    // largest path.
    Box::pin(queue.give_up_subscription()).await;
    Box::pin(queue.handle_stash()).await;
    queue.report(BindingState::Stopped);
}

/// The loop of one queue: subscribes, takes deliveries and hands them to the handlers, and
/// follows the binding's desired state.
struct QueueLoop {
    /// The source (queue) consumed, shared with each delivery (a failure's log names it).
    queue: Arc<str>,
    /// The broker forgets each delivery as it sends it (`acknowledgeMode: NONE`).
    auto_ack: bool,
    rt: Arc<InputRuntime>,
    consumer: Arc<dyn BoundConsumer>,
    /// Which of the consumer's sources.
    source: usize,
    desired: watch::Receiver<BindingState>,
    /// Woken when `desired` changes or its sender goes (see [`DesiredWatch`]).
    changed: Arc<AtomicWaker>,
    actual: watch::Sender<BindingState>,
    /// What `actual` holds (checked on every delivery without taking its lock).
    reported: BindingState,
    subscription: Option<Box<dyn Subscription>>,
    /// Auto-ack deliveries received before the subscription was given up (pause, stop),
    /// handed out first when the binding runs again: the broker counts them consumed.
    stash: VecDeque<Inbound>,
    /// The longest wait before subscribing again after a failure (`recoveryInterval`).
    recovery: Duration,
    /// The wait before the next subscribe: none after a lost subscription (the broker is
    /// often back at once), then doubling from [`FIRST_RETRY`] up to `recovery`.
    retry: Duration,
    /// When the current subscription was made.
    subscribed_at: Option<tokio::time::Instant>,
    /// Why the last subscription was lost or refused, until a new one is made.
    lost: Option<String>,
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
                // Recovering is reported, never asked for.
                BindingState::Running | BindingState::Recovering => self.running().await,
                BindingState::Paused => {
                    Box::pin(self.pause()).await;
                    self.report(BindingState::Paused);
                    self.wait_for_change().await
                }
                BindingState::Stopped => {
                    Box::pin(self.give_up_subscription()).await;
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
            // Health first: whoever sees the new state sees the health that goes with it.
            if state == BindingState::Recovering {
                self.report_why();
            } else {
                self.rt.health.settled(&self.who());
            }
            self.actual.send_replace(state);
            self.rt.observers.emit(|o| {
                o.binding_state(&BindingStateChanged {
                    binding: &self.rt.name,
                    queue: Some(&self.queue),
                    state,
                })
            });
        }
    }

    /// How health names this loop.
    fn who(&self) -> String {
        format!("binding `{}` (queue `{}`)", self.rt.name, self.queue)
    }

    /// Tells health why this loop is not consuming (the latest reason, on every failure).
    fn report_why(&self) {
        let why = self.lost.as_deref().unwrap_or("unknown");
        self.rt.health.recovering(&self.who(), why);
    }

    /// The wait before the next subscribe after a failure (`unreachable`: the broker could not
    /// be reached at all), and the schedule after it.
    fn next_wait(&mut self, unreachable: bool) -> Duration {
        let cap = if unreachable {
            self.recovery.min(UNREACHABLE_RETRY)
        } else {
            self.recovery
        };
        let wait = self.retry.max(FIRST_RETRY).min(cap);
        self.retry = (wait * 2).min(cap);
        wait
    }

    /// Stops taking deliveries for a while. A subscription whose deliveries await acks stays
    /// (its prefetch bounds what the broker sends meanwhile), with its held-back acks sent.
    /// An auto-ack one is given up: the broker ignores prefetch without acks, and would
    /// stream the whole queue into the paused subscription.
    async fn pause(&mut self) {
        if self.auto_ack {
            self.give_up_subscription().await;
        } else {
            self.flush().await;
        }
    }

    /// Cancels the subscription; the auto-ack deliveries it had received are stashed.
    async fn give_up_subscription(&mut self) {
        let Some(mut sub) = self.subscription.take() else {
            return;
        };
        let _ = sub.cancel().await;
        if self.auto_ack {
            // After `cancel`, `next` hands them out without waiting, then ends.
            while let Some(Some(inbound)) = sub.next().now_or_never() {
                self.stash.push_back(inbound);
            }
        }
    }

    /// Shutting down: handles the auto-ack deliveries already received, which cannot go
    /// back to the queue (the shutdown waits for this, up to its timeout); in batches for a
    /// `batchMode` binding.
    async fn handle_stash(&mut self) {
        while let Some(inbound) = self.stash.pop_front() {
            let Ok(permit) = self.rt.permits.clone().acquire_owned().await else {
                return;
            };
            let _counted = self.rt.inflight.enter();
            let rt = self.rt.clone();
            match self.rt.batch {
                None => rt.handle(inbound, self.queue.clone(), permit).await,
                Some(batching) => {
                    let more = self.stash.len().min(batching.size - 1);
                    let batch = std::iter::once(inbound)
                        .chain(self.stash.drain(..more))
                        .collect();
                    rt.handle_batch(batch, self.queue.clone(), permit).await;
                }
            }
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

    /// Waits `wait`, or less if the desired state changes.
    async fn back_off(&mut self, wait: Duration) -> Step {
        tokio::select! {
            _ = tokio::time::sleep(wait) => Step::Continue,
            changed = self.desired.changed() => match changed {
                Ok(()) => Step::Continue,
                Err(_) => Step::End,
            },
        }
    }

    /// One step of a running binding: take the next delivery (a stashed one first, else
    /// from the subscription, subscribing if needed) and hand it to a handler.
    async fn running(&mut self) -> Step {
        let inbound = if let Some(stashed) = self.stash.pop_front() {
            self.report(BindingState::Running);
            stashed
        } else {
            if self.subscription.is_none() {
                match self.consumer.subscribe(self.source).await {
                    Ok(s) => {
                        if let Some(reason) = self.lost.take() {
                            tracing::warn!(binding = %self.rt.name, queue = %self.queue, after = %reason, "consuming again");
                        }
                        self.subscribed_at = Some(tokio::time::Instant::now());
                        self.subscription = Some(s);
                        self.report(BindingState::Running);
                        return Step::Continue;
                    }
                    Err(e) => {
                        let wait = self.next_wait(e.kind() == BinderErrorKind::Unreachable);
                        tracing::warn!(binding = %self.rt.name, queue = %self.queue, error = %e, retry_in = ?wait, "cannot consume; retrying (waits double up to recoveryInterval)");
                        self.lost = Some(e.to_string());
                        if self.reported == BindingState::Recovering {
                            self.report_why();
                        } else {
                            self.report(BindingState::Recovering);
                        }
                        return Box::pin(self.back_off(wait)).await;
                    }
                }
            }
            // Resumed after a pause: the subscription is still there.
            self.report(BindingState::Running);
            let Some(sub) = self.subscription.as_mut() else {
                return Step::Continue;
            };
            // Control changes win over deliveries, so a stop takes effect at once. A delivery
            // that is already there is taken without registering for control changes; a wait
            // registers the task with the loop's control waker (an atomic swap once it is
            // registered), then checks for a change, then polls the subscription, while the
            // control side changes, then wakes. `next` is cancel-safe, so leaving it is
            // harmless.
            match self.desired.has_changed() {
                Ok(false) => {}
                Ok(true) => return Step::Continue,
                Err(_) => return Step::End,
            }
            let inbound = {
                let changed = &self.changed;
                let desired = &self.desired;
                let mut next = sub.next();
                match (&mut next).now_or_never() {
                    Some(inbound) => Ok(inbound),
                    None => {
                        std::future::poll_fn(|cx| {
                            changed.register(cx.waker());
                            match desired.has_changed() {
                                Ok(false) => next.poll_unpin(cx).map(Ok),
                                Ok(true) => Poll::Ready(Err(Step::Continue)),
                                Err(_) => Poll::Ready(Err(Step::End)),
                            }
                        })
                        .await
                    }
                }
            };
            let inbound = match inbound {
                Ok(inbound) => inbound,
                Err(step) => return step,
            };
            let Some(inbound) = inbound else {
                return Box::pin(self.subscription_ended()).await;
            };
            inbound
        };
        if let Some(batching) = self.rt.batch {
            return Box::pin(self.run_batch(inbound, batching)).await;
        }
        // The slot and the handler's run as `slot` and `run_here` do, written out here: the
        // path of every delivery, without their futures' layers (a batch's path has them).
        let permit = match self.rt.permits.clone().try_acquire_owned() {
            Ok(p) => Some(p),
            // Not boxed: with every slot busy (`concurrency` handlers) it is every delivery's.
            Err(_) => self.wait_for_slot().await,
        };
        // Deliveries that are always ready would otherwise keep this task from yielding.
        tokio::task::consume_budget().await;
        let Some(permit) = permit else {
            Box::pin(self.give_back(inbound)).await;
            return Step::Continue;
        };
        if self.rt.concurrency > 1 {
            let rt = self.rt.clone();
            self.rt
                .inflight
                .spawn(rt.handle(inbound, self.queue.clone(), permit));
            return Step::Continue;
        }
        // Concurrency 1: the handler runs here, in queue order, and control changes that
        // arrive meanwhile take effect at once.
        let _counted = self.rt.inflight.enter();
        let work = self.rt.clone().handle(inbound, self.queue.clone(), permit);
        tokio::pin!(work);
        let mut watching = true;
        let mut flushed = false;
        loop {
            tokio::select! {
                biased;
                () = &mut work => return Step::Continue,
                // The handler waits: the acks held back for earlier deliveries go out now.
                () = std::future::ready(()), if !flushed => {
                    flushed = true;
                    self.flush().await;
                }
                changed = self.desired.changed(), if watching => match changed {
                    Ok(()) => Box::pin(self.apply_while_busy()).await,
                    Err(_) => watching = false,
                },
            }
        }
    }

    /// The broker cancelled the consumer (queue deleted, connection lost): subscribe again at
    /// once, then back off while that fails. A subscription that ended within STABLE of being
    /// made counts as a failed try, so one that keeps ending at once is not retried in a busy
    /// loop. (Its `next` is not called again: after its end it may wait for ever.)
    async fn subscription_ended(&mut self) -> Step {
        tracing::warn!(binding = %self.rt.name, queue = %self.queue, "the broker ended the subscription (consumer cancelled, queue deleted or connection lost); subscribing again");
        self.lost = Some("the broker ended the subscription".to_owned());
        self.subscription = None;
        let lived = self.subscribed_at.take().map(|t| t.elapsed());
        self.report(BindingState::Recovering);
        if lived.is_some_and(|l| l >= STABLE) {
            self.retry = Duration::ZERO;
            return Step::Continue;
        }
        let wait = self.next_wait(false);
        Box::pin(self.back_off(wait)).await
    }

    /// A free handler slot, so `concurrency` bounds work in progress and, at 1, messages
    /// start in queue order; `None` when the binding is paused, stopped or shutting down
    /// first. It is taken after the delivery: a retry waiting for a slot must not wait on a
    /// loop that holds one while no delivery can come (prefetch exhausted).
    async fn slot(&mut self) -> Option<OwnedSemaphorePermit> {
        let permit = match self.rt.permits.clone().try_acquire_owned() {
            Ok(p) => Some(p),
            // Boxed: the rare path, kept out of the loop's future.
            Err(_) => Box::pin(self.wait_for_slot()).await,
        };
        // Deliveries that are always ready would otherwise keep this task from yielding.
        tokio::task::consume_budget().await;
        permit
    }

    /// Every slot is taken (retries, or `concurrency` handlers): held-back acks go out, then
    /// the wait for a slot, or for a change of the desired state (`None`).
    async fn wait_for_slot(&mut self) -> Option<OwnedSemaphorePermit> {
        self.flush().await;
        tokio::select! {
            biased;
            _ = self.desired.changed() => None,
            p = self.rt.permits.clone().acquire_owned() => p.ok(),
        }
    }

    /// A delivery taken before a pause, stop or shutdown left no slot for it: it goes back
    /// to the queue untouched; an auto-ack one cannot, and waits in the stash.
    async fn give_back(&mut self, inbound: Inbound) {
        if self.auto_ack {
            self.stash.push_front(inbound);
        } else {
            let requeued = inbound.settler.settle(Settlement::Requeue).await;
            self.rt.observers.emit(|o| {
                o.settled(&Settled {
                    binding: &self.rt.name,
                    binding_index: self.rt.observers.binding_index(),
                    how: Settle::Requeue,
                    error: requeued.as_ref().err(),
                })
            });
        }
    }

    /// A `batchMode` binding's step, from a batch's first delivery: the rest of the batch,
    /// a handler slot, then the batch's handling (here at `concurrency` 1, in a task above).
    async fn run_batch(&mut self, first: Inbound, batching: Batching) -> Step {
        let (batch, ended) = self.fill(first, batching).await;
        let step = match self.slot().await {
            None => {
                // Last first: the stash keeps the batch's order.
                for inbound in batch.into_iter().rev() {
                    self.give_back(inbound).await;
                }
                Step::Continue
            }
            Some(permit) => {
                let work = self
                    .rt
                    .clone()
                    .handle_batch(batch, self.queue.clone(), permit);
                if self.rt.concurrency > 1 {
                    self.rt.inflight.spawn(work);
                    Step::Continue
                } else {
                    let _counted = self.rt.inflight.enter();
                    tokio::pin!(work);
                    self.run_here(work).await
                }
            }
        };
        match step {
            // The batch ended with the subscription, still set unless the control gave it up.
            Step::Continue if ended && self.subscription.is_some() => {
                self.subscription_ended().await
            }
            step => step,
        }
    }

    /// A batch from its first delivery: stashed deliveries, then the subscription's, up to
    /// the batch size; shorter when no delivery comes within the receive timeout, when the
    /// subscription ends, or when the binding's desired state changes (the change is left
    /// unseen, so it takes effect while the batch is handled, as during one delivery's).
    /// As in `running`, a delivery the subscription already holds is taken at once and only a
    /// wait is raced with the control: a ready delivery is never dropped.
    ///
    /// Also says whether the subscription ended (its `next` gave `None`).
    async fn fill(&mut self, first: Inbound, batching: Batching) -> (Vec<Inbound>, bool) {
        let mut batch = Vec::with_capacity(batching.size);
        batch.push(first);
        while batch.len() < batching.size {
            if let Some(stashed) = self.stash.pop_front() {
                batch.push(stashed);
                continue;
            }
            if !matches!(self.desired.has_changed(), Ok(false)) {
                break;
            }
            let Some(sub) = self.subscription.as_mut() else {
                break;
            };
            let (changed, desired) = (&self.changed, &self.desired);
            let mut next = sub.next();
            let inbound = match (&mut next).now_or_never() {
                Some(inbound) => inbound,
                None => {
                    let wait = std::future::poll_fn(|cx| {
                        changed.register(cx.waker());
                        match desired.has_changed() {
                            Ok(false) => next.poll_unpin(cx).map(Some),
                            _ => Poll::Ready(None),
                        }
                    });
                    match tokio::time::timeout(batching.receive_timeout, wait).await {
                        Ok(Some(inbound)) => inbound,
                        // The control changed, or nothing came in time.
                        Ok(None) | Err(_) => break,
                    }
                }
            };
            match inbound {
                Some(inbound) => batch.push(inbound),
                None => return (batch, true),
            }
        }
        (batch, false)
    }

    /// Runs a handler's work in the loop (`concurrency` 1: in queue order); control
    /// changes that arrive meanwhile take effect at once.
    async fn run_here(&mut self, mut work: Pin<&mut impl Future<Output = ()>>) -> Step {
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
                    Ok(()) => Box::pin(self.apply_while_busy()).await,
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
                if self.auto_ack {
                    self.give_up_subscription().await;
                }
                self.report(BindingState::Paused);
            }
            BindingState::Stopped => {
                self.give_up_subscription().await;
                self.report(BindingState::Stopped);
            }
            BindingState::Running if self.subscription.is_some() => {
                self.report(BindingState::Running);
            }
            BindingState::Running | BindingState::Recovering => {}
        }
    }
}
