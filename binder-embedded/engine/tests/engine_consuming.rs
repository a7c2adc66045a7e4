//! Consuming: round-robin, prefetch, no-ack, get, settlement, requeue, priorities,
//! exclusive and single active consumers.

mod common;

use std::time::Duration;

use common::*;
use stream_engine::*;

#[tokio::test]
async fn competing_consumers_are_served_round_robin() {
    let (_b, _c, ch) = open();
    declare(&ch, "q");
    let mut a = consume(&ch, "q");
    let mut b = consume(&ch, "q");
    for i in 0..6 {
        publish(&ch, "", "q", &i.to_string()).await;
    }
    let got_a: Vec<String> = ready(&mut a).iter().map(text).collect();
    let got_b: Vec<String> = ready(&mut b).iter().map(text).collect();
    assert_eq!(got_a, ["0", "2", "4"]);
    assert_eq!(got_b, ["1", "3", "5"]);
}

#[tokio::test]
async fn prefetch_limits_unacked_deliveries_per_consumer() {
    let (_b, _c, ch) = open();
    declare(&ch, "q");
    ch.basic_qos(2, false).unwrap();
    let mut c = consume(&ch, "q");
    for i in 0..5 {
        publish(&ch, "", "q", &i.to_string()).await;
    }
    let first = ready(&mut c);
    assert_eq!(first.len(), 2, "no more than prefetch in flight");
    ch.basic_ack(first[0].delivery_tag, false).unwrap();
    let more = ready(&mut c);
    assert_eq!(more.iter().map(text).collect::<Vec<_>>(), ["2"]);
    ch.basic_ack(more[0].delivery_tag, true).unwrap(); // acks 1 too
    assert_eq!(ready(&mut c).len(), 2);
}

#[tokio::test]
async fn global_prefetch_is_shared_by_the_channel() {
    let (_b, _c, ch) = open();
    declare(&ch, "q1");
    declare(&ch, "q2");
    ch.basic_qos(3, true).unwrap();
    let mut c1 = consume(&ch, "q1");
    let mut c2 = consume(&ch, "q2");
    for i in 0..4 {
        publish(&ch, "", "q1", &i.to_string()).await;
        publish(&ch, "", "q2", &i.to_string()).await;
    }
    let total = ready(&mut c1).len() + ready(&mut c2).len();
    assert_eq!(total, 3);
}

#[tokio::test]
async fn no_ack_consumers_are_not_limited_and_leave_nothing_unacked() {
    let (broker, _c, ch) = open();
    declare(&ch, "q");
    ch.basic_qos(1, false).unwrap();
    let opts = ConsumeOptions {
        no_ack: true,
        ..Default::default()
    };
    let mut c = ch.basic_consume("q", opts).unwrap();
    for i in 0..5 {
        publish(&ch, "", "q", &i.to_string()).await;
    }
    assert_eq!(ready(&mut c).len(), 5);
    assert_eq!(broker.memory_used(), 0);
}

#[tokio::test]
async fn a_cancelled_consumer_keeps_its_no_ack_deliveries_and_gives_back_the_others() {
    let (broker, _c, ch) = open();
    declare(&ch, "q");
    let no_ack = ConsumeOptions {
        no_ack: true,
        ..Default::default()
    };
    let mut c = ch.basic_consume("q", no_ack).unwrap();
    for i in 0..5 {
        publish(&ch, "", "q", &i.to_string()).await;
    }
    // What the engine had moved to the inbox was sent without acknowledgement: it is the
    // client's already, as in a RabbitMQ client's buffer, and the handle still takes it.
    // The rest never left the queue.
    ch.basic_cancel(c.tag()).unwrap();
    let mut seen = Vec::new();
    while let Some(d) = c.try_recv() {
        seen.push(text(&d));
    }
    assert!(!seen.is_empty(), "the inbox had deliveries");
    assert_eq!(
        broker.queue_counts("q").map(|(_, consumers)| consumers),
        Some(0)
    );
    seen.extend(drain(&ch, "q"));
    assert_eq!(seen, ["0", "1", "2", "3", "4"], "none lost, none twice");

    // Awaiting acks: back to the queue, in order, at once.
    let mut c = consume(&ch, "q");
    for i in 5..8 {
        publish(&ch, "", "q", &i.to_string()).await;
    }
    ch.basic_cancel(c.tag()).unwrap();
    assert!(c.try_recv().is_none(), "nothing left to take");
    assert_eq!(drain(&ch, "q"), ["5", "6", "7"]);
}

#[tokio::test]
async fn a_closed_channel_requeues_its_consumers_inbox_once() {
    let (_b, conn, ch) = open();
    declare(&ch, "q");
    let other = conn.open_channel().unwrap();
    let mut c = consume(&other, "q");
    for i in 0..3 {
        publish(&ch, "", "q", &i.to_string()).await;
    }
    other.close();
    // Ack-awaiting deliveries go back to the queue with the channel: the handle does not
    // get them as well.
    assert!(c.try_recv().is_none());
    assert_eq!(drain(&ch, "q"), ["0", "1", "2"]);
}

#[tokio::test]
async fn basic_get_and_ack_reject_nack_with_requeue() {
    let (_b, _c, ch) = open();
    declare(&ch, "q");
    for t in ["a", "b", "c"] {
        publish(&ch, "", "q", t).await;
    }
    let a = ch.basic_get("q", false).unwrap().unwrap();
    assert_eq!(a.message_count, 2);
    assert!(!a.delivery.redelivered);
    ch.basic_reject(a.delivery.delivery_tag, true).unwrap();
    let again = ch.basic_get("q", false).unwrap().unwrap();
    assert_eq!(
        text(&again.delivery),
        "a",
        "requeued at its place, the head"
    );
    assert!(again.delivery.redelivered);
    let b = ch.basic_get("q", false).unwrap().unwrap();
    ch.basic_nack(b.delivery.delivery_tag, true, true).unwrap(); // both back
    assert_eq!(drain(&ch, "q"), ["a", "b", "c"]);
    assert!(ch.basic_get("q", false).unwrap().is_none());
}

#[tokio::test]
async fn unknown_delivery_tags_close_the_channel() {
    let (_b, _c, ch) = open();
    let err = ch.basic_ack(99, false).unwrap_err();
    assert_eq!(err.code, ReplyCode::PreconditionFailed);
    assert_eq!(err.text, "unknown delivery tag 99");
    assert_eq!(
        ch.basic_ack(1, false).unwrap_err().code,
        ReplyCode::ChannelError
    );
}

#[tokio::test]
async fn a_closed_channel_requeues_its_unacked_deliveries_to_another_consumer() {
    let (_b, conn, ch) = open();
    declare(&ch, "q");
    let crashing = conn.open_channel().unwrap();
    crashing.basic_qos(10, false).unwrap();
    let mut c1 = consume(&crashing, "q");
    for t in ["1", "2", "3"] {
        publish(&ch, "", "q", t).await;
    }
    assert_eq!(ready(&mut c1).len(), 3);
    let survivor = conn.open_channel().unwrap();
    let mut c2 = consume(&survivor, "q");
    assert!(ready(&mut c2).is_empty());
    drop(c1);
    crashing.close();
    let redelivered = ready(&mut c2);
    assert_eq!(
        redelivered.iter().map(text).collect::<Vec<_>>(),
        ["1", "2", "3"]
    );
    assert!(redelivered.iter().all(|d| d.redelivered));
}

#[tokio::test]
async fn a_cancelled_consumers_unacked_deliveries_can_still_be_acked() {
    let (_b, _c, ch) = open();
    declare(&ch, "q");
    let mut c = consume(&ch, "q");
    publish(&ch, "", "q", "x").await;
    let d = next(&mut c).await;
    c.cancel().unwrap();
    ch.basic_ack(d.delivery_tag, false).unwrap();
    assert!(drain(&ch, "q").is_empty());
}

#[tokio::test]
async fn higher_priority_consumers_are_served_first() {
    let (_b, _c, ch) = open();
    declare(&ch, "q");
    ch.basic_qos(1, false).unwrap();
    let mut low = consume(&ch, "q");
    let high_opts = ConsumeOptions {
        arguments: args(&[("x-priority", FieldValue::I32(10))]),
        ..Default::default()
    };
    let mut high = ch.basic_consume("q", high_opts).unwrap();
    for t in ["1", "2", "3"] {
        publish(&ch, "", "q", t).await;
    }
    assert_eq!(ready(&mut high).iter().map(text).collect::<Vec<_>>(), ["1"]);
    assert_eq!(
        ready(&mut low).iter().map(text).collect::<Vec<_>>(),
        ["2"],
        "a lower-priority consumer gets messages only when higher ones are full"
    );
}

#[tokio::test]
async fn exclusive_consumers_are_alone_on_their_queue() {
    let (_b, conn, ch) = open();
    declare(&ch, "q");
    let opts = ConsumeOptions {
        exclusive: true,
        ..Default::default()
    };
    let only = ch.basic_consume("q", opts.clone()).unwrap();
    let other = conn.open_channel().unwrap();
    let err = other
        .basic_consume("q", ConsumeOptions::default())
        .unwrap_err();
    assert_eq!(err.code, ReplyCode::AccessRefused);
    drop(only);
    let other = conn.open_channel().unwrap();
    let _plain = consume(&other, "q");
    let third = conn.open_channel().unwrap();
    assert!(
        third.basic_consume("q", opts).is_err(),
        "the queue has a consumer"
    );
}

#[tokio::test]
async fn single_active_consumer_fails_over_in_order() {
    let (_b, _c, ch) = open();
    declare_with(&ch, "q", args(&[("x-single-active-consumer", true.into())]));
    let mut first = consume(&ch, "q");
    let mut second = consume(&ch, "q");
    for t in ["1", "2"] {
        publish(&ch, "", "q", t).await;
    }
    assert_eq!(ready(&mut first).len(), 2);
    assert!(ready(&mut second).is_empty());
    first.cancel().unwrap();
    publish(&ch, "", "q", "3").await;
    assert_eq!(
        ready(&mut second).iter().map(text).collect::<Vec<_>>(),
        ["3"]
    );
}

#[tokio::test]
async fn consumer_tags_are_unique_per_channel() {
    let (_b, conn, ch) = open();
    declare(&ch, "q");
    let opts = ConsumeOptions {
        consumer_tag: Some("svc#1".into()),
        ..Default::default()
    };
    let c = ch.basic_consume("q", opts.clone()).unwrap();
    assert_eq!(c.tag(), "svc#1");
    let err = ch.basic_consume("q", opts).unwrap_err();
    assert_eq!(err.code, ReplyCode::NotAllowed);
    assert!(err.code.is_connection_error());
    // A connection error closes the whole connection.
    assert!(conn.open_channel().is_err());
    let broker: Broker = Broker::new();
    let conn = broker.connect();
    let generated = conn.open_channel().unwrap();
    declare(&generated, "q");
    let c = consume(&generated, "q");
    assert!(c.tag().starts_with("amq.ctag-"));
    let _ = FieldTable::new();
}

#[tokio::test]
async fn an_ack_under_a_channel_wide_prefetch_serves_the_channel_s_other_queues() {
    let (_b, _c, ch) = open();
    declare(&ch, "q1");
    declare(&ch, "q2");
    ch.basic_qos(1, true).unwrap();
    let mut c1 = consume(&ch, "q1");
    let c2 = consume(&ch, "q2");
    publish(&ch, "", "q1", "a").await;
    publish(&ch, "", "q2", "b").await;
    let first = next(&mut c1).await;
    assert_eq!(text(&first), "a");
    let c2 = waiting(c2, "the channel's one credit is taken").await;
    ch.basic_ack(first.delivery_tag, false).unwrap();
    let got = served(
        c2,
        "the credit the ack freed serves the other queue's consumer",
    )
    .await;
    assert_eq!(got, "b");
}

#[tokio::test]
async fn a_dropped_consumer_under_a_channel_wide_prefetch_serves_the_channel_s_other_queues() {
    let (_b, _c, ch) = open();
    declare(&ch, "q1");
    declare(&ch, "q2");
    ch.basic_qos(1, true).unwrap();
    let c1 = consume(&ch, "q1");
    let c2 = consume(&ch, "q2");
    publish(&ch, "", "q1", "a").await;
    publish(&ch, "", "q2", "b").await;
    let c2 = waiting(c2, "\"a\", in c1's inbox, holds the channel's one credit").await;
    // Never taken, "a" goes back to its queue when its consumer is dropped (cancelled), and
    // its credit with it.
    drop(c1);
    let got = served(
        c2,
        "the credit the drop freed serves the other queue's consumer",
    )
    .await;
    assert_eq!(got, "b");
    assert_eq!(drain(&ch, "q1"), ["a"]);
}

#[tokio::test]
async fn a_single_active_consumer_s_successor_is_served_at_the_cancel() {
    let (_b, _c, ch) = open();
    declare_with(&ch, "q", args(&[("x-single-active-consumer", true.into())]));
    ch.basic_qos(1, false).unwrap();
    let mut first = consume(&ch, "q");
    let second = consume(&ch, "q");
    for t in ["1", "2"] {
        publish(&ch, "", "q", t).await;
    }
    assert_eq!(text(&next(&mut first).await), "1");
    let second = waiting(second, "the first consumer is the active one").await;
    // No other operation follows: the cancel itself hands "2" to the successor.
    first.cancel().unwrap();
    assert_eq!(
        served(second, "the successor is served at the cancel").await,
        "2"
    );
}

#[tokio::test]
async fn credit_freed_under_a_channel_wide_prefetch_turns_among_the_channel_s_queues() {
    let (_b, _c, ch) = open();
    declare(&ch, "q1");
    declare(&ch, "q2");
    ch.basic_qos(1, true).unwrap();
    let mut c1 = consume(&ch, "q1");
    let mut c2 = consume(&ch, "q2");
    for i in 0..10 {
        publish(&ch, "", "q1", &format!("1.{i}")).await;
        publish(&ch, "", "q2", &format!("2.{i}")).await;
    }
    // One delivery out at a time on the channel; each ack hands the credit on.
    let mut served = Vec::new();
    for _ in 0..10 {
        let d = ready(&mut c1)
            .into_iter()
            .chain(ready(&mut c2))
            .next()
            .unwrap();
        served.push(text(&d));
        ch.basic_ack(d.delivery_tag, false).unwrap();
    }
    let from_q1 = served.iter().filter(|t| t.starts_with("1.")).count();
    assert!(
        (2..=8).contains(&from_q1),
        "both queues get turns, not one queue every time: {served:?}"
    );
}

/// `recv` is cancel-safe: a wait given up (a timeout, a `select!` that took another branch)
/// leaves nothing behind that keeps the next wait from being served, and a publish made
/// while nobody waited waits in the inbox for the next `recv`.
#[tokio::test]
async fn a_wait_given_up_leaves_the_next_recv_served() {
    let (_b, _c, ch) = open();
    declare(&ch, "q");
    let mut c = consume(&ch, "q");
    for _ in 0..2 {
        give_up_a_wait(&mut c);
    }
    publish(&ch, "", "q", "while nobody waited").await;
    let d = tokio::time::timeout(Duration::from_secs(5), c.recv())
        .await
        .expect("the message published while nobody waited")
        .unwrap();
    assert_eq!(text(&d), "while nobody waited");
    ch.basic_ack(d.delivery_tag, false).unwrap();
    // Given up here, then taken up in another task with no push in between: the next
    // publish wakes that task, not the waker of the wait given up.
    give_up_a_wait(&mut c);
    let next = waiting(c, "nothing more was published").await;
    publish(&ch, "", "q", "to a waiting consumer").await;
    assert_eq!(
        served(next, "a publish reaches the task waiting now").await,
        "to a waiting consumer"
    );
}

/// Polls `c.recv()` once, which finds nothing and waits (its waker left with the consumer),
/// then drops it, as a timeout or a `select!` that took another branch would.
fn give_up_a_wait(c: &mut Consumer) {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let mut recv = std::pin::pin!(c.recv());
    assert!(
        recv.as_mut().poll(&mut cx).is_pending(),
        "nothing was published"
    );
}

/// Deleting a queue whose consumer had not yet taken a delivery frees what that delivery held
/// on the channel: under a channel-wide prefetch, a consumer of another queue on the same
/// channel is served, and the delivery's memory is no longer counted (before, the deleted
/// queue's delivery kept both until the channel closed).
#[tokio::test]
async fn deleting_a_queue_frees_the_credit_and_memory_of_deliveries_never_taken() {
    let (broker, _c, ch) = open();
    declare(&ch, "q1");
    declare(&ch, "q2");
    ch.basic_qos(1, true).unwrap();
    let _c1 = consume(&ch, "q1");
    let c2 = consume(&ch, "q2");
    publish(&ch, "", "q1", "never taken").await;
    publish(&ch, "", "q2", "for q2").await;
    let c2 = waiting(c2, "the channel's one credit is held by q1's delivery").await;
    ch.queue_delete("q1", false, false).unwrap();
    assert_eq!(
        served(c2, "q1's deletion frees the channel's credit").await,
        "for q2"
    );
    assert!(broker.memory_used() > 0, "q2's delivery awaits its ack");
    // The channel's second delivery tag (q1's was the first).
    ch.basic_ack(2, false).unwrap();
    assert_eq!(
        broker.memory_used(),
        0,
        "nothing is left: the deleted q1's delivery is not counted"
    );
}

#[tokio::test]
async fn deliveries_a_cancelled_handle_never_took_count_as_none() {
    let (broker, _conn, ch) = open();
    declare(&ch, "q");
    for t in ["a", "b", "c"] {
        publish(&ch, "", "q", t).await;
    }
    let mut consumer = consume(&ch, "q");
    let first = next(&mut consumer).await;
    ch.basic_ack(first.delivery_tag, false).unwrap();
    // b and c sit in the handle's inbox, untaken, when it is cancelled.
    consumer.cancel().unwrap();
    let info = broker.channel(ch.id()).unwrap();
    assert_eq!(
        (info.delivered, info.delivered_to_consumers),
        (1, 1),
        "{info:?}"
    );
    let queue = broker.queues().into_iter().find(|q| q.name == "q").unwrap();
    assert_eq!(queue.delivered, 1);
    assert_eq!(drain(&ch, "q"), ["b", "c"]);
    let info = broker.channel(ch.id()).unwrap();
    assert_eq!((info.delivered, info.counts.got_no_ack), (3, 2));
}
