//! Settling an AMQP channel's deliveries by tag: [`TagAcks`] puts each settlement through an
//! [`AckCoalescer`] (except at prefetch 1, where each goes out alone) and sends the frames on
//! the binder's [`AckChannel`].

use std::fmt;
use std::sync::{Mutex, MutexGuard};

use binder_core::binder::{BinderFuture, BinderResult, SettleByTag, Settlement};

use crate::acks::AckCoalescer;

/// The settlement frames of an AMQP 0-9-1 channel, each queued for the broker without
/// waiting for a write (none of them has a reply). A binder implements it once over its
/// channel type (lapin's, the engine's).
pub trait AckChannel: fmt::Debug + Send + Sync + 'static {
    /// `basic.ack` of `tag` alone (without `multiple`).
    fn ack(&self, tag: u64) -> BinderResult<()>;
    /// `basic.ack` with `multiple`: every delivery up to and including `tag`.
    fn ack_up_to(&self, tag: u64) -> BinderResult<()>;
    /// `basic.nack` of `tag` alone, with `requeue`.
    fn requeue(&self, tag: u64) -> BinderResult<()>;
    /// `basic.reject` of `tag` without requeue (the queue's dead-letter exchange takes it).
    fn reject(&self, tag: u64) -> BinderResult<()>;
}

/// A subscription's settlements: its channel, and the acks held back to go out as one
/// `multiple` ack. Shared (`Arc`) with the [`Settler`](binder_core::binder::Settler) of each
/// delivery, so settling costs no allocation.
///
/// Above prefetch 1, every frame is sent under the coalescer's lock, so no ack overtakes a
/// requeue or reject it would otherwise cover. At prefetch 1 there is nothing to gather (a
/// batch is one ack): each settlement then goes out on its own, an ack without `multiple`,
/// with no coalescer and no lock, which is correct in any order.
#[derive(Debug)]
pub struct TagAcks<C> {
    channel: C,
    /// `None` at prefetch 1: every settlement is sent alone, at once.
    coalescer: Option<Mutex<AckCoalescer>>,
}

impl<C: AckChannel> TagAcks<C> {
    /// Settlements on `channel` for a subscription with this prefetch (see
    /// [`AckCoalescer::for_prefetch`]).
    pub fn new(channel: C, prefetch: u16) -> Self {
        TagAcks {
            channel,
            coalescer: (prefetch != 1).then(|| Mutex::new(AckCoalescer::for_prefetch(prefetch))),
        }
    }

    /// The channel the frames go out on.
    pub fn channel(&self) -> &C {
        &self.channel
    }

    /// The coalescer, locked; `None` when settlements go out alone (prefetch 1).
    fn lock(&self) -> Option<MutexGuard<'_, AckCoalescer>> {
        let coalescer = self.coalescer.as_ref()?;
        Some(coalescer.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Sends the frame of one settlement of `tag` alone.
    fn single(&self, tag: u64, settlement: Settlement) -> BinderResult<()> {
        match settlement {
            Settlement::Ack => self.channel.ack(tag),
            Settlement::Requeue => self.channel.requeue(tag),
            Settlement::Reject => self.channel.reject(tag),
        }
    }

    /// Settles one delivery through the coalescer (see [`AckCoalescer::apply`] for the
    /// order): a requeue or reject goes out at once, before the ack it makes due. At
    /// prefetch 1 the settlement goes out alone.
    pub fn apply(&self, tag: u64, settlement: Settlement) -> BinderResult<()> {
        let Some(mut coalescer) = self.lock() else {
            return self.single(tag, settlement);
        };
        coalescer.apply(
            tag,
            settlement,
            |tag, settlement| self.single(tag, settlement),
            |upto| self.channel.ack_up_to(upto),
        )
    }

    /// Sends the acks held back, and holds none back until the next batch: whoever calls
    /// this (a wait for deliveries, a pause, a handler that waits, a cancel) will not come
    /// back soon.
    pub fn flush(&self) -> BinderResult<()> {
        match self.lock().and_then(|mut coalescer| coalescer.flush()) {
            Some(upto) => self.channel.ack_up_to(upto),
            None => Ok(()),
        }
    }

    /// Records deliveries taken from the broker together (see
    /// [`AckCoalescer::batch_taken`]); nothing to record at prefetch 1.
    pub fn batch_taken(&self, tags: impl IntoIterator<Item = u64>) {
        if let Some(mut coalescer) = self.lock() {
            coalescer.batch_taken(tags);
        }
    }
}

impl<C: AckChannel> SettleByTag for TagAcks<C> {
    /// Nothing waits for a write: waiting for each ack cost half a consumer's throughput.
    fn settle_tag(&self, tag: u64, settlement: Settlement) -> BinderFuture<'_, BinderResult<()>> {
        BinderFuture::ready(self.apply(tag, settlement))
    }

    /// A delivery nobody can settle any more goes back to the queue at once, rather than
    /// holding up the acks of the deliveries after it until the channel closes.
    fn release_tag(&self, tag: u64) {
        let _ = self.apply(tag, Settlement::Requeue);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use binder_core::binder::{BinderError, Settler};

    use super::*;

    /// Records the frames in the order they would reach the broker.
    #[derive(Debug, Default)]
    pub(crate) struct Frames(pub(crate) Mutex<Vec<String>>);

    impl AckChannel for std::sync::Arc<Frames> {
        fn ack(&self, tag: u64) -> BinderResult<()> {
            self.0.lock().unwrap().push(format!("ack {tag}"));
            Ok(())
        }
        fn ack_up_to(&self, tag: u64) -> BinderResult<()> {
            self.0.lock().unwrap().push(format!("ack<={tag}"));
            Ok(())
        }
        fn requeue(&self, tag: u64) -> BinderResult<()> {
            self.0.lock().unwrap().push(format!("requeue {tag}"));
            Ok(())
        }
        fn reject(&self, tag: u64) -> BinderResult<()> {
            if tag == 99 {
                return Err(BinderError::closed("the test's channel"));
            }
            self.0.lock().unwrap().push(format!("reject {tag}"));
            Ok(())
        }
    }

    #[test]
    fn acks_wait_for_the_batch_and_never_cover_a_rejected_delivery() {
        let frames = std::sync::Arc::new(Frames::default());
        let acks = std::sync::Arc::new(TagAcks::new(frames.clone(), 10));
        acks.batch_taken(1..=4);
        let settlers: Vec<Settler> = (1..=4).map(|t| Settler::new(acks.clone(), t)).collect();
        let block = futures::executor::block_on;
        block(settlers[0].settle(Settlement::Ack)).unwrap();
        block(settlers[1].settle(Settlement::Reject)).unwrap();
        block(settlers[2].settle(Settlement::Ack)).unwrap();
        assert_eq!(*frames.0.lock().unwrap(), ["reject 2"], "acks held back");
        acks.flush().unwrap();
        drop(settlers);
        assert_eq!(
            *frames.0.lock().unwrap(),
            ["reject 2", "ack<=3", "requeue 4"],
            "the flush acks 1 and 3 in one frame after the reject of 2; the dropped settler of 4 requeues it"
        );
    }

    #[test]
    fn at_prefetch_1_each_settlement_goes_out_alone_at_once() {
        let frames = std::sync::Arc::new(Frames::default());
        let acks = std::sync::Arc::new(TagAcks::new(frames.clone(), 1));
        // Three outstanding at once (a broker that ignored the prefetch, or settlements of
        // an earlier window): no frame may settle more than its own delivery.
        acks.batch_taken(1..=3);
        let settlers: Vec<Settler> = (1..=3).map(|t| Settler::new(acks.clone(), t)).collect();
        let block = futures::executor::block_on;
        block(settlers[1].settle(Settlement::Ack)).unwrap();
        assert_eq!(*frames.0.lock().unwrap(), ["ack 2"], "not held back");
        block(settlers[2].settle(Settlement::Requeue)).unwrap();
        acks.flush().unwrap();
        drop(settlers);
        assert_eq!(
            *frames.0.lock().unwrap(),
            ["ack 2", "requeue 3", "requeue 1"],
            "each delivery settled by a frame of its own; the dropped settler of 1 requeues it"
        );
        // The usual case: one outstanding delivery at a time.
        frames.0.lock().unwrap().clear();
        for (tag, how) in [(4, Settlement::Ack), (5, Settlement::Reject)] {
            acks.batch_taken([tag]);
            let settler = Settler::new(acks.clone(), tag);
            futures::executor::block_on(settler.settle(how)).unwrap();
        }
        assert_eq!(*frames.0.lock().unwrap(), ["ack 4", "reject 5"]);
    }

    #[test]
    fn a_failed_frame_is_the_settlement_s_error() {
        let frames = std::sync::Arc::new(Frames::default());
        let acks = TagAcks::new(frames, 10);
        acks.batch_taken([99]);
        let e = acks.apply(99, Settlement::Reject).unwrap_err();
        assert_eq!(e.kind(), binder_core::binder::BinderErrorKind::Closed);
    }
}
