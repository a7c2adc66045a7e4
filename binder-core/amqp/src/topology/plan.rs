//! From configuration to declarations.

use super::naming::dlx_name;
use super::{BindingDecl, DestinationType, ExchangeDecl, QueueDecl, TopologyPlan};
use crate::properties::{ExchangeType, QuorumProperties, RabbitCommonProperties, rabbit};
use binder_core::config::{BindingConfig, StreamConfig};
use binder_core::message::{HeaderValue, Headers};

pub use binder_core::binder::BindingRole;

/// Two declarations of one name that differ.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    /// Two bindings need one exchange with different attributes.
    #[error(
        "exchange `{name}` is declared twice with different {}",
        exchange_diff(existing, wanted)
    )]
    ConflictingExchange {
        /// Exchange name.
        name: String,
        /// The first declaration.
        existing: Box<ExchangeDecl>,
        /// The conflicting one.
        wanted: Box<ExchangeDecl>,
    },
    /// Two bindings need one queue with different attributes.
    #[error(
        "queue `{name}` is declared twice with different {}",
        queue_diff(existing, wanted)
    )]
    ConflictingQueue {
        /// Queue name.
        name: String,
        /// The first declaration.
        existing: Box<QueueDecl>,
        /// The conflicting one.
        wanted: Box<QueueDecl>,
    },
    /// A binding's declarations clash with an earlier binding's.
    #[error("binding `{binding}`: {source}")]
    InBinding {
        /// The binding whose declarations clash.
        binding: String,
        /// The clash.
        #[source]
        source: Box<PlanError>,
    },
}

fn diff_line<T: std::fmt::Display + PartialEq>(out: &mut Vec<String>, what: &str, a: T, b: T) {
    if a != b {
        out.push(format!("{what} ({a} vs {b})"));
    }
}

fn args_text(args: &Headers) -> String {
    serde_json::to_string(args).unwrap_or_else(|_| args.to_string())
}

fn exchange_diff(a: &ExchangeDecl, b: &ExchangeDecl) -> String {
    let mut out = Vec::new();
    diff_line(&mut out, "type", a.kind, b.kind);
    diff_line(&mut out, "durable", a.durable, b.durable);
    diff_line(&mut out, "auto-delete", a.auto_delete, b.auto_delete);
    diff_line(&mut out, "internal", a.internal, b.internal);
    diff_line(
        &mut out,
        "arguments",
        args_text(&a.arguments),
        args_text(&b.arguments),
    );
    out.join(", ")
}

fn queue_diff(a: &QueueDecl, b: &QueueDecl) -> String {
    let mut out = Vec::new();
    diff_line(&mut out, "durable", a.durable, b.durable);
    diff_line(&mut out, "exclusive", a.exclusive, b.exclusive);
    diff_line(&mut out, "auto-delete", a.auto_delete, b.auto_delete);
    diff_line(
        &mut out,
        "arguments",
        args_text(&a.arguments),
        args_text(&b.arguments),
    );
    out.join(", ")
}

/// The declarations of a consumer binding and the queues it consumes from.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsumerTopology {
    /// What to declare.
    pub plan: TopologyPlan,
    /// The destination exchange.
    pub exchange: String,
    /// Queues to consume from (one per partition index for a partitioned consumer).
    pub queues: Vec<String>,
    /// The dead-letter exchange and routing key a republished failure goes to, if any.
    pub dead_letter: Option<(String, String)>,
}

/// The declarations of a producer binding and where it publishes.
#[derive(Debug, Clone, PartialEq)]
pub struct ProducerTopology {
    /// What to declare.
    pub plan: TopologyPlan,
    /// The exchange published to.
    pub exchange: String,
}

/// Guesses a binding's role when no code says it: written `consumer`/`producer` sections
/// decide, then a `group` (consumer), then SCSt's names (`input`, `…-in-<n>` consume;
/// `output`, `…-out-<n>` publish). Anything else is taken as a producer, which declares only
/// the exchange.
pub fn infer_role(binding: &BindingConfig) -> BindingRole {
    BindingRole::infer(binding)
}

/// The plan of a whole configuration, each binding in the role [`infer_role`] gives it, with
/// anonymous queues named `<destination>.anonymous.<unique>` as a placeholder.
pub fn plan(config: &StreamConfig) -> Result<TopologyPlan, PlanError> {
    let mut plan = TopologyPlan::default();
    for binding in config.bindings.values() {
        let part = match infer_role(binding) {
            BindingRole::Consumer => plan_consumer(binding, "<unique>").plan,
            BindingRole::Producer => plan_producer(binding).plan,
        };
        plan.merge(part).map_err(|e| PlanError::InBinding {
            binding: binding.name.clone(),
            source: Box::new(e),
        })?;
    }
    Ok(plan)
}

/// Keys from `bindingRoutingKey`, split by `bindingRoutingKeyDelimiter`.
fn binding_keys(common: &RabbitCommonProperties) -> Vec<String> {
    match (
        &common.binding_routing_key,
        &common.binding_routing_key_delimiter,
    ) {
        (None, _) => Vec::new(),
        (Some(key), Some(delim)) if !delim.is_empty() => {
            key.split(delim.as_str()).map(str::to_owned).collect()
        }
        (Some(key), _) => vec![key.clone()],
    }
}

fn string_args(map: &std::collections::BTreeMap<String, String>) -> Headers {
    map.iter()
        .map(|(k, v)| (k.clone(), HeaderValue::String(v.clone())))
        .collect()
}

/// Binds `queue` to `exchange` with each key; fanout binds once without a key, headers once
/// with the binding arguments.
fn bind_queue(
    plan: &mut TopologyPlan,
    exchange: &str,
    kind: ExchangeType,
    queue: &str,
    keys: &[String],
    arguments: &Headers,
) {
    let decl = |routing_key: &str, arguments: Headers| BindingDecl {
        source: exchange.to_owned(),
        destination: queue.to_owned(),
        destination_type: DestinationType::Queue,
        routing_key: routing_key.to_owned(),
        arguments,
    };
    match kind {
        ExchangeType::Fanout => plan.add_binding(decl("", Headers::new())),
        ExchangeType::Headers => plan.add_binding(decl("", arguments.clone())),
        ExchangeType::Topic | ExchangeType::Direct => {
            for key in keys {
                plan.add_binding(decl(key, Headers::new()));
            }
        }
    }
}

/// The non-partitioned keys (`#` by default) or the partition's keys (`<key>-<index>`, the key
/// defaulting to the destination).
fn keys_for(
    common: &RabbitCommonProperties,
    destination: &str,
    partition: Option<u32>,
) -> Vec<String> {
    let keys = binding_keys(common);
    match partition {
        None if keys.is_empty() => vec!["#".to_owned()],
        None => keys,
        Some(i) if keys.is_empty() => vec![format!("{destination}-{i}")],
        Some(i) => keys.into_iter().map(|k| format!("{k}-{i}")).collect(),
    }
}

struct QueueLimits<'a> {
    expires: Option<u32>,
    max_length: Option<u32>,
    max_length_bytes: Option<u32>,
    max_priority: Option<u8>,
    ttl: Option<u32>,
    lazy: bool,
    overflow: Option<&'a str>,
    quorum: &'a QuorumProperties,
    single_active_consumer: bool,
}

fn int_arg(args: &mut Headers, name: &str, value: Option<u32>) {
    if let Some(v) = value {
        // SCSt declares these as Java Integers (AMQP signed 32-bit); keeping the type keeps
        // redeclarations equivalent on a shared broker.
        args.insert(name, HeaderValue::I32(i32::try_from(v).unwrap_or(i32::MAX)));
    }
}

fn limit_args(args: &mut Headers, l: QueueLimits<'_>) {
    int_arg(args, "x-expires", l.expires);
    int_arg(args, "x-max-length", l.max_length);
    int_arg(args, "x-max-length-bytes", l.max_length_bytes);
    int_arg(args, "x-max-priority", l.max_priority.map(u32::from));
    int_arg(args, "x-message-ttl", l.ttl);
    if l.lazy {
        args.insert("x-queue-mode", "lazy");
    }
    if let Some(o) = l.overflow {
        args.insert("x-overflow", o);
    }
    if l.quorum.enabled {
        args.insert("x-queue-type", "quorum");
        int_arg(args, "x-delivery-limit", l.quorum.delivery_limit);
        int_arg(
            args,
            "x-quorum-initial-group-size",
            l.quorum.initial_group_size,
        );
    }
    if l.single_active_consumer {
        args.insert("x-single-active-consumer", true);
    }
}

/// Arguments of a main queue; `dead_letter` is the DLX and key when `autoBindDlq` applies.
fn queue_args(common: &RabbitCommonProperties, dead_letter: Option<(&str, &str)>) -> Headers {
    let mut args = Headers::new();
    if let Some((dlx, key)) = dead_letter {
        args.insert("x-dead-letter-exchange", dlx);
        args.insert("x-dead-letter-routing-key", key);
    }
    limit_args(
        &mut args,
        QueueLimits {
            expires: common.expires,
            max_length: common.max_length,
            max_length_bytes: common.max_length_bytes,
            max_priority: common.max_priority,
            ttl: common.ttl,
            lazy: common.lazy,
            overflow: common.overflow_behavior.map(|o| o.as_str()),
            quorum: &common.quorum,
            single_active_consumer: common.single_active_consumer,
        },
    );
    args
}

fn dlq_args(common: &RabbitCommonProperties) -> Headers {
    let mut args = Headers::new();
    if let Some(x) = &common.dlq_dead_letter_exchange {
        args.insert("x-dead-letter-exchange", x.as_str());
    }
    if let Some(k) = &common.dlq_dead_letter_routing_key {
        args.insert("x-dead-letter-routing-key", k.as_str());
    }
    limit_args(
        &mut args,
        QueueLimits {
            expires: common.dlq_expires,
            max_length: common.dlq_max_length,
            max_length_bytes: common.dlq_max_length_bytes,
            max_priority: common.dlq_max_priority,
            ttl: common.dlq_ttl,
            lazy: common.dlq_lazy,
            overflow: common.dlq_overflow_behavior.map(|o| o.as_str()),
            quorum: &common.dlq_quorum,
            single_active_consumer: common.dlq_single_active_consumer,
        },
    );
    args
}

fn exchange_decl(
    common: &RabbitCommonProperties,
    name: String,
    arguments: Headers,
) -> ExchangeDecl {
    ExchangeDecl {
        name,
        kind: common.exchange_type,
        durable: common.exchange_durable,
        auto_delete: common.exchange_auto_delete,
        internal: false,
        arguments,
    }
}

fn durable_queue(name: &str, arguments: Headers) -> QueueDecl {
    QueueDecl {
        name: name.to_owned(),
        durable: true,
        exclusive: false,
        auto_delete: false,
        arguments,
    }
}

/// Declares the DLX and the DLQ `dlq_base.dlq` (or `deadLetterQueueName`), bound with the
/// dead-letter key of each queue in `queues` (and `extra_key`, for republishing).
fn dead_letter_topology(
    plan: &mut TopologyPlan,
    common: &RabbitCommonProperties,
    dlq_base: &str,
    queues: &[String],
    extra_key: Option<&str>,
) {
    let dlx = dlx_name(common);
    let dlq = common
        .dead_letter_queue_name
        .clone()
        .unwrap_or_else(|| format!("{dlq_base}.dlq"));
    if common.declare_dlx {
        // Distinct names never conflict; a same-named DLX is identical by construction.
        let _ = plan.add_exchange(ExchangeDecl {
            name: dlx.clone(),
            kind: common.dead_letter_exchange_type,
            durable: true,
            auto_delete: false,
            internal: false,
            arguments: Headers::new(),
        });
    }
    let _ = plan.add_queue(durable_queue(&dlq, dlq_args(common)));
    let mut keys: Vec<String> = queues
        .iter()
        .map(|q| {
            common
                .dead_letter_routing_key
                .clone()
                .unwrap_or_else(|| q.clone())
        })
        .collect();
    keys.extend(extra_key.map(str::to_owned));
    let arguments = string_args(&common.dlq_binding_arguments);
    for key in keys {
        plan.add_binding(BindingDecl {
            source: dlx.clone(),
            destination: dlq.clone(),
            destination_type: DestinationType::Queue,
            routing_key: key,
            arguments: arguments.clone(),
        });
    }
}

/// Where a group's queues go: one per partition (or one), named `<base>[-<n>]`.
struct GroupQueues<'a> {
    common: &'a RabbitCommonProperties,
    exchange: &'a str,
    destination: &'a str,
    base: &'a str,
    partitions: Vec<Option<u32>>,
    /// `false` for `durableSubscription: false`: auto-delete queues.
    durable: bool,
}

/// Declares and binds a group's queues (with their dead-letter arguments when
/// `autoBindDlq`), unless `bindQueue` is off; returns their names.
fn group_queues(
    plan: &mut TopologyPlan,
    g: GroupQueues<'_>,
    binding_args: &Headers,
) -> Vec<String> {
    let common = g.common;
    let dlx = dlx_name(common);
    let mut queues = Vec::new();
    for partition in g.partitions {
        let queue = match partition {
            Some(i) => format!("{}-{i}", g.base),
            None => g.base.to_owned(),
        };
        let dl_key = common
            .dead_letter_routing_key
            .clone()
            .unwrap_or_else(|| queue.clone());
        let dead_letter = common
            .auto_bind_dlq
            .then_some((dlx.as_str(), dl_key.as_str()));
        if common.bind_queue {
            let args = queue_args(common, dead_letter);
            let decl = if g.durable {
                durable_queue(&queue, args)
            } else {
                QueueDecl {
                    name: queue.clone(),
                    durable: false,
                    exclusive: false,
                    auto_delete: true,
                    arguments: args,
                }
            };
            let _ = plan.add_queue(decl);
            let keys = keys_for(common, g.destination, partition);
            bind_queue(
                plan,
                g.exchange,
                common.exchange_type,
                &queue,
                &keys,
                binding_args,
            );
        }
        queues.push(queue);
    }
    queues
}

/// The topology of a consumer binding. `anonymous_id` names the queue of a binding without a
/// group (use [`super::anonymous_suffix`]).
pub fn plan_consumer(binding: &BindingConfig, anonymous_id: &str) -> ConsumerTopology {
    let rabbit = &rabbit(binding).consumer;
    let common = &rabbit.common;
    let prefix = common.prefix.as_str();
    let destination = binding.destination.as_str();
    let exchange = format!("{prefix}{destination}");
    let mut plan = TopologyPlan::default();
    if common.declare_exchange {
        let _ = plan.add_exchange(exchange_decl(common, exchange.clone(), Headers::new()));
    }
    let binding_args = string_args(&common.queue_binding_arguments);

    let Some(group) = binding.group.as_deref() else {
        let anon = format!("{}{anonymous_id}", rabbit.anonymous_group_prefix);
        let queue = if common.queue_name_group_only {
            format!("{prefix}{anon}")
        } else {
            format!("{prefix}{destination}.{anon}")
        };
        if common.bind_queue {
            let _ = plan.add_queue(QueueDecl {
                name: queue.clone(),
                durable: false,
                exclusive: true,
                auto_delete: true,
                arguments: queue_args(common, None),
            });
            let keys = keys_for(common, destination, None);
            bind_queue(
                &mut plan,
                &exchange,
                common.exchange_type,
                &queue,
                &keys,
                &binding_args,
            );
        }
        return ConsumerTopology {
            plan,
            exchange,
            queues: vec![queue],
            dead_letter: None,
        };
    };

    let base = if common.queue_name_group_only {
        format!("{prefix}{group}")
    } else {
        format!("{prefix}{destination}.{group}")
    };
    let partitions: Vec<Option<u32>> = if binding.consumer.partitioned {
        binding.instance_indexes().into_iter().map(Some).collect()
    } else {
        vec![None]
    };
    let queues = group_queues(
        &mut plan,
        GroupQueues {
            common,
            exchange: &exchange,
            destination,
            base: &base,
            partitions,
            durable: rabbit.durable_subscription,
        },
        &binding_args,
    );
    let dlx = dlx_name(common);
    let with_dlq = common.auto_bind_dlq && rabbit.durable_subscription;
    if with_dlq {
        let extra = rabbit.republish_to_dlq.then_some(base.as_str());
        dead_letter_topology(&mut plan, common, &base, &queues, extra);
    }
    let dead_letter = (common.auto_bind_dlq || rabbit.republish_to_dlq).then(|| {
        let key = common
            .dead_letter_routing_key
            .clone()
            .unwrap_or_else(|| base.clone());
        (dlx, key)
    });
    ConsumerTopology {
        plan,
        exchange,
        queues,
        dead_letter,
    }
}

/// The topology of a producer binding: its exchange (with an alternate exchange if set) and
/// the queues of its `requiredGroups`.
pub fn plan_producer(binding: &BindingConfig) -> ProducerTopology {
    let rabbit = &rabbit(binding).producer;
    let common = &rabbit.common;
    let prefix = common.prefix.as_str();
    let destination = binding.destination.as_str();
    let exchange = format!("{prefix}{destination}");
    let mut plan = TopologyPlan::default();

    let mut exchange_args = Headers::new();
    if let Some(alt) = &rabbit.alternate_exchange {
        if let Some(name) = alt.name.as_deref().filter(|n| !n.is_empty()) {
            exchange_args.insert("alternate-exchange", name);
            if !alt.exists {
                let _ = plan.add_exchange(ExchangeDecl {
                    name: name.to_owned(),
                    kind: alt.kind,
                    durable: true,
                    auto_delete: false,
                    internal: false,
                    arguments: Headers::new(),
                });
                if let Some(queue) = alt.binding.as_ref().and_then(|b| b.queue.as_deref()) {
                    let key = alt.binding.as_ref().map(|b| b.routing_key.clone());
                    let _ = plan.add_queue(durable_queue(queue, Headers::new()));
                    bind_queue(
                        &mut plan,
                        name,
                        alt.kind,
                        queue,
                        &key.into_iter().collect::<Vec<_>>(),
                        &Headers::new(),
                    );
                }
            }
        }
    }
    if common.declare_exchange {
        let _ = plan.add_exchange(exchange_decl(common, exchange.clone(), exchange_args));
    }

    let binding_args = string_args(&common.queue_binding_arguments);
    for group in &binding.producer.required_groups {
        let base = if common.queue_name_group_only {
            format!("{prefix}{group}")
        } else {
            format!("{prefix}{destination}.{group}")
        };
        let partitions: Vec<Option<u32>> = if binding.producer.is_partitioned() {
            (0..binding.producer.partition_count).map(Some).collect()
        } else {
            vec![None]
        };
        let queues = group_queues(
            &mut plan,
            GroupQueues {
                common,
                exchange: &exchange,
                destination,
                base: &base,
                partitions,
                durable: true,
            },
            &binding_args,
        );
        if common.auto_bind_dlq {
            dead_letter_topology(&mut plan, common, &base, &queues, None);
        }
    }
    ProducerTopology { plan, exchange }
}
