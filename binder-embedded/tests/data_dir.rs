//! `spring.embedded.data-dir`: the embedded binder's broker keeps durable queues and
//! persistent messages on disk. Binders created from configuration share one broker over
//! the store; a configuration asking for another directory is refused by name; a service
//! restarted over the same directory finds the messages its last run left.

mod common;

use std::sync::Arc;

use binder_core::runtime::{App, handler};
use binder_embedded::EmbeddedBinder;
use binder_embedded::engine::{Broker, BrokerConfig};
use common::{config, recv};
use stream_store::{DiskStore, StoreConfig};
use tokio::sync::mpsc;

fn producer_yaml(data_dir: &std::path::Path) -> String {
    format!(
        "spring.embedded.data-dir: {}\nspring.cloud.stream.bindings:\n  orders-out:\n    destination: kept-orders\n    producer: {{requiredGroups: billing}}\n",
        data_dir.display()
    )
}

#[tokio::test]
async fn configured_binders_share_one_broker_over_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let app = App::builder(config(&producer_yaml(dir.path())))
        .output("orders-out")
        .start()
        .await
        .unwrap();
    for n in 0..3 {
        app.output("orders-out")
            .unwrap()
            .send(&format!("order {n}"))
            .await
            .unwrap();
    }
    let shared = EmbeddedBinder::shared_broker();
    assert!(
        shared.keeps_messages(),
        "the shared broker is over the store"
    );
    assert_eq!(shared.queue_counts("kept-orders.billing"), Some((3, 0)));
    let segments = std::fs::read_dir(dir.path().join("segments"))
        .expect("the store's segments")
        .count();
    assert!(segments > 0, "the messages are in the store's segments");
    app.shutdown().await;

    // Another directory would be a second broker: refused, naming the setting.
    let other = tempfile::tempdir().unwrap();
    let Err(refused) = App::builder(config(&producer_yaml(other.path())))
        .output("orders-out")
        .start()
        .await
    else {
        panic!("another data-dir is refused");
    };
    let text = refused.to_string();
    assert!(
        text.contains("spring.embedded.data-dir") && text.contains("already"),
        "{text}"
    );
}

#[tokio::test]
async fn a_restarted_service_finds_what_it_left_in_the_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let producer = "spring.cloud.stream.bindings:\n  orders-out:\n    destination: restart-orders\n    producer: {requiredGroups: billing}\n";
    let consumer = "spring.cloud.stream.bindings:\n  orders-in: {destination: restart-orders, group: billing}\n";
    let open = || {
        let store = DiskStore::open(dir.path(), StoreConfig::default()).unwrap();
        let broker = Broker::with_store(BrokerConfig::default(), store.clone()).unwrap();
        (broker, store)
    };

    let (broker, store) = open();
    let binder = Arc::new(EmbeddedBinder::new(broker.clone()));
    let first = App::builder(config(producer))
        .binder("embedded", binder)
        .output("orders-out")
        .start()
        .await
        .unwrap();
    for n in 0..5 {
        first
            .output("orders-out")
            .unwrap()
            .send(&format!("order {n}"))
            .await
            .unwrap();
    }
    first.shutdown().await;
    drop(broker);
    store.close().unwrap();

    let (broker, _store) = open();
    assert_eq!(broker.queue_counts("restart-orders.billing"), Some((5, 0)));
    let (tx, mut rx) = mpsc::unbounded_channel();
    let second = App::builder(config(consumer))
        .binder("embedded", Arc::new(EmbeddedBinder::new(broker.clone())))
        .listener(
            "orders-in",
            handler::payload(move |order: String| {
                let tx = tx.clone();
                async move {
                    let _ = tx.send(order);
                }
            }),
        )
        .start()
        .await
        .unwrap();
    for n in 0..5 {
        assert_eq!(recv(&mut rx).await, format!("order {n}"));
    }
    second.shutdown().await;
}

#[tokio::test]
async fn a_binder_given_in_code_refuses_a_data_dir_it_cannot_apply() {
    let binder = Arc::new(EmbeddedBinder::new(Broker::new()));
    let Err(refused) = App::builder(config(
        "spring.embedded.data-dir: /tmp/never-used\nspring.cloud.stream.bindings:\n  out: {destination: x}\n",
    ))
    .binder("embedded", binder)
    .output("out")
    .start()
    .await
    else {
        panic!("a data-dir on a binder given in code is refused");
    };
    assert!(refused.to_string().contains("given in code"), "{refused}");
}

/// A store that fails (a sync fails: a full or broken disk) turns the binder's connection
/// state, which health and metrics report, to down with the reason, and the send that met
/// the failure, like every later persistent one, fails.
#[tokio::test]
async fn a_failed_store_is_reported_as_the_binder_down() {
    use binder_core::binder::{Binder, ConnectionState};
    use stream_store::FaultFs;

    let fs = FaultFs::new();
    let store =
        DiskStore::open_with(Arc::new(fs.clone()), "/failing", StoreConfig::default()).unwrap();
    let broker = Broker::with_store(BrokerConfig::default(), store).unwrap();
    let binder = Arc::new(EmbeddedBinder::new(broker));
    let app = App::builder(config(
        "spring.cloud.stream.bindings:\n  out:\n    destination: failing-orders\n    producer: {requiredGroups: billing}\n",
    ))
    .binder("embedded", binder.clone())
    .output("out")
    .start()
    .await
    .unwrap();
    let out = app.output("out").unwrap();
    out.send(&"kept").await.unwrap();
    assert_eq!(binder.connection_state(), ConnectionState::Up);

    fs.fail_syncs(true);
    for order in ["lost", "refused"] {
        let failed = out.send(&order).await;
        assert!(failed.is_err(), "{order}: {failed:?}");
    }
    match binder.connection_state() {
        ConnectionState::Down { reason } => {
            assert!(reason.contains("message store failed"), "{reason}");
            assert!(reason.contains("injected sync failure"), "{reason}");
        }
        other => panic!("a failed store leaves the binder {other:?}"),
    }
    app.shutdown().await;
}
