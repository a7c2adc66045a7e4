//! The binder SPI: what a middleware must offer so the runtime can carry messages over it.
//!
//! The runtime asks a [`Binder`] to bind each binding: [`Binder::bind_producer`] gives a
//! [`Producer`] that publishes with confirms, [`Binder::bind_consumer`] a [`BoundConsumer`]
//! that opens [`Subscription`]s (again after a loss) and settles, the middleware's way, what
//! the application gives up on. What the middleware needs for a binding (exchanges and
//! queues, streams and consumer groups, subjects) is the binder's business, as are its own
//! extension properties: nothing here is AMQP-specific (`binder-amqp` holds what the AMQP
//! binders share).
//!
//! A delivery ([`Inbound`]) shares its message with the binder ([`Published`]: no copy per
//! delivery) and carries a [`Settler`], which settles it once through the subscription's
//! [`SettleByTag`] (no allocation per delivery) and puts it back if it is dropped unsettled.
//! Everything the runtime does (retries, failure policy, lifecycle) is built on these few
//! operations; the conformance kit checks that a binder does them faithfully.

mod connection;
mod consumer;
mod error;
mod settler;

pub use connection::ConnectionState;
pub use consumer::{
    Batching, BoundConsumer, DeadLetterRoute, FailedDelivery, FailureAction, GaveUp,
};
pub use error::{BinderError, BinderErrorKind, BinderResult};
pub use settler::{SettleByTag, Settler};

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use async_trait::async_trait;

use crate::config::BindingConfig;
use crate::message::Message;

/// How a delivery is settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settlement {
    /// Done: remove it.
    Ack,
    /// Put it back for another attempt (`redelivered` set).
    Requeue,
    /// Refuse it without requeue: the broker dead-letters it if the queue has a DLX.
    Reject,
}

/// The future of an SPI operation that often completes at once: a binder that settles or
/// delivers without waiting returns [`BinderFuture::ready`] (no allocation per message), one
/// that must wait returns [`BinderFuture::boxed`]. Callers simply `.await` it.
pub enum BinderFuture<'a, T> {
    /// Already complete (taken by the first poll).
    Ready(Option<T>),
    /// Still to run.
    Boxed(Pin<Box<dyn Future<Output = T> + Send + 'a>>),
}

impl<'a, T> BinderFuture<'a, T> {
    /// A future that is already complete.
    pub fn ready(value: T) -> Self {
        BinderFuture::Ready(Some(value))
    }

    /// A future that has to run.
    pub fn boxed(fut: impl Future<Output = T> + Send + 'a) -> Self {
        BinderFuture::Boxed(Box::pin(fut))
    }
}

// The value is only moved out, never pinned.
impl<T> Unpin for BinderFuture<'_, T> {}

impl<T> Future for BinderFuture<'_, T> {
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        match self.get_mut() {
            BinderFuture::Ready(value) => {
                Poll::Ready(value.take().expect("a ready BinderFuture is polled once"))
            }
            BinderFuture::Boxed(fut) => fut.as_mut().poll(cx),
        }
    }
}

impl<T> fmt::Debug for BinderFuture<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BinderFuture::Ready(_) => "BinderFuture::Ready",
            BinderFuture::Boxed(_) => "BinderFuture::Boxed",
        })
    }
}

/// A message as it was published: where it was sent and what it carries.
///
/// A delivery shares it with the binder ([`Inbound::content`]) rather than copying it: the
/// embedded engine keeps this very record until the delivery is settled (to redeliver it
/// after a requeue) and routes it to every queue by reference.
///
/// 56 bytes: the message (48) and one pointer to its [`Route`], which every message published
/// to the same exchange with the same routing key can share.
#[derive(Debug, Clone, PartialEq)]
pub struct Published {
    /// Where it was published: the exchange and the routing key.
    pub route: Route,
    /// The message.
    pub message: Message,
}

impl Published {
    /// A message published to `exchange` with `routing_key` (a route of its own; a binder
    /// that publishes many messages with the same pair shares one [`Route`] between them).
    pub fn new(
        exchange: impl Into<std::sync::Arc<str>>,
        routing_key: impl Into<std::sync::Arc<str>>,
        message: Message,
    ) -> Self {
        Published {
            route: Route::new(exchange, routing_key),
            message,
        }
    }

    /// The exchange it was published to.
    pub fn exchange(&self) -> &std::sync::Arc<str> {
        self.route.exchange()
    }

    /// The routing key it was published with.
    pub fn routing_key(&self) -> &std::sync::Arc<str> {
        self.route.routing_key()
    }
}

/// Where a message was published: an exchange and a routing key, behind one shared pointer
/// (cloning it clones the pointer), so that the messages a binder publishes with the same
/// pair carry one pointer each instead of two names.
#[derive(Clone, PartialEq, Eq)]
pub struct Route(std::sync::Arc<RouteNames>);

#[derive(PartialEq, Eq)]
struct RouteNames {
    exchange: std::sync::Arc<str>,
    routing_key: std::sync::Arc<str>,
}

impl Route {
    /// The route of `exchange` and `routing_key`.
    pub fn new(
        exchange: impl Into<std::sync::Arc<str>>,
        routing_key: impl Into<std::sync::Arc<str>>,
    ) -> Self {
        Route(std::sync::Arc::new(RouteNames {
            exchange: exchange.into(),
            routing_key: routing_key.into(),
        }))
    }

    /// The exchange.
    pub fn exchange(&self) -> &std::sync::Arc<str> {
        &self.0.exchange
    }

    /// The routing key.
    pub fn routing_key(&self) -> &std::sync::Arc<str> {
        &self.0.routing_key
    }

    /// How many values hold this route (records, and the engine's per-channel cache): the
    /// memory count charges it to a message that holds it with at most one other.
    pub fn holders(&self) -> usize {
        std::sync::Arc::strong_count(&self.0)
    }

    /// Whether this is the route of `exchange` and `routing_key`.
    pub fn is(&self, exchange: &str, routing_key: &str) -> bool {
        *self.0.exchange == *exchange && *self.0.routing_key == *routing_key
    }
}

impl fmt::Debug for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Route")
            .field("exchange", &self.0.exchange)
            .field("routing_key", &self.0.routing_key)
            .finish()
    }
}

/// A delivery from a subscription.
#[derive(Debug)]
pub struct Inbound {
    /// The message and where it was published, shared with the binder.
    pub content: std::sync::Arc<Published>,
    /// It was delivered before.
    pub redelivered: bool,
    /// Settles it (a no-op for auto-ack subscriptions).
    pub settler: Settler,
}

impl Inbound {
    /// A delivery of a message the binder does not keep (its own copy is the delivery's).
    ///
    /// ```
    /// use binder_core::binder::{Inbound, Settler};
    /// use binder_core::Message;
    ///
    /// let inbound = Inbound::owned(
    ///     Message::new("hello"),
    ///     "orders",
    ///     "orders",
    ///     false,
    ///     Settler::already_settled(),
    /// );
    /// assert_eq!(&inbound.message().payload[..], b"hello");
    /// assert_eq!(inbound.exchange(), "orders");
    /// ```
    pub fn owned(
        message: Message,
        exchange: impl Into<std::sync::Arc<str>>,
        routing_key: impl Into<std::sync::Arc<str>>,
        redelivered: bool,
        settler: Settler,
    ) -> Self {
        Inbound {
            content: std::sync::Arc::new(Published::new(exchange, routing_key, message)),
            redelivered,
            settler,
        }
    }

    /// The message.
    pub fn message(&self) -> &Message {
        &self.content.message
    }

    /// The exchange it was published to.
    pub fn exchange(&self) -> &str {
        self.content.exchange()
    }

    /// The routing key it was published with.
    pub fn routing_key(&self) -> &str {
        self.content.routing_key()
    }
}

/// A stream of deliveries from one queue.
#[async_trait]
pub trait Subscription: fmt::Debug + Send {
    /// The next delivery; `None` once cancelled (after an auto-ack subscription has handed
    /// out what it had received, see [`Subscription::cancel`]). Ready at once, holding the
    /// delivery, when one is already buffered: take a ready result (`now_or_never`) before
    /// racing the future with anything else, since dropping it then drops the delivery (an
    /// auto-ack one is lost, another goes back to the queue). Dropping a future that is still
    /// waiting loses nothing.
    fn next(&mut self) -> BinderFuture<'_, Option<Inbound>>;
    /// Sends the settlements held back for batching (see [`SettleByTag::settle_tag`]). A
    /// binder sends them itself when `next` is about to wait for the broker; whoever stops
    /// calling `next` for a while without [`cancel`](Subscription::cancel)ling must call this
    /// first, or acks of settled deliveries may stay held until it comes back. The runtime
    /// does before a pause, a handler that waits and a wait for a handler slot; the default
    /// has nothing to send.
    async fn flush(&mut self) -> BinderResult<()> {
        Ok(())
    }
    /// Stops deliveries. Unsettled ones can still be settled; the binder returns any that
    /// are never settled to the queue when it closes. Buffered deliveries not yet handed out
    /// go back to the queue, except in auto-ack mode, where the broker already counts them
    /// consumed: `next` then hands them out, without waiting, before it returns `None`.
    async fn cancel(&mut self) -> BinderResult<()>;
}

/// Publishes a binding's messages with confirms.
///
/// The method returns a [`BinderFuture`], so a binder whose confirm is decided at once (the
/// embedded engine) costs no allocation per message; one that waits for a broker boxes its
/// future. Either way the caller awaits the confirm. A binder may publish when the method is
/// called rather than when the future is first polled (the embedded one does, unless the
/// memory alarm blocks publishers): dropping the future does not withdraw the message, it
/// only gives up on its confirm. The runtime's outputs are lazy either way (nothing is sent
/// until `Output::send` is awaited).
pub trait Producer: fmt::Debug + Send + Sync {
    /// Where the messages go, in the middleware's terms (an exchange, a topic, a subject).
    fn destination(&self) -> &str;
    /// Publishes a message and waits for the broker's confirm. `partition` is the partition
    /// the runtime chose for it (`partitionKeyExpression`), for a partitioned output; where
    /// that partition is in the middleware (an AMQP routing key `<destination>-<n>`, a topic
    /// partition) is the binder's business, as is any routing of its own (the AMQP binders'
    /// `routingKey` and `routingKeyExpression`).
    fn publish<'a>(
        &'a self,
        message: Message,
        partition: Option<u32>,
    ) -> BinderFuture<'a, BinderResult<()>>;
    /// Sets what this producer would set on every message it publishes that lacks it (the
    /// AMQP binders' delivery mode). The runtime applies it once, to the properties an output
    /// shares between all the messages it sends (see [`SharedProperties`](crate::SharedProperties)),
    /// so that the producer finds them complete and need not copy them per message. The
    /// default sets nothing.
    fn complete_properties(&self, properties: &mut crate::message::Properties) {
        let _ = properties;
    }
}

/// What waits in a consumer's source ([`Binder::backlog`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backlog {
    /// Ready messages (not counting delivered, unsettled ones).
    pub messages: u32,
    /// Consumers reading it.
    pub consumers: u32,
}

/// Whether a binding consumes (input) or publishes (output).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BindingRole {
    /// An input.
    Consumer,
    /// An output.
    Producer,
}

impl BindingRole {
    /// Guesses a binding's role when no code says it (`streamctl plan`, the AsyncAPI
    /// document of a configuration): written `consumer`/`producer` sections decide, then a
    /// `group` (consumer), then SCSt's names (`input`, `…-in-<n>` consume; `output`,
    /// `…-out-<n>` publish). Anything else is taken as a producer.
    pub fn infer(binding: &BindingConfig) -> BindingRole {
        let name = binding.name.as_str();
        let functional = |marker: &str| {
            name.rsplit_once('-').is_some_and(|(head, index)| {
                head.ends_with(marker) && index.chars().all(|c| c.is_ascii_digit())
            })
        };
        if binding.configured.consumer {
            BindingRole::Consumer
        } else if binding.configured.producer {
            BindingRole::Producer
        } else if binding.group.is_some() || name == "input" || functional("-in") {
            BindingRole::Consumer
        } else {
            BindingRole::Producer
        }
    }
}

/// A middleware connection: binds consumers and producers for bindings.
#[async_trait]
pub trait Binder: fmt::Debug + Send + Sync {
    /// The binder type (`embedded`, `rabbit`).
    fn binder_type(&self) -> &str;
    /// Where this binder's messages go, for the startup log: the broker's addresses (without
    /// passwords), or what an in-process broker keeps. The binder type by default.
    fn describe(&self) -> String {
        self.binder_type().to_owned()
    }
    /// Prepares what a consumer of `binding` needs in the middleware (idempotently: an AMQP
    /// binder declares its exchange, queues and dead-letter queue) and returns the consumer,
    /// which subscribes when the runtime asks it to.
    async fn bind_consumer(&self, binding: &BindingConfig) -> BinderResult<Box<dyn BoundConsumer>>;
    /// Prepares what a producer of `binding` needs (idempotently) and opens its producer.
    async fn bind_producer(&self, binding: &BindingConfig) -> BinderResult<Box<dyn Producer>>;
    /// What waits in `source` (a name [`BoundConsumer::sources`] gives, e.g. an AMQP queue):
    /// ready messages, not counting those delivered and unsettled, and its consumers. For
    /// operators and tests; a binder that cannot tell says so with
    /// [`BinderErrorKind::Unsupported`], the default.
    async fn backlog(&self, source: &str) -> BinderResult<Backlog> {
        Err(BinderError::new(
            BinderErrorKind::Unsupported,
            format!(
                "the `{}` binder cannot tell what waits in `{source}`",
                self.binder_type()
            ),
        ))
    }
    /// The state of the binder's connection to its middleware, for health reports and
    /// metrics: cheap, never waits (it reads what the binder already knows). A binder with
    /// several connections reports the worst ([`ConnectionState::worst`]). The default,
    /// [`ConnectionState::Unknown`], is for binders that cannot tell.
    fn connection_state(&self) -> ConnectionState {
        ConnectionState::Unknown
    }
    /// Closes connections; unsettled deliveries go back to where they came from.
    async fn close(&self);
    /// Hears of a binding this binder serves, once the application's startup has bound all
    /// of its bindings (or, for a dynamic destination, once it is opened), so that it can say
    /// what of the binding's configuration it cannot keep (the embedded binder warns that
    /// durable queues are kept in memory only). The default says nothing.
    fn bound(&self, binding: &BindingConfig, role: BindingRole) {
        let _ = (binding, role);
    }
    /// Takes the configuration's environment for this binder when the binder was given in code
    /// (`AppBuilder::binder`) rather than created from the configuration: it applies the
    /// settings it can to itself and refuses, naming the key, those it cannot, so none is
    /// silently ignored. The default accepts anything, for binders with no settings of their
    /// own.
    fn configure(&self, environment: &config::Value) -> BinderResult<()> {
        let _ = environment;
        Ok(())
    }
}

/// A binder type that can be created from configuration, registered with `inventory`:
///
/// ```
/// use std::sync::Arc;
/// use binder_core::binder::{Binder, BinderError, BinderRegistration, BinderResult};
///
/// fn create(_environment: &config::Value) -> BinderResult<Arc<dyn Binder>> {
///     Err(BinderError::broker("an example that builds no binder"))
/// }
///
/// inventory::submit! { BinderRegistration::new("example", create) }
///
/// assert!(binder_core::binder::registered().any(|r| r.binder_type == "example"));
/// ```
#[derive(Debug)]
pub struct BinderRegistration {
    /// The type name the configuration uses.
    pub binder_type: &'static str,
    /// Creates a binder from the configuration tree its binder configuration sees
    /// (`StreamConfig::binder_environment`: e.g. `spring.rabbitmq.*`).
    pub create: fn(&config::Value) -> BinderResult<std::sync::Arc<dyn Binder>>,
}

impl BinderRegistration {
    /// A registration.
    pub const fn new(
        binder_type: &'static str,
        create: fn(&config::Value) -> BinderResult<std::sync::Arc<dyn Binder>>,
    ) -> Self {
        BinderRegistration {
            binder_type,
            create,
        }
    }
}

inventory::collect!(BinderRegistration);

/// The registered binder types.
pub fn registered() -> impl Iterator<Item = &'static BinderRegistration> {
    inventory::iter::<BinderRegistration>.into_iter()
}
