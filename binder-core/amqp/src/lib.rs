//! What the AMQP 0-9-1 binders (`embedded` over the in-process engine, `rabbit` over lapin)
//! share, so each implements only what its client differs in:
//!
//! * [`RabbitBindingProperties`]: the `spring.cloud.stream.rabbit.*` extension properties
//!   (Spring Cloud Stream's RabbitMQ binder's names and defaults) and their checks, registered
//!   as the `rabbit` namespace of the configuration; [`rabbit`] reads a binding's;
//! * [`AmqpBroker`]: the broker-level operations a binder implements (apply a
//!   [`TopologyPlan`](topology::TopologyPlan), open producers on exchanges and subscriptions
//!   on queues), and [`bind_consumer`] / [`bind_producer`], the framework's binder SPI built
//!   on them (a producer routes by `routingKey` or `routingKeyExpression`, and a partitioned
//!   output's message to `<key>-<partition>`);
//! * [`topology`]: Spring Cloud Stream's RabbitMQ topology for a binding (exchanges, queues,
//!   dead-letter queues, bindings), as data that `streamctl plan` prints;
//! * [`dead_letter`](republish_headers): the `x-exception-*` headers of a republished failure,
//!   sized to the connection's `frame_max`;
//! * [`AckCoalescer`] and [`TagAcks`]: settling deliveries by tag, many acks sent as one
//!   `basic.ack multiple` (at prefetch 1, each alone), never covering a rejected or requeued
//!   delivery;
//! * [`BufferedSubscription`]: a [`Subscription`](binder_core::binder::Subscription) over a
//!   [`DeliverySource`] (one AMQP consumer), taking deliveries in batches and handing them out
//!   without waiting;
//! * [`asyncapi`]: the AMQP bindings (0.3.0) of the AsyncAPI document: exchanges, group
//!   queues, dead-letter queues;
//! * [`convert`]: the framework's [`Message`](binder_core::Message) to and from AMQP
//!   properties and field tables (`amq-protocol`'s types, which lapin speaks), and [`Recent`]:
//!   the route and properties consecutive deliveries share, converted once.
//!
//! A binder for an AMQP client implements [`AckChannel`] over its channel and
//! [`DeliverySource`] over its consumer:
//!
//! ```
//! use std::collections::VecDeque;
//! use std::sync::Arc;
//!
//! use binder_amqp::{AckChannel, BufferedSubscription, DeliverySource, Recent, TagAcks};
//! use binder_core::binder::{BinderResult, Inbound, Settler, Subscription};
//! use binder_core::Message;
//!
//! /// A channel that sends nothing (a real one queues `basic.ack` and friends).
//! #[derive(Debug)]
//! struct Quiet;
//!
//! impl AckChannel for Quiet {
//!     fn ack(&self, _tag: u64) -> BinderResult<()> { Ok(()) }
//!     fn ack_up_to(&self, _tag: u64) -> BinderResult<()> { Ok(()) }
//!     fn requeue(&self, _tag: u64) -> BinderResult<()> { Ok(()) }
//!     fn reject(&self, _tag: u64) -> BinderResult<()> { Ok(()) }
//! }
//!
//! /// A consumer with the deliveries it was given, tagged 1, 2, …
//! #[derive(Debug)]
//! struct Given(VecDeque<(u64, &'static str)>);
//!
//! impl DeliverySource for Given {
//!     type Delivery = (u64, &'static str);
//!     type Channel = Quiet;
//!     fn tag(d: &Self::Delivery) -> u64 { d.0 }
//!     fn inbound(d: Self::Delivery, settler: Settler, _: &mut Recent) -> Inbound {
//!         Inbound::owned(Message::new(d.1), "x", "k", false, settler)
//!     }
//!     async fn receive(&mut self, into: &mut VecDeque<Self::Delivery>, max: usize) -> bool {
//!         let n = self.0.len().min(max);
//!         into.extend(self.0.drain(..n));
//!         n > 0
//!     }
//!     async fn cancel(
//!         &mut self, _: &Quiet, _: bool, _: &mut VecDeque<Self::Delivery>,
//!     ) -> BinderResult<()> {
//!         Ok(())
//!     }
//! }
//!
//! # futures::executor::block_on(async {
//! let source = Given(VecDeque::from([(1, "a"), (2, "b")]));
//! let mut sub = BufferedSubscription::new(source, Arc::new(TagAcks::new(Quiet, 10)), false);
//! let first = sub.next().await.unwrap();
//! assert_eq!(&first.message().payload[..], b"a");
//! assert_eq!(first.settler.tag(), 1);
//! # });
//! ```

mod acks;
pub mod asyncapi;
mod bind;
mod broker;
pub mod convert;
mod dead_letter;
mod properties;
mod recent;
mod routing;
mod settle;
mod subscription;
pub mod topology;

pub use acks::{ACK_BATCH, AckCoalescer, ack_batch_for};
pub use bind::{bind_consumer, bind_producer};
pub use broker::{AmqpBroker, AmqpProducer, ProducerSpec, QueueInfo, SubscriptionSpec};
pub use dead_letter::{
    ATTEMPTS_HEADER, DEFAULT_FRAME_MAX, DeadLetter, Fitted, FrameBudget, HeadersTooLarge,
    header_frame_size, republish_headers, table_size, value_size,
};
pub use properties::{
    AlternateExchange, AlternateExchangeBinding, ExchangeType, OverflowBehavior, QuorumProperties,
    RABBIT_EXTENSION, RABBIT_NAMESPACE, RabbitBindingProperties, RabbitCommonProperties,
    RabbitConsumerProperties, RabbitProducerProperties, rabbit,
};
pub use recent::Recent;
pub use settle::{AckChannel, TagAcks};
pub use subscription::{BATCH, BufferedSubscription, DeliverySource};
