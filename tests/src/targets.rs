//! The binders the kit runs against.

use async_trait::async_trait;
use binder_amqp::AmqpBroker;
use binder_core::binder::BinderErrorKind;
use binder_embedded::EmbeddedBinder;
use binder_embedded::engine::Broker;
use binder_rabbit::{RabbitBinder, RabbitSettings};

use crate::kit::{Capabilities, KitBinder, Target};

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
    async fn binder(&self) -> Result<KitBinder, String> {
        Ok(KitBinder::amqp(EmbeddedBinder::new(Broker::new())))
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
    async fn binder(&self) -> Result<KitBinder, String> {
        let url = amqp_url();
        let binder = RabbitBinder::new(RabbitSettings::from_uri(&url));
        // A cheap round trip tells whether a broker answers.
        match tokio::time::timeout(
            std::time::Duration::from_secs(5),
            binder.inspect("amq.rabbitmq.trace-probe-nonexistent"),
        )
        .await
        {
            Ok(Err(e)) if e.kind() == BinderErrorKind::Unreachable => {
                Err(format!("no RabbitMQ answers at {url}: {e}"))
            }
            Err(_) => Err(format!("no RabbitMQ answers at {url} within 5 s")),
            Ok(_) => Ok(KitBinder::amqp(binder)),
        }
    }

    fn required(&self) -> bool {
        std::env::var("REQUIRE_RABBIT").is_ok_and(|v| v == "1")
    }
}

/// The broker the rabbit tests use: `AMQP_URL`, by default the local RabbitMQ.
pub fn amqp_url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned())
}
