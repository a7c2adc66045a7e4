//! The binders the kit runs against.

use std::sync::Arc;

use async_trait::async_trait;
use binder_core::binder::Binder;
use binder_embedded::EmbeddedBinder;
use binder_embedded::engine::Broker;

use crate::kit::{Capabilities, Target};

/// The `embedded` binder, a fresh broker per case.
#[derive(Debug, Clone, Copy)]
pub struct Embedded;

#[async_trait]
impl Target for Embedded {
    fn binder_type(&self) -> &'static str {
        "embedded"
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }
    async fn binder(&self) -> Result<Arc<dyn Binder>, String> {
        Ok(Arc::new(EmbeddedBinder::new(Broker::new())))
    }
}

/// The `rabbit` binder against the RabbitMQ at `AMQP_URL`.
#[derive(Debug, Clone, Copy)]
pub struct Rabbit;

#[async_trait]
impl Target for Rabbit {
    fn binder_type(&self) -> &'static str {
        "rabbit"
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }
    async fn binder(&self) -> Result<Arc<dyn Binder>, String> {
        Err("the rabbit binder is not implemented yet (issue 7); this instantiation is wired so that it only has to pass".to_owned())
    }
}
