//! Acks held back for a batch reach RabbitMQ when the subscription is flushed: a connection
//! lost after a flush redelivers only what was not settled.

mod common;

use std::time::Duration;

use binder_amqp::AmqpBroker;
use binder_amqp::SubscriptionSpec;
use binder_core::binder::{Binder, Settlement};
use lapin::BasicProperties;
use lapin::options::{BasicPublishOptions, QueueDeleteOptions};

/// Ready messages of `queue`, once they settle on `expected` (or whatever they are after 10 s).
async fn ready_becomes(binder: &impl AmqpBroker, queue: &str, expected: u32) -> u32 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let ready = binder.inspect(queue).await.unwrap().messages;
        if ready == expected || tokio::time::Instant::now() > deadline {
            return ready;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn held_acks_are_sent_on_flush() {
    let Some(setup) = common::binder().await else {
        return;
    };
    let queue = common::unique("acks-flush");
    let (_conn, ch) = common::raw_queue(&queue).await;
    for i in 0..4u8 {
        ch.basic_publish(
            "".into(),
            queue.as_str().into(),
            BasicPublishOptions::default(),
            &[i],
            BasicProperties::default(),
        )
        .await
        .unwrap();
    }
    assert_eq!(ready_becomes(&setup, &queue, 4).await, 4);

    // A binder of its own, so that closing it drops only this subscription's connection.
    let binder = common::binder().await.unwrap();
    let mut sub = binder
        .subscribe(SubscriptionSpec::manual_ack(queue.as_str(), 10))
        .await
        .unwrap();
    let mut deliveries = Vec::new();
    for _ in 0..4 {
        deliveries.push(sub.next().await.expect("a delivery"));
    }
    // The first three are acked while the fourth is outstanding: the acks are held back.
    for d in &deliveries[..3] {
        d.settler.settle(Settlement::Ack).await.unwrap();
    }
    sub.flush().await.unwrap();
    // Losing the connection now returns only the unsettled fourth to the queue.
    binder.close().await;
    drop(deliveries);
    assert_eq!(
        ready_becomes(&setup, &queue, 1).await,
        1,
        "the flushed acks reached the broker"
    );
    let _ = ch
        .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await;
}
