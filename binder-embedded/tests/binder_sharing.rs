//! The embedded binder hands the runtime the engine's own record of a message rather than a
//! copy. Whatever the engine does with the message afterwards (a redelivery, dead-lettering)
//! must leave the record a handler still holds as it was published.

mod common;

use std::sync::Arc;
use std::time::Duration;

use binder_amqp::{AmqpBroker, SubscriptionSpec};
use binder_core::binder::{Inbound, Settlement, Subscription};
use binder_embedded::EmbeddedBinder;
use binder_embedded::engine::FieldValue;
use common::{args, declare, declare_with, msg, open};

async fn next(sub: &mut Box<dyn Subscription>) -> Inbound {
    tokio::time::timeout(Duration::from_secs(10), sub.next())
        .await
        .expect("no delivery within 10 s")
        .expect("subscription cancelled")
}

#[tokio::test]
async fn a_held_delivery_is_unchanged_by_its_redelivery_and_dead_lettering() {
    let (broker, _conn, ch) = open();
    declare(&ch, "held.dlq");
    declare_with(
        &ch,
        "held",
        args(&[
            ("x-dead-letter-exchange", FieldValue::from("")),
            ("x-dead-letter-routing-key", FieldValue::from("held.dlq")),
        ]),
    );
    let binder = EmbeddedBinder::new(broker.clone());
    let mut sub = binder
        .subscribe(SubscriptionSpec::manual_ack("held", 10))
        .await
        .unwrap();
    let published = msg("order 1").with_header("k", "v");
    ch.basic_publish("", "held", Default::default(), published.clone())
        .await
        .unwrap();

    let first = next(&mut sub).await;
    let kept = first.content.clone();
    first.settler.settle(Settlement::Requeue).await.unwrap();
    let again = next(&mut sub).await;
    assert!(again.redelivered);
    assert!(
        Arc::ptr_eq(&kept, &again.content),
        "the redelivery hands over the same record: no copy per delivery"
    );
    again.settler.settle(Settlement::Reject).await.unwrap();
    sub.cancel().await.unwrap();

    let dead = ch
        .basic_get("held.dlq", true)
        .unwrap()
        .expect("the rejected message is dead-lettered");
    assert!(
        dead.delivery.message().headers.contains("x-death"),
        "dead-lettering recorded its death"
    );
    assert_eq!(kept.message, published, "the held record is as published");
    assert!(!kept.message.headers.contains("x-death"));
    assert_eq!(kept.routing_key().as_ref(), "held");
}
