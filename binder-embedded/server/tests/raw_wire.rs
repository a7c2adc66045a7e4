//! Malformed and out-of-order input over a raw socket: each closes that one connection with
//! the right code, the server keeps serving others, nothing panics.

mod common;

use std::time::Duration;

use amq_protocol::frame::{AMQPContentHeader, AMQPFrame};
use amq_protocol::protocol::{AMQPClass, BasicProperties, basic, channel, connection, queue};
use amq_protocol::types::FieldTable;
use common::*;
use stream_broker::Server;
use stream_engine::Broker;
use tokio::io::AsyncReadExt;

#[tokio::test]
async fn a_bad_protocol_header_is_answered_with_ours_and_closed() {
    let server = server(config()).await;
    let mut raw = Raw::connect(&server).await;
    raw.send_bytes(b"GET / HTTP/1.1\r\n\r\n").await;
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), raw.socket.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, b"AMQP\x00\x00\x09\x01");
    // AMQP 0-10's header is another protocol too.
    let mut raw = Raw::connect(&server).await;
    raw.send_bytes(b"AMQP\x01\x01\x00\x0a").await;
    let mut got = Vec::new();
    raw.socket.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"AMQP\x00\x00\x09\x01");
    still_serving(&server).await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_garbage_frame_is_a_frame_error() {
    let server = server(config()).await;
    let mut raw = Raw::connect(&server).await;
    raw.handshake(131072, 2047, 0).await;
    raw.send_bytes(&[0x42; 32]).await;
    raw.expect_connection_close(501).await;
    still_serving(&server).await;
    server.shutdown().await;
}

#[tokio::test]
async fn an_oversized_frame_is_a_frame_error() {
    let server = server(config()).await;
    let mut raw = Raw::connect(&server).await;
    raw.handshake(4096, 2047, 0).await;
    raw.open_channel(1).await;
    // A body frame announcing 4097 octets: over frame_max 4096 even by RabbitMQ's lenient
    // count (it forgives clients that leave out the 8 octets of overhead).
    let mut frame = vec![3u8, 0, 1];
    frame.extend_from_slice(&4097u32.to_be_bytes());
    raw.send_bytes(&frame).await;
    let text = raw.expect_connection_close(501).await;
    assert!(text.starts_with("FRAME_ERROR - "), "{text}");
    still_serving(&server).await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_wrong_frame_end_octet_is_a_frame_error() {
    let server = server(config()).await;
    let mut raw = Raw::connect(&server).await;
    raw.handshake(131072, 2047, 0).await;
    raw.send_bytes(&[8, 0, 0, 0, 0, 0, 0, 0xAB]).await;
    raw.expect_connection_close(501).await;
    still_serving(&server).await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_method_on_a_channel_not_open_is_a_channel_error() {
    let server = server(config()).await;
    let mut raw = Raw::connect(&server).await;
    raw.handshake(131072, 2047, 0).await;
    raw.method(
        7,
        AMQPClass::Queue(queue::AMQPMethod::Declare(queue::Declare {
            queue: "q".into(),
            ..Default::default()
        })),
    )
    .await;
    raw.expect_connection_close(504).await;
    still_serving(&server).await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_content_header_without_a_publish_is_an_unexpected_frame() {
    let server = server(config()).await;
    let mut raw = Raw::connect(&server).await;
    raw.handshake(131072, 2047, 0).await;
    raw.open_channel(1).await;
    raw.send(AMQPFrame::Header(
        1,
        AMQPContentHeader {
            class_id: 60,
            body_size: 3,
            properties: BasicProperties::default(),
        },
    ))
    .await;
    raw.expect_connection_close(505).await;
    still_serving(&server).await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_method_inside_content_is_an_unexpected_frame() {
    let server = server(config()).await;
    let mut raw = Raw::connect(&server).await;
    raw.handshake(131072, 2047, 0).await;
    raw.open_channel(1).await;
    raw.method(
        1,
        AMQPClass::Basic(basic::AMQPMethod::Publish(basic::Publish {
            exchange: "".into(),
            routing_key: "q".into(),
            mandatory: false,
            immediate: false,
        })),
    )
    .await;
    raw.method(
        1,
        AMQPClass::Channel(channel::AMQPMethod::Close(channel::Close {
            reply_code: 200,
            reply_text: "bye".into(),
            class_id: 0,
            method_id: 0,
        })),
    )
    .await;
    raw.expect_connection_close(505).await;
    still_serving(&server).await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_channel_above_channel_max_is_not_allowed() {
    let server = server(config()).await;
    let mut raw = Raw::connect(&server).await;
    raw.handshake(131072, 2, 0).await;
    raw.open_channel(1).await;
    raw.open_channel(2).await;
    raw.method(
        3,
        AMQPClass::Channel(channel::AMQPMethod::Open(channel::Open {})),
    )
    .await;
    let text = raw.expect_connection_close(530).await;
    assert_eq!(
        text,
        "NOT_ALLOWED - number of channels opened (2) has reached the negotiated channel_max (2)"
    );
    still_serving(&server).await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_second_channel_open_is_a_channel_error() {
    let server = server(config()).await;
    let mut raw = Raw::connect(&server).await;
    raw.handshake(131072, 2047, 0).await;
    raw.open_channel(1).await;
    raw.method(
        1,
        AMQPClass::Channel(channel::AMQPMethod::Open(channel::Open {})),
    )
    .await;
    raw.expect_connection_close(504).await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_body_larger_than_its_header_is_an_unexpected_frame() {
    let server = server(config()).await;
    let mut raw = Raw::connect(&server).await;
    raw.handshake(131072, 2047, 0).await;
    raw.open_channel(1).await;
    raw.method(
        1,
        AMQPClass::Basic(basic::AMQPMethod::Publish(basic::Publish {
            exchange: "".into(),
            routing_key: "q".into(),
            mandatory: false,
            immediate: false,
        })),
    )
    .await;
    raw.send(AMQPFrame::Header(
        1,
        AMQPContentHeader {
            class_id: 60,
            body_size: 2,
            properties: BasicProperties::default(),
        },
    ))
    .await;
    raw.send(AMQPFrame::Body(1, b"toolong".to_vec())).await;
    raw.expect_connection_close(505).await;
    server.shutdown().await;
}

#[tokio::test]
async fn tune_ok_above_the_servers_frame_max_is_refused() {
    let server = server(config()).await;
    let mut raw = Raw::connect(&server).await;
    raw.send_bytes(b"AMQP\x00\x00\x09\x01").await;
    raw.next_method().await.unwrap();
    raw.method(
        0,
        AMQPClass::Connection(connection::AMQPMethod::StartOk(connection::StartOk {
            client_properties: FieldTable::default(),
            mechanism: "PLAIN".into(),
            response: "\0guest\0guest".into(),
            locale: "en_US".into(),
        })),
    )
    .await;
    raw.next_method().await.unwrap();
    raw.method(
        0,
        AMQPClass::Connection(connection::AMQPMethod::TuneOk(connection::TuneOk {
            channel_max: 10,
            frame_max: 1 << 20,
            heartbeat: 0,
        })),
    )
    .await;
    let text = raw.expect_connection_close(530).await;
    assert!(text.contains("frame_max"), "{text}");
    server.shutdown().await;
}

#[tokio::test]
async fn a_client_that_never_finishes_the_handshake_is_dropped() {
    let mut config = config();
    config.limits.handshake_timeout_ms = 200;
    let server = server(config).await;
    let mut raw = Raw::connect(&server).await;
    raw.send_bytes(b"AMQP\x00\x00\x09\x01").await;
    raw.next_method().await.unwrap();
    let started = std::time::Instant::now();
    assert!(raw.next().await.is_none());
    assert!(started.elapsed() < Duration::from_secs(5));
    still_serving(&server).await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_client_without_heartbeats_is_dropped() {
    let mut config = config();
    config.limits.heartbeat = 1;
    let server = server(config).await;
    let mut raw = Raw::connect(&server).await;
    raw.handshake(131072, 2047, 1).await;
    // We never send a heartbeat; the server sends its own and closes after two intervals.
    let started = std::time::Instant::now();
    let mut heartbeats = 0;
    while let Some(frame) = raw.next().await {
        assert_eq!(frame, AMQPFrame::Heartbeat);
        heartbeats += 1;
    }
    assert!(heartbeats >= 1);
    assert!(started.elapsed() >= Duration::from_secs(2));
    assert!(started.elapsed() < Duration::from_secs(10));
    server.shutdown().await;
}

#[tokio::test]
async fn shutdown_closes_connections_with_320() {
    let server = server(config()).await;
    let mut raw = Raw::connect(&server).await;
    raw.handshake(131072, 2047, 0).await;
    raw.open_channel(1).await;
    let addr = server.local_addr();
    let stopping = tokio::spawn(server.shutdown());
    let text = raw.expect_connection_close(320).await;
    assert!(text.starts_with("CONNECTION_FORCED - "), "{text}");
    tokio::time::timeout(Duration::from_secs(5), stopping)
        .await
        .unwrap()
        .unwrap();
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn update_secret_is_accepted_as_rabbitmq_accepts_it() {
    // RabbitMQ's internal user database has nothing to renew: it answers update-secret-ok
    // and the connection goes on (pika's and the Java client's tests expect this).
    let server = server(config()).await;
    let mut raw = Raw::connect(&server).await;
    raw.handshake(131072, 2047, 0).await;
    raw.method(
        0,
        AMQPClass::Connection(connection::AMQPMethod::UpdateSecret(
            connection::UpdateSecret {
                new_secret: "x".into(),
                reason: "rotate".into(),
            },
        )),
    )
    .await;
    match raw.next_method().await {
        Some((0, AMQPClass::Connection(connection::AMQPMethod::UpdateSecretOk(_)))) => {}
        other => panic!("expected update-secret-ok, got {other:?}"),
    }
    raw.open_channel(1).await;
    server.shutdown().await;
}

#[tokio::test]
async fn closes_crossing_on_a_channel_leave_the_connection_usable() {
    // The server closes channel 1 (404) while the client closes it too: the server answers
    // the client's close, then takes the client's close-ok for its own close without
    // calling it a method on a channel never opened (amqp091-go's issue 43).
    let server = server(config()).await;
    let mut raw = Raw::connect(&server).await;
    raw.handshake(131072, 2047, 0).await;
    raw.open_channel(1).await;
    raw.method(
        1,
        AMQPClass::Queue(amq_protocol::protocol::queue::AMQPMethod::Declare(
            amq_protocol::protocol::queue::Declare {
                queue: "no-such-queue".into(),
                passive: true,
                ..Default::default()
            },
        )),
    )
    .await;
    raw.method(
        1,
        AMQPClass::Channel(channel::AMQPMethod::Close(channel::Close {
            reply_code: 200,
            reply_text: "bye".into(),
            class_id: 0,
            method_id: 0,
        })),
    )
    .await;
    let mut got_close = false;
    let mut got_close_ok = false;
    while !(got_close && got_close_ok) {
        match raw.next_method().await {
            Some((1, AMQPClass::Channel(channel::AMQPMethod::Close(c)))) => {
                assert_eq!(c.reply_code, 404);
                got_close = true;
            }
            Some((1, AMQPClass::Channel(channel::AMQPMethod::CloseOk(_)))) => got_close_ok = true,
            other => panic!("expected the server's close and close-ok, got {other:?}"),
        }
    }
    // The close-ok the client owes for the server's close.
    raw.method(
        1,
        AMQPClass::Channel(channel::AMQPMethod::CloseOk(channel::CloseOk {})),
    )
    .await;
    // The connection is still fine: channel 2 opens (a 504 would close it instead).
    raw.open_channel(2).await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_closed_connection_keeps_its_socket_for_a_second_close() {
    // Concurrent closers (amqp091-go's TestConcurrentClose) send connection.close twice:
    // each gets close-ok, and the socket is not dropped under the second.
    let server = server(config()).await;
    let mut raw = Raw::connect(&server).await;
    raw.handshake(131072, 2047, 0).await;
    let close = || {
        AMQPClass::Connection(connection::AMQPMethod::Close(connection::Close {
            reply_code: 200,
            reply_text: "bye".into(),
            class_id: 0,
            method_id: 0,
        }))
    };
    raw.method(0, close()).await;
    raw.method(0, close()).await;
    for n in 1..=2 {
        match raw.next_method().await {
            Some((0, AMQPClass::Connection(connection::AMQPMethod::CloseOk(_)))) => {}
            other => panic!("close {n}: expected close-ok, got {other:?}"),
        }
    }
    drop(raw);
    still_serving(&server).await;
    server.shutdown().await;
}

#[tokio::test]
async fn exclusive_queues_are_gone_when_the_client_has_its_close_ok() {
    // The socket stays open after close-ok (it lingers for the client to close it); what the
    // connection owned must not linger with it.
    let broker = Broker::new();
    let server = server_with(config(), broker.clone()).await;
    let mut raw = Raw::connect(&server).await;
    raw.handshake(131072, 2047, 0).await;
    raw.open_channel(1).await;
    raw.method(
        1,
        AMQPClass::Queue(queue::AMQPMethod::Declare(queue::Declare {
            queue: "raw-exclusive".into(),
            exclusive: true,
            ..Default::default()
        })),
    )
    .await;
    match raw.next_method().await {
        Some((1, AMQPClass::Queue(queue::AMQPMethod::DeclareOk(_)))) => {}
        other => panic!("expected declare-ok, got {other:?}"),
    }
    assert!(broker.queue_counts("raw-exclusive").is_some());
    raw.method(
        0,
        AMQPClass::Connection(connection::AMQPMethod::Close(connection::Close {
            reply_code: 200,
            reply_text: "bye".into(),
            class_id: 0,
            method_id: 0,
        })),
    )
    .await;
    match raw.next_method().await {
        Some((0, AMQPClass::Connection(connection::AMQPMethod::CloseOk(_)))) => {}
        other => panic!("expected close-ok, got {other:?}"),
    }
    assert_eq!(
        broker.queue_counts("raw-exclusive"),
        None,
        "the exclusive queue outlived its connection's close-ok"
    );
    drop(raw);
    server.shutdown().await;
}

/// A consumer whose socket is not read does not pull the queue into the server's memory:
/// the messages stay in the engine.
#[tokio::test]
async fn a_consumer_that_does_not_read_leaves_messages_in_the_engine() {
    let broker: Broker = Broker::new();
    let server = server_with(config(), broker.clone()).await;
    let mut raw = Raw::connect(&server).await;
    raw.handshake(131072, 2047, 0).await;
    raw.open_channel(1).await;
    raw.method(
        1,
        AMQPClass::Queue(queue::AMQPMethod::Declare(queue::Declare {
            queue: "flood".into(),
            ..Default::default()
        })),
    )
    .await;
    raw.next_method().await.unwrap();
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    let payload = bytes::Bytes::from(vec![0u8; 16 * 1024]);
    let total = 4000u32;
    for _ in 0..total {
        ch.basic_publish(
            "",
            "flood",
            Default::default(),
            stream_engine::Message::new(payload.clone()),
        )
        .await
        .unwrap();
    }
    let queued = broker.memory_used();
    // A no-ack consumer: the engine hands it everything, and its deliveries count against
    // the broker's memory until the server's pump takes them from the consumer's inbox.
    raw.method(
        1,
        AMQPClass::Basic(basic::AMQPMethod::Consume(basic::Consume {
            queue: "flood".into(),
            consumer_tag: "slow".into(),
            no_ack: true,
            ..Default::default()
        })),
    )
    .await;
    // The pump fills the bounded output and the socket's buffers, then stops: wait until
    // what the engine holds no longer changes (a server that kept pulling would reach 0).
    let mut held_b = broker.memory_used();
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = broker.memory_used();
        if now == held_b {
            break;
        }
        held_b = now;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        broker.memory_used(),
        held_b,
        "the server keeps pulling for a stalled socket"
    );
    // 64 MiB of 16 KiB messages; what left the engine is a bounded buffer's worth.
    assert!(
        held_b > queued / 2,
        "{held_b} of {queued} bytes still in the engine"
    );
    // Reading resumes the flow: every message arrives.
    let mut delivered = 0;
    while delivered < total {
        match raw.next().await.expect("connection closed") {
            AMQPFrame::Method(1, AMQPClass::Basic(basic::AMQPMethod::Deliver(_))) => delivered += 1,
            AMQPFrame::Method(1, AMQPClass::Basic(basic::AMQPMethod::ConsumeOk(_))) => {}
            AMQPFrame::Header(..) | AMQPFrame::Body(..) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(broker.memory_used(), 0);
    server.shutdown().await;
}

/// A connection that announces the `connection.blocked` capability, with channel 1 open and
/// the queue `fill` declared.
async fn blocked_aware(server: &Server) -> Raw {
    let mut raw = Raw::connect(server).await;
    // Announce connection.blocked.
    raw.send_bytes(b"AMQP\x00\x00\x09\x01").await;
    raw.next_method().await.unwrap();
    let mut caps = FieldTable::default();
    caps.insert(
        "connection.blocked".into(),
        amq_protocol::types::AMQPValue::Boolean(true),
    );
    let mut props = FieldTable::default();
    props.insert(
        "capabilities".into(),
        amq_protocol::types::AMQPValue::FieldTable(caps),
    );
    raw.method(
        0,
        AMQPClass::Connection(connection::AMQPMethod::StartOk(connection::StartOk {
            client_properties: props,
            mechanism: "PLAIN".into(),
            response: "\0guest\0guest".into(),
            locale: "en_US".into(),
        })),
    )
    .await;
    raw.next_method().await.unwrap();
    raw.method(
        0,
        AMQPClass::Connection(connection::AMQPMethod::TuneOk(connection::TuneOk {
            channel_max: 10,
            frame_max: 131072,
            heartbeat: 0,
        })),
    )
    .await;
    raw.method(
        0,
        AMQPClass::Connection(connection::AMQPMethod::Open(connection::Open {
            virtual_host: "/".into(),
        })),
    )
    .await;
    raw.next_method().await.unwrap();
    raw.open_channel(1).await;
    raw.method(
        1,
        AMQPClass::Queue(queue::AMQPMethod::Declare(queue::Declare {
            queue: "fill".into(),
            ..Default::default()
        })),
    )
    .await;
    raw.next_method().await.unwrap();
    raw
}

/// A publish of `size` bytes to the queue `fill` on channel 1.
async fn publish_fill(raw: &mut Raw, size: usize) {
    let frames = vec![
        AMQPFrame::Method(
            1,
            AMQPClass::Basic(basic::AMQPMethod::Publish(basic::Publish {
                exchange: "".into(),
                routing_key: "fill".into(),
                mandatory: false,
                immediate: false,
            })),
        ),
        AMQPFrame::Header(
            1,
            AMQPContentHeader {
                class_id: 60,
                body_size: size as u64,
                properties: BasicProperties::default(),
            },
        ),
        AMQPFrame::Body(1, vec![1u8; size]),
    ];
    for f in frames {
        raw.send(f).await;
    }
}

#[tokio::test]
async fn the_memory_alarm_blocks_a_publishing_connection() {
    let broker: Broker = Broker::new();
    broker.set_memory_high_watermark(Some(64 * 1024));
    let server = server_with(config(), broker.clone()).await;
    let mut raw = blocked_aware(&server).await;
    for _ in 0..10 {
        publish_fill(&mut raw, 10_000).await;
    }
    let (ch, m) = raw.next_method().await.unwrap();
    assert_eq!(ch, 0);
    match m {
        AMQPClass::Connection(connection::AMQPMethod::Blocked(b)) => {
            assert_eq!(b.reason.as_str(), "low on memory")
        }
        other => panic!("{other:?}"),
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (held, _) = broker.queue_counts("fill").unwrap();
    assert!(held < 10, "every publish went through while blocked");
    // Draining the queue lifts the alarm: the held publishes go through and the client hears.
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    ch.queue_purge("fill").unwrap();
    let (ch0, m) = raw.next_method().await.unwrap();
    assert_eq!(ch0, 0);
    assert!(
        matches!(
            m,
            AMQPClass::Connection(connection::AMQPMethod::Unblocked(_))
        ),
        "{m:?}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn the_disk_alarm_blocks_a_publishing_connection_until_it_clears() {
    let broker: Broker = Broker::new();
    let server = server_with(config(), broker.clone()).await;
    let mut raw = blocked_aware(&server).await;
    broker.set_disk_alarm(true);
    publish_fill(&mut raw, 100).await;
    let (ch, m) = raw.next_method().await.unwrap();
    assert_eq!(ch, 0);
    match m {
        AMQPClass::Connection(connection::AMQPMethod::Blocked(b)) => {
            assert_eq!(b.reason.as_str(), "low on disk")
        }
        other => panic!("{other:?}"),
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        broker.queue_counts("fill"),
        Some((0, 0)),
        "held while blocked"
    );
    broker.set_disk_alarm(false);
    let (ch0, m) = raw.next_method().await.unwrap();
    assert_eq!(ch0, 0);
    assert!(
        matches!(
            m,
            AMQPClass::Connection(connection::AMQPMethod::Unblocked(_))
        ),
        "{m:?}"
    );
    for _ in 0..200 {
        if broker.queue_counts("fill") == Some((1, 0)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        broker.queue_counts("fill"),
        Some((1, 0)),
        "published once cleared"
    );
    server.shutdown().await;
}

/// A client that did not announce `consumer_cancel_notify` is not sent `basic.cancel` when
/// its consumer's queue is deleted (it would not know the method).
#[tokio::test]
async fn cancel_notifications_go_only_to_clients_that_announce_them() {
    let server = server(config()).await;
    let mut raw = Raw::connect(&server).await;
    raw.handshake(131072, 2047, 0).await;
    raw.open_channel(1).await;
    raw.method(
        1,
        AMQPClass::Queue(queue::AMQPMethod::Declare(queue::Declare {
            queue: "gone".into(),
            ..Default::default()
        })),
    )
    .await;
    raw.next_method().await.unwrap();
    raw.method(
        1,
        AMQPClass::Basic(basic::AMQPMethod::Consume(basic::Consume {
            queue: "gone".into(),
            consumer_tag: "t".into(),
            ..Default::default()
        })),
    )
    .await;
    raw.next_method().await.unwrap();
    raw.method(
        1,
        AMQPClass::Queue(queue::AMQPMethod::Delete(queue::Delete {
            queue: "gone".into(),
            ..Default::default()
        })),
    )
    .await;
    let (_, m) = raw.next_method().await.unwrap();
    assert!(
        matches!(m, AMQPClass::Queue(queue::AMQPMethod::DeleteOk(_))),
        "{m:?}"
    );
    // The next thing on the channel is the reply to a later method, not a basic.cancel.
    raw.method(
        1,
        AMQPClass::Basic(basic::AMQPMethod::Qos(basic::Qos {
            prefetch_count: 1,
            global: false,
        })),
    )
    .await;
    let (_, m) = raw.next_method().await.unwrap();
    assert!(
        matches!(m, AMQPClass::Basic(basic::AMQPMethod::QosOk(_))),
        "{m:?}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_channel_error_carries_rabbitmqs_text_and_the_failing_method() {
    let server = server(config()).await;
    let mut raw = Raw::connect(&server).await;
    raw.handshake(131072, 2047, 0).await;
    raw.open_channel(1).await;
    raw.method(
        1,
        AMQPClass::Queue(queue::AMQPMethod::Declare(queue::Declare {
            queue: "missing".into(),
            passive: true,
            ..Default::default()
        })),
    )
    .await;
    let (ch, m) = raw.next_method().await.unwrap();
    let AMQPClass::Channel(channel::AMQPMethod::Close(close)) = m else {
        panic!("expected channel.close, got {m:?}");
    };
    assert_eq!(ch, 1);
    assert_eq!(close.reply_code, 404);
    assert_eq!(
        close.reply_text.as_str(),
        "NOT_FOUND - no queue 'missing' in vhost '/'"
    );
    assert_eq!((close.class_id, close.method_id), (50, 10));
    // Frames before close-ok are dropped; close-ok frees the number for a new channel.
    raw.method(
        1,
        AMQPClass::Queue(queue::AMQPMethod::Declare(queue::Declare {
            queue: "ignored".into(),
            ..Default::default()
        })),
    )
    .await;
    raw.method(
        1,
        AMQPClass::Channel(channel::AMQPMethod::CloseOk(channel::CloseOk {})),
    )
    .await;
    raw.open_channel(1).await;
    server.shutdown().await;
}

#[tokio::test]
async fn connection_level_engine_errors_close_the_connection() {
    let server = server(config()).await;
    let mut raw = Raw::connect(&server).await;
    raw.handshake(131072, 2047, 0).await;
    raw.open_channel(1).await;
    raw.method(
        1,
        AMQPClass::Queue(queue::AMQPMethod::Declare(queue::Declare {
            queue: "twice".into(),
            ..Default::default()
        })),
    )
    .await;
    raw.next_method().await.unwrap();
    let consume = AMQPClass::Basic(basic::AMQPMethod::Consume(basic::Consume {
        queue: "twice".into(),
        consumer_tag: "same".into(),
        ..Default::default()
    }));
    raw.method(1, consume.clone()).await;
    raw.next_method().await.unwrap();
    raw.method(1, consume).await;
    let text = raw.expect_connection_close(530).await;
    assert_eq!(text, "NOT_ALLOWED - attempt to reuse consumer tag 'same'");
    still_serving(&server).await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_prefetch_size_is_not_implemented() {
    let server = server(config()).await;
    let mut raw = Raw::connect(&server).await;
    raw.handshake(131072, 2047, 0).await;
    raw.open_channel(1).await;
    // basic.qos with prefetch-size 1 (amq-protocol cannot encode it: by hand).
    let mut payload = vec![0u8, 60, 0, 10];
    payload.extend_from_slice(&1u32.to_be_bytes());
    payload.extend_from_slice(&[0, 0, 0]);
    let mut frame = vec![1u8, 0, 1];
    frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    frame.extend_from_slice(&payload);
    frame.push(0xCE);
    raw.send_bytes(&frame).await;
    let text = raw.expect_connection_close(540).await;
    assert_eq!(text, "NOT_IMPLEMENTED - prefetch_size!=0 (1)");
    server.shutdown().await;
}
