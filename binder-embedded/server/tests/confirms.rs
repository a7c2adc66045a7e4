//! Publisher confirms while the message store holds a persistent message's back: the
//! confirms of later publishes, sent at once, never cover it (no `multiple` ack reaches back
//! over it), so when the store then fails to keep it, it is nacked, not already acked.

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use lapin::BasicProperties;
use lapin::options::*;
use lapin::types::FieldTable;
use stream_engine::{
    BindingDef, Broker, BrokerConfig, Durability, ExchangeDef, MessageStore, PolicyDef, QueueDef,
    Recovered, Removal, StoreError, StoredMessage,
};
use tokio::sync::oneshot;

type Held = Arc<Mutex<Vec<oneshot::Sender<Result<(), StoreError>>>>>;

/// A store that holds every message's durability point until the test answers it.
#[derive(Debug)]
struct HoldingStore(Held);

impl MessageStore for HoldingStore {
    fn keeps_messages(&self) -> bool {
        true
    }
    fn recover(&self) -> Result<Recovered, StoreError> {
        Ok(Recovered::default())
    }
    fn exchange_declared(&self, _: &ExchangeDef) {}
    fn exchange_deleted(&self, _: &str) {}
    fn queue_declared(&self, _: &QueueDef) {}
    fn queue_deleted(&self, _: &str) {}
    fn binding_added(&self, _: &BindingDef) {}
    fn binding_removed(&self, _: &BindingDef) {}
    fn policy_set(&self, _: &PolicyDef) {}
    fn policy_cleared(&self, _: &str) {}
    fn operator_policy_set(&self, _: &PolicyDef) {}
    fn operator_policy_cleared(&self, _: &str) {}
    fn enqueued(&self, _: &StoredMessage<'_>) -> Durability {
        let (tx, rx) = oneshot::channel();
        self.0.lock().unwrap().push(tx);
        Durability::pending(async move {
            rx.await.unwrap_or_else(|_| {
                Err(StoreError::Failed {
                    detail: "the test dropped it".into(),
                })
            })
        })
    }
    fn delivered(&self, _: &str, _: u64) {}
    fn removed(&self, _: &str, _: u64, _: Removal) {}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn later_confirms_never_cover_one_the_store_still_holds() {
    let held = Held::default();
    let broker: Broker =
        Broker::with_store(BrokerConfig::default(), HoldingStore(held.clone())).unwrap();
    let server = server_with(config(), broker).await;
    let conn = lapin(&server).await;
    let ch = conn.create_channel().await.unwrap();
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let durable = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    ch.queue_declare("kept".into(), durable, FieldTable::default())
        .await
        .unwrap();
    ch.queue_declare("loose".into(), Default::default(), FieldTable::default())
        .await
        .unwrap();

    for round in 0..3 {
        let kept = ch
            .basic_publish(
                "".into(),
                "kept".into(),
                BasicPublishOptions::default(),
                b"persistent",
                BasicProperties::default().with_delivery_mode(2),
            )
            .await
            .unwrap();
        eventually("the store holds the message", || {
            held.lock().unwrap().len() == 1
        })
        .await;
        // Transient publishes, confirmed at once, in a burst whose acks could coalesce.
        let mut loose = Vec::new();
        for _ in 0..20 {
            loose.push(
                ch.basic_publish(
                    "".into(),
                    "loose".into(),
                    BasicPublishOptions::default(),
                    b"transient",
                    BasicProperties::default(),
                )
                .await
                .unwrap(),
            );
        }
        for confirm in loose {
            assert!(confirm.await.unwrap().is_ack());
        }
        // The store fails the held message: the publisher hears a nack, not an ack that an
        // earlier `multiple` confirm already gave.
        let sender = held.lock().unwrap().pop().unwrap();
        sender
            .send(Err(StoreError::Failed {
                detail: "disk full".into(),
            }))
            .unwrap();
        let outcome = kept.await.unwrap();
        assert!(outcome.is_nack(), "round {round}: {outcome:?}");
    }
    server.shutdown().await;
}
