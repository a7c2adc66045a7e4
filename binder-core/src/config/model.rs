//! The resolved configuration: binders and bindings with every default applied.

use std::borrow::Cow;
use std::collections::BTreeMap;

use config::{Value, ValueKind};

use super::extensions::Extensions;
use super::management::ManagementConfig;
use super::node::Table;
use super::properties::{ConsumerProperties, ProducerProperties};
use crate::codec::DEFAULT_CONTENT_TYPE;
use crate::properties;

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
    /// `consumer` (common or in an extension namespace) was written for this binding.
    pub consumer: bool,
    /// `producer` (common or in an extension namespace) was written for this binding.
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
    /// The binders' extension properties (`spring.cloud.stream.<namespace>.bindings.<binding>`),
    /// one per registered namespace: read them with [`BindingConfig::extension`].
    pub extensions: Extensions,
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

    /// The binding's extension properties of type `T` (an
    /// [`Extension`](super::Extension) registered with
    /// [`ExtensionRegistration`](super::ExtensionRegistration)); `None` when no namespace of
    /// that type was registered when the configuration was loaded, or for a binding built by
    /// [`BindingConfig::defaults`].
    pub fn extension<T: std::any::Any>(&self) -> Option<&T> {
        self.extensions.get()
    }

    /// A binding with the common defaults and no extension properties (a binder reads its
    /// own defaults then).
    pub fn defaults(name: &str) -> Self {
        BindingConfig::resolve(name, BindingProperties::default(), Extensions::default())
    }

    pub(crate) fn resolve(name: &str, common: BindingProperties, extensions: Extensions) -> Self {
        BindingConfig {
            name: name.to_owned(),
            destination: common.destination.unwrap_or_else(|| name.to_owned()),
            group: common.group.filter(|g| !g.is_empty()),
            content_type: common.content_type,
            binder: common.binder,
            consumer: common.consumer,
            producer: common.producer,
            extensions,
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
    pub(crate) template: (BindingProperties, Extensions),
    /// The merged tree, including the application's own keys.
    pub(crate) raw: Value,
    /// `management.*`: the management server (off unless `management.server.port` is set).
    pub management: ManagementConfig,
}

impl StreamConfig {
    /// The binding with this name, or one built from the defaults if none is configured.
    pub fn binding(&self, name: &str) -> BindingConfig {
        self.binding_ref(name).into_owned()
    }

    /// The binding with this name, borrowed when it is configured, else built from the
    /// defaults: [`StreamConfig::binding`] without copying a configured binding (startup reads
    /// every binding several times, and with thousands of them the copies show).
    pub fn binding_ref(&self, name: &str) -> Cow<'_, BindingConfig> {
        match self.bindings.get(name) {
            Some(b) => Cow::Borrowed(b),
            None => Cow::Owned(BindingConfig::resolve(
                name,
                self.template.0.clone(),
                self.template.1.clone(),
            )),
        }
    }

    /// The configuration tree a binder configuration sees: the application's whole tree
    /// (unless `inheritEnvironment: false`) overlaid with its `environment`. A bare binder
    /// type (no `binders.<name>` entry) sees the whole tree.
    pub fn binder_environment(&self, name: &str) -> Value {
        self.binder_environment_ref(name).into_owned()
    }

    /// [`StreamConfig::binder_environment`], borrowing the application's tree when the binder
    /// sees it unchanged (a bare binder type): the tree holds every binding, so a copy of it
    /// shows in the start time of applications with thousands of them.
    pub fn binder_environment_ref(&self, name: &str) -> Cow<'_, Value> {
        let Some(binder) = self.binders.get(name) else {
            return Cow::Borrowed(&self.raw);
        };
        let mut tree = if binder.inherit_environment {
            self.raw.clone()
        } else {
            Value::new(None, ValueKind::Table(Table::new()))
        };
        let mut environment = binder.environment.clone();
        super::env::expand_dotted(&mut environment);
        super::env::merge(&mut tree, environment);
        Cow::Owned(tree)
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
