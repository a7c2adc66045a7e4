//! The resolved configuration: binders and bindings with every default applied.

use std::collections::BTreeMap;

use config::{Value, ValueKind};

use super::error::{Problems, unknown_key_message};
use super::node::{FieldValue, Section, Table, as_table, canonical, join, properties, sorted};
use super::properties::{
    ConsumerProperties, ProducerProperties, RabbitConsumerProperties, RabbitProducerProperties,
};
use crate::codec::DEFAULT_CONTENT_TYPE;

/// Binder types known without registration.
pub const BUILTIN_BINDER_TYPES: &[&str] = &["embedded", "rabbit"];

/// The binder used when nothing chooses one.
pub const DEFAULT_BINDER_TYPE: &str = "embedded";

/// The key path of the stream configuration tree.
pub const STREAM_PREFIX: &str = "spring.cloud.stream";

properties! {
    /// Properties of one binding (`spring.cloud.stream.bindings.<binding>.*`), also the shape
    /// of `spring.cloud.stream.default.*`.
    pub struct BindingProperties {
        /// Destination (exchange) name; defaults to the binding name.
        destination: Option<String> = None => "destination";
        /// Consumer group; none means an anonymous, auto-delete queue.
        group: Option<String> = None => "group";
        /// Content type of payloads.
        content_type: String = DEFAULT_CONTENT_TYPE.to_owned() => "contentType";
        /// Binder configuration (or binder type) carrying this binding.
        binder: Option<String> = None => "binder";
        /// Common consumer properties.
        consumer: ConsumerProperties = ConsumerProperties::default() => "consumer";
        /// Common producer properties.
        producer: ProducerProperties = ProducerProperties::default() => "producer";
    }
}

properties! {
    /// AMQP extension of one binding (`spring.cloud.stream.rabbit.bindings.<binding>.*`).
    pub struct RabbitBindingProperties {
        /// AMQP consumer properties.
        consumer: RabbitConsumerProperties = RabbitConsumerProperties::default() => "consumer";
        /// AMQP producer properties.
        producer: RabbitProducerProperties = RabbitProducerProperties::default() => "producer";
    }
}

/// A named binder configuration (`spring.cloud.stream.binders.<name>.*`).
#[derive(Debug, Clone, PartialEq)]
pub struct BinderConfig {
    /// The configuration's name.
    pub name: String,
    /// The binder type (`embedded`, `rabbit`, …).
    pub binder_type: String,
    /// Whether it may be chosen as the default binder.
    pub default_candidate: bool,
    /// Whether it sees the application's own configuration besides `environment`.
    pub inherit_environment: bool,
    /// Binder-specific settings, kept as a tree for the binder to read.
    pub environment: Value,
}

/// Which sections of a binding were written for it (not inherited from defaults): a hint of
/// whether the binding is an input or an output when no code says so.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConfiguredSections {
    /// `consumer` or `rabbit…consumer` was written for this binding.
    pub consumer: bool,
    /// `producer` or `rabbit…producer` was written for this binding.
    pub producer: bool,
}

/// One binding with every default applied.
#[derive(Debug, Clone, PartialEq)]
pub struct BindingConfig {
    /// The binding name, exactly as written (case-sensitive).
    pub name: String,
    /// The destination (defaults to the binding name).
    pub destination: String,
    /// The consumer group, if any (an empty group is none).
    pub group: Option<String>,
    /// Content type of payloads.
    pub content_type: String,
    /// Binder configuration or type chosen for this binding, if any.
    pub binder: Option<String>,
    /// Common consumer properties.
    pub consumer: ConsumerProperties,
    /// Common producer properties.
    pub producer: ProducerProperties,
    /// AMQP consumer properties.
    pub rabbit_consumer: RabbitConsumerProperties,
    /// AMQP producer properties.
    pub rabbit_producer: RabbitProducerProperties,
    /// Sections written for this binding itself.
    pub configured: ConfiguredSections,
}

impl BindingConfig {
    /// Number of consumer instances (the binding's `instanceCount`, else the global one).
    pub fn instance_count(&self) -> u32 {
        self.consumer.instance_count.unwrap_or(1)
    }

    /// This instance's partition indexes: `instanceIndexList` if given, else `instanceIndex`.
    pub fn instance_indexes(&self) -> Vec<u32> {
        if self.consumer.instance_index_list.is_empty() {
            vec![self.consumer.instance_index.unwrap_or(0)]
        } else {
            self.consumer.instance_index_list.clone()
        }
    }

    /// A binding with all defaults, as used for a binding that no configuration mentions.
    pub fn defaults(name: &str) -> Self {
        BindingConfig::resolve(
            name,
            BindingProperties::default(),
            RabbitBindingProperties::default(),
        )
    }

    fn resolve(name: &str, common: BindingProperties, rabbit: RabbitBindingProperties) -> Self {
        BindingConfig {
            name: name.to_owned(),
            destination: common.destination.unwrap_or_else(|| name.to_owned()),
            group: common.group.filter(|g| !g.is_empty()),
            content_type: common.content_type,
            binder: common.binder,
            consumer: common.consumer,
            producer: common.producer,
            rabbit_consumer: rabbit.consumer,
            rabbit_producer: rabbit.producer,
            configured: ConfiguredSections::default(),
        }
    }
}

/// The whole stream configuration, validated, with defaults applied.
#[derive(Debug, Clone)]
pub struct StreamConfig {
    /// `spring.cloud.stream.defaultBinder`.
    pub default_binder: Option<String>,
    /// Named binder configurations.
    pub binders: BTreeMap<String, BinderConfig>,
    /// Configured bindings by name.
    pub bindings: BTreeMap<String, BindingConfig>,
    /// `spring.cloud.stream.instanceCount` (default 1).
    pub instance_count: u32,
    /// `spring.cloud.stream.instanceIndex` (default 0).
    pub instance_index: u32,
    /// Destinations a dynamic publisher may create (empty: any).
    pub dynamic_destinations: Vec<String>,
    /// `spring.cloud.stream.startupTimeout` (milliseconds; unset or 0: wait for ever): how
    /// long startup may wait for brokers that cannot be reached.
    pub startup_timeout: Option<std::time::Duration>,
    /// Profiles that were active when loading.
    pub active_profiles: Vec<String>,
    /// Files read, lowest precedence first.
    pub sources: Vec<String>,
    /// Template for bindings that no configuration names.
    pub(crate) template: (BindingProperties, RabbitBindingProperties),
    /// The merged tree, including the application's own keys.
    pub(crate) raw: Value,
}

impl StreamConfig {
    /// The binding with this name, or one built from the defaults if none is configured.
    pub fn binding(&self, name: &str) -> BindingConfig {
        self.bindings.get(name).cloned().unwrap_or_else(|| {
            BindingConfig::resolve(name, self.template.0.clone(), self.template.1.clone())
        })
    }

    /// The configuration tree a binder configuration sees: the application's whole tree
    /// (unless `inheritEnvironment: false`) overlaid with its `environment`. A bare binder
    /// type (no `binders.<name>` entry) sees the whole tree.
    pub fn binder_environment(&self, name: &str) -> Value {
        let Some(binder) = self.binders.get(name) else {
            return self.raw.clone();
        };
        let mut tree = if binder.inherit_environment {
            self.raw.clone()
        } else {
            Value::new(None, ValueKind::Table(Table::new()))
        };
        let mut environment = binder.environment.clone();
        super::env::expand_dotted(&mut environment);
        super::env::merge(&mut tree, environment);
        tree
    }

    /// This configuration with only the named bindings, for one of several services hosted
    /// in one process with one configuration file.
    pub fn select(&self, bindings: &[&str]) -> StreamConfig {
        let mut out = self.clone();
        out.bindings
            .retain(|name, _| bindings.contains(&name.as_str()));
        out
    }

    /// The merged configuration tree, with the application's own keys (anything outside the
    /// stream tree), to read with `config`'s API.
    pub fn raw(&self) -> &Value {
        &self.raw
    }

    /// The binder configuration name or type a binding resolves to.
    pub fn binder_for(&self, binding: &str) -> String {
        if let Some(b) = self.bindings.get(binding).and_then(|b| b.binder.clone()) {
            return b;
        }
        if let Some(b) = &self.default_binder {
            return b.clone();
        }
        let mut candidates = self.binders.values().filter(|b| b.default_candidate);
        match (candidates.next(), candidates.next()) {
            (Some(only), None) => only.name.clone(),
            _ => DEFAULT_BINDER_TYPE.to_owned(),
        }
    }

    /// The binder type behind a binder configuration name or a bare type.
    pub fn binder_type(&self, name_or_type: &str) -> String {
        self.binders
            .get(name_or_type)
            .map(|b| b.binder_type.clone())
            .unwrap_or_else(|| name_or_type.to_owned())
    }
}

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

/// Finds a key in a table by its canonical spelling.
pub(crate) fn lookup<'a>(table: &'a Table, key: &str) -> Option<(&'a String, &'a Value)> {
    if let Some(found) = table.get_key_value(key) {
        return Some(found);
    }
    let want = canonical(key);
    table.iter().find(|(k, _)| canonical(k) == want)
}

/// Walks `a.b.c` from `root`, matching keys by their canonical spelling ([`canonical`]), as
/// the loader does: binders read their own settings from their environment with it.
///
/// [`canonical`]: super::canonical
pub fn descend<'a>(root: &'a Value, path: &[&str]) -> Option<&'a Value> {
    let mut here = root;
    for segment in path {
        let ValueKind::Table(t) = &here.kind else {
            return None;
        };
        here = lookup(t, segment)?.1;
    }
    Some(here)
}

/// Builds the typed configuration from the merged tree. `binder_types` are the binder types
/// that may be named.
pub(crate) fn read(
    root: Value,
    binder_types: &[String],
    active_profiles: Vec<String>,
    sources: Vec<String>,
) -> Result<StreamConfig, super::ConfigError> {
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

    super::validate::validate(&cfg, &root, binder_types, &mut problems);
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
