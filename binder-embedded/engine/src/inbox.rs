//! A consumer's inbox: deliveries the engine assigned to it, waiting for its handle.
//!
//! The engine pushes under its own lock; the handle takes batches under the inbox's small lock
//! only, so a consumer waiting or draining never contends with publishers for the engine.
//! A handle that finds the inbox empty leaves its task's waker under the same lock, and the
//! push that ends the wait takes it: a consumer that keeps finding deliveries registers
//! nothing and nobody wakes it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use super::types::Delivery;
use crate::envelope::Envelope;

#[derive(Debug)]
struct Held<E: Envelope> {
    deliveries: VecDeque<Delivery<E>>,
    /// The memory each delivery is counted as, for a no-ack consumer (empty otherwise).
    footprints: VecDeque<usize>,
    /// The handle's task, waiting for the inbox to fill (see [`Inbox::poll_take`]).
    waiter: Option<Waker>,
}

impl<E: Envelope> Default for Held<E> {
    fn default() -> Self {
        Held {
            deliveries: VecDeque::new(),
            footprints: VecDeque::new(),
            waiter: None,
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct Inbox<E: Envelope> {
    held: Mutex<Held<E>>,
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

    /// Adds deliveries under one lock (with their footprints, for a no-ack consumer), and
    /// returns the waker of the handle if it waits for them. The engine wakes handles after
    /// it has released its own lock: a wake-up can cost a system call, which would hold up
    /// every other operation on the broker. `deliveries` is left empty (its buffer is the
    /// caller's to reuse).
    #[must_use = "a handle waiting on an empty inbox must be woken"]
    pub(crate) fn push_many(
        &self,
        deliveries: &mut Vec<Delivery<E>>,
        footprints: Vec<usize>,
    ) -> Option<Waker> {
        if deliveries.is_empty() {
            return None;
        }
        let mut held = self.lock();
        move_all(deliveries, &mut held.deliveries);
        if self.released.is_some() {
            held.footprints.extend(footprints);
        }
        held.waiter.take()
    }

    /// Closes the inbox (consumer cancelled): the waiting handle's waker goes to `wakes`.
    /// With `give_back`, returns what the handle never took; without, leaves it for the
    /// handle to take before it sees the end (as a client keeps the deliveries it already
    /// received after `basic.cancel`).
    pub(crate) fn close(
        &self,
        give_back: bool,
        wakes: &mut impl Extend<Waker>,
    ) -> Vec<Delivery<E>> {
        // Set before the lock: a handle that looks after this close sees it under the lock.
        self.closed.store(true, Ordering::Release);
        let mut held = self.lock();
        wakes.extend(held.waiter.take());
        if give_back {
            let n = held.deliveries.len();
            self.release(&mut held, n);
            held.deliveries.drain(..).collect()
        } else {
            Vec::new()
        }
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
        if n == 0 {
            // Nothing to take, release or drain (a handle about to wait looks first).
            return if self.closed.load(Ordering::Acquire) {
                None
            } else {
                Some(0)
            };
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

    /// Takes up to `limit` deliveries, or, when there are none, leaves the task's waker for
    /// the next push or close (under the same lock, so neither slips in between); `None`
    /// when closed and empty.
    pub(crate) fn poll_take(
        &self,
        cx: &mut Context<'_>,
        out: &mut impl Extend<Delivery<E>>,
        limit: usize,
    ) -> Poll<Option<usize>> {
        let mut held = self.lock();
        if held.deliveries.is_empty() {
            if self.closed.load(Ordering::Acquire) {
                return Poll::Ready(None);
            }
            match &mut held.waiter {
                Some(w) if w.will_wake(cx.waker()) => {}
                slot => *slot = Some(cx.waker().clone()),
            }
            return Poll::Pending;
        }
        // Taken under a second lock (the wait path is the rare one): in between only a close
        // can take deliveries back, and `take` then reports the close.
        drop(held);
        Poll::Ready(self.take(out, limit))
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::task::Wake;

    use super::*;
    use crate::envelope::Native;
    use crate::{Message, Route};

    /// A task's waker that counts its wake-ups.
    #[derive(Default)]
    struct Counted(AtomicUsize);

    impl Wake for Counted {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn delivery(tag: u64) -> Delivery<Native> {
        let route = Route::new(Arc::from(""), Arc::from("q"));
        Delivery {
            consumer_tag: Arc::from("c"),
            delivery_tag: tag,
            redelivered: false,
            body: Native::seal(Message::new(b"x".to_vec()), route),
        }
    }

    fn push(inbox: &Inbox<Native>, tag: u64) -> Option<Waker> {
        inbox.push_many(&mut vec![delivery(tag)], Vec::new())
    }

    /// A handle that keeps finding deliveries registers nothing, so pushes wake nobody; one
    /// that found the inbox empty is woken by the next push alone, and by a close.
    #[test]
    fn only_a_handle_that_found_the_inbox_empty_is_woken_once_by_the_next_push() {
        let inbox = Inbox::<Native>::new();
        let count = Arc::new(Counted::default());
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        let mut out = Vec::new();

        assert!(push(&inbox, 1).is_none(), "nobody waits yet");
        assert_eq!(inbox.poll_take(&mut cx, &mut out, 8), Poll::Ready(Some(1)));
        assert!(
            push(&inbox, 2).is_none(),
            "a handle that found deliveries does not wait"
        );
        assert_eq!(inbox.take(&mut out, 8), Some(1));

        // A wait given up in one task and taken up in another: the push wakes the task
        // that waits now, not the one that gave up.
        let gave_up = Arc::new(Counted::default());
        let gave_up_waker = Waker::from(gave_up.clone());
        let mut gave_up_cx = Context::from_waker(&gave_up_waker);
        assert_eq!(inbox.poll_take(&mut gave_up_cx, &mut out, 8), Poll::Pending);
        assert_eq!(inbox.poll_take(&mut cx, &mut out, 8), Poll::Pending);
        push(&inbox, 3).expect("the waiting handle's waker").wake();
        assert!(
            push(&inbox, 4).is_none(),
            "woken once, by the push that ended the wait"
        );
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert_eq!(gave_up.0.load(Ordering::SeqCst), 0, "the task that gave up");
        assert_eq!(inbox.poll_take(&mut cx, &mut out, 8), Poll::Ready(Some(2)));

        assert_eq!(inbox.poll_take(&mut cx, &mut out, 8), Poll::Pending);
        let mut wakes = Vec::new();
        let left = inbox.close(false, &mut wakes);
        assert!(left.is_empty());
        assert_eq!(wakes.len(), 1, "a close wakes the waiting handle");
        assert_eq!(inbox.poll_take(&mut cx, &mut out, 8), Poll::Ready(None));
        let tags: Vec<u64> = out.iter().map(|d| d.delivery_tag).collect();
        assert_eq!(tags, [1, 2, 3, 4]);
    }
}
