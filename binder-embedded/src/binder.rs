//! The `embedded` binder: the broker-level AMQP operations on the in-process engine
//! ([`AmqpBroker`]), and the binder SPI on them (`binder-amqp`'s
//! [`bind_consumer`](binder_amqp::bind_consumer)).

use std::collections::{HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use binder_amqp::topology::{
    DestinationType, TopologyPlan, anonymous_suffix, plan_consumer, plan_producer,
};
use binder_amqp::{
    AckChannel, AmqpBroker, AmqpProducer, BufferedSubscription, DeliverySource, ProducerSpec,
    QueueInfo, Recent, SubscriptionSpec, TagAcks,
};
use binder_core::binder::{
    Backlog, Binder, BinderError, BinderErrorKind, BinderFuture, BinderRegistration, BinderResult,
    BindingRole, BoundConsumer, ConnectionState, Inbound, Producer, Settler, Subscription,
};
use binder_core::config::BindingConfig;
use binder_core::message::{DeliveryMode, Message};

use stream_store::{DEFAULT_DISK_FREE_LIMIT, DiskMonitor, DiskStore, StoreConfig, SyncMode};

use crate::engine::{
    AmqpError, AmqpResult, Broker, BrokerConfig, Channel, Connection, ConsumeOptions, Consumer,
    Delivery, ExchangeOptions, PublishOptions, PublishOutcome, QueueOptions, ReplyCode, TryPublish,
};
use crate::envelope as convert;
use crate::listen::Listener;
use crate::settings::{EmbeddedSettings, MemoryWatermark, PREFIX};

/// The broker every `embedded` binder created from configuration shares, so services in one
/// process meet on it: groups compete, anonymous consumers each get every message. Made by
/// the first binder configuration (or [`EmbeddedBinder::shared_broker`]) that asks for it,
/// over a [`DiskStore`] when that configuration gives `spring.embedded.data-dir`.
static SHARED: Mutex<Option<SharedBroker>> = Mutex::new(None);

#[derive(Debug)]
struct SharedBroker {
    broker: Broker,
    /// Where and how its store keeps messages (`None`: memory only).
    storage: Option<Storage>,
    /// Blocks the broker's publishers while the store's disk is nearly full; runs for the
    /// process's life, as the shared broker does.
    _disk_monitor: Option<DiskMonitor>,
}

/// What `spring.embedded.data-dir`, `durability`, `disk-free-limit` and
/// `memory-paging-ratio` ask for.
#[derive(Debug, Clone, PartialEq)]
struct Storage {
    dir: PathBuf,
    mode: SyncMode,
    disk_free_limit: u64,
    paging_ratio: f64,
}

impl std::fmt::Display for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "over `{}` (durability {:?}, disk-free-limit {} bytes, memory-paging-ratio {})",
            self.dir.display(),
            self.mode,
            self.disk_free_limit,
            self.paging_ratio
        )
    }
}

/// The shared broker, made now if it does not exist yet: over a store when `settings` give
/// a data directory. A configuration whose data directory (or durability mode) differs from
/// the broker's is refused: one of them would not get what it asked for. A configuration
/// that gives none accepts whatever the broker has.
fn shared_broker(settings: &EmbeddedSettings) -> BinderResult<Broker> {
    let mut shared = SHARED.lock().unwrap_or_else(|p| p.into_inner());
    let asked = settings.data_dir.clone().map(|dir| Storage {
        dir,
        mode: settings.durability.unwrap_or_default(),
        disk_free_limit: settings.disk_free_limit.unwrap_or(DEFAULT_DISK_FREE_LIMIT),
        paging_ratio: settings
            .memory_paging_ratio
            .unwrap_or(BrokerConfig::default().memory_paging_ratio),
    });
    if let Some(existing) = shared.as_ref() {
        return match (&asked, &existing.storage) {
            (None, _) => Ok(existing.broker.clone()),
            (Some(a), Some(e)) if a == e => Ok(existing.broker.clone()),
            (Some(asked), storage) => Err(BinderError::config(format!(
                "`{PREFIX}.data-dir` asks for a broker {asked} here, but the broker every \
                 embedded binder of this process shares was made {} already (by another \
                 embedded binder configuration, or EmbeddedBinder::shared_broker); give \
                 `{PREFIX}.data-dir` where every binder configuration sees it (the top-level \
                 `spring.embedded`), or in one of them only",
                match storage {
                    Some(storage) => storage.to_string(),
                    None => "in memory only".to_owned(),
                }
            ))),
        };
    }
    let (broker, disk_monitor) = match &asked {
        None => (Broker::new(), None),
        Some(storage) => {
            let broker = open_store(&storage.dir, storage.mode, storage.paging_ratio)?;
            let monitor = DiskMonitor::for_brokers(
                &storage.dir,
                storage.disk_free_limit,
                vec![broker.clone()],
            )
            .map_err(|e| {
                BinderError::config(format!(
                    "`{PREFIX}.data-dir` is `{}`, whose free disk space cannot be \
                             measured (for `{PREFIX}.disk-free-limit`): {e}",
                    storage.dir.display()
                ))
            })?;
            (broker, Some(monitor))
        }
    };
    *shared = Some(SharedBroker {
        broker: broker.clone(),
        storage: asked,
        _disk_monitor: disk_monitor,
    });
    Ok(broker)
}

/// A broker over the store in `dir`, with what the store kept rebuilt.
fn open_store(dir: &std::path::Path, mode: SyncMode, paging_ratio: f64) -> BinderResult<Broker> {
    let failed = |e: &dyn std::error::Error| {
        let mut text = e.to_string();
        let mut source = e.source();
        while let Some(s) = source {
            text.push_str(": ");
            text.push_str(&s.to_string());
            source = s.source();
        }
        BinderError::config(format!(
            "`{PREFIX}.data-dir` is `{}`, where the message store cannot be opened: {text}",
            dir.display()
        ))
    };
    let config = StoreConfig {
        mode,
        ..StoreConfig::default()
    };
    let store = DiskStore::open(dir, config).map_err(|e| failed(&e))?;
    let broker_config = BrokerConfig {
        memory_paging_ratio: paging_ratio,
        ..BrokerConfig::default()
    };
    let broker = Broker::with_store(broker_config, store.clone()).map_err(|e| failed(&e))?;
    tracing::info!(
        dir = %dir.display(),
        clean = store.started_clean(),
        truncated_bytes = store.truncated_at_start(),
        "embedded broker's message store opened"
    );
    Ok(broker)
}

/// Whether `broker` is the shared one.
fn is_shared(broker: &Broker) -> bool {
    let shared = SHARED.lock().unwrap_or_else(|p| p.into_inner());
    shared.as_ref().is_some_and(|s| s.broker.same_as(broker))
}

/// The memory high watermark a binder configuration set on the shared broker (in bytes), and
/// how it was written. Every later configuration must agree with it.
static SHARED_WATERMARK: Mutex<Option<(usize, MemoryWatermark)>> = Mutex::new(None);

/// Applies a configured watermark to the shared broker. The first binder configuration that
/// sets one decides it; one that sets another value is refused, since both would share one
/// broker and one of them would not get what it asked for. A configuration that sets none
/// accepts whatever the broker has.
fn share_watermark(watermark: MemoryWatermark) -> BinderResult<()> {
    let bytes = watermark.bytes()?;
    let mut set = SHARED_WATERMARK.lock().unwrap_or_else(|p| p.into_inner());
    match *set {
        None => {
            shared_broker(&EmbeddedSettings::default())?.set_memory_high_watermark(Some(bytes));
            *set = Some((bytes, watermark));
            Ok(())
        }
        Some((earlier, _)) if earlier == bytes => Ok(()),
        Some((earlier, written)) => Err(BinderError::config(format!(
            "`{PREFIX}.memory-high-watermark` is {watermark} ({bytes} bytes) here, but another embedded binder configuration of this process set {written} ({earlier} bytes); every `embedded` binder in a process shares one broker, so their watermarks must agree (or be set in one of them only)"
        ))),
    }
}

fn create(environment: &config::Value) -> BinderResult<Arc<dyn Binder>> {
    let settings = EmbeddedSettings::from_config(environment)?;
    let broker = shared_broker(&settings)?;
    if let Some(watermark) = settings.memory_high_watermark {
        share_watermark(watermark)?;
    }
    let binder = EmbeddedBinder::new(broker);
    binder.listener.serve(&binder.broker, &settings)?;
    Ok(Arc::new(binder))
}

inventory::submit! { BinderRegistration::new("embedded", create) }

/// The AMQP bindings of the AsyncAPI document: the embedded broker serves one virtual host,
/// `/` (also over its listener).
fn describe(
    request: &binder_core::asyncapi::DescribeRequest<'_>,
) -> Result<binder_core::asyncapi::BindingDescription, String> {
    Ok(binder_amqp::asyncapi::describe(request, "/"))
}

/// The servers of the AsyncAPI document: the broker's listener (`spring.embedded.listen`, and
/// its TLS listener), none when it serves only its own process.
fn servers(
    request: &binder_core::asyncapi::ServerRequest<'_>,
) -> Result<Vec<binder_core::asyncapi::ServerDescription>, String> {
    let settings = EmbeddedSettings::from_config(request.environment).map_err(|e| e.to_string())?;
    let at = crate::listen::served_at(&settings).map_err(|e| e.to_string())?;
    Ok(at
        .into_iter()
        .map(|(addr, tls)| {
            let port = if addr.port() == 0 {
                " (port 0: the port is chosen when the listener starts)"
            } else {
                ""
            };
            let description = format!(
                "The broker of binder `{}`, served by the application on the network{port}.",
                request.binder_name
            );
            binder_amqp::asyncapi::server(&addr.to_string(), tls, "/", description)
        })
        .collect())
}

inventory::submit! {
    binder_core::asyncapi::DescriberRegistration::new("embedded", describe).servers(servers)
}

/// Makes sure the `embedded` binder's registration is linked into the program. Call it once
/// (e.g. at the top of `main`) in a program that names nothing else from this crate: the
/// linker drops crates nothing refers to, and their registrations with them.
pub fn link() {}

/// The engine's error as the SPI's: a closed channel or connection is
/// [`BinderErrorKind::Closed`], a missing entity [`BinderErrorKind::NotFound`]; the engine's
/// error stays the source. A 403 (a queue in exclusive use by another consumer) passes, so it
/// stays a broker error.
fn broker_error(e: AmqpError) -> BinderError {
    let kind = match e.code {
        ReplyCode::NotFound => BinderErrorKind::NotFound,
        ReplyCode::ChannelError => BinderErrorKind::Closed,
        _ => BinderErrorKind::Broker,
    };
    BinderError::new(kind, e.to_string()).with_source(e)
}

/// The `embedded` binder over one [`Broker`]. Clones share its connection.
#[derive(Debug, Clone)]
pub struct EmbeddedBinder {
    broker: Broker,
    connection: Arc<Mutex<Option<Connection>>>,
    /// The channel that declares and deletes topology, kept between provisionings (opening a
    /// channel per binding showed in the start time of applications with thousands of
    /// bindings); `None` until first needed, and again after an error closed it.
    declarations: Arc<Mutex<Option<Channel>>>,
    /// Bindings already warned about (durability the engine cannot keep): once each.
    warned: Arc<Mutex<HashSet<String>>>,
    /// The broker served on the network (`spring.embedded.listen`), if it is.
    listener: Arc<Listener>,
}

impl EmbeddedBinder {
    /// A binder on this broker (tests give each their own; configuration uses a shared one).
    pub fn new(broker: Broker) -> Self {
        let listener = if is_shared(&broker) {
            crate::listen::shared()
        } else {
            Arc::default()
        };
        EmbeddedBinder {
            broker,
            connection: Arc::new(Mutex::new(None)),
            declarations: Arc::new(Mutex::new(None)),
            warned: Arc::new(Mutex::new(HashSet::new())),
            listener,
        }
    }

    /// Where the binder's broker is served on the network (`spring.embedded.listen`), with
    /// the port chosen when the address gave port 0; `None` when it is not served.
    pub fn local_addr(&self) -> Option<std::net::SocketAddr> {
        self.listener.local_addr()
    }

    /// Where the binder's broker is served over TLS (a `[tls]` table in
    /// `spring.embedded.server-config`), with the port chosen for port 0; `None` when it is
    /// not.
    pub fn tls_addr(&self) -> Option<std::net::SocketAddr> {
        self.listener.tls_addr()
    }

    /// Where the binder's broker serves its HTTP management API and page (a
    /// `[management]` table in `spring.embedded.server-config`), with the port chosen for
    /// port 0; `None` when it does not.
    pub fn management_addr(&self) -> Option<std::net::SocketAddr> {
        self.listener.management_addr()
    }

    /// What durable storage a binding asks for, which the in-memory engine cannot give
    /// (`None`: nothing):
    /// * a consumer whose queues are durable (a group with `durableSubscription`, the
    ///   default, and its dead-letter queue);
    /// * a producer with `requiredGroups` (it declares their durable queues);
    /// * a producer sending persistent messages (`deliveryMode: PERSISTENT`, SCSt's
    ///   default) to a destination bound to durable queues, as far as this process has
    ///   declared them by the time the application has started.
    fn durability_asked(&self, binding: &BindingConfig, role: BindingRole) -> Option<String> {
        let durable = |plan: &TopologyPlan| -> Vec<String> {
            plan.queues
                .iter()
                .filter(|q| q.durable)
                .map(|q| format!("`{}`", q.name))
                .collect()
        };
        match role {
            BindingRole::Consumer => {
                let queues = durable(&plan_consumer(binding, &anonymous_suffix()).plan);
                (!queues.is_empty())
                    .then(|| format!("consumes from durable queues ({})", queues.join(", ")))
            }
            BindingRole::Producer => {
                let topology = plan_producer(binding);
                let required = durable(&topology.plan);
                if !required.is_empty() {
                    return Some(format!(
                        "declares durable queues for its required groups ({})",
                        required.join(", ")
                    ));
                }
                if binder_amqp::rabbit(binding).producer.delivery_mode != DeliveryMode::Persistent {
                    return None;
                }
                let reached = self.broker.durable_queues_reached(&topology.exchange);
                (!reached.is_empty()).then(|| {
                    let names: Vec<String> = reached.iter().map(|q| format!("`{q}`")).collect();
                    format!(
                        "sends persistent messages (deliveryMode PERSISTENT) to durable queues \
                         ({})",
                        names.join(", ")
                    )
                })
            }
        }
    }

    /// The process-wide broker that configured `embedded` binders share.
    pub fn shared_broker() -> Broker {
        // Without settings nothing can conflict.
        shared_broker(&EmbeddedSettings::default()).unwrap_or_else(|_| Broker::new())
    }

    /// The broker under this binder.
    pub fn broker(&self) -> &Broker {
        &self.broker
    }

    /// A fresh channel (channel errors close channels, so each producer and subscription
    /// gets its own). Its notifications are dropped, not kept: the binder learns of flow
    /// control from the publish outcome and of a cancelled consumer from its stream's end.
    fn channel(&self) -> BinderResult<Channel> {
        let mut conn = self.connection.lock().unwrap_or_else(|p| p.into_inner());
        let conn = conn.get_or_insert_with(|| self.broker.connect());
        let channel = conn.open_channel().map_err(broker_error)?;
        drop(channel.events());
        Ok(channel)
    }

    /// Runs topology operations on the declaration channel (opened if there is none). The
    /// channel goes back for the next provisioning unless an operation failed: a channel
    /// error closes the channel, so the next one opens another. Provisionings that overlap
    /// each get a channel; one of them is kept.
    fn declaring(&self, ops: impl FnOnce(&Channel) -> BinderResult<()>) -> BinderResult<()> {
        let ch = match take(&self.declarations) {
            Some(ch) => ch,
            None => self.channel()?,
        };
        ops(&ch)?;
        self.declarations
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(ch);
        Ok(())
    }
}

/// Takes what `slot` holds (released with its lock, not under it).
fn take<T>(slot: &Mutex<Option<T>>) -> Option<T> {
    slot.lock().unwrap_or_else(|p| p.into_inner()).take()
}

/// What the startup log says of an embedded binder's broker.
const IN_PROCESS: &str =
    "in-process broker: messages stay inside this process and are lost when it exits";
/// … when it keeps durable queues on disk.
const IN_PROCESS_STORED: &str = "in-process broker: durable queues and persistent messages are kept on disk (spring.embedded.data-dir), the rest is lost when the process exits";

#[async_trait]
impl Binder for EmbeddedBinder {
    fn binder_type(&self) -> &str {
        "embedded"
    }

    /// Up: the broker is in the process (its resource alarms block publishers, they do not
    /// disconnect anyone); down once its message store has failed (a write or sync failed,
    /// a full disk): persistent messages to durable queues are refused from then on, until
    /// the service restarts.
    fn connection_state(&self) -> ConnectionState {
        match self.broker.store_failure() {
            None => ConnectionState::Up,
            Some(why) => ConnectionState::Down {
                reason: format!(
                    "the embedded broker's message store failed ({why}): persistent messages \
                     to durable queues are refused until the service restarts"
                ),
            },
        }
    }

    fn describe(&self) -> String {
        let what = if self.broker.keeps_messages() {
            IN_PROCESS_STORED
        } else {
            IN_PROCESS
        };
        match (self.local_addr(), self.tls_addr()) {
            (Some(addr), Some(tls)) => {
                format!("{what}, served on amqp://{addr} and amqps://{tls}")
            }
            (Some(addr), None) => format!("{what}, served on amqp://{addr}"),
            _ => what.to_owned(),
        }
    }

    /// An instance given in code applies `spring.embedded.*` to its own broker; one on the
    /// shared broker (`EmbeddedBinder::shared_broker`) follows the shared broker's agreement
    /// rule, as binders created from configuration do.
    fn configure(&self, environment: &config::Value) -> BinderResult<()> {
        let settings = EmbeddedSettings::from_config(environment)?;
        let shared = is_shared(&self.broker);
        if shared {
            // The shared broker exists: its data directory must agree with the settings'.
            shared_broker(&settings)?;
        } else if settings.data_dir.is_some() {
            return Err(BinderError::config(format!(
                "`{PREFIX}.data-dir` is set for an embedded binder given in code, whose broker \
                 exists already; open that broker over a store instead \
                 (`Broker::with_store(config, stream_store::DiskStore::open(dir, ..)?)`)"
            )));
        }
        match settings.memory_high_watermark {
            Some(watermark) if shared => share_watermark(watermark)?,
            Some(watermark) => self
                .broker
                .set_memory_high_watermark(Some(watermark.bytes()?)),
            None => {}
        }
        self.listener.serve(&self.broker, &settings)
    }

    async fn bind_consumer(&self, binding: &BindingConfig) -> BinderResult<Box<dyn BoundConsumer>> {
        binder_amqp::bind_consumer(Arc::new(self.clone()), binding).await
    }

    async fn bind_producer(&self, binding: &BindingConfig) -> BinderResult<Box<dyn Producer>> {
        binder_amqp::bind_producer(self, binding).await
    }

    /// A passive declare of the queue.
    async fn backlog(&self, source: &str) -> BinderResult<Backlog> {
        self.inspect(source).await.map(Backlog::from)
    }

    /// Warns, once per binding, when the binding asks for durable storage (see
    /// `durability_asked`) and the broker keeps messages in memory only (no
    /// `spring.embedded.data-dir`).
    fn bound(&self, binding: &BindingConfig, role: BindingRole) {
        // Nothing to work out when the warning would not be logged.
        if self.broker.keeps_messages() || !tracing::enabled!(tracing::Level::WARN) {
            return;
        }
        let Some(asked) = self.durability_asked(binding, role) else {
            return;
        };
        let first = self
            .warned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(binding.name.clone());
        if first {
            tracing::warn!(
                binding = %binding.name,
                "binding `{}` {asked}, but the embedded binder keeps messages in memory only: \
                 they are lost when the process exits (set `spring.embedded.data-dir` to keep \
                 them on disk)",
                binding.name
            );
        }
    }

    async fn close(&self) {
        self.listener.stop().await;
        drop(take(&self.declarations));
        drop(take(&self.connection));
    }
}

#[async_trait]
impl AmqpBroker for EmbeddedBinder {
    async fn provision(&self, plan: &TopologyPlan) -> BinderResult<()> {
        let declare =
            |what: String| move |e: AmqpError| BinderError::declare(&what, &e).with_source(e);
        self.declaring(|ch| {
            for x in &plan.exchanges {
                let options = ExchangeOptions {
                    passive: false,
                    durable: x.durable,
                    auto_delete: x.auto_delete,
                    internal: x.internal,
                };
                ch.exchange_declare(
                    &x.name,
                    convert::exchange_kind(x.kind),
                    options,
                    convert::table_to_engine(x.arguments.clone()),
                )
                .map_err(declare(format!("exchange `{}`", x.name)))?;
            }
            for q in &plan.queues {
                let options = QueueOptions {
                    passive: false,
                    durable: q.durable,
                    exclusive: q.exclusive,
                    auto_delete: q.auto_delete,
                };
                ch.queue_declare(
                    &q.name,
                    options,
                    convert::table_to_engine(q.arguments.clone()),
                )
                .map_err(declare(format!("queue `{}`", q.name)))?;
            }
            for b in &plan.bindings {
                let bound = match b.destination_type {
                    DestinationType::Queue => ch.queue_bind(
                        &b.destination,
                        &b.source,
                        &b.routing_key,
                        convert::table_to_engine(b.arguments.clone()),
                    ),
                    DestinationType::Exchange => ch.exchange_bind(
                        &b.destination,
                        &b.source,
                        &b.routing_key,
                        convert::table_to_engine(b.arguments.clone()),
                    ),
                };
                bound.map_err(|e| {
                    declare(format!(
                        "binding {} -> {} ({})",
                        b.source, b.destination, b.routing_key
                    ))(e)
                })?;
            }
            Ok(())
        })
    }

    async fn producer(&self, spec: ProducerSpec) -> BinderResult<Box<dyn AmqpProducer>> {
        let channel = self.channel()?;
        channel.confirm_select().map_err(broker_error)?;
        Ok(Box::new(EmbeddedProducer {
            channel,
            spec,
            broker: self.broker.clone(),
            waiting: AtomicUsize::new(0),
            blocked_since: Mutex::new(None),
        }))
    }

    async fn subscribe(&self, spec: SubscriptionSpec) -> BinderResult<Box<dyn Subscription>> {
        let channel = self.channel()?;
        channel
            .basic_qos(spec.prefetch, false)
            .map_err(broker_error)?;
        let consumer = channel
            .basic_consume(
                &spec.queue,
                ConsumeOptions {
                    consumer_tag: spec.consumer_tag.clone(),
                    no_ack: spec.auto_ack,
                    exclusive: spec.exclusive,
                    arguments: Default::default(),
                },
            )
            .map_err(|e| match e.code {
                ReplyCode::NotFound => {
                    BinderError::not_found(format!("queue `{}`", spec.queue)).with_source(e)
                }
                _ => broker_error(e),
            })?;
        let source = EngineConsumer {
            consumer: Some(consumer),
        };
        let acks = Arc::new(TagAcks::new(EngineAcks(channel), spec.prefetch));
        Ok(Box::new(BufferedSubscription::new(
            source,
            acks,
            spec.auto_ack,
        )))
    }

    async fn inspect(&self, queue: &str) -> BinderResult<QueueInfo> {
        self.broker
            .queue_counts(queue)
            .map(|(messages, consumers)| QueueInfo {
                messages,
                consumers,
            })
            .ok_or_else(|| BinderError::not_found(format!("queue `{queue}`")))
    }

    async fn remove(&self, plan: &TopologyPlan) -> BinderResult<()> {
        self.declaring(|ch| {
            for q in &plan.queues {
                ch.queue_delete(&q.name, false, false)
                    .map_err(broker_error)?;
            }
            for x in &plan.exchanges {
                if !x.name.starts_with("amq.") {
                    ch.exchange_delete(&x.name, false).map_err(broker_error)?;
                }
            }
            Ok(())
        })
    }
}

#[derive(Debug)]
struct EmbeddedProducer {
    channel: Channel,
    spec: ProducerSpec,
    /// The broker, to say why publishers are blocked.
    broker: Broker,
    /// Sends of this producer waiting for the broker to unblock publishers: the first one
    /// to wait logs a warning, the last one to go on logs that they resumed.
    waiting: AtomicUsize,
    /// When the first of the waiting sends began to wait.
    blocked_since: Mutex<Option<std::time::Instant>>,
}

/// A publish's confirm as the SPI reports it.
fn confirmed(
    exchange: &str,
    routing_key: &str,
    outcome: AmqpResult<PublishOutcome>,
) -> BinderResult<()> {
    let refused = |reason: String| BinderError::not_confirmed(exchange, routing_key, reason);
    match outcome {
        Ok(outcome) if outcome.is_ack() => Ok(()),
        Ok(_) => Err(refused(
            "a full queue refused the message (x-overflow: reject-publish)".to_owned(),
        )),
        Err(e) => Err(refused(e.to_string())),
    }
}

/// A send of an [`EmbeddedProducer`] waiting for the broker to unblock publishers (memory or
/// disk alarm). The first waiting send of a producer says so, once, and the last one to go on
/// (or to be dropped) says for how long: a send that only waits would otherwise look like a
/// hung service.
struct BlockedWait<'a>(&'a EmbeddedProducer);

impl<'a> BlockedWait<'a> {
    fn begin(producer: &'a EmbeddedProducer) -> Self {
        if producer.waiting.fetch_add(1, Ordering::AcqRel) == 0 {
            let reason = producer
                .broker
                .blocked_reason()
                .unwrap_or_else(|| "an alarm that has just cleared".to_owned());
            tracing::warn!(
                exchange = %producer.spec.exchange,
                "sends to `{}` wait: the embedded broker blocks publishers ({reason}) until its \
                 memory use falls under `{PREFIX}.memory-high-watermark` (or the data \
                 directory's free space rises over `{PREFIX}.disk-free-limit`); consumers go on",
                producer.spec.exchange
            );
            *producer
                .blocked_since
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = Some(std::time::Instant::now());
        }
        BlockedWait(producer)
    }
}

impl Drop for BlockedWait<'_> {
    fn drop(&mut self) {
        let producer = self.0;
        if producer.waiting.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        let since = producer
            .blocked_since
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let waited = since.map(|t| format!(" after {:.1?}", t.elapsed()));
        let waited = waited.unwrap_or_default();
        let exchange = &producer.spec.exchange;
        if producer.broker.is_blocked() {
            tracing::info!(
                exchange = %exchange,
                "sends to `{exchange}` stopped waiting{waited} (cancelled); the embedded broker \
                 still blocks publishers"
            );
        } else {
            tracing::info!(
                exchange = %exchange,
                "sends to `{exchange}` go on{waited}: the embedded broker unblocked publishers"
            );
        }
    }
}

impl AmqpProducer for EmbeddedProducer {
    fn exchange(&self) -> &str {
        &self.spec.exchange
    }

    /// The engine has no frame limit; this reports RabbitMQ's default, so that what the
    /// embedded binder dead-letters would fit a default RabbitMQ connection too.
    fn frame_max(&self) -> BinderFuture<'_, BinderResult<Option<u32>>> {
        BinderFuture::ready(Ok(Some(binder_amqp::DEFAULT_FRAME_MAX)))
    }

    /// Done at once (no allocation) unless the memory alarm blocks publishers; then it
    /// waits for the alarm to clear. The runtime spends cooperative budget per send, so a
    /// sender whose publishes never wait still lets other tasks run.
    fn publish_to<'a>(
        &'a self,
        exchange: &'a str,
        routing_key: &'a str,
        mut message: Message,
    ) -> BinderFuture<'a, BinderResult<()>> {
        if message.properties.delivery_mode.is_none() {
            message.properties.delivery_mode = Some(self.spec.delivery_mode);
        }
        let options = PublishOptions::default();
        match self
            .channel
            .try_basic_publish(exchange, routing_key, options.clone(), message)
        {
            TryPublish::Done(outcome) => {
                BinderFuture::ready(confirmed(exchange, routing_key, outcome))
            }
            TryPublish::Pending(pending) => BinderFuture::boxed(async move {
                confirmed(exchange, routing_key, pending.wait().await)
            }),
            TryPublish::Blocked(message) => BinderFuture::boxed(async move {
                let _waiting = BlockedWait::begin(self);
                let outcome = self
                    .channel
                    .basic_publish(exchange, routing_key, options, *message)
                    .await;
                confirmed(exchange, routing_key, outcome)
            }),
        }
    }
}

/// The engine's channel as the shared AMQP settlement machinery sees it. The engine never
/// makes a settlement wait.
#[derive(Debug)]
struct EngineAcks(Channel);

impl AckChannel for EngineAcks {
    /// An unknown tag is a channel error (`PRECONDITION_FAILED`), as on RabbitMQ; the
    /// engine's `multiple` ack of a tag below every outstanding one acks nothing instead.
    fn ack(&self, tag: u64) -> BinderResult<()> {
        self.0.basic_ack(tag, false).map_err(broker_error)
    }

    fn ack_up_to(&self, tag: u64) -> BinderResult<()> {
        self.0.basic_ack(tag, true).map_err(broker_error)
    }

    fn requeue(&self, tag: u64) -> BinderResult<()> {
        self.0.basic_nack(tag, false, true).map_err(broker_error)
    }

    fn reject(&self, tag: u64) -> BinderResult<()> {
        self.0.basic_reject(tag, false).map_err(broker_error)
    }
}

/// An engine consumer as a [`DeliverySource`]; `None` once cancelled.
#[derive(Debug)]
struct EngineConsumer {
    consumer: Option<Consumer>,
}

impl DeliverySource for EngineConsumer {
    type Delivery = Delivery;
    type Channel = EngineAcks;

    fn tag(delivery: &Delivery) -> u64 {
        delivery.delivery_tag
    }

    fn inbound(delivery: Delivery, settler: Settler, _: &mut Recent) -> Inbound {
        Inbound {
            content: delivery.body,
            redelivered: delivery.redelivered,
            settler,
        }
    }

    async fn receive(&mut self, into: &mut VecDeque<Delivery>, max: usize) -> bool {
        let Some(consumer) = self.consumer.as_mut() else {
            return false;
        };
        // Cancel-safe: a dropped receive leaves deliveries in the consumer's inbox.
        consumer.recv_many(into, max).await > 0
    }

    fn try_receive(&mut self, into: &mut VecDeque<Delivery>, max: usize) -> usize {
        let Some(consumer) = self.consumer.as_mut() else {
            return 0;
        };
        consumer.try_recv_many(into, max)
    }

    async fn cancel(
        &mut self,
        channel: &EngineAcks,
        auto_ack: bool,
        into: &mut VecDeque<Delivery>,
    ) -> BinderResult<()> {
        let Some(mut consumer) = self.consumer.take() else {
            return Ok(());
        };
        if !auto_ack {
            // What the inbox still holds goes back to the queue with the consumer.
            return consumer.cancel().map_err(broker_error);
        }
        // Auto-ack deliveries already sent cannot go back: they stay to be handed out, taken
        // even when the cancel fails (a closed channel).
        let cancelled = channel.0.basic_cancel(consumer.tag()).map_err(broker_error);
        while let Some(d) = consumer.try_recv() {
            into.push_back(d);
        }
        cancelled
    }
}
