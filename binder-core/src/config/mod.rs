//! Configuration: Spring Cloud Stream's property tree, loaded with the `config` crate, typed,
//! defaulted and validated.
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
//!       rabbit:
//!         bindings:
//!           inputProductAdd:
//!             consumer:
//!               bindingRoutingKey: addProduct.*
//! "#)
//!     .load()
//!     .unwrap();
//! let b = cfg.binding("inputProductAdd");
//! assert_eq!(b.destination, "mqTestProduct");
//! assert_eq!(b.consumer.max_attempts, 5);
//! assert_eq!(b.rabbit_consumer.common.binding_routing_key.as_deref(), Some("addProduct.*"));
//! ```

mod env;
pub(crate) mod error;
pub(crate) mod key;
mod loader;
mod model;
pub(crate) mod node;
mod properties;
mod read;
mod validate;

pub use env::{ENV_PREFIXES, JSON_VAR};
pub use error::{
    ConfigError, Problem, UnknownValue, did_you_mean, render_problems, unknown_key_message,
};
pub use key::{canonical, descend};
pub use loader::{CONFIG_FILE_VAR, ConfigLoader, DEFAULT_STEM, PROFILES_VAR};
pub use model::{
    BUILTIN_BINDER_TYPES, BinderConfig, BindingConfig, BindingProperties, ConfiguredSections,
    DEFAULT_BINDER_TYPE, RabbitBindingProperties, STREAM_PREFIX, StreamConfig,
};
pub use properties::{
    AcknowledgeMode, AlternateExchange, AlternateExchangeBinding, ConsumerProperties, ExchangeType,
    HeaderMode, OverflowBehavior, ProducerProperties, QuorumProperties, RabbitCommonProperties,
    RabbitConsumerProperties, RabbitProducerProperties,
};
