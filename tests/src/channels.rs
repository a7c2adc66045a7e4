//! A binder with no exchanges, queues or routing keys, over tokio primitives in memory: it
//! shows that the binder SPI asks nothing AMQP-shaped of a middleware. Each destination holds
//! one queue per consumer group (an anonymous consumer gets a group of its own); a publish
//! puts the message in every group's queue, the members of a group compete for it. It has
//! no partitions (a partitioned binding is refused) and no routing; every binding is acknowledged `AUTO`, and a message the application
//! gives up on is rejected and dropped, with the runtime's warning (it has no dead-letter
//! destination). The kit runs every case that needs
//! nothing more against it ([`crate::targets::Channels`]).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use binder_core::binder::{
    Backlog, Binder, BinderError, BinderErrorKind, BinderFuture, BinderResult, BoundConsumer,
    FailedDelivery, FailureAction, GaveUp, Inbound, Producer, Published, SettleByTag, Settlement,
    Settler, Subscription,
};
use binder_core::config::{AcknowledgeMode, BindingConfig};
use binder_core::message::Message;
use tokio::sync::Notify;

/// The channel binder: destinations in this value's memory (clones share them).
#[derive(Debug, Clone, Default)]
pub struct ChannelBinder {
    destinations: Arc<Mutex<HashMap<String, Destination>>>,
    /// Every group queue by the source name its consumers give it.
    sources: Arc<Mutex<HashMap<String, Arc<GroupQueue>>>>,
}

/// One destination: its groups' queues.
#[derive(Debug, Default)]
struct Destination {
    groups: HashMap<String, Arc<GroupQueue>>,
}

/// A group's queue: ready messages, and those delivered and not settled.
#[derive(Debug, Default)]
struct GroupQueue {
    state: Mutex<QueueState>,
    arrived: Notify,
    /// Subscriptions open on it.
    subscribers: AtomicU32,
}

#[derive(Debug, Default)]
struct QueueState {
    /// Ready messages, each with whether it was delivered before.
    ready: VecDeque<(Arc<Published>, bool)>,
    unsettled: HashMap<u64, Arc<Published>>,
    next_tag: u64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl GroupQueue {
    fn push(&self, record: Arc<Published>, redelivered: bool, front: bool) {
        let mut state = lock(&self.state);
        if front {
            state.ready.push_front((record, redelivered));
        } else {
            state.ready.push_back((record, redelivered));
        }
        drop(state);
        self.arrived.notify_one();
    }

    /// The next ready message, now counted unsettled under a new tag.
    fn take(&self) -> Option<(u64, Arc<Published>, bool)> {
        let mut state = lock(&self.state);
        let (record, redelivered) = state.ready.pop_front()?;
        state.next_tag += 1;
        let tag = state.next_tag;
        state.unsettled.insert(tag, record.clone());
        Some((tag, record, redelivered))
    }
}

impl GroupQueue {
    /// Settles delivery `tag`: an ack or a reject forgets it (there is no dead-letter
    /// destination), a requeue puts it back at the head.
    fn settle(&self, tag: u64, settlement: Settlement) {
        let Some(record) = lock(&self.state).unsettled.remove(&tag) else {
            return;
        };
        match settlement {
            Settlement::Ack => {}
            Settlement::Requeue => self.push(record, true, true),
            // No dead-letter destination: a rejected message is gone.
            Settlement::Reject => drop(record),
        }
    }
}

impl SettleByTag for GroupQueue {
    fn settle_tag(&self, tag: u64, settlement: Settlement) -> BinderFuture<'_, BinderResult<()>> {
        self.settle(tag, settlement);
        BinderFuture::ready(Ok(()))
    }

    fn release_tag(&self, tag: u64) {
        self.settle(tag, Settlement::Requeue);
    }
}

impl ChannelBinder {
    /// A binder with no destinations yet.
    pub fn new() -> Self {
        ChannelBinder::default()
    }

    /// The queue of `group` on `destination`, made if it is not there.
    fn group(&self, destination: &str, group: &str) -> Arc<GroupQueue> {
        let queue = lock(&self.destinations)
            .entry(destination.to_owned())
            .or_default()
            .groups
            .entry(group.to_owned())
            .or_default()
            .clone();
        lock(&self.sources)
            .entry(format!("{destination}.{group}"))
            .or_insert_with(|| queue.clone());
        queue
    }

    /// Forgets an anonymous consumer's group, as an auto-delete queue goes with its consumer.
    fn drop_group(&self, destination: &str, group: &str) {
        if let Some(d) = lock(&self.destinations).get_mut(destination) {
            d.groups.remove(group);
        }
        lock(&self.sources).remove(&format!("{destination}.{group}"));
    }
}

#[async_trait]
impl Binder for ChannelBinder {
    fn binder_type(&self) -> &str {
        "channels"
    }

    fn describe(&self) -> String {
        "tokio channels in this process (no exchanges, no queues)".to_owned()
    }

    async fn bind_consumer(&self, binding: &BindingConfig) -> BinderResult<Box<dyn BoundConsumer>> {
        if binding.consumer.partitioned {
            return Err(no_partitions(binding));
        }
        static ANONYMOUS: AtomicU64 = AtomicU64::new(0);
        let (group, anonymous) = match &binding.group {
            Some(g) => (g.clone(), false),
            None => (
                format!("anonymous.{}", ANONYMOUS.fetch_add(1, Ordering::Relaxed)),
                true,
            ),
        };
        Ok(Box::new(ChannelConsumer {
            sources: vec![format!("{}.{group}", binding.destination)],
            queue: self.group(&binding.destination, &group),
            anonymous: anonymous.then(|| (self.clone(), binding.destination.clone(), group)),
        }))
    }

    async fn bind_producer(&self, binding: &BindingConfig) -> BinderResult<Box<dyn Producer>> {
        if binding.producer.is_partitioned() {
            return Err(no_partitions(binding));
        }
        for group in &binding.producer.required_groups {
            self.group(&binding.destination, group);
        }
        Ok(Box::new(ChannelProducer {
            destination: binding.destination.clone(),
            destinations: self.destinations.clone(),
        }))
    }

    async fn backlog(&self, source: &str) -> BinderResult<Backlog> {
        let queue = lock(&self.sources)
            .get(source)
            .cloned()
            .ok_or_else(|| BinderError::not_found(format!("source `{source}`")))?;
        let messages = lock(&queue.state).ready.len() as u32;
        Ok(Backlog {
            messages,
            consumers: queue.subscribers.load(Ordering::Relaxed),
        })
    }

    async fn close(&self) {}
}

fn no_partitions(binding: &BindingConfig) -> BinderError {
    BinderError::new(
        BinderErrorKind::Unsupported,
        format!(
            "binding `{}`: the channels binder has no partitions",
            binding.name
        ),
    )
}

/// Puts each message in every group's queue of its destination.
#[derive(Debug)]
struct ChannelProducer {
    destination: String,
    destinations: Arc<Mutex<HashMap<String, Destination>>>,
}

impl Producer for ChannelProducer {
    fn destination(&self) -> &str {
        &self.destination
    }

    fn publish<'a>(
        &'a self,
        message: Message,
        _partition: Option<u32>,
    ) -> BinderFuture<'a, BinderResult<()>> {
        // Partitioned producers are refused when bound, so `_partition` is always `None`.
        let record = Arc::new(Published::new(
            self.destination.as_str(),
            self.destination.as_str(),
            message,
        ));
        let queues: Vec<Arc<GroupQueue>> = lock(&self.destinations)
            .get(&self.destination)
            .map(|d| d.groups.values().cloned().collect())
            .unwrap_or_default();
        for queue in queues {
            queue.push(record.clone(), false, false);
        }
        BinderFuture::ready(Ok(()))
    }
}

/// A group's consumer.
#[derive(Debug)]
struct ChannelConsumer {
    sources: Vec<String>,
    queue: Arc<GroupQueue>,
    /// An anonymous consumer's group, removed with the consumer: the binder, the
    /// destination and the group.
    anonymous: Option<(ChannelBinder, String, String)>,
}

impl Drop for ChannelConsumer {
    fn drop(&mut self) {
        if let Some((binder, destination, group)) = &self.anonymous {
            binder.drop_group(destination, group);
        }
    }
}

#[async_trait]
impl BoundConsumer for ChannelConsumer {
    fn sources(&self) -> &[String] {
        &self.sources
    }

    fn acknowledge_mode(&self) -> AcknowledgeMode {
        AcknowledgeMode::Auto
    }

    fn recovery_interval(&self) -> Duration {
        Duration::from_millis(100)
    }

    async fn subscribe(&self, _index: usize) -> BinderResult<Box<dyn Subscription>> {
        self.queue.subscribers.fetch_add(1, Ordering::Relaxed);
        Ok(Box::new(ChannelSubscription {
            queue: self.queue.clone(),
            cancelled: false,
        }))
    }

    async fn give_up(&self, settler: &Settler, _failed: &FailedDelivery<'_>) -> GaveUp {
        GaveUp::new(
            FailureAction::Rejected,
            Some(Settlement::Reject),
            settler.settle(Settlement::Reject).await,
            "message rejected and dropped: this binder has no dead-letter destination",
        )
    }
}

/// One member of a group, competing with the others for the group's messages.
#[derive(Debug)]
struct ChannelSubscription {
    queue: Arc<GroupQueue>,
    cancelled: bool,
}

/// A subscription dropped without a cancel stops counting too.
impl Drop for ChannelSubscription {
    fn drop(&mut self) {
        if !self.cancelled {
            self.queue.subscribers.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl ChannelSubscription {
    fn inbound(&self, (tag, content, redelivered): (u64, Arc<Published>, bool)) -> Inbound {
        Inbound {
            content,
            redelivered,
            settler: Settler::new(self.queue.clone(), tag),
        }
    }
}

#[async_trait]
impl Subscription for ChannelSubscription {
    fn next(&mut self) -> BinderFuture<'_, Option<Inbound>> {
        if self.cancelled {
            return BinderFuture::ready(None);
        }
        if let Some(taken) = self.queue.take() {
            return BinderFuture::ready(Some(self.inbound(taken)));
        }
        BinderFuture::boxed(async move {
            loop {
                // Registered before looking, so a push in between is not missed.
                let arrived = self.queue.arrived.notified();
                tokio::pin!(arrived);
                arrived.as_mut().enable();
                if let Some(taken) = self.queue.take() {
                    return Some(self.inbound(taken));
                }
                arrived.await;
            }
        })
    }

    async fn cancel(&mut self) -> BinderResult<()> {
        if !std::mem::replace(&mut self.cancelled, true) {
            self.queue.subscribers.fetch_sub(1, Ordering::Relaxed);
        }
        // Another member may be waiting for what this one would have taken.
        self.queue.arrived.notify_one();
        Ok(())
    }
}
