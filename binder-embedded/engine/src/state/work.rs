//! The broker's work queue: what an operation leaves to be done before the lock is released
//! (queues to dispatch, messages to dead-letter) and after (timer wake-up, consumer wake-ups,
//! freeing settled messages).

use std::collections::VecDeque;
use std::sync::Arc;
use std::task::Waker;

use crate::dead_letter::DeathReason;
use crate::envelope::Envelope;
use crate::storage::QueuedMessage;
use crate::store::Durability;
use crate::types::Delivery;
use smallvec::SmallVec;

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
    /// Consumer handles that waited for the deliveries (or the close) their inbox received:
    /// woken once the lock is released.
    pub wakes: Few<Waker>,
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
    /// The store refused a copy of the dead letter being made (set by `enqueue`, taken by
    /// `dead_letter`): the store then keeps the original.
    pub copy_refused: bool,
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
            copy_refused: false,
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
        keep_scratch(&mut self.deliver_scratch, buffer);
    }

    /// Keeps a settlement's emptied buffer for the next one, unless a large batch grew it.
    pub(crate) fn keep_settle_scratch(&mut self, buffer: Vec<Unacked<E>>) {
        keep_scratch(&mut self.settle_scratch, buffer);
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

/// Puts an emptied scratch buffer back in `slot`, unless it grew beyond [`SCRATCH_KEPT`].
fn keep_scratch<T>(slot: &mut Vec<T>, buffer: Vec<T>) {
    debug_assert!(buffer.is_empty());
    if buffer.capacity() <= SCRATCH_KEPT {
        *slot = buffer;
    }
}

/// Usually empty or of one item (an operation's wake-ups, the records an ack frees): kept
/// without an allocation, which a `Vec` taken out of the state at every operation would cost.
pub(crate) type Few<T> = SmallVec<[T; 1]>;

/// Work done outside the broker's lock: a wake-up can be a system call, and freeing a payload
/// takes time nobody should wait on the broker for.
#[derive(Debug)]
pub(crate) struct AfterLock<E: Envelope> {
    pub wake_timer: bool,
    pub wakes: Few<Waker>,
    pub garbage: Few<Arc<E::Record>>,
}
