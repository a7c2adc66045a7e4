//! A subscription over an AMQP consumer: deliveries taken from the client in batches, handed
//! out one by one without waiting, their acks coalesced until half the prefetch window is
//! ready or the subscription is about to wait (at prefetch 1, each sent alone at once).

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use binder_core::binder::{BinderFuture, BinderResult, Inbound, Settlement, Settler, Subscription};

use crate::recent::Recent;
use crate::settle::{AckChannel, TagAcks};

/// Deliveries taken from the client at once, at most.
pub const BATCH: usize = 256;

/// The binder's side of a [`BufferedSubscription`]: one AMQP consumer (`basic.consume`) of
/// lapin's, the engine's, or any other client's.
pub trait DeliverySource: fmt::Debug + Send + 'static {
    /// A delivery as the client hands it over.
    type Delivery: fmt::Debug + Send;
    /// The channel the consumer's deliveries are settled on.
    type Channel: AckChannel;

    /// The delivery's tag.
    fn tag(delivery: &Self::Delivery) -> u64;

    /// The runtime's view of a delivery, settled by `settler`; `recent` shares the route and
    /// the properties of consecutive deliveries that have the same.
    fn inbound(delivery: Self::Delivery, settler: Settler, recent: &mut Recent) -> Inbound;

    /// Waits for a delivery, then appends it and whatever else the client has already
    /// buffered, `max` in all at most; false once the consumer has ended (cancelled by the
    /// broker, its channel or connection lost). Cancel-safe: a dropped future loses no
    /// delivery.
    fn receive(
        &mut self,
        into: &mut VecDeque<Self::Delivery>,
        max: usize,
    ) -> impl Future<Output = bool> + Send;

    /// Appends the deliveries the client has already buffered, `max` at most, without
    /// waiting or asking the broker; returns how many. A client that cannot tell keeps
    /// this default (none): the subscription then waits through [`Self::receive`].
    fn try_receive(&mut self, into: &mut VecDeque<Self::Delivery>, max: usize) -> usize {
        let _ = (into, max);
        0
    }

    /// Cancels the consumer (`basic.cancel`) and waits for the broker's answer. With
    /// `auto_ack`, appends the deliveries the broker sent before the cancel took effect: it
    /// counts them consumed, so they are handed out rather than lost.
    fn cancel(
        &mut self,
        channel: &Self::Channel,
        auto_ack: bool,
        into: &mut VecDeque<Self::Delivery>,
    ) -> impl Future<Output = BinderResult<()>> + Send;
}

/// A [`Subscription`] over a [`DeliverySource`]: a delivery already taken, or already
/// buffered by the client, is handed out at once (no allocation, no wait); acks are held back
/// while more deliveries are at hand, up to half the prefetch window, and go out as one
/// `multiple` ack, at the latest before every wait for the broker (at prefetch 1 each ack goes
/// out alone, at once: see [`TagAcks`]). Deliveries taken but not
/// handed out go back to the queue (last first, so they keep their order) when the
/// subscription is cancelled or dropped, except in auto-ack mode, where the broker already
/// counts them consumed.
#[derive(Debug)]
pub struct BufferedSubscription<S: DeliverySource> {
    /// `None` once cancelled.
    source: Option<S>,
    ready: VecDeque<S::Delivery>,
    auto_ack: bool,
    acks: Arc<TagAcks<S::Channel>>,
    recent: Recent,
}

impl<S: DeliverySource> BufferedSubscription<S> {
    /// A subscription over `source`, settling on `acks` (unless `auto_ack`).
    pub fn new(source: S, acks: Arc<TagAcks<S::Channel>>, auto_ack: bool) -> Self {
        BufferedSubscription {
            source: Some(source),
            ready: VecDeque::new(),
            auto_ack,
            acks,
            recent: Recent::default(),
        }
    }

    fn inbound(&mut self, delivery: S::Delivery) -> Inbound {
        let settler = if self.auto_ack {
            Settler::already_settled()
        } else {
            Settler::new(self.acks.clone(), S::tag(&delivery))
        };
        S::inbound(delivery, settler, &mut self.recent)
    }

    /// Sends the held-back acks and, unless auto-ack, requeues the deliveries taken but not
    /// handed out.
    fn give_back_ready(&mut self) -> BinderResult<()> {
        if !self.auto_ack {
            for d in self.ready.drain(..).rev() {
                let _ = self.acks.apply(S::tag(&d), Settlement::Requeue);
            }
        }
        self.acks.flush()
    }

    /// Sends the acks held back, before waiting for the broker.
    fn flush_before_wait(&self) {
        if let Err(e) = self.acks.flush() {
            tracing::warn!(error = %e, "sending held-back acks failed; the broker will redeliver");
        }
    }

    /// Records a batch just taken.
    fn batch_taken(&self) {
        if !self.auto_ack {
            // The whole batch counts as outstanding from now on, and the acks held back stay
            // held (up to half the prefetch window): the runtime comes back for each of these
            // deliveries, and the subscription flushes before it waits.
            self.acks.batch_taken(self.ready.iter().map(S::tag));
        }
    }

    /// The first delivery of the next batch if the client already holds one, taken without
    /// waiting or sending the acks held back: at prefetch 1 the ack of a delivery usually
    /// brings the next one, and at a larger prefetch the broker has often sent more
    /// meanwhile; taking them here spares the boxed future of [`Self::refill`].
    fn take_buffered(&mut self) -> Option<Inbound> {
        let source = self.source.as_mut()?;
        if source.try_receive(&mut self.ready, BATCH) == 0 {
            return None;
        }
        self.batch_taken();
        let d = self.ready.pop_front()?;
        Some(self.inbound(d))
    }

    /// Waits for the next batch; false once the consumer has ended.
    async fn refill(&mut self) -> bool {
        let Some(source) = self.source.as_mut() else {
            return false;
        };
        if !source.receive(&mut self.ready, BATCH).await {
            return false;
        }
        self.batch_taken();
        true
    }
}

#[async_trait]
impl<S: DeliverySource> Subscription for BufferedSubscription<S> {
    fn next(&mut self) -> BinderFuture<'_, Option<Inbound>> {
        if let Some(d) = self.ready.pop_front() {
            return BinderFuture::ready(Some(self.inbound(d)));
        }
        // What the client already holds is taken without sending the acks held back: they
        // join the next batch's (up to half the prefetch window, see `AckCoalescer`).
        if let Some(inbound) = self.take_buffered() {
            return BinderFuture::ready(Some(inbound));
        }
        // About to wait for the broker: the acks held back go out first (the broker may be
        // waiting for them to send more), and what they brought at once (the engine hands
        // a consumer its next deliveries with the ack) is taken without a wait.
        self.flush_before_wait();
        if let Some(inbound) = self.take_buffered() {
            return BinderFuture::ready(Some(inbound));
        }
        BinderFuture::boxed(async move {
            if !self.refill().await {
                return None;
            }
            let d = self.ready.pop_front()?;
            Some(self.inbound(d))
        })
    }

    async fn flush(&mut self) -> BinderResult<()> {
        self.acks.flush()
    }

    async fn cancel(&mut self) -> BinderResult<()> {
        self.give_back_ready()?;
        let Some(mut source) = self.source.take() else {
            return Ok(());
        };
        // Taken even when the cancel fails (a closed channel): they are no less received.
        source
            .cancel(self.acks.channel(), self.auto_ack, &mut self.ready)
            .await
    }
}

/// Dropped without `cancel` (its task aborted, its owner panicked): the acks and requeues go
/// out as in `cancel`, then the source is dropped (a binder's source cancels its consumer
/// when dropped).
impl<S: DeliverySource> Drop for BufferedSubscription<S> {
    fn drop(&mut self) {
        if self.source.is_some() {
            let _ = self.give_back_ready();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use binder_core::Message;
    use binder_core::binder::BinderError;
    use futures::FutureExt;

    use super::*;

    /// Records the frames sent, in order.
    #[derive(Debug, Default, Clone)]
    struct Frames(Arc<Mutex<Vec<String>>>);

    impl Frames {
        fn push(&self, frame: String) -> BinderResult<()> {
            self.0.lock().unwrap().push(frame);
            Ok(())
        }
        fn taken(&self) -> Vec<String> {
            std::mem::take(&mut *self.0.lock().unwrap())
        }
    }

    impl AckChannel for Frames {
        fn ack(&self, tag: u64) -> BinderResult<()> {
            self.push(format!("ack {tag}"))
        }
        fn ack_up_to(&self, tag: u64) -> BinderResult<()> {
            self.push(format!("ack<={tag}"))
        }
        fn requeue(&self, tag: u64) -> BinderResult<()> {
            self.push(format!("requeue {tag}"))
        }
        fn reject(&self, tag: u64) -> BinderResult<()> {
            self.push(format!("reject {tag}"))
        }
    }

    /// A test delivery: its tag is its payload.
    fn numbered(tag: u64, settler: Settler) -> Inbound {
        Inbound::owned(Message::new(tag.to_string()), "x", "k", false, settler)
    }

    /// A consumer with five deliveries buffered (tags 1 to 5), and one more to come after a
    /// cancel (an auto-ack delivery already on its way).
    #[derive(Debug)]
    struct Five {
        buffered: VecDeque<u64>,
        in_flight: Option<u64>,
    }

    impl DeliverySource for Five {
        type Delivery = u64;
        type Channel = Frames;
        fn tag(d: &u64) -> u64 {
            *d
        }
        fn inbound(d: u64, settler: Settler, _: &mut Recent) -> Inbound {
            numbered(d, settler)
        }
        async fn receive(&mut self, into: &mut VecDeque<u64>, max: usize) -> bool {
            let n = self.buffered.len().min(max);
            into.extend(self.buffered.drain(..n));
            n > 0
        }
        async fn cancel(
            &mut self,
            channel: &Frames,
            auto_ack: bool,
            into: &mut VecDeque<u64>,
        ) -> BinderResult<()> {
            channel.push("cancel".into())?;
            if auto_ack {
                into.extend(self.in_flight.take());
            }
            Err(BinderError::closed("the test's channel"))
        }
    }

    fn subscription(auto_ack: bool) -> (BufferedSubscription<Five>, Frames) {
        let frames = Frames::default();
        let source = Five {
            buffered: (1..=5).collect(),
            in_flight: Some(6),
        };
        let acks = Arc::new(TagAcks::new(frames.clone(), 100));
        (BufferedSubscription::new(source, acks, auto_ack), frames)
    }

    #[tokio::test]
    async fn a_cancel_requeues_what_was_not_handed_out_last_first_after_the_held_acks() {
        let (mut sub, frames) = subscription(false);
        let one = sub.next().await.unwrap();
        let two = sub.next().await.unwrap();
        one.settler.settle(Settlement::Ack).await.unwrap();
        assert!(frames.taken().is_empty(), "the ack waits for the batch");
        let e = sub.cancel().await.unwrap_err();
        assert_eq!(e.kind(), binder_core::binder::BinderErrorKind::Closed);
        assert_eq!(
            frames.taken(),
            ["requeue 5", "requeue 4", "requeue 3", "ack<=1", "cancel"]
        );
        assert!(sub.next().await.is_none(), "nothing after a cancel");
        drop(two);
        assert_eq!(
            frames.taken(),
            ["requeue 2"],
            "a dropped delivery goes back"
        );
    }

    #[tokio::test]
    async fn auto_ack_deliveries_are_handed_out_even_after_a_cancel() {
        let (mut sub, frames) = subscription(true);
        assert_eq!(
            sub.next().await.unwrap().settler.tag(),
            0,
            "already settled"
        );
        let _ = sub.cancel().await;
        let mut rest = Vec::new();
        while let Some(d) = sub.next().await {
            rest.push(String::from_utf8(d.message().payload.to_vec()).unwrap());
        }
        assert_eq!(rest, ["2", "3", "4", "5", "6"]);
        assert_eq!(
            frames.taken(),
            ["cancel"],
            "no ack, no requeue in auto-ack mode"
        );
    }

    /// A consumer whose client holds what the test put in `buffered`, handed over without
    /// waiting; once it is empty, a wait never ends, or, unless `may_wait`, any wait for the
    /// broker fails the test.
    #[derive(Debug)]
    struct Client<C> {
        buffered: Arc<Mutex<VecDeque<u64>>>,
        may_wait: bool,
        channel: std::marker::PhantomData<fn() -> C>,
    }

    impl<C> Client<C> {
        fn new(buffered: Arc<Mutex<VecDeque<u64>>>, may_wait: bool) -> Self {
            Client {
                buffered,
                may_wait,
                channel: std::marker::PhantomData,
            }
        }
    }

    impl<C: AckChannel> DeliverySource for Client<C> {
        type Delivery = u64;
        type Channel = C;
        fn tag(d: &u64) -> u64 {
            *d
        }
        fn inbound(d: u64, settler: Settler, _: &mut Recent) -> Inbound {
            numbered(d, settler)
        }
        async fn receive(&mut self, into: &mut VecDeque<u64>, max: usize) -> bool {
            assert!(self.may_wait, "the subscription waited for the broker");
            if self.try_receive(into, max) == 0 {
                // The test never sends more once it waits.
                std::future::pending::<()>().await;
            }
            true
        }
        fn try_receive(&mut self, into: &mut VecDeque<u64>, max: usize) -> usize {
            let mut buffered = self.buffered.lock().unwrap();
            let n = buffered.len().min(max);
            into.extend(buffered.drain(..n));
            n
        }
        async fn cancel(&mut self, _: &C, _: bool, _: &mut VecDeque<u64>) -> BinderResult<()> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn acks_join_the_next_batch_until_the_subscription_would_wait() {
        let frames = Frames::default();
        let buffered = Arc::new(Mutex::new(VecDeque::from([1, 2])));
        let acks = Arc::new(TagAcks::new(frames.clone(), 10));
        let mut sub = BufferedSubscription::new(Client::new(buffered.clone(), true), acks, false);
        for _ in 0..2 {
            let d = sub.next().await.unwrap();
            d.settler.settle(Settlement::Ack).await.unwrap();
        }
        buffered.lock().unwrap().extend([3, 4]);
        let three = sub.next().await.unwrap();
        assert!(
            frames.taken().is_empty(),
            "the client had more: 1 and 2 stay held back"
        );
        three.settler.settle(Settlement::Ack).await.unwrap();
        let four = sub.next().await.unwrap();
        four.settler.settle(Settlement::Ack).await.unwrap();
        assert!(frames.taken().is_empty(), "a batch (5) is not complete");
        assert!(
            sub.next().now_or_never().is_none(),
            "nothing buffered: it waits"
        );
        assert_eq!(frames.taken(), ["ack<=4"], "after acking what it held");
    }

    /// A channel whose `multiple` ack has the broker hand the consumer its next delivery at
    /// once, as the engine does under the lock it settles with.
    #[derive(Debug, Clone, Default)]
    struct HandsOver {
        frames: Frames,
        client: Arc<Mutex<VecDeque<u64>>>,
    }

    impl AckChannel for HandsOver {
        fn ack(&self, tag: u64) -> BinderResult<()> {
            self.client.lock().unwrap().push_back(tag + 1);
            self.frames.push(format!("ack {tag}"))
        }
        fn ack_up_to(&self, tag: u64) -> BinderResult<()> {
            self.client.lock().unwrap().push_back(tag + 1);
            self.frames.push(format!("ack<={tag}"))
        }
        fn requeue(&self, tag: u64) -> BinderResult<()> {
            self.frames.push(format!("requeue {tag}"))
        }
        fn reject(&self, tag: u64) -> BinderResult<()> {
            self.frames.push(format!("reject {tag}"))
        }
    }

    #[tokio::test]
    async fn what_the_held_acks_bring_is_taken_without_a_wait() {
        let channel = HandsOver::default();
        channel.client.lock().unwrap().push_back(1);
        let source = Client::new(channel.client.clone(), false);
        let acks = Arc::new(TagAcks::new(channel.clone(), 10));
        let mut sub = BufferedSubscription::new(source, acks, false);
        for tag in 1..=3 {
            let d = sub.next().await.unwrap();
            assert_eq!(d.settler.tag(), tag);
            d.settler.settle(Settlement::Ack).await.unwrap();
        }
        assert_eq!(
            channel.frames.taken(),
            ["ack<=1", "ack<=2"],
            "each ack went out before a wait, and brought the next delivery"
        );
    }

    #[tokio::test]
    async fn at_prefetch_1_each_ack_goes_out_alone_and_brings_the_next_delivery() {
        let channel = HandsOver::default();
        channel.client.lock().unwrap().push_back(1);
        let source = Client::new(channel.client.clone(), false);
        let acks = Arc::new(TagAcks::new(channel.clone(), 1));
        let mut sub = BufferedSubscription::new(source, acks, false);
        for tag in 1..=3 {
            let d = sub
                .next()
                .now_or_never()
                .expect("the ack brought it: taken without a wait")
                .unwrap();
            assert_eq!(d.settler.tag(), tag);
            d.settler.settle(Settlement::Ack).await.unwrap();
            assert_eq!(
                channel.frames.taken(),
                [format!("ack {tag}")],
                "sent at once, for this delivery alone"
            );
        }
        let four = sub.next().now_or_never().unwrap().unwrap();
        four.settler.settle(Settlement::Reject).await.unwrap();
        assert_eq!(channel.frames.taken(), ["reject 4"]);
    }

    #[tokio::test]
    async fn a_dropped_subscription_gives_back_what_it_held() {
        let (mut sub, frames) = subscription(false);
        let one = sub.next().await.unwrap();
        drop(sub);
        assert_eq!(
            frames.taken(),
            ["requeue 5", "requeue 4", "requeue 3", "requeue 2"]
        );
        drop(one);
        assert_eq!(frames.taken(), ["requeue 1"]);
    }
}
