//! The framework's binder SPI on an [`AmqpBroker`]: a binding's topology planned as Spring
//! Cloud Stream's RabbitMQ binder plans it, declared, and its consumer and producer opened,
//! with the `rabbit.*` extension properties deciding prefetch, acknowledgement and what
//! becomes of a message the application gave up on.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use binder_core::binder::{
    Batching, BinderError, BinderFuture, BinderResult, BoundConsumer, DeadLetterRoute,
    FailedDelivery, FailureAction, GaveUp, Producer, Settlement, Settler, Subscription,
};
use binder_core::config::{AcknowledgeMode, BindingConfig};
use binder_core::message::{DeliveryMode, Message, Properties};

use crate::broker::{AmqpBroker, AmqpProducer, ProducerSpec, SubscriptionSpec};
use crate::dead_letter::{DeadLetter, Fitted, FrameBudget, HeadersTooLarge, republish_headers};
use crate::properties::rabbit;
use crate::routing::RoutingKey;
use crate::topology::{anonymous_suffix, plan_consumer, plan_producer};

/// Declares a consumer binding's topology on `broker` and returns its consumer: one source
/// per queue (a partitioned consumer has one per partition index), subscribed as the
/// binding's `rabbit.*` consumer properties say.
pub async fn bind_consumer(
    broker: Arc<dyn AmqpBroker>,
    binding: &BindingConfig,
) -> BinderResult<Box<dyn BoundConsumer>> {
    let topology = plan_consumer(binding, &anonymous_suffix());
    broker.provision(&topology.plan).await?;
    let rabbit = &rabbit(binding).consumer;
    let exhausted = match Decision::of(binding, topology.dead_letter.as_ref()) {
        Decision::Drop => Exhausted::Drop,
        Decision::Requeue => Exhausted::Requeue,
        Decision::Reject => Exhausted::Reject,
        Decision::Republish {
            exchange,
            routing_key,
        } => {
            let producer = broker
                .producer(ProducerSpec {
                    exchange: exchange.clone(),
                    delivery_mode: rabbit.republish_delivery_mode,
                })
                .await?;
            Exhausted::Republish(Republish {
                producer,
                exchange,
                routing_key,
                delivery_mode: rabbit.republish_delivery_mode,
                headroom: rabbit.frame_max_headroom,
            })
        }
    };
    let batching = rabbit.batching(binding);
    let prefetch = rabbit.effective_prefetch(binding);
    let specs = topology
        .queues
        .iter()
        .enumerate()
        .map(|(i, queue)| SubscriptionSpec {
            queue: queue.clone(),
            prefetch,
            auto_ack: rabbit.acknowledge_mode == AcknowledgeMode::None,
            exclusive: rabbit.exclusive,
            consumer_tag: rabbit
                .consumer_tag_prefix
                .as_ref()
                .map(|p| format!("{p}#{i}")),
        })
        .collect();
    Ok(Box::new(AmqpConsumer {
        broker,
        queues: topology.queues,
        specs,
        acknowledge_mode: rabbit.acknowledge_mode,
        recovery_interval: Duration::from_millis(rabbit.recovery_interval),
        exhausted,
        batching,
    }))
}

/// Declares a producer binding's topology on `broker` (its exchange, and the queues of its
/// `requiredGroups`) and opens its producer.
pub async fn bind_producer(
    broker: &dyn AmqpBroker,
    binding: &BindingConfig,
) -> BinderResult<Box<dyn Producer>> {
    let routing = RoutingKey::of(binding)?;
    let topology = plan_producer(binding);
    broker.provision(&topology.plan).await?;
    let delivery_mode = rabbit(binding).producer.delivery_mode;
    let producer = broker
        .producer(ProducerSpec {
            exchange: topology.exchange,
            delivery_mode,
        })
        .await?;
    Ok(Box::new(AmqpOutput {
        producer,
        routing,
        delivery_mode,
    }))
}

/// An AMQP producer as the SPI's [`Producer`]: it routes each message by the binding's
/// routing key.
#[derive(Debug)]
struct AmqpOutput {
    producer: Box<dyn AmqpProducer>,
    routing: RoutingKey,
    /// What the producer sets on a message without a delivery mode (`deliveryMode`).
    delivery_mode: DeliveryMode,
}

impl Producer for AmqpOutput {
    fn destination(&self) -> &str {
        self.producer.exchange()
    }

    fn publish<'a>(
        &'a self,
        message: Message,
        partition: Option<u32>,
    ) -> BinderFuture<'a, BinderResult<()>> {
        match self.routing.of_message(&message, partition) {
            Ok(Cow::Borrowed(key)) => self.producer.publish(key, message),
            // A key computed per message lives as long as its publish.
            Ok(Cow::Owned(key)) => {
                BinderFuture::boxed(async move { self.producer.publish(&key, message).await })
            }
            Err(e) => BinderFuture::ready(Err(e)),
        }
    }

    fn complete_properties(&self, properties: &mut Properties) {
        properties.delivery_mode.get_or_insert(self.delivery_mode);
    }
}

/// What a binding does with a delivery that failed for good, as its configuration decides.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Decision {
    /// `acknowledgeMode: NONE`: nothing to settle, the message is gone.
    Drop,
    /// `republishToDlq` with `autoBindDlq`: republish to this exchange with this key.
    Republish {
        exchange: String,
        routing_key: String,
    },
    /// `requeueRejected`.
    Requeue,
    /// Reject without requeue: the broker dead-letters it if the queue has a DLX.
    Reject,
}

impl Decision {
    /// Decides for a binding; `dead_letter` is the exchange and routing key its topology
    /// plan gives dead letters, if it has any.
    fn of(binding: &BindingConfig, dead_letter: Option<&(String, String)>) -> Self {
        let rabbit = &rabbit(binding).consumer;
        if rabbit.acknowledge_mode == AcknowledgeMode::None {
            return Decision::Drop;
        }
        match dead_letter {
            Some((exchange, routing_key))
                if rabbit.republish_to_dlq && rabbit.common.auto_bind_dlq =>
            {
                Decision::Republish {
                    exchange: exchange.clone(),
                    routing_key: routing_key.clone(),
                }
            }
            _ if rabbit.requeue_rejected => Decision::Requeue,
            _ => Decision::Reject,
        }
    }
}

/// Where and how exhausted messages are republished.
#[derive(Debug)]
struct Republish {
    producer: Box<dyn AmqpProducer>,
    exchange: String,
    routing_key: String,
    delivery_mode: DeliveryMode,
    headroom: u32,
}

/// What the consumer does with a message the application gave up on.
#[derive(Debug)]
enum Exhausted {
    Drop,
    Republish(Republish),
    Requeue,
    Reject,
}

/// Why a republish to the dead-letter exchange did not happen.
#[derive(Debug, Clone, thiserror::Error)]
enum RepublishError {
    /// The connection's `frame_max` could not be learnt.
    #[error(transparent)]
    FrameMax(BinderError),
    /// The message's own headers leave no room for the dead-letter headers.
    #[error(transparent)]
    TooLarge(#[from] HeadersTooLarge),
    /// The publish failed or was not confirmed.
    #[error(transparent)]
    Publish(#[from] BinderError),
}

/// A consumer binding on an AMQP broker.
#[derive(Debug)]
struct AmqpConsumer {
    broker: Arc<dyn AmqpBroker>,
    queues: Vec<String>,
    specs: Vec<SubscriptionSpec>,
    acknowledge_mode: AcknowledgeMode,
    recovery_interval: Duration,
    exhausted: Exhausted,
    batching: Option<Batching>,
}

impl AmqpConsumer {
    /// Republishes a copy of the failed message to the DLX with the diagnostic headers,
    /// sized to the producer's `frame_max`; says what was cut, or why it could not.
    async fn republish(
        target: &Republish,
        failed: &FailedDelivery<'_>,
    ) -> Result<Fitted, RepublishError> {
        let frame_max = target
            .producer
            .frame_max()
            .await
            .map_err(RepublishError::FrameMax)?;
        let mut copy = failed.content.message.clone();
        // Set before the headers are sized: it is in the frame too.
        copy.properties.delivery_mode = Some(target.delivery_mode);
        let dead = DeadLetter {
            reason: failed.reason.to_owned(),
            trace: (failed.trace)(),
            original_exchange: failed.content.exchange().to_string(),
            original_routing_key: failed.content.routing_key().to_string(),
            attempts: failed.attempts,
        };
        let budget = FrameBudget {
            frame_max,
            headroom: target.headroom,
        };
        let fitted = republish_headers(&mut copy, &dead, budget)?;
        target
            .producer
            .publish_to(&target.exchange, &target.routing_key, copy)
            .await?;
        Ok(fitted)
    }
}

#[async_trait]
impl BoundConsumer for AmqpConsumer {
    fn sources(&self) -> &[String] {
        &self.queues
    }

    fn acknowledge_mode(&self) -> AcknowledgeMode {
        self.acknowledge_mode
    }

    fn recovery_interval(&self) -> Duration {
        self.recovery_interval
    }

    fn batching(&self) -> Option<Batching> {
        self.batching
    }

    async fn subscribe(&self, index: usize) -> BinderResult<Box<dyn Subscription>> {
        let spec = self.specs.get(index).ok_or_else(|| {
            BinderError::not_found(format!("source {index} of {:?}", self.queues))
        })?;
        self.broker.subscribe(spec.clone()).await
    }

    /// A republish that fails (or that the message's own headers leave no room for) never
    /// loses the message: it is rejected into the queue's own dead-lettering instead.
    async fn give_up(&self, settler: &Settler, failed: &FailedDelivery<'_>) -> GaveUp {
        match &self.exhausted {
            Exhausted::Drop => GaveUp::new(
                FailureAction::Dropped,
                None,
                Ok(()),
                "message dropped: acknowledgeMode NONE leaves nothing to dead-letter",
            ),
            Exhausted::Republish(target) => match Self::republish(target, failed).await {
                Ok(fitted) => GaveUp::new(
                    FailureAction::Republished,
                    Some(Settlement::Ack),
                    settler.settle(Settlement::Ack).await,
                    format!(
                        "message dead-lettered: republished to exchange `{}` with key `{}`{}",
                        target.exchange,
                        target.routing_key,
                        cut_note(&fitted)
                    ),
                )
                .dead_lettered(DeadLetterRoute::Republished {
                    exchange: target.exchange.clone(),
                    routing_key: target.routing_key.clone(),
                }),
                Err(reason) => GaveUp::new(
                    FailureAction::Rejected,
                    Some(Settlement::Reject),
                    settler.settle(Settlement::Reject).await,
                    format!(
                        "message dead-lettered: republishing to the DLQ failed ({reason}), so it was rejected into the queue's dead-letter exchange"
                    ),
                )
                .dead_lettered(DeadLetterRoute::Rejected),
            },
            Exhausted::Requeue => GaveUp::new(
                FailureAction::Requeued,
                Some(Settlement::Requeue),
                settler.settle(Settlement::Requeue).await,
                "message requeued (requeueRejected)",
            ),
            Exhausted::Reject => GaveUp::new(
                FailureAction::Rejected,
                Some(Settlement::Reject),
                settler.settle(Settlement::Reject).await,
                "message rejected: the broker dead-letters it if the queue has a dead-letter exchange",
            )
            .dead_lettered(DeadLetterRoute::Rejected),
        }
    }
}

/// What the log of a republish says of the headers cut to fit the frame.
fn cut_note(fitted: &Fitted) -> String {
    if !fitted.is_cut() {
        return String::new();
    }
    format!(
        " (to fit the connection's frame_max, less frameMaxHeadroom, {} bytes of x-exception-message and {} of the stack trace were cut)",
        fitted.reason_cut, fitted.trace_cut
    )
}
