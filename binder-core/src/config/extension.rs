//! Binder extension properties: a binder's own typed properties of a binding, under
//! `spring.cloud.stream.<namespace>.default.*` and
//! `spring.cloud.stream.<namespace>.bindings.<binding>.*` (Spring Cloud Stream's
//! `BinderSpecificPropertiesProvider`), read, defaulted and validated with the common ones.
//!
//! A binder crate declares its section with [`properties!`](crate::properties), implements
//! [`Extension`] for it (its checks across properties), and registers the namespace with
//! `inventory`. The loader then knows the namespace: an unknown key in it is refused by name,
//! like any other, and a namespace nobody registered is an unknown key of
//! `spring.cloud.stream`.
//!
//! ```
//! use binder_core::config::{BindingCheck, BindingConfig, ConfigLoader, Extension, ExtensionRegistration};
//!
//! binder_core::properties! {
//!     /// `spring.cloud.stream.example.bindings.<binding>.*`.
//!     pub struct ExampleProperties {
//!         /// Partitions of the example middleware's topic.
//!         shards: u32 = 1 => "shards";
//!     }
//! }
//!
//! impl Extension for ExampleProperties {
//!     fn validate(&self, binding: &BindingConfig, check: &mut BindingCheck<'_>) {
//!         if self.shards == 0 {
//!             check.extension("shards", format!("`{}` needs at least one shard", binding.name));
//!         }
//!     }
//! }
//!
//! inventory::submit! { ExtensionRegistration::new::<ExampleProperties>("example") }
//!
//! let cfg = ConfigLoader::new()
//!     .env(Vec::<(String, String)>::new())
//!     .yaml_str("spring.cloud.stream.example.bindings.orders.shards: 4")
//!     .load()
//!     .unwrap();
//! assert_eq!(cfg.binding("orders").extension::<ExampleProperties>().unwrap().shards, 4);
//!
//! let err = ConfigLoader::new()
//!     .env(Vec::<(String, String)>::new())
//!     .yaml_str("spring.cloud.stream.example.bindings.orders.shard: 4")
//!     .load()
//!     .unwrap_err();
//! assert!(err.to_string().contains("spring.cloud.stream.example.bindings.orders.shard"));
//! assert!(err.to_string().contains("did you mean `shards`?"));
//! ```

use std::fmt;

use config::Value;

use super::error::Problems;
use super::extensions::StoredExtension;
use super::key::descend;
use super::model::{BindingConfig, STREAM_PREFIX};
use super::node::Section;

/// A binder's extension properties of one binding: a [`Section`] (declared with
/// [`properties!`](crate::properties)) with the checks that span several properties.
pub trait Extension: Section + Clone + PartialEq + fmt::Debug + Send + Sync + 'static {
    /// Checks that a single value cannot show: contradictions between this section's
    /// properties, or with the binding's common ones. Each problem is reported through
    /// `check`, at the key path it concerns. The default checks nothing.
    fn validate(&self, binding: &BindingConfig, check: &mut BindingCheck<'_>) {
        let _ = (binding, check);
    }
}

/// A registered extension namespace, collected with `inventory`:
/// `inventory::submit! { ExtensionRegistration::new::<MyProperties>("my") }`.
pub struct ExtensionRegistration {
    /// The namespace under `spring.cloud.stream` (`rabbit` for the AMQP binders).
    pub namespace: &'static str,
    default: fn() -> Box<dyn StoredExtension>,
    validate: fn(&dyn StoredExtension, &BindingConfig, &mut BindingCheck<'_>),
}

impl ExtensionRegistration {
    /// Registers `T` as the properties of `namespace`.
    pub const fn new<T: Extension>(namespace: &'static str) -> Self {
        ExtensionRegistration {
            namespace,
            default: default_of::<T>,
            validate: validate_as::<T>,
        }
    }

    /// The namespace's defaults.
    pub(crate) fn template(&self) -> Box<dyn StoredExtension> {
        (self.default)()
    }

    /// Runs the namespace's checks on a binding's value of it.
    pub(crate) fn validate(
        &self,
        value: &dyn StoredExtension,
        binding: &BindingConfig,
        check: &mut BindingCheck<'_>,
    ) {
        (self.validate)(value, binding, check)
    }
}

impl fmt::Debug for ExtensionRegistration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExtensionRegistration")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

inventory::collect!(ExtensionRegistration);

/// The registered extension namespaces, each once (the first registration of a namespace
/// wins), in name order.
pub fn registered_extensions() -> Vec<&'static ExtensionRegistration> {
    let mut all: Vec<&'static ExtensionRegistration> = inventory::iter::<ExtensionRegistration>
        .into_iter()
        .collect();
    all.sort_by_key(|r| r.namespace);
    all.dedup_by_key(|r| r.namespace);
    all
}

fn default_of<T: Extension>() -> Box<dyn StoredExtension> {
    Box::new(T::default())
}

fn validate_as<T: Extension>(
    value: &dyn StoredExtension,
    binding: &BindingConfig,
    check: &mut BindingCheck<'_>,
) {
    if let Some(value) = value.as_any().downcast_ref::<T>() {
        value.validate(binding, check);
    }
}

/// Where a binding check reports its problems: at the binding's common keys
/// (`spring.cloud.stream.bindings.<binding>.*`) or at its extension keys
/// (`spring.cloud.stream.<namespace>.bindings.<binding>.*`), citing where the value was
/// written when the binding itself wrote it.
#[derive(Debug)]
pub struct BindingCheck<'a> {
    root: &'a Value,
    problems: &'a mut Problems,
    binding: &'a str,
    namespace: Option<&'static str>,
}

impl<'a> BindingCheck<'a> {
    pub(crate) fn new(
        root: &'a Value,
        problems: &'a mut Problems,
        binding: &'a str,
        namespace: Option<&'static str>,
    ) -> Self {
        BindingCheck {
            root,
            problems,
            binding,
            namespace,
        }
    }

    /// Reports a problem at `<namespace>.bindings.<binding>.<rest>` (the extension's keys).
    pub fn extension(&mut self, rest: &str, message: impl Into<String>) {
        let namespace = self.namespace;
        self.report(namespace, rest, message.into());
    }

    /// Reports a problem at `bindings.<binding>.<rest>` (the common keys).
    pub fn common(&mut self, rest: &str, message: impl Into<String>) {
        self.report(None, rest, message.into());
    }

    /// The value written at `<namespace>.bindings.<binding>.<rest>` for this binding itself
    /// (not inherited from `default`), if any.
    pub fn written(&self, rest: &str) -> Option<&'a Value> {
        self.written_at(self.namespace, rest)
    }

    /// Whether `true` was written at `<namespace>.bindings.<binding>.<rest>` for this
    /// binding itself.
    pub fn written_true(&self, rest: &str) -> bool {
        self.written(rest)
            .is_some_and(|v| v.clone().into_bool().unwrap_or(false))
    }

    fn report(&mut self, namespace: Option<&str>, rest: &str, message: String) {
        let base = match namespace {
            Some(ns) => format!("{STREAM_PREFIX}.{ns}.bindings.{}", self.binding),
            None => format!("{STREAM_PREFIX}.bindings.{}", self.binding),
        };
        let origin = self
            .written_at(namespace, rest)
            .and_then(|v| v.origin())
            .map(str::to_owned);
        self.problems
            .push(origin.as_deref(), format!("{base}.{rest}"), message);
    }

    fn written_at(&self, namespace: Option<&str>, rest: &str) -> Option<&'a Value> {
        let mut path: Vec<&str> = vec!["spring", "cloud", "stream"];
        path.extend(namespace);
        path.push("bindings");
        path.push(self.binding);
        path.extend(rest.split('.'));
        descend(self.root, &path)
    }
}
