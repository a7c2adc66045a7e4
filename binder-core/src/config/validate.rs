//! Checks that span several properties: contradictions a single value cannot show.

use config::Value;

use super::error::{Problems, did_you_mean};
use super::extension::{BindingCheck, ExtensionRegistration};
use super::key::descend;
use super::model::{BindingConfig, STREAM_PREFIX, StreamConfig};
use super::properties::HeaderMode;

pub(crate) fn validate(
    cfg: &StreamConfig,
    root: &Value,
    binder_types: &[String],
    extensions: &[&'static ExtensionRegistration],
    problems: &mut Problems,
) {
    let mut known: Vec<&str> = cfg.binders.keys().map(String::as_str).collect();
    known.extend(binder_types.iter().map(String::as_str));

    for binder in cfg.binders.values() {
        if !binder.binder_type.is_empty() && !binder_types.contains(&binder.binder_type) {
            let origin = descend(
                root,
                &["spring", "cloud", "stream", "binders", &binder.name],
            )
            .and_then(|v| v.origin());
            problems.push(
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
            problems.push(
                origin,
                format!("{STREAM_PREFIX}.defaultBinder"),
                unknown_binder(default, known.iter().copied()),
            );
        }
    }
    for binding in cfg.bindings.values() {
        check_binding(
            &mut BindingCheck::new(root, problems, &binding.name, None),
            binding,
            &known,
        );
        for (namespace, value) in binding.extensions.iter() {
            if let Some(registration) = extensions.iter().find(|r| r.namespace == namespace) {
                let mut check = BindingCheck::new(root, problems, &binding.name, Some(namespace));
                registration.validate(value, binding, &mut check);
            }
        }
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

/// The checks of a binding's common properties.
fn check_binding(check: &mut BindingCheck<'_>, b: &BindingConfig, known_binders: &[&str]) {
    if let Some(binder) = &b.binder {
        if !known_binders.contains(&binder.as_str()) {
            check.common(
                "binder",
                unknown_binder(binder, known_binders.iter().copied()),
            );
        }
    }
    if b.destination.trim().is_empty() {
        check.common("destination", "must not be empty");
    }
    if b.configured.consumer && b.configured.producer {
        check.common(
            "producer",
            "a binding is either an input or an output, but this one has both consumer and producer properties",
        );
    }

    // Consumer side.
    if b.consumer.partitioned {
        if b.group.is_none() {
            check.common(
                "group",
                "missing: a partitioned consumer needs a group (anonymous consumers are never partitioned)",
            );
        }
        let count = b.instance_count();
        for index in b.instance_indexes() {
            if index >= count {
                check.common(
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
        check.common(
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
            check.common(
                &format!("{side}.headerMode"),
                "embeddedHeaders is not supported: the binders carry headers natively (use `headers`)",
            );
        }
    }

    // Producer side.
    if b.producer
        .required_groups
        .iter()
        .any(|g| g.trim().is_empty())
    {
        check.common(
            "producer.requiredGroups",
            "a required group must not be empty",
        );
    }
}
