//! Reading the typed configuration from the merged property tree: every key known, typed
//! and defaulted, every problem collected, then the whole validated.

use std::collections::BTreeMap;
use std::sync::Arc;

use config::{Value, ValueKind};

use super::error::{ConfigError, Problems, unknown_key_message};
use super::extension::ExtensionRegistration;
use super::extensions::{Extensions, StoredExtension};
use super::key::{canonical, descend};
use super::management::ManagementConfig;
use super::model::{
    BUILTIN_BINDER_TYPES, BinderConfig, BindingConfig, BindingProperties, ConfiguredSections,
    STREAM_PREFIX, StreamConfig,
};
use super::node::{FieldValue, Section, Table, as_table, join, sorted};
use super::validate;

const STREAM_KEYS: &[&str] = &[
    "defaultBinder",
    "binders",
    "default",
    "bindings",
    "instanceCount",
    "instanceIndex",
    "dynamicDestinations",
    "startupTimeout",
];

/// The tables written for one binding: its common properties, and its section in each
/// extension namespace (by the namespace's index in the registrations).
#[derive(Default)]
struct BindingTables<'a> {
    common: Option<&'a Value>,
    extensions: BTreeMap<usize, &'a Value>,
}

/// Builds the typed configuration from the merged tree. `binder_types` are the binder types
/// that may be named, `extensions` the binders' extension namespaces.
pub(crate) fn read(
    root: Value,
    binder_types: &[String],
    extensions: &[&'static ExtensionRegistration],
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
        management: ManagementConfig::default(),
    };
    let empty = Table::new();
    let stream = match descend(&root, &["spring", "cloud", "stream"]) {
        Some(v) => as_table(v, STREAM_PREFIX, &mut problems).unwrap_or(&empty),
        None => &empty,
    };

    let mut binding_tables: BTreeMap<String, BindingTables<'_>> = BTreeMap::new();
    let mut extension_defaults: BTreeMap<usize, &Value> = BTreeMap::new();
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
                    binding_tables.entry(name.clone()).or_default().common = Some(table);
                }
            }
            _ => match extensions
                .iter()
                .position(|e| canonical(e.namespace) == canon)
            {
                Some(index) => {
                    let namespace = as_table(value, &path, &mut problems).unwrap_or(&empty);
                    for (nkey, nvalue) in sorted(namespace) {
                        let npath = join(&path, nkey);
                        match canonical(nkey).as_str() {
                            "default" => {
                                extension_defaults.insert(index, nvalue);
                            }
                            "bindings" => {
                                for (name, table) in sorted(
                                    as_table(nvalue, &npath, &mut problems).unwrap_or(&empty),
                                ) {
                                    binding_tables
                                        .entry(name.clone())
                                        .or_default()
                                        .extensions
                                        .insert(index, table);
                                }
                            }
                            _ => problems.push(
                                nvalue.origin(),
                                &npath,
                                unknown_key_message("key", nkey, &["default", "bindings"]),
                            ),
                        }
                    }
                }
                None => {
                    let mut known = STREAM_KEYS.to_vec();
                    known.extend(extensions.iter().map(|e| e.namespace));
                    problems.push(
                        value.origin(),
                        &path,
                        unknown_key_message("key", key, &known),
                    )
                }
            },
        }
    }

    let mut common_template = BindingProperties::default();
    if let Some(v) = common_default {
        common_template.merge_table(v, &join(STREAM_PREFIX, "default"), &mut problems);
    }
    let consumer = &mut common_template.consumer;
    consumer.instance_count.get_or_insert(cfg.instance_count);
    consumer.instance_index.get_or_insert(cfg.instance_index);
    // Shared by every binding that does not configure the namespace (most of them, with
    // thousands of bindings): a binding holds its own copy only when it changes something.
    let extension_templates: Vec<Arc<dyn StoredExtension>> = extensions
        .iter()
        .enumerate()
        .map(|(index, registration)| {
            let mut template = registration.template();
            if let Some(v) = extension_defaults.get(&index) {
                let path = format!("{STREAM_PREFIX}.{}.default", registration.namespace);
                template.merge_section(v, &path, &mut problems);
            }
            Arc::from(template)
        })
        .collect();

    for (name, tables) in binding_tables {
        let mut c = common_template.clone();
        let mut configured = ConfiguredSections::default();
        if let Some(v) = tables.common {
            c.merge_table(
                v,
                &format!("{STREAM_PREFIX}.bindings.{name}"),
                &mut problems,
            );
            configured.consumer |= descend(v, &["consumer"]).is_some();
            configured.producer |= descend(v, &["producer"]).is_some();
        }
        let mut own = Extensions::default();
        for (index, registration) in extensions.iter().enumerate() {
            let template = &extension_templates[index];
            let Some(v) = tables.extensions.get(&index) else {
                own.insert_shared(registration.namespace, template.clone());
                continue;
            };
            let mut section = template.clone_box();
            let path = format!("{STREAM_PREFIX}.{}.bindings.{name}", registration.namespace);
            section.merge_section(v, &path, &mut problems);
            configured.consumer |= descend(v, &["consumer"]).is_some();
            configured.producer |= descend(v, &["producer"]).is_some();
            own.insert(registration.namespace, section);
        }
        let mut binding = BindingConfig::resolve(&name, c, own);
        binding.configured = configured;
        cfg.bindings.insert(name, binding);
    }
    let mut template_extensions = Extensions::default();
    for (registration, template) in extensions.iter().zip(extension_templates) {
        template_extensions.insert_shared(registration.namespace, template);
    }
    cfg.template = (common_template, template_extensions);

    cfg.management = ManagementConfig::read(&root, &mut problems);
    validate::validate(&cfg, &root, binder_types, extensions, &mut problems);
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
