//! The typed property sections, with Spring Cloud Stream's names and defaults.
//!
//! Common properties live under `spring.cloud.stream.bindings.<binding>.{consumer,producer}`,
//! the AMQP extension under `spring.cloud.stream.rabbit.bindings.<binding>.{consumer,producer}`.
//! Both binders honour the AMQP extension, since both speak the AMQP model.

use std::collections::BTreeMap;

use super::node::{keyword_enum, properties};
use crate::message::DeliveryMode;

fn at_least_one_u32(v: &u32) -> Result<(), String> {
    if *v >= 1 {
        Ok(())
    } else {
        Err("must be at least 1".to_owned())
    }
}

fn at_least_one_opt(v: &Option<u32>) -> Result<(), String> {
    v.as_ref().map_or(Ok(()), at_least_one_u32)
}

fn prefetch_range(v: &u16) -> Result<(), String> {
    if *v >= 1 {
        Ok(())
    } else {
        Err("must be from 1 to 65535 (AMQP basic.qos prefetch-count)".to_owned())
    }
}

fn multiplier_range(v: &f64) -> Result<(), String> {
    if *v >= 1.0 {
        Ok(())
    } else {
        Err(format!(
            "must be 1.0 or more (each back-off is the previous one times this), found {v}"
        ))
    }
}

fn priority_range(v: &Option<u8>) -> Result<(), String> {
    match v {
        Some(0) => Err("must be from 1 to 255 (x-max-priority)".to_owned()),
        _ => Ok(()),
    }
}

keyword_enum! {
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

keyword_enum! {
    /// Who settles deliveries.
    pub enum AcknowledgeMode {
        /// The framework acks on success and rejects on failure (default).
        Auto => "AUTO",
        /// The handler settles explicitly.
        Manual => "MANUAL",
        /// No acknowledgements: the broker forgets a message once delivered.
        None => "NONE",
    }
}

keyword_enum! {
    /// How headers travel with a message.
    pub enum HeaderMode {
        /// No headers are mapped.
        None => "none",
        /// Native broker headers (the only mode AMQP binders need).
        Headers => "headers",
        /// Headers embedded in the payload (SCSt legacy; refused by the AMQP binders).
        EmbeddedHeaders => "embeddedHeaders",
    }
}

keyword_enum! {
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

properties! {
    /// Common consumer properties (`spring.cloud.stream.bindings.<binding>.consumer.*`).
    pub struct ConsumerProperties {
        /// Start consuming when the application starts.
        auto_startup: bool = true => "autoStartup";
        /// Handler invocations in parallel for this binding (1 keeps order).
        concurrency: u32 = 1 => "concurrency", check at_least_one_u32;
        /// Whether this consumer receives from a partitioned producer.
        partitioned: bool = false => "partitioned";
        /// Number of consumer instances (falls back to `spring.cloud.stream.instanceCount`).
        instance_count: Option<u32> = None => "instanceCount", check at_least_one_opt;
        /// This instance's index (falls back to `spring.cloud.stream.instanceIndex`).
        instance_index: Option<u32> = None => "instanceIndex";
        /// Several partition indexes consumed by this instance.
        instance_index_list: Vec<u32> = Vec::new() => "instanceIndexList";
        /// Deliveries to the handler before giving up (1 = no retry).
        max_attempts: u32 = 3 => "maxAttempts", check at_least_one_u32;
        /// First back-off, in milliseconds.
        back_off_initial_interval: u64 = 1000 => "backOffInitialInterval";
        /// Longest back-off, in milliseconds.
        back_off_max_interval: u64 = 10_000 => "backOffMaxInterval";
        /// Back-off growth factor.
        back_off_multiplier: f64 = 2.0 => "backOffMultiplier", check multiplier_range;
        /// Whether errors not listed in `retryableExceptions` are retried.
        default_retryable: bool = true => "defaultRetryable";
        /// Error kinds to retry (`true`) or not (`false`).
        retryable_exceptions: BTreeMap<String, bool> = BTreeMap::new() => "retryableExceptions";
        /// Deliver lists of messages to the handler.
        batch_mode: bool = false => "batchMode";
        /// How headers are read.
        header_mode: Option<HeaderMode> = None => "headerMode";
    }
}

properties! {
    /// Common producer properties (`spring.cloud.stream.bindings.<binding>.producer.*`).
    pub struct ProducerProperties {
        /// Start the producer when the application starts.
        auto_startup: bool = true => "autoStartup";
        /// Expression computing the partition key; setting it makes the producer partitioned.
        partition_key_expression: Option<String> = None => "partitionKeyExpression";
        /// Expression choosing the partition from the key.
        partition_selector_expression: Option<String> = None => "partitionSelectorExpression";
        /// Number of partitions.
        partition_count: u32 = 1 => "partitionCount", check at_least_one_u32;
        /// Groups whose queues the producer declares, so nothing is lost before consumers start.
        required_groups: Vec<String> = Vec::new() => "requiredGroups";
        /// SCSt's error channel for send failures. Refused at startup when true: a failed
        /// send is returned to its caller, and consumer failures reach the `on_error` hook.
        error_channel_enabled: bool = false => "errorChannelEnabled";
        /// How headers are written.
        header_mode: Option<HeaderMode> = None => "headerMode";
    }
}

impl ProducerProperties {
    /// A producer is partitioned when it has a partition key expression.
    pub fn is_partitioned(&self) -> bool {
        self.partition_key_expression.is_some()
    }
}

properties! {
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

properties! {
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

properties! {
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
    }
}

properties! {
    /// Binding of the queue declared on an alternate exchange.
    pub struct AlternateExchangeBinding {
        /// Queue to declare and bind.
        queue: Option<String> = None => "queue";
        /// Binding key.
        routing_key: String = "#".to_owned() => "routingKey";
    }
}

properties! {
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

properties! {
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
