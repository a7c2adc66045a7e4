//! Every property parses from YAML and TOML in both spellings, and defaults equal SCSt's.

use std::path::PathBuf;

use binder_amqp::{ExchangeType, RabbitConsumerProperties, RabbitProducerProperties, rabbit};
use binder_core::DeliveryMode;
use binder_core::config::{
    AcknowledgeMode, ConfigLoader, ConsumerProperties, ProducerProperties, StreamConfig,
};
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn load(name: &str) -> StreamConfig {
    ConfigLoader::new()
        .file(fixture(name))
        .env(Vec::<(String, String)>::new())
        .load()
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Paths of `default` whose value no `candidate` changes.
fn untouched(default: &Value, candidates: &[Value], path: &str, out: &mut Vec<String>) {
    match default {
        Value::Object(map) if !map.is_empty() => {
            for (k, v) in map {
                let subs: Vec<Value> = candidates
                    .iter()
                    .map(|c| c.get(k).cloned().unwrap_or(Value::Null))
                    .collect();
                untouched(v, &subs, &format!("{path}.{k}"), out);
            }
        }
        _ => {
            if candidates.iter().all(|c| c == default) {
                out.push(path.to_owned());
            }
        }
    }
}

fn sections(cfg: &StreamConfig) -> Vec<(&'static str, Value, Vec<Value>)> {
    let b = |n: &str| cfg.binding(n);
    let json = |v: &dyn erased_json::Ser| v.to_json();
    vec![
        (
            "consumer",
            json(&ConsumerProperties::default()),
            vec![json(&b("orders").consumer), json(&b("orders2").consumer)],
        ),
        (
            "producer",
            json(&ProducerProperties::default()),
            vec![
                json(&b("shipments").producer),
                json(&b("shipments2").producer),
            ],
        ),
        (
            "rabbit consumer",
            json(&RabbitConsumerProperties::default()),
            vec![
                json(&rabbit(&b("orders")).consumer),
                json(&rabbit(&b("orders2")).consumer),
            ],
        ),
        (
            "rabbit producer",
            json(&RabbitProducerProperties::default()),
            vec![
                json(&rabbit(&b("shipments")).producer),
                json(&rabbit(&b("shipments2")).producer),
            ],
        ),
    ]
}

mod erased_json {
    pub trait Ser {
        fn to_json(&self) -> serde_json::Value;
    }
    impl<T: serde::Serialize> Ser for T {
        fn to_json(&self) -> serde_json::Value {
            serde_json::to_value(self).unwrap()
        }
    }
}

#[test]
fn every_property_is_read_in_both_spellings_from_yaml_and_toml() {
    let camel_yaml = load("all-properties-camel.yaml");
    for other in [
        "all-properties-kebab.yaml",
        "all-properties-camel.toml",
        "all-properties-kebab.toml",
    ] {
        let cfg = load(other);
        assert_eq!(
            cfg.bindings, camel_yaml.bindings,
            "{other} differs from the camelCase YAML"
        );
    }
    // Each property differs from its default in at least one binding: the fixtures cover every
    // property, and a property added later without a fixture entry fails here.
    let mut missing = Vec::new();
    for (name, default, loaded) in sections(&camel_yaml) {
        untouched(&default, &loaded, name, &mut missing);
    }
    assert!(
        missing.is_empty(),
        "not covered by the fixtures: {missing:?}"
    );
}

#[test]
fn values_land_in_the_right_fields() {
    let cfg = load("all-properties-kebab.toml");
    let orders = cfg.binding("orders");
    assert_eq!(orders.destination, "orderEvents");
    assert_eq!(orders.group.as_deref(), Some("billing"));
    assert_eq!(orders.content_type, "text/plain");
    assert_eq!(orders.consumer.max_attempts, 5);
    assert_eq!(orders.consumer.back_off_multiplier, 3.5);
    assert_eq!(orders.consumer.instance_index_list, vec![0, 2]);
    assert_eq!(orders.instance_indexes(), vec![0, 2]);
    assert_eq!(rabbit(&orders).consumer.prefetch, 200);
    assert_eq!(
        rabbit(&orders).consumer.acknowledge_mode,
        AcknowledgeMode::Manual
    );
    assert_eq!(
        rabbit(&orders).consumer.republish_delivery_mode,
        DeliveryMode::NonPersistent
    );
    assert_eq!(
        rabbit(&orders).consumer.common.exchange_type,
        ExchangeType::Direct
    );
    assert_eq!(
        rabbit(&orders).consumer.common.quorum.delivery_limit,
        Some(7)
    );
    assert_eq!(
        rabbit(&orders).consumer.common.queue_binding_arguments["x-match"],
        "any"
    );
    let shipments = cfg.binding("shipments");
    assert_eq!(shipments.producer.required_groups, vec!["audit", "billing"]);
    assert!(shipments.producer.is_partitioned());
    let alt = rabbit(&shipments)
        .producer
        .alternate_exchange
        .clone()
        .unwrap();
    assert_eq!(alt.name.as_deref(), Some("unrouted"));
    assert_eq!(alt.kind, ExchangeType::Fanout);
    assert_eq!(alt.binding.unwrap().routing_key, "x");
}

#[test]
fn defaults_equal_spring_cloud_streams() {
    let c = ConsumerProperties::default();
    assert!(c.auto_startup);
    assert_eq!(c.concurrency, 1);
    assert!(!c.partitioned);
    assert_eq!(c.max_attempts, 3);
    assert_eq!(c.back_off_initial_interval, 1000);
    assert_eq!(c.back_off_max_interval, 10_000);
    assert_eq!(c.back_off_multiplier, 2.0);
    assert!(c.default_retryable);
    assert!(c.retryable_exceptions.is_empty());
    assert!(!c.batch_mode);
    assert_eq!(c.header_mode, None);

    let p = ProducerProperties::default();
    assert!(p.auto_startup);
    assert_eq!(p.partition_count, 1);
    assert!(p.required_groups.is_empty());
    assert!(!p.error_channel_enabled);
    assert!(!p.is_partitioned());

    let rc = RabbitConsumerProperties::default();
    assert_eq!(rc.acknowledge_mode, AcknowledgeMode::Auto);
    assert_eq!(rc.prefetch, 1);
    assert!(rc.durable_subscription);
    assert_eq!(rc.anonymous_group_prefix, "anonymous.");
    assert!(rc.republish_to_dlq);
    assert_eq!(rc.republish_delivery_mode, DeliveryMode::Persistent);
    assert_eq!(rc.frame_max_headroom, 20_000);
    assert!(!rc.requeue_rejected);
    assert!(!rc.exclusive);
    assert_eq!(rc.recovery_interval, 5000);
    assert!(!rc.enable_batching);
    assert_eq!((rc.batch_size, rc.receive_timeout), (1, None));
    let common = &rc.common;
    assert_eq!(common.exchange_type, ExchangeType::Topic);
    assert!(common.declare_exchange && common.exchange_durable && !common.exchange_auto_delete);
    assert_eq!(common.prefix, "");
    assert!(common.bind_queue && !common.queue_name_group_only);
    assert_eq!(common.binding_routing_key, None);
    assert!(!common.auto_bind_dlq);
    assert_eq!(common.dead_letter_exchange_type, ExchangeType::Direct);
    assert!(common.declare_dlx);
    assert!(!common.quorum.enabled && !common.lazy && !common.single_active_consumer);

    let rp = RabbitProducerProperties::default();
    assert_eq!(rp.delivery_mode, DeliveryMode::Persistent);
    assert_eq!(rp.routing_key_expression, None);
    assert_eq!(rp.alternate_exchange, None);

    let cfg = ConfigLoader::new()
        .env(Vec::<(String, String)>::new())
        .yaml_str("spring.cloud.stream.bindings.input.group: g")
        .load()
        .unwrap();
    let b = cfg.binding("input");
    assert_eq!(b.content_type, "application/json");
    assert_eq!(
        b.destination, "input",
        "destination defaults to the binding name"
    );
    assert_eq!(b.instance_count(), 1);
    assert_eq!(b.instance_indexes(), vec![0]);
    assert_eq!(cfg.binder_for("input"), "embedded");
    let unknown = cfg.binding("neverConfigured");
    assert_eq!(unknown.destination, "neverConfigured");
}
