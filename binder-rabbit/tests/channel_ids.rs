//! A binder keeps working after lapin's channel ids wrap around. lapin remembers the error of
//! every channel the broker closed (a passive declare of a missing queue, a refused
//! declaration) against its channel id, for the life of the connection; once the ids wrap
//! (`channel_max`, 2047 on RabbitMQ), a new channel given such an id fails with that stale
//! error. The binder moves to a fresh connection instead, and closes the old one once its
//! channels are gone.

mod common;

use std::time::Duration;

use binder_amqp::AmqpBroker;
use binder_amqp::SubscriptionSpec;
use binder_core::binder::{BinderErrorKind, Settlement};
use binder_core::message::{DeliveryMode, Message};
use binder_rabbit::{RabbitBinder, RabbitSettings};

/// How many connections named `name` the broker has open (`rabbitmqctl list_connections`).
fn open_connections(name: &str) -> usize {
    let quoted = format!("\"{name}\"");
    common::rabbitmqctl(&["list_connections", "client_properties"])
        .matches(&quoted)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channels_the_broker_closed_do_not_break_later_ones() {
    if common::binder().await.is_none() {
        return;
    }
    let name = common::unique("channel-ids-binder");
    let mut settings = RabbitSettings::from_uri(&common::amqp_url());
    settings.connection_name = name.clone();
    let binder = RabbitBinder::new(settings);
    let missing = common::unique("never-declared");
    // More broker-closed channels than a connection has ids: every id gets a stale error.
    for i in 0..2100 {
        match binder.inspect(&missing).await {
            Err(e) if e.kind() == BinderErrorKind::NotFound => {}
            other => panic!("inspect {i} of a missing queue: {other:?}"),
        }
    }
    let queue = common::unique("after-wraparound");
    let plan = common::queue_plan(&queue, true);
    binder.provision(&plan).await.unwrap();
    let producer = common::direct_producer(&binder, DeliveryMode::Persistent).await;
    producer
        .publish(&queue, Message::new("after"))
        .await
        .unwrap();
    assert_eq!(binder.inspect(&queue).await.unwrap().messages, 1);
    let mut sub = binder
        .subscribe(SubscriptionSpec::manual_ack(queue.as_str(), 10))
        .await
        .unwrap();
    let d = common::next_delivery(sub.as_mut()).await;
    assert_eq!(d.message().payload.as_ref(), b"after");
    d.settler.settle(Settlement::Ack).await.unwrap();
    sub.cancel().await.unwrap();
    drop(sub);
    binder.remove(&plan).await.unwrap();
    // The connections the binder moved away from are closed once their channels are gone:
    // only the current one stays, and the producer's (which never failed to open a channel).
    let publisher = format!("{name}.publisher");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let open = (open_connections(&name), open_connections(&publisher));
        if open == (1, 1) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "(consumer, publisher) connections named {name} still open: {open:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
