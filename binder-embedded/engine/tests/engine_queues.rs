//! Queue semantics: durability flags, exclusive and auto-delete queues, `x-expires`,
//! server-named queues, purge, delete conditions, counts.

mod common;

use std::time::Duration;

use common::*;
use stream_engine::*;

#[tokio::test]
async fn redeclaration_must_match_flags_and_arguments() {
    let (_b, conn, ch) = open();
    let durable = QueueOptions {
        durable: true,
        ..Default::default()
    };
    let ttl = args(&[("x-message-ttl", FieldValue::I32(1000))]);
    ch.queue_declare("q", durable, ttl.clone()).unwrap();
    // Same value with another integer width is equivalent.
    ch.queue_declare(
        "q",
        durable,
        args(&[("x-message-ttl", FieldValue::I64(1000))]),
    )
    .unwrap();
    let err = ch
        .queue_declare("q", QueueOptions::default(), ttl.clone())
        .unwrap_err();
    assert_eq!(err.code, ReplyCode::PreconditionFailed);
    assert!(err.text.contains("inequivalent arg 'durable'"), "{err}");

    let ch = conn.open_channel().unwrap();
    let err = ch
        .queue_declare("q", durable, FieldTable::new())
        .unwrap_err();
    assert!(
        err.text.contains("inequivalent arg 'x-message-ttl' for queue 'q' in vhost '/': received none but current is the value '1000' of type 'i32'"),
        "{err}"
    );
}

#[tokio::test]
async fn invalid_arguments_are_refused() {
    let (_b, conn, _ch) = open();
    let cases = [
        ("x-message-ttl", FieldValue::I32(-1)),
        ("x-expires", FieldValue::I32(0)),
        ("x-max-priority", FieldValue::I32(300)),
        ("x-overflow", FieldValue::from("explode")),
        ("x-queue-type", FieldValue::from("stream")),
        ("x-single-active-consumer", FieldValue::from("yes")),
    ];
    for (name, value) in cases {
        let ch = conn.open_channel().unwrap();
        let err = ch
            .queue_declare("bad", QueueOptions::default(), args(&[(name, value)]))
            .unwrap_err();
        assert_eq!(err.code, ReplyCode::PreconditionFailed, "{name}");
        assert!(err.text.contains(name), "{err}");
    }
}

#[tokio::test]
async fn passive_declare_reports_counts_or_404() {
    let (_b, conn, ch) = open();
    declare(&ch, "q");
    publish(&ch, "", "q", "a").await;
    publish(&ch, "", "q", "b").await;
    let _consumer_ch = conn.open_channel().unwrap();
    let passive = QueueOptions {
        passive: true,
        ..Default::default()
    };
    let ok = ch.queue_declare("q", passive, FieldTable::new()).unwrap();
    assert_eq!((ok.message_count, ok.consumer_count), (2, 0));
    let err = ch
        .queue_declare("missing", passive, FieldTable::new())
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "404 NOT_FOUND - no queue 'missing' in vhost '/'"
    );
}

#[tokio::test]
async fn server_named_queues() {
    let (_b, _c, ch) = open();
    let a = ch
        .queue_declare("", QueueOptions::default(), FieldTable::new())
        .unwrap();
    let b = ch
        .queue_declare("", QueueOptions::default(), FieldTable::new())
        .unwrap();
    assert!(a.name.starts_with("amq.gen-"), "{}", a.name);
    assert_ne!(a.name, b.name);
    publish(&ch, "", &a.name, "x").await;
    assert_eq!(drain(&ch, &a.name), ["x"]);
    let err = ch
        .queue_declare("amq.mine", QueueOptions::default(), FieldTable::new())
        .unwrap_err();
    assert_eq!(err.code, ReplyCode::AccessRefused);
}

#[tokio::test]
async fn exclusive_queues_belong_to_one_connection() {
    let broker: Broker = Broker::new();
    let owner = broker.connect();
    let other = broker.connect();
    let ch = owner.open_channel().unwrap();
    let exclusive = QueueOptions {
        exclusive: true,
        ..Default::default()
    };
    ch.queue_declare("mine", exclusive, FieldTable::new())
        .unwrap();
    let och = other.open_channel().unwrap();
    let err = och
        .basic_consume("mine", ConsumeOptions::default())
        .unwrap_err();
    assert_eq!(err.code, ReplyCode::ResourceLocked);
    assert_eq!(err.code.code(), 405);
    assert!(broker.queue_counts("mine").is_some());
    drop(ch);
    owner.close();
    assert!(
        broker.queue_counts("mine").is_none(),
        "deleted with its connection"
    );
}

#[tokio::test]
async fn auto_delete_queues_go_with_their_last_consumer() {
    let (broker, _c, ch) = open();
    let auto = QueueOptions {
        auto_delete: true,
        ..Default::default()
    };
    ch.queue_declare("temp", auto, FieldTable::new()).unwrap();
    let c1 = consume(&ch, "temp");
    let c2 = consume(&ch, "temp");
    c1.cancel().unwrap();
    assert!(broker.queue_counts("temp").is_some());
    drop(c2);
    assert!(broker.queue_counts("temp").is_none());
}

#[tokio::test(start_paused = true)]
async fn unused_queues_expire_after_x_expires() {
    let (broker, _c, ch) = open();
    declare_with(&ch, "idle", args(&[("x-expires", FieldValue::I32(1000))]));
    declare_with(&ch, "busy", args(&[("x-expires", FieldValue::I32(1000))]));
    let _consumer = consume(&ch, "busy");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        broker.queue_counts("idle").is_none(),
        "expired while unused"
    );
    assert!(broker.queue_counts("busy").is_some(), "a consumer keeps it");
}

#[tokio::test]
async fn purge_and_delete_conditions() {
    let (broker, conn, ch) = open();
    declare(&ch, "q");
    for i in 0..3 {
        publish(&ch, "", "q", &i.to_string()).await;
    }
    assert_eq!(broker.queue_counts("q"), Some((3, 0)));
    let err = ch.queue_delete("q", false, true).unwrap_err();
    assert!(err.text.contains("not empty"), "{err}");
    let ch = conn.open_channel().unwrap();
    assert_eq!(ch.queue_purge("q").unwrap(), 3);
    let consumer = consume(&ch, "q");
    let err = ch.queue_delete("q", true, false).unwrap_err();
    assert!(err.text.contains("in use"), "{err}");
    drop(consumer);
    let ch = conn.open_channel().unwrap();
    assert_eq!(ch.queue_delete("q", true, true).unwrap(), 0);
    assert_eq!(ch.queue_delete("q", false, false).unwrap(), 0, "idempotent");
}

#[tokio::test]
async fn deleting_a_queue_cancels_its_consumers_with_notification() {
    let (_b, conn, ch) = open();
    declare(&ch, "q");
    let mut consumer = consume(&ch, "q");
    let mut events = ch.events().unwrap();
    let admin = conn.open_channel().unwrap();
    admin.queue_delete("q", false, false).unwrap();
    match events.try_recv().unwrap() {
        ChannelEvent::ConsumerCancelled { consumer_tag } => {
            assert_eq!(consumer_tag, consumer.tag())
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(consumer.recv().await.is_none(), "the consumer stream ends");
}

#[tokio::test]
async fn snapshots_count_publishes_deliveries_and_list_what_exists() {
    let (b, _conn, ch) = open();
    ch.queue_declare("jobs", QueueOptions::default(), FieldTable::new())
        .unwrap();
    ch.exchange_declare(
        "x",
        ExchangeKind::Fanout,
        Default::default(),
        FieldTable::new(),
    )
    .unwrap();
    ch.queue_bind("jobs", "x", "", FieldTable::new()).unwrap();
    for _ in 0..5 {
        ch.basic_publish("x", "", PublishOptions::default(), Message::new("m"))
            .await
            .unwrap();
    }
    ch.basic_publish("x", "", PublishOptions::default(), Message::new("m"))
        .await
        .unwrap();
    let mut consumer = ch.basic_consume("jobs", ConsumeOptions::default()).unwrap();
    let mut got = Vec::new();
    while got.len() < 6 {
        consumer.recv_many(&mut got, 10).await;
    }
    let jobs = b.queues().into_iter().find(|q| q.name == "jobs").unwrap();
    assert_eq!((jobs.published, jobs.delivered), (6, 6));
    assert_eq!((jobs.messages_ready, jobs.messages_unacknowledged), (0, 6));
    assert_eq!(jobs.consumers, 1);
    // A requeue and a redelivery count again.
    ch.basic_nack(got[0].delivery_tag, false, true).unwrap();
    consumer.recv().await.unwrap();
    let jobs = b.queues().into_iter().find(|q| q.name == "jobs").unwrap();
    assert_eq!((jobs.published, jobs.delivered), (6, 7));
    assert_eq!(b.totals().published, 6);
    assert_eq!(b.totals().consumers, 1);
    let c = &b.consumers()[0];
    assert_eq!(
        (c.queue.as_str(), c.ack_required, c.unacknowledged),
        ("jobs", true, 6)
    );
    let exchanges = b.exchanges();
    assert_eq!(exchanges[0].name, "", "the default exchange first");
    assert!(
        exchanges
            .iter()
            .any(|x| x.name == "x" && x.kind == ExchangeKind::Fanout)
    );
    let bindings = b.bindings();
    assert!(
        bindings
            .iter()
            .any(|b| b.source.is_empty() && b.destination == "jobs")
    );
    assert!(
        bindings
            .iter()
            .any(|b| b.source == "x" && b.destination == "jobs" && !b.destination_is_exchange)
    );
}
