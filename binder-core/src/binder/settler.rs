//! Settling one delivery: the [`Settler`] every delivery carries, and the [`SettleByTag`]
//! side a binder implements once per subscription.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{BinderError, BinderFuture, BinderResult, Settlement};

/// A subscription's settlement of its deliveries by delivery tag; implemented by each binder
/// and reached through each delivery's [`Settler`], so a delivery costs no allocation of its
/// own for its settlement.
pub trait SettleByTag: fmt::Debug + Send + Sync {
    /// Applies `settlement` to delivery `tag`. A binder may hold acks back to send several
    /// as one (`multiple`); it sends them at the latest when its subscription next waits for
    /// a delivery, on [`Subscription::flush`](super::Subscription::flush) and on
    /// [`Subscription::cancel`](super::Subscription::cancel). Requeues and rejects are never
    /// held back. [`Settler`] calls it at most once per delivery.
    ///
    /// The settlement takes effect when this is called (queued for the broker, or held
    /// back as above); the returned future only reports how it went, and may be dropped
    /// unpolled. [`Settler`] counts the delivery as settled from the call on, so a binder
    /// that waited for the first poll to act could leave it neither settled nor released.
    fn settle_tag(&self, tag: u64, settlement: Settlement) -> BinderFuture<'_, BinderResult<()>>;

    /// Puts delivery `tag`, never settled and now out of reach (its [`Settler`] was
    /// dropped), back in its queue at once, without waiting.
    fn release_tag(&self, tag: u64);
}

/// Settles one delivery.
///
/// A delivery is settled once: a second settlement is refused with an error, without
/// touching the broker. A delivery whose settler is dropped unsettled (a handler that
/// panicked, a `next` future dropped before it was polled, work aborted at shutdown) goes
/// back to its queue at once, as if requeued, so it can never hold up the acks of later
/// deliveries.
///
/// ```
/// use binder_core::binder::{Settlement, Settler};
///
/// // An auto-ack delivery: the broker forgot it when it sent it.
/// let settler = Settler::already_settled();
/// assert!(futures::executor::block_on(settler.settle(Settlement::Ack)).is_ok());
/// ```
pub struct Settler {
    /// `None`: the broker already forgot the delivery (auto-ack).
    target: Option<Arc<dyn SettleByTag>>,
    tag: u64,
    settled: AtomicBool,
}

impl Settler {
    /// The settler of delivery `tag` of the subscription behind `target`.
    pub fn new(target: Arc<dyn SettleByTag>, tag: u64) -> Self {
        Settler {
            target: Some(target),
            tag,
            settled: AtomicBool::new(false),
        }
    }

    /// The settler of a delivery the broker already forgot (auto-ack subscriptions):
    /// settling it does nothing, as often as it is done.
    pub fn already_settled() -> Self {
        Settler {
            target: None,
            tag: 0,
            settled: AtomicBool::new(true),
        }
    }

    /// The delivery tag (0 for an auto-ack delivery).
    pub fn tag(&self) -> u64 {
        self.tag
    }

    /// Applies the settlement (see [`SettleByTag::settle_tag`] for when acks go out).
    pub fn settle(&self, settlement: Settlement) -> BinderFuture<'_, BinderResult<()>> {
        let Some(target) = &self.target else {
            return BinderFuture::ready(Ok(()));
        };
        if self.settled.swap(true, Ordering::AcqRel) {
            return BinderFuture::ready(Err(BinderError::already_settled(self.tag)));
        }
        target.settle_tag(self.tag, settlement)
    }
}

impl fmt::Debug for Settler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settler")
            .field("tag", &self.tag)
            .field("settled", &self.settled.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Drop for Settler {
    fn drop(&mut self) {
        if let Some(target) = &self.target
            && !*self.settled.get_mut()
        {
            target.release_tag(self.tag);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// Records what reaches the binder.
    #[derive(Debug, Default)]
    struct Recorder(Mutex<Vec<(u64, Option<Settlement>)>>);

    impl SettleByTag for Recorder {
        fn settle_tag(&self, tag: u64, s: Settlement) -> BinderFuture<'_, BinderResult<()>> {
            self.0.lock().unwrap().push((tag, Some(s)));
            BinderFuture::ready(Ok(()))
        }

        fn release_tag(&self, tag: u64) {
            self.0.lock().unwrap().push((tag, None));
        }
    }

    fn block_on<T>(f: BinderFuture<'_, T>) -> T {
        futures::executor::block_on(f)
    }

    #[test]
    fn a_delivery_is_settled_once_and_a_dropped_one_is_released() {
        let recorder = Arc::new(Recorder::default());
        let first = Settler::new(recorder.clone(), 1);
        block_on(first.settle(Settlement::Ack)).unwrap();
        let again = block_on(first.settle(Settlement::Reject)).unwrap_err();
        assert!(again.to_string().contains("already settled"), "{again}");
        drop(first);
        drop(Settler::new(recorder.clone(), 2));
        assert_eq!(
            *recorder.0.lock().unwrap(),
            vec![(1, Some(Settlement::Ack)), (2, None)],
            "the second settlement never reached the binder; the settled one is not released"
        );
    }

    #[test]
    fn an_auto_ack_delivery_settles_as_a_no_op() {
        let settler = Settler::already_settled();
        block_on(settler.settle(Settlement::Ack)).unwrap();
        block_on(settler.settle(Settlement::Requeue)).unwrap();
    }
}
