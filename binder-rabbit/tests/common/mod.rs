//! Shared by the tests against the real broker.
#![allow(dead_code)]

pub mod node;

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

/// Runs `rabbitmqctl -q <args>` against the local broker and returns what it printed; a
/// failure fails the test with rabbitmqctl's own message.
pub fn rabbitmqctl(args: &[&str]) -> String {
    let out = std::process::Command::new("rabbitmqctl")
        .arg("-q")
        .args(args)
        .output()
        .expect("rabbitmqctl is installed with RabbitMQ");
    assert!(
        out.status.success(),
        "rabbitmqctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A plan declaring one plain queue (not exclusive, not auto-deleted, no arguments).
pub fn queue_plan(name: &str, durable: bool) -> binder_core::topology::TopologyPlan {
    binder_core::topology::TopologyPlan {
        queues: vec![binder_core::topology::QueueDecl {
            name: name.to_owned(),
            durable,
            exclusive: false,
            auto_delete: false,
            arguments: Default::default(),
        }],
        ..Default::default()
    }
}

/// A producer on the default exchange, which routes by queue name.
pub async fn direct_producer(
    binder: &impl Binder,
    delivery_mode: binder_core::message::DeliveryMode,
) -> Box<dyn binder_core::binder::Producer> {
    binder
        .producer(binder_core::binder::ProducerSpec {
            exchange: String::new(),
            delivery_mode,
        })
        .await
        .unwrap()
}
