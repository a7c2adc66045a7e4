//! Shared by the tests against the real broker.
#![allow(dead_code)]

use binder_core::binder::{Binder, BinderError};
use binder_rabbit::{RabbitBinder, RabbitSettings};

/// The broker the tests use: `AMQP_URL`, by default the local RabbitMQ.
pub fn amqp_url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

/// A binder on a broker that answers, or `None` (said loudly) when none does; with
/// `REQUIRE_RABBIT=1` a missing broker fails the test instead.
pub async fn binder() -> Option<RabbitBinder> {
    let binder = RabbitBinder::new(RabbitSettings::from_uri(&amqp_url()));
    match binder.inspect("amq.nonexistent-probe").await {
        Err(BinderError::Unreachable(e)) => {
            assert!(
                std::env::var("REQUIRE_RABBIT").as_deref() != Ok("1"),
                "REQUIRE_RABBIT=1 but no RabbitMQ answers at {}: {e}",
                amqp_url()
            );
            eprintln!("SKIPPED: no RabbitMQ answers at {}: {e}", amqp_url());
            None
        }
        _ => Some(binder),
    }
}

/// A name no other run uses.
pub fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{prefix}-{}", nanos % 1_000_000_000)
}
