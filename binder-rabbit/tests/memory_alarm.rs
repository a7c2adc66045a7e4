//! Against the real broker: while a memory alarm blocks publishers (`connection.blocked`), a
//! send waits instead of failing, and completes once the alarm clears; meanwhile consumers of
//! the same binder keep taking and acking messages, so queues drain. The watermark is
//! restored whatever happens. Without a broker the test says so and passes, unless
//! `REQUIRE_RABBIT=1`.

use std::process::Command;
use std::time::Duration;

use binder_core::binder::{Binder, ProducerSpec, Settlement, SubscriptionSpec};
use binder_core::message::{DeliveryMode, Message};

mod common;

/// Puts the memory watermark found at the start back when dropped, even if the test panicked.
struct Restore(String);

impl Restore {
    /// Remembers the broker's current (relative) watermark.
    fn current() -> Self {
        let out = Command::new("rabbitmqctl")
            .args([
                "-q",
                "eval",
                "vm_memory_monitor:get_vm_memory_high_watermark().",
            ])
            .output()
            .expect("rabbitmqctl is installed with RabbitMQ");
        let value = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert!(
            value.parse::<f64>().is_ok(),
            "cannot read the current watermark (got {value:?}); not touching the broker"
        );
        Restore(value)
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        let _ = Command::new("rabbitmqctl")
            .args(["set_vm_memory_high_watermark", &self.0])
            .output();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_alarm_blocks_publishers_instead_of_failing_them() {
    let Some(binder) = common::binder().await else {
        return;
    };
    let producer = binder
        .producer(ProducerSpec {
            exchange: "amq.fanout".into(),
            delivery_mode: DeliveryMode::Persistent,
        })
        .await
        .unwrap();
    producer.publish("", Message::new("before")).await.unwrap();
    // A queue with messages waiting, and a subscription to it, from before the alarm.
    let queue = common::unique("alarm-drain");
    let plan = common::queue_plan(&queue, false);
    binder.provision(&plan).await.unwrap();
    let seeder = common::direct_producer(&binder, DeliveryMode::NonPersistent).await;
    for i in 0..5 {
        seeder
            .publish(&queue, Message::new(format!("{i}")))
            .await
            .unwrap();
    }
    let mut sub = binder
        .subscribe(SubscriptionSpec::manual_ack(queue.as_str(), 1))
        .await
        .unwrap();

    let restore = Restore::current();
    let out = Command::new("rabbitmqctl")
        .args(["set_vm_memory_high_watermark", "0.0000001"])
        .output()
        .expect("rabbitmqctl is installed with RabbitMQ");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let send = tokio::spawn(async move {
        let result = producer.publish("", Message::new("during")).await;
        (producer, result)
    });
    // The alarm holds the publish: it neither completes nor fails while it lasts.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !send.is_finished(),
        "a blocked publisher waits instead of failing"
    );
    // Consumers are not held up: with prefetch 1 each next delivery needs the previous ack to
    // reach the broker, and the cancel and the count need frames written too.
    let drain = async {
        for _ in 0..5 {
            let d = sub.next().await.expect("the subscription is open");
            d.settler.settle(Settlement::Ack).await.unwrap();
        }
        sub.flush().await.unwrap();
        sub.cancel().await.unwrap();
        binder.inspect(&queue).await.unwrap().messages
    };
    let left = tokio::time::timeout(Duration::from_secs(10), drain)
        .await
        .expect("consumers take and ack messages while publishers are blocked");
    assert_eq!(left, 0, "the queue drained during the alarm");
    assert!(!send.is_finished(), "the publisher is still blocked");

    drop(restore);
    let (_producer, result) = tokio::time::timeout(Duration::from_secs(30), send)
        .await
        .expect("the publish completes once the alarm clears")
        .unwrap();
    result.expect("confirmed after the alarm");
    binder.remove(&plan).await.unwrap();
    binder.close().await;
}
