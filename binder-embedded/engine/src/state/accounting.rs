//! The memory count behind the memory high watermark: what messages held by the broker are
//! estimated to cost (see [`crate::memory`]), and whether publishers are blocked.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::sessions::DELIVERED;
use crate::envelope::Envelope;
use crate::storage::QueuedMessage;

/// Memory held by messages: in queues, unacknowledged, or in no-ack consumers' inboxes.
#[derive(Debug, Default)]
pub(crate) struct MemoryCount {
    /// Bytes counted.
    pub used: usize,
    /// Memory of deliveries that left no-ack consumers' inboxes since the last operation
    /// (their handles take them without the engine's lock); taken off `used` by
    /// [`MemoryCount::fold_released`].
    pub released: Arc<AtomicUsize>,
    /// Publishers are blocked (the count went above the high watermark and has not yet come
    /// down to the low one).
    pub blocked: bool,
}

impl MemoryCount {
    /// Takes the memory released by no-ack consumers' handles off the count.
    #[inline]
    pub(crate) fn fold_released(&mut self) {
        if self.released.load(Ordering::Acquire) != 0 {
            self.used -= self.released.swap(0, Ordering::AcqRel);
        }
    }

    /// A message goes out to a consumer that must acknowledge it: it now costs
    /// [`DELIVERED`] more.
    pub(crate) fn delivered<E: Envelope>(&mut self, message: &mut QueuedMessage<E>) {
        message.set_footprint((message.footprint() + DELIVERED) as u32);
        self.used += DELIVERED;
    }

    /// A delivery's record is gone (settled, requeued, its channel closed): back to the
    /// cost of a queue entry.
    pub(crate) fn undelivered<E: Envelope>(&mut self, message: &mut QueuedMessage<E>) {
        message.set_footprint((message.footprint() - DELIVERED) as u32);
        self.used -= DELIVERED;
    }
}
