//! A consumer that ends while lapin still holds deliveries for it (its queue deleted, its
//! connection closed by the broker): the subscription hands those deliveries out first, in
//! order, and then ends, so that the runtime subscribes again. Nothing already received is
//! dropped on the way.

mod common;

use std::time::Duration;

use binder_amqp::{AmqpBroker, SubscriptionSpec};
use binder_core::binder::{Binder, ConnectionState, Subscription};
use binder_rabbit::{RabbitBinder, RabbitSettings};
use lapin::BasicProperties;
use lapin::options::{BasicPublishOptions, QueueDeleteOptions};

/// Publishes `count` one-byte messages (0, 1, ...) to `queue` through the default exchange.
async fn publish(ch: &lapin::Channel, queue: &str, count: u8) {
    for i in 0..count {
        ch.basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions::default(),
            &[i],
            BasicProperties::default(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    }
}

/// Subscribes with a prefetch above `count` and waits until the broker has sent all `count`
/// messages (none ready): whatever ends the consumer now comes after them on its channel.
async fn subscribed_holding(
    binder: &RabbitBinder,
    queue: &str,
    count: u32,
) -> Box<dyn Subscription> {
    let sub = binder
        .subscribe(SubscriptionSpec::manual_ack(queue, 10))
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let q = binder.inspect(queue).await.unwrap();
        if q.messages == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of {count} still ready after 10 s",
            q.messages
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    sub
}

/// Takes what the subscription hands out until it ends (within 10 s).
async fn drain(sub: &mut Box<dyn Subscription>) -> Vec<u8> {
    let mut payloads = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(10), sub.next()).await {
            Ok(Some(inbound)) => payloads.extend_from_slice(&inbound.content.message.payload),
            Ok(None) => return payloads,
            Err(_) => panic!("the subscription neither handed out nor ended: {payloads:?}"),
        }
    }
}

#[tokio::test]
async fn deliveries_held_when_the_queue_is_deleted_come_out_before_the_end() {
    let Some(binder) = common::binder().await else {
        return;
    };
    let queue = common::unique("end-deleted");
    let (_conn, ch) = common::raw_queue(&queue).await;
    publish(&ch, &queue, 4).await;
    let mut sub = subscribed_holding(&binder, &queue, 4).await;
    // RabbitMQ cancels the consumer after the deliveries it already sent: lapin holds all
    // four, then the end. Nothing tells when lapin has read the cancel; the pause only makes
    // it likely that the subscription meets the end while taking what lapin holds (the path
    // under test). The assertions hold whichever way it goes.
    ch.queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(drain(&mut sub).await, [0, 1, 2, 3]);
    assert!(
        sub.next().await.is_none(),
        "an ended subscription stays ended"
    );
}

#[tokio::test]
async fn deliveries_held_when_the_broker_closes_the_connection_come_out_before_the_end() {
    let Some(_) = common::binder().await else {
        return;
    };
    let queue = common::unique("end-closed");
    let (_conn, ch) = common::raw_queue(&queue).await;
    publish(&ch, &queue, 4).await;
    // A binder whose connection can be told apart from every other one on the broker.
    let mut settings = RabbitSettings::from_uri(&common::amqp_url());
    settings.connection_name = queue.clone();
    let binder = RabbitBinder::new(settings);
    let mut sub = subscribed_holding(&binder, &queue, 4).await;
    let listed = common::rabbitmqctl(&["list_connections", "pid", "client_properties"]);
    let pid = listed
        .lines()
        .find(|line| line.contains(&format!("\"{queue}\"")))
        .and_then(|line| line.split_whitespace().next())
        .unwrap_or_else(|| panic!("no connection named {queue} in:\n{listed}"))
        .to_owned();
    assert_eq!(binder.connection_state(), ConnectionState::Up);
    common::rabbitmqctl(&["close_connection", &pid, "consumer_end test"]);
    // Once lapin has read the broker's close, it has read every delivery before it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while binder.connection_state() == ConnectionState::Up {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the binder still reports its connection up 10 s after the broker closed it"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // What lapin received before the close is handed out (the broker redelivers it to the
    // next consumer, since none of it can be acked on the lost channel), then the end.
    assert_eq!(drain(&mut sub).await, [0, 1, 2, 3]);
    assert!(
        sub.next().await.is_none(),
        "an ended subscription stays ended"
    );
    drop(sub);
    let _ = ch
        .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await;
}
