//! The observer seam: what the runtime reports about deliveries, sends and bindings to the
//! observers registered with [`AppBuilder::observer`](super::builder::AppBuilder::observer).
//!
//! Every method of [`Observer`] has a no-op default, so an observer implements only what it
//! counts. Events borrow from the runtime (no allocation per event) and are
//! `#[non_exhaustive]`, so later fields do not break observers. With no observer registered
//! the runtime neither builds events nor reads the clock.
//!
//! Observers are called inline, on the task that handles the delivery or the send: they
//! must be quick (count, record, hand off to a channel), never block. A panic in one is
//! caught and that event skipped for it.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use super::error::HandlerError;
use super::lifecycle::BindingState;
use crate::binder::{BinderError, Settlement};

/// Receives the runtime's events. Every method does nothing unless overridden.
pub trait Observer: Send + Sync + 'static {
    /// A delivery arrived and is about to be handled.
    fn received(&self, event: &Received<'_>) {
        let _ = event;
    }
    /// A handler attempt succeeded.
    fn handled(&self, event: &Handled<'_>) {
        let _ = event;
    }
    /// A handler attempt failed (whether or not it will be retried).
    fn failed(&self, event: &Failed<'_>) {
        let _ = event;
    }
    /// A failed delivery is retried after a back-off.
    fn retried(&self, event: &Retried<'_>) {
        let _ = event;
    }
    /// A delivery that failed for good went down the dead-letter path.
    fn dead_lettered(&self, event: &DeadLettered<'_>) {
        let _ = event;
    }
    /// The runtime settled a delivery with the broker: after its handler, down the failure
    /// path, or back to the queue when the binding paused or stopped before it started.
    fn settled(&self, event: &Settled<'_>) {
        let _ = event;
    }
    /// A send through an output binding or the publisher reached the binder and completed
    /// (confirmed, or failed there). A send refused before it reaches the binder (encoding,
    /// routing key, stopped binding) is not reported: its caller has the error.
    fn sent(&self, event: &Sent<'_>) {
        let _ = event;
    }
    /// A binding (or one queue of an input binding) reached a new state.
    fn binding_state(&self, event: &BindingStateChanged<'_>) {
        let _ = event;
    }
}

/// A delivery arrived.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Received<'a> {
    /// The input binding.
    pub binding: &'a str,
    /// The binding's number in this application: dense from 0 over its bindings in the order
    /// of their names, the same in every event about it, so an observer can keep per-binding
    /// data in a `Vec` instead of hashing the name per event. `None` for a destination sent
    /// to dynamically (`RunningApp::publisher`).
    pub binding_index: Option<usize>,
    /// The queue it came from.
    pub queue: &'a str,
    /// The broker delivered it before.
    pub redelivered: bool,
}

/// A handler attempt succeeded.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Handled<'a> {
    /// The input binding.
    pub binding: &'a str,
    /// The binding's number in this application: dense from 0 over its bindings in the order
    /// of their names, the same in every event about it, so an observer can keep per-binding
    /// data in a `Vec` instead of hashing the name per event. `None` for a destination sent
    /// to dynamically (`RunningApp::publisher`).
    pub binding_index: Option<usize>,
    /// The attempt's number, from 1.
    pub attempt: u32,
    /// How long the attempt took (the handler and its reply).
    pub duration: Duration,
}

/// A handler attempt failed.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Failed<'a> {
    /// The input binding.
    pub binding: &'a str,
    /// The binding's number in this application: dense from 0 over its bindings in the order
    /// of their names, the same in every event about it, so an observer can keep per-binding
    /// data in a `Vec` instead of hashing the name per event. `None` for a destination sent
    /// to dynamically (`RunningApp::publisher`).
    pub binding_index: Option<usize>,
    /// The attempt's number, from 1.
    pub attempt: u32,
    /// How long the attempt took.
    pub duration: Duration,
    /// Why it failed.
    pub error: &'a HandlerError,
    /// Another attempt follows.
    pub will_retry: bool,
}

/// A delivery is retried.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Retried<'a> {
    /// The input binding.
    pub binding: &'a str,
    /// The binding's number in this application: dense from 0 over its bindings in the order
    /// of their names, the same in every event about it, so an observer can keep per-binding
    /// data in a `Vec` instead of hashing the name per event. `None` for a destination sent
    /// to dynamically (`RunningApp::publisher`).
    pub binding_index: Option<usize>,
    /// The number of the attempt about to run.
    pub attempt: u32,
    /// The back-off waited before it.
    pub delay: Duration,
}

/// Where a dead-lettered message went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeadLetterRoute<'a> {
    /// Republished to this exchange with this routing key (with diagnostic headers).
    Republished {
        /// The dead-letter exchange.
        exchange: &'a str,
        /// The routing key.
        routing_key: &'a str,
    },
    /// Rejected without requeue: the broker dead-letters it if the queue has a DLX.
    Rejected,
}

/// A delivery that failed for good went down the dead-letter path.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DeadLettered<'a> {
    /// The input binding.
    pub binding: &'a str,
    /// The queue it came from.
    pub queue: &'a str,
    /// Attempts made.
    pub attempts: u32,
    /// Why it failed.
    pub reason: &'a HandlerError,
    /// Where it went.
    pub route: DeadLetterRoute<'a>,
}

/// How the runtime settled a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Settle {
    /// Acknowledged.
    Ack,
    /// Rejected without requeue.
    Reject,
    /// Returned to the queue.
    Requeue,
    /// Nothing to settle: `acknowledgeMode: NONE` (the broker counted it consumed).
    AutoAcked,
}

impl From<Settlement> for Settle {
    fn from(s: Settlement) -> Self {
        match s {
            Settlement::Ack => Settle::Ack,
            Settlement::Reject => Settle::Reject,
            Settlement::Requeue => Settle::Requeue,
        }
    }
}

/// The runtime settled a delivery (a `MANUAL` handler settles its own, unreported).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Settled<'a> {
    /// The input binding.
    pub binding: &'a str,
    /// The binding's number in this application: dense from 0 over its bindings in the order
    /// of their names, the same in every event about it, so an observer can keep per-binding
    /// data in a `Vec` instead of hashing the name per event. `None` for a destination sent
    /// to dynamically (`RunningApp::publisher`).
    pub binding_index: Option<usize>,
    /// How.
    pub how: Settle,
    /// Why the settlement failed, if it did (the broker will redeliver).
    pub error: Option<&'a BinderError>,
}

/// A send completed.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Sent<'a> {
    /// The output binding (or dynamic destination).
    pub binding: &'a str,
    /// The binding's number in this application: dense from 0 over its bindings in the order
    /// of their names, the same in every event about it, so an observer can keep per-binding
    /// data in a `Vec` instead of hashing the name per event. `None` for a destination sent
    /// to dynamically (`RunningApp::publisher`).
    pub binding_index: Option<usize>,
    /// The partition it was sent to, for a partitioned output.
    pub partition: Option<u32>,
    /// From the publish to its confirm (or its failure).
    pub latency: Duration,
    /// Why it failed, if it did.
    pub error: Option<&'a BinderError>,
}

/// A binding reached a state.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct BindingStateChanged<'a> {
    /// The binding.
    pub binding: &'a str,
    /// The queue, for one queue loop of an input binding; `None` for an output.
    pub queue: Option<&'a str>,
    /// The state it is in now.
    pub state: BindingState,
}

/// The observers of an application; empty (and free) when none is registered.
#[derive(Clone, Default)]
pub(crate) struct Observers(Option<Registered>, Option<usize>);

/// The registered observers and the clock their durations are read on.
#[derive(Clone)]
struct Registered {
    list: Arc<[Arc<dyn Observer>]>,
    /// The processor's time-stamp counter where it ticks at a constant rate across cores
    /// (read in about a third of the time of `Instant::now`, which matters at four reads per
    /// message), else the monotonic clock: durations only, never compared with other clocks.
    clock: quanta::Clock,
}

/// A point in time on the observers' clock (see [`Observers::clock`]).
pub(crate) type Stamp = quanta::Instant;

impl std::fmt::Debug for Observers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Observers({})",
            self.0.as_ref().map_or(0, |r| r.list.len())
        )
    }
}

impl Observers {
    /// These observers. With any, the clock is calibrated here, once per process (under a
    /// millisecond typically, 200 ms at most), rather than on the first message.
    pub(crate) fn new(list: Vec<Arc<dyn Observer>>) -> Self {
        if list.is_empty() {
            Observers(None, None)
        } else {
            Observers(
                Some(Registered {
                    list: list.into(),
                    clock: quanta::Clock::new(),
                }),
                None,
            )
        }
    }

    /// The same observers, for the binding numbered `index` (see `Received::binding_index`).
    pub(crate) fn for_binding(&self, index: usize) -> Self {
        Observers(self.0.clone(), Some(index))
    }

    /// The number of the binding these observers report for, if any.
    #[inline]
    pub(crate) fn binding_index(&self) -> Option<usize> {
        self.1
    }

    /// Whether any observer is registered.
    #[inline]
    pub(crate) fn any(&self) -> bool {
        self.0.is_some()
    }

    /// The time now, read only when someone observes.
    #[inline]
    pub(crate) fn clock(&self) -> Option<Stamp> {
        self.0.as_ref().map(|r| r.clock.now())
    }

    /// The time since `start` (from [`Observers::clock`]); zero when no one observes.
    #[inline]
    pub(crate) fn elapsed(&self, start: Stamp) -> Duration {
        self.0
            .as_ref()
            .map_or(Duration::ZERO, |r| r.clock.now().duration_since(start))
    }

    /// Tells every observer. An observer that panics is skipped for that event: observing
    /// never stops a binding.
    #[inline]
    pub(crate) fn emit(&self, tell: impl Fn(&dyn Observer)) {
        if let Some(registered) = &self.0 {
            for o in registered.list.iter() {
                let _ = std::panic::catch_unwind(AssertUnwindSafe(|| tell(o.as_ref())));
            }
        }
    }
}
