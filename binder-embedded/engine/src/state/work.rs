//! The broker's work queue: what an operation leaves to be done before the lock is released
//! (queues to dispatch, messages to dead-letter) and after (timer wake-up, consumer wake-ups,
//! freeing settled messages).

use std::collections::VecDeque;
use std::sync::Arc;

use crate::dead_letter::DeathReason;
use crate::envelope::Envelope;
use crate::inbox::Inbox;
use crate::storage::QueuedMessage;
use crate::store::Durability;
use crate::types::Delivery;

use super::sessions::Unacked;

/// The largest scratch buffer kept between operations (in entries): a burst beyond it (a
/// no-ack consumer taking a long queue, an ack of a large window) frees its buffer.
const SCRATCH_KEPT: usize = 1024;

/// Pending work, drained by `State::settle` (under the lock) and by the broker's handles
/// (after it).
#[derive(Debug)]
pub(crate) struct Work<E: Envelope> {
    /// Queues with work to do (dispatch, overflow).
    pub dirty: Vec<Arc<str>>,
    /// Messages waiting to be dead-lettered, first to die first: message, queue it died in,
    /// reason. A FIFO, so messages that die together (expired at once, a multiple nack)
    /// reach the dead-letter queue in their queue order, as on RabbitMQ.
    pub dying: VecDeque<(QueuedMessage<E>, Arc<str>, DeathReason)>,
    /// Set when a message with an expiry or a queue with `x-expires` appears, so the timer
    /// recomputes its deadline.
    pub timer_dirty: bool,
    /// Settled messages, dropped by the caller after the lock is released (freeing payloads
    /// under the lock cost an eighth of the ack path).
    pub garbage: Few<Arc<E::Record>>,
    /// Inboxes that received deliveries while empty: their handles are woken once the
    /// lock is released.
    pub wakes: Few<Arc<Inbox<E>>>,
    /// Reused list of routing targets (saves an allocation per publish).
    pub route_scratch: Vec<Arc<str>>,
    /// Durability points of the publish being made, taken by its publisher: its confirm
    /// waits for them.
    pub durability: Vec<Durability>,
    /// Reused buffer of a dispatch's deliveries to one consumer (saves an allocation per
    /// dispatch: at prefetch 1 that is one per message).
    pub deliver_scratch: Vec<Delivery<E>>,
    /// Reused buffer of the deliveries a settlement takes (one allocation less per ack).
    pub settle_scratch: Vec<Unacked<E>>,
}

impl<E: Envelope> Work<E> {
    pub(crate) fn new() -> Self {
        Work {
            dirty: Vec::new(),
            dying: VecDeque::new(),
            timer_dirty: false,
            garbage: Few::default(),
            wakes: Few::default(),
            route_scratch: Vec::new(),
            durability: Vec::new(),
            deliver_scratch: Vec::new(),
            settle_scratch: Vec::new(),
        }
    }

    /// Queues a dispatch of `queue`, skipping a repeat of the last entry (settling a batch of
    /// acks would otherwise dispatch the same queue once per message).
    pub(crate) fn mark_dirty(&mut self, queue: Arc<str>) {
        if self.dirty.last() != Some(&queue) {
            self.dirty.push(queue);
        }
    }

    /// Keeps a dispatch's emptied buffer for the next one, unless a large burst grew it.
    pub(crate) fn keep_deliver_scratch(&mut self, buffer: Vec<Delivery<E>>) {
        debug_assert!(buffer.is_empty());
        if buffer.capacity() <= SCRATCH_KEPT {
            self.deliver_scratch = buffer;
        }
    }

    /// Keeps a settlement's emptied buffer for the next one, unless a large batch grew it.
    pub(crate) fn keep_settle_scratch(&mut self, buffer: Vec<Unacked<E>>) {
        debug_assert!(buffer.is_empty());
        if buffer.capacity() <= SCRATCH_KEPT {
            self.settle_scratch = buffer;
        }
    }

    /// What is to be done after the lock is released: whether to wake the timer, the
    /// inboxes to wake, the records to drop.
    pub(crate) fn take_after_lock(&mut self) -> AfterLock<E> {
        AfterLock {
            wake_timer: std::mem::take(&mut self.timer_dirty),
            wakes: std::mem::take(&mut self.wakes),
            garbage: std::mem::take(&mut self.garbage),
        }
    }
}

/// Work done outside the broker's lock: a wake-up can be a system call, and freeing a payload
/// takes time nobody should wait on the broker for.
#[derive(Debug)]
pub(crate) struct AfterLock<E: Envelope> {
    pub wake_timer: bool,
    pub wakes: Few<Arc<Inbox<E>>>,
    pub garbage: Few<Arc<E::Record>>,
}

/// A list that is usually empty or of one item (an operation's wake-ups, the records an ack
/// frees): those need no allocation, which a `Vec` taken out of the state at every operation
/// would cost.
#[derive(Debug, Default)]
pub(crate) enum Few<T> {
    #[default]
    Empty,
    One(T),
    Many(Vec<T>),
}

impl<T> Few<T> {
    pub(crate) fn push(&mut self, item: T) {
        match self {
            Few::Empty => *self = Few::One(item),
            Few::Many(items) => items.push(item),
            Few::One(_) => {
                let Few::One(first) = std::mem::take(self) else {
                    unreachable!("matched above")
                };
                let mut items = Vec::with_capacity(4);
                items.push(first);
                items.push(item);
                *self = Few::Many(items);
            }
        }
    }

    /// Makes room for `more` items at once (one allocation for a batch rather than one per
    /// doubling).
    pub(crate) fn reserve(&mut self, more: usize) {
        let len = match self {
            Few::Empty => 0,
            Few::One(_) => 1,
            Few::Many(items) => {
                items.reserve(more);
                return;
            }
        };
        if len + more > 1 {
            let mut items = Vec::with_capacity(len + more);
            if let Few::One(first) = std::mem::take(self) {
                items.push(first);
            }
            *self = Few::Many(items);
        }
    }
}

impl<T> IntoIterator for Few<T> {
    type Item = T;
    type IntoIter = std::iter::Chain<std::option::IntoIter<T>, std::vec::IntoIter<T>>;

    fn into_iter(self) -> Self::IntoIter {
        match self {
            Few::Empty => None.into_iter().chain(Vec::new()),
            Few::One(item) => Some(item).into_iter().chain(Vec::new()),
            Few::Many(items) => None.into_iter().chain(items),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Few;

    #[test]
    fn few_keeps_its_items_in_order_whatever_their_number() {
        for n in 0..6 {
            let mut few = Few::default();
            if n > 2 {
                few.reserve(n - 1);
            }
            for i in 0..n {
                few.push(i);
            }
            assert_eq!(
                few.into_iter().collect::<Vec<_>>(),
                (0..n).collect::<Vec<_>>()
            );
        }
    }
}
