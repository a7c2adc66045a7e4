//! The AMQP binders' part of the AsyncAPI document, after the
//! [AMQP bindings 0.3.0](https://github.com/asyncapi/bindings/tree/master/amqp): a
//! destination is an exchange (`is: routingKey`), a consumer receives from its group's queue
//! (`<destination>.<group>`, a channel `is: queue` of its own; an anonymous queue has no
//! address until it is declared), the dead-letter queue and a producer's required groups'
//! queues are channels too. Everything comes from the binding's topology plan
//! ([`plan_consumer`], [`plan_producer`]), so the document and `streamctl plan` agree.
//!
//! Each AMQP binder registers [`describe`] for its binder type, with its virtual host, and
//! its servers, each made by [`server`].

use binder_core::asyncapi::{
    BindingDescription, ChannelDescription, DescribeRequest, ServerDescription,
};
use binder_core::binder::BindingRole;
use binder_core::config::AcknowledgeMode;
use binder_core::message::DeliveryMode;
use serde_json::{Map, Value, json};

use crate::properties::{RabbitCommonProperties, rabbit};
use crate::topology::{
    BindingDecl, ExchangeDecl, QueueDecl, TopologyPlan, plan_consumer, plan_producer,
};

/// The AMQP bindings version written.
pub const AMQP_BINDING_VERSION: &str = "0.3.0";

/// Describes a binding of an AMQP binder whose broker serves `vhost`.
///
/// ```
/// use binder_core::asyncapi::DescribeRequest;
/// use binder_core::binder::BindingRole;
/// use binder_core::config::ConfigLoader;
///
/// let cfg = ConfigLoader::new()
///     .env(Vec::<(String, String)>::new())
///     .yaml_str("spring.cloud.stream.bindings.orders-in: { destination: orders, group: billing }")
///     .load()
///     .unwrap();
/// let binding = cfg.binding("orders-in");
/// let env = cfg.binder_environment("rabbit");
/// let d = binder_amqp::asyncapi::describe(
///     &DescribeRequest { binding: &binding, role: BindingRole::Consumer, binder_name: "rabbit", environment: &env },
///     "/",
/// );
/// assert_eq!(d.channel["amqp"]["exchange"]["type"], "topic");
/// assert_eq!(d.sources[0].address.as_deref(), Some("orders.billing"));
/// assert_eq!(d.sources[0].bindings["amqp"]["queue"]["durable"], true);
/// ```
pub fn describe(request: &DescribeRequest<'_>, vhost: &str) -> BindingDescription {
    match request.role {
        BindingRole::Consumer => consumer(request, vhost),
        BindingRole::Producer => producer(request, vhost),
    }
}

/// The AMQP protocol version the binders speak.
pub const AMQP_PROTOCOL_VERSION: &str = "0.9.1";

/// An AMQP 0-9-1 server at `host` (`host:port`, no credentials), over TLS (`amqps`) or not,
/// serving `vhost`, written as an AMQP URI's path (`/` is `/%2F`).
///
/// ```
/// let s = binder_amqp::asyncapi::server("rabbit.example:5671", true, "/", "RabbitMQ".into());
/// assert_eq!((s.protocol.as_str(), s.pathname.as_deref()), ("amqps", Some("/%2F")));
/// let s = binder_amqp::asyncapi::server("localhost:5672", false, "prod eu", "RabbitMQ".into());
/// assert_eq!((s.protocol.as_str(), s.pathname.as_deref()), ("amqp", Some("/prod%20eu")));
/// ```
pub fn server(host: &str, tls: bool, vhost: &str, description: String) -> ServerDescription {
    let mut pathname = String::from("/");
    for b in vhost.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            pathname.push(char::from(b));
        } else {
            pathname.push_str(&format!("%{b:02X}"));
        }
    }
    ServerDescription {
        host: host.to_owned(),
        protocol: if tls { "amqps" } else { "amqp" }.to_owned(),
        protocol_version: Some(AMQP_PROTOCOL_VERSION.to_owned()),
        pathname: Some(pathname),
        description,
    }
}

fn amqp(value: Value) -> Map<String, Value> {
    let mut map = Map::new();
    map.insert("amqp".into(), value);
    map
}

/// The exchange as the plan declares it, or as the properties say when the binding does not
/// declare it (`declareExchange: false`).
fn exchange_of(plan: &TopologyPlan, name: &str, common: &RabbitCommonProperties) -> ExchangeDecl {
    plan.exchanges
        .iter()
        .find(|e| e.name == name)
        .cloned()
        .unwrap_or_else(|| ExchangeDecl {
            name: name.to_owned(),
            kind: common.exchange_type,
            durable: common.exchange_durable,
            auto_delete: common.exchange_auto_delete,
            internal: false,
            arguments: Default::default(),
        })
}

fn exchange_channel(exchange: &ExchangeDecl, vhost: &str, declared: bool) -> Map<String, Value> {
    let mut binding = json!({
        "is": "routingKey",
        "exchange": {
            "name": exchange.name,
            "type": exchange.kind.as_str(),
            "durable": exchange.durable,
            "autoDelete": exchange.auto_delete,
            "vhost": vhost,
        },
        "bindingVersion": AMQP_BINDING_VERSION,
    });
    if !declared {
        binding["x-declared"] = json!(false);
    }
    amqp(binding)
}

/// The keys `queue` is bound with, by source exchange.
fn bound_with<'a>(plan: &'a TopologyPlan, queue: &str) -> Vec<&'a BindingDecl> {
    plan.bindings
        .iter()
        .filter(|b| b.destination == queue)
        .collect()
}

fn keys_text(bindings: &[&BindingDecl]) -> String {
    bindings
        .iter()
        .map(|b| format!("exchange `{}` with `{}`", b.source, b.routing_key))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A queue's channel: its declaration when the plan has it, and what it is bound to.
fn queue_channel(
    plan: &TopologyPlan,
    name: &str,
    address: Option<String>,
    title: String,
    what: String,
    vhost: &str,
) -> ChannelDescription {
    let decl: Option<&QueueDecl> = plan.queues.iter().find(|q| q.name == name);
    let mut queue = json!({"name": name, "vhost": vhost});
    if let Some(q) = decl {
        queue["durable"] = json!(q.durable);
        queue["exclusive"] = json!(q.exclusive);
        queue["autoDelete"] = json!(q.auto_delete);
    }
    let bindings = bound_with(plan, name);
    let mut binding = json!({
        "is": "queue",
        "queue": queue,
        "bindingVersion": AMQP_BINDING_VERSION,
        "x-bindings": bindings
            .iter()
            .map(|b| json!({"exchange": b.source, "routingKey": b.routing_key}))
            .collect::<Vec<_>>(),
    });
    if let Some(q) = decl {
        if !q.arguments.is_empty() {
            binding["x-arguments"] = serde_json::to_value(&q.arguments).unwrap_or(Value::Null);
        }
    } else {
        binding["x-declared"] = json!(false);
    }
    let mut description = what;
    if bindings.is_empty() {
        description.push_str(" Not bound by this binding.");
    } else {
        description.push_str(&format!(" Bound to {}.", keys_text(&bindings)));
    }
    ChannelDescription {
        address,
        title,
        description,
        bindings: amqp(binding),
    }
}

fn consumer(request: &DescribeRequest<'_>, vhost: &str) -> BindingDescription {
    let binding = request.binding;
    let props = &rabbit(binding).consumer;
    let common = &props.common;
    let topology = plan_consumer(binding, "<unique>");
    let plan = &topology.plan;
    let exchange = exchange_of(plan, &topology.exchange, common);
    let declared = plan.exchanges.iter().any(|e| e.name == exchange.name);

    let sources = topology
        .queues
        .iter()
        .map(|q| match &binding.group {
            Some(group) => queue_channel(
                plan,
                q,
                Some(q.clone()),
                q.clone(),
                format!(
                    "Queue `{q}` of consumer group `{group}` (binding `{}`).",
                    binding.name
                ),
                vhost,
            ),
            None => queue_channel(
                plan,
                q,
                None,
                format!("{}.anonymous", binding.destination),
                format!(
                    "The anonymous, exclusive, auto-delete queue of binding `{}`, named `{q}` when it is declared (`<unique>` is a random id).",
                    binding.name
                ),
                vhost,
            ),
        })
        .collect();
    let related = plan
        .queues
        .iter()
        .filter(|q| !topology.queues.contains(&q.name))
        .map(|q| {
            queue_channel(
                plan,
                &q.name,
                Some(q.name.clone()),
                q.name.clone(),
                format!("Dead-letter queue of binding `{}`.", binding.name),
                vhost,
            )
        })
        .collect();

    let mut note = Vec::new();
    match (&topology.dead_letter, props.republish_to_dlq) {
        (Some((dlx, key)), true) => note.push(format!(
            "A message that fails {} attempt(s) is republished to exchange `{dlx}` with routing key `{key}` and `x-exception-*` headers.",
            binding.consumer.max_attempts
        )),
        (Some((dlx, key)), false) => note.push(format!(
            "A message that fails {} attempt(s) is rejected; the broker dead-letters it to exchange `{dlx}` with routing key `{key}`.",
            binding.consumer.max_attempts
        )),
        (None, _) => note.push(format!(
            "A message that fails {} attempt(s) is rejected without a dead-letter queue (`autoBindDlq` is off).",
            binding.consumer.max_attempts
        )),
    }
    note.push(format!("Prefetch {}.", props.effective_prefetch(binding)));
    if let Some(b) = props.batching(binding) {
        note.push(format!(
            "The listener takes batches of up to {} messages (a shorter one after {} ms without a delivery).",
            b.size,
            b.receive_timeout.as_millis()
        ));
    }
    let operation = amqp(json!({
        "ack": props.acknowledge_mode != AcknowledgeMode::None,
        "bindingVersion": AMQP_BINDING_VERSION,
    }));
    BindingDescription {
        address: Some(exchange.name.clone()),
        channel: exchange_channel(&exchange, vhost, declared),
        operation,
        message: Map::new(),
        sources,
        related,
        note: Some(note.join(" ")),
    }
}

fn producer(request: &DescribeRequest<'_>, vhost: &str) -> BindingDescription {
    let binding = request.binding;
    let props = &rabbit(binding).producer;
    let common = &props.common;
    let topology = plan_producer(binding);
    let plan = &topology.plan;
    let exchange = exchange_of(plan, &topology.exchange, common);
    let declared = plan.exchanges.iter().any(|e| e.name == exchange.name);

    let mut operation = json!({
        "deliveryMode": match props.delivery_mode {
            DeliveryMode::NonPersistent => 1,
            DeliveryMode::Persistent => 2,
        },
        "bindingVersion": AMQP_BINDING_VERSION,
    });
    let partitioned = binding.producer.is_partitioned();
    let note = match (&props.routing_key_expression, &props.routing_key) {
        (Some(expression), _) => {
            operation["x-routingKeyExpression"] = json!(expression);
            format!("The routing key of each message is the expression `{expression}`.")
        }
        (None, key) => {
            let key = key.clone().unwrap_or_else(|| binding.destination.clone());
            if partitioned {
                format!(
                    "The routing key is `{key}-<partition>` ({} partitions).",
                    binding.producer.partition_count
                )
            } else {
                operation["cc"] = json!([key]);
                format!("The routing key is `{key}`.")
            }
        }
    };
    let related = plan
        .queues
        .iter()
        .map(|q| {
            let what = if q.name.ends_with(".dlq") || common.dead_letter_queue_name.as_deref() == Some(&q.name) {
                format!("Dead-letter queue of a required group of binding `{}`.", binding.name)
            } else if bound_with(plan, &q.name).iter().any(|b| b.source == exchange.name) {
                format!("Queue of a required group of binding `{}` (`requiredGroups`), declared by the producer.", binding.name)
            } else {
                format!("Queue declared by binding `{}`.", binding.name)
            };
            queue_channel(plan, &q.name, Some(q.name.clone()), q.name.clone(), what, vhost)
        })
        .collect();
    BindingDescription {
        address: Some(exchange.name.clone()),
        channel: exchange_channel(&exchange, vhost, declared),
        operation: amqp(operation),
        message: Map::new(),
        sources: Vec::new(),
        related,
        note: Some(note),
    }
}
