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
        let mut queue = self.0.lock();
        if queue.reader_gone {
            return;
        }
        queue.events.push_back(event);
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
    /// was read.
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
    use super::*;

    fn unblocked() -> ChannelEvent<Native> {
        ChannelEvent::Unblocked
    }

    #[test]
    fn events_come_in_order_then_the_end() {
        let (tx, mut rx) = queue::<Native>();
        assert_eq!(rx.try_recv().unwrap_err(), TryRecvError::Empty);
        tx.send(ChannelEvent::Blocked {
            reason: "low on memory".into(),
        });
        tx.send(unblocked());
        drop(tx);
        assert!(matches!(rx.try_recv(), Ok(ChannelEvent::Blocked { .. })));
        assert!(matches!(rx.try_recv(), Ok(ChannelEvent::Unblocked)));
        assert_eq!(rx.try_recv().unwrap_err(), TryRecvError::Disconnected);
    }

    #[tokio::test]
    async fn a_waiting_reader_is_woken_by_an_event_and_by_the_end() {
        let (tx, mut rx) = queue::<Native>();
        let reader = tokio::spawn(async move {
            let first = rx.recv().await;
            let end = rx.recv().await;
            (first, end)
        });
        tokio::task::yield_now().await;
        tx.send(unblocked());
        tokio::task::yield_now().await;
        drop(tx);
        let (first, end) = reader.await.unwrap();
        assert!(matches!(first, Some(ChannelEvent::Unblocked)));
        assert!(end.is_none());
    }

    #[test]
    fn events_without_a_reader_are_dropped() {
        let (tx, rx) = queue::<Native>();
        tx.send(unblocked());
        drop(rx);
        tx.send(unblocked());
        assert!(tx.0.lock().events.is_empty());
    }
}
