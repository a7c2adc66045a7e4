//! The typed property sections, with Spring Cloud Stream's names and defaults.
//!
//! The common properties live under
//! `spring.cloud.stream.bindings.<binding>.{consumer,producer}`; a binder's own properties are
//! an [extension](super::Extension) in a namespace of their own.

use std::collections::BTreeMap;

use crate::{keyword_enum, properties};

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

fn multiplier_range(v: &f64) -> Result<(), String> {
    if *v >= 1.0 {
        Ok(())
    } else {
        Err(format!(
            "must be 1.0 or more (each back-off is the previous one times this), found {v}"
        ))
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
