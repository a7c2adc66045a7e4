//! The checks of the `rabbit.*` properties that span several properties (or the binding's
//! common ones): contradictions a single value cannot show.

use binder_core::config::{BindingCheck, BindingConfig, Extension};
use binder_core::runtime::RoutingKeyExpression;

use super::{ExchangeType, RabbitBindingProperties};
use binder_core::config::AcknowledgeMode;

/// AMQP names are short strings.
const MAX_NAME_BYTES: usize = 255;

impl Extension for RabbitBindingProperties {
    fn validate(&self, b: &BindingConfig, check: &mut BindingCheck<'_>) {
        names(self, b, check);
        consumer(self, b, check);
        quorum(self, check);
        producer(self, b, check);
    }
}

/// The longest queue name the binding's topology would declare fits AMQP's limit.
fn names(r: &RabbitBindingProperties, b: &BindingConfig, check: &mut BindingCheck<'_>) {
    let (rc, rp) = (&r.consumer.common, &r.producer.common);
    let prefix = if rc.prefix.len() > rp.prefix.len() {
        &rc.prefix
    } else {
        &rp.prefix
    };
    let longest = format!(
        "{prefix}{}.{}.dlq",
        b.destination,
        b.group.as_deref().unwrap_or("")
    );
    if longest.len() > MAX_NAME_BYTES {
        check.common(
            "destination",
            format!(
                "the queue name built from prefix, destination and group would exceed the AMQP limit of {MAX_NAME_BYTES} bytes"
            ),
        );
    }
}

fn consumer(r: &RabbitBindingProperties, b: &BindingConfig, check: &mut BindingCheck<'_>) {
    let rc = &r.consumer;
    if b.group.is_none() && check.written_true("consumer.autoBindDlq") {
        check.extension(
            "consumer.autoBindDlq",
            "needs a `group`: an anonymous consumer's queue is exclusive and auto-delete, so it never gets a dead-letter queue",
        );
    }
    if rc.exclusive && b.consumer.concurrency > 1 {
        check.extension(
            "consumer.exclusive",
            format!(
                "an exclusive consumer allows one consumer on the queue, but concurrency is {}: set concurrency to 1 or exclusive to false",
                b.consumer.concurrency
            ),
        );
    }
    batching(r, b, check);
    if b.consumer.partitioned && rc.common.exchange_type == ExchangeType::Fanout {
        check.extension(
            "consumer.exchangeType",
            "a fanout exchange cannot route to partitions: use topic or direct for a partitioned consumer",
        );
    }
}

/// `batchMode` and the batching properties go together: Spring presents producer-made
/// batches as lists with `batchMode` alone, and this binder's producers make none.
fn batching(r: &RabbitBindingProperties, b: &BindingConfig, check: &mut BindingCheck<'_>) {
    let rc = &r.consumer;
    if b.consumer.batch_mode && !rc.enable_batching {
        check.common(
            "consumer.batchMode",
            "needs `rabbit.bindings.<binding>.consumer.enableBatching: true`: batches are assembled from separate deliveries (Spring's consumer-side batching; this binder's producers make no batches to present as lists)",
        );
    }
    if rc.enable_batching && !b.consumer.batch_mode {
        check.extension(
            "consumer.enableBatching",
            "needs `consumer.batchMode: true` on the binding, whose listener then takes a list",
        );
    }
    if !rc.enable_batching {
        let set = [
            ("consumer.batchSize", rc.batch_size > 1),
            ("consumer.receiveTimeout", rc.receive_timeout.is_some()),
        ];
        for (key, _) in set.into_iter().filter(|(_, set)| *set) {
            check.extension(
                key,
                "sizes the batches of `enableBatching: true` only (acks are grouped by the binder itself, by the prefetch window)",
            );
        }
    }
    if rc.acknowledge_mode == AcknowledgeMode::Manual && b.consumer.batch_mode {
        check.extension(
            "consumer.acknowledgeMode",
            "MANUAL cannot go with `consumer.batchMode`: the runtime settles a batch's deliveries after its listener (use AUTO or NONE)",
        );
    }
}

fn quorum(r: &RabbitBindingProperties, check: &mut BindingCheck<'_>) {
    for (side, common) in [
        ("consumer", &r.consumer.common),
        ("producer", &r.producer.common),
    ] {
        if !common.quorum.enabled {
            continue;
        }
        let mut clash = Vec::new();
        if common.max_priority.is_some() {
            clash.push("maxPriority");
        }
        if common.lazy {
            clash.push("lazy");
        }
        if side == "consumer" && !r.consumer.durable_subscription {
            clash.push("durableSubscription: false");
        }
        if !clash.is_empty() {
            check.extension(
                &format!("{side}.quorum.enabled"),
                format!("quorum queues do not support {}", clash.join(", ")),
            );
        }
    }
}

fn producer(r: &RabbitBindingProperties, b: &BindingConfig, check: &mut BindingCheck<'_>) {
    let rp = &r.producer;
    if b.producer.is_partitioned() && rp.common.exchange_type == ExchangeType::Fanout {
        check.extension(
            "producer.exchangeType",
            "a fanout exchange cannot route to partitions: use topic or direct for a partitioned producer",
        );
    }
    if rp.routing_key.is_some() && rp.routing_key_expression.is_some() {
        check.extension(
            "producer.routingKey",
            "set either routingKey or routingKeyExpression, not both",
        );
    }
    if let Some(expression) = &rp.routing_key_expression {
        if let Err(e) = RoutingKeyExpression::parse(expression) {
            check.extension("producer.routingKeyExpression", e.to_string());
        }
    }
    if let Some(alt) = &rp.alternate_exchange {
        if alt.name.as_deref().is_none_or(str::is_empty) {
            check.extension(
                "producer.alternateExchange.name",
                "missing: an alternate exchange needs a name",
            );
        }
    }
}
