//! A channel's notifications ([`ChannelEvent`]s): returns, consumer cancellations, flow
//! control, closure.
//!
//! They are rare, and most channels never see one, so the queue between the engine and the
//! channel's reader allocates nothing until the first event: an idle channel costs one small
//! shared record (a general-purpose unbounded channel would hold a block of slots per
//! channel, kilobytes for each of thousands of bindings). Events sent after the reader is
//! gone are dropped, so a channel whose owner does not read them keeps none.

use std::collections::VecDeque;
use std::fmt;
use std::future::poll_fn;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use crate::envelope::{Envelope, Native};
use crate::types::ChannelEvent;

/// Why [`ChannelEvents::try_recv`] returned no event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TryRecvError {
    /// None is queued now; more may come.
    #[error("no channel event is queued")]
    Empty,
    /// The channel is closed and every event it queued was read.
    #[error("the channel is closed and its events were read")]
    Disconnected,
}

struct Queue<E: Envelope> {
    events: VecDeque<ChannelEvent<E>>,
    /// The reader waiting for the next event.
    waker: Option<Waker>,
    /// The engine dropped the channel: nothing more comes.
    sender_gone: bool,
    /// Nobody reads: events are dropped as they come.
    reader_gone: bool,
}

struct Shared<E: Envelope>(Mutex<Queue<E>>);

impl<E: Envelope> Shared<E> {
    fn lock(&self) -> MutexGuard<'_, Queue<E>> {
        // Every critical section leaves the queue consistent, so a poisoned lock is usable.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A new channel's event queue: the engine's end and the reader's.
pub(crate) fn queue<E: Envelope>() -> (EventSender<E>, ChannelEvents<E>) {
    let shared = Arc::new(Shared(Mutex::new(Queue {
        events: VecDeque::new(),
        waker: None,
        sender_gone: false,
        reader_gone: false,
    })));
    (EventSender(shared.clone()), ChannelEvents(shared))
}

/// The engine's end of a channel's event queue; dropping it ends the reader's stream once
/// the queued events are read.
pub(crate) struct EventSender<E: Envelope>(Arc<Shared<E>>);

impl<E: Envelope> EventSender<E> {
    /// Queues `event` and wakes the reader; dropped if nobody reads.
    pub(crate) fn send(&self, event: ChannelEvent<E>) {
        self.send_with(|| event);
    }

    /// Queues the event `make` builds, built only if somebody reads (an event sent to every
    /// channel is cloned for the channels whose events are read, and no other).
    pub(crate) fn send_with(&self, make: impl FnOnce() -> ChannelEvent<E>) {
        let mut queue = self.0.lock();
        if queue.reader_gone {
            return;
        }
        queue.events.push_back(make());
        let waker = queue.waker.take();
        drop(queue);
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl<E: Envelope> Drop for EventSender<E> {
    fn drop(&mut self) {
        let mut queue = self.0.lock();
        queue.sender_gone = true;
        let waker = queue.waker.take();
        drop(queue);
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl<E: Envelope> fmt::Debug for EventSender<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventSender").finish_non_exhaustive()
    }
}

/// The notifications of one channel, in the order the engine sent them (see
/// [`crate::Channel::events`]). The stream ends once the channel is closed and its events
/// are read.
pub struct ChannelEvents<E: Envelope = Native>(Arc<Shared<E>>);

impl<E: Envelope> ChannelEvents<E> {
    /// The next event, waiting for one; `None` once the channel is closed and every event
    /// was read. Cancel-safe: an event leaves the queue only when it is returned.
    pub async fn recv(&mut self) -> Option<ChannelEvent<E>> {
        poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// The next event if one is queued, without waiting.
    pub fn try_recv(&mut self) -> Result<ChannelEvent<E>, TryRecvError> {
        let mut queue = self.0.lock();
        match queue.events.pop_front() {
            Some(event) => Ok(event),
            None if queue.sender_gone => Err(TryRecvError::Disconnected),
            None => Err(TryRecvError::Empty),
        }
    }

    /// How many events are queued now.
    pub fn len(&self) -> usize {
        self.0.lock().events.len()
    }

    /// Whether no event is queued now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the channel is closed (events may still be queued).
    pub fn is_closed(&self) -> bool {
        self.0.lock().sender_gone
    }

    /// Polls for the next event: `Ready(None)` once the channel is closed and every event was
    /// read; `Pending` (waking `cx` when one comes) otherwise.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<ChannelEvent<E>>> {
        let mut queue = self.0.lock();
        if let Some(event) = queue.events.pop_front() {
            return Poll::Ready(Some(event));
        }
        if queue.sender_gone {
            return Poll::Ready(None);
        }
        match &mut queue.waker {
            Some(waker) => waker.clone_from(cx.waker()),
            none => *none = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

impl<E: Envelope> Drop for ChannelEvents<E> {
    fn drop(&mut self) {
        let mut queue = self.0.lock();
        queue.reader_gone = true;
        queue.waker = None;
        let dropped = std::mem::take(&mut queue.events);
        drop(queue);
        // The returned records are freed outside the lock.
        drop(dropped);
    }
}

impl<E: Envelope> fmt::Debug for ChannelEvents<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let queue = self.0.lock();
        f.debug_struct("ChannelEvents")
            .field("queued", &queue.events.len())
            .field("closed", &queue.sender_gone)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    use super::*;

    /// A waker that counts its wake-ups.
    struct Counting(AtomicUsize);

    impl Wake for Counting {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counting() -> (Arc<Counting>, Waker) {
        let count = Arc::new(Counting(AtomicUsize::new(0)));
        (count.clone(), Waker::from(count))
    }

    fn blocked() -> ChannelEvent<Native> {
        ChannelEvent::Blocked {
            reason: "low on memory".into(),
        }
    }

    #[test]
    fn events_come_in_order_then_the_end() {
        let (tx, mut rx) = queue::<Native>();
        assert_eq!(rx.try_recv().unwrap_err(), TryRecvError::Empty);
        tx.send(blocked());
        tx.send(ChannelEvent::Unblocked);
        drop(tx);
        assert_eq!(rx.len(), 2);
        assert!(rx.is_closed());
        assert!(matches!(rx.try_recv(), Ok(ChannelEvent::Blocked { .. })));
        assert!(matches!(rx.try_recv(), Ok(ChannelEvent::Unblocked)));
        assert!(rx.is_empty());
        assert_eq!(rx.try_recv().unwrap_err(), TryRecvError::Disconnected);
    }

    #[test]
    fn a_waiting_reader_is_woken_by_an_event_and_by_the_end_which_stays() {
        let (tx, mut rx) = queue::<Native>();
        let (woken, waker) = counting();
        let mut cx = Context::from_waker(&waker);
        assert!(rx.poll_recv(&mut cx).is_pending());
        tx.send(ChannelEvent::Unblocked);
        assert_eq!(woken.0.load(Ordering::SeqCst), 1);
        assert!(matches!(
            rx.poll_recv(&mut cx),
            Poll::Ready(Some(ChannelEvent::Unblocked))
        ));
        assert!(rx.poll_recv(&mut cx).is_pending());
        drop(tx);
        assert_eq!(woken.0.load(Ordering::SeqCst), 2);
        for _ in 0..2 {
            assert!(matches!(rx.poll_recv(&mut cx), Poll::Ready(None)));
        }
    }

    #[test]
    fn events_without_a_reader_are_neither_kept_nor_built() {
        let (tx, rx) = queue::<Native>();
        tx.send(blocked());
        drop(rx);
        tx.send(blocked());
        tx.send_with(|| unreachable!("nobody reads: the event is not built"));
        assert!(tx.0.lock().events.is_empty());
    }

    #[test]
    fn a_dropped_reader_leaves_no_waker_behind() {
        let (tx, mut rx) = queue::<Native>();
        let (woken, waker) = counting();
        assert!(rx.poll_recv(&mut Context::from_waker(&waker)).is_pending());
        drop(rx);
        drop(tx);
        assert_eq!(woken.0.load(Ordering::SeqCst), 0);
    }
}
