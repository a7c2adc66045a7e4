//! Against a RabbitMQ node of the test's own (an alarm on the shared broker would block every
//! other publisher on it): while a memory alarm blocks publishers (`connection.blocked`), a
//! send waits instead of failing, and completes once the alarm clears; meanwhile consumers of
//! the same binder keep taking and acking messages, so queues drain. Without a local RabbitMQ
//! installation the test says so and passes, unless `REQUIRE_RABBIT=1`.
//!
//! Every wait is on an event: the broker reporting the publisher connection blocked, the
//! deliveries and acks of the drain, the confirm after the alarm. "The send has not finished"
//! is checked after the drain, which the broker served while the alarm held.

use std::time::Duration;

use binder_amqp::AmqpBroker;
use binder_amqp::{ProducerSpec, SubscriptionSpec};
use binder_core::binder::{Binder, Settlement};
use binder_core::message::{DeliveryMode, Message};

mod common;

/// The state `rabbitmqctl list_connections` gives the binder's publisher connection
/// (`rust-stream.publisher`), if it is listed.
fn publisher_state(listing: &str) -> Option<&str> {
    listing
        .lines()
        .find(|line| line.contains("rust-stream.publisher"))
        .and_then(|line| line.split_whitespace().last())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_alarm_blocks_publishers_instead_of_failing_them() {
    let Some(node) = common::PrivateNode::start("alarm") else {
        return;
    };
    let binder = node.binder();
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

    let watermark = node
        .ctl(&["eval", "vm_memory_monitor:get_vm_memory_high_watermark()."])
        .trim()
        .to_owned();
    assert!(watermark.parse::<f64>().is_ok(), "watermark {watermark:?}");
    node.ctl(&["set_vm_memory_high_watermark", "0.0000001"]);
    let send = tokio::spawn(async move {
        let result = producer.publish("", Message::new("during")).await;
        (producer, result)
    });
    // The broker has applied the alarm to the publisher connection: `blocking` (it will block
    // the next publish) or `blocked` (it holds one).
    let listing = node
        .ctl_until(&["list_connections", "client_properties", "state"], |out| {
            matches!(publisher_state(out), Some("blocking" | "blocked"))
        })
        .await;
    eprintln!("publisher connection: {:?}", publisher_state(&listing));

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
    // The broker answered all of that after the publish was asked for: the alarm, not a slow
    // broker, is what holds it.
    assert!(
        !send.is_finished(),
        "a blocked publisher waits instead of failing"
    );

    node.ctl(&["set_vm_memory_high_watermark", &watermark]);
    let (_producer, result) = tokio::time::timeout(Duration::from_secs(30), send)
        .await
        .expect("the publish completes once the alarm clears")
        .unwrap();
    result.expect("confirmed after the alarm");
    binder.remove(&plan).await.unwrap();
    binder.close().await;
}
