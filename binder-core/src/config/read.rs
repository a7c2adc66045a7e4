//! Reading the typed configuration from the merged property tree: every key known, typed
//! and defaulted, every problem collected, then the whole validated.

use std::collections::BTreeMap;

use config::{Value, ValueKind};

use super::error::{ConfigError, Problems, unknown_key_message};
use super::key::{canonical, descend};
use super::model::{
    BUILTIN_BINDER_TYPES, BinderConfig, BindingConfig, BindingProperties, ConfiguredSections,
    RabbitBindingProperties, STREAM_PREFIX, StreamConfig,
};
use super::node::{FieldValue, Section, Table, as_table, join, sorted};
use super::validate;

const STREAM_KEYS: &[&str] = &[
    "defaultBinder",
    "binders",
    "default",
    "bindings",
    "rabbit",
    "instanceCount",
    "instanceIndex",
    "dynamicDestinations",
    "startupTimeout",
];

/// Builds the typed configuration from the merged tree. `binder_types` are the binder types
/// that may be named.
pub(crate) fn read(
    root: Value,
    binder_types: &[String],
    active_profiles: Vec<String>,
    sources: Vec<String>,
) -> Result<StreamConfig, ConfigError> {
    let mut problems = Problems::default();
    let mut cfg = StreamConfig {
        default_binder: None,
        binders: BTreeMap::new(),
        bindings: BTreeMap::new(),
        instance_count: 1,
        instance_index: 0,
        dynamic_destinations: Vec::new(),
        startup_timeout: None,
        active_profiles,
        sources,
        template: Default::default(),
        raw: Value::default(),
    };
    let empty = Table::new();
    let stream = match descend(&root, &["spring", "cloud", "stream"]) {
        Some(v) => as_table(v, STREAM_PREFIX, &mut problems).unwrap_or(&empty),
        None => &empty,
    };

    let mut binding_tables: BTreeMap<String, (Option<&Value>, Option<&Value>)> = BTreeMap::new();
    let mut rabbit_default: Option<&Value> = None;
    let mut common_default: Option<&Value> = None;
    let mut seen = BTreeMap::new();
    for (key, value) in sorted(stream) {
        let path = join(STREAM_PREFIX, key);
        let canon = canonical(key);
        if let Some(first) = seen.insert(canon.clone(), key) {
            problems.push(
                value.origin(),
                &path,
                format!("set twice, also as `{first}`"),
            );
            continue;
        }
        match canon.as_str() {
            "defaultbinder" => cfg.default_binder = String::parse(value, &path, &mut problems),
            "instancecount" => {
                if let Some(n) = u32::parse(value, &path, &mut problems) {
                    if n == 0 {
                        problems.push(value.origin(), &path, "must be at least 1");
                    }
                    cfg.instance_count = n.max(1);
                }
            }
            "instanceindex" => {
                cfg.instance_index = u32::parse(value, &path, &mut problems).unwrap_or(0)
            }
            "startuptimeout" => {
                cfg.startup_timeout = u64::parse(value, &path, &mut problems)
                    .filter(|ms| *ms > 0)
                    .map(std::time::Duration::from_millis)
            }
            "dynamicdestinations" => {
                cfg.dynamic_destinations =
                    Vec::<String>::parse(value, &path, &mut problems).unwrap_or_default()
            }
            "default" => common_default = Some(value),
            "binders" => read_binders(value, &path, &mut cfg, &mut problems),
            "bindings" => {
                for (name, table) in sorted(as_table(value, &path, &mut problems).unwrap_or(&empty))
                {
                    binding_tables.entry(name.clone()).or_default().0 = Some(table);
                }
            }
            "rabbit" => {
                let rabbit = as_table(value, &path, &mut problems).unwrap_or(&empty);
                for (rkey, rvalue) in sorted(rabbit) {
                    let rpath = join(&path, rkey);
                    match canonical(rkey).as_str() {
                        "default" => rabbit_default = Some(rvalue),
                        "bindings" => {
                            for (name, table) in
                                sorted(as_table(rvalue, &rpath, &mut problems).unwrap_or(&empty))
                            {
                                binding_tables.entry(name.clone()).or_default().1 = Some(table);
                            }
                        }
                        _ => problems.push(
                            rvalue.origin(),
                            &rpath,
                            unknown_key_message("key", rkey, &["default", "bindings"]),
                        ),
                    }
                }
            }
            _ => problems.push(
                value.origin(),
                &path,
                unknown_key_message("key", key, STREAM_KEYS),
            ),
        }
    }

    let mut common_template = BindingProperties::default();
    if let Some(v) = common_default {
        common_template.merge_table(v, &join(STREAM_PREFIX, "default"), &mut problems);
    }
    let consumer = &mut common_template.consumer;
    consumer.instance_count.get_or_insert(cfg.instance_count);
    consumer.instance_index.get_or_insert(cfg.instance_index);
    let mut rabbit_template = RabbitBindingProperties::default();
    if let Some(v) = rabbit_default {
        rabbit_template.merge_table(v, &join(STREAM_PREFIX, "rabbit.default"), &mut problems);
    }

    for (name, (common, rabbit)) in binding_tables {
        let mut c = common_template.clone();
        let mut r = rabbit_template.clone();
        let mut configured = ConfiguredSections::default();
        if let Some(v) = common {
            c.merge_table(
                v,
                &format!("{STREAM_PREFIX}.bindings.{name}"),
                &mut problems,
            );
            configured.consumer |= descend(v, &["consumer"]).is_some();
            configured.producer |= descend(v, &["producer"]).is_some();
        }
        if let Some(v) = rabbit {
            r.merge_table(
                v,
                &format!("{STREAM_PREFIX}.rabbit.bindings.{name}"),
                &mut problems,
            );
            configured.consumer |= descend(v, &["consumer"]).is_some();
            configured.producer |= descend(v, &["producer"]).is_some();
        }
        let mut binding = BindingConfig::resolve(&name, c, r);
        binding.configured = configured;
        cfg.bindings.insert(name, binding);
    }
    cfg.template = (common_template, rabbit_template);

    validate::validate(&cfg, &root, binder_types, &mut problems);
    cfg.raw = root;
    problems.into_result(cfg)
}

fn read_binders(value: &Value, path: &str, cfg: &mut StreamConfig, problems: &mut Problems) {
    let Some(table) = as_table(value, path, problems) else {
        return;
    };
    for (name, body) in sorted(table) {
        let bpath = join(path, name);
        let Some(fields) = as_table(body, &bpath, problems) else {
            continue;
        };
        let mut binder = BinderConfig {
            name: name.clone(),
            binder_type: String::new(),
            default_candidate: true,
            inherit_environment: true,
            environment: Value::new(None, ValueKind::Table(Table::new())),
        };
        let mut typed = false;
        for (key, v) in sorted(fields) {
            let kpath = join(&bpath, key);
            match canonical(key).as_str() {
                "type" => {
                    if let Some(t) = String::parse(v, &kpath, problems) {
                        binder.binder_type = t;
                        typed = true;
                    }
                }
                "defaultcandidate" => {
                    bool::merge(&mut binder.default_candidate, v, &kpath, problems)
                }
                "inheritenvironment" => {
                    bool::merge(&mut binder.inherit_environment, v, &kpath, problems)
                }
                "environment" => {
                    if as_table(v, &kpath, problems).is_some() {
                        binder.environment = v.clone();
                    }
                }
                _ => problems.push(
                    v.origin(),
                    &kpath,
                    unknown_key_message(
                        "key",
                        key,
                        &[
                            "type",
                            "environment",
                            "defaultCandidate",
                            "inheritEnvironment",
                        ],
                    ),
                ),
            }
        }
        if !typed {
            problems.push(
                body.origin(),
                join(&bpath, "type"),
                format!(
                    "missing: every binder configuration needs a type ({})",
                    BUILTIN_BINDER_TYPES.join(", ")
                ),
            );
        }
        cfg.binders.insert(name.clone(), binder);
    }
}
