//! Concurrent sends through one producer each get their own publisher confirm. lapin numbers a
//! publish for its confirm before it queues the frames, so two threads publishing on one
//! channel at once could be numbered in one order and reach the broker in the other; the
//! broker's ack for one message then answered the other's send.

mod common;

use std::sync::Arc;

use binder_amqp::AmqpBroker;
use binder_amqp::ProducerSpec;
use binder_core::message::{DeliveryMode, Message};
use lapin::options::{BasicGetOptions, QueueDeclareOptions, QueueDeleteOptions, QueuePurgeOptions};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{Connection, ConnectionProperties};

/// Messages large enough that building their frames takes a while (the window of the race).
const FILLER: usize = 256 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sends_get_their_own_confirms() {
    let Some(binder) = common::binder().await else {
        return;
    };
    let queue = common::unique("confirm-order");
    let conn = Connection::connect(&common::amqp_url(), ConnectionProperties::default())
        .await
        .unwrap();
    let ch = conn.create_channel().await.unwrap();
    // Holds one message and refuses (nacks) every publish while it is full.
    let mut args = FieldTable::default();
    args.insert(ShortString::from("x-max-length"), AMQPValue::LongInt(1));
    args.insert(
        ShortString::from("x-overflow"),
        AMQPValue::LongString("reject-publish".into()),
    );
    ch.queue_declare(queue.as_str().into(), QueueDeclareOptions::default(), args)
        .await
        .unwrap();
    let producer: Arc<dyn binder_amqp::AmqpProducer> = Arc::from(
        binder
            .producer(ProducerSpec {
                exchange: String::new(),
                delivery_mode: DeliveryMode::NonPersistent,
            })
            .await
            .unwrap(),
    );
    for round in 0..400 {
        ch.queue_purge(queue.as_str().into(), QueuePurgeOptions::default())
            .await
            .unwrap();
        let sends: Vec<_> = (0..16u32)
            .map(|id| {
                let producer = producer.clone();
                let queue = queue.clone();
                tokio::spawn(async move {
                    let mut payload = format!("{id:04}").into_bytes();
                    payload.resize(FILLER, b'.');
                    (id, producer.publish(&queue, Message::new(payload)).await)
                })
            })
            .collect();
        let mut confirmed = Vec::new();
        for send in sends {
            let (id, result) = send.await.unwrap();
            if result.is_ok() {
                confirmed.push(id);
            }
        }
        // The broker took exactly one message: the one whose send was confirmed.
        let stored = ch
            .basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true })
            .await
            .unwrap()
            .expect("the queue holds the message it accepted");
        let stored_id: u32 = std::str::from_utf8(&stored.delivery.data[..4])
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(
            confirmed,
            vec![stored_id],
            "round {round}: the confirmed send is the stored message"
        );
    }
    ch.queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await
        .unwrap();
}
