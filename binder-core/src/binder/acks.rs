//! Coalescing acknowledgements: many settled deliveries, one `basic.ack multiple`.

use std::collections::BTreeSet;

/// Acks at most this many deliveries with one `multiple` ack.
pub const ACK_BATCH: usize = 50;

/// Tracks a channel's deliveries so settled ones can be acknowledged together: an ack is due
/// for an unbroken run of acked tags below the oldest unsettled delivery, once [`ACK_BATCH`]
/// are ready or nothing older is pending. Handlers that finish out of order never ack each
/// other's deliveries, and a rejected or requeued delivery is never covered.
///
/// ```
/// use binder_core::binder::AckCoalescer;
///
/// let mut acks = AckCoalescer::default();
/// for tag in 1..=3 {
///     acks.delivered(tag);
/// }
/// assert_eq!(acks.settle(2, true), None); // 1 is still being handled
/// assert_eq!(acks.settle(1, true), None); // 3 too, and the batch is small
/// assert_eq!(acks.settle(3, true), Some(3)); // nothing older pending: ack up to 3
/// ```
#[derive(Debug, Default)]
pub struct AckCoalescer {
    /// Delivered, not yet settled.
    outstanding: BTreeSet<u64>,
    /// Settled with an ack, not yet sent.
    acked: BTreeSet<u64>,
}

impl AckCoalescer {
    /// Records a delivery handed to the application.
    pub fn delivered(&mut self, tag: u64) {
        self.outstanding.insert(tag);
    }

    /// Records a settlement (`ack` true for an ack, false for a reject or requeue sent on its
    /// own); returns the tag to acknowledge with `multiple` when a batch is due.
    pub fn settle(&mut self, tag: u64, ack: bool) -> Option<u64> {
        self.outstanding.remove(&tag);
        if ack {
            self.acked.insert(tag);
        }
        let limit = self.outstanding.first().copied().unwrap_or(u64::MAX);
        let ready = self.acked.range(..limit).count();
        if ready == 0 || (ready < ACK_BATCH && !self.outstanding.is_empty()) {
            return None;
        }
        self.take_ready()
    }

    /// The highest acked tag below every unsettled one (what a flush acknowledges), removing
    /// what it covers.
    pub fn take_ready(&mut self) -> Option<u64> {
        let limit = self.outstanding.first().copied().unwrap_or(u64::MAX);
        let upto = *self.acked.range(..limit).next_back()?;
        self.acked = self.acked.split_off(&(upto + 1));
        Some(upto)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivered(tags: std::ops::RangeInclusive<u64>) -> AckCoalescer {
        let mut a = AckCoalescer::default();
        for t in tags {
            a.delivered(t);
        }
        a
    }

    #[test]
    fn acks_go_out_in_batches() {
        let mut st = delivered(1..=120);
        let mut sent = Vec::new();
        for tag in 1..=120 {
            sent.extend(st.settle(tag, true));
        }
        assert_eq!(sent, vec![50, 100, 120]);
    }

    #[test]
    fn a_rejected_delivery_is_never_covered_by_a_multiple_ack() {
        let mut st = delivered(1..=3);
        assert_eq!(st.settle(1, true), None);
        assert_eq!(st.settle(2, false), None, "2 is rejected on its own");
        assert_eq!(st.settle(3, true), Some(3));
    }

    #[test]
    fn out_of_order_completion_waits_for_the_oldest() {
        let mut st = delivered(1..=60);
        for tag in 2..=60 {
            assert_eq!(st.settle(tag, true), None, "1 still pending");
        }
        assert_eq!(st.settle(1, true), Some(60));
    }
}
