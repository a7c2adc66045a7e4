//! Checks that span several properties: contradictions a single value cannot show.

use config::Value;

use super::error::{Problems, did_you_mean};
use super::key::descend;
use super::model::{BindingConfig, STREAM_PREFIX, StreamConfig};
use super::properties::{ExchangeType, HeaderMode};

/// AMQP names are short strings.
const MAX_NAME_BYTES: usize = 255;

struct Ctx<'a> {
    root: &'a Value,
    problems: &'a mut Problems,
}

impl Ctx<'_> {
    /// Reports a problem at `bindings.<name>.<rest>` (or its `rabbit.bindings` twin), citing
    /// the origin of the value written there, if any.
    fn at(&mut self, binding: &str, rabbit: bool, rest: &str, message: String) {
        let base = if rabbit {
            format!("{STREAM_PREFIX}.rabbit.bindings.{binding}")
        } else {
            format!("{STREAM_PREFIX}.bindings.{binding}")
        };
        let origin = self
            .written(binding, rabbit, rest)
            .and_then(|v| v.origin())
            .map(str::to_owned);
        self.problems
            .push(origin.as_deref(), format!("{base}.{rest}"), message);
    }

    /// The value written for this binding itself (not inherited from defaults).
    fn written(&self, binding: &str, rabbit: bool, rest: &str) -> Option<&Value> {
        let mut path: Vec<&str> = vec!["spring", "cloud", "stream"];
        if rabbit {
            path.push("rabbit");
        }
        path.push("bindings");
        path.push(binding);
        path.extend(rest.split('.'));
        descend(self.root, &path)
    }

    fn written_true(&self, binding: &str, rabbit: bool, rest: &str) -> bool {
        self.written(binding, rabbit, rest)
            .is_some_and(|v| v.clone().into_bool().unwrap_or(false))
    }
}

pub(crate) fn validate(
    cfg: &StreamConfig,
    root: &Value,
    binder_types: &[String],
    problems: &mut Problems,
) {
    let mut ctx = Ctx { root, problems };
    let mut known: Vec<&str> = cfg.binders.keys().map(String::as_str).collect();
    known.extend(binder_types.iter().map(String::as_str));

    for binder in cfg.binders.values() {
        if !binder.binder_type.is_empty() && !binder_types.contains(&binder.binder_type) {
            let origin = descend(
                root,
                &["spring", "cloud", "stream", "binders", &binder.name],
            )
            .and_then(|v| v.origin());
            ctx.problems.push(
                origin,
                format!("{STREAM_PREFIX}.binders.{}.type", binder.name),
                unknown_binder(&binder.binder_type, binder_types.iter().map(String::as_str)),
            );
        }
    }
    if let Some(default) = &cfg.default_binder {
        if !known.contains(&default.as_str()) {
            let origin = descend(root, &["spring", "cloud", "stream", "defaultBinder"])
                .and_then(|v| v.origin());
            ctx.problems.push(
                origin,
                format!("{STREAM_PREFIX}.defaultBinder"),
                unknown_binder(default, known.iter().copied()),
            );
        }
    }
    for binding in cfg.bindings.values() {
        check_binding(&mut ctx, binding, &known);
    }
}

fn unknown_binder<'a>(name: &str, known: impl Iterator<Item = &'a str> + Clone) -> String {
    let list: Vec<&str> = known.clone().collect();
    match did_you_mean(name, known) {
        Some(near) => format!("no binder `{name}` is configured or known; did you mean `{near}`?"),
        None => format!(
            "no binder `{name}` is configured or known (available: {})",
            list.join(", ")
        ),
    }
}

fn check_binding(ctx: &mut Ctx<'_>, b: &BindingConfig, known_binders: &[&str]) {
    let name = b.name.as_str();
    let rc = &b.rabbit_consumer;
    let rp = &b.rabbit_producer;

    if let Some(binder) = &b.binder {
        if !known_binders.contains(&binder.as_str()) {
            ctx.at(
                name,
                false,
                "binder",
                unknown_binder(binder, known_binders.iter().copied()),
            );
        }
    }
    if b.destination.trim().is_empty() {
        ctx.at(name, false, "destination", "must not be empty".to_owned());
    }
    let prefix = if rc.common.prefix.len() > rp.common.prefix.len() {
        &rc.common.prefix
    } else {
        &rp.common.prefix
    };
    let longest = format!(
        "{prefix}{}.{}.dlq",
        b.destination,
        b.group.as_deref().unwrap_or("")
    );
    if longest.len() > MAX_NAME_BYTES {
        ctx.at(
            name,
            false,
            "destination",
            format!(
                "the queue name built from prefix, destination and group would exceed the AMQP limit of {MAX_NAME_BYTES} bytes"
            ),
        );
    }
    if b.configured.consumer && b.configured.producer {
        ctx.at(
            name,
            false,
            "producer",
            "a binding is either an input or an output, but this one has both consumer and producer properties"
                .to_owned(),
        );
    }

    // Consumer side.
    if b.group.is_none() && ctx.written_true(name, true, "consumer.autoBindDlq") {
        ctx.at(
            name,
            true,
            "consumer.autoBindDlq",
            "needs a `group`: an anonymous consumer's queue is exclusive and auto-delete, so it never gets a dead-letter queue"
                .to_owned(),
        );
    }
    if rc.exclusive && b.consumer.concurrency > 1 {
        ctx.at(
            name,
            true,
            "consumer.exclusive",
            format!(
                "an exclusive consumer allows one consumer on the queue, but concurrency is {}: set concurrency to 1 or exclusive to false",
                b.consumer.concurrency
            ),
        );
    }
    if b.consumer.partitioned {
        if rc.common.exchange_type == ExchangeType::Fanout {
            ctx.at(
                name,
                true,
                "consumer.exchangeType",
                "a fanout exchange cannot route to partitions: use topic or direct for a partitioned consumer"
                    .to_owned(),
            );
        }
        if b.group.is_none() {
            ctx.at(
                name,
                false,
                "group",
                "missing: a partitioned consumer needs a group (anonymous consumers are never partitioned)"
                    .to_owned(),
            );
        }
        let count = b.instance_count();
        for index in b.instance_indexes() {
            if index >= count {
                ctx.at(
                    name,
                    false,
                    "consumer.instanceIndex",
                    format!(
                        "instance index {index} is out of range: instanceCount is {count}, so indexes go from 0 to {}",
                        count - 1
                    ),
                );
            }
        }
    }
    if b.consumer.back_off_max_interval < b.consumer.back_off_initial_interval {
        ctx.at(
            name,
            false,
            "consumer.backOffMaxInterval",
            format!(
                "{} ms is shorter than backOffInitialInterval ({} ms)",
                b.consumer.back_off_max_interval, b.consumer.back_off_initial_interval
            ),
        );
    }
    for (side, mode) in [
        ("consumer", b.consumer.header_mode),
        ("producer", b.producer.header_mode),
    ] {
        if mode == Some(HeaderMode::EmbeddedHeaders) {
            ctx.at(
                name,
                false,
                &format!("{side}.headerMode"),
                "embeddedHeaders is not supported: AMQP carries headers natively (use `headers`)"
                    .to_owned(),
            );
        }
    }
    for (side, common) in [("consumer", &rc.common), ("producer", &rp.common)] {
        if common.quorum.enabled {
            let mut clash = Vec::new();
            if common.max_priority.is_some() {
                clash.push("maxPriority");
            }
            if common.lazy {
                clash.push("lazy");
            }
            if side == "consumer" && !rc.durable_subscription {
                clash.push("durableSubscription: false");
            }
            if !clash.is_empty() {
                ctx.at(
                    name,
                    true,
                    &format!("{side}.quorum.enabled"),
                    format!("quorum queues do not support {}", clash.join(", ")),
                );
            }
        }
    }

    // Producer side.
    if b.producer.is_partitioned() && rp.common.exchange_type == ExchangeType::Fanout {
        ctx.at(
            name,
            true,
            "producer.exchangeType",
            "a fanout exchange cannot route to partitions: use topic or direct for a partitioned producer"
                .to_owned(),
        );
    }
    if rp.routing_key.is_some() && rp.routing_key_expression.is_some() {
        ctx.at(
            name,
            true,
            "producer.routingKey",
            "set either routingKey or routingKeyExpression, not both".to_owned(),
        );
    }
    if let Some(alt) = &rp.alternate_exchange {
        if alt.name.as_deref().is_none_or(str::is_empty) {
            ctx.at(
                name,
                true,
                "producer.alternateExchange.name",
                "missing: an alternate exchange needs a name".to_owned(),
            );
        }
    }
    if b.producer
        .required_groups
        .iter()
        .any(|g| g.trim().is_empty())
    {
        ctx.at(
            name,
            false,
            "producer.requiredGroups",
            "a required group must not be empty".to_owned(),
        );
    }
}
