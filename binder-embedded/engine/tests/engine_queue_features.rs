//! Queue features: TTL, length limits and overflow, priorities, dead-lettering with `x-death`.

mod common;

use std::time::Duration;

use common::*;
use stream_engine::*;

/// A DLX (fanout) with a DLQ, and a queue `q` dead-lettering to it with extra arguments.
fn with_dlq(ch: &Channel, extra: &[(&str, FieldValue)]) {
    dead_letter_target(ch, "dlx", "dlq");
    let mut a = args(&[("x-dead-letter-exchange", "dlx".into())]);
    for (k, v) in extra {
        a.insert(*k, v.clone());
    }
    declare_with(ch, "q", a);
}

/// Takes the next message of `dlq`: `text`, dead-lettered for its queue's length limit.
fn assert_maxlen_dead_letter(ch: &Channel, text_of: &str) {
    let dead = ch.basic_get("dlq", true).unwrap().unwrap();
    assert_eq!(text(&dead.delivery), text_of);
    assert_eq!(
        deaths(dead.delivery.message())[0].get_str("reason"),
        Some("maxlen")
    );
}

fn deaths(m: &Message) -> Vec<FieldTable> {
    match m.headers.get("x-death") {
        Some(FieldValue::Array(items)) => items
            .iter()
            .map(|i| match i {
                FieldValue::Table(t) => t.clone(),
                other => panic!("x-death entry is {other:?}"),
            })
            .collect(),
        other => panic!("no x-death array: {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn queue_ttl_expires_at_the_head_and_dead_letters() {
    let (_b, _c, ch) = open();
    with_dlq(&ch, &[("x-message-ttl", FieldValue::I32(1000))]);
    let mut dead = consume(&ch, "dlq");
    publish(&ch, "", "q", "old").await;
    tokio::time::sleep(Duration::from_millis(1001)).await;
    let d = next(&mut dead).await;
    assert_eq!(text(&d), "old");
    let x = deaths(d.message());
    assert_eq!(x.len(), 1);
    assert_eq!(x[0].get_str("reason"), Some("expired"));
    assert_eq!(x[0].get_str("queue"), Some("q"));
    assert_eq!(x[0].get_str("exchange"), Some(""));
    assert_eq!(
        x[0].get("routing-keys"),
        Some(&FieldValue::Array(vec!["q".into()]))
    );
    assert_eq!(x[0].get("count"), Some(&FieldValue::I64(1)));
    assert_eq!(
        d.message().headers.get_str("x-first-death-reason"),
        Some("expired")
    );
}

#[tokio::test(start_paused = true)]
async fn messages_expiring_together_are_dead_lettered_in_queue_order() {
    let (_b, _c, ch) = open();
    with_dlq(&ch, &[("x-message-ttl", FieldValue::I32(1000))]);
    for body in ["1", "2", "3", "4"] {
        publish(&ch, "", "q", body).await;
    }
    tokio::time::sleep(Duration::from_millis(1001)).await;
    // The first expiry check after the deadline finds all four due at once.
    assert!(ch.basic_get("q", true).unwrap().is_none());
    assert_eq!(drain(&ch, "dlq"), ["1", "2", "3", "4"]);
}

#[tokio::test]
async fn a_multiple_nack_dead_letters_in_delivery_order() {
    let (_b, _c, ch) = open();
    with_dlq(&ch, &[]);
    for body in ["1", "2", "3"] {
        publish(&ch, "", "q", body).await;
    }
    let mut last = 0;
    for _ in 0..3 {
        last = ch
            .basic_get("q", false)
            .unwrap()
            .unwrap()
            .delivery
            .delivery_tag;
    }
    ch.basic_nack(last, true, false).unwrap();
    assert_eq!(drain(&ch, "dlq"), ["1", "2", "3"]);
}

#[tokio::test(start_paused = true)]
async fn per_message_ttl_expires_on_delivery_attempt_and_keeps_the_original_expiration() {
    let (_b, _c, ch) = open();
    with_dlq(&ch, &[]);
    let mut m = msg("short");
    m.properties.expiration = Some("500".into());
    ch.basic_publish("", "q", PublishOptions::default(), m)
        .await
        .unwrap();
    publish(&ch, "", "q", "forever").await;
    tokio::time::advance(Duration::from_millis(600)).await;
    let got = ch.basic_get("q", true).unwrap().unwrap();
    assert_eq!(
        text(&got.delivery),
        "forever",
        "the expired head was dropped first"
    );
    let dead = ch.basic_get("dlq", true).unwrap().unwrap();
    let x = deaths(dead.delivery.message());
    assert_eq!(x[0].get_str("original-expiration"), Some("500"));
    assert_eq!(dead.delivery.message().properties.expiration, None);
}

#[tokio::test(start_paused = true)]
async fn the_shorter_of_queue_and_message_ttl_wins() {
    let (_b, _c, ch) = open();
    declare_with(
        &ch,
        "q",
        args(&[("x-message-ttl", FieldValue::I32(10_000))]),
    );
    let mut m = msg("m");
    m.properties.expiration = Some("100".into());
    ch.basic_publish("", "q", PublishOptions::default(), m)
        .await
        .unwrap();
    tokio::time::advance(Duration::from_millis(150)).await;
    assert!(ch.basic_get("q", true).unwrap().is_none());
}

#[tokio::test]
async fn max_length_drop_head_dead_letters_the_oldest() {
    let (_b, _c, ch) = open();
    with_dlq(&ch, &[("x-max-length", FieldValue::I32(2))]);
    for t in ["1", "2", "3"] {
        publish(&ch, "", "q", t).await;
    }
    assert_eq!(drain(&ch, "q"), ["2", "3"]);
    assert_maxlen_dead_letter(&ch, "1");
}

#[tokio::test]
async fn max_length_bytes_counts_payload_bytes() {
    let (_b, _c, ch) = open();
    declare_with(
        &ch,
        "q",
        args(&[("x-max-length-bytes", FieldValue::I32(10))]),
    );
    for t in ["aaaa", "bbbb", "cccc"] {
        publish(&ch, "", "q", t).await;
    }
    assert_eq!(drain(&ch, "q"), ["bbbb", "cccc"]);
}

#[tokio::test]
async fn reject_publish_refuses_and_nacks_the_publisher() {
    let (_b, _c, ch) = open();
    declare_rejecting_past_one(&ch);
    ch.confirm_select().unwrap();
    let first = publish(&ch, "", "q", "1").await;
    let second = publish(&ch, "", "q", "2").await;
    assert_eq!(first.seq, Some(1));
    assert!(first.is_ack());
    assert_eq!(second.seq, Some(2));
    assert_eq!(second.status, PublishStatus::Rejected);
    assert!(!second.is_ack());
    assert_eq!(drain(&ch, "q"), ["1"]);
}

#[tokio::test]
async fn reject_publish_dlx_refuses_and_dead_letters() {
    let (_b, _c, ch) = open();
    with_dlq(
        &ch,
        &[
            ("x-max-length", FieldValue::I32(1)),
            ("x-overflow", "reject-publish-dlx".into()),
        ],
    );
    publish(&ch, "", "q", "kept").await;
    let out = publish(&ch, "", "q", "refused").await;
    assert_eq!(out.status, PublishStatus::Rejected);
    assert_eq!(drain(&ch, "q"), ["kept"]);
    assert_eq!(drain(&ch, "dlq"), ["refused"]);
}

/// Declares `q` holding one message at most, refusing publishes past it.
fn declare_rejecting_past_one(ch: &Channel) {
    declare_with(
        ch,
        "q",
        args(&[
            ("x-max-length", FieldValue::I32(1)),
            ("x-overflow", "reject-publish".into()),
        ]),
    );
}

/// The first `n` messages of `queue`, taken with acknowledgements owed.
fn take(ch: &Channel, queue: &str, n: usize) -> Vec<Delivery> {
    (0..n)
        .map(|_| ch.basic_get(queue, false).unwrap().unwrap().delivery)
        .collect()
}

#[tokio::test]
async fn a_requeue_past_max_length_drops_the_oldest_as_rabbitmq_does() {
    let (_b, _c, ch) = open();
    with_dlq(&ch, &[("x-max-length", FieldValue::I32(2))]);
    publish(&ch, "", "q", "1").await;
    publish(&ch, "", "q", "2").await;
    let one = take(&ch, "q", 1).remove(0);
    publish(&ch, "", "q", "3").await;
    // Back at its place at the head, the queue holds three: the head goes.
    ch.basic_nack(one.delivery_tag, false, true).unwrap();
    assert_eq!(drain(&ch, "q"), ["2", "3"]);
    assert_maxlen_dead_letter(&ch, "1");
}

#[tokio::test]
async fn a_closed_channels_deliveries_requeued_past_max_length_drop_the_oldest_in_order() {
    let (_b, conn, ch) = open();
    with_dlq(&ch, &[("x-max-length", FieldValue::I32(2))]);
    publish(&ch, "", "q", "1").await;
    publish(&ch, "", "q", "2").await;
    let other = conn.open_channel().unwrap();
    take(&other, "q", 2);
    publish(&ch, "", "q", "3").await;
    publish(&ch, "", "q", "4").await;
    other.close();
    assert_eq!(drain(&ch, "q"), ["3", "4"]);
    assert_eq!(drain(&ch, "dlq"), ["1", "2"]);
}

#[tokio::test]
async fn reject_publish_keeps_what_a_requeue_puts_past_the_limit() {
    let (b, _c, ch) = open();
    declare_rejecting_past_one(&ch);
    publish(&ch, "", "q", "1").await;
    let one = take(&ch, "q", 1).remove(0);
    publish(&ch, "", "q", "2").await;
    ch.basic_nack(one.delivery_tag, false, true).unwrap();
    assert_eq!(b.queue_counts("q"), Some((2, 0)), "nothing dropped");
    let refused = publish(&ch, "", "q", "3").await;
    assert_eq!(refused.status, PublishStatus::Rejected);
    assert_eq!(drain(&ch, "q"), ["1", "2"]);
}

#[tokio::test]
async fn priority_queues_deliver_higher_priorities_first() {
    let (_b, _c, ch) = open();
    declare_with(&ch, "q", args(&[("x-max-priority", FieldValue::I32(5))]));
    for (t, p) in [
        ("low", 1u8),
        ("none", 0),
        ("high", 5),
        ("capped", 200),
        ("mid", 3),
    ] {
        let mut m = msg(t);
        if p > 0 {
            m.properties.priority = Some(p);
        }
        ch.basic_publish("", "q", PublishOptions::default(), m)
            .await
            .unwrap();
    }
    assert_eq!(drain(&ch, "q"), ["high", "capped", "mid", "low", "none"]);
}

#[tokio::test]
async fn rejected_messages_are_dead_lettered_with_a_routing_key_override() {
    let (_b, _c, ch) = open();
    ch.exchange_declare(
        "dlx",
        ExchangeKind::Direct,
        ExchangeOptions::default(),
        FieldTable::new(),
    )
    .unwrap();
    declare(&ch, "dlq");
    ch.queue_bind("dlq", "dlx", "dead", FieldTable::new())
        .unwrap();
    declare_with(
        &ch,
        "q",
        args(&[
            ("x-dead-letter-exchange", "dlx".into()),
            ("x-dead-letter-routing-key", "dead".into()),
        ]),
    );
    publish(&ch, "", "q", "bad").await;
    let got = ch.basic_get("q", false).unwrap().unwrap();
    ch.basic_reject(got.delivery.delivery_tag, false).unwrap();
    let dead = ch.basic_get("dlq", true).unwrap().unwrap();
    assert_eq!(dead.delivery.routing_key(), "dead");
    assert_eq!(dead.delivery.exchange(), "dlx");
    let x = deaths(dead.delivery.message());
    assert_eq!(x[0].get_str("reason"), Some("rejected"));
    assert_eq!(
        x[0].get("routing-keys"),
        Some(&FieldValue::Array(vec!["q".into()]))
    );
    // Without a DLX, rejection without requeue drops the message.
    declare(&ch, "plain");
    publish(&ch, "", "plain", "gone").await;
    let got = ch.basic_get("plain", false).unwrap().unwrap();
    ch.basic_nack(got.delivery.delivery_tag, false, false)
        .unwrap();
    assert!(drain(&ch, "plain").is_empty());
}

#[tokio::test]
async fn x_death_counts_repeated_deaths_in_the_same_queue() {
    let (_b, _c, ch) = open();
    // q dead-letters to dlx → dlq; dlq dead-letters back to q (retry loop driven by rejects).
    ch.exchange_declare(
        "dlx",
        ExchangeKind::Fanout,
        ExchangeOptions::default(),
        FieldTable::new(),
    )
    .unwrap();
    ch.exchange_declare(
        "back",
        ExchangeKind::Fanout,
        ExchangeOptions::default(),
        FieldTable::new(),
    )
    .unwrap();
    declare_with(&ch, "q", args(&[("x-dead-letter-exchange", "dlx".into())]));
    declare_with(
        &ch,
        "dlq",
        args(&[("x-dead-letter-exchange", "back".into())]),
    );
    ch.queue_bind("dlq", "dlx", "", FieldTable::new()).unwrap();
    ch.queue_bind("q", "back", "", FieldTable::new()).unwrap();
    publish(&ch, "", "q", "m").await;
    for _ in 0..2 {
        let g = ch.basic_get("q", false).unwrap().unwrap();
        ch.basic_reject(g.delivery.delivery_tag, false).unwrap();
        let g = ch.basic_get("dlq", false).unwrap().unwrap();
        ch.basic_reject(g.delivery.delivery_tag, false).unwrap();
    }
    let g = ch.basic_get("q", true).unwrap().unwrap();
    let x = deaths(g.delivery.message());
    assert_eq!(x.len(), 2);
    assert_eq!(x[0].get_str("queue"), Some("dlq"), "most recent first");
    assert_eq!(x[0].get("count"), Some(&FieldValue::I64(2)));
    assert_eq!(x[1].get_str("queue"), Some("q"));
    assert_eq!(x[1].get("count"), Some(&FieldValue::I64(2)));
    assert_eq!(
        g.delivery.message().headers.get_str("x-first-death-queue"),
        Some("q")
    );
}

#[tokio::test(start_paused = true)]
async fn dead_letter_cycles_without_rejection_are_dropped() {
    let (_b, _c, ch) = open();
    // q expires into itself through the default exchange: a cycle RabbitMQ breaks.
    declare_with(
        &ch,
        "q",
        args(&[
            ("x-message-ttl", FieldValue::I32(100)),
            ("x-dead-letter-exchange", "".into()),
        ]),
    );
    publish(&ch, "", "q", "loop").await;
    tokio::time::advance(Duration::from_millis(150)).await;
    assert!(
        ch.basic_get("q", true).unwrap().is_none(),
        "dropped, not looping"
    );
}

#[tokio::test]
async fn delivery_limit_dead_letters_after_too_many_redeliveries() {
    let (_b, _c, ch) = open();
    with_dlq(&ch, &[("x-delivery-limit", FieldValue::I32(1))]);
    publish(&ch, "", "q", "flaky").await;
    for _ in 0..2 {
        let g = ch.basic_get("q", false).unwrap().unwrap();
        ch.basic_nack(g.delivery.delivery_tag, false, true).unwrap();
    }
    assert!(drain(&ch, "q").is_empty());
    let dead = ch.basic_get("dlq", true).unwrap().unwrap();
    assert_eq!(
        deaths(dead.delivery.message())[0].get_str("reason"),
        Some("delivery_limit")
    );
}

#[tokio::test]
async fn a_redriven_message_reaches_a_waiting_consumer_at_once() {
    let (broker, _c, ch) = open();
    declare(&ch, "work");
    declare(&ch, "work.dlq");
    let worker = waiting(consume(&ch, "work"), "nothing published yet").await;
    publish(&ch, "", "work.dlq", "again").await;
    let seq = broker.peek("work.dlq", 1).unwrap()[0].seq;
    assert_eq!(
        broker.redrive("work.dlq", seq, "", "work").await.unwrap(),
        Redrive::Moved(1)
    );
    // No other operation follows: the redrive itself hands the copy over.
    let got = served(worker, "the redriven message is delivered at once").await;
    assert_eq!(got, "again");
}
