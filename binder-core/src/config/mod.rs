//! Configuration: Spring Cloud Stream's property tree, loaded with the `config` crate, typed,
//! defaulted and validated.
//!
//! The common properties of each binding (`spring.cloud.stream.bindings.<binding>.*`) are
//! read here; a binder's own properties are an [`Extension`] it registers under a namespace
//! of its own (the AMQP binders' `spring.cloud.stream.rabbit.*` is `binder-amqp`'s), read and
//! validated with them.
//!
//! ```
//! use binder_core::config::ConfigLoader;
//!
//! let cfg = ConfigLoader::new()
//!     .env(Vec::<(String, String)>::new())
//!     .yaml_str(r#"
//! spring:
//!   cloud:
//!     stream:
//!       bindings:
//!         inputProductAdd:
//!           destination: mqTestProduct
//!           group: addProductHandler
//!           consumer:
//!             max-attempts: 5
//! "#)
//!     .load()
//!     .unwrap();
//! let b = cfg.binding("inputProductAdd");
//! assert_eq!(b.destination, "mqTestProduct");
//! assert_eq!(b.consumer.max_attempts, 5);
//! ```

mod env;
pub(crate) mod error;
mod extension;
mod extensions;
pub(crate) mod key;
mod loader;
mod management;
mod model;
pub(crate) mod node;
mod properties;
mod read;
mod validate;

pub use env::{ENV_PREFIXES, JSON_VAR};
pub use error::{
    ConfigError, Problem, Problems, UnknownValue, did_you_mean, render_problems,
    unknown_key_message,
};
pub use extension::{BindingCheck, Extension, ExtensionRegistration, registered_extensions};
pub use extensions::Extensions;
pub use key::{canonical, descend};
pub use loader::{CONFIG_FILE_VAR, ConfigLoader, DEFAULT_STEM, PROFILES_VAR};
pub use management::{
    ENDPOINT_IDS, EndpointProperties, EndpointsProperties, ExposureProperties,
    HealthEndpointProperties, MANAGEMENT_PREFIX, ManagementConfig, ServerProperties, ShowDetails,
    WebProperties,
};
pub use model::{
    BUILTIN_BINDER_TYPES, BinderConfig, BindingConfig, BindingProperties, ConfiguredSections,
    DEFAULT_BINDER_TYPE, STREAM_PREFIX, StreamConfig,
};
pub use node::{FieldValue, Section};
pub use properties::{AcknowledgeMode, ConsumerProperties, HeaderMode, ProducerProperties};
