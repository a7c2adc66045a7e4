//! Publishing: mandatory returns, confirms, transactions, memory and disk back-pressure.

mod common;

use std::time::Duration;

use common::*;
use stream_engine::*;

#[tokio::test]
async fn mandatory_unroutable_messages_are_returned_then_acked() {
    let (_b, _c, ch) = open();
    let mut events = ch.events().unwrap();
    ch.confirm_select().unwrap();
    let out = ch
        .basic_publish(
            "",
            "nowhere",
            PublishOptions { mandatory: true },
            msg("lost?"),
        )
        .await
        .unwrap();
    assert_eq!(out.status, PublishStatus::Unroutable);
    assert!(out.is_ack());
    match events.try_recv().unwrap() {
        ChannelEvent::Return {
            reply_code,
            reply_text,
            body,
        } => {
            assert_eq!((reply_code, reply_text.as_str()), (312, "NO_ROUTE"));
            assert_eq!(&**body.routing_key(), "nowhere");
            assert_eq!(&body.message.payload[..], b"lost?");
        }
        other => panic!("unexpected {other:?}"),
    }
    // Without mandatory nothing is returned.
    publish(&ch, "", "nowhere", "dropped").await;
    assert!(events.try_recv().is_err());
}

#[tokio::test]
async fn confirm_sequence_numbers_are_per_channel() {
    let (_b, conn, ch) = open();
    declare(&ch, "q");
    let other = conn.open_channel().unwrap();
    ch.confirm_select().unwrap();
    other.confirm_select().unwrap();
    let seqs: Vec<Option<u64>> = [
        publish(&ch, "", "q", "a").await,
        publish(&ch, "", "q", "b").await,
        publish(&other, "", "q", "c").await,
    ]
    .iter()
    .map(|o| o.seq)
    .collect();
    assert_eq!(seqs, [Some(1), Some(2), Some(1)]);
    let plain = conn.open_channel().unwrap();
    assert_eq!(publish(&plain, "", "q", "d").await.seq, None);
}

#[tokio::test]
async fn a_fanout_publish_is_confirmed_once_enqueued_everywhere() {
    let (_b, _c, ch) = open();
    ch.exchange_declare(
        "f",
        ExchangeKind::Fanout,
        ExchangeOptions::default(),
        FieldTable::new(),
    )
    .unwrap();
    for q in ["a", "b", "c"] {
        declare(&ch, q);
        ch.queue_bind(q, "f", "", FieldTable::new()).unwrap();
    }
    ch.confirm_select().unwrap();
    let out = publish(&ch, "f", "", "x").await;
    assert_eq!(out.status, PublishStatus::Routed(3));
    for q in ["a", "b", "c"] {
        assert_eq!(drain(&ch, q), ["x"]);
    }
}

#[tokio::test]
async fn transactions_apply_publishes_and_acks_together() {
    let (_b, conn, ch) = open();
    declare(&ch, "in");
    declare(&ch, "out");
    publish(&ch, "", "in", "work").await;
    let tx = conn.open_channel().unwrap();
    tx.tx_select().unwrap();
    let got = tx.basic_get("in", false).unwrap().unwrap();
    tx.basic_ack(got.delivery.delivery_tag, false).unwrap();
    let out = publish(&tx, "", "out", "result").await;
    assert_eq!(out.status, PublishStatus::Buffered);
    assert_eq!(
        ch.queue_declare(
            "out",
            QueueOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::new()
        )
        .unwrap()
        .message_count,
        0
    );

    tx.tx_rollback().unwrap();
    assert!(
        drain(&ch, "out").is_empty(),
        "rolled back: nothing published"
    );
    // The ack was rolled back too: the delivery is still unacked, so ack it for real.
    tx.basic_ack(got.delivery.delivery_tag, false).unwrap();
    publish(&tx, "", "out", "result").await;
    tx.tx_commit().await.unwrap();
    assert_eq!(drain(&ch, "out"), ["result"]);
    assert!(drain(&ch, "in").is_empty());
}

#[tokio::test]
async fn a_rolled_back_ack_leaves_the_message_to_be_redelivered_on_close() {
    let (_b, conn, ch) = open();
    declare(&ch, "in");
    publish(&ch, "", "in", "work").await;
    let tx = conn.open_channel().unwrap();
    tx.tx_select().unwrap();
    let got = tx.basic_get("in", false).unwrap().unwrap();
    tx.basic_ack(got.delivery.delivery_tag, false).unwrap();
    tx.tx_rollback().unwrap();
    tx.close();
    assert_eq!(drain(&ch, "in"), ["work"]);
}

#[tokio::test]
async fn confirm_and_tx_modes_exclude_each_other() {
    let (_b, conn, ch) = open();
    ch.confirm_select().unwrap();
    assert_eq!(
        ch.tx_select().unwrap_err().code,
        ReplyCode::PreconditionFailed
    );
    let ch = conn.open_channel().unwrap();
    assert_eq!(
        ch.tx_commit().await.unwrap_err().text,
        "channel is not transactional"
    );
}

#[tokio::test(start_paused = true)]
async fn the_memory_watermark_blocks_publishers_until_consumers_catch_up() {
    let broker: Broker = Broker::with_config(BrokerConfig {
        // A 600-byte message counts about 1 060 bytes (payload, record, queue entry).
        memory_high_watermark: Some(1500),
        ..Default::default()
    });
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    let mut events = ch.events().unwrap();
    declare(&ch, "q");
    let big = "x".repeat(600);
    publish(&ch, "", "q", &big).await;
    publish(&ch, "", "q", &big).await; // crosses the watermark
    assert!(broker.is_blocked());
    assert!(matches!(
        events.try_recv(),
        Ok(ChannelEvent::Blocked { .. })
    ));

    match ch.try_basic_publish("", "q", PublishOptions::default(), msg("handed back")) {
        TryPublish::Blocked(m) => assert_eq!(&m.payload[..], b"handed back"),
        other => panic!("published while blocked: {other:?}"),
    }
    let blocked = ch.basic_publish("", "q", PublishOptions::default(), msg("waits"));
    tokio::pin!(blocked);
    assert!(
        tokio::time::timeout(Duration::from_millis(50), &mut blocked)
            .await
            .is_err(),
        "the publisher waits while blocked"
    );
    let drainer = conn.open_channel().unwrap();
    assert_eq!(drainer.queue_purge("q").unwrap(), 2);
    assert!(!broker.is_blocked());
    assert!(matches!(events.try_recv(), Ok(ChannelEvent::Unblocked)));
    let out = tokio::time::timeout(Duration::from_secs(5), blocked)
        .await
        .expect("unblocked")
        .unwrap();
    assert_eq!(out.status, PublishStatus::Routed(1));
}

#[tokio::test(start_paused = true)]
async fn the_disk_alarm_blocks_publishers_but_not_consumers_until_it_clears() {
    let broker: Broker = Broker::with_config(BrokerConfig {
        memory_high_watermark: Some(1500),
        ..Default::default()
    });
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    let mut events = ch.events().unwrap();
    declare(&ch, "q");
    publish(&ch, "", "q", "before").await;

    broker.set_disk_alarm(true);
    assert!(broker.is_blocked());
    match events.try_recv() {
        Ok(ChannelEvent::Blocked { reason }) => assert_eq!(reason, "low on disk"),
        other => panic!("no Blocked event: {other:?}"),
    }
    let late = conn.open_channel().unwrap();
    match late.events().unwrap().try_recv() {
        Ok(ChannelEvent::Blocked { reason }) => assert_eq!(reason, "low on disk"),
        other => panic!("a channel opened under the alarm is not told: {other:?}"),
    }
    match ch.try_basic_publish("", "q", PublishOptions::default(), msg("handed back")) {
        TryPublish::Blocked(m) => assert_eq!(&m.payload[..], b"handed back"),
        other => panic!("published under the disk alarm: {other:?}"),
    }
    // Consumers go on.
    let mut consumer = ch.basic_consume("q", ConsumeOptions::default()).unwrap();
    let delivery = tokio::time::timeout(Duration::from_secs(5), consumer.recv())
        .await
        .expect("a delivery under the disk alarm")
        .unwrap();
    assert_eq!(&delivery.message().payload[..], b"before");
    ch.basic_ack(delivery.delivery_tag, false).unwrap();

    // Both alarms: both reasons, and clearing one leaves publishers blocked.
    let big = "x".repeat(600);
    let drainer = conn.open_channel().unwrap();
    declare(&drainer, "held");
    broker.set_disk_alarm(false);
    assert!(matches!(events.try_recv(), Ok(ChannelEvent::Unblocked)));
    publish(&ch, "", "held", &big).await;
    publish(&ch, "", "held", &big).await; // crosses the memory watermark
    assert_eq!(broker.blocked_reason().as_deref(), Some("low on memory"));
    broker.set_disk_alarm(true);
    assert_eq!(
        broker.blocked_reason().as_deref(),
        Some("low on memory & low on disk")
    );
    assert_eq!(drainer.queue_purge("held").unwrap(), 2);
    assert!(broker.is_blocked(), "the disk alarm still blocks");
    assert_eq!(broker.blocked_reason().as_deref(), Some("low on disk"));

    let waiting = ch.basic_publish("", "q", PublishOptions::default(), msg("waits"));
    tokio::pin!(waiting);
    assert!(
        tokio::time::timeout(Duration::from_millis(50), &mut waiting)
            .await
            .is_err(),
        "the publisher waits under the disk alarm"
    );
    broker.set_disk_alarm(false);
    assert!(!broker.is_blocked());
    let out = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("released when the alarm clears")
        .unwrap();
    assert_eq!(out.status, PublishStatus::Routed(1));
}

#[tokio::test(start_paused = true)]
async fn blocked_publishers_resume_once_consumers_drain_below_the_low_watermark() {
    const WATERMARK: usize = 10_000;
    let broker: Broker = Broker::with_config(BrokerConfig {
        memory_high_watermark: Some(WATERMARK),
        memory_resume_ratio: 0.9,
        ..Default::default()
    });
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    let mut events = ch.events().unwrap();
    declare(&ch, "q");
    let big = "x".repeat(600);
    let mut queued = 0;
    while !broker.is_blocked() {
        publish(&ch, "", "q", &big).await;
        queued += 1;
        assert!(queued < 100, "never blocked");
    }
    assert!(matches!(
        events.try_recv(),
        Ok(ChannelEvent::Blocked { .. })
    ));
    let blocked = ch.basic_publish("", "q", PublishOptions::default(), msg("waits"));
    tokio::pin!(blocked);
    assert!(
        tokio::time::timeout(Duration::from_millis(50), &mut blocked)
            .await
            .is_err(),
        "the publisher waits while blocked"
    );

    let consumer_ch = conn.open_channel().unwrap();
    consumer_ch.basic_qos(1, false).unwrap();
    let mut consumer = consumer_ch
        .basic_consume("q", ConsumeOptions::default())
        .unwrap();
    let low = WATERMARK as f64 * 0.9;
    let mut between = false;
    while broker.is_blocked() {
        let d = next(&mut consumer).await;
        consumer_ch.basic_ack(d.delivery_tag, false).unwrap();
        let used = broker.memory_used();
        if broker.is_blocked() {
            assert!(
                used as f64 > low,
                "still blocked at {used} B, below the low watermark"
            );
            between |= used <= WATERMARK;
        } else {
            assert!(
                used as f64 <= low,
                "unblocked at {used} B, above the low watermark"
            );
        }
    }
    assert!(
        between,
        "publishers stayed blocked between the low and the high watermark"
    );
    assert!(matches!(events.try_recv(), Ok(ChannelEvent::Unblocked)));
    let out = tokio::time::timeout(Duration::from_secs(5), blocked)
        .await
        .expect("the blocked publish completes once unblocked")
        .unwrap();
    assert_eq!(out.status, PublishStatus::Routed(1));
}

#[tokio::test(start_paused = true)]
async fn deliveries_a_no_ack_consumer_has_not_taken_count_against_the_watermark() {
    let broker: Broker = Broker::with_config(BrokerConfig {
        memory_high_watermark: Some(100_000),
        ..Default::default()
    });
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    declare(&ch, "q");
    let consumer_ch = conn.open_channel().unwrap();
    let mut slow = consumer_ch
        .basic_consume(
            "q",
            ConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
        )
        .unwrap();
    let big = "x".repeat(600);
    let fill = |ch: &Channel| {
        let mut sent = 0;
        while !broker.is_blocked() {
            match ch.try_basic_publish("", "q", PublishOptions::default(), msg(&big)) {
                TryPublish::Done(out) => out.unwrap(),
                other => {
                    unreachable!("not blocked, and the in-memory store confirms at once: {other:?}")
                }
            };
            sent += 1;
            assert!(sent < 1000, "never blocked");
        }
        sent
    };
    // Moves what is queued into the no-ack consumer's inbox (an empty inbox makes the
    // engine hand it everything ready); returns how many the handle took on the way.
    let into_inbox = |c: &mut Consumer| {
        let mut took = 0;
        while broker.queue_counts("q").unwrap().0 > 0 {
            took += usize::from(c.try_recv().is_some());
        }
        took
    };

    let sent = fill(&ch);
    let took = into_inbox(&mut slow);
    assert!(sent - took > 90, "most are in the inbox");
    assert!(
        broker.is_blocked(),
        "deliveries in the inbox still hold memory: {} B counted",
        broker.memory_used()
    );
    // Taking them releases the memory, and publishers resume.
    let mut taken = Vec::new();
    while taken.len() < sent - took {
        assert!(slow.recv_many(&mut taken, 100).await > 0);
    }
    assert!(!broker.is_blocked());
    assert_eq!(broker.memory_used(), 0);

    // What a dropped handle never took leaves the count too.
    fill(&ch);
    into_inbox(&mut slow);
    assert!(broker.is_blocked());
    drop(slow);
    assert_eq!(broker.memory_used(), 0);
    assert!(!broker.is_blocked());
}

#[tokio::test]
async fn a_payload_above_the_engines_max_size_is_refused_with_precondition_failed() {
    let (broker, _c, ch) = open();
    ch.queue_declare("big", QueueOptions::default(), FieldTable::new())
        .unwrap();
    // Zeroed pages are mapped lazily: this does not make the test process 2 GiB resident.
    let huge = Message::new(vec![0u8; MAX_PAYLOAD + 1]);
    let err = ch
        .basic_publish("", "big", PublishOptions::default(), huge)
        .await
        .unwrap_err();
    assert_eq!(err.code, ReplyCode::PreconditionFailed);
    assert!(err.text.contains("larger than max size"), "{}", err.text);
    assert_eq!(
        broker.queue_counts("big"),
        Some((0, 0)),
        "nothing was queued"
    );
}
