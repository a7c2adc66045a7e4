//! A subscription dropped without `cancel` (a crashed consumer) gives its unsettled deliveries
//! back to the queue and leaves the binder's shared connection usable: the next subscription
//! and the next confirmed publish on the same binder succeed.
//!
//! Left to lapin, a dropped consumer's cancel races the channel's close, and a lost race
//! failed the whole connection in about one round in 150: hence the many rounds.

mod common;

use std::time::Duration;

use binder_core::binder::{Binder, ProducerSpec, Settlement, SubscriptionSpec};
use binder_core::message::{DeliveryMode, Message};
use binder_core::topology::{QueueDecl, TopologyPlan};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_subscription_keeps_the_connection_usable() {
    let Some(binder) = common::binder().await else {
        return;
    };
    let queue = common::unique("dropped-sub");
    let plan = TopologyPlan {
        queues: vec![QueueDecl {
            name: queue.clone(),
            durable: true,
            exclusive: false,
            auto_delete: false,
            arguments: Default::default(),
        }],
        ..Default::default()
    };
    binder.provision(&plan).await.unwrap();
    let producer = binder
        .producer(ProducerSpec {
            exchange: String::new(),
            delivery_mode: DeliveryMode::Persistent,
        })
        .await
        .unwrap();
    for i in 0..5 {
        producer
            .publish(&queue, Message::new(format!("{i}")))
            .await
            .unwrap();
    }
    // Each round a consumer takes every message and dies holding them; the next round's
    // consumer, on the same connection, must get them all again.
    for round in 0..300 {
        let mut sub = binder
            .subscribe(SubscriptionSpec::manual_ack(queue.as_str(), 10))
            .await
            .unwrap_or_else(|e| panic!("round {round}: subscribe: {e}"));
        let mut held = Vec::new();
        for _ in 0..5 {
            let d = tokio::time::timeout(Duration::from_secs(10), sub.next())
                .await
                .unwrap_or_else(|_| panic!("round {round}: a delivery within 10 s"))
                .unwrap_or_else(|| panic!("round {round}: the subscription ended"));
            assert_eq!(d.redelivered, round > 0, "round {round}");
            held.push(d);
        }
        drop(held);
        drop(sub);
        // The connection the dead consumer shared still confirms a publish.
        producer
            .publish(&queue, Message::new("probe"))
            .await
            .unwrap_or_else(|e| panic!("round {round}: publish after the drop: {e}"));
        let mut probe = binder
            .subscribe(SubscriptionSpec::manual_ack(queue.as_str(), 10))
            .await
            .unwrap_or_else(|e| panic!("round {round}: subscribe after the drop: {e}"));
        // Take the probe out again (the five come back first, in order, then the probe).
        let mut seen = 0;
        loop {
            let d = tokio::time::timeout(Duration::from_secs(10), probe.next())
                .await
                .unwrap_or_else(|_| panic!("round {round}: the probe within 10 s"))
                .unwrap_or_else(|| panic!("round {round}: the probe subscription ended"));
            if d.message().payload.as_ref() == b"probe" {
                d.settler.settle(Settlement::Ack).await.unwrap();
                break;
            }
            d.settler.settle(Settlement::Requeue).await.unwrap();
            seen += 1;
            assert!(seen < 1000, "round {round}: the probe never came");
        }
        probe.cancel().await.unwrap();
    }
    binder.remove(&plan).await.unwrap();
}
