//! The broker's state and every operation on it. All state sits behind one lock (see
//! [`super::Broker`]): each operation runs to completion, so cross-queue effects (routing,
//! dead-lettering, transactions, exclusive-queue cleanup) are atomic without further care.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use binder_core::{Headers, Message};
use tokio::sync::mpsc::UnboundedSender;
use tokio::time::Instant;

use super::dead_letter::{DeathReason, is_cycle, record_death};
use super::error::{AmqpError, AmqpResult, ReplyCode};
use super::exchange::{Exchange, Target};
use super::queue::{Overflow, Queue, QueueArgs, QueueConsumer};
use super::storage::QueuedMessage;
use super::types::{
    BrokerConfig, ChannelEvent, ConsumeOptions, Delivery, ExchangeKind, ExchangeOptions, Published,
    QueueDeclareOk, QueueOptions,
};

/// What became of a publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublishStatus {
    /// Enqueued in this many queues.
    Routed(usize),
    /// No queue took it (returned first if mandatory).
    Unroutable,
    /// A full queue refused it (`x-overflow: reject-publish`); a confirm is a nack.
    Rejected,
    /// Held in the channel's transaction until commit.
    Buffered,
}

/// The result of `basic.publish`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublishOutcome {
    /// The confirm sequence number, in confirm mode.
    pub seq: Option<u64>,
    /// What happened to the message.
    pub status: PublishStatus,
}

impl PublishOutcome {
    /// Whether a publisher confirm for it is an ack (everything but a rejection).
    pub fn is_ack(&self) -> bool {
        self.status != PublishStatus::Rejected
    }
}

#[derive(Debug)]
pub(crate) struct ConsumerState {
    pub tag: Arc<str>,
    pub channel: u64,
    pub queue: Arc<str>,
    pub no_ack: bool,
    pub prefetch: u32,
    pub unacked: u32,
    pub sender: UnboundedSender<Delivery>,
}

#[derive(Debug)]
struct Unacked {
    queue: Arc<str>,
    message: QueuedMessage,
    /// The consumer whose prefetch it uses (`None` after a cancel, or for `basic.get`).
    consumer: Option<u64>,
    /// Whether it counts against the channel's global prefetch.
    counted: bool,
}

#[derive(Debug)]
enum TxOp {
    Publish {
        exchange: String,
        routing_key: String,
        mandatory: bool,
        message: Box<Message>,
    },
    Settle {
        tag: u64,
        multiple: bool,
        outcome: Settle,
    },
}

/// How deliveries are settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settle {
    Ack,
    Requeue,
    Discard,
}

#[derive(Debug)]
struct ChannelState {
    connection: u64,
    next_tag: u64,
    unacked: BTreeMap<u64, Unacked>,
    consumer_prefetch: u32,
    channel_prefetch: u32,
    channel_unacked: u32,
    confirm: bool,
    next_seq: u64,
    tx: Option<Vec<TxOp>>,
    consumers: HashMap<Arc<str>, u64>,
    events: UnboundedSender<ChannelEvent>,
}

#[derive(Debug, Default)]
struct ConnectionState {
    channels: Vec<u64>,
}

/// Everything the broker knows.
#[derive(Debug)]
pub(crate) struct State {
    pub config: BrokerConfig,
    exchanges: HashMap<Arc<str>, Exchange>,
    queues: HashMap<Arc<str>, Queue>,
    consumers: HashMap<u64, ConsumerState>,
    channels: HashMap<u64, ChannelState>,
    connections: HashMap<u64, ConnectionState>,
    next_id: u64,
    /// Payload bytes held in queues and unacknowledged deliveries.
    pub memory: usize,
    pub blocked: bool,
    /// Queues with work to do (dispatch, overflow), handled by `settle`.
    dirty: Vec<Arc<str>>,
    /// Messages waiting to be dead-lettered: message, queue it died in, reason.
    dying: Vec<(QueuedMessage, Arc<str>, DeathReason)>,
    /// Set when a message with an expiry or a queue with `x-expires` appears, so the timer
    /// recomputes its deadline.
    pub timer_dirty: bool,
}

const PREDECLARED: &[(&str, ExchangeKind)] = &[
    ("amq.direct", ExchangeKind::Direct),
    ("amq.fanout", ExchangeKind::Fanout),
    ("amq.topic", ExchangeKind::Topic),
    ("amq.headers", ExchangeKind::Headers),
    ("amq.match", ExchangeKind::Headers),
];

fn random_name(prefix: &str) -> String {
    format!("{prefix}{}", binder_core::topology::anonymous_suffix())
}

impl State {
    pub(crate) fn new(config: BrokerConfig) -> Self {
        let mut exchanges = HashMap::new();
        for (name, kind) in PREDECLARED {
            let name: Arc<str> = Arc::from(*name);
            exchanges.insert(
                name.clone(),
                Exchange::new(name, *kind, true, false, false, Headers::new()),
            );
        }
        State {
            config,
            exchanges,
            queues: HashMap::new(),
            consumers: HashMap::new(),
            channels: HashMap::new(),
            connections: HashMap::new(),
            next_id: 1,
            memory: 0,
            blocked: false,
            dirty: Vec::new(),
            dying: Vec::new(),
            timer_dirty: false,
        }
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    // ---- connections and channels -------------------------------------------------------

    pub(crate) fn open_connection(&mut self) -> u64 {
        let id = self.id();
        self.connections.insert(id, ConnectionState::default());
        id
    }

    pub(crate) fn open_channel(
        &mut self,
        connection: u64,
        events: UnboundedSender<ChannelEvent>,
    ) -> AmqpResult<u64> {
        let id = self.id();
        let conn = self
            .connections
            .get_mut(&connection)
            .ok_or_else(|| AmqpError::new(ReplyCode::ChannelError, "connection is closed"))?;
        conn.channels.push(id);
        if self.blocked {
            let _ = events.send(ChannelEvent::Blocked {
                reason: "low on memory".to_owned(),
            });
        }
        self.channels.insert(
            id,
            ChannelState {
                connection,
                next_tag: 0,
                unacked: BTreeMap::new(),
                consumer_prefetch: 0,
                channel_prefetch: 0,
                channel_unacked: 0,
                confirm: false,
                next_seq: 0,
                tx: None,
                consumers: HashMap::new(),
                events,
            },
        );
        Ok(id)
    }

    fn channel(&mut self, id: u64) -> AmqpResult<&mut ChannelState> {
        self.channels
            .get_mut(&id)
            .ok_or_else(AmqpError::channel_closed)
    }

    fn connection_of(&self, channel: u64) -> AmqpResult<u64> {
        self.channels
            .get(&channel)
            .map(|c| c.connection)
            .ok_or_else(AmqpError::channel_closed)
    }

    /// Closes a channel: cancels its consumers and requeues its unacknowledged deliveries.
    pub(crate) fn close_channel(&mut self, id: u64, error: Option<AmqpError>) {
        let Some(ch) = self.channels.remove(&id) else {
            return;
        };
        if let Some(conn) = self.connections.get_mut(&ch.connection) {
            conn.channels.retain(|c| *c != id);
        }
        for consumer in ch.consumers.values() {
            self.remove_consumer(*consumer, false);
        }
        for (_, unacked) in ch.unacked {
            self.memory -= unacked.message.size();
            self.requeue(unacked.queue, unacked.message);
        }
        if let Some(error) = error {
            let _ = ch.events.send(ChannelEvent::Closed { error });
        }
        self.settle();
    }

    /// Closes a connection: its channels, then its exclusive queues.
    pub(crate) fn close_connection(&mut self, id: u64) {
        let Some(conn) = self.connections.remove(&id) else {
            return;
        };
        for ch in conn.channels {
            self.close_channel(ch, None);
        }
        let owned: Vec<Arc<str>> = self
            .queues
            .values()
            .filter(|q| q.owner == Some(id))
            .map(|q| q.name.clone())
            .collect();
        for q in owned {
            self.delete_queue(&q);
        }
        self.settle();
    }

    /// Runs an operation on a channel; a channel-level error closes the channel and a
    /// connection-level error the connection, as AMQP requires.
    pub(crate) fn on_channel<T>(
        &mut self,
        channel: u64,
        op: impl FnOnce(&mut Self) -> AmqpResult<T>,
    ) -> AmqpResult<T> {
        if !self.channels.contains_key(&channel) {
            return Err(AmqpError::channel_closed());
        }
        let result = op(self);
        if let Err(e) = &result {
            if e.code.is_connection_error() {
                if let Ok(conn) = self.connection_of(channel) {
                    self.close_channel(channel, Some(e.clone()));
                    self.close_connection(conn);
                }
            } else if e.code != ReplyCode::ChannelError {
                self.close_channel(channel, Some(e.clone()));
            }
        }
        self.settle();
        result
    }

    // ---- exchanges ----------------------------------------------------------------------

    fn check_exchange_name(name: &str) -> AmqpResult<()> {
        if name.is_empty() {
            return Err(AmqpError::access_refused(
                "operation not permitted on the default exchange",
            ));
        }
        if name.starts_with("amq.") {
            return Err(AmqpError::access_refused(format!(
                "exchange name '{name}' contains reserved prefix 'amq.*'"
            )));
        }
        Ok(())
    }

    fn no_exchange(&self, name: &str) -> AmqpError {
        AmqpError::not_found(format!(
            "exchange '{name}' in vhost '{}'",
            self.config.vhost
        ))
    }

    fn no_queue(&self, name: &str) -> AmqpError {
        AmqpError::not_found(format!("queue '{name}' in vhost '{}'", self.config.vhost))
    }

    pub(crate) fn exchange_declare(
        &mut self,
        name: &str,
        kind: ExchangeKind,
        options: ExchangeOptions,
        args: Headers,
    ) -> AmqpResult<()> {
        if let Some(existing) = self.exchanges.get(name) {
            if options.passive {
                return Ok(());
            }
            Self::check_exchange_name(name)?;
            let vhost = &self.config.vhost;
            let mismatch = |what: &str, received: String, current: String| {
                AmqpError::precondition(format!(
                    "inequivalent arg '{what}' for exchange '{name}' in vhost '{vhost}': received '{received}' but current is '{current}'"
                ))
            };
            if existing.kind != kind {
                return Err(mismatch(
                    "type",
                    kind.to_string(),
                    existing.kind.to_string(),
                ));
            }
            if existing.durable != options.durable {
                return Err(mismatch(
                    "durable",
                    options.durable.to_string(),
                    existing.durable.to_string(),
                ));
            }
            if existing.auto_delete != options.auto_delete {
                return Err(mismatch(
                    "auto_delete",
                    options.auto_delete.to_string(),
                    existing.auto_delete.to_string(),
                ));
            }
            if existing.internal != options.internal {
                return Err(mismatch(
                    "internal",
                    options.internal.to_string(),
                    existing.internal.to_string(),
                ));
            }
            let alternate = args.get_str("alternate-exchange").map(str::to_owned);
            if existing.alternate != alternate {
                return Err(mismatch(
                    "alternate-exchange",
                    alternate.unwrap_or_else(|| "none".into()),
                    existing.alternate.clone().unwrap_or_else(|| "none".into()),
                ));
            }
            return Ok(());
        }
        if options.passive {
            return Err(self.no_exchange(name));
        }
        Self::check_exchange_name(name)?;
        let name: Arc<str> = Arc::from(name);
        self.exchanges.insert(
            name.clone(),
            Exchange::new(
                name,
                kind,
                options.durable,
                options.auto_delete,
                options.internal,
                args,
            ),
        );
        Ok(())
    }

    pub(crate) fn exchange_delete(&mut self, name: &str, if_unused: bool) -> AmqpResult<()> {
        Self::check_exchange_name(name)?;
        let Some(x) = self.exchanges.get(name) else {
            return Ok(());
        };
        if if_unused && !x.bindings.is_empty() {
            return Err(AmqpError::precondition(format!(
                "exchange '{name}' in vhost '{}' in use",
                self.config.vhost
            )));
        }
        self.remove_exchange(name);
        Ok(())
    }

    fn remove_exchange(&mut self, name: &str) {
        if self.exchanges.remove(name).is_none() {
            return;
        }
        let target = Target::Exchange(Arc::from(name));
        let sources: Vec<Arc<str>> = self.exchanges.keys().cloned().collect();
        for source in sources {
            self.unbind_where(&source, |x| x.unbind_target(&target) > 0);
        }
    }

    /// Applies an unbinding to `source` and deletes it if it is auto-delete and now unbound.
    fn unbind_where(&mut self, source: &str, f: impl FnOnce(&mut Exchange) -> bool) {
        let Some(x) = self.exchanges.get_mut(source) else {
            return;
        };
        if f(x) && x.auto_delete && x.bindings.is_empty() {
            let name = x.name.clone();
            self.remove_exchange(&name);
        }
    }

    fn bindable_exchange(&self, name: &str) -> AmqpResult<()> {
        if name.is_empty() {
            return Err(AmqpError::access_refused(
                "operation not permitted on the default exchange",
            ));
        }
        if !self.exchanges.contains_key(name) {
            return Err(self.no_exchange(name));
        }
        Ok(())
    }

    pub(crate) fn exchange_bind(
        &mut self,
        destination: &str,
        source: &str,
        key: &str,
        args: Headers,
    ) -> AmqpResult<()> {
        self.bindable_exchange(source)?;
        self.bindable_exchange(destination)?;
        let target = Target::Exchange(Arc::from(destination));
        if let Some(x) = self.exchanges.get_mut(source) {
            x.bind(target, key, args);
        }
        Ok(())
    }

    pub(crate) fn exchange_unbind(
        &mut self,
        destination: &str,
        source: &str,
        key: &str,
        args: &Headers,
    ) -> AmqpResult<()> {
        self.bindable_exchange(source)?;
        let target = Target::Exchange(Arc::from(destination));
        self.unbind_where(source, |x| x.unbind(&target, key, args));
        Ok(())
    }

    // ---- queues -------------------------------------------------------------------------

    fn check_owner(&self, queue: &Queue, connection: u64) -> AmqpResult<()> {
        match queue.owner {
            Some(owner) if owner != connection => Err(AmqpError::new(
                ReplyCode::ResourceLocked,
                format!(
                    "cannot obtain exclusive access to locked queue '{}' in vhost '{}'",
                    queue.name, self.config.vhost
                ),
            )),
            _ => Ok(()),
        }
    }

    fn queue_for(&self, channel: u64, name: &str) -> AmqpResult<&Queue> {
        let conn = self.connection_of(channel)?;
        let q = self.queues.get(name).ok_or_else(|| self.no_queue(name))?;
        self.check_owner(q, conn)?;
        Ok(q)
    }

    pub(crate) fn queue_declare(
        &mut self,
        channel: u64,
        name: &str,
        options: QueueOptions,
        args: Headers,
    ) -> AmqpResult<QueueDeclareOk> {
        let conn = self.connection_of(channel)?;
        let name = if name.is_empty() && !options.passive {
            random_name("amq.gen-")
        } else {
            name.to_owned()
        };
        let vhost = self.config.vhost.clone();
        if let Some(q) = self.queues.get(name.as_str()) {
            self.check_owner(q, conn)?;
            if !options.passive {
                let owner = options.exclusive.then_some(conn);
                q.check_equivalent(options, owner, &args, &vhost)?;
            }
            let q = self.queues.get_mut(name.as_str()).expect("checked above");
            q.last_used = Instant::now();
            return Ok(QueueDeclareOk {
                name,
                message_count: q.storage.len() as u32,
                consumer_count: q.consumers.len() as u32,
            });
        }
        if options.passive {
            return Err(self.no_queue(&name));
        }
        if name.starts_with("amq.") && !name.starts_with("amq.gen-") {
            return Err(AmqpError::access_refused(format!(
                "queue name '{name}' contains reserved prefix 'amq.*'"
            )));
        }
        let parsed = QueueArgs::parse(&name, &args)?;
        if parsed.expires.is_some() {
            self.timer_dirty = true;
        }
        let key: Arc<str> = Arc::from(name.as_str());
        let owner = options.exclusive.then_some(conn);
        self.queues
            .insert(key.clone(), Queue::new(key, options, owner, args, parsed));
        Ok(QueueDeclareOk {
            name,
            message_count: 0,
            consumer_count: 0,
        })
    }

    pub(crate) fn queue_bind(
        &mut self,
        channel: u64,
        queue: &str,
        exchange: &str,
        key: &str,
        args: Headers,
    ) -> AmqpResult<()> {
        self.queue_for(channel, queue)?;
        self.bindable_exchange(exchange)?;
        let target = Target::Queue(Arc::from(queue));
        if let Some(x) = self.exchanges.get_mut(exchange) {
            x.bind(target, key, args);
        }
        Ok(())
    }

    pub(crate) fn queue_unbind(
        &mut self,
        channel: u64,
        queue: &str,
        exchange: &str,
        key: &str,
        args: &Headers,
    ) -> AmqpResult<()> {
        self.queue_for(channel, queue)?;
        self.bindable_exchange(exchange)?;
        let target = Target::Queue(Arc::from(queue));
        self.unbind_where(exchange, |x| x.unbind(&target, key, args));
        Ok(())
    }

    pub(crate) fn queue_purge(&mut self, channel: u64, queue: &str) -> AmqpResult<u32> {
        self.queue_for(channel, queue)?;
        let q = self.queues.get_mut(queue).expect("checked above");
        let purged = q.storage.drain();
        let bytes: usize = purged.iter().map(QueuedMessage::size).sum();
        self.memory -= bytes;
        Ok(purged.len() as u32)
    }

    pub(crate) fn queue_delete(
        &mut self,
        channel: u64,
        queue: &str,
        if_unused: bool,
        if_empty: bool,
    ) -> AmqpResult<u32> {
        let q = match self.queue_for(channel, queue) {
            Ok(q) => q,
            // Deleting a queue that does not exist succeeds, as on RabbitMQ.
            Err(e) if e.code == ReplyCode::NotFound => return Ok(0),
            Err(e) => return Err(e),
        };
        if if_unused && !q.consumers.is_empty() {
            return Err(AmqpError::precondition(format!(
                "queue '{queue}' in vhost '{}' in use",
                self.config.vhost
            )));
        }
        if if_empty && !q.storage.is_empty() {
            return Err(AmqpError::precondition(format!(
                "queue '{queue}' in vhost '{}' not empty",
                self.config.vhost
            )));
        }
        Ok(self.delete_queue(queue))
    }

    /// Deletes a queue: consumers are cancelled (with notification), bindings removed.
    fn delete_queue(&mut self, name: &str) -> u32 {
        let Some(mut q) = self.queues.remove(name) else {
            return 0;
        };
        let dropped = q.storage.drain();
        self.memory -= dropped.iter().map(QueuedMessage::size).sum::<usize>();
        for c in &q.consumers {
            if let Some(consumer) = self.consumers.remove(&c.id) {
                if let Some(ch) = self.channels.get_mut(&consumer.channel) {
                    ch.consumers.remove(&consumer.tag);
                    let _ = ch.events.send(ChannelEvent::ConsumerCancelled {
                        consumer_tag: consumer.tag.to_string(),
                    });
                }
            }
        }
        let target = Target::Queue(q.name.clone());
        let sources: Vec<Arc<str>> = self.exchanges.keys().cloned().collect();
        for source in sources {
            self.unbind_where(&source, |x| x.unbind_target(&target) > 0);
        }
        dropped.len() as u32
    }

    // ---- publishing ---------------------------------------------------------------------

    pub(crate) fn confirm_select(&mut self, channel: u64) -> AmqpResult<()> {
        let ch = self.channel(channel)?;
        if ch.tx.is_some() {
            return Err(AmqpError::precondition(
                "cannot switch from tx to confirm mode",
            ));
        }
        ch.confirm = true;
        Ok(())
    }

    pub(crate) fn publish(
        &mut self,
        channel: u64,
        exchange: &str,
        routing_key: &str,
        mandatory: bool,
        message: Message,
    ) -> AmqpResult<PublishOutcome> {
        if !exchange.is_empty() {
            match self.exchanges.get(exchange) {
                None => return Err(self.no_exchange(exchange)),
                Some(x) if x.internal => {
                    return Err(AmqpError::access_refused(format!(
                        "cannot publish to internal exchange '{exchange}' in vhost '{}'",
                        self.config.vhost
                    )));
                }
                Some(_) => {}
            }
        }
        let ch = self.channel(channel)?;
        if let Some(tx) = &mut ch.tx {
            tx.push(TxOp::Publish {
                exchange: exchange.to_owned(),
                routing_key: routing_key.to_owned(),
                mandatory,
                message: Box::new(message),
            });
            return Ok(PublishOutcome {
                seq: None,
                status: PublishStatus::Buffered,
            });
        }
        let seq = ch.confirm.then(|| {
            ch.next_seq += 1;
            ch.next_seq
        });
        let status = self.route_and_enqueue(channel, exchange, routing_key, mandatory, message);
        Ok(PublishOutcome { seq, status })
    }

    fn route_and_enqueue(
        &mut self,
        channel: u64,
        exchange: &str,
        routing_key: &str,
        mandatory: bool,
        message: Message,
    ) -> PublishStatus {
        let targets = self.route(exchange, routing_key, &message.headers);
        let body = Arc::new(Published {
            exchange: exchange.to_owned(),
            routing_key: routing_key.to_owned(),
            message,
        });
        if targets.is_empty() {
            if mandatory {
                if let Some(ch) = self.channels.get(&channel) {
                    let _ = ch.events.send(ChannelEvent::Return {
                        reply_code: 312,
                        reply_text: "NO_ROUTE".to_owned(),
                        body,
                    });
                }
            }
            return PublishStatus::Unroutable;
        }
        let mut rejected = false;
        let now = Instant::now();
        let count = targets.len();
        for queue in targets {
            rejected |= !self.enqueue(&queue, body.clone(), now, false);
        }
        if rejected {
            PublishStatus::Rejected
        } else {
            PublishStatus::Routed(count)
        }
    }

    /// The queues a message reaches, each once.
    fn route(&self, exchange: &str, routing_key: &str, headers: &Headers) -> Vec<Arc<str>> {
        if exchange.is_empty() {
            return self
                .queues
                .get_key_value(routing_key)
                .map(|(k, _)| vec![k.clone()])
                .unwrap_or_default();
        }
        let mut queues = Vec::new();
        let mut visited = HashSet::new();
        self.route_exchange(exchange, routing_key, headers, &mut visited, &mut queues);
        let mut seen = HashSet::new();
        queues.retain(|q| seen.insert(q.clone()));
        queues
    }

    fn route_exchange(
        &self,
        exchange: &str,
        routing_key: &str,
        headers: &Headers,
        visited: &mut HashSet<Arc<str>>,
        queues: &mut Vec<Arc<str>>,
    ) {
        let Some(x) = self.exchanges.get(exchange) else {
            return;
        };
        if !visited.insert(x.name.clone()) {
            return;
        }
        let before = queues.len();
        let mut targets = Vec::new();
        x.matching(routing_key, headers, &mut targets);
        for t in targets {
            match t {
                Target::Queue(q) => {
                    if self.queues.contains_key(&q) {
                        queues.push(q);
                    }
                }
                Target::Exchange(e) => {
                    self.route_exchange(&e, routing_key, headers, visited, queues)
                }
            }
        }
        if queues.len() == before {
            if let Some(alt) = &x.alternate {
                self.route_exchange(alt, routing_key, headers, visited, queues);
            }
        }
    }

    /// Adds a message to a queue, applying TTL, priority and length limits. Returns `false`
    /// when the queue refused it.
    fn enqueue(&mut self, queue: &str, body: Arc<Published>, now: Instant, redead: bool) -> bool {
        let Some(q) = self.queues.get_mut(queue) else {
            return true;
        };
        let size = body.message.payload.len();
        let ttl = match (
            q.args.message_ttl,
            body.message.properties.expiration_duration(),
        ) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let priority = match q.args.max_priority {
            Some(max) => body.message.properties.priority.unwrap_or(0).min(max),
            None => 0,
        };
        q.next_seq += 1;
        let message = QueuedMessage {
            seq: q.next_seq,
            body,
            redelivered: false,
            expires_at: ttl.map(|t| now + t),
            priority,
            deliveries: 0,
        };
        if message.expires_at.is_some() {
            self.timer_dirty = true;
        }
        if q.would_overflow(size) {
            match q.args.overflow {
                Overflow::DropHead => {}
                Overflow::RejectPublish => return false,
                Overflow::RejectPublishDlx => {
                    if !redead {
                        let name = q.name.clone();
                        self.memory += size;
                        self.dying.push((message, name, DeathReason::MaxLen));
                    }
                    return false;
                }
            }
        }
        q.storage.push(message);
        self.memory += size;
        while q.over_limits() {
            let Some(head) = q.storage.pop() else { break };
            self.dying.push((head, q.name.clone(), DeathReason::MaxLen));
        }
        self.dirty.push(q.name.clone());
        true
    }

    // ---- consuming ----------------------------------------------------------------------

    pub(crate) fn basic_qos(
        &mut self,
        channel: u64,
        prefetch: u16,
        global: bool,
    ) -> AmqpResult<()> {
        let ch = self
            .channels
            .get_mut(&channel)
            .ok_or_else(AmqpError::channel_closed)?;
        if global {
            ch.channel_prefetch = u32::from(prefetch);
            let consumers = &self.consumers;
            let queues = ch
                .consumers
                .values()
                .filter_map(|c| consumers.get(c).map(|c| c.queue.clone()));
            self.dirty.extend(queues);
        } else {
            ch.consumer_prefetch = u32::from(prefetch);
        }
        Ok(())
    }

    pub(crate) fn consume(
        &mut self,
        channel: u64,
        queue: &str,
        options: ConsumeOptions,
        sender: UnboundedSender<Delivery>,
    ) -> AmqpResult<String> {
        let q = self.queue_for(channel, queue)?;
        let vhost = self.config.vhost.clone();
        if q.exclusive_consumer || (options.exclusive && !q.consumers.is_empty()) {
            return Err(AmqpError::access_refused(format!(
                "queue '{queue}' in vhost '{vhost}' in exclusive use"
            )));
        }
        let priority = match options.arguments.get("x-priority") {
            None => 0,
            Some(v) => v.as_i64().ok_or_else(|| {
                AmqpError::precondition(format!(
                    "invalid arg 'x-priority' for consumer: expected an integer, got {}",
                    v.type_name()
                ))
            })?,
        };
        let id = self.id();
        let tag: Arc<str> = match options.consumer_tag.filter(|t| !t.is_empty()) {
            Some(t) => Arc::from(t.as_str()),
            None => Arc::from(random_name("amq.ctag-").as_str()),
        };
        let ch = self.channel(channel)?;
        if ch.consumers.contains_key(&tag) {
            return Err(AmqpError::new(
                ReplyCode::NotAllowed,
                format!("attempt to reuse consumer tag '{tag}'"),
            ));
        }
        ch.consumers.insert(tag.clone(), id);
        let prefetch = ch.consumer_prefetch;
        let q = self.queues.get_mut(queue).expect("checked above");
        q.consumers.push(QueueConsumer { id, priority });
        q.exclusive_consumer = options.exclusive;
        q.had_consumer = true;
        q.last_used = Instant::now();
        let queue_name = q.name.clone();
        self.consumers.insert(
            id,
            ConsumerState {
                tag: tag.clone(),
                channel,
                queue: queue_name.clone(),
                no_ack: options.no_ack,
                prefetch,
                unacked: 0,
                sender,
            },
        );
        self.dirty.push(queue_name);
        Ok(tag.to_string())
    }

    pub(crate) fn cancel(&mut self, channel: u64, tag: &str) -> AmqpResult<()> {
        let ch = self.channel(channel)?;
        // Cancelling an unknown tag is not an error in AMQP.
        if let Some(id) = ch.consumers.remove(tag) {
            self.remove_consumer(id, true);
        }
        Ok(())
    }

    /// Removes a consumer from its queue; its unacknowledged deliveries stay on the channel
    /// (they can still be acked, and are requeued when the channel closes).
    fn remove_consumer(&mut self, id: u64, detach_unacked: bool) {
        let Some(consumer) = self.consumers.remove(&id) else {
            return;
        };
        if detach_unacked {
            if let Some(ch) = self.channels.get_mut(&consumer.channel) {
                for u in ch.unacked.values_mut() {
                    if u.consumer == Some(id) {
                        u.consumer = None;
                    }
                }
            }
        }
        let Some(q) = self.queues.get_mut(&consumer.queue) else {
            return;
        };
        q.consumers.retain(|c| c.id != id);
        q.exclusive_consumer = false;
        q.last_used = Instant::now();
        if q.consumers.is_empty() && q.args.expires.is_some() {
            self.timer_dirty = true;
        }
        if q.auto_delete && q.had_consumer && q.consumers.is_empty() {
            let name = q.name.clone();
            self.delete_queue(&name);
        } else {
            // Single active consumer: the next one takes over.
            let name = q.name.clone();
            self.dirty.push(name);
        }
    }

    pub(crate) fn get(
        &mut self,
        channel: u64,
        queue: &str,
        no_ack: bool,
    ) -> AmqpResult<Option<(Delivery, u32)>> {
        self.queue_for(channel, queue)?;
        let now = Instant::now();
        self.expire_head(queue, now);
        let q = self.queues.get_mut(queue).expect("checked above");
        q.last_used = now;
        let Some(mut message) = q.storage.pop() else {
            return Ok(None);
        };
        let remaining = q.storage.len() as u32;
        let queue_name = q.name.clone();
        message.deliveries += 1;
        let ch = self.channels.get_mut(&channel).expect("checked above");
        ch.next_tag += 1;
        let delivery = Delivery {
            consumer_tag: Arc::from(""),
            delivery_tag: ch.next_tag,
            redelivered: message.redelivered,
            body: message.body.clone(),
        };
        if no_ack {
            self.memory -= message.size();
        } else {
            ch.unacked.insert(
                ch.next_tag,
                Unacked {
                    queue: queue_name,
                    message,
                    consumer: None,
                    counted: false,
                },
            );
        }
        Ok(Some((delivery, remaining)))
    }

    /// Hands ready messages of a queue to consumers with credit: highest `x-priority` first,
    /// round-robin among equals, only the first consumer under single-active-consumer.
    fn dispatch(&mut self, queue: &str) {
        let now = Instant::now();
        loop {
            self.expire_head(queue, now);
            let Some(q) = self.queues.get_mut(queue) else {
                return;
            };
            if q.storage.is_empty() || q.consumers.is_empty() {
                return;
            }
            let candidates = if q.args.single_active_consumer {
                1
            } else {
                q.consumers.len()
            };
            let mut chosen: Option<(usize, i64)> = None;
            for step in 0..candidates {
                let idx = if q.args.single_active_consumer {
                    0
                } else {
                    (q.cursor + step) % q.consumers.len()
                };
                let qc = &q.consumers[idx];
                if chosen.is_some_and(|(_, p)| p >= qc.priority) {
                    continue;
                }
                let Some(c) = self.consumers.get(&qc.id) else {
                    continue;
                };
                let Some(ch) = self.channels.get(&c.channel) else {
                    continue;
                };
                let has_credit = c.no_ack
                    || ((c.prefetch == 0 || c.unacked < c.prefetch)
                        && (ch.channel_prefetch == 0 || ch.channel_unacked < ch.channel_prefetch));
                if has_credit {
                    chosen = Some((idx, qc.priority));
                }
            }
            let Some((idx, _)) = chosen else {
                return;
            };
            let consumer_id = q.consumers[idx].id;
            q.cursor = idx + 1;
            let mut message = q.storage.pop().expect("checked non-empty");
            let queue_name = q.name.clone();
            message.deliveries += 1;
            let consumer = self.consumers.get_mut(&consumer_id).expect("chosen above");
            let ch = self
                .channels
                .get_mut(&consumer.channel)
                .expect("chosen above");
            ch.next_tag += 1;
            let delivery = Delivery {
                consumer_tag: consumer.tag.clone(),
                delivery_tag: ch.next_tag,
                redelivered: message.redelivered,
                body: message.body.clone(),
            };
            if consumer.no_ack {
                self.memory -= message.size();
            } else {
                consumer.unacked += 1;
                ch.channel_unacked += 1;
                ch.unacked.insert(
                    ch.next_tag,
                    Unacked {
                        queue: queue_name,
                        message,
                        consumer: Some(consumer_id),
                        counted: true,
                    },
                );
            }
            if consumer.sender.send(delivery).is_err() {
                // The consumer's receiver is gone: take it out; its deliveries are requeued
                // when the channel closes.
                let channel = consumer.channel;
                let tag = consumer.tag.clone();
                if let Some(ch) = self.channels.get_mut(&channel) {
                    ch.consumers.remove(&tag);
                }
                self.remove_consumer(consumer_id, false);
            }
        }
    }

    // ---- settlement ---------------------------------------------------------------------

    pub(crate) fn settle_deliveries(
        &mut self,
        channel: u64,
        tag: u64,
        multiple: bool,
        outcome: Settle,
    ) -> AmqpResult<()> {
        let ch = self.channel(channel)?;
        if let Some(tx) = &mut ch.tx {
            if !multiple && !ch.unacked.contains_key(&tag) {
                return Err(AmqpError::precondition(format!(
                    "unknown delivery tag {tag}"
                )));
            }
            tx.push(TxOp::Settle {
                tag,
                multiple,
                outcome,
            });
            return Ok(());
        }
        self.apply_settle(channel, tag, multiple, outcome)
    }

    fn apply_settle(
        &mut self,
        channel: u64,
        tag: u64,
        multiple: bool,
        outcome: Settle,
    ) -> AmqpResult<()> {
        let ch = self.channel(channel)?;
        let settled: Vec<Unacked> = if multiple {
            let rest = if tag == 0 {
                BTreeMap::new()
            } else {
                ch.unacked.split_off(&(tag + 1))
            };
            std::mem::replace(&mut ch.unacked, rest)
                .into_values()
                .collect()
        } else {
            match ch.unacked.remove(&tag) {
                Some(u) => vec![u],
                None => {
                    return Err(AmqpError::precondition(format!(
                        "unknown delivery tag {tag}"
                    )));
                }
            }
        };
        for u in settled {
            if let Some(c) = u.consumer.and_then(|id| self.consumers.get_mut(&id)) {
                c.unacked -= 1;
            }
            if u.counted {
                if let Some(ch) = self.channels.get_mut(&channel) {
                    ch.channel_unacked -= 1;
                }
            }
            self.memory -= u.message.size();
            match outcome {
                Settle::Ack => self.dirty.push(u.queue),
                Settle::Requeue => self.requeue(u.queue, u.message),
                Settle::Discard => {
                    self.memory += u.message.size();
                    self.dying
                        .push((u.message, u.queue.clone(), DeathReason::Rejected));
                    self.dirty.push(u.queue);
                }
            }
        }
        Ok(())
    }

    /// Puts a delivered message back, marked redelivered, unless it reached the queue's
    /// delivery limit (then it is dead-lettered).
    fn requeue(&mut self, queue: Arc<str>, mut message: QueuedMessage) {
        let Some(q) = self.queues.get_mut(&queue) else {
            return;
        };
        message.redelivered = true;
        self.memory += message.size();
        if q.args
            .delivery_limit
            .is_some_and(|limit| message.deliveries > limit)
        {
            self.dying
                .push((message, queue, DeathReason::DeliveryLimit));
            return;
        }
        q.storage.requeue(message);
        self.dirty.push(queue);
    }

    // ---- transactions -------------------------------------------------------------------

    pub(crate) fn tx_select(&mut self, channel: u64) -> AmqpResult<()> {
        let ch = self.channel(channel)?;
        if ch.confirm {
            return Err(AmqpError::precondition(
                "cannot switch from confirm to tx mode",
            ));
        }
        ch.tx.get_or_insert_with(Vec::new);
        Ok(())
    }

    fn take_tx(&mut self, channel: u64) -> AmqpResult<Vec<TxOp>> {
        let ch = self.channel(channel)?;
        match &mut ch.tx {
            Some(ops) => Ok(std::mem::take(ops)),
            None => Err(AmqpError::precondition("channel is not transactional")),
        }
    }

    pub(crate) fn tx_commit(&mut self, channel: u64) -> AmqpResult<()> {
        for op in self.take_tx(channel)? {
            match op {
                TxOp::Publish {
                    exchange,
                    routing_key,
                    mandatory,
                    message,
                } => {
                    self.route_and_enqueue(channel, &exchange, &routing_key, mandatory, *message);
                }
                TxOp::Settle {
                    tag,
                    multiple,
                    outcome,
                } => self.apply_settle(channel, tag, multiple, outcome)?,
            }
        }
        Ok(())
    }

    pub(crate) fn tx_rollback(&mut self, channel: u64) -> AmqpResult<()> {
        self.take_tx(channel).map(drop)
    }

    // ---- expiry, dead letters, follow-up work -------------------------------------------

    /// Drops expired messages at the head of a queue (dead-lettering them).
    fn expire_head(&mut self, queue: &str, now: Instant) {
        let Some(q) = self.queues.get_mut(queue) else {
            return;
        };
        while q
            .storage
            .peek()
            .and_then(|m| m.expires_at)
            .is_some_and(|at| at <= now)
        {
            let m = q.storage.pop().expect("peeked");
            self.dying.push((m, q.name.clone(), DeathReason::Expired));
        }
    }

    /// Expires messages and idle queues due by `now`; returns the next deadline.
    pub(crate) fn run_timers(&mut self, now: Instant) -> Option<Instant> {
        let names: Vec<Arc<str>> = self.queues.keys().cloned().collect();
        let mut next: Option<Instant> = None;
        let mut earliest = |t: Instant| next = Some(next.map_or(t, |n: Instant| n.min(t)));
        for name in names {
            self.expire_head(&name, now);
            let Some(q) = self.queues.get(&name) else {
                continue;
            };
            if let Some(expires) = q.args.expires {
                if q.consumers.is_empty() {
                    let at = q.last_used + expires;
                    if at <= now {
                        self.delete_queue(&name);
                        continue;
                    }
                    earliest(at);
                }
            }
            if let Some(at) = q.storage.peek().and_then(|m| m.expires_at) {
                earliest(at);
            }
        }
        self.timer_dirty = false;
        self.settle();
        next
    }

    /// Runs follow-up work until none is left: dead letters are routed, queues that gained
    /// messages or credit are dispatched.
    pub(crate) fn settle(&mut self) {
        loop {
            if let Some((message, queue, reason)) = self.dying.pop() {
                self.memory -= message.size();
                self.dead_letter(message, &queue, reason);
                continue;
            }
            if let Some(queue) = self.dirty.pop() {
                self.dispatch(&queue);
                continue;
            }
            break;
        }
    }

    fn dead_letter(&mut self, message: QueuedMessage, queue: &str, reason: DeathReason) {
        let Some(q) = self.queues.get(queue) else {
            return;
        };
        let Some(dlx) = q.args.dead_letter_exchange.clone() else {
            return;
        };
        let routing_key = q.args.dead_letter_routing_key.clone();
        let mut body = Arc::unwrap_or_clone(message.body);
        let keys = vec![body.routing_key.clone()];
        record_death(&mut body.message, queue, reason, &body.exchange, &keys);
        let key = routing_key.unwrap_or_else(|| body.routing_key.clone());
        let targets = self.route(&dlx, &key, &body.message.headers);
        let body = Arc::new(Published {
            exchange: dlx,
            routing_key: key,
            message: body.message,
        });
        let now = Instant::now();
        for target in targets {
            if is_cycle(&body.message, &target) {
                continue;
            }
            self.enqueue(&target, body.clone(), now, true);
        }
    }

    // ---- introspection ------------------------------------------------------------------

    pub(crate) fn queue_counts(&self, queue: &str) -> Option<(u32, u32)> {
        self.queues
            .get(queue)
            .map(|q| (q.storage.len() as u32, q.consumers.len() as u32))
    }

    pub(crate) fn exchange_exists(&self, name: &str) -> bool {
        self.exchanges.contains_key(name)
    }

    pub(crate) fn notify_all(&self, event: &ChannelEvent) {
        for ch in self.channels.values() {
            let _ = ch.events.send(event.clone());
        }
    }
}
