//! `consumer_timeout` on the wire: a client holding a delivery unacknowledged past it sees
//! its channel closed with RabbitMQ's 406 and text (naming the channel's number), the
//! delivery goes back to the queue, and the connection and its other channels stay.

mod common;

use std::time::Duration;

use amq_protocol::frame::AMQPFrame;
use amq_protocol::protocol::{AMQPClass, basic, channel};
use common::*;
use futures::StreamExt;
use lapin::BasicProperties;
use lapin::options::*;
use lapin::types::FieldTable;
use stream_broker::{ConsumerTimeout, ServerConfig};

/// Publishes `body` to the queue `slow` through the default exchange.
async fn to_slow(ch: &lapin::Channel, body: &[u8]) {
    ch.basic_publish(
        "".into(),
        "slow".into(),
        BasicPublishOptions::default(),
        body,
        BasicProperties::default(),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn an_unacknowledged_delivery_past_the_timeout_closes_its_channel_with_406() {
    let server = server(ServerConfig {
        consumer_timeout: Some(ConsumerTimeout::After(Duration::from_millis(300))),
        ..config()
    })
    .await;
    let conn = lapin(&server).await;
    let ch = conn.create_channel().await.unwrap();
    ch.queue_declare(
        "slow".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    to_slow(&ch, b"job").await;

    // A raw client takes the message on channel 7 and never acknowledges it.
    let mut raw = Raw::connect(&server).await;
    raw.handshake(131_072, 2047, 0).await;
    raw.open_channel(7).await;
    raw.open_channel(8).await;
    let taken = std::time::Instant::now();
    raw.method(
        7,
        AMQPClass::Basic(basic::AMQPMethod::Get(basic::Get {
            queue: "slow".into(),
            no_ack: false,
        })),
    )
    .await;
    let close = loop {
        match raw.next().await.expect("the server answers") {
            AMQPFrame::Method(7, AMQPClass::Channel(channel::AMQPMethod::Close(close))) => {
                break close;
            }
            AMQPFrame::Method(7, AMQPClass::Basic(basic::AMQPMethod::GetOk(_)))
            | AMQPFrame::Header(7, ..)
            | AMQPFrame::Body(7, _)
            | AMQPFrame::Heartbeat => {}
            other => panic!("unexpected {other:?}"),
        }
    };
    let waited = taken.elapsed();
    assert!(
        waited >= Duration::from_millis(300),
        "closed after {waited:?}, before the timeout"
    );
    assert_eq!(close.reply_code, 406);
    assert_eq!(
        close.reply_text.as_str(),
        "PRECONDITION_FAILED - delivery acknowledgement on channel 7 timed out. Timeout value \
         used: 300 ms. This timeout value can be configured, see consumers doc guide to learn \
         more"
    );
    raw.method(
        7,
        AMQPClass::Channel(channel::AMQPMethod::CloseOk(channel::CloseOk {})),
    )
    .await;

    // The connection and its other channel go on; the message is back, redelivered.
    raw.method(
        8,
        AMQPClass::Basic(basic::AMQPMethod::Get(basic::Get {
            queue: "slow".into(),
            no_ack: true,
        })),
    )
    .await;
    let (number, got) = raw.next_method().await.expect("get-ok");
    let AMQPClass::Basic(basic::AMQPMethod::GetOk(ok)) = got else {
        panic!("expected get-ok, got {got:?}");
    };
    assert_eq!(number, 8);
    assert!(ok.redelivered);

    // A lapin consumer that acknowledges in time is left alone.
    to_slow(&ch, b"quick").await;
    let mut consumer = ch
        .basic_consume(
            "slow".into(),
            "quick".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let delivery = consumer.next().await.unwrap().unwrap();
    delivery.ack(BasicAckOptions::default()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(ch.status().connected());
    drop(raw);
    server.shutdown().await;
}

#[test]
fn the_setting_is_milliseconds_or_false() {
    let c = ServerConfig::from_toml("consumer_timeout = 60000\n").unwrap();
    assert_eq!(
        c.consumer_timeout,
        Some(ConsumerTimeout::After(Duration::from_secs(60)))
    );
    let c = ServerConfig::from_toml("consumer_timeout = false\n").unwrap();
    assert_eq!(c.consumer_timeout, Some(ConsumerTimeout::Never));
    assert_eq!(ServerConfig::from_toml("").unwrap().consumer_timeout, None);
    let zero = ServerConfig {
        consumer_timeout: Some(ConsumerTimeout::After(Duration::ZERO)),
        ..ServerConfig::default()
    };
    let e = zero.validate().unwrap_err();
    assert!(e.to_string().contains("consumer_timeout is 0"), "{e}");
    for bad in ["0", "-5", "true", "\"30m\""] {
        let e = ServerConfig::from_toml(&format!("consumer_timeout = {bad}\n")).unwrap_err();
        assert!(e.to_string().contains("consumer_timeout is"), "{bad}: {e}");
    }
}

#[tokio::test]
async fn a_server_given_its_brokers_refuses_the_setting() {
    let bound = stream_broker::Server::<stream_engine::Native>::bind(
        ServerConfig {
            consumer_timeout: Some(ConsumerTimeout::Never),
            ..config()
        },
        [("/".to_owned(), stream_engine::Broker::new())].into(),
    )
    .await;
    let Err(e) = bound else {
        panic!("a server given its brokers took consumer_timeout");
    };
    assert!(e.to_string().contains("consumer_timeout"), "{e}");
}

/// A client busy on its channel when the timeout closes it: the frames it sent meanwhile
/// find the engine's channel gone, and the close it gets still says why (406, not 504).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_channel_closed_by_the_timeout_is_told_why() {
    let broker: stream_engine::Broker =
        stream_engine::Broker::with_config(stream_engine::BrokerConfig {
            consumer_timeout: Some(Duration::from_millis(20)),
            ..Default::default()
        });
    let server = server_with(config(), broker.clone()).await;
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    ch.queue_declare("busy", Default::default(), Default::default())
        .unwrap();
    for round in 0..5u16 {
        ch.basic_publish(
            "",
            "busy",
            Default::default(),
            stream_engine::Message::new("x"),
        )
        .await
        .unwrap();
        let mut raw = Raw::connect(&server).await;
        raw.handshake(131_072, 2047, 0).await;
        let number = 3 + round;
        raw.open_channel(number).await;
        raw.method(
            number,
            AMQPClass::Basic(basic::AMQPMethod::Get(basic::Get {
                queue: "busy".into(),
                no_ack: false,
            })),
        )
        .await;
        // Frames on the channel all along, from before the timeout to well after it.
        let mut burst = Vec::new();
        for _ in 0..4000 {
            let frame = AMQPFrame::Method(
                number,
                AMQPClass::Basic(basic::AMQPMethod::Qos(basic::Qos {
                    prefetch_count: 1,
                    global: false,
                })),
            );
            burst.extend(encode(frame));
        }
        raw.send_bytes(&burst).await;
        let close = loop {
            match raw.next().await.expect("the server answers") {
                AMQPFrame::Method(n, AMQPClass::Channel(channel::AMQPMethod::Close(close)))
                    if n == number =>
                {
                    break close;
                }
                _ => {}
            }
        };
        assert_eq!(
            (close.reply_code, &close.reply_text.as_str()[..31]),
            (406, "PRECONDITION_FAILED - delivery "),
            "round {round}: {close:?}"
        );
    }
    server.shutdown().await;
}

fn encode(frame: AMQPFrame) -> Vec<u8> {
    use amq_protocol::frame::{WriteContext, gen_frame};
    let ctx = gen_frame(&frame)(WriteContext::from(Vec::new())).unwrap();
    ctx.into_inner().0
}
