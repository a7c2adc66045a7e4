//! A consumer's inbox: deliveries the engine assigned to it, waiting for its handle.
//!
//! The engine pushes under its own lock; the handle takes batches under the inbox's small lock
//! only, so a consumer waiting or draining never contends with publishers for the engine.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

use super::types::Delivery;

#[derive(Debug, Default)]
pub(crate) struct Inbox {
    deliveries: Mutex<VecDeque<Delivery>>,
    ready: Notify,
    closed: AtomicBool,
}

impl Inbox {
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Delivery>> {
        self.deliveries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds deliveries under one lock; true when the inbox was empty, so its handle may be
    /// waiting and must be woken ([`Inbox::wake`]). The engine wakes handles after it has
    /// released its own lock: a wake-up can cost a system call, which would hold up
    /// every other operation on the broker.
    #[must_use = "a handle waiting on an empty inbox must be woken"]
    pub(crate) fn push_many(&self, deliveries: Vec<Delivery>) -> bool {
        if deliveries.is_empty() {
            return false;
        }
        let mut d = self.lock();
        let was_empty = d.is_empty();
        d.extend(deliveries);
        was_empty
    }

    /// Wakes the handle if it waits for deliveries.
    pub(crate) fn wake(&self) {
        self.ready.notify_one();
    }

    /// Closes the inbox (consumer cancelled). With `give_back`, returns what the handle never
    /// took; without, leaves it for the handle to take before it sees the end (as a client
    /// keeps the deliveries it already received after `basic.cancel`).
    pub(crate) fn close(&self, give_back: bool) -> Vec<Delivery> {
        self.closed.store(true, Ordering::Release);
        let left: Vec<Delivery> = if give_back {
            self.lock().drain(..).collect()
        } else {
            Vec::new()
        };
        self.ready.notify_one();
        left
    }

    /// Takes up to `limit` deliveries now; `None` when closed and empty.
    pub(crate) fn take(&self, out: &mut Vec<Delivery>, limit: usize) -> Option<usize> {
        let mut d = self.lock();
        let n = limit.min(d.len());
        if n == 0 && self.closed.load(Ordering::Acquire) {
            return None;
        }
        out.extend(d.drain(..n));
        Some(n)
    }

    /// A future that completes at the next push or close (register it before looking).
    pub(crate) fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.ready.notified()
    }
}
