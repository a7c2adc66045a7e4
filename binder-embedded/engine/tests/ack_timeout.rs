//! The delivery acknowledgement timeout (`BrokerConfig::consumer_timeout`, RabbitMQ's
//! `consumer_timeout`): a channel holding a delivery unacknowledged for longer is closed with
//! 406 and RabbitMQ's text, and its deliveries are requeued.

mod common;

use std::time::Duration;

use common::*;
use stream_engine::*;
use tokio::time::sleep;

const TIMEOUT: Duration = Duration::from_secs(1);

fn broker() -> Broker {
    Broker::with_config(BrokerConfig {
        consumer_timeout: Some(TIMEOUT),
        ..BrokerConfig::default()
    })
}

/// A broker with the timeout, a connection, and a channel whose events the test watches.
fn watched() -> (Broker, Connection, Channel, ChannelEvents) {
    let broker = broker();
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    let events = ch.events().unwrap();
    (broker, conn, ch, events)
}

/// The error a channel was closed with, if it was.
fn closed(events: &mut ChannelEvents) -> Option<AmqpError> {
    while let Ok(event) = events.try_recv() {
        if let ChannelEvent::Closed { error } = event {
            return Some(error);
        }
    }
    None
}

#[tokio::test(start_paused = true)]
async fn a_delivery_left_unacknowledged_past_the_timeout_closes_its_channel_and_is_requeued() {
    let broker = broker();
    let conn = broker.connect();
    let ch = conn.open_numbered_channel(3).unwrap();
    let mut events = ch.events().unwrap();
    declare(&ch, "q");
    publish(&ch, "", "q", "slow").await;
    let mut consumer = consume(&ch, "q");
    let d = next(&mut consumer).await;
    assert_eq!(text(&d), "slow");

    // Never early: checked every tenth of the timeout, closed only once it is surely past.
    sleep(TIMEOUT - Duration::from_millis(50)).await;
    assert!(closed(&mut events).is_none(), "closed before the timeout");
    sleep(Duration::from_millis(300)).await;
    let error = closed(&mut events).expect("closed within two checks of the timeout");
    assert_eq!(error.code, ReplyCode::PreconditionFailed);
    assert_eq!(
        error.text,
        "delivery acknowledgement on channel 3 timed out. Timeout value used: 1000 ms. \
         This timeout value can be configured, see consumers doc guide to learn more"
    );
    let late = ch.basic_ack(d.delivery_tag, false).unwrap_err();
    assert_eq!(
        late.code,
        ReplyCode::ChannelError,
        "the channel is gone: {late}"
    );

    let other = conn.open_channel().unwrap();
    let again = other.basic_get("q", true).unwrap().expect("requeued");
    assert_eq!(text(&again.delivery), "slow");
    assert!(again.delivery.redelivered);
}

#[tokio::test(start_paused = true)]
async fn acknowledged_deliveries_and_no_ack_consumers_are_never_timed_out() {
    let (_broker, _conn, ch, mut events) = watched();
    declare(&ch, "acked");
    declare(&ch, "free");
    let mut acked = consume(&ch, "acked");
    let mut free = ch
        .basic_consume(
            "free",
            ConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
        )
        .unwrap();
    // A delivery every 600 ms for about 10 timeouts, each acknowledged 600 ms after it came;
    // the no-ack consumer's are never acknowledged.
    for i in 0..16 {
        publish(&ch, "", "acked", &i.to_string()).await;
        publish(&ch, "", "free", &i.to_string()).await;
        let d = next(&mut acked).await;
        next(&mut free).await;
        sleep(Duration::from_millis(600)).await;
        ch.basic_ack(d.delivery_tag, false).unwrap();
        assert!(closed(&mut events).is_none(), "closed at delivery {i}");
    }
    sleep(TIMEOUT * 5).await;
    assert!(closed(&mut events).is_none());
}

#[tokio::test(start_paused = true)]
async fn a_basic_get_awaiting_its_ack_times_out_too_and_the_others_channels_stay() {
    let broker = broker();
    let conn = broker.connect();
    let getter = conn.open_channel().unwrap();
    let mut getter_events = getter.events().unwrap();
    let bystander = conn.open_channel().unwrap();
    let mut bystander_events = bystander.events().unwrap();
    declare(&getter, "q");
    for t in ["a", "b", "c"] {
        publish(&getter, "", "q", t).await;
    }
    getter.basic_get("q", false).unwrap().unwrap();
    let first = bystander.basic_get("q", false).unwrap().unwrap().delivery;
    sleep(Duration::from_millis(700)).await;
    // The bystander settles its first delivery and holds a later one: younger than the
    // timeout when the getter's passes it.
    bystander.basic_ack(first.delivery_tag, false).unwrap();
    bystander.basic_get("q", false).unwrap().unwrap();
    sleep(Duration::from_millis(600)).await;
    let error = closed(&mut getter_events).expect("the getter's channel is closed");
    assert_eq!(error.code, ReplyCode::PreconditionFailed);
    let id = getter.id();
    assert!(
        error.text.starts_with(&format!(
            "delivery acknowledgement on channel {id} timed out"
        )),
        "an unnumbered channel is named by its id: {}",
        error.text
    );
    assert!(closed(&mut bystander_events).is_none());
    assert_eq!(broker.queue_counts("q"), Some((1, 0)), "a is back");
    // The bystander's own delivery times out in its turn.
    sleep(Duration::from_millis(600)).await;
    assert!(closed(&mut bystander_events).is_some());
    assert_eq!(broker.queue_counts("q"), Some((2, 0)), "c is back too");
}

#[tokio::test(start_paused = true)]
async fn a_delivery_settled_in_an_open_transaction_is_not_waited_for() {
    let (broker, _conn, ch, mut events) = watched();
    declare(&ch, "q");
    for t in ["a", "b"] {
        publish(&ch, "", "q", t).await;
    }
    ch.tx_select().unwrap();
    let a = ch.basic_get("q", false).unwrap().unwrap().delivery;
    let b = ch.basic_get("q", false).unwrap().unwrap().delivery;
    // a is acknowledged at once, its commit comes much later; b waits for its ack.
    ch.basic_ack(a.delivery_tag, false).unwrap();
    sleep(TIMEOUT / 2).await;
    ch.basic_ack(b.delivery_tag, false).unwrap();
    sleep(TIMEOUT * 3).await;
    assert!(closed(&mut events).is_none(), "settled, pending the commit");
    ch.tx_commit().await.unwrap();
    assert_eq!(broker.queue_counts("q"), Some((0, 0)));

    // A later delivery left unsettled in the transaction times out as any other.
    publish(&ch, "", "q", "c").await;
    ch.tx_commit().await.unwrap();
    ch.basic_get("q", false).unwrap().unwrap();
    sleep(TIMEOUT + Duration::from_millis(300)).await;
    assert!(closed(&mut events).is_some());
}

#[tokio::test(start_paused = true)]
async fn without_a_timeout_nothing_is_closed() {
    let (broker, conn, ch) = open();
    let _ = &broker;
    let mut events = ch.events().unwrap();
    declare(&ch, "q");
    publish(&ch, "", "q", "kept").await;
    ch.basic_get("q", false).unwrap().unwrap();
    sleep(Duration::from_secs(3 * 3600)).await;
    assert!(closed(&mut events).is_none());
    drop(conn);
}

#[tokio::test(start_paused = true)]
async fn an_idle_queue_expires_after_a_timeout_took_its_last_consumer() {
    let (broker, _conn, ch, mut events) = watched();
    declare_with(&ch, "idle", args(&[("x-expires", FieldValue::I32(2000))]));
    publish(&ch, "", "idle", "held").await;
    let mut consumer = consume(&ch, "idle");
    next(&mut consumer).await;
    sleep(TIMEOUT + Duration::from_millis(300)).await;
    assert!(closed(&mut events).is_some());
    // No consumer since the close: idle from then, the queue expires two seconds later.
    assert!(broker.queue_counts("idle").is_some());
    sleep(Duration::from_millis(2500)).await;
    assert_eq!(broker.queue_counts("idle"), None, "expired");
}

#[tokio::test(start_paused = true)]
async fn a_multiple_ack_held_in_a_transaction_covers_only_the_deliveries_made_before_it() {
    let (broker, conn, ch, mut events) = watched();
    declare(&ch, "q");
    for t in ["a", "b", "c"] {
        publish(&ch, "", "q", t).await;
    }
    ch.tx_select().unwrap();
    ch.basic_get("q", false).unwrap().unwrap();
    ch.basic_get("q", false).unwrap().unwrap();
    // Everything so far, as RabbitMQ works it out when the ack arrives.
    ch.basic_ack(0, true).unwrap();
    ch.basic_get("q", false).unwrap().unwrap();
    sleep(TIMEOUT + Duration::from_millis(300)).await;
    let error = closed(&mut events).expect("c was not covered: it timed out");
    assert_eq!(error.code, ReplyCode::PreconditionFailed);
    assert_eq!(
        broker.queue_counts("q"),
        Some((3, 0)),
        "the ack was never committed"
    );

    // Committed, the same ack leaves the later delivery unacknowledged.
    let ch = conn.open_channel().unwrap();
    ch.tx_select().unwrap();
    ch.basic_get("q", false).unwrap().unwrap();
    ch.basic_ack(0, true).unwrap();
    ch.basic_get("q", false).unwrap().unwrap();
    ch.tx_commit().await.unwrap();
    assert_eq!(broker.channel(ch.id()).unwrap().unacknowledged, 1);

    // Rolled back, held settlements are forgotten: the delivery is waited for again.
    let mut events = ch.events().unwrap();
    let tag = broker.channel(ch.id()).unwrap().delivered;
    ch.basic_ack(tag, false).unwrap();
    ch.tx_rollback().unwrap();
    sleep(TIMEOUT + Duration::from_millis(300)).await;
    assert!(closed(&mut events).is_some(), "waited for again");
}
