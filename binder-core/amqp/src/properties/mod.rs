//! The AMQP binders' extension properties, Spring Cloud Stream's RabbitMQ binder's
//! (`spring.cloud.stream.rabbit.default.*` and
//! `spring.cloud.stream.rabbit.bindings.<binding>.{consumer,producer}.*`), with its names and
//! defaults. This crate registers the `rabbit` namespace for both AMQP binders; read a
//! binding's properties with [`rabbit`].

mod checks;

use std::collections::BTreeMap;
use std::sync::LazyLock;

use binder_core::config::{AcknowledgeMode, BindingConfig, ExtensionRegistration};
use binder_core::message::DeliveryMode;

/// The namespace of the AMQP extension properties under `spring.cloud.stream`.
pub const RABBIT_NAMESPACE: &str = "rabbit";

inventory::submit! { ExtensionRegistration::new::<RabbitBindingProperties>(RABBIT_NAMESPACE) }

/// The registration of the `rabbit` namespace, for a loader that must know it without
/// `inventory` (`ConfigLoader::extension`).
pub static RABBIT_EXTENSION: ExtensionRegistration =
    ExtensionRegistration::new::<RabbitBindingProperties>(RABBIT_NAMESPACE);

/// A binding's `rabbit.*` properties: those its configuration gives, or the defaults when it
/// was built without the namespace registered (`BindingConfig::defaults` in a program that
/// does not link this crate's registration).
///
/// ```
/// use binder_core::config::ConfigLoader;
///
/// let cfg = ConfigLoader::new()
///     .env(Vec::<(String, String)>::new())
///     .yaml_str(r#"
/// spring.cloud.stream.rabbit.bindings.inputProductAdd.consumer:
///   bindingRoutingKey: addProduct.*
///   autoBindDlq: true
/// spring.cloud.stream.bindings.inputProductAdd.group: addProductHandler
/// "#)
///     .load()
///     .unwrap();
/// let binding = cfg.binding("inputProductAdd");
/// let rabbit = binder_amqp::rabbit(&binding);
/// assert_eq!(rabbit.consumer.common.binding_routing_key.as_deref(), Some("addProduct.*"));
/// assert!(rabbit.consumer.common.auto_bind_dlq);
/// ```
pub fn rabbit(binding: &BindingConfig) -> &RabbitBindingProperties {
    static DEFAULTS: LazyLock<RabbitBindingProperties> = LazyLock::new(Default::default);
    binding
        .extension::<RabbitBindingProperties>()
        .unwrap_or(&DEFAULTS)
}

fn at_least_one_opt(v: &Option<u32>) -> Result<(), String> {
    match v {
        Some(0) => Err("must be at least 1".to_owned()),
        _ => Ok(()),
    }
}

fn prefetch_range(v: &u16) -> Result<(), String> {
    if *v >= 1 {
        Ok(())
    } else {
        Err("must be from 1 to 65535 (AMQP basic.qos prefetch-count)".to_owned())
    }
}

fn batch_size_range(v: &u16) -> Result<(), String> {
    if *v >= 1 {
        Ok(())
    } else {
        Err("must be from 1 to 65535".to_owned())
    }
}

fn priority_range(v: &Option<u8>) -> Result<(), String> {
    match v {
        Some(0) => Err("must be from 1 to 255 (x-max-priority)".to_owned()),
        _ => Ok(()),
    }
}

binder_core::keyword_enum! {
    /// AMQP exchange types.
    pub enum ExchangeType {
        /// Routes on an exact routing-key match.
        Direct => "direct",
        /// Routes to every bound queue.
        Fanout => "fanout",
        /// Routes on routing-key patterns (`*`, `#`).
        Topic => "topic",
        /// Routes on header values (`x-match`).
        Headers => "headers",
    }
}

binder_core::keyword_enum! {
    /// What a queue does when it is full (`x-overflow`).
    pub enum OverflowBehavior {
        /// Drop (or dead-letter) the oldest message.
        DropHead => "drop-head",
        /// Refuse new messages (publisher gets a nack).
        RejectPublish => "reject-publish",
        /// Refuse new messages and dead-letter them.
        RejectPublishDlx => "reject-publish-dlx",
    }
}

binder_core::properties! {
    /// Quorum-queue settings (`quorum.*`, `dlqQuorum.*`).
    pub struct QuorumProperties {
        /// Declare a quorum queue (`x-queue-type: quorum`).
        enabled: bool = false => "enabled";
        /// Replicas at declaration (`x-quorum-initial-group-size`).
        initial_group_size: Option<u32> = None => "initialGroupSize", check at_least_one_opt;
        /// Redeliveries before dead-lettering (`x-delivery-limit`).
        delivery_limit: Option<u32> = None => "deliveryLimit";
    }
}

binder_core::properties! {
    /// The AMQP extension properties shared by consumers and producers (SCSt's
    /// `RabbitCommonProperties`). On a producer, the queue properties apply to the
    /// `requiredGroups` queues.
    pub struct RabbitCommonProperties {
        /// Type of the destination exchange.
        exchange_type: ExchangeType = ExchangeType::Topic => "exchangeType";
        /// Declare the destination exchange.
        declare_exchange: bool = true => "declareExchange";
        /// The exchange survives a broker restart.
        exchange_durable: bool = true => "exchangeDurable";
        /// The exchange is deleted when its last binding goes.
        exchange_auto_delete: bool = false => "exchangeAutoDelete";
        /// Prepended to exchange and queue names.
        prefix: String = String::new() => "prefix";
        /// Name the group queue after the group alone.
        queue_name_group_only: bool = false => "queueNameGroupOnly";
        /// Declare and bind the queue.
        bind_queue: bool = true => "bindQueue";
        /// Binding key(s) of the queue (`#` when unset).
        binding_routing_key: Option<String> = None => "bindingRoutingKey";
        /// Splits `bindingRoutingKey` into several keys.
        binding_routing_key_delimiter: Option<String> = None => "bindingRoutingKeyDelimiter";
        /// Arguments of the queue binding (headers exchanges).
        queue_binding_arguments: BTreeMap<String, String> = BTreeMap::new() => "queueBindingArguments";
        /// Arguments of the DLQ binding.
        dlq_binding_arguments: BTreeMap<String, String> = BTreeMap::new() => "dlqBindingArguments";
        /// Message TTL of the queue in ms (`x-message-ttl`).
        ttl: Option<u32> = None => "ttl";
        /// Message TTL of the DLQ in ms.
        dlq_ttl: Option<u32> = None => "dlqTtl";
        /// Idle time in ms before the queue is deleted (`x-expires`).
        expires: Option<u32> = None => "expires", check at_least_one_opt;
        /// Idle time in ms before the DLQ is deleted.
        dlq_expires: Option<u32> = None => "dlqExpires", check at_least_one_opt;
        /// Most messages in the queue (`x-max-length`).
        max_length: Option<u32> = None => "maxLength";
        /// Most messages in the DLQ.
        dlq_max_length: Option<u32> = None => "dlqMaxLength";
        /// Most payload bytes in the queue (`x-max-length-bytes`).
        max_length_bytes: Option<u32> = None => "maxLengthBytes";
        /// Most payload bytes in the DLQ.
        dlq_max_length_bytes: Option<u32> = None => "dlqMaxLengthBytes";
        /// Highest priority of the queue (`x-max-priority`).
        max_priority: Option<u8> = None => "maxPriority", check priority_range;
        /// Highest priority of the DLQ.
        dlq_max_priority: Option<u8> = None => "dlqMaxPriority", check priority_range;
        /// What a full queue does (`x-overflow`).
        overflow_behavior: Option<OverflowBehavior> = None => "overflowBehavior";
        /// What a full DLQ does.
        dlq_overflow_behavior: Option<OverflowBehavior> = None => "dlqOverflowBehavior";
        /// Lazy queue mode (`x-queue-mode: lazy`).
        lazy: bool = false => "lazy";
        /// Lazy mode for the DLQ.
        dlq_lazy: bool = false => "dlqLazy";
        /// Quorum queue settings.
        quorum: QuorumProperties = QuorumProperties::default() => "quorum";
        /// Quorum settings for the DLQ.
        dlq_quorum: QuorumProperties = QuorumProperties::default() => "dlqQuorum";
        /// Only one consumer at a time (`x-single-active-consumer`).
        single_active_consumer: bool = false => "singleActiveConsumer";
        /// Single active consumer on the DLQ.
        dlq_single_active_consumer: bool = false => "dlqSingleActiveConsumer";
        /// Declare a DLX and a DLQ, and point the queue at them.
        auto_bind_dlq: bool = false => "autoBindDlq";
        /// DLQ name (default `<queue>.dlq`).
        dead_letter_queue_name: Option<String> = None => "deadLetterQueueName";
        /// DLX name (default `<prefix>DLX`).
        dead_letter_exchange: Option<String> = None => "deadLetterExchange";
        /// DLX type.
        dead_letter_exchange_type: ExchangeType = ExchangeType::Direct => "deadLetterExchangeType";
        /// Declare the DLX.
        declare_dlx: bool = true => "declareDlx";
        /// Routing key of dead letters (default: the queue name).
        dead_letter_routing_key: Option<String> = None => "deadLetterRoutingKey";
        /// Where the DLQ dead-letters to.
        dlq_dead_letter_exchange: Option<String> = None => "dlqDeadLetterExchange";
        /// Routing key of the DLQ's dead letters.
        dlq_dead_letter_routing_key: Option<String> = None => "dlqDeadLetterRoutingKey";
    }
}

binder_core::properties! {
    /// AMQP consumer properties (`spring.cloud.stream.rabbit.bindings.<binding>.consumer.*`).
    pub struct RabbitConsumerProperties {
        ..common: RabbitCommonProperties;
        /// Who settles deliveries.
        acknowledge_mode: AcknowledgeMode = AcknowledgeMode::Auto => "acknowledgeMode";
        /// Unacknowledged deliveries per consumer (`basic.qos`).
        prefetch: u16 = 1 => "prefetch", check prefetch_range;
        /// Group queues are durable; `false` makes them auto-delete, without DLQ.
        durable_subscription: bool = true => "durableSubscription";
        /// Prefix of anonymous queue names after the destination.
        anonymous_group_prefix: String = "anonymous.".to_owned() => "anonymousGroupPrefix";
        /// Republish exhausted messages to the DLX with diagnostic headers.
        republish_to_dlq: bool = true => "republishToDlq";
        /// Delivery mode of republished messages (SCSt spells the key `republishDeliveyMode`;
        /// both spellings are accepted).
        republish_delivery_mode: DeliveryMode = DeliveryMode::Persistent => "republishDeliveyMode" | "republishDeliveryMode";
        /// Bytes kept free in a frame when the stack trace header is truncated.
        frame_max_headroom: u32 = 20_000 => "frameMaxHeadroom";
        /// Requeue failed messages instead of rejecting them.
        requeue_rejected: bool = false => "requeueRejected";
        /// Exclusive consumer: the only one on the queue.
        exclusive: bool = false => "exclusive";
        /// Milliseconds between attempts to recover a consumer.
        recovery_interval: u64 = 5000 => "recoveryInterval";
        /// Prefix of consumer tags (`<prefix>#<n>`).
        consumer_tag_prefix: Option<String> = None => "consumerTagPrefix";
        /// Assemble deliveries into batches, for a `consumer.batchMode` binding whose
        /// listener takes a list (Spring's consumer-side batching).
        enable_batching: bool = false => "enableBatching";
        /// The most deliveries in a batch (with `enableBatching`); the prefetch is raised to
        /// it times `concurrency` when lower (see `effective_prefetch`).
        batch_size: u16 = 1 => "batchSize", check batch_size_range;
        /// Milliseconds to wait for the next delivery before a shorter batch goes out (with
        /// `enableBatching`; Spring AMQP's default, 1000, when unset).
        receive_timeout: Option<u64> = None => "receiveTimeout";
    }
}

impl RabbitConsumerProperties {
    /// How a `batchMode` binding's deliveries are assembled (`enableBatching`), else `None`.
    pub fn batching(&self, binding: &BindingConfig) -> Option<binder_core::binder::Batching> {
        (binding.consumer.batch_mode && self.enable_batching).then(|| {
            binder_core::binder::Batching {
                size: usize::from(self.batch_size),
                receive_timeout: std::time::Duration::from_millis(
                    self.receive_timeout.unwrap_or(1000),
                ),
            }
        })
    }

    /// The prefetch a subscription asks for: `prefetch`, raised for batches so that each of
    /// the binding's `concurrency` handlers can fill one (as each of Spring AMQP's concurrent
    /// consumers has a prefetch of at least `batchSize`), at most 65535.
    pub fn effective_prefetch(&self, binding: &BindingConfig) -> u16 {
        match self.batching(binding) {
            Some(_) => {
                let wanted =
                    u32::from(self.batch_size).saturating_mul(binding.consumer.concurrency);
                self.prefetch.max(u16::try_from(wanted).unwrap_or(u16::MAX))
            }
            None => self.prefetch,
        }
    }
}

binder_core::properties! {
    /// Binding of the queue declared on an alternate exchange.
    pub struct AlternateExchangeBinding {
        /// Queue to declare and bind.
        queue: Option<String> = None => "queue";
        /// Binding key.
        routing_key: String = "#".to_owned() => "routingKey";
    }
}

binder_core::properties! {
    /// Where unroutable messages go (`alternate-exchange` argument of the destination exchange).
    pub struct AlternateExchange {
        /// Name of the alternate exchange.
        name: Option<String> = None => "name";
        /// Its type.
        kind: ExchangeType = ExchangeType::Topic => "type";
        /// It exists already: do not declare it.
        exists: bool = false => "exists";
        /// A queue to bind to it.
        binding: Option<AlternateExchangeBinding> = None => "binding";
    }
}

binder_core::properties! {
    /// AMQP producer properties (`spring.cloud.stream.rabbit.bindings.<binding>.producer.*`).
    pub struct RabbitProducerProperties {
        ..common: RabbitCommonProperties;
        /// Literal routing key (default: the destination).
        routing_key: Option<String> = None => "routingKey";
        /// Expression computing the routing key per message.
        routing_key_expression: Option<String> = None => "routingKeyExpression";
        /// Persistent or not.
        delivery_mode: DeliveryMode = DeliveryMode::Persistent => "deliveryMode";
        /// Alternate exchange of the destination exchange.
        alternate_exchange: Option<AlternateExchange> = None => "alternateExchange";
    }
}

binder_core::properties! {
    /// The AMQP extension of one binding (`spring.cloud.stream.rabbit.bindings.<binding>.*`).
    pub struct RabbitBindingProperties {
        /// AMQP consumer properties.
        consumer: RabbitConsumerProperties = RabbitConsumerProperties::default() => "consumer";
        /// AMQP producer properties.
        producer: RabbitProducerProperties = RabbitProducerProperties::default() => "producer";
    }
}
