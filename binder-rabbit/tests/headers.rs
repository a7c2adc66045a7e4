//! Header values cross RabbitMQ with the meaning other clients give them.

mod common;

use binder_amqp::AmqpBroker;
use binder_amqp::SubscriptionSpec;
use binder_core::binder::Settlement;
use binder_core::message::{Decimal, DeliveryMode, HeaderValue, Message};
use lapin::BasicProperties;
use lapin::options::{BasicGetOptions, BasicPublishOptions, QueueDeleteOptions};
use lapin::types::{AMQPValue, DecimalValue, FieldTable, ShortString};

/// A decimal's unscaled value is a signed 32-bit int on the wire (the Java client writes
/// `new BigDecimal("-0.5")` as scale 1, `0xFFFFFFFB`; pika reads it back as `-0.5`): one
/// published raw comes out of the binder negative, and one the binder publishes reaches a
/// raw client with those bits.
#[tokio::test]
async fn negative_decimals_cross_the_broker() {
    let Some(binder) = common::binder().await else {
        return;
    };
    let queue = common::unique("decimal-headers");
    let (_conn, ch) = common::raw_queue(&queue).await;

    // Raw publish, as another client would: -0.5.
    let mut table = FieldTable::default();
    table.insert(
        ShortString::from("amount"),
        AMQPValue::DecimalValue(DecimalValue {
            scale: 1,
            value: 0xFFFF_FFFB,
        }),
    );
    ch.basic_publish(
        "".into(),
        queue.as_str().into(),
        BasicPublishOptions::default(),
        b"raw",
        BasicProperties::default().with_headers(table),
    )
    .await
    .unwrap()
    .await
    .unwrap();
    let mut sub = binder
        .subscribe(SubscriptionSpec::manual_ack(queue.as_str(), 1))
        .await
        .unwrap();
    let delivery = sub.next().await.expect("the raw message");
    assert_eq!(
        delivery.message().headers.get("amount"),
        Some(&HeaderValue::Decimal(Decimal {
            scale: 1,
            value: -5
        }))
    );
    delivery.settler.settle(Settlement::Ack).await.unwrap();
    sub.cancel().await.unwrap();

    // Through the binder: -123.45 reaches a raw client as the signed int's bits.
    let producer = common::direct_producer(&binder, DeliveryMode::NonPersistent).await;
    producer
        .publish(
            &queue,
            Message::new("bound").with_header(
                "amount",
                Decimal {
                    scale: 2,
                    value: -12_345,
                },
            ),
        )
        .await
        .unwrap();
    let got = ch
        .basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .expect("the binder's message");
    let headers = got.delivery.properties.headers().clone().unwrap();
    assert_eq!(
        headers.inner().get("amount"),
        Some(&AMQPValue::DecimalValue(DecimalValue {
            scale: 2,
            value: (-12_345i32) as u32,
        }))
    );
    ch.queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await
        .unwrap();
}
