//! A consumer's inbox: deliveries the engine assigned to it, waiting for its handle.
//!
//! The engine pushes under its own lock; the handle takes batches under the inbox's small lock
//! only, so a consumer waiting or draining never contends with publishers for the engine.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use super::types::Delivery;
use crate::envelope::Envelope;

#[derive(Debug)]
struct Held<E: Envelope> {
    deliveries: VecDeque<Delivery<E>>,
    /// The memory each delivery is counted as, for a no-ack consumer (empty otherwise).
    footprints: VecDeque<usize>,
}

impl<E: Envelope> Default for Held<E> {
    fn default() -> Self {
        Held {
            deliveries: VecDeque::new(),
            footprints: VecDeque::new(),
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct Inbox<E: Envelope> {
    held: Mutex<Held<E>>,
    ready: Notify,
    closed: AtomicBool,
    /// For a no-ack consumer, whose deliveries the engine no longer holds: where the memory
    /// of the deliveries that leave the inbox goes, to be taken off the broker's count.
    released: Option<Arc<AtomicUsize>>,
}

impl<E: Envelope> Inbox<E> {
    /// The inbox of a consumer that acknowledges: its deliveries are counted by the engine's
    /// records until they are settled.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The inbox of a no-ack consumer: its deliveries count against the memory watermark
    /// until the handle takes them (or the inbox is emptied), and then go to `released`.
    pub(crate) fn counted(released: Arc<AtomicUsize>) -> Self {
        Inbox {
            released: Some(released),
            ..Self::default()
        }
    }

    /// Whether deliveries leaving this inbox release memory (a no-ack consumer's).
    pub(crate) fn is_counted(&self) -> bool {
        self.released.is_some()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held<E>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Hands the memory of the first `n` deliveries' footprints to the broker.
    fn release(&self, held: &mut Held<E>, n: usize) {
        if let Some(released) = &self.released {
            let n = n.min(held.footprints.len());
            let bytes: usize = held.footprints.drain(..n).sum();
            released.fetch_add(bytes, Ordering::AcqRel);
        }
    }

    /// Adds deliveries under one lock (with their footprints, for a no-ack consumer); true
    /// when the inbox was empty, so its handle may be waiting and must be woken
    /// ([`Inbox::wake`]). The engine wakes handles after it has released its own lock: a
    /// wake-up can cost a system call, which would hold up every other operation on the
    /// broker. `deliveries` is left empty (its buffer is the caller's to reuse).
    #[must_use = "a handle waiting on an empty inbox must be woken"]
    pub(crate) fn push_many(
        &self,
        deliveries: &mut Vec<Delivery<E>>,
        footprints: Vec<usize>,
    ) -> bool {
        if deliveries.is_empty() {
            return false;
        }
        let mut held = self.lock();
        let was_empty = held.deliveries.is_empty();
        move_all(deliveries, &mut held.deliveries);
        if self.released.is_some() {
            held.footprints.extend(footprints);
        }
        was_empty
    }

    /// Wakes the handle if it waits for deliveries.
    pub(crate) fn wake(&self) {
        self.ready.notify_one();
    }

    /// Closes the inbox (consumer cancelled). With `give_back`, returns what the handle never
    /// took; without, leaves it for the handle to take before it sees the end (as a client
    /// keeps the deliveries it already received after `basic.cancel`).
    pub(crate) fn close(&self, give_back: bool) -> Vec<Delivery<E>> {
        self.closed.store(true, Ordering::Release);
        let left: Vec<Delivery<E>> = if give_back {
            let mut held = self.lock();
            let n = held.deliveries.len();
            self.release(&mut held, n);
            held.deliveries.drain(..).collect()
        } else {
            Vec::new()
        };
        self.ready.notify_one();
        left
    }

    /// Drops what the handle never took (its handle is gone); returns whether that released
    /// counted memory.
    pub(crate) fn discard(&self) -> bool {
        let mut held = self.lock();
        let n = held.deliveries.len();
        let counted = self.released.is_some() && n > 0;
        self.release(&mut held, n);
        held.deliveries.clear();
        counted
    }

    /// Takes up to `limit` deliveries now; `None` when closed and empty.
    pub(crate) fn take(&self, out: &mut impl Extend<Delivery<E>>, limit: usize) -> Option<usize> {
        let mut held = self.lock();
        let n = limit.min(held.deliveries.len());
        if n == 0 && self.closed.load(Ordering::Acquire) {
            return None;
        }
        self.release(&mut held, n);
        if n == 1 {
            // One at a time is the rule at prefetch 1: no drain to set up and tear down.
            out.extend(held.deliveries.pop_front());
        } else {
            out.extend(held.deliveries.drain(..n));
        }
        Some(n)
    }

    /// A future that completes at the next push or close (register it before looking).
    pub(crate) fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.ready.notified()
    }
}

/// Moves every delivery of `from` to the back of `to`; one (the rule at prefetch 1) without a
/// drain to set up and tear down.
fn move_all<E: Envelope>(from: &mut Vec<Delivery<E>>, to: &mut VecDeque<Delivery<E>>) {
    if from.len() == 1 {
        to.extend(from.pop());
    } else {
        to.extend(from.drain(..));
    }
}
