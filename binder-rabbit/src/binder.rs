//! The `rabbit` binder: the broker-level AMQP operations over lapin ([`AmqpBroker`]), and the
//! binder SPI on them (`binder-amqp`'s [`bind_consumer`](binder_amqp::bind_consumer)).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use binder_amqp::ExchangeType;
use binder_amqp::convert;
use binder_amqp::topology::{DestinationType, TopologyPlan};
use binder_amqp::{
    AckChannel, AmqpBroker, AmqpProducer, BufferedSubscription, DeliverySource, ProducerSpec,
    QueueInfo, Recent, SubscriptionSpec, TagAcks,
};
use binder_core::binder::{
    Backlog, Binder, BinderError, BinderErrorKind, BinderFuture, BinderRegistration, BinderResult,
    BoundConsumer, ConnectionState, Inbound, Producer, Published, Settler, Subscription,
};
use binder_core::config::BindingConfig;
use binder_core::message::Message;
use futures::{FutureExt, StreamExt};
use lapin::Confirmation;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicNackOptions,
    BasicPublishOptions, BasicQosOptions, BasicRejectOptions, ConfirmSelectOptions,
    ExchangeBindOptions, ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{FieldTable, LongString, ShortString};
use lapin::{Channel, Connection, ConnectionProperties, ExchangeKind};
use tokio::sync::{Mutex, Notify};

use crate::settings::{RabbitSettings, redact};
use crate::tls;

fn create(tree: &config::Value) -> BinderResult<Arc<dyn Binder>> {
    Ok(Arc::new(RabbitBinder::new(RabbitSettings::from_config(
        tree,
    )?)))
}

inventory::submit! { BinderRegistration::new("rabbit", create) }

/// The AMQP bindings of the AsyncAPI document, in the virtual host `spring.rabbitmq.*` names.
fn describe(
    request: &binder_core::asyncapi::DescribeRequest<'_>,
) -> Result<binder_core::asyncapi::BindingDescription, String> {
    let settings = RabbitSettings::from_config(request.environment).map_err(|e| e.to_string())?;
    let vhost = settings.virtual_host()?;
    Ok(binder_amqp::asyncapi::describe(request, &vhost))
}

/// The servers of the AsyncAPI document: one per address the binder connects to (a cluster's
/// nodes in `addresses` each), credentials left out.
fn servers(
    request: &binder_core::asyncapi::ServerRequest<'_>,
) -> Result<Vec<binder_core::asyncapi::ServerDescription>, String> {
    let settings = RabbitSettings::from_config(request.environment).map_err(|e| e.to_string())?;
    let several = settings.uris.len() > 1;
    settings
        .uris
        .iter()
        .enumerate()
        .map(|(i, uri)| {
            let parsed: lapin::uri::AMQPUri = uri.parse()?;
            let host = format!("{}:{}", parsed.authority.host, parsed.authority.port);
            let description = if several {
                format!(
                    "RabbitMQ node {} of {} that binder `{}` connects to (in this order, the first that answers).",
                    i + 1,
                    settings.uris.len(),
                    request.binder_name
                )
            } else {
                format!("RabbitMQ, as binder `{}` connects to it.", request.binder_name)
            };
            let tls = parsed.scheme == lapin::uri::AMQPScheme::AMQPS;
            Ok(binder_amqp::asyncapi::server(&host, tls, &parsed.vhost, description))
        })
        .collect()
}

inventory::submit! {
    binder_core::asyncapi::DescriberRegistration::new("rabbit", describe).servers(servers)
}

/// Makes sure the `rabbit` binder's registration is linked into the program (call it once in
/// a program that names nothing else from this crate).
pub fn link() {}

/// lapin's error as the SPI's, its kind told from lapin's: a lost connection or channel is
/// [`BinderErrorKind::Closed`] (retryable), the broker's 404 `NOT_FOUND` and 320
/// `CONNECTION_FORCED` are what they say; lapin's error stays the source. A 403 on a channel
/// is not a refusal of the connection (`refusal` tells those): it also means a queue in
/// exclusive use by another consumer, which passes, so it stays a broker error.
pub(crate) fn broker(e: lapin::Error) -> BinderError {
    use lapin::ErrorKind as K;
    let kind = match e.kind() {
        K::IOError(_)
        | K::RuntimeShutdownError(_)
        | K::MissingHeartbeatError
        | K::InvalidChannel(_)
        | K::InvalidChannelState(..)
        | K::InvalidConnectionState(_) => BinderErrorKind::Closed,
        K::ProtocolError(amqp) => match amqp.get_id() {
            404 => BinderErrorKind::NotFound,
            320 => BinderErrorKind::Closed,
            _ => BinderErrorKind::Broker,
        },
        _ => BinderErrorKind::Broker,
    };
    BinderError::new(kind, e.to_string()).with_source(e)
}

/// `future`'s output, or `None` once `limit` has passed; a zero limit waits for ever (as
/// Spring's zero `connection-timeout`).
async fn within<F: std::future::Future>(
    limit: std::time::Duration,
    future: F,
) -> Option<F::Output> {
    if limit.is_zero() {
        Some(future.await)
    } else {
        tokio::time::timeout(limit, future).await.ok()
    }
}

/// A failed operation on `queue`: `NotFound` when the broker says so (404), the broker's
/// own error otherwise (access refused, an exclusive queue of another connection, a lost
/// connection).
pub(crate) fn queue_error(e: lapin::Error, queue: &str) -> BinderError {
    match e.kind() {
        lapin::ErrorKind::ProtocolError(p) if p.get_id() == 404 => {
            BinderError::not_found(format!("queue `{queue}`")).with_source(e)
        }
        _ => broker(e),
    }
}

fn kind(t: ExchangeType) -> ExchangeKind {
    match t {
        ExchangeType::Direct => ExchangeKind::Direct,
        ExchangeType::Fanout => ExchangeKind::Fanout,
        ExchangeType::Topic => ExchangeKind::Topic,
        ExchangeType::Headers => ExchangeKind::Headers,
    }
}

/// The `rabbit` binder: two connections (to the first reachable address), one for
/// producers and one for everything else, with a channel per producer and per subscription.
/// A lost connection is replaced on next use.
///
/// Producers have a connection of their own, as Spring's publisher connection: while a
/// resource alarm lasts RabbitMQ blocks the connections that publish, and lapin then writes
/// nothing at all on a blocked connection, acks included. On a shared connection the
/// consumers could not ack, so queues would not drain and the alarm might never clear.
#[derive(Debug, Clone)]
pub struct RabbitBinder {
    link: Arc<Link>,
    publisher_link: Arc<Link>,
}

/// One of the binder's connections, reopened when lost.
#[derive(Debug)]
struct Link {
    settings: RabbitSettings,
    connection: Mutex<Option<Arc<LinkConnection>>>,
    /// What health reports and metrics read ([`Binder::connection_state`]) without waiting
    /// for `connection`, which a connection attempt holds.
    status: std::sync::Mutex<LinkStatus>,
}

/// Where a [`Link`] is, as its last connection attempt left it.
#[derive(Debug)]
enum LinkStatus {
    /// Never connected, or closed by the binder.
    Idle,
    /// An attempt is under way.
    Connecting,
    /// This connection was opened (it may have been lost since).
    Open(std::sync::Weak<LinkConnection>),
    /// The last attempt failed, with this error.
    Failed(String),
}

/// A connection the binder opened. New channels go on it until it is lost or retired; each
/// channel keeps it open, and once the binder and the last channel have let go of it, it is
/// closed. (lapin alone would keep it open for as long as it remembers a channel that failed
/// to open on it, which is for good.)
#[derive(Debug)]
struct LinkConnection {
    connection: Arc<Connection>,
    /// Channel closes and consumer cancels under way, which the connection's close waits for
    /// ([`LinkConnection::tidied`]).
    tidying: Tidying,
}

/// Counts the clean-ups under way on a connection's channels. A channel whose close ends
/// while its connection's close ends too is removed twice by lapin, which reports that as
/// an error of the whole connection: the binder closes a connection only once they are done.
#[derive(Debug, Default)]
struct Tidying {
    in_flight: AtomicUsize,
    done: Notify,
}

impl LinkConnection {
    fn new(connection: Connection) -> Self {
        LinkConnection {
            connection: Arc::new(connection),
            tidying: Tidying::default(),
        }
    }

    /// Runs `task`, a clean-up on one of this connection's channels, on the current runtime.
    /// Outside one the process is ending: the task is dropped unstarted, and lapin's own
    /// closers run as its handles go. A task dropped unfinished (its runtime shutting down)
    /// or panicking still counts as done.
    fn tidy(self: &Arc<Self>, task: impl std::future::Future<Output = ()> + Send + 'static) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let under_way = TidyingUnderWay::begin(self.clone());
        runtime.spawn(async move {
            task.await;
            drop(under_way);
        });
    }

    /// Returns once no clean-up runs on this connection's channels.
    async fn tidied(&self) {
        loop {
            let done = self.tidying.done.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            if self.tidying.in_flight.load(Ordering::Acquire) == 0 {
                return;
            }
            done.await;
        }
    }
}

/// One clean-up counted in its connection's [`Tidying`] until it is dropped.
struct TidyingUnderWay(Arc<LinkConnection>);

impl TidyingUnderWay {
    fn begin(connection: Arc<LinkConnection>) -> Self {
        connection.tidying.in_flight.fetch_add(1, Ordering::AcqRel);
        TidyingUnderWay(connection)
    }
}

impl Drop for TidyingUnderWay {
    fn drop(&mut self) {
        let tidying = &self.0.tidying;
        if tidying.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            tidying.done.notify_waiters();
        }
    }
}

impl Drop for LinkConnection {
    fn drop(&mut self) {
        if !self.connection.status().connected() {
            return;
        }
        let connection = self.connection.clone();
        in_background(async move {
            let _ = connection.close(200, ShortString::from("OK")).await;
        });
    }
}

/// Takes a std mutex, poisoned or not (what it guards stays consistent across a panic).
fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs a clean-up from a `Drop` on the current runtime. Outside one (the process is ending)
/// the task is dropped unstarted, and lapin's own closers run as its handles go.
fn in_background(task: impl std::future::Future<Output = ()> + Send + 'static) {
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn(task);
    }
}

/// A channel, and the connection it was opened on, kept open while the channel is in use.
/// Clones share the channel; when the last one goes, the channel is closed (see
/// [`OpenChannel`]).
#[derive(Debug, Clone)]
pub(crate) struct LinkChannel(Arc<OpenChannel>);

/// The channel behind every clone of a [`LinkChannel`]. It is closed by the binder, never by
/// lapin: lapin closes a channel whose last handle is dropped on a task of its own, and
/// when that close finds the channel already closing (the connection began to close
/// meanwhile, as at shutdown, or the broker closed the channel), lapin reports the failed
/// close as an error of the whole connection. The binder's own close, awaited on a clone,
/// leaves lapin nothing to close when that clone goes.
#[derive(Debug)]
struct OpenChannel {
    channel: Channel,
    connection: Arc<LinkConnection>,
}

impl Drop for OpenChannel {
    fn drop(&mut self) {
        if !self.channel.status().connected() {
            return;
        }
        let channel = self.channel.clone();
        self.connection.tidy(async move {
            let _ = channel.close(200, ShortString::from("OK")).await;
        });
    }
}

impl LinkChannel {
    /// The connection this channel was opened on.
    fn connection(&self) -> &Arc<LinkConnection> {
        &self.0.connection
    }
}

impl std::ops::Deref for LinkChannel {
    type Target = Channel;

    fn deref(&self) -> &Channel {
        &self.0.channel
    }
}

impl RabbitBinder {
    /// A binder with these settings; it connects on first use.
    pub fn new(settings: RabbitSettings) -> Self {
        let mut publisher = settings.clone();
        publisher.connection_name = format!("{}.publisher", settings.connection_name);
        RabbitBinder {
            link: Link::new(settings),
            publisher_link: Link::new(publisher),
        }
    }

    pub(crate) async fn channel(&self) -> BinderResult<LinkChannel> {
        self.link.channel().await
    }
}

impl Link {
    fn new(settings: RabbitSettings) -> Arc<Self> {
        Arc::new(Link {
            settings,
            connection: Mutex::new(None),
            status: std::sync::Mutex::new(LinkStatus::Idle),
        })
    }

    fn set_status(&self, status: LinkStatus) {
        *lock(&self.status) = status;
    }

    /// The link's connection state, from what its last attempt left (never waits).
    fn state(&self) -> ConnectionState {
        match &*lock(&self.status) {
            LinkStatus::Idle => ConnectionState::Idle,
            LinkStatus::Connecting => ConnectionState::Connecting,
            LinkStatus::Open(c) => match c.upgrade() {
                Some(c) if c.connection.status().connected() => ConnectionState::Up,
                // Lost while channels (subscriptions, producers) use it: they are cut off
                // until it is reopened.
                Some(c) if Arc::strong_count(&c) > 2 => ConnectionState::Down {
                    reason: format!(
                        "connection `{}` lost; it is reopened on next use",
                        self.settings.connection_name
                    ),
                },
                // Lost, or retired, with nothing on it: the next use opens another.
                _ => ConnectionState::Idle,
            },
            LinkStatus::Failed(reason) => ConnectionState::Down {
                reason: reason.clone(),
            },
        }
    }

    /// The open connection, connecting (each address in order) if there is none.
    async fn connection(&self) -> BinderResult<Arc<LinkConnection>> {
        let mut guard = self.connection.lock().await;
        if let Some(c) = guard.as_ref() {
            if c.connection.status().connected() {
                return Ok(c.clone());
            }
        }
        self.set_status(LinkStatus::Connecting);
        let result = self.connect(&mut guard).await;
        self.set_status(match &result {
            Ok(c) => LinkStatus::Open(Arc::downgrade(c)),
            Err(e) => LinkStatus::Failed(e.to_string()),
        });
        result
    }

    /// Connects to the first address that answers, and keeps the connection in `guard`.
    async fn connect(
        &self,
        guard: &mut Option<Arc<LinkConnection>>,
    ) -> BinderResult<Arc<LinkConnection>> {
        let mut last = String::from("no address configured");
        // Addresses whose TLS session was refused: trying again will not help.
        let mut refused = Vec::new();
        for uri in &self.settings.uris {
            let props = ConnectionProperties::default().with_connection_name(LongString::from(
                self.settings.connection_name.as_bytes().to_vec(),
            ));
            // A peer that accepts the TCP connection but never speaks AMQP (a load balancer
            // without backends, a stopped broker process) would hold the handshake forever.
            let timeout = self.settings.connection_timeout;
            let failure = match self.settings.amqp_uri(uri) {
                Err(e) => format!("not an AMQP URI: {e}"),
                Ok(amqp) => {
                    let connect = tls::connect(amqp, props, &self.settings.tls);
                    match within(timeout, connect).await {
                        Some(Ok(c)) => {
                            let c = Arc::new(LinkConnection::new(c));
                            *guard = Some(c.clone());
                            return Ok(c);
                        }
                        Some(Err(tls::Failure::Connect(e))) => match refusal(&e) {
                            // Credentials and virtual hosts are the same on every node of a
                            // cluster: the next address would refuse too.
                            Some(reason) => {
                                let why = format!("{}: {reason}", redact(uri));
                                tracing::error!(uri = %redact(uri), %reason, "RabbitMQ refused the connection");
                                return Err(BinderError::refused(why).with_source(e));
                            }
                            None => e.to_string(),
                        },
                        Some(Err(tls::Failure::Tls(e))) => {
                            refused.push(format!("{}: {e}", redact(uri)));
                            e
                        }
                        None => format!("no AMQP handshake within {timeout:?}"),
                    }
                }
            };
            tracing::warn!(uri = %redact(uri), error = %failure, "cannot connect to RabbitMQ");
            last = format!("{}: {failure}", redact(uri));
        }
        if !refused.is_empty() {
            // Either side refused TLS: waiting does not help.
            return Err(BinderError::new(
                BinderErrorKind::Refused,
                format!(
                    "cannot connect to RabbitMQ over TLS ({})",
                    refused.join("; ")
                ),
            ));
        }
        Err(BinderError::unreachable(format!(
            "cannot connect to RabbitMQ ({last})"
        )))
    }

    /// A new channel. lapin keeps the error of every channel the broker closed (a passive
    /// declare of a missing queue, a refused declaration) against its channel id for the life
    /// of the connection, and a channel that reuses the id once the ids wrap around
    /// (`channel_max`, 2047 on RabbitMQ) fails to open with that stale error. A channel that
    /// fails to open on a connection that is still up therefore moves the binder to a fresh
    /// connection; the old one closes when its last channel does.
    async fn channel(&self) -> BinderResult<LinkChannel> {
        let connection = self.connection().await?;
        match Self::open_on(connection.clone()).await {
            Err(e) if connection.connection.status().connected() => {
                tracing::info!(error = %e, "a channel failed to open on a working connection; opening a fresh connection");
                self.retire(&connection).await;
                Self::open_on(self.connection().await?)
                    .await
                    .map_err(broker)
            }
            opened => opened.map_err(broker),
        }
    }

    async fn open_on(connection: Arc<LinkConnection>) -> Result<LinkChannel, lapin::Error> {
        Ok(LinkChannel(Arc::new(OpenChannel {
            channel: connection.connection.create_channel().await?,
            connection,
        })))
    }

    /// Closes the connection: first its channels no longer in use (see [`OpenChannel`]), then
    /// the connection itself, each within `connection-timeout`, so that a broker that stopped
    /// answering does not hold the shutdown for ever. Channels still held close with it.
    async fn close(&self) {
        let taken = self.connection.lock().await.take();
        if let Some(c) = taken {
            let limit = self.settings.connection_timeout;
            if within(limit, c.tidied()).await.is_none() {
                tracing::warn!(
                    connection = %self.settings.connection_name,
                    "channels still closing after {limit:?}; closing the connection with them"
                );
            }
            let close = c.connection.close(200, ShortString::from("OK"));
            if within(limit, close).await.is_none() {
                tracing::warn!(
                    connection = %self.settings.connection_name,
                    "the broker did not confirm the connection's close within {limit:?}"
                );
            }
        }
        self.set_status(LinkStatus::Idle);
    }

    /// Stops handing out `connection` for new channels (unless another caller has already
    /// replaced it); it closes when its last channel goes.
    async fn retire(&self, connection: &Arc<LinkConnection>) {
        let mut guard = self.connection.lock().await;
        if guard.as_ref().is_some_and(|c| Arc::ptr_eq(c, connection)) {
            *guard = None;
        }
    }
}

/// The broker's reason when it refused the connection itself (wrong credentials: 403
/// `ACCESS_REFUSED`; an unknown virtual host or no access to it: 530 `NOT_ALLOWED`), as
/// opposed to not being reachable. RabbitMQ also answers 530 when a virtual host's or a
/// user's connection limit is reached, which passes once other connections close: that one
/// is waited for like an outage.
fn refusal(e: &lapin::Error) -> Option<String> {
    match e.kind() {
        lapin::ErrorKind::ProtocolError(amqp) if matches!(amqp.get_id(), 403 | 530) => {
            let reason = amqp.get_message().to_string();
            (!reason.contains("connection limit")).then_some(reason)
        }
        _ => None,
    }
}

#[async_trait]
impl Binder for RabbitBinder {
    fn binder_type(&self) -> &str {
        "rabbit"
    }

    /// An instance given in code brings its own [`RabbitSettings`]: `spring.rabbitmq.*` in the
    /// configuration would be ignored, so it is refused instead.
    fn configure(&self, environment: &config::Value) -> BinderResult<()> {
        crate::settings::refuse_for_instance(environment)
    }

    fn describe(&self) -> String {
        let uris: Vec<String> = self.link.settings.uris.iter().map(|u| redact(u)).collect();
        format!("RabbitMQ at {}", uris.join(", "))
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

    /// The worse of its two connections' (the consumers' and the publishers').
    fn connection_state(&self) -> ConnectionState {
        ConnectionState::worst([self.link.state(), self.publisher_link.state()])
    }

    /// Closes both connections at once, each within `connection-timeout` for its channels'
    /// closes and as long again for its own.
    async fn close(&self) {
        futures::join!(self.publisher_link.close(), self.link.close());
    }
}

#[async_trait]
impl AmqpBroker for RabbitBinder {
    async fn provision(&self, plan: &TopologyPlan) -> BinderResult<()> {
        let declare =
            |what: String| move |e: lapin::Error| BinderError::declare(&what, &e).with_source(e);
        // A refused declaration closes the channel (AMQP), so each entity gets a fresh one
        // only after a failure; the happy path uses one channel.
        let ch = self.channel().await?;
        for x in &plan.exchanges {
            if x.name.starts_with("amq.") {
                continue;
            }
            let options = ExchangeDeclareOptions {
                passive: false,
                durable: x.durable,
                auto_delete: x.auto_delete,
                internal: x.internal,
                nowait: false,
            };
            ch.exchange_declare(
                ShortString::from(x.name.as_str()),
                kind(x.kind),
                options,
                convert::to_table(&x.arguments),
            )
            .await
            .map_err(declare(format!("exchange `{}`", x.name)))?;
        }
        for q in &plan.queues {
            let options = QueueDeclareOptions {
                passive: false,
                durable: q.durable,
                exclusive: q.exclusive,
                auto_delete: q.auto_delete,
                nowait: false,
            };
            ch.queue_declare(
                ShortString::from(q.name.as_str()),
                options,
                convert::to_table(&q.arguments),
            )
            .await
            .map_err(declare(format!("queue `{}`", q.name)))?;
        }
        for b in &plan.bindings {
            let what = format!(
                "binding {} -> {} ({})",
                b.source, b.destination, b.routing_key
            );
            let args = convert::to_table(&b.arguments);
            match b.destination_type {
                DestinationType::Queue => {
                    ch.queue_bind(
                        ShortString::from(b.destination.as_str()),
                        ShortString::from(b.source.as_str()),
                        ShortString::from(b.routing_key.as_str()),
                        QueueBindOptions::default(),
                        args,
                    )
                    .await
                }
                DestinationType::Exchange => {
                    ch.exchange_bind(
                        ShortString::from(b.destination.as_str()),
                        ShortString::from(b.source.as_str()),
                        ShortString::from(b.routing_key.as_str()),
                        ExchangeBindOptions::default(),
                        args,
                    )
                    .await
                }
            }
            .map_err(declare(what))?;
        }
        let _ = ch.close(200, ShortString::from("OK")).await;
        Ok(())
    }

    async fn producer(&self, spec: ProducerSpec) -> BinderResult<Box<dyn AmqpProducer>> {
        Ok(Box::new(RabbitProducer {
            link: self.publisher_link.clone(),
            state: std::sync::Mutex::default(),
            turns: Mutex::new(()),
            spec,
        }))
    }

    async fn subscribe(&self, spec: SubscriptionSpec) -> BinderResult<Box<dyn Subscription>> {
        let channel = self.channel().await?;
        if spec.prefetch > 0 {
            channel
                .basic_qos(spec.prefetch, BasicQosOptions { global: false })
                .await
                .map_err(broker)?;
        }
        let consumer = channel
            .basic_consume(
                ShortString::from(spec.queue.as_str()),
                ShortString::from(spec.consumer_tag.clone().unwrap_or_default().as_str()),
                BasicConsumeOptions {
                    no_local: false,
                    no_ack: spec.auto_ack,
                    exclusive: spec.exclusive,
                    nowait: false,
                },
                FieldTable::default(),
            )
            .await
            .map_err(|e| queue_error(e, &spec.queue))?;
        let acks = Arc::new(TagAcks::new(LapinAcks(channel.clone()), spec.prefetch));
        let source = LapinConsumer {
            channel,
            consumer: Some(consumer),
            failed: false,
        };
        Ok(Box::new(BufferedSubscription::new(
            source,
            acks,
            spec.auto_ack,
        )))
    }

    async fn inspect(&self, queue: &str) -> BinderResult<QueueInfo> {
        let ch = self.channel().await?;
        let q = ch
            .queue_declare(
                ShortString::from(queue),
                QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(|e| queue_error(e, queue))?;
        let info = QueueInfo {
            messages: q.message_count(),
            consumers: q.consumer_count(),
        };
        let _ = ch.close(200, ShortString::from("OK")).await;
        Ok(info)
    }

    async fn remove(&self, plan: &TopologyPlan) -> BinderResult<()> {
        let ch = self.channel().await?;
        for q in &plan.queues {
            ch.queue_delete(
                ShortString::from(q.name.as_str()),
                QueueDeleteOptions::default(),
            )
            .await
            .map_err(broker)?;
        }
        for x in &plan.exchanges {
            if x.name.is_empty() || x.name.starts_with("amq.") {
                continue;
            }
            ch.exchange_delete(
                ShortString::from(x.name.as_str()),
                ExchangeDeleteOptions::default(),
            )
            .await
            .map_err(broker)?;
        }
        let _ = ch.close(200, ShortString::from("OK")).await;
        Ok(())
    }
}

/// A producer: a confirm channel on the binder's publisher connection, reopened after a
/// failure.
///
/// Sends reach the channel in the order of their first poll, as one task's sends started
/// one after another expect (a [`Pipeline`](binder_core::runtime::Pipeline) keeps many in
/// flight). A send goes at once when the channel is open and no send waits for its turn;
/// otherwise it takes a turn behind the waiting ones, and the first turn opens the channel.
/// A send whose turn has come publishes when it is next polled: until then the sends behind
/// it, from any task, wait too (a `Pipeline`'s sends move while the pipeline is used).
/// After a nack the producer moves to a fresh channel, and the broker does not order sends
/// still on the old channel against later ones.
#[derive(Debug)]
struct RabbitProducer {
    link: Arc<Link>,
    /// The channel and the sends waiting for their turn. Also held while a publish is
    /// numbered for its confirm and its frames are queued (see [`RabbitProducer::send`]).
    state: std::sync::Mutex<SendState>,
    /// Taken in turn, first come first served, by the sends that cannot go at once (and by
    /// anything that opens the channel).
    turns: Mutex<()>,
    spec: ProducerSpec,
}

/// What the sends of a [`RabbitProducer`] share.
#[derive(Debug, Default)]
struct SendState {
    /// The confirm channel sends go on, once opened (each send takes a clone).
    channel: Option<LinkChannel>,
    /// Sends that took a turn and have not yet queued their publish: while there are any, a
    /// new send takes a turn too, so that it cannot overtake them.
    waiting: usize,
}

impl SendState {
    /// The open channel, if there is one.
    fn open_channel(&self) -> Option<LinkChannel> {
        self.channel
            .as_ref()
            .filter(|ch| ch.status().connected())
            .cloned()
    }
}

/// A send counted among the waiting ones of a [`SendState`] until dropped: while it waits
/// for its turn, then while it holds the turn, until its publish is queued (or it fails).
struct Waiting<'a>(&'a std::sync::Mutex<SendState>);

impl<'a> Waiting<'a> {
    fn new(state: &'a std::sync::Mutex<SendState>) -> Self {
        lock(state).waiting += 1;
        Waiting(state)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        lock(self.0).waiting -= 1;
    }
}

/// A send's turn (see [`RabbitProducer::take_turn`]): dropping it lets the next one go.
struct Turn<'a> {
    _waiting: Waiting<'a>,
    _turn: tokio::sync::MutexGuard<'a, ()>,
}

impl RabbitProducer {
    /// The open channel, if there is one and no send waits for its turn.
    fn channel_now(&self) -> Option<LinkChannel> {
        let state = lock(&self.state);
        if state.waiting > 0 {
            return None;
        }
        state.open_channel()
    }

    /// Waits for this send's turn behind the sends already waiting, then for the channel
    /// (opening it if need be).
    async fn take_turn(&self) -> BinderResult<(LinkChannel, Turn<'_>)> {
        let waiting = Waiting::new(&self.state);
        let turn = self.turns.lock().await;
        let ch = self.open_in_turn().await?;
        Ok((
            ch,
            Turn {
                _waiting: waiting,
                _turn: turn,
            },
        ))
    }

    /// The open channel, else a new one; called with `turns` held.
    async fn open_in_turn(&self) -> BinderResult<LinkChannel> {
        let open = lock(&self.state).open_channel();
        if let Some(ch) = open {
            return Ok(ch);
        }
        let ch = self.link.channel().await?;
        ch.confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(broker)?;
        lock(&self.state).channel = Some(ch.clone());
        Ok(ch)
    }

    /// The open channel, else a new one opened in turn (for what is not a send).
    async fn channel(&self) -> BinderResult<LinkChannel> {
        let open = lock(&self.state).open_channel();
        if let Some(ch) = open {
            return Ok(ch);
        }
        let _turn = self.turns.lock().await;
        self.open_in_turn().await
    }

    /// Stops handing out `ch` for new sends (unless another send already replaced it).
    fn retire(&self, ch: &LinkChannel) {
        let mut state = lock(&self.state);
        if state
            .channel
            .as_ref()
            .is_some_and(|c| c.id() == ch.id() && Arc::ptr_eq(c.connection(), ch.connection()))
        {
            state.channel = None;
        }
    }

    async fn send(
        &self,
        exchange: &str,
        routing_key: &str,
        mut message: Message,
    ) -> BinderResult<()> {
        if message.properties.delivery_mode.is_none() {
            message.properties.delivery_mode = Some(self.spec.delivery_mode);
        }
        let fail = |reason: String| BinderError::not_confirmed(exchange, routing_key, reason);
        let props = convert::properties(&message);
        let (ch, mut turn) = match self.channel_now() {
            Some(ch) => (ch, None),
            None => {
                let (ch, turn) = self.take_turn().await?;
                (ch, Some(turn))
            }
        };
        // lapin numbers a publish for its confirm and then queues its frames, both in the
        // publish's first poll. Concurrent sends must do the two in the same order, or the
        // broker's ack (or nack) for one message answers another's send: the first poll runs
        // under `state`. Its turn, if it took one, ends after it. Later polls only wait for
        // the write.
        let mut publish = std::pin::pin!(ch.basic_publish(
            ShortString::from(exchange),
            ShortString::from(routing_key),
            BasicPublishOptions::default(),
            &message.payload,
            props,
        ));
        let mut first_poll = true;
        let confirm = std::future::poll_fn(|cx| {
            if !std::mem::take(&mut first_poll) {
                return publish.as_mut().poll(cx);
            }
            let queued = {
                let _state = lock(&self.state);
                publish.as_mut().poll(cx)
            };
            drop(turn.take());
            queued
        })
        .await
        .map_err(|e| fail(e.to_string()))?
        .await
        .map_err(|e| fail(e.to_string()))?;
        match confirm {
            Confirmation::Ack(_) => Ok(()),
            Confirmation::Nack(_) => {
                // Some nacks are the channel's, not the message's: RabbitMQ nacks every
                // publish on a channel whose quorum-queue leader was lost before the channel
                // first reached the new one, for as long as the old leader is down. The next
                // send gets a fresh channel; this one closes when its sends in flight end.
                self.retire(&ch);
                Err(fail("the broker refused the message (nack)".into()))
            }
            Confirmation::NotRequested => Err(fail("publisher confirms are not enabled".into())),
        }
    }
}

impl AmqpProducer for RabbitProducer {
    fn exchange(&self) -> &str {
        &self.spec.exchange
    }

    /// The `frame_max` negotiated on the publisher connection (connecting if need be).
    fn frame_max(&self) -> BinderFuture<'_, BinderResult<Option<u32>>> {
        BinderFuture::boxed(async move {
            let ch = self.channel().await?;
            // lapin negotiates 0 (no limit) into `u32::MAX`.
            let frame_max = ch.connection().connection.configuration().frame_max();
            Ok((frame_max != 0 && frame_max != u32::MAX).then_some(frame_max))
        })
    }

    fn publish_to<'a>(
        &'a self,
        exchange: &'a str,
        routing_key: &'a str,
        message: Message,
    ) -> BinderFuture<'a, BinderResult<()>> {
        BinderFuture::boxed(self.send(exchange, routing_key, message))
    }
}

/// A subscription's channel as the shared AMQP settlement machinery sees it: each frame is
/// sent on the channel itself (a delivery's `Acker` goes through lapin's internal queue, so
/// its frame could follow an ack sent after it), and nothing waits for a write.
#[derive(Debug)]
struct LapinAcks(LinkChannel);

impl AckChannel for LapinAcks {
    fn ack(&self, tag: u64) -> BinderResult<()> {
        queued(self.0.basic_ack(tag, BasicAckOptions { multiple: false }))
    }

    fn ack_up_to(&self, tag: u64) -> BinderResult<()> {
        queued(self.0.basic_ack(tag, BasicAckOptions { multiple: true }))
    }

    fn requeue(&self, tag: u64) -> BinderResult<()> {
        queued(self.0.basic_nack(
            tag,
            BasicNackOptions {
                multiple: false,
                requeue: true,
            },
        ))
    }

    fn reject(&self, tag: u64) -> BinderResult<()> {
        queued(
            self.0
                .basic_reject(tag, BasicRejectOptions { requeue: false }),
        )
    }
}

/// The result of a frame that is queued on its first poll (acks, nacks and rejects have no
/// reply to wait for); a write that fails means the channel is gone, and the broker
/// redelivers.
fn queued(
    frame: impl std::future::Future<Output = Result<impl Sized, lapin::Error>>,
) -> BinderResult<()> {
    frame
        .now_or_never()
        .map_or(Ok(()), |r| r.map(drop).map_err(broker))
}

/// A lapin consumer as a [`DeliverySource`]; `None` once cancelled.
#[derive(Debug)]
struct LapinConsumer {
    /// Closed when the subscription and every unsettled delivery are gone, so the broker
    /// returns what was never settled to the queue.
    channel: LinkChannel,
    consumer: Option<lapin::Consumer>,
    /// The consumer reported an error while a batch was taken: the next wait ends it.
    failed: bool,
}

impl DeliverySource for LapinConsumer {
    type Delivery = lapin::message::Delivery;
    type Channel = LapinAcks;

    fn tag(delivery: &Self::Delivery) -> u64 {
        delivery.delivery_tag
    }

    fn inbound(d: Self::Delivery, settler: Settler, recent: &mut Recent) -> Inbound {
        Inbound {
            content: Arc::new(Published {
                route: recent.route(d.exchange.as_str(), d.routing_key.as_str()),
                message: convert::message_sharing(d.data, &d.properties, recent),
            }),
            redelivered: d.redelivered,
            settler,
        }
    }

    /// Waits for a delivery, then takes along whatever lapin has already buffered.
    async fn receive(&mut self, into: &mut VecDeque<Self::Delivery>, max: usize) -> bool {
        if self.failed {
            return false;
        }
        let Some(consumer) = self.consumer.as_mut() else {
            return false;
        };
        // Cancel-safe: lapin keeps deliveries in the consumer's buffer.
        match consumer.next().await {
            Some(Ok(d)) => into.push_back(d),
            Some(Err(e)) => {
                // The channel or connection failed; the runtime subscribes again after its
                // recovery interval.
                tracing::warn!(error = %e, "consumer stopped");
                return false;
            }
            None => return false,
        }
        // A failure found here ends the next wait instead: this batch is handed out first.
        self.try_receive(into, max.saturating_sub(1));
        true
    }

    /// What lapin has already buffered, without waiting; a failure it meets (the channel or
    /// connection gone) ends the next wait.
    fn try_receive(&mut self, into: &mut VecDeque<Self::Delivery>, max: usize) -> usize {
        let Some(consumer) = self.consumer.as_mut().filter(|_| !self.failed) else {
            return 0;
        };
        let before = into.len();
        while into.len() - before < max {
            match consumer.next().now_or_never() {
                Some(Some(Ok(d))) => into.push_back(d),
                Some(Some(Err(e))) => {
                    tracing::warn!(error = %e, "consumer stopped");
                    self.failed = true;
                    break;
                }
                Some(None) => {
                    self.failed = true;
                    break;
                }
                None => break,
            }
        }
        into.len() - before
    }

    async fn cancel(
        &mut self,
        _channel: &LapinAcks,
        auto_ack: bool,
        into: &mut VecDeque<Self::Delivery>,
    ) -> BinderResult<()> {
        let Some(mut consumer) = self.consumer.take() else {
            return Ok(());
        };
        let cancelled = self
            .channel
            .basic_cancel(consumer.tag(), BasicCancelOptions::default())
            .await
            .map_err(broker);
        // Auto-ack deliveries the broker sent before its cancel-ok cannot go back: they are
        // in lapin's buffer now, and stay to be handed out, even when the cancel failed (a
        // closed channel).
        if auto_ack {
            while let Some(Some(Ok(d))) = consumer.next().now_or_never() {
                into.push_back(d);
            }
        }
        cancelled
    }
}

/// A consumer dropped without `cancel` (its subscription's task was aborted, its owner
/// panicked; the subscription has given back what it held by now) is cancelled *before* the
/// channel closes. Left to lapin, a dropped consumer is cancelled on a task of its own that
/// races the channel's close; when the close wins, lapin reports the failed cancel as a
/// connection error, which fails every producer and subscription sharing the connection.
impl Drop for LapinConsumer {
    fn drop(&mut self) {
        let Some(consumer) = self.consumer.take() else {
            return;
        };
        let channel = self.channel.clone();
        self.channel.connection().tidy(async move {
            let _ = channel
                .basic_cancel(consumer.tag(), BasicCancelOptions::default())
                .await;
            // Cancelling: dropping the consumer now sends nothing more, and the channel
            // closes when its last handle (this one, or an unsettled delivery's) goes.
            drop(consumer);
            drop(channel);
        });
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::within;

    #[tokio::test(start_paused = true)]
    async fn a_zero_limit_waits_for_ever_and_others_give_up() {
        let slow = async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            7
        };
        assert_eq!(within(Duration::ZERO, slow).await, Some(7));
        let never = std::future::pending::<()>();
        assert_eq!(within(Duration::from_millis(300), never).await, None);
    }
}
