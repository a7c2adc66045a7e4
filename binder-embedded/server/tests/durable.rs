//! `data_dir`: what a restarted server keeps. Durable exchanges, queues and bindings and the
//! persistent messages of durable queues come back (delivered-but-unacknowledged ones flagged
//! redelivered); transient messages and non-durable queues do not; `tx.commit` works over
//! the store; the free-disk watermark blocks publishers.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{config, lapin, server};
use futures::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Confirmation, ExchangeKind};
use stream_broker::ServerConfig;

fn durable_config(dir: &Path) -> ServerConfig {
    ServerConfig {
        data_dir: Some(dir.to_owned()),
        ..config()
    }
}

fn persistent() -> BasicProperties {
    BasicProperties::default().with_delivery_mode(2)
}

async fn publish(
    ch: &lapin::Channel,
    exchange: &str,
    key: &str,
    body: &[u8],
    props: BasicProperties,
) {
    let confirm = ch
        .basic_publish(
            exchange.into(),
            key.into(),
            BasicPublishOptions::default(),
            body,
            props,
        )
        .await
        .unwrap()
        .await
        .unwrap();
    assert!(matches!(confirm, Confirmation::Ack(_)), "{confirm:?}");
}

async fn get(ch: &lapin::Channel, queue: &str) -> Option<(Vec<u8>, bool)> {
    ch.basic_get(queue.into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .map(|m| (m.delivery.data.clone(), m.delivery.redelivered))
}

async fn declare(ch: &lapin::Channel, name: &str, durable: bool) -> u32 {
    ch.queue_declare(
        name.into(),
        QueueDeclareOptions {
            durable,
            ..QueueDeclareOptions::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap()
    .message_count()
}

#[tokio::test]
async fn a_restarted_server_has_its_durable_queues_and_persistent_messages() {
    let dir = tempfile::tempdir().unwrap();
    let first = server(durable_config(dir.path())).await;
    let conn = lapin(&first).await;
    let ch = conn.create_channel().await.unwrap();
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    ch.exchange_declare(
        "orders".into(),
        ExchangeKind::Topic,
        ExchangeDeclareOptions {
            durable: true,
            ..ExchangeDeclareOptions::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap();
    declare(&ch, "billing", true).await;
    declare(&ch, "scratch", false).await;
    ch.queue_bind(
        "billing".into(),
        "orders".into(),
        "order.#".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    for body in [&b"kept-1"[..], b"kept-2", b"kept-3"] {
        publish(&ch, "orders", "order.created", body, persistent()).await;
    }
    publish(
        &ch,
        "orders",
        "order.created",
        b"transient",
        BasicProperties::default(),
    )
    .await;
    publish(&ch, "", "scratch", b"in a transient queue", persistent()).await;
    // One delivered and left unacknowledged: it comes back flagged redelivered.
    let reader = conn.create_channel().await.unwrap();
    reader
        .basic_qos(1, BasicQosOptions::default())
        .await
        .unwrap();
    let mut consumer = reader
        .basic_consume(
            "billing".into(),
            "c".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let delivered = tokio::time::timeout(Duration::from_secs(5), consumer.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(delivered.data, b"kept-1");
    // Another acknowledged through basic.get: it does not come back.
    let got = ch
        .basic_get("billing".into(), BasicGetOptions::default())
        .await
        .unwrap()
        .expect("a message to get");
    assert_eq!(got.delivery.data, b"kept-2");
    got.delivery.ack(BasicAckOptions::default()).await.unwrap();
    // A fence: its confirm means everything before it reached the disk.
    publish(&ch, "", "billing", b"kept-4", persistent()).await;
    first.shutdown().await;
    drop(conn);

    let second = server(durable_config(dir.path())).await;
    let conn = lapin(&second).await;
    let ch = conn.create_channel().await.unwrap();
    let passive = |name: &str| {
        let ch = ch.clone();
        let name = name.to_owned();
        async move {
            ch.queue_declare(
                name.as_str().into(),
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
        }
    };
    assert_eq!(passive("billing").await.unwrap().message_count(), 3);
    let mut kept = Vec::new();
    while let Some(m) = get(&ch, "billing").await {
        kept.push(m);
    }
    assert_eq!(
        kept,
        [
            (b"kept-1".to_vec(), true),
            (b"kept-3".to_vec(), false),
            (b"kept-4".to_vec(), false),
        ],
        "the persistent messages in order, the delivered one redelivered, the acked one gone"
    );
    assert!(
        passive("scratch").await.is_err(),
        "a non-durable queue is not kept"
    );

    // The durable exchange and its binding came back too; tx.commit goes through the store.
    let ch = conn.create_channel().await.unwrap();
    ch.tx_select().await.unwrap();
    ch.basic_publish(
        "orders".into(),
        "order.paid".into(),
        BasicPublishOptions::default(),
        b"committed",
        persistent(),
    )
    .await
    .unwrap();
    ch.tx_commit().await.unwrap();
    second.shutdown().await;
    drop(conn);

    let third = server(durable_config(dir.path())).await;
    let conn = lapin(&third).await;
    let ch = conn.create_channel().await.unwrap();
    assert_eq!(
        get(&ch, "billing").await,
        Some((b"committed".to_vec(), false))
    );
    assert_eq!(get(&ch, "billing").await, None);
    third.shutdown().await;
}

#[tokio::test]
async fn each_virtual_host_keeps_its_own_store() {
    let dir = tempfile::tempdir().unwrap();
    let config = ServerConfig {
        vhosts: vec!["/".into(), "prod".into()],
        ..durable_config(dir.path())
    };
    let first = server(config.clone()).await;
    let conn = lapin(&first).await;
    let ch = conn.create_channel().await.unwrap();
    declare(&ch, "only-in-default", true).await;
    first.shutdown().await;
    drop(conn);
    assert!(dir.path().join("%2F").is_dir());
    assert!(dir.path().join("prod").is_dir());
    let second = server(config).await;
    let conn = lapin(&second).await;
    let ch = conn.create_channel().await.unwrap();
    assert_eq!(declare(&ch, "only-in-default", true).await, 0);
    second.shutdown().await;
}

#[tokio::test]
async fn a_data_dir_that_cannot_be_opened_stops_the_server_with_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-directory");
    std::fs::write(&file, b"x").unwrap();
    let e = stream_broker::Server::standalone(durable_config(&file))
        .await
        .expect_err("a file as data_dir");
    let text = e.to_string();
    assert!(
        text.contains("not-a-directory") && text.contains("'/'"),
        "{text}"
    );
}

#[tokio::test]
async fn a_disk_with_less_free_space_than_disk_free_limit_blocks_publishers_not_consumers() {
    let dir = tempfile::tempdir().unwrap();
    let free = stream_store::free_space(dir.path()).unwrap();
    let first = server(durable_config(dir.path())).await;
    let conn = lapin(&first).await;
    let ch = conn.create_channel().await.unwrap();
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    declare(&ch, "kept", true).await;
    publish(&ch, "", "kept", b"before", persistent()).await;
    first.shutdown().await;
    drop(conn);

    // More than the disk has free: the alarm is on from the start.
    let config = ServerConfig {
        disk_free_limit: Some(free.saturating_mul(2)),
        ..durable_config(dir.path())
    };
    let second = server(config).await;
    let conn = lapin(&second).await;
    let ch = conn.create_channel().await.unwrap();
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let confirm = ch
        .basic_publish(
            "".into(),
            "kept".into(),
            BasicPublishOptions::default(),
            b"held",
            persistent(),
        )
        .await
        .unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(300), confirm)
            .await
            .is_err(),
        "a publish was confirmed under the disk alarm"
    );
    // Consumers go on: another connection still gets what the queue holds.
    let reader = lapin(&second).await;
    let rch = reader.create_channel().await.unwrap();
    assert_eq!(get(&rch, "kept").await, Some((b"before".to_vec(), false)));
    second.shutdown().await;
}

#[tokio::test]
async fn disk_free_limit_without_a_data_dir_is_refused_by_name() {
    let e = stream_broker::Server::standalone(ServerConfig {
        disk_free_limit: Some(1),
        ..config()
    })
    .await
    .expect_err("disk_free_limit without data_dir");
    assert!(e.to_string().contains("disk_free_limit"), "{e}");
}
