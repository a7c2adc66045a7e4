//! The engine's handles: [`Broker`], [`Connection`], [`Channel`], [`Consumer`].
//!
//! They mirror AMQP 0-9-1 (connections own channels; channels carry delivery tags, consumer
//! tags, `basic.qos`, confirms and transactions) so that a wire front end can drive them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::envelope::{Envelope, Native};
use crate::field::FieldTable;
use crate::inspect::{
    BindingInfo, ChannelInfo, ConsumerInfo, ExchangeInfo, PeekedMessage, QueueInfo, Redrive, Totals,
};
use crate::policy::{PolicyDef, PolicyKind};
use crate::store::{Durability, MemoryStore, MessageStore, Removal, StoreError};
use tokio::sync::Notify;

use super::error::{AmqpError, AmqpResult};
use super::events::{self, ChannelEvents};
use super::inbox::Inbox;
use super::state::{Settle, State};
use super::types::{
    BrokerConfig, ConsumeOptions, Delivery, ExchangeKind, ExchangeOptions, PublishOptions,
    PublishOutcome, QueueDeclareOk, QueueOptions,
};

#[derive(Debug)]
struct Shared<E: Envelope> {
    state: Mutex<State<E>>,
    /// Publishers are blocked by the memory or disk alarm.
    blocked: AtomicBool,
    unblocked: Notify,
    /// Wakes the timer task when a new deadline may be earlier.
    timer: Arc<Notify>,
    timer_started: AtomicBool,
    /// The route a message is sealed with before the engine sets its real one (one shared
    /// value: sealing allocates nothing but the record).
    unrouted: E::Route,
    /// The message store, also held by the state: asked of its failure without the lock.
    store: Arc<dyn MessageStore>,
}

impl<E: Envelope> Shared<E> {
    fn lock(&self) -> MutexGuard<'_, State<E>> {
        // A panic while holding the lock leaves consistent state (every operation validates
        // before it mutates), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs an operation and then the bookkeeping every operation needs: the follow-up work
    /// it left (dead letters, dispatch of the queues it made dispatchable: a publish, an ack,
    /// a cancel, a redrive, a consumer's park), timer wake-ups and the memory alarm.
    fn with<T>(&self, op: impl FnOnce(&mut State<E>) -> T) -> T {
        let mut state = self.lock();
        let out = op(&mut state);
        state.settle();
        self.memory_alarm(&mut state);
        let after = state.take_after_lock();
        drop(state);
        // The timer task and consumers are woken, and settled messages freed, outside the
        // lock: a wake-up can be a system call, and nobody should wait on the broker for it.
        if after.wake_timer {
            self.timer.notify_one();
        }
        for waker in after.wakes {
            waker.wake();
        }
        drop(after.garbage);
        out
    }

    /// Recomputes the memory alarm (with its hysteresis) and, when whether publishers are
    /// blocked changed (by it or by the disk alarm), tells every channel and wakes the
    /// publishers waiting.
    fn memory_alarm(&self, state: &mut State<E>) {
        let used = state.memory_used();
        // Without a watermark nothing holds publishers back (it may have just been lifted).
        let high = state.config.memory_high_watermark.unwrap_or(usize::MAX);
        if !state.memory_alarm() && used > high {
            state.set_memory_alarm(true);
        } else if state.memory_alarm()
            && (used as f64) <= high as f64 * state.config.memory_resume_ratio
        {
            state.set_memory_alarm(false);
        }
        let blocked = state.is_blocked();
        if blocked != self.blocked.load(Ordering::Acquire) {
            state.set_blocked(blocked);
            self.blocked.store(blocked, Ordering::Release);
            if !blocked {
                self.unblocked.notify_waiters();
            }
        }
    }

    fn channel_op<T>(
        &self,
        channel: u64,
        op: impl FnOnce(&mut State<E>) -> AmqpResult<T>,
    ) -> AmqpResult<T> {
        self.with(|state| state.on_channel(channel, op))
    }
}

/// The broker engine: exchanges, queues and consumers with RabbitMQ semantics, in process.
/// Cheap to clone; clones share one broker.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use stream_engine::*;
///
/// let broker: Broker = Broker::new();
/// let conn = broker.connect();
/// let ch = conn.open_channel().unwrap();
/// ch.queue_declare("jobs", QueueOptions::default(), Default::default()).unwrap();
/// let mut consumer = ch.basic_consume("jobs", ConsumeOptions::default()).unwrap();
/// ch.basic_publish("", "jobs", PublishOptions::default(), Message::new("hi")).await.unwrap();
/// let delivery = consumer.recv().await.unwrap();
/// assert_eq!(&delivery.message().payload[..], b"hi");
/// ch.basic_ack(delivery.delivery_tag, false).unwrap();
/// # }
/// ```
#[derive(Debug)]
pub struct Broker<E: Envelope = Native> {
    shared: Arc<Shared<E>>,
}

impl<E: Envelope> Clone for Broker<E> {
    fn clone(&self) -> Self {
        Broker {
            shared: self.shared.clone(),
        }
    }
}

impl<E: Envelope> Broker<E> {
    /// Whether `other` is a handle on this same broker.
    pub fn same_as(&self, other: &Broker<E>) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// Whether the broker's message store keeps persistent messages (a broker made with
    /// [`Broker::with_store`] over a store that does; not the in-memory default).
    pub fn keeps_messages(&self) -> bool {
        self.shared.lock().keeps_messages()
    }

    /// Why the broker's message store stopped keeping messages, once it has (see
    /// [`MessageStore::failure`]): from then on persistent messages to durable queues are
    /// refused (541 `INTERNAL_ERROR`) until the broker is started again over a working
    /// store. `None` while it works, and for a broker that keeps nothing on disk.
    pub fn store_failure(&self) -> Option<String> {
        // Without the broker's lock, which a paged read holds while the disk is slow.
        self.shared.store.failure()
    }
}

impl<E: Envelope> Default for Broker<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E: Envelope> Broker<E> {
    /// A broker with default settings.
    pub fn new() -> Self {
        Self::with_config(BrokerConfig::default())
    }

    /// A broker with these settings, keeping nothing beyond its own life (its store is the
    /// [`MemoryStore`]).
    pub fn with_config(config: BrokerConfig) -> Self {
        Self::build(State::new(config, Arc::new(MemoryStore)))
    }

    /// A broker with these settings and this message store: the broker first rebuilds what
    /// the store [recovers](MessageStore::recover) (policies, durable exchanges, queues,
    /// bindings and their messages), then reports durable declarations, policies and
    /// persistent messages to it (see [`crate::store`] for the contract).
    ///
    /// Fails if the store cannot recover, or recovers declarations the broker refuses, or
    /// [`BrokerConfig::memory_paging_ratio`] is not above 0 and at most 1. A recovered
    /// policy the broker refuses does not fail the start: it is left unapplied (with a
    /// warning) and stays in the store until a policy of its name is set or cleared.
    pub fn with_store(config: BrokerConfig, store: impl MessageStore) -> Result<Self, StoreError> {
        crate::state::check_paging_ratio(&config)?;
        let recovered = store.recover()?;
        let mut state = State::new(config, Arc::new(store));
        state.recover(recovered).map_err(|e| StoreError::Corrupt {
            detail: format!("the broker refused what the store recovered: {e}"),
        })?;
        Ok(Self::build(state))
    }

    fn build(state: State<E>) -> Self {
        let store = state.store();
        Broker {
            shared: Arc::new(Shared {
                store,
                state: Mutex::new(state),
                blocked: AtomicBool::new(false),
                unblocked: Notify::new(),
                timer: Arc::new(Notify::new()),
                timer_started: AtomicBool::new(false),
                unrouted: E::new_route(Arc::from(""), Arc::from("")),
            }),
        }
    }

    /// Opens a connection. Must be called inside a tokio runtime (the broker's timer task,
    /// which expires messages and idle queues, starts with the first connection).
    pub fn connect(&self) -> Connection<E> {
        self.start_timer();
        let id = self.shared.with(State::open_connection);
        Connection {
            id,
            shared: self.shared.clone(),
        }
    }

    /// Whether publishers are currently blocked, by the memory alarm or the disk alarm.
    pub fn is_blocked(&self) -> bool {
        self.shared.blocked.load(Ordering::Acquire)
    }

    /// Why publishers are blocked, in RabbitMQ's words: `low on memory`, `low on disk`, or
    /// `low on memory & low on disk`; `None` when they are not.
    pub fn blocked_reason(&self) -> Option<String> {
        self.shared.lock().blocked_reason()
    }

    /// The resource alarms in effect (each blocks publishers). Lock-free while none is: a
    /// caller that polls (a health probe) does not wait on the broker's lock then.
    pub fn alarms(&self) -> crate::types::Alarms {
        if !self.is_blocked() {
            return crate::types::Alarms::default();
        }
        self.shared.lock().alarms()
    }

    /// Sets or clears the disk alarm: while it is on, publishers are blocked as by the
    /// memory alarm (consumers go on). Whoever watches the free space of the disk the
    /// message store writes to calls it (RabbitMQ's `disk_free_limit`; the engine itself
    /// does no I/O).
    ///
    /// ```
    /// use stream_engine::Broker;
    ///
    /// let broker: Broker = Broker::new();
    /// broker.set_disk_alarm(true);
    /// assert!(broker.is_blocked());
    /// assert!(broker.alarms().disk && !broker.alarms().memory);
    /// assert_eq!(broker.blocked_reason().as_deref(), Some("low on disk"));
    /// broker.set_disk_alarm(false);
    /// assert!(!broker.is_blocked());
    /// ```
    pub fn set_disk_alarm(&self, on: bool) {
        self.shared.with(|s| s.set_disk_alarm(on));
    }

    /// The memory counted against the high watermark: every message held in a queue,
    /// awaiting its acknowledgement or waiting in a no-ack consumer's inbox, at its estimated
    /// footprint (payload, headers, properties and the engine's bookkeeping; see
    /// [`BrokerConfig::memory_high_watermark`]).
    pub fn memory_used(&self) -> usize {
        self.shared.lock().memory_used()
    }

    /// The memory high watermark in bytes (`None`: no limit).
    pub fn memory_high_watermark(&self) -> Option<usize> {
        self.shared.lock().config.memory_high_watermark
    }

    /// Changes the memory high watermark; publishers are blocked at once if the memory
    /// used is above the new one, and released if it is below its resume level.
    pub fn set_memory_high_watermark(&self, watermark: Option<usize>) {
        self.shared
            .with(|s| s.config.memory_high_watermark = watermark);
    }

    /// Ready messages of a queue that are paged (kept as stubs, their bodies in the message
    /// store only; see [`BrokerConfig::memory_paging_ratio`]), if the queue exists.
    pub fn paged_messages(&self, queue: &str) -> Option<usize> {
        self.shared.lock().paging_counts(queue)
    }

    /// Paged messages read back from the message store so far, and read-backs that failed
    /// (each failure is reported: the consumers' channels, or the `basic.get`, get a 541,
    /// and the message stays in the store).
    pub fn pages_read(&self) -> (u64, u64) {
        self.shared.lock().paging_totals()
    }

    /// Ready messages and consumers of a queue, if it exists.
    pub fn queue_counts(&self, queue: &str) -> Option<(u32, u32)> {
        self.shared.lock().queue_counts(queue)
    }

    /// Deliveries from a queue not yet acknowledged (RabbitMQ's `messages_unacknowledged`),
    /// if the queue exists.
    pub fn queue_unacked(&self, queue: &str) -> Option<u32> {
        self.shared.lock().queue_unacked(queue)
    }

    /// Every queue with its counts, sorted by name (a snapshot; see [`crate::inspect`]).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use stream_engine::*;
    /// let broker: Broker = Broker::new();
    /// let conn = broker.connect();
    /// let ch = conn.open_channel().unwrap();
    /// ch.queue_declare("jobs", QueueOptions::default(), Default::default()).unwrap();
    /// ch.basic_publish("", "jobs", PublishOptions::default(), Message::new("hi")).await.unwrap();
    /// let jobs = &broker.queues()[0];
    /// assert_eq!((jobs.name.as_str(), jobs.messages_ready, jobs.published), ("jobs", 1, 1));
    /// # }
    /// ```
    pub fn queues(&self) -> Vec<QueueInfo> {
        self.shared.lock().queue_infos()
    }

    /// Adds a policy, or replaces the one of the same name (the answer says which: `true`
    /// when it replaced one), and applies it at once to the
    /// queues and exchanges it matches (see [`PolicyDef`] for what it may set and how it
    /// combines with their own arguments). A queue whose new limits are below its depth
    /// drops or dead-letters its oldest messages now (unless it rejects publishes on
    /// overflow); messages already queued keep their TTL. A durable broker keeps it across
    /// a restart. An invalid pattern, an unsupported key or a bad value is refused with
    /// `PRECONDITION_FAILED`, naming it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use stream_engine::*;
    /// let broker: Broker = Broker::new();
    /// let conn = broker.connect();
    /// let ch = conn.open_channel().unwrap();
    /// ch.queue_declare("orders", QueueOptions::default(), Default::default()).unwrap();
    /// for n in 0..5 {
    ///     ch.basic_publish("", "orders", PublishOptions::default(), Message::new(vec![n])).await.unwrap();
    /// }
    /// let mut definition = FieldTable::new();
    /// definition.insert("max-length", FieldValue::I64(2));
    /// broker.set_policy(PolicyDef {
    ///     name: "short".into(),
    ///     pattern: "^orders$".into(),
    ///     apply_to: PolicyTarget::Queues,
    ///     priority: 0,
    ///     definition,
    /// }).unwrap();
    /// assert_eq!(broker.queue_counts("orders"), Some((2, 0)));
    /// assert_eq!(broker.queues()[0].policy.as_deref(), Some("short"));
    /// # }
    /// ```
    pub fn set_policy(&self, policy: PolicyDef) -> AmqpResult<bool> {
        self.set_policy_of(PolicyKind::Policy, policy)
    }

    /// Removes a policy and applies what now applies instead; a `NOT_FOUND` error if there
    /// is none of that name.
    pub fn clear_policy(&self, name: &str) -> AmqpResult<()> {
        self.shared
            .with(|s| s.clear_policy(PolicyKind::Policy, name))
    }

    /// Every policy, by name.
    pub fn policies(&self) -> Vec<PolicyDef> {
        self.shared.lock().policy_defs(PolicyKind::Policy)
    }

    /// Adds an operator policy, or replaces the one of the same name (`true` when it
    /// replaced one), and applies it at once to the queues it matches, as
    /// [`set_policy`](Self::set_policy) does. Operator policies are a second set, named apart
    /// from policies, for an operator to cap what users ask for: they set only
    /// [`OPERATOR_POLICY_KEYS`](crate::OPERATOR_POLICY_KEYS), and a queue's limit is the
    /// smallest of its argument, its policy's and its operator policy's. Anything else is
    /// refused with `PRECONDITION_FAILED`, naming it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use stream_engine::*;
    /// let broker: Broker = Broker::new();
    /// let conn = broker.connect();
    /// let ch = conn.open_channel().unwrap();
    /// let mut own = FieldTable::new();
    /// own.insert("x-max-length", FieldValue::I64(1_000));
    /// ch.queue_declare("orders", QueueOptions::default(), own).unwrap();
    /// for n in 0..5 {
    ///     ch.basic_publish("", "orders", PublishOptions::default(), Message::new(vec![n])).await.unwrap();
    /// }
    /// let mut definition = FieldTable::new();
    /// definition.insert("max-length", FieldValue::I64(2));
    /// broker.set_operator_policy(PolicyDef {
    ///     name: "cap".into(),
    ///     pattern: ".*".into(),
    ///     apply_to: PolicyTarget::Queues,
    ///     priority: 0,
    ///     definition,
    /// }).unwrap();
    /// assert_eq!(broker.queue_counts("orders"), Some((2, 0)));
    /// assert_eq!(broker.queues()[0].operator_policy.as_deref(), Some("cap"));
    /// # }
    /// ```
    pub fn set_operator_policy(&self, policy: PolicyDef) -> AmqpResult<bool> {
        self.set_policy_of(PolicyKind::Operator, policy)
    }

    /// Removes an operator policy and applies what now applies instead; a `NOT_FOUND` error
    /// if there is none of that name.
    pub fn clear_operator_policy(&self, name: &str) -> AmqpResult<()> {
        self.shared
            .with(|s| s.clear_policy(PolicyKind::Operator, name))
    }

    /// Every operator policy, by name.
    pub fn operator_policies(&self) -> Vec<PolicyDef> {
        self.shared.lock().policy_defs(PolicyKind::Operator)
    }

    fn set_policy_of(&self, kind: PolicyKind, policy: PolicyDef) -> AmqpResult<bool> {
        // Validated and compiled before the lock: publishers do not wait for it.
        let policy = crate::policy::Policy::new(policy, kind)?;
        Ok(self.shared.with(|s| s.set_policy(policy)))
    }

    /// Every exchange, the default one (`""`) first, then by name.
    pub fn exchanges(&self) -> Vec<ExchangeInfo> {
        self.shared.lock().exchange_infos()
    }

    /// Every binding: the default exchange's implicit one per queue, then each exchange's.
    pub fn bindings(&self) -> Vec<BindingInfo> {
        self.shared.lock().binding_infos()
    }

    /// Every consumer, by queue then tag.
    pub fn consumers(&self) -> Vec<ConsumerInfo> {
        self.shared.lock().consumer_infos()
    }

    /// Every open channel, in the order they were opened: prefetch, unacknowledged
    /// deliveries, consumers, confirm and transaction state.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use stream_engine::*;
    ///
    /// let broker: Broker = Broker::new();
    /// let conn = broker.connect();
    /// let ch = conn.open_channel().unwrap();
    /// ch.basic_qos(10, false).unwrap();
    /// ch.confirm_select().unwrap();
    /// let info = broker.channels()[0];
    /// assert_eq!((info.id, info.prefetch_count, info.confirm), (ch.id(), 10, true));
    /// # }
    /// ```
    pub fn channels(&self) -> Vec<ChannelInfo> {
        self.shared.lock().channel_infos()
    }

    /// One open channel, by [`Channel::id`]; `None` once it is closed.
    pub fn channel(&self, id: u64) -> Option<ChannelInfo> {
        self.shared.lock().channel_info(id)
    }

    /// Broker-wide counts: publishes since start, connections, channels, consumers.
    pub fn totals(&self) -> Totals {
        self.shared.lock().totals()
    }

    /// Up to `max` ready messages of a queue in delivery order, seen in place: nothing is
    /// delivered or marked redelivered. A 404 error if the queue does not exist.
    pub fn peek(&self, queue: &str, max: usize) -> AmqpResult<Vec<PeekedMessage<E::Record>>> {
        self.shared.lock().peek(queue, max)
    }

    /// Removes the ready message at arrival position `seq` ([`PeekedMessage::seq`]) as if it
    /// were acknowledged (it is not dead-lettered); whether it was there. Exclusive queues
    /// are refused (405).
    pub fn discard(&self, queue: &str, seq: u64) -> AmqpResult<bool> {
        self.shared.with(|s| s.discard(queue, seq, Removal::Acked))
    }

    /// Moves the ready message at arrival position `seq` to `exchange` with `routing_key`
    /// (its properties, headers and payload unchanged; a dead-letter queue's message back to
    /// where it came from). The copy is published first, and the original removed only once
    /// the copy is in every queue it reached (and durable there, with a message store): if
    /// the copy goes nowhere, is refused, or the store fails, the original stays. With a
    /// store, a failure between the two leaves both (at least once, never lost). A queue
    /// deleted while the copy is made durable took the original with it; a queue declared
    /// since under the same name keeps its own messages.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use stream_engine::*;
    /// let broker: Broker = Broker::new();
    /// let conn = broker.connect();
    /// let ch = conn.open_channel().unwrap();
    /// for q in ["work", "work.dlq"] {
    ///     ch.queue_declare(q, QueueOptions::default(), Default::default()).unwrap();
    /// }
    /// ch.basic_publish("", "work.dlq", PublishOptions::default(), Message::new("x")).await.unwrap();
    /// let seq = broker.peek("work.dlq", 10).unwrap()[0].seq;
    /// assert_eq!(broker.redrive("work.dlq", seq, "", "work").await.unwrap(), Redrive::Moved(1));
    /// assert_eq!(broker.queue_counts("work"), Some((1, 0)));
    /// assert_eq!(broker.queue_counts("work.dlq"), Some((0, 0)));
    /// # }
    /// ```
    pub async fn redrive(
        &self,
        queue: &str,
        seq: u64,
        exchange: &str,
        routing_key: &str,
    ) -> AmqpResult<Redrive> {
        let (outcome, durability, source) = self.shared.with(|s| {
            let (outcome, source) = s.redrive_copy(queue, seq, exchange, routing_key)?;
            let durability = s.take_durability();
            if durability.is_none() && matches!(outcome, Redrive::Moved(_)) {
                // Nothing to wait for: the move is one atomic step.
                s.discard(queue, seq, Removal::Moved)?;
            }
            Ok((outcome, durability, source))
        })?;
        if let Some(durability) = durability {
            for point in durability {
                point.await.map_err(|e| AmqpError::store_failed(&e))?;
            }
            if matches!(outcome, Redrive::Moved(_)) {
                // The queue may have been deleted meanwhile, and a queue of the same name
                // declared since holds messages of its own.
                self.shared.with(|s| s.discard_moved(&source, seq))?;
            }
        }
        Ok(outcome)
    }

    /// Whether an exchange exists.
    pub fn exchange_exists(&self, name: &str) -> bool {
        self.shared.lock().exchange_exists(name)
    }

    /// The durable queues, exclusive ones apart, a message published to `exchange` could
    /// reach (through any of its bindings, exchange-to-exchange bindings and alternate
    /// exchanges), sorted: those a message store would keep its persistent messages in.
    pub fn durable_queues_reached(&self, exchange: &str) -> Vec<String> {
        self.shared.lock().durable_queues_reached(exchange)
    }

    fn start_timer(&self) {
        if self.shared.timer_started.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak: Weak<Shared<E>> = Arc::downgrade(&self.shared);
        let timer = self.shared.timer.clone();
        tokio::spawn(async move {
            loop {
                let woken = timer.notified();
                tokio::pin!(woken);
                // Register interest before running the timers, so a wake-up sent in between
                // is not lost.
                woken.as_mut().enable();
                let Some(shared) = weak.upgrade() else { return };
                let next = shared.with(|s| s.run_timers(tokio::time::Instant::now()));
                // The broker may be dropped while this task sleeps.
                drop(shared);
                match next {
                    Some(at) => {
                        tokio::select! {
                            _ = tokio::time::sleep_until(at) => {}
                            _ = &mut woken => {}
                        }
                    }
                    None => woken.await,
                }
            }
        });
    }
}

/// A connection: owns channels and exclusive queues. Closing (or dropping) it closes its
/// channels, requeues their unacknowledged deliveries and deletes its exclusive queues.
#[derive(Debug)]
pub struct Connection<E: Envelope = Native> {
    id: u64,
    shared: Arc<Shared<E>>,
}

impl<E: Envelope> Connection<E> {
    /// Opens a channel. Errors that name it (an acknowledgement timeout) name it by its
    /// [`Channel::id`].
    pub fn open_channel(&self) -> AmqpResult<Channel<E>> {
        self.open(None)
    }

    /// Opens a channel that errors name by `number`: the AMQP channel number a network
    /// server gave it, as in RabbitMQ's `delivery acknowledgement on channel 1 timed out`.
    pub fn open_numbered_channel(&self, number: u16) -> AmqpResult<Channel<E>> {
        self.open(Some(number))
    }

    fn open(&self, number: Option<u16>) -> AmqpResult<Channel<E>> {
        let (tx, rx) = events::queue();
        let id = self.shared.with(|s| s.open_channel(self.id, number, tx))?;
        Ok(Channel {
            id,
            shared: self.shared.clone(),
            events: Mutex::new(Some(rx)),
        })
    }

    /// Closes the connection.
    pub fn close(self) {
        drop(self);
    }
}

impl<E: Envelope> Drop for Connection<E> {
    fn drop(&mut self) {
        let id = self.id;
        self.shared.with(|s| s.close_connection(id));
    }
}

/// What [`Channel::try_basic_publish`] did.
#[derive(Debug)]
pub enum TryPublish<E: Envelope = Native> {
    /// Published (or refused with an error).
    Done(AmqpResult<PublishOutcome>),
    /// Publishers are blocked by the memory or disk alarm: the message, not published (boxed, so
    /// the common outcome stays small).
    Blocked(Box<E::Message>),
    /// Published; its confirm waits for the message store to make it durable.
    Pending(PendingConfirm),
}

/// A publish made: its outcome, or its confirm still waiting for the message store.
enum PublishedNow {
    Done(PublishOutcome),
    Pending(PendingConfirm),
}

/// A publish whose confirm waits for the message store's durability point (see
/// [`crate::store`]): [`PendingConfirm::wait`] resolves once every queue's copy is safe.
#[must_use = "the confirm is only known once the store's durability point is reached"]
pub struct PendingConfirm {
    outcome: PublishOutcome,
    durability: Vec<Durability>,
}

impl PendingConfirm {
    /// The confirm's sequence number (known before the wait: a failed wait is nacked with it).
    pub fn seq(&self) -> Option<u64> {
        self.outcome.seq
    }

    /// The outcome, once the store has made the message durable in every queue it reached;
    /// a store failure is an `INTERNAL_ERROR` (the channel stays open).
    pub async fn wait(self) -> AmqpResult<PublishOutcome> {
        for durability in self.durability {
            durability.await.map_err(|e| AmqpError::store_failed(&e))?;
        }
        Ok(self.outcome)
    }
}

impl std::fmt::Debug for PendingConfirm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingConfirm")
            .field("outcome", &self.outcome)
            .field("durability", &self.durability)
            .finish()
    }
}

/// A `basic.get` result.
#[derive(Debug, Clone)]
pub struct GetOk<E: Envelope = Native> {
    /// The message.
    pub delivery: Delivery<E>,
    /// Messages left in the queue.
    pub message_count: u32,
}

/// A channel. Channel-level errors (404, 405, 406, 403) close it, as in AMQP; later calls
/// return 504 CHANNEL_ERROR. Dropping it closes it and requeues its unacknowledged deliveries.
#[derive(Debug)]
pub struct Channel<E: Envelope = Native> {
    id: u64,
    shared: Arc<Shared<E>>,
    events: Mutex<Option<ChannelEvents<E>>>,
}

impl<E: Envelope> Channel<E> {
    /// The channel's id, unique in its broker: what [`Broker::channels`] and
    /// [`ConsumerInfo::channel`] name it by.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Takes the channel's event stream (once). Events wait until it is taken: a channel
    /// whose stream is never taken keeps them (a `basic.return` keeps its body); once the
    /// stream is dropped, new ones are thrown away. An owner that does not read them drops
    /// the stream at once.
    pub fn events(&self) -> Option<ChannelEvents<E>> {
        self.events.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// `exchange.declare`.
    pub fn exchange_declare(
        &self,
        name: &str,
        kind: ExchangeKind,
        options: ExchangeOptions,
        arguments: FieldTable,
    ) -> AmqpResult<()> {
        self.shared.channel_op(self.id, |s| {
            s.exchange_declare(name, kind, options, arguments)
        })
    }

    /// `exchange.delete`; deleting a missing exchange succeeds.
    pub fn exchange_delete(&self, name: &str, if_unused: bool) -> AmqpResult<()> {
        self.shared
            .channel_op(self.id, |s| s.exchange_delete(name, if_unused))
    }

    /// `exchange.bind`: routes what `source` matches with `key` on to `destination`.
    pub fn exchange_bind(
        &self,
        destination: &str,
        source: &str,
        key: &str,
        arguments: FieldTable,
    ) -> AmqpResult<()> {
        self.shared.channel_op(self.id, |s| {
            s.exchange_bind(destination, source, key, arguments)
        })
    }

    /// `exchange.unbind`.
    pub fn exchange_unbind(
        &self,
        destination: &str,
        source: &str,
        key: &str,
        arguments: &FieldTable,
    ) -> AmqpResult<()> {
        self.shared.channel_op(self.id, |s| {
            s.exchange_unbind(destination, source, key, arguments)
        })
    }

    /// `queue.declare`; an empty name asks for a server-named queue (`amq.gen-…`).
    pub fn queue_declare(
        &self,
        name: &str,
        options: QueueOptions,
        arguments: FieldTable,
    ) -> AmqpResult<QueueDeclareOk> {
        let id = self.id;
        self.shared
            .channel_op(id, |s| s.queue_declare(id, name, options, arguments))
    }

    /// `queue.bind`.
    pub fn queue_bind(
        &self,
        queue: &str,
        exchange: &str,
        key: &str,
        arguments: FieldTable,
    ) -> AmqpResult<()> {
        let id = self.id;
        self.shared
            .channel_op(id, |s| s.queue_bind(id, queue, exchange, key, arguments))
    }

    /// `queue.unbind`.
    pub fn queue_unbind(
        &self,
        queue: &str,
        exchange: &str,
        key: &str,
        arguments: &FieldTable,
    ) -> AmqpResult<()> {
        let id = self.id;
        self.shared
            .channel_op(id, |s| s.queue_unbind(id, queue, exchange, key, arguments))
    }

    /// `queue.purge`: drops ready messages, returns how many.
    pub fn queue_purge(&self, queue: &str) -> AmqpResult<u32> {
        let id = self.id;
        self.shared.channel_op(id, |s| s.queue_purge(id, queue))
    }

    /// `queue.delete`; returns the messages dropped. Deleting a missing queue succeeds.
    pub fn queue_delete(&self, queue: &str, if_unused: bool, if_empty: bool) -> AmqpResult<u32> {
        let id = self.id;
        self.shared
            .channel_op(id, |s| s.queue_delete(id, queue, if_unused, if_empty))
    }

    /// `basic.qos`: unacknowledged deliveries per new consumer (`global = false`) or shared by
    /// the channel (`global = true`); 0 is unlimited.
    pub fn basic_qos(&self, prefetch_count: u16, global: bool) -> AmqpResult<()> {
        let id = self.id;
        self.shared
            .channel_op(id, |s| s.basic_qos(id, prefetch_count, global))
    }

    /// `confirm.select`: publishes get sequence numbers and an ack or nack.
    pub fn confirm_select(&self) -> AmqpResult<()> {
        let id = self.id;
        self.shared.channel_op(id, |s| s.confirm_select(id))
    }

    /// `basic.publish`. Waits while an alarm (memory or disk) blocks publishers. In confirm mode the
    /// outcome carries the sequence number and whether the confirm is an ack.
    pub async fn basic_publish(
        &self,
        exchange: &str,
        routing_key: &str,
        options: PublishOptions,
        message: E::Message,
    ) -> AmqpResult<PublishOutcome> {
        // A publisher that never waits would keep the consumers it wakes from running on its
        // worker thread; spending tokio's cooperative budget lets them in.
        tokio::task::coop::consume_budget().await;
        let mut message = message;
        loop {
            match self.try_basic_publish(exchange, routing_key, options.clone(), message) {
                TryPublish::Done(outcome) => return outcome,
                TryPublish::Pending(pending) => return pending.wait().await,
                TryPublish::Blocked(back) => message = *back,
            }
            let unblocked = self.shared.unblocked.notified();
            tokio::pin!(unblocked);
            unblocked.as_mut().enable();
            if self.shared.blocked.load(Ordering::Acquire) {
                unblocked.await;
            }
        }
    }

    /// `basic.publish` without waiting: done at once, unless an alarm (memory or disk) blocks
    /// publishers, in which case the message is handed back untouched, or the message store
    /// has yet to make the message durable ([`TryPublish::Pending`]: the confirm waits for
    /// it). It spends no cooperative budget: a caller that loops on it should (see
    /// [`Channel::basic_publish`]).
    pub fn try_basic_publish(
        &self,
        exchange: &str,
        routing_key: &str,
        options: PublishOptions,
        message: E::Message,
    ) -> TryPublish<E> {
        if self.shared.blocked.load(Ordering::Acquire) {
            return TryPublish::Blocked(Box::new(message));
        }
        match self.publish_now(exchange, routing_key, options, message) {
            Ok(PublishedNow::Done(outcome)) => TryPublish::Done(Ok(outcome)),
            Ok(PublishedNow::Pending(pending)) => TryPublish::Pending(pending),
            Err(e) => TryPublish::Done(Err(e)),
        }
    }

    /// `basic.publish` even while an alarm (memory or disk) blocks publishers, for an
    /// operator's tool: a management API's publish or aliveness test, which RabbitMQ runs on
    /// direct connections its alarms do not block. Waits only for the message store, in
    /// confirm mode (as [`PendingConfirm::wait`]).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use stream_engine::*;
    /// let broker: Broker = Broker::new();
    /// let conn = broker.connect();
    /// let ch = conn.open_channel().unwrap();
    /// ch.queue_declare("probe", QueueOptions::default(), Default::default()).unwrap();
    /// broker.set_disk_alarm(true);
    /// let outcome = ch
    ///     .basic_publish_past_alarms("", "probe", PublishOptions::default(), Message::new("x"))
    ///     .await
    ///     .unwrap();
    /// assert!(matches!(outcome.status, PublishStatus::Routed(1)));
    /// # }
    /// ```
    pub async fn basic_publish_past_alarms(
        &self,
        exchange: &str,
        routing_key: &str,
        options: PublishOptions,
        message: E::Message,
    ) -> AmqpResult<PublishOutcome> {
        match self.publish_now(exchange, routing_key, options, message)? {
            PublishedNow::Done(outcome) => Ok(outcome),
            PublishedNow::Pending(pending) => pending.wait().await,
        }
    }

    /// Publishes at once, whatever the alarms say.
    fn publish_now(
        &self,
        exchange: &str,
        routing_key: &str,
        options: PublishOptions,
        message: E::Message,
    ) -> AmqpResult<PublishedNow> {
        // The message is moved into its shared allocation once, here; the engine sets its
        // route (shared with the channel's last publish when it has the same exchange and
        // routing key, as it usually has).
        // The placeholder first: the message then moves straight into its allocation
        // (evaluated after it, it would cost the message a copy of its own).
        let route = self.shared.unrouted.clone();
        let body = E::seal(message, route);
        let id = self.id;
        let published = self.shared.channel_op(id, |s| {
            let outcome = s.publish(id, exchange, routing_key, options.mandatory, body)?;
            Ok((outcome, s.take_durability()))
        });
        Ok(match published? {
            (outcome, None) => PublishedNow::Done(outcome),
            (outcome, Some(durability)) => PublishedNow::Pending(PendingConfirm {
                outcome,
                durability,
            }),
        })
    }

    /// `basic.consume`: deliveries arrive on the returned [`Consumer`].
    pub fn basic_consume(&self, queue: &str, options: ConsumeOptions) -> AmqpResult<Consumer<E>> {
        let channel = self.id;
        let (id, tag, inbox) = self
            .shared
            .channel_op(channel, |s| s.consume(channel, queue, options))?;
        Ok(Consumer {
            id,
            tag,
            channel,
            shared: self.shared.clone(),
            inbox,
            cancelled: false,
        })
    }

    /// `basic.cancel`. Unacknowledged deliveries of the consumer can still be settled.
    pub fn basic_cancel(&self, consumer_tag: &str) -> AmqpResult<()> {
        let id = self.id;
        self.shared.channel_op(id, |s| s.cancel(id, consumer_tag))
    }

    /// `basic.get`: one message, if any.
    pub fn basic_get(&self, queue: &str, no_ack: bool) -> AmqpResult<Option<GetOk<E>>> {
        let id = self.id;
        let got = self.shared.channel_op(id, |s| s.get(id, queue, no_ack))?;
        Ok(got.map(|(delivery, message_count)| GetOk {
            delivery,
            message_count,
        }))
    }

    /// `basic.ack`; `multiple` acknowledges every delivery up to the tag (0: all).
    pub fn basic_ack(&self, delivery_tag: u64, multiple: bool) -> AmqpResult<()> {
        self.settle(delivery_tag, multiple, Settle::Ack)
    }

    /// `basic.nack`: requeue, or dead-letter/drop when `requeue` is false.
    pub fn basic_nack(&self, delivery_tag: u64, multiple: bool, requeue: bool) -> AmqpResult<()> {
        let outcome = if requeue {
            Settle::Requeue
        } else {
            Settle::Discard
        };
        self.settle(delivery_tag, multiple, outcome)
    }

    /// `basic.reject`: one delivery.
    pub fn basic_reject(&self, delivery_tag: u64, requeue: bool) -> AmqpResult<()> {
        self.basic_nack(delivery_tag, false, requeue)
    }

    fn settle(&self, tag: u64, multiple: bool, outcome: Settle) -> AmqpResult<()> {
        let id = self.id;
        self.shared
            .channel_op(id, |s| s.settle_deliveries(id, tag, multiple, outcome))
    }

    /// `tx.select`: publishes and settlements wait for `tx.commit`.
    pub fn tx_select(&self) -> AmqpResult<()> {
        let id = self.id;
        self.shared.channel_op(id, |s| s.tx_select(id))
    }

    /// `tx.commit`: applies what the transaction holds, together, and returns once the
    /// message store has made the persistent messages it enqueued durable (a store failure
    /// is an `INTERNAL_ERROR`). The broker's lock is not held while waiting.
    pub async fn tx_commit(&self) -> AmqpResult<()> {
        let id = self.id;
        let durability = self.shared.channel_op(id, |s| s.tx_commit(id))?;
        for point in durability {
            point.await.map_err(|e| AmqpError::store_failed(&e))?;
        }
        Ok(())
    }

    /// `tx.rollback`: forgets what the transaction holds.
    pub fn tx_rollback(&self) -> AmqpResult<()> {
        let id = self.id;
        self.shared.channel_op(id, |s| s.tx_rollback(id))
    }

    /// Closes the channel, requeueing its unacknowledged deliveries.
    pub fn close(self) {
        drop(self);
    }
}

impl<E: Envelope> Drop for Channel<E> {
    fn drop(&mut self) {
        let id = self.id;
        self.shared.with(|s| s.close_channel(id, None));
    }
}

/// A buffer of one delivery that allocates nothing ([`Consumer::recv`], [`Consumer::try_recv`]).
type One<E> = smallvec::SmallVec<[Delivery<E>; 1]>;

/// A consumer's deliveries. Dropping it cancels the consumer.
///
/// The engine pushes deliveries (up to the prefetch window) into the consumer's inbox; the
/// handle takes them in batches without touching the engine's lock.
#[derive(Debug)]
pub struct Consumer<E: Envelope = Native> {
    id: u64,
    tag: String,
    channel: u64,
    shared: Arc<Shared<E>>,
    inbox: Arc<Inbox<E>>,
    cancelled: bool,
}

impl<E: Envelope> Consumer<E> {
    /// The consumer tag.
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// The next delivery; `None` once the consumer is cancelled (by the client, by queue
    /// deletion, or because its channel closed). Cancel-safe, as [`Consumer::recv_many`].
    pub async fn recv(&mut self) -> Option<Delivery<E>> {
        let mut one = One::new();
        self.recv_many(&mut one, 1).await;
        one.pop()
    }

    /// Waits for at least one delivery and takes up to `limit` that are ready into `buffer`
    /// (a `Vec`, a `VecDeque`, anything that extends), in order; returns how many were added
    /// (0 once cancelled).
    ///
    /// Cancel-safe: a wait given up (a timeout, another branch of a `select!`) takes
    /// nothing, and what arrives meanwhile waits for the next call. The task that gave up may
    /// be woken once, by the next delivery.
    pub async fn recv_many(
        &mut self,
        buffer: &mut impl Extend<Delivery<E>>,
        limit: usize,
    ) -> usize {
        let limit = limit.max(1);
        match self.inbox.take(buffer, limit) {
            None => return 0,
            Some(0) => {}
            Some(n) => {
                self.released();
                return n;
            }
        }
        // Empty: have the engine move ready messages over, or note that we wait (a publish
        // then dispatches to us at once).
        let id = self.id;
        let n = if self.shared.with(|s| s.park(id)) {
            let inbox = &self.inbox;
            std::future::poll_fn(|cx| inbox.poll_take(cx, buffer, limit))
                .await
                .unwrap_or(0)
        } else {
            // Gone: what the inbox still holds, then the end.
            self.inbox.take(buffer, limit).unwrap_or(0)
        };
        self.released();
        n
    }

    /// Takes up to `limit` deliveries already handed to this consumer, without waiting and
    /// without asking the engine for more (no lock of the broker); returns how many were
    /// added (0 also once cancelled: [`Consumer::recv_many`] tells the two apart).
    pub fn try_recv_many(&mut self, buffer: &mut impl Extend<Delivery<E>>, limit: usize) -> usize {
        let n = self.inbox.take(buffer, limit.max(1)).unwrap_or(0);
        if n > 0 {
            self.released();
        }
        n
    }

    /// A delivery if one is ready now.
    pub fn try_recv(&mut self) -> Option<Delivery<E>> {
        let mut one = One::new();
        if self.inbox.take(&mut one, 1) == Some(0) {
            let id = self.id;
            self.shared.with(|s| s.park(id));
            self.inbox.take(&mut one, 1);
        }
        self.released();
        one.pop()
    }

    /// A no-ack consumer's deliveries leave the memory count as the handle takes them; while
    /// publishers are blocked, that may be what unblocks them.
    fn released(&self) {
        if self.inbox.is_counted() && self.shared.blocked.load(Ordering::Acquire) {
            self.shared.with(|_| ());
        }
    }

    /// `basic.cancel`.
    pub fn cancel(mut self) -> AmqpResult<()> {
        self.cancelled = true;
        let (channel, tag) = (self.channel, self.tag.clone());
        self.shared.with(|s| s.cancel(channel, &tag))
    }
}

impl<E: Envelope> Drop for Consumer<E> {
    fn drop(&mut self) {
        if !self.cancelled {
            let (channel, tag) = (self.channel, self.tag.clone());
            let _ = self.shared.with(|s| s.cancel(channel, &tag));
        }
        // Cancelled, so nothing more arrives: what a no-ack handle never took goes with it,
        // and leaves the memory count.
        if self.inbox.discard() {
            self.shared.with(|_| ());
        }
    }
}

impl From<AmqpError> for std::io::Error {
    fn from(e: AmqpError) -> Self {
        std::io::Error::other(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random declarations, bindings, unbindings and deletions (auto-delete exchanges,
    /// exchange-to-exchange bindings, exclusive queues that go with their connection): after
    /// each, the registry's index of who binds to what is exactly what the bindings say, so
    /// deleting a queue or exchange that visits only the indexed exchanges misses none, and
    /// a binding made again (which skips the search when the index says the target is not
    /// bound yet) is never added twice.
    #[tokio::test]
    async fn the_index_of_binding_sources_follows_every_change() {
        let broker: Broker = Broker::new();
        let conn = broker.connect();
        let mut other = Some(broker.connect());
        let (mut bound, mut deleted) = (0, 0);
        let mut next = crate::xorshift(0x9e37_79b9_7f4a_7c15);
        let kinds = [
            ExchangeKind::Direct,
            ExchangeKind::Fanout,
            ExchangeKind::Topic,
            ExchangeKind::Headers,
        ];
        for step in 0..3000 {
            let x = format!("x{}", next(6));
            let y = format!("x{}", next(6));
            let q = format!("q{}", next(6));
            // Topic patterns too: the topic exchanges' tries must follow as well.
            let key = ["k0", "k1", "k2", "#", "k0.*", "*.k1", "k0.#", "#.k2"][next(8) as usize];
            // A refused operation closes its channel: each step has its own.
            let ch = conn.open_channel().unwrap();
            // Errors (a missing queue or exchange, an exclusive queue of a closed connection)
            // are part of the walk: a refused operation must leave the index alone too.
            let op = next(11);
            let done = match op {
                0 | 1 => ch.exchange_declare(
                    &x,
                    kinds[next(4) as usize],
                    ExchangeOptions {
                        auto_delete: next(2) == 0,
                        ..Default::default()
                    },
                    FieldTable::new(),
                ),
                2 => {
                    let exclusive = next(3) == 0;
                    let on = match (&other, exclusive) {
                        (Some(c), true) => c.open_channel().unwrap(),
                        _ => conn.open_channel().unwrap(),
                    };
                    let options = QueueOptions {
                        exclusive,
                        ..Default::default()
                    };
                    on.queue_declare(&q, options, FieldTable::new()).map(drop)
                }
                3 | 4 => ch.queue_bind(&q, &x, key, FieldTable::new()),
                5 => ch.exchange_bind(&y, &x, key, FieldTable::new()),
                6 => ch.queue_unbind(&q, &x, key, &FieldTable::new()),
                7 => ch.exchange_unbind(&y, &x, key, &FieldTable::new()),
                8 => ch.queue_delete(&q, false, false).map(drop),
                9 => ch.exchange_delete(&x, false),
                _ => {
                    if next(20) == 0 {
                        // Its exclusive queues go with it.
                        if let Some(c) = other.take() {
                            c.close();
                        }
                        other = Some(broker.connect());
                    }
                    Ok(())
                }
            };
            match (op, done) {
                (3..=5, Ok(())) => bound += 1,
                (8 | 9, Ok(())) => deleted += 1,
                _ => {}
            }
            broker.shared.with(|s| {
                let (index, bindings) = s.binding_sources();
                assert_eq!(index, &bindings, "after step {step}");
                assert_eq!(s.repeated_bindings(), 0, "after step {step}");
                assert_eq!(
                    s.inexact_indexes(),
                    [] as [Arc<str>; 0],
                    "after step {step}"
                );
            });
        }
        assert!(
            bound > 100 && deleted > 100,
            "{bound} bindings, {deleted} deletions"
        );
    }
}
