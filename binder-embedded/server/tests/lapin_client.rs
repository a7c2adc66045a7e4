//! The server driven by lapin, a client nobody here wrote.

mod common;

use std::time::Duration;

use common::*;
use futures::StreamExt;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Confirmation, ExchangeKind};
use stream_broker::{PermissionConfig, UserConfig};

fn protocol_code(e: &lapin::Error) -> Option<u16> {
    match e.kind() {
        lapin::ErrorKind::ProtocolError(p) => Some(p.get_id()),
        _ => None,
    }
}

async fn queue(ch: &lapin::Channel, name: &str) {
    ch.queue_declare(
        name.into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
}

async fn publish(ch: &lapin::Channel, exchange: &str, key: &str, body: &[u8]) -> Confirmation {
    ch.basic_publish(
        exchange.into(),
        key.into(),
        BasicPublishOptions::default(),
        body,
        BasicProperties::default(),
    )
    .await
    .unwrap()
    .await
    .unwrap()
}

#[tokio::test]
async fn handshake_succeeds_and_a_wrong_password_is_refused() {
    let server = server(config()).await;
    let conn = lapin(&server).await;
    assert!(conn.status().connected());
    let refused =
        lapin::Connection::connect(&uri(&server, "guest", "nope", ""), Default::default()).await;
    let e = refused.expect_err("a wrong password connects");
    assert_eq!(protocol_code(&e), Some(403), "{e:?}");
    let unknown =
        lapin::Connection::connect(&uri(&server, "nobody", "x", ""), Default::default()).await;
    assert!(unknown.is_err());
    // The refused logins cost the good connection nothing.
    conn.create_channel().await.unwrap();
    server.shutdown().await;
}

#[tokio::test]
async fn a_missing_vhost_is_refused_with_530() {
    let server = server(config()).await;
    let url = format!("amqp://guest:guest@{}/nowhere", server.local_addr());
    let e = lapin::Connection::connect(&url, Default::default())
        .await
        .expect_err("opened a missing vhost");
    assert_eq!(protocol_code(&e), Some(530), "{e:?}");
    server.shutdown().await;
}

#[tokio::test]
async fn declare_bind_publish_consume_ack_round_trip() {
    let server = server(config()).await;
    let conn = lapin(&server).await;
    let ch = conn.create_channel().await.unwrap();
    ch.exchange_declare(
        "orders".into(),
        ExchangeKind::Topic,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    queue(&ch, "billing").await;
    ch.queue_bind(
        "billing".into(),
        "orders".into(),
        "order.#".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    let mut consumer = ch
        .basic_consume(
            "billing".into(),
            "c1".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let mut headers = FieldTable::default();
    headers.insert("region".into(), AMQPValue::LongString("eu".into()));
    ch.basic_publish(
        "orders".into(),
        "order.created".into(),
        BasicPublishOptions::default(),
        b"{\"id\":1}",
        BasicProperties::default()
            .with_content_type("application/json".into())
            .with_headers(headers)
            .with_message_id("m-1".into()),
    )
    .await
    .unwrap();
    let d = tokio::time::timeout(Duration::from_secs(5), consumer.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(d.data, b"{\"id\":1}");
    assert_eq!(d.exchange.as_str(), "orders");
    assert_eq!(d.routing_key.as_str(), "order.created");
    assert!(!d.redelivered);
    assert_eq!(
        d.properties
            .content_type()
            .as_ref()
            .map(ShortString::as_str),
        Some("application/json")
    );
    assert_eq!(
        d.properties.message_id().as_ref().map(ShortString::as_str),
        Some("m-1")
    );
    let region = d
        .properties
        .headers()
        .as_ref()
        .unwrap()
        .inner()
        .get("region")
        .cloned();
    assert_eq!(region, Some(AMQPValue::LongString("eu".into())));
    d.ack(BasicAckOptions::default()).await.unwrap();
    // Acked: nothing is left, ready or unacknowledged.
    let ok = ch
        .queue_declare(
            "billing".into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    assert_eq!((ok.message_count(), ok.consumer_count()), (0, 1));
    server.shutdown().await;
}

#[tokio::test]
async fn publisher_confirms_ack_and_nack() {
    let server = server(config()).await;
    let conn = lapin(&server).await;
    let ch = conn.create_channel().await.unwrap();
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let mut args = FieldTable::default();
    args.insert("x-max-length".into(), AMQPValue::LongInt(1));
    args.insert(
        "x-overflow".into(),
        AMQPValue::LongString("reject-publish".into()),
    );
    ch.queue_declare("bounded".into(), QueueDeclareOptions::default(), args)
        .await
        .unwrap();
    let mut confirms = vec![];
    for i in 0..3u8 {
        confirms.push(
            ch.basic_publish(
                "".into(),
                "bounded".into(),
                BasicPublishOptions::default(),
                &[i],
                BasicProperties::default(),
            )
            .await
            .unwrap(),
        );
    }
    let mut outcomes = vec![];
    for c in confirms {
        outcomes.push(c.await.unwrap().is_ack());
    }
    assert_eq!(outcomes, vec![true, false, false]);
    // Many acks in a row (sent as `multiple` acks where they coalesce) all resolve.
    let mut confirms = vec![];
    queue(&ch, "wide").await;
    for _ in 0..200 {
        confirms.push(
            ch.basic_publish(
                "".into(),
                "wide".into(),
                BasicPublishOptions::default(),
                b"x",
                BasicProperties::default(),
            )
            .await
            .unwrap(),
        );
    }
    for c in confirms {
        assert!(c.await.unwrap().is_ack());
    }
    server.shutdown().await;
}

#[tokio::test]
async fn an_unroutable_mandatory_message_is_returned() {
    let server = server(config()).await;
    let conn = lapin(&server).await;
    let ch = conn.create_channel().await.unwrap();
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let confirm = ch
        .basic_publish(
            "amq.direct".into(),
            "nobody".into(),
            BasicPublishOptions {
                mandatory: true,
                ..Default::default()
            },
            b"lost",
            BasicProperties::default(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    assert!(confirm.is_ack());
    let returned = confirm.take_message().expect("basic.return before the ack");
    assert_eq!(returned.data, b"lost");
    assert_eq!(returned.reply_code, 312);
    assert_eq!(returned.routing_key.as_str(), "nobody");
    server.shutdown().await;
}

#[tokio::test]
async fn basic_get_and_get_empty() {
    let server = server(config()).await;
    let conn = lapin(&server).await;
    let ch = conn.create_channel().await.unwrap();
    queue(&ch, "pull").await;
    assert!(
        ch.basic_get("pull".into(), BasicGetOptions::default())
            .await
            .unwrap()
            .is_none()
    );
    publish(&ch, "", "pull", b"one").await;
    publish(&ch, "", "pull", b"two").await;
    let got = ch
        .basic_get("pull".into(), BasicGetOptions::default())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.delivery.data, b"one");
    assert_eq!(got.message_count, 1);
    got.delivery.ack(BasicAckOptions::default()).await.unwrap();
    let got = ch
        .basic_get("pull".into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (got.delivery.data.as_slice(), got.message_count),
        (&b"two"[..], 0)
    );
    server.shutdown().await;
}

#[tokio::test]
async fn prefetch_two_holds_at_most_two_unacked() {
    let server = server(config()).await;
    let conn = lapin(&server).await;
    let ch = conn.create_channel().await.unwrap();
    queue(&ch, "work").await;
    for i in 0..5u8 {
        publish(&ch, "", "work", &[i]).await;
    }
    let cch = conn.create_channel().await.unwrap();
    cch.basic_qos(2, BasicQosOptions::default()).await.unwrap();
    let mut consumer = cch
        .basic_consume(
            "work".into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let mut got = vec![];
    for _ in 0..2 {
        got.push(consumer.next().await.unwrap().unwrap());
    }
    assert!(
        tokio::time::timeout(Duration::from_millis(300), consumer.next())
            .await
            .is_err(),
        "a third delivery arrived with two unacked at prefetch 2"
    );
    assert_eq!(ready_count(&ch, "work").await, 3);
    got.remove(0).ack(BasicAckOptions::default()).await.unwrap();
    let third = tokio::time::timeout(Duration::from_secs(5), consumer.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(third.data, vec![2]);
    server.shutdown().await;
}

/// Ready messages of a queue, by a passive declare.
async fn ready_count(ch: &lapin::Channel, queue: &str) -> u32 {
    ch.queue_declare(
        queue.into(),
        QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap()
    .message_count()
}

#[tokio::test]
async fn a_nack_with_requeue_is_redelivered_flagged() {
    let server = server(config()).await;
    let conn = lapin(&server).await;
    let ch = conn.create_channel().await.unwrap();
    queue(&ch, "again").await;
    publish(&ch, "", "again", b"m").await;
    let mut consumer = ch
        .basic_consume(
            "again".into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let first = consumer.next().await.unwrap().unwrap();
    assert!(!first.redelivered);
    first
        .nack(BasicNackOptions {
            requeue: true,
            ..Default::default()
        })
        .await
        .unwrap();
    let second = consumer.next().await.unwrap().unwrap();
    assert!(second.redelivered);
    assert_eq!(second.data, b"m");
    // basic.recover requeues what is unacked, flagged again.
    ch.basic_recover(BasicRecoverOptions { requeue: true })
        .await
        .unwrap();
    let third = consumer.next().await.unwrap().unwrap();
    assert!(third.redelivered);
    third.ack(BasicAckOptions::default()).await.unwrap();
    server.shutdown().await;
}

#[tokio::test]
async fn transactions_commit_and_roll_back() {
    let server = server(config()).await;
    let conn = lapin(&server).await;
    let ch = conn.create_channel().await.unwrap();
    queue(&ch, "txq").await;
    ch.tx_select().await.unwrap();
    publish(&ch, "", "txq", b"dropped").await;
    ch.tx_rollback().await.unwrap();
    assert_eq!(ready_count(&ch, "txq").await, 0);
    publish(&ch, "", "txq", b"kept").await;
    assert_eq!(ready_count(&ch, "txq").await, 0);
    ch.tx_commit().await.unwrap();
    assert_eq!(ready_count(&ch, "txq").await, 1);
    server.shutdown().await;
}

#[tokio::test]
async fn a_channel_error_closes_the_channel_not_the_connection() {
    let server = server(config()).await;
    let conn = lapin(&server).await;
    let ch = conn.create_channel().await.unwrap();
    let e = ch
        .queue_declare(
            "missing".into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(protocol_code(&e), Some(404), "{e:?}");
    assert!(!ch.status().connected());
    assert!(conn.status().connected());
    let ch2 = conn.create_channel().await.unwrap();
    queue(&ch2, "fine").await;
    // An unknown delivery tag is a 406 on the channel.
    ch2.basic_ack(99, BasicAckOptions::default()).await.unwrap();
    eventually("the 406 closes the channel", || !ch2.status().connected()).await;
    assert!(conn.status().connected());
    server.shutdown().await;
}

#[tokio::test]
async fn large_messages_span_many_body_frames() {
    let server = server(config()).await;
    let conn = lapin::Connection::connect(
        &uri(&server, "guest", "guest", "?frame_max=4096"),
        Default::default(),
    )
    .await
    .unwrap();
    assert_eq!(conn.configuration().frame_max(), 4096);
    let ch = conn.create_channel().await.unwrap();
    queue(&ch, "big").await;
    let body: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    assert!(publish(&ch, "", "big", &body).await.is_ack());
    let mut consumer = ch
        .basic_consume(
            "big".into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let d = consumer.next().await.unwrap().unwrap();
    assert_eq!(d.data, body);
    server.shutdown().await;
}

/// Declaration arguments holding one exchange name under `key` (`x-dead-letter-exchange`,
/// `alternate-exchange`).
fn pointing(key: &str, exchange: &str) -> FieldTable {
    let mut args = FieldTable::default();
    args.insert(key.into(), AMQPValue::LongString(exchange.into()));
    args
}

/// Declares `queue` dead-lettering to `amq.direct`, on a channel of its own.
async fn dead_lettering(conn: &lapin::Connection, queue: &str) -> lapin::Result<lapin::Queue> {
    let args = pointing("x-dead-letter-exchange", "amq.direct");
    let ch = conn.create_channel().await?;
    ch.queue_declare(queue.into(), QueueDeclareOptions::default(), args)
        .await
}

/// A user without tags, password `pw`, with these configure, write and read permissions
/// on `/`.
fn plain_user(name: &str, [configure, write, read]: [&str; 3]) -> UserConfig {
    UserConfig {
        name: name.into(),
        password_hash: None,
        password: Some("pw".into()),
        tags: vec![],
        permissions: [(
            "/".to_owned(),
            PermissionConfig {
                configure: configure.into(),
                write: write.into(),
                read: read.into(),
            },
        )]
        .into(),
    }
}

#[tokio::test]
async fn permissions_refuse_with_403() {
    let mut config = config();
    config
        .users
        .push(plain_user("app", ["^app\\.", "^app\\.", "^app\\."]));
    let server = server(config).await;
    let conn = lapin::Connection::connect(&uri(&server, "app", "pw", ""), Default::default())
        .await
        .unwrap();
    let ch = conn.create_channel().await.unwrap();
    queue(&ch, "app.mine").await;
    let e = ch
        .queue_declare(
            "other".into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(protocol_code(&e), Some(403), "{e:?}");
    // A queue's dead letters and an exchange's unroutable messages go where the declaring
    // user may write, as in RabbitMQ: `amq.direct` is not the user's.
    for (what, declared) in [
        ("dead-letter exchange", {
            let ch = conn.create_channel().await.unwrap();
            let args = pointing("x-dead-letter-exchange", "amq.direct");
            ch.queue_declare("app.dl".into(), QueueDeclareOptions::default(), args)
                .await
                .map(drop)
        }),
        ("alternate exchange", {
            let ch = conn.create_channel().await.unwrap();
            let args = pointing("alternate-exchange", "amq.direct");
            ch.exchange_declare(
                "app.ae".into(),
                lapin::ExchangeKind::Direct,
                ExchangeDeclareOptions::default(),
                args,
            )
            .await
        }),
    ] {
        let e = declared.expect_err(what);
        assert_eq!(protocol_code(&e), Some(403), "{what}: {e:?}");
    }
    let ch = conn.create_channel().await.unwrap();
    let args = pointing("x-dead-letter-exchange", "app.dlx");
    ch.queue_declare("app.dl".into(), QueueDeclareOptions::default(), args)
        .await
        .expect("a dead-letter exchange the user may write to");
    let ch = conn.create_channel().await.unwrap();
    // The default exchange is `amq.default`, which `^app\.` does not grant writing to.
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let _ = ch
        .basic_publish(
            "".into(),
            "app.mine".into(),
            BasicPublishOptions::default(),
            b"x",
            BasicProperties::default(),
        )
        .await;
    eventually("the publish to amq.default is refused", || {
        !ch.status().connected()
    })
    .await;
    assert!(conn.status().connected());
    server.shutdown().await;
}

#[tokio::test]
async fn heartbeats_keep_an_idle_connection_alive() {
    let mut config = config();
    config.limits.heartbeat = 1;
    let server = server(config).await;
    let conn = lapin::Connection::connect(
        &uri(&server, "guest", "guest", "?heartbeat=1"),
        Default::default(),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert!(conn.status().connected());
    let ch = conn.create_channel().await.unwrap();
    queue(&ch, "alive").await;
    server.shutdown().await;
}

#[tokio::test]
async fn shutdown_closes_lapin_connections() {
    let server = server(config()).await;
    let conn = lapin(&server).await;
    let ch = conn.create_channel().await.unwrap();
    queue(&ch, "q").await;
    assert_eq!(server.connections(), 1);
    tokio::time::timeout(Duration::from_secs(10), server.shutdown())
        .await
        .expect("shutdown hangs");
    eventually("the connection is closed", || !conn.status().connected()).await;
}

#[tokio::test]
async fn a_deleted_queue_cancels_its_consumer_with_notification() {
    let server = server(config()).await;
    let conn = lapin(&server).await;
    let ch = conn.create_channel().await.unwrap();
    queue(&ch, "doomed").await;
    let mut consumer = ch
        .basic_consume(
            "doomed".into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let other = conn.create_channel().await.unwrap();
    other
        .queue_delete("doomed".into(), QueueDeleteOptions::default())
        .await
        .unwrap();
    let end = tokio::time::timeout(Duration::from_secs(5), consumer.next())
        .await
        .expect("no basic.cancel from the server");
    assert!(end.is_none(), "{end:?}");
    assert!(ch.status().connected());
    server.shutdown().await;
}

#[tokio::test]
async fn amqplain_authenticates() {
    let server = server(config()).await;
    let conn = lapin::Connection::connect(
        &uri(&server, "guest", "guest", "?auth_mechanism=amqplain"),
        Default::default(),
    )
    .await
    .unwrap();
    conn.create_channel().await.unwrap();
    let e = lapin::Connection::connect(
        &uri(&server, "guest", "bad", "?auth_mechanism=amqplain"),
        Default::default(),
    )
    .await
    .unwrap_err();
    assert_eq!(protocol_code(&e), Some(403), "{e:?}");
    server.shutdown().await;
}

#[tokio::test]
async fn channel_flow_off_stops_deliveries_until_on() {
    let server = server(config()).await;
    let conn = lapin(&server).await;
    let ch = conn.create_channel().await.unwrap();
    queue(&ch, "flowq").await;
    let mut consumer = ch
        .basic_consume(
            "flowq".into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    assert!(
        !ch.channel_flow(ChannelFlowOptions { active: false })
            .await
            .unwrap()
    );
    let other = conn.create_channel().await.unwrap();
    publish(&other, "", "flowq", b"later").await;
    assert!(
        tokio::time::timeout(Duration::from_millis(300), consumer.next())
            .await
            .is_err(),
        "delivered with flow off"
    );
    assert!(
        ch.channel_flow(ChannelFlowOptions { active: true })
            .await
            .unwrap()
    );
    let d = tokio::time::timeout(Duration::from_secs(5), consumer.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(d.data, b"later");
    server.shutdown().await;
}

#[tokio::test]
async fn server_named_and_exclusive_queues() {
    let server = server(config()).await;
    let conn = lapin(&server).await;
    let ch = conn.create_channel().await.unwrap();
    let q = ch
        .queue_declare(
            "".into(),
            QueueDeclareOptions {
                exclusive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    assert!(q.name().as_str().starts_with("amq.gen-"), "{}", q.name());
    // Another connection may not use it: 405 RESOURCE_LOCKED.
    let conn2 = lapin(&server).await;
    let ch2 = conn2.create_channel().await.unwrap();
    let e = ch2
        .basic_consume(
            q.name().clone(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(protocol_code(&e), Some(405), "{e:?}");
    // The owner closes: the queue goes with it.
    conn.close(200, "bye".into()).await.unwrap();
    let ch3 = conn2.create_channel().await.unwrap();
    let e = ch3
        .queue_declare(
            q.name().clone(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(protocol_code(&e), Some(404), "{e:?}");
    server.shutdown().await;
}

#[tokio::test]
async fn a_cancelled_consumer_gets_nothing_more() {
    let server = server(config()).await;
    let conn = lapin(&server).await;
    let ch = conn.create_channel().await.unwrap();
    queue(&ch, "cq").await;
    let mut consumer = ch
        .basic_consume(
            "cq".into(),
            "tag-1".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    publish(&ch, "", "cq", b"1").await;
    let d = consumer.next().await.unwrap().unwrap();
    ch.basic_cancel("tag-1".into(), BasicCancelOptions::default())
        .await
        .unwrap();
    // Its unacked delivery can still be acked after the cancel, as on RabbitMQ.
    d.ack(BasicAckOptions::default()).await.unwrap();
    publish(&ch, "", "cq", b"2").await;
    assert!(
        tokio::time::timeout(Duration::from_millis(300), consumer.next())
            .await
            .map_or(true, |next| next.is_none()),
        "delivered after cancel"
    );
    assert_eq!(ready_count(&ch, "cq").await, 1);
    server.shutdown().await;
}

#[tokio::test]
async fn the_connection_limit_refuses_with_530() {
    let mut config = config();
    config.limits.max_connections = Some(1);
    let server = server(config).await;
    let first = lapin(&server).await;
    let e = lapin::Connection::connect(&uri(&server, "guest", "guest", ""), Default::default())
        .await
        .unwrap_err();
    assert_eq!(protocol_code(&e), Some(530), "{e:?}");
    first.close(200, "bye".into()).await.unwrap();
    eventually("the closed connection frees its slot", || {
        server.connections() == 0
    })
    .await;
    lapin(&server).await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_message_over_max_message_size_is_refused_with_406() {
    let mut config = config();
    config.limits.max_message_size = 1000;
    let server = server(config).await;
    let conn = lapin(&server).await;
    let ch = conn.create_channel().await.unwrap();
    queue(&ch, "small").await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    assert!(publish(&ch, "", "small", &[0; 1000]).await.is_ack());
    let _ = ch
        .basic_publish(
            "".into(),
            "small".into(),
            BasicPublishOptions::default(),
            &[0; 1001],
            BasicProperties::default(),
        )
        .await;
    eventually("the oversized message closes the channel", || {
        !ch.status().connected()
    })
    .await;
    assert!(conn.status().connected());
    server.shutdown().await;
}

#[tokio::test]
async fn bind_checks_the_brokers_against_the_vhosts() {
    use std::collections::HashMap;
    let brokers: HashMap<String, stream_engine::Broker> = HashMap::new();
    let e = stream_broker::Server::bind(config(), brokers)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("has no broker"), "{e}");
    let brokers: HashMap<String, stream_engine::Broker> = [
        ("/".to_owned(), stream_engine::Broker::new()),
        ("extra".to_owned(), stream_engine::Broker::new()),
    ]
    .into();
    let e = stream_broker::Server::bind(config(), brokers)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("not configured"), "{e}");
    let mut with_watermark = config();
    with_watermark.memory_high_watermark = Some(1);
    let brokers: HashMap<String, stream_engine::Broker> =
        [("/".to_owned(), stream_engine::Broker::new())].into();
    let e = stream_broker::Server::bind(with_watermark, brokers)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("memory_high_watermark"), "{e}");
}

/// RabbitMQ's dead-letter check on a server-named queue (under the name it got: refused, the
/// queue is not kept) and only on declarations that create: declaring again a queue an
/// administrator made, dead-lettering where the user may not write, is fine.
#[tokio::test]
async fn dead_letter_targets_are_checked_when_a_declaration_creates() {
    let mut config = config();
    config
        .users
        .push(plain_user("gen", [".*", "^app\\.", ".*"]));
    let broker: stream_engine::Broker = stream_engine::Broker::new();
    let server = server_with(config, broker.clone()).await;
    let admin = lapin::Connection::connect(&uri(&server, "guest", "guest", ""), Default::default())
        .await
        .unwrap();
    dead_lettering(&admin, "made").await.unwrap();
    let conn = lapin::Connection::connect(&uri(&server, "gen", "pw", ""), Default::default())
        .await
        .unwrap();
    let e = dead_lettering(&conn, "")
        .await
        .expect_err("a server-named queue dead-lettering to amq.direct");
    assert_eq!(protocol_code(&e), Some(403), "{e:?}");
    let names: Vec<String> = broker.queues().into_iter().map(|q| q.name).collect();
    assert_eq!(
        names,
        ["made"],
        "the refused server-named queue is not kept"
    );
    dead_lettering(&conn, "made")
        .await
        .expect("declaring again what exists is not checked, as in RabbitMQ");
    server.shutdown().await;
}
