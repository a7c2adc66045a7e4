//! Coalescing acknowledgements: many settled deliveries, one `basic.ack multiple`.

use std::collections::VecDeque;

use binder_core::binder::Settlement;

/// Acks at most this many deliveries with one `multiple` ack.
pub const ACK_BATCH: usize = 100;

/// How many acks a subscription with this prefetch gathers before one `multiple` ack: half
/// the window, so that the broker refills one half while the application works through the
/// other (a whole window would leave it waiting for each refill), at least 1 and at most
/// [`ACK_BATCH`] (0, unlimited, gets [`ACK_BATCH`]).
pub fn ack_batch_for(prefetch: u16) -> usize {
    match prefetch {
        0 => ACK_BATCH,
        p => (usize::from(p) / 2).clamp(1, ACK_BATCH),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// Delivered, not yet settled.
    Outstanding,
    /// Settled with an ack that is not sent yet.
    Acked,
    /// Rejected or requeued (sent on its own).
    Settled,
}

/// Tracks a channel's deliveries so settled ones can be acknowledged together: an ack is due
/// for an unbroken run of acked tags below the oldest unsettled delivery, once a batch (see
/// [`AckCoalescer::for_prefetch`]) is ready; what is ready short of a batch goes out on
/// [`AckCoalescer::flush`], which a subscription calls before it waits for the broker, and
/// from then on at once until the next batch is taken. Handlers that finish out of order
/// never ack each other's deliveries. A rejected or requeued delivery is never covered,
/// provided its `basic.nack` / `basic.reject` is sent before the ack its settlement makes due
/// (and no other ack overtakes it: binders do both under the lock that guards the coalescer).
///
/// Delivery tags grow on a channel, so the deliveries sit in a ring in tag order: recording
/// one is a push, settling one a binary search, and nothing allocates once the ring has
/// grown to the prefetch window.
///
/// ```
/// use binder_amqp::AckCoalescer;
///
/// let mut acks = AckCoalescer::default();
/// for tag in 1..=3 {
///     acks.delivered(tag);
/// }
/// assert_eq!(acks.settle(2, true), None); // 1 is still being handled
/// assert_eq!(acks.settle(1, true), None); // the batch (100) is not complete
/// assert_eq!(acks.flush(), Some(2)); // about to wait: ack up to 2
/// assert_eq!(acks.settle(3, true), Some(3)); // after a flush: at once
/// ```
#[derive(Debug)]
pub struct AckCoalescer {
    /// Deliveries by increasing tag, from the oldest not yet acknowledged.
    slots: VecDeque<(u64, Slot)>,
    /// Send what is ready at once instead of waiting for a batch (after [`Self::flush`]).
    eager: bool,
    /// Acks gathered before one is due.
    batch: usize,
    /// Length of the leading run of settled slots (the index of the oldest `Outstanding`
    /// one, or the length): what an ack could cover now.
    prefix: usize,
    /// `Acked` slots in that run.
    ready: usize,
}

impl Default for AckCoalescer {
    /// Batches of [`ACK_BATCH`].
    fn default() -> Self {
        Self::with_batch(ACK_BATCH)
    }
}

impl AckCoalescer {
    /// A coalescer for a subscription with this prefetch (batches of [`ack_batch_for`]).
    pub fn for_prefetch(prefetch: u16) -> Self {
        Self::with_batch(ack_batch_for(prefetch))
    }

    /// A coalescer that gathers `batch` acks (at least 1) before one is due.
    pub fn with_batch(batch: usize) -> Self {
        AckCoalescer {
            slots: VecDeque::new(),
            eager: false,
            batch: batch.max(1),
            prefix: 0,
            ready: 0,
        }
    }

    /// Extends the settled run over the slots settled after it.
    fn extend_prefix(&mut self) {
        while let Some(&(_, slot)) = self.slots.get(self.prefix) {
            match slot {
                Slot::Outstanding => break,
                Slot::Acked => self.ready += 1,
                Slot::Settled => {}
            }
            self.prefix += 1;
        }
    }

    /// Counts the settled run again (after an out-of-order insertion, which is rare).
    fn recount_prefix(&mut self) {
        self.prefix = 0;
        self.ready = 0;
        self.extend_prefix();
    }

    /// In debug builds, checks the running counts against a scan (of rings up to a few
    /// hundred slots, so that tests with a large window stay linear).
    fn check_counts(&self) {
        if !cfg!(debug_assertions) || self.slots.len() > 512 {
            return;
        }
        debug_assert_eq!(
            self.prefix,
            self.slots
                .iter()
                .take_while(|(_, slot)| *slot != Slot::Outstanding)
                .count(),
            "settled run"
        );
        debug_assert_eq!(
            self.ready,
            self.slots
                .range(..self.prefix)
                .filter(|(_, slot)| *slot == Slot::Acked)
                .count(),
            "acks ready"
        );
    }

    fn position(&self, tag: u64) -> Result<usize, usize> {
        self.slots.binary_search_by_key(&tag, |&(t, _)| t)
    }

    /// Records a delivery handed to the application.
    pub fn delivered(&mut self, tag: u64) {
        match self.slots.back() {
            Some(&(last, _)) if last >= tag => match self.position(tag) {
                Ok(_) => return,
                Err(i) => {
                    self.slots.insert(i, (tag, Slot::Outstanding));
                    self.recount_prefix();
                }
            },
            // An outstanding slot at the end leaves the settled run as it is.
            _ => self.slots.push_back((tag, Slot::Outstanding)),
        }
        self.check_counts();
    }

    /// Records a settlement (`ack` true for an ack, false for a reject or requeue sent on its
    /// own); returns the tag to acknowledge with `multiple` when a batch is due.
    pub fn settle(&mut self, tag: u64, ack: bool) -> Option<u64> {
        let now = if ack { Slot::Acked } else { Slot::Settled };
        match self.position(tag) {
            Ok(i) => {
                match self.slots[i].1 {
                    Slot::Outstanding => {
                        self.slots[i].1 = now;
                        if i == self.prefix {
                            self.extend_prefix();
                        }
                    }
                    // Settled twice: the last word stands (binders refuse this earlier).
                    _ => {
                        self.slots[i].1 = now;
                        self.recount_prefix();
                    }
                }
            }
            // Never recorded as delivered: acked with the others all the same.
            Err(i) => {
                self.slots.insert(i, (tag, now));
                self.recount_prefix();
            }
        }
        // Rejected and requeued deliveries at the front need no ack: forget them.
        while self
            .slots
            .front()
            .is_some_and(|(_, slot)| *slot == Slot::Settled)
        {
            self.slots.pop_front();
            self.prefix -= 1;
        }
        self.check_counts();
        // Short of a batch, even with nothing older pending: the subscription comes back for
        // the next delivery and flushes before it waits, so these acks can still join the
        // next batch's (one frame, and one wake-up of the client's I/O, fewer).
        if self.ready == 0 || (self.ready < self.batch && !self.eager) {
            return None;
        }
        self.take_ready()
    }

    /// Records the settlement of `tag` and sends what it calls for, in the one safe order:
    /// a requeue or reject first (`single`), then the `multiple` ack it makes due, if any
    /// (`ack_up_to`). Sent the other way round, that ack would cover, and so acknowledge,
    /// this very delivery. Call it under the lock that guards the coalescer, so that no other
    /// settlement's ack overtakes these frames.
    pub fn apply<E>(
        &mut self,
        tag: u64,
        settlement: Settlement,
        single: impl FnOnce(u64, Settlement) -> Result<(), E>,
        ack_up_to: impl FnOnce(u64) -> Result<(), E>,
    ) -> Result<(), E> {
        let due = self.settle(tag, settlement == Settlement::Ack);
        if settlement != Settlement::Ack {
            single(tag, settlement)?;
        }
        due.map_or(Ok(()), ack_up_to)
    }

    /// Records a batch of deliveries taken from the broker together, which the application
    /// will come back for one after the other: until [`Self::flush`], their acks are held
    /// back (up to a batch) and go out as one `multiple` ack.
    pub fn batch_taken(&mut self, tags: impl IntoIterator<Item = u64>) {
        for tag in tags {
            self.delivered(tag);
        }
        self.eager = false;
    }

    /// The ack to send now (see [`Self::take_ready`]); from here until the next batch, every
    /// settlement makes what is ready due at once, even with older deliveries outstanding.
    /// A binder flushes when nobody will come back soon: its subscription waits for
    /// deliveries, is paused or cancelled, or a handler has to wait.
    pub fn flush(&mut self) -> Option<u64> {
        self.eager = true;
        self.take_ready()
    }

    /// The highest acked tag below every unsettled one (what a flush acknowledges), removing
    /// what it covers.
    pub fn take_ready(&mut self) -> Option<u64> {
        let last_acked = self
            .slots
            .range(..self.prefix)
            .rposition(|(_, slot)| *slot == Slot::Acked)?;
        let upto = self.slots[last_acked].0;
        self.slots.drain(..=last_acked);
        // Every ack of the run was up to `last_acked`; what is left of it is settled only.
        self.prefix -= last_acked + 1;
        self.ready = 0;
        self.check_counts();
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
        let mut st = AckCoalescer::with_batch(50);
        for t in 1..=120 {
            st.delivered(t);
        }
        let mut sent = Vec::new();
        for tag in 1..=120 {
            sent.extend(st.settle(tag, true));
        }
        assert_eq!(sent, vec![50, 100], "the rest waits for a flush");
        assert_eq!(st.flush(), Some(120));
    }

    #[test]
    fn the_batch_is_half_the_prefetch_window_within_bounds() {
        assert_eq!(ack_batch_for(200), 100);
        assert_eq!(ack_batch_for(10), 5);
        assert_eq!(ack_batch_for(1), 1, "prefetch 1: every ack at once");
        assert_eq!(ack_batch_for(1000), ACK_BATCH);
        assert_eq!(ack_batch_for(0), ACK_BATCH, "unlimited");
        let mut st = AckCoalescer::for_prefetch(10);
        st.batch_taken(1..=10);
        let sent: Vec<u64> = (1..=10).filter_map(|t| st.settle(t, true)).collect();
        assert_eq!(sent, vec![5, 10]);
    }

    #[test]
    fn a_rejected_delivery_is_never_covered_by_a_multiple_ack() {
        let mut st = delivered(1..=3);
        assert_eq!(st.settle(1, true), None);
        assert_eq!(st.settle(2, false), None, "2 is rejected on its own");
        assert_eq!(st.settle(3, true), None, "short of a batch");
        assert_eq!(st.flush(), Some(3));
    }

    #[test]
    fn a_settled_batch_waits_for_the_next_one_until_a_flush() {
        let mut st = AckCoalescer::with_batch(5);
        st.batch_taken(1..=2);
        assert_eq!(st.settle(1, true), None);
        assert_eq!(
            st.settle(2, true),
            None,
            "all settled, still short of a batch"
        );
        st.batch_taken(3..=6);
        assert_eq!(st.settle(3, true), None);
        assert_eq!(st.settle(4, true), None);
        assert_eq!(st.settle(5, true), Some(5), "a batch across the two taken");
        assert_eq!(st.settle(6, true), None);
        assert_eq!(st.flush(), Some(6));
        assert_eq!(st.flush(), None, "nothing twice");
    }

    #[test]
    fn eager_acks_go_out_past_an_outstanding_delivery() {
        let mut st = AckCoalescer::default();
        st.batch_taken(1..=3);
        assert_eq!(st.settle(1, true), None, "2 and 3 outstanding: held");
        assert_eq!(st.flush(), Some(1));
        assert_eq!(st.settle(3, true), None, "2 is older: nothing ready");
        assert_eq!(st.settle(2, true), Some(3), "what is ready goes out");
        st.batch_taken(4..=5);
        assert_eq!(st.settle(4, true), None, "held again");
    }

    #[test]
    fn a_reject_goes_out_before_the_ack_it_makes_due() {
        let mut st = AckCoalescer::with_batch(2);
        st.batch_taken(1..=3);
        let mut sent = Vec::new();
        let mut apply = |st: &mut AckCoalescer, tag, settlement| {
            let frames = std::cell::RefCell::new(Vec::new());
            st.apply::<()>(
                tag,
                settlement,
                |t, s| {
                    frames.borrow_mut().push(format!("{s:?} {t}"));
                    Ok(())
                },
                |upto| {
                    frames.borrow_mut().push(format!("ack up to {upto}"));
                    Ok(())
                },
            )
            .unwrap();
            sent.extend(frames.into_inner());
        };
        apply(&mut st, 2, Settlement::Ack);
        apply(&mut st, 3, Settlement::Ack);
        apply(&mut st, 1, Settlement::Reject);
        assert_eq!(sent, vec!["Reject 1", "ack up to 3"]);
    }

    #[test]
    fn rejected_deliveries_are_forgotten() {
        let mut st = delivered(1..=1000);
        for tag in 1..=1000 {
            assert_eq!(st.settle(tag, false), None);
        }
        assert!(st.slots.is_empty());
        assert_eq!(st.take_ready(), None);
    }

    #[test]
    fn out_of_order_completion_waits_for_the_oldest() {
        let mut st = delivered(1..=60);
        for tag in 2..=60 {
            assert_eq!(st.settle(tag, true), None, "1 still pending");
        }
        assert_eq!(st.flush(), None, "1 still pending");
        assert_eq!(st.settle(1, true), Some(60), "after a flush: at once");
    }

    /// Random batches settled in random order, with rejects and flushes: an ack never
    /// covers a delivery still outstanding, and every acked delivery is covered once
    /// everything is settled and flushed. (The running counts are
    /// checked against a scan after every step, in debug builds.)
    #[test]
    fn random_settlement_orders_keep_every_guarantee() {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for _case in 0..200 {
            let mut st = AckCoalescer::with_batch(1 + next(8) as usize);
            // What each tag became: 0 outstanding, 1 acked, 2 rejected.
            let mut state: Vec<u8> = vec![0];
            let mut covered_up_to = 0u64;
            let check = |upto: Option<u64>, state: &[u8], covered: &mut u64| {
                if let Some(upto) = upto {
                    for tag in (*covered + 1)..=upto {
                        // A rejected tag inside the range is fine: `apply` sends its reject
                        // first, and a multiple ack leaves settled tags alone.
                        assert_ne!(
                            state[tag as usize], 0,
                            "ack up to {upto} covers outstanding {tag}"
                        );
                    }
                    *covered = upto;
                }
            };
            let mut pending: Vec<u64> = Vec::new();
            for _round in 0..6 {
                let first = state.len() as u64;
                let n = 1 + next(12);
                st.batch_taken(first..first + n);
                state.extend(std::iter::repeat_n(0, n as usize));
                pending.extend(first..first + n);
                while pending.len() > next(4) as usize {
                    let pick = pending.swap_remove(next(pending.len() as u64) as usize);
                    let ack = next(5) != 0;
                    state[pick as usize] = if ack { 1 } else { 2 };
                    let due = st.settle(pick, ack);
                    check(due, &state, &mut covered_up_to);
                    if next(7) == 0 {
                        let flushed = st.flush();
                        check(flushed, &state, &mut covered_up_to);
                    }
                }
            }
            for pick in std::mem::take(&mut pending) {
                state[pick as usize] = 1;
                let due = st.settle(pick, true);
                check(due, &state, &mut covered_up_to);
            }
            let flushed = st.flush();
            check(flushed, &state, &mut covered_up_to);
            let last_acked = state.iter().rposition(|s| *s == 1).unwrap_or(0) as u64;
            assert!(covered_up_to >= last_acked, "every ack sent in the end");
        }
    }
}
