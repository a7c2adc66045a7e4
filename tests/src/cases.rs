//! The conformance cases. Each takes an [`Env`] (a fresh binder and a unique name prefix) and
//! panics on a violation. Absence is checked by order, never by sleeping: a marker sent after
//! the message that must not arrive has to be the next one received.

use std::collections::BTreeSet;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use binder_amqp::topology::{plan_consumer, plan_producer};
use binder_amqp::{DEFAULT_FRAME_MAX, header_frame_size};
use binder_core::binder::Settlement;
use binder_core::message::{Decimal, DeliveryMode, HeaderValue, Headers, Message, Properties};
use binder_core::runtime::{BindingState, HandlerError, Reply, handler};
use futures::future::maybe_done;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::kit::{Env, next, recv};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Item {
    id: u32,
    #[serde(default)]
    kind: String,
}

fn item(id: u32) -> Item {
    Item {
        id,
        kind: String::new(),
    }
}

/// A listener that reports the ids it handles.
fn reporter(tx: mpsc::UnboundedSender<u32>) -> impl binder_core::runtime::Handler {
    handler::payload(move |i: Item| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(i.id);
        }
    })
}

async fn collect(rx: &mut mpsc::UnboundedReceiver<u32>, n: usize) -> Vec<u32> {
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        out.push(recv(rx).await);
    }
    out
}

fn every_header_type() -> Headers {
    let nested: Headers = [("inner", HeaderValue::I32(-7))].into_iter().collect();
    [
        ("bool", HeaderValue::Bool(true)),
        ("i8", HeaderValue::I8(-8)),
        ("u8", HeaderValue::U8(200)),
        ("i16", HeaderValue::I16(-16_000)),
        ("u16", HeaderValue::U16(60_000)),
        ("i32", HeaderValue::I32(-2_000_000)),
        ("u32", HeaderValue::U32(4_000_000_000)),
        ("i64", HeaderValue::I64(-9_000_000_000)),
        ("f32", HeaderValue::F32(1.5)),
        ("f64", HeaderValue::F64(-2.25)),
        (
            "decimal",
            HeaderValue::Decimal(Decimal {
                scale: 2,
                value: 12_345,
            }),
        ),
        (
            "negative-decimal",
            HeaderValue::Decimal(Decimal {
                scale: 1,
                value: -5,
            }),
        ),
        ("string", HeaderValue::from("héllo")),
        (
            "bytes",
            HeaderValue::Bytes(bytes::Bytes::from_static(&[0, 1, 254])),
        ),
        ("timestamp", HeaderValue::Timestamp(1_700_000_000)),
        (
            "array",
            HeaderValue::Array(vec![HeaderValue::from("a"), HeaderValue::I32(1)]),
        ),
        ("table", HeaderValue::Table(nested)),
        ("void", HeaderValue::Void),
    ]
    .into_iter()
    .collect()
}

/// Publish then subscribe with a durable group: nothing published before the consumer started
/// is lost, and payload, headers of every type and properties arrive exactly as sent.
pub async fn round_trip_durable_group(env: &Env) {
    let app = env
        .app(
            "spring.cloud.stream.bindings.out: {destination: '{p}rt', producer: {requiredGroups: [g]}}",
            |b| b.output("out"),
        )
        .await;
    let sent = Message {
        payload: bytes::Bytes::from_static(b"\x00binary\xffpayload"),
        headers: every_header_type(),
        properties: Properties {
            content_type: Some("application/octet-stream".into()),
            content_encoding: Some("identity".into()),
            correlation_id: Some("corr-1".into()),
            message_id: Some("msg-1".into()),
            reply_to: Some("replies".into()),
            expiration: Some("60000".into()),
            timestamp: Some(1_700_000_001),
            kind: Some("order.created".into()),
            user_id: None,
            app_id: Some("kit".into()),
            delivery_mode: Some(DeliveryMode::Persistent),
            priority: Some(3),
        }
        .into(),
    };
    app.output("out")
        .unwrap()
        .send_message(sent.clone())
        .await
        .unwrap();
    app.shutdown().await;
    let mut sub = env.subscribe(&format!("{}rt.g", env.p), 1).await;
    let got = next(&mut sub).await;
    assert_eq!(got.message(), &sent, "the message changed on its way");
    got.settler.settle(Settlement::Ack).await.unwrap();
}

/// Destinations are isolated: what is sent to one never reaches another's consumers.
pub async fn destinations_are_isolated(env: &Env) {
    let (ta, mut ra) = mpsc::unbounded_channel();
    let (tb, mut rb) = mpsc::unbounded_channel();
    let yaml = "spring.cloud.stream.bindings:\n  a: {destination: '{p}iso-a', group: g}\n  b: {destination: '{p}iso-b', group: g}\n";
    let app = env
        .app(yaml, |x| {
            x.listener("a", reporter(ta)).listener("b", reporter(tb))
        })
        .await;
    let p = app.publisher();
    p.send(&format!("{}iso-a", env.p), &item(1)).await.unwrap();
    assert_eq!(recv(&mut ra).await, 1);
    p.send(&format!("{}iso-b", env.p), &item(2)).await.unwrap();
    assert_eq!(
        recv(&mut rb).await,
        2,
        "b's first message is its own marker"
    );
    app.shutdown().await;
}

/// Two groups each get every message; the members of one group compete and together get
/// every message exactly once.
pub async fn groups_each_get_all_and_members_compete(env: &Env) {
    let g1 = "spring.cloud.stream.bindings.in: {destination: '{p}grp', group: one}";
    let g2 = "spring.cloud.stream.bindings.in: {destination: '{p}grp', group: two}";
    let (t1, mut r1) = mpsc::unbounded_channel();
    let (t2, mut r2) = mpsc::unbounded_channel();
    let a = env
        .app(g1, |b| b.listener("in", reporter(t1.clone())))
        .await;
    let b = env.app(g1, |b| b.listener("in", reporter(t1))).await;
    let c = env.app(g2, |b| b.listener("in", reporter(t2))).await;
    for id in 0..30 {
        a.publisher()
            .send(&format!("{}grp", env.p), &item(id))
            .await
            .unwrap();
    }
    let mut one = collect(&mut r1, 30).await;
    let mut two = collect(&mut r2, 30).await;
    one.sort_unstable();
    two.sort_unstable();
    assert_eq!(
        one,
        (0..30).collect::<Vec<_>>(),
        "group one: each message once"
    );
    assert_eq!(
        two,
        (0..30).collect::<Vec<_>>(),
        "group two: each message once"
    );
    for app in [a, b, c] {
        app.shutdown().await;
    }
    assert!(r1.try_recv().is_err(), "no duplicates in group one");
}

/// Anonymous consumers each get every message published while they are bound.
pub async fn anonymous_consumers_each_get_all(env: &Env) {
    let yaml = "spring.cloud.stream.bindings.in.destination: '{p}anon'";
    let (t1, mut r1) = mpsc::unbounded_channel();
    let (t2, mut r2) = mpsc::unbounded_channel();
    let a = env.app(yaml, |b| b.listener("in", reporter(t1))).await;
    let b = env.app(yaml, |b| b.listener("in", reporter(t2))).await;
    for id in 0..10 {
        a.publisher()
            .send(&format!("{}anon", env.p), &item(id))
            .await
            .unwrap();
    }
    assert_eq!(collect(&mut r1, 10).await, (0..10).collect::<Vec<_>>());
    assert_eq!(collect(&mut r2, 10).await, (0..10).collect::<Vec<_>>());
    a.shutdown().await;
    b.shutdown().await;
}

/// `bindingRoutingKey` patterns, several keys split by a delimiter, select what a group gets.
pub async fn binding_routing_keys_select(env: &Env) {
    let yaml = r#"
spring.cloud.stream:
  bindings:
    in: {destination: '{p}rk', group: g}
    out: {destination: '{p}rk'}
  rabbit.bindings:
    in.consumer: {bindingRoutingKey: "a.*;b.#", bindingRoutingKeyDelimiter: ";"}
    out.producer.routingKeyExpression: "headers['rk']"
"#;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let app = env
        .app(yaml, |b| b.listener("in", reporter(tx)).output("out"))
        .await;
    let out = app.output("out").unwrap();
    for (id, key) in [
        (1, "a.x"),
        (2, "c.y"),
        (3, "b.z.w"),
        (4, "a.x.y"),
        (5, "a.end"),
    ] {
        let m = Message::new(serde_json::to_vec(&item(id)).unwrap()).with_header("rk", key);
        out.send_message(m).await.unwrap();
    }
    assert_eq!(
        collect(&mut rx, 3).await,
        vec![1, 3, 5],
        "c.y and a.x.y match no key"
    );
    app.shutdown().await;
}

/// `routingKeyExpression` on the payload routes to the matching binding key.
pub async fn routing_key_expressions_route(env: &Env) {
    let yaml = r#"
spring.cloud.stream:
  bindings:
    alpha: {destination: '{p}expr', group: alpha}
    out: {destination: '{p}expr'}
  rabbit.bindings:
    alpha.consumer.bindingRoutingKey: kind.alpha
    out.producer.routingKeyExpression: "'kind.' + payload.kind"
"#;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let app = env
        .app(yaml, |b| b.listener("alpha", reporter(tx)).output("out"))
        .await;
    let out = app.output("out").unwrap();
    for (id, kind) in [(1, "alpha"), (2, "beta"), (3, "alpha")] {
        out.send(&Item {
            id,
            kind: kind.into(),
        })
        .await
        .unwrap();
    }
    assert_eq!(collect(&mut rx, 2).await, vec![1, 3]);
    app.shutdown().await;
}

/// Through the SPI: ack removes; requeue redelivers with the redelivered flag; reject without
/// requeue goes to the DLQ (`autoBindDlq`).
pub async fn ack_requeue_reject(env: &Env) {
    let queue = &env
        .seeded_queue(
            "spring.cloud.stream:\n  bindings.in: {destination: '{p}settle', group: g}\n  rabbit.bindings.in.consumer: {autoBindDlq: true, republishToDlq: false}\n",
            &["ack", "requeue", "reject"],
        )
        .await;
    let mut sub = env.subscribe(queue, 10).await;
    let mut by_text = std::collections::HashMap::new();
    for _ in 0..3 {
        let d = next(&mut sub).await;
        assert!(!d.redelivered);
        by_text.insert(String::from_utf8(d.message().payload.to_vec()).unwrap(), d);
    }
    by_text
        .remove("ack")
        .unwrap()
        .settler
        .settle(Settlement::Ack)
        .await
        .unwrap();
    by_text
        .remove("reject")
        .unwrap()
        .settler
        .settle(Settlement::Reject)
        .await
        .unwrap();
    by_text
        .remove("requeue")
        .unwrap()
        .settler
        .settle(Settlement::Requeue)
        .await
        .unwrap();
    let again = next(&mut sub).await;
    assert_eq!(&again.message().payload[..], b"requeue");
    assert!(
        again.redelivered,
        "a requeued message comes back marked redelivered"
    );
    again.settler.settle(Settlement::Ack).await.unwrap();
    let mut dlq = env.subscribe(&format!("{queue}.dlq"), 1).await;
    let dead = next(&mut dlq).await;
    assert_eq!(&dead.message().payload[..], b"reject");
    dead.settler.settle(Settlement::Ack).await.unwrap();
    sub.cancel().await.unwrap();
    assert_eq!(env.inspect(queue).await.messages, 0, "nothing left");
}

/// Through the SPI: settling the oldest deliveries last (acks held back for the later ones
/// meanwhile) never acknowledges a delivery that is being requeued or rejected, and a
/// delivery whose every handle is dropped unsettled goes back to the queue.
pub async fn settling_the_oldest_last_loses_nothing(env: &Env) {
    let queue = &env
        .seeded_queue(
            "spring.cloud.stream:\n  bindings.in: {destination: '{p}oldest', group: g}\n  rabbit.bindings.in.consumer: {autoBindDlq: true, republishToDlq: false}\n",
            &["requeued", "rejected", "acked-1", "acked-2"],
        )
        .await;
    let mut sub = env.subscribe(queue, 10).await;
    let mut by_text = std::collections::HashMap::new();
    for _ in 0..4 {
        let d = next(&mut sub).await;
        by_text.insert(String::from_utf8(d.message().payload.to_vec()).unwrap(), d);
    }
    for (text, settlement) in [
        ("acked-2", Settlement::Ack),
        ("acked-1", Settlement::Ack),
        ("requeued", Settlement::Requeue),
        ("rejected", Settlement::Reject),
    ] {
        let d = by_text.remove(text).unwrap();
        d.settler.settle(settlement).await.unwrap();
        assert!(
            d.settler.settle(settlement).await.is_err(),
            "a second settlement of `{text}` is refused"
        );
    }
    let again = next(&mut sub).await;
    assert_eq!(&again.message().payload[..], b"requeued");
    assert!(again.redelivered);
    // Dropped without a settlement: back in the queue, delivered again.
    drop(again);
    let third = next(&mut sub).await;
    assert_eq!(&third.message().payload[..], b"requeued");
    third.settler.settle(Settlement::Ack).await.unwrap();
    let mut dlq = env.subscribe(&format!("{queue}.dlq"), 1).await;
    let dead = next(&mut dlq).await;
    assert_eq!(&dead.message().payload[..], b"rejected");
    dead.settler.settle(Settlement::Ack).await.unwrap();
    sub.cancel().await.unwrap();
    assert_eq!(env.inspect(queue).await.messages, 0, "nothing left");
}

/// `republishToDlq` republishes an exhausted message with the documented headers.
pub async fn republish_adds_diagnostic_headers(env: &Env) {
    let yaml = "spring.cloud.stream:\n  bindings.in: {destination: '{p}rep', group: g, consumer: {maxAttempts: 1}}\n  rabbit.bindings.in.consumer.autoBindDlq: true\n";
    let h = handler::payload(|_: Item| async { Err::<(), _>(HandlerError::fatal("cannot ship")) });
    let app = env.app(yaml, |b| b.listener("in", h)).await;
    app.publisher()
        .send(&format!("{}rep", env.p), &item(1))
        .await
        .unwrap();
    let mut dlq = env.subscribe(&format!("{}rep.g.dlq", env.p), 1).await;
    let dead = next(&mut dlq).await;
    let h = &dead.message().headers;
    assert_eq!(h.get_str("x-exception-message"), Some("cannot ship"));
    assert!(h.get_str("x-exception-stacktrace").is_some());
    assert_eq!(
        h.get_str("x-original-exchange"),
        Some(format!("{}rep", env.p).as_str())
    );
    assert_eq!(
        h.get_str("x-original-routingKey"),
        Some(format!("{}rep", env.p).as_str())
    );
    assert_eq!(h.get("x-attempts").and_then(HeaderValue::as_i64), Some(1));
    dead.settler.settle(Settlement::Ack).await.unwrap();
    app.shutdown().await;
}

/// A message whose own headers nearly fill a frame (130 kB of a 128 KiB `frame_max`) still
/// reaches the DLQ with those headers and the dead-letter ones that cannot be cut; the stack
/// trace is dropped and `x-exception-message` cut rather than overflowing the frame (on
/// RabbitMQ that closed the publisher connection). A later send on another output is still
/// confirmed and delivered.
pub async fn dead_letters_fit_beside_large_foreign_headers(env: &Env) {
    let yaml = r#"
spring.cloud.stream:
  bindings:
    in: {destination: '{p}big', group: g, consumer: {maxAttempts: 1}}
    other: {destination: '{p}other', producer: {requiredGroups: [g]}}
  rabbit.bindings.in.consumer.autoBindDlq: true
"#;
    let h = handler::payload(|_: Item| async { Err::<(), _>(HandlerError::fatal("cannot ship")) });
    let app = env.app(yaml, |b| b.listener("in", h).output("other")).await;
    let dest = format!("{}big", env.p);
    let foreign = "f".repeat(130_000);
    let sent = Message::new(serde_json::to_vec(&item(1)).unwrap())
        .with_content_type("application/json")
        .with_header("x-foreign", foreign.as_str());
    app.publisher().send_message(&dest, sent).await.unwrap();
    let mut dlq = env.subscribe(&format!("{dest}.g.dlq"), 1).await;
    let dead = next(&mut dlq).await;
    let m = dead.message();
    assert_eq!(m.headers.get_str("x-foreign"), Some(foreign.as_str()));
    assert_eq!(
        m.headers.get_str("x-original-exchange"),
        Some(dest.as_str())
    );
    assert_eq!(
        m.headers.get_str("x-original-routingKey"),
        Some(dest.as_str())
    );
    assert_eq!(
        m.headers.get("x-attempts").and_then(HeaderValue::as_i64),
        Some(1)
    );
    let reason = m.headers.get_str("x-exception-message").unwrap();
    assert!(
        "cannot ship".starts_with(reason),
        "cut, never more: {reason:?}"
    );
    assert_eq!(
        m.headers.get("x-exception-stacktrace"),
        None,
        "no room for it"
    );
    assert!(header_frame_size(m) <= DEFAULT_FRAME_MAX as usize);
    assert_eq!(m.payload, serde_json::to_vec(&item(1)).unwrap());
    dead.settler.settle(Settlement::Ack).await.unwrap();
    app.output("other").unwrap().send(&item(2)).await.unwrap();
    let mut other = env.subscribe(&format!("{}other.g", env.p), 1).await;
    let got = next(&mut other).await;
    let got_item: Item = serde_json::from_slice(&got.message().payload).unwrap();
    assert_eq!(got_item.id, 2);
    got.settler.settle(Settlement::Ack).await.unwrap();
    app.shutdown().await;
}

/// A 1 MB payload does not count against the header frame: its dead letter keeps the whole
/// stack trace, which says where the handler panicked (file and line).
pub async fn dead_letters_of_large_payloads_keep_the_whole_trace(env: &Env) {
    let yaml = "spring.cloud.stream:\n  bindings.in: {destination: '{p}large', group: g, consumer: {maxAttempts: 1}}\n  rabbit.bindings.in.consumer.autoBindDlq: true\n";
    let line = line!() + 2;
    let h = handler::incoming(|_| async {
        panic!("too large to ship");
        #[allow(unreachable_code)]
        ()
    });
    let app = env.app(yaml, |b| b.listener("in", h)).await;
    let dest = format!("{}large", env.p);
    let payload = bytes::Bytes::from(vec![7u8; 1 << 20]);
    let sent = Message::new(payload.clone()).with_content_type("application/octet-stream");
    app.publisher().send_message(&dest, sent).await.unwrap();
    let mut dlq = env.subscribe(&format!("{dest}.g.dlq"), 1).await;
    let dead = next(&mut dlq).await;
    let m = dead.message();
    assert_eq!(m.payload, payload);
    assert_eq!(
        m.headers.get_str("x-exception-message"),
        Some("handler panicked: too large to ship")
    );
    let trace = m.headers.get_str("x-exception-stacktrace").unwrap();
    let at = format!(
        "handler panicked: too large to ship\n  at {}:{line}:",
        file!()
    );
    assert!(
        trace.starts_with(&at),
        "{trace:?} does not start with {at:?}"
    );
    dead.settler.settle(Settlement::Ack).await.unwrap();
    app.shutdown().await;
}

/// Retries: exactly `maxAttempts` deliveries to the handler, the back-off honoured, the
/// attempt count carried in a header; and a message waiting for its retry does not hold up
/// the messages behind it. That is checked by order, not by a race against the clock: on a
/// binding whose back-off is an hour, the next thing handled after the failed first attempt
/// must be the other message.
pub async fn retries_are_counted_and_do_not_block(env: &Env) {
    let yaml = r#"
spring.cloud.stream:
  bindings:
    in: {destination: '{p}retry', group: g, consumer: {maxAttempts: 3, backOffInitialInterval: 200, backOffMultiplier: 2.0}}
    slow-in: {destination: '{p}retry-slow', group: g, consumer: {maxAttempts: 2, backOffInitialInterval: 3600000, backOffMaxInterval: 3600000}}
  rabbit.bindings:
    in.consumer: {autoBindDlq: true, prefetch: 10}
    slow-in.consumer.prefetch: 10
"#;
    let recorder = |tx: mpsc::UnboundedSender<(u32, u32, Instant)>| {
        handler::incoming(move |inc| {
            let tx = tx.clone();
            async move {
                let i: Item = inc.decoded()?;
                let _ = tx.send((i.id, inc.attempt, Instant::now()));
                if i.id == 1 {
                    Err(HandlerError::retryable("flaky"))
                } else {
                    Ok(())
                }
            }
        })
    };
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (slow_tx, mut slow_rx) = mpsc::unbounded_channel();
    let app = env
        .app(yaml, |b| {
            b.listener("in", recorder(tx))
                .listener("slow-in", recorder(slow_tx))
                // The hour-long retry is still waiting at the end: abandon it at once, and
                // its message goes back to the queue.
                .shutdown_timeout(Duration::ZERO)
        })
        .await;

    // Not blocked: message 1 fails and waits an hour for its retry; message 2 is handled
    // meanwhile, so it is the next event, before any second attempt of message 1.
    let slow = format!("{}retry-slow", env.p);
    app.publisher().send(&slow, &item(1)).await.unwrap();
    let first = recv(&mut slow_rx).await;
    assert_eq!((first.0, first.1), (1, 1));
    app.publisher().send(&slow, &item(2)).await.unwrap();
    let after = recv(&mut slow_rx).await;
    assert_eq!(
        (after.0, after.1),
        (2, 1),
        "the other message did not wait for the retry"
    );

    // Counted and spaced: three attempts, each after its back-off, then the DLQ.
    let dest = format!("{}retry", env.p);
    app.publisher().send(&dest, &item(1)).await.unwrap();
    let mut failing = Vec::new();
    while failing.len() < 3 {
        failing.push(recv(&mut rx).await);
    }
    assert!(failing.iter().all(|f| f.0 == 1));
    assert_eq!(
        failing.iter().map(|s| s.1).collect::<Vec<_>>(),
        vec![1, 2, 3],
        "exactly maxAttempts deliveries"
    );
    // Lower bounds only: a loaded machine makes the gaps longer, never shorter.
    assert!(
        failing[1].2 - failing[0].2 >= Duration::from_millis(190),
        "first back-off"
    );
    assert!(
        failing[2].2 - failing[1].2 >= Duration::from_millis(390),
        "second back-off"
    );
    let mut dlq = env.subscribe(&format!("{dest}.g.dlq"), 1).await;
    let dead = next(&mut dlq).await;
    assert_eq!(
        dead.message()
            .headers
            .get("x-attempts")
            .and_then(HeaderValue::as_i64),
        Some(3)
    );
    dead.settler.settle(Settlement::Ack).await.unwrap();

    app.shutdown().await;
    // The abandoned retry's message is back in its queue, not lost.
    let mut queue = env.subscribe(&format!("{slow}.g"), 1).await;
    let back = next(&mut queue).await;
    assert_eq!(
        serde_json::from_slice::<Item>(&back.message().payload).unwrap(),
        item(1)
    );
    back.settler.settle(Settlement::Ack).await.unwrap();
}

/// A poison (undecodable) message goes to the DLQ with its reason; the consumer continues.
pub async fn poison_messages_go_to_the_dlq(env: &Env) {
    let yaml = "spring.cloud.stream:\n  bindings.in: {destination: '{p}poison', group: g}\n  rabbit.bindings.in.consumer.autoBindDlq: true\n";
    let (tx, mut rx) = mpsc::unbounded_channel();
    let app = env.app(yaml, |b| b.listener("in", reporter(tx))).await;
    let dest = format!("{}poison", env.p);
    app.publisher()
        .send_message(
            &dest,
            Message::new("{oops").with_content_type("application/json"),
        )
        .await
        .unwrap();
    app.publisher().send(&dest, &item(7)).await.unwrap();
    assert_eq!(recv(&mut rx).await, 7, "the consumer continues");
    let mut dlq = env.subscribe(&format!("{dest}.g.dlq"), 1).await;
    let dead = next(&mut dlq).await;
    let reason = dead
        .message()
        .headers
        .get_str("x-exception-message")
        .unwrap_or_default();
    assert!(reason.contains("cannot decode the payload"), "{reason}");
    dead.settler.settle(Settlement::Ack).await.unwrap();
    app.shutdown().await;
}

/// A `batchMode` binding (`enableBatching`): its listener takes lists of at most `batchSize`,
/// in queue order, a shorter one once no delivery came within `receiveTimeout`; a failed
/// batch has each of its messages dead-lettered with the batch's error.
pub async fn batches_are_assembled_in_order_and_dead_lettered_whole(env: &Env) {
    let yaml = "spring.cloud.stream:
  bindings.in: {destination: '{p}batch', group: g, consumer: {batchMode: true, autoStartup: false, maxAttempts: 1}}
  rabbit.bindings.in.consumer: {enableBatching: true, batchSize: 5, receiveTimeout: 200, autoBindDlq: true}
";
    let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u32>>();
    let h = handler::batch(move |items: Vec<Item>| {
        let tx = tx.clone();
        async move {
            let ids: Vec<u32> = items.iter().map(|i| i.id).collect();
            let failing = ids.contains(&99);
            let _ = tx.send(ids);
            if failing {
                return Err(HandlerError::fatal("batch refused"));
            }
            Ok(())
        }
    });
    let app = env.app(yaml, |b| b.listener("in", h)).await;
    let dest = format!("{}batch", env.p);
    for id in 0..12 {
        app.publisher().send(&dest, &item(id)).await.unwrap();
    }
    app.start("in").await.unwrap();
    let mut seen = Vec::new();
    let mut sizes = Vec::new();
    while seen.len() < 12 {
        let batch = recv(&mut rx).await;
        sizes.push(batch.len());
        seen.extend(batch);
    }
    assert_eq!(seen, (0..12).collect::<Vec<_>>(), "in queue order");
    assert_eq!(sizes[0], 5, "a full first batch: {sizes:?}");
    assert!(sizes.iter().all(|s| *s <= 5), "{sizes:?}");
    assert_eq!(*sizes.last().unwrap(), 2, "the short last one: {sizes:?}");

    for id in [98, 99] {
        app.publisher().send(&dest, &item(id)).await.unwrap();
    }
    let failed = recv(&mut rx).await;
    assert!(failed.contains(&99), "{failed:?}");
    let mut dlq = env.subscribe(&format!("{dest}.g.dlq"), 2).await;
    for _ in 0..failed.len() {
        let dead = next(&mut dlq).await;
        let reason = dead.message().headers.get_str("x-exception-message");
        assert_eq!(reason, Some("batch refused"));
        dead.settler.settle(Settlement::Ack).await.unwrap();
    }
    app.shutdown().await;
}

/// A batch binding whose queue is deleted while a batch waits for more: the batch it had is
/// handled, and the binding then knows its subscription ended (it recovers, rather than
/// waiting for ever on a consumer the broker cancelled).
pub async fn a_batch_binding_whose_queue_goes_while_a_batch_fills_recovers(env: &Env) {
    let yaml = "spring.cloud.stream:
  bindings.in: {destination: '{p}bgone', group: g, consumer: {batchMode: true}}
  rabbit.bindings.in.consumer: {enableBatching: true, batchSize: 10, receiveTimeout: 3000}
";
    let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u32>>();
    let h = handler::batch(move |items: Vec<Item>| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(items.iter().map(|i| i.id).collect());
        }
    });
    let app = env.app(yaml, |b| b.listener("in", h)).await;
    let dest = format!("{}bgone", env.p);
    app.publisher().send(&dest, &item(1)).await.unwrap();
    let queue = format!("{dest}.g");
    let deadline = Instant::now() + Duration::from_secs(10);
    while env.inspect(&queue).await.messages > 0 {
        assert!(
            Instant::now() < deadline,
            "the consumer never took the message"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut plan = plan_consumer(&env.config(yaml).binding("in"), "x").plan;
    plan.exchanges.clear();
    env.amqp().remove(&plan).await.unwrap();
    assert_eq!(recv(&mut rx).await, vec![1], "the short batch is handled");
    let deadline = Instant::now() + Duration::from_secs(10);
    while app.state("in") != Some(BindingState::Recovering) {
        assert!(
            Instant::now() < deadline,
            "the binding never saw its subscription end: {:?}",
            app.state("in")
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    app.shutdown().await;
}

/// No more than `prefetch` unsettled deliveries per consumer: the rest stay ready.
pub async fn prefetch_bounds_unsettled_deliveries(env: &Env) {
    let payloads: Vec<String> = (0..10).map(|i| i.to_string()).collect();
    let payloads: Vec<&str> = payloads.iter().map(String::as_str).collect();
    let queue = &env
        .seeded_queue(
            "spring.cloud.stream.bindings.in: {destination: '{p}pf', group: g}",
            &payloads,
        )
        .await;
    let mut sub = env.subscribe(queue, 3).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(next(&mut sub).await);
    }
    let info = env.inspect(queue).await;
    assert_eq!(info.messages, 7, "with prefetch 3, seven stay in the queue");
    for d in held {
        d.settler.settle(Settlement::Ack).await.unwrap();
    }
    for _ in 0..7 {
        next(&mut sub)
            .await
            .settler
            .settle(Settlement::Ack)
            .await
            .unwrap();
    }
    sub.cancel().await.unwrap();
}

/// With one consumer and `concurrency: 1`, messages are handled in publish order.
pub async fn order_is_kept_with_one_consumer(env: &Env) {
    let yaml = "spring.cloud.stream:\n  bindings.in: {destination: '{p}ord', group: g}\n  rabbit.bindings.in.consumer.prefetch: 20\n";
    let (tx, mut rx) = mpsc::unbounded_channel();
    let app = env.app(yaml, |b| b.listener("in", reporter(tx))).await;
    for id in 0..100 {
        app.publisher()
            .send(&format!("{}ord", env.p), &item(id))
            .await
            .unwrap();
    }
    assert_eq!(collect(&mut rx, 100).await, (0..100).collect::<Vec<_>>());
    app.shutdown().await;
}

/// A [`Pipeline`](binder_core::runtime::Pipeline) keeps many sends in flight from one task:
/// every send is confirmed, the confirms come back in send order, and one consumer handles
/// the messages in that order; `send_all` does the same in one call.
pub async fn pipelined_sends_are_confirmed_in_order(env: &Env) {
    let yaml = "spring.cloud.stream:\n  bindings.in: {destination: '{p}pipe', group: g}\n  bindings.out: {destination: '{p}pipe'}\n  rabbit.bindings.in.consumer.prefetch: 50\n";
    let (tx, mut rx) = mpsc::unbounded_channel();
    let app = env
        .app(yaml, |b| b.listener("in", reporter(tx)).output("out"))
        .await;
    let out = app.output("out").unwrap();
    let mut pipeline = out.pipeline(32);
    let mut confirms = Vec::new();
    for id in 0..300 {
        assert_eq!(pipeline.send(&item(id)).await.unwrap(), u64::from(id));
        assert!(pipeline.in_flight() <= 32, "the window holds");
        confirms.extend(pipeline.confirmed());
    }
    confirms.extend(pipeline.flush().await);
    assert_eq!(pipeline.in_flight(), 0);
    let seqs: Vec<u64> = confirms.iter().map(|c| c.seq).collect();
    assert_eq!(seqs, (0..300).collect::<Vec<_>>(), "confirms in send order");
    for c in &confirms {
        assert!(c.result.is_ok(), "send {} failed: {:?}", c.seq, c.result);
    }
    assert_eq!(collect(&mut rx, 300).await, (0..300).collect::<Vec<_>>());

    let more: Vec<Item> = (300..500).map(item).collect();
    assert_eq!(out.send_all(&more, 16).await.unwrap(), 200);
    assert_eq!(collect(&mut rx, 200).await, (300..500).collect::<Vec<_>>());
    app.shutdown().await;
}

/// Sends reach the broker in the order they start, also when a later one starts while
/// earlier ones still wait for the producer's first channel to open: here the first send
/// opens the channel and is confirmed while the next seven have only started, and a ninth
/// starts then; the queue holds them in start order.
pub async fn sends_keep_their_order_while_the_channel_opens(env: &Env) {
    let (consumer, producer) = env
        .bound(
            "spring.cloud.stream:\n  bindings.in: {destination: '{p}turns', group: g}\n",
            &[],
        )
        .await;
    // Kept with their outcome once done (a binder may confirm on the first poll).
    let send = |i: u32| maybe_done(producer.publish(Message::new(i.to_string()), None));
    let mut sends: Vec<_> = (0..8).map(send).collect();
    // Each polled once, in order; then only the first is driven to its confirm.
    for s in &mut sends {
        let _ = futures::poll!(s);
    }
    (&mut sends[0]).await;
    sends.push(send(8));
    let _ = futures::poll!(&mut sends[8]);
    futures::future::join_all(sends.iter_mut()).await;
    for s in &mut sends {
        Pin::new(s).take_output().expect("done").unwrap();
    }
    let mut sub = env.subscribe_bound(&*consumer).await;
    let mut texts = Vec::new();
    for _ in 0..9 {
        let d = next(&mut sub).await;
        texts.push(String::from_utf8(d.message().payload.to_vec()).unwrap());
        d.settler.settle(Settlement::Ack).await.unwrap();
    }
    assert_eq!(texts, (0..9).map(|i| i.to_string()).collect::<Vec<_>>());
    sub.cancel().await.unwrap();
}

/// A consumer closed with unsettled deliveries: they are redelivered to another member.
pub async fn unacked_messages_of_a_closed_consumer_are_redelivered(env: &Env) {
    let (consumer, _producer) = env
        .bound(
            "spring.cloud.stream:\n  bindings.in: {destination: '{p}crash', group: g}\n  rabbit.bindings.in.consumer.prefetch: 10\n",
            &["0", "1", "2", "3", "4"],
        )
        .await;
    let mut crashing = env.subscribe_bound(&*consumer).await;
    let mut held = Vec::new();
    for _ in 0..5 {
        held.push(next(&mut crashing).await);
    }
    // The consumer dies: its subscription and unsettled deliveries are dropped unsettled.
    drop(held);
    drop(crashing);
    let mut survivor = env.subscribe_bound(&*consumer).await;
    let mut texts = BTreeSet::new();
    for _ in 0..5 {
        let d = next(&mut survivor).await;
        assert!(d.redelivered, "redelivered after the crash");
        texts.insert(String::from_utf8(d.message().payload.to_vec()).unwrap());
        d.settler.settle(Settlement::Ack).await.unwrap();
    }
    assert_eq!(texts.len(), 5);
    survivor.cancel().await.unwrap();
}

/// Consumers that die without cancelling (a task aborted, a panic) give their deliveries back
/// and leave the binder working for everyone else on it: after each death, a confirmed publish
/// on the same binder succeeds and the next consumer gets every message again. Many deaths,
/// because the failure this guards against was a race: on RabbitMQ, lapin's cancel of a
/// dropped consumer raced the close of its channel, and a lost race (one drop in a few
/// hundred) failed the whole shared connection.
pub async fn crashed_consumers_leave_the_binder_working(env: &Env) {
    let seeded = ["0", "1", "2", "3", "4"];
    // One consumer per message (prefetch 1) for the ones that die, prefetch 10 for the
    // survivor: two bindings of the same group.
    let (crashing_consumer, producer) = env
        .bound(
            "spring.cloud.stream:\n  bindings.in: {destination: '{p}drops', group: g}\n  rabbit.bindings.in.consumer.prefetch: 1\n",
            &seeded,
        )
        .await;
    let (survivor_consumer, _) = env
        .bound(
            "spring.cloud.stream:\n  bindings.in: {destination: '{p}drops', group: g}\n  rabbit.bindings.in.consumer.prefetch: 10\n",
            &[],
        )
        .await;
    for round in 0..500 {
        // All dying at once: five races per round.
        let mut crashing = Vec::new();
        for _ in 0..seeded.len() {
            let mut sub = env.subscribe_bound(&*crashing_consumer).await;
            let held = next(&mut sub).await;
            crashing.push((sub, held));
        }
        drop(crashing);
        let probe = format!("probe {round}");
        producer
            .publish(Message::new(probe.clone()), None)
            .await
            .unwrap_or_else(|e| panic!("round {round}: publish after a consumer died: {e}"));
        let mut survivor = env.subscribe_bound(&*survivor_consumer).await;
        // All six are held before any is settled: a message requeued at once could come
        // back to this very subscription before the others.
        let mut held = Vec::new();
        for _ in 0..=seeded.len() {
            held.push(next(&mut survivor).await);
        }
        let mut texts = BTreeSet::new();
        for d in held {
            let text = String::from_utf8(d.message().payload.to_vec()).unwrap();
            if text == probe {
                d.settler.settle(Settlement::Ack).await.unwrap();
            } else {
                assert!(d.redelivered, "round {round}: `{text}` redelivered");
                d.settler.settle(Settlement::Requeue).await.unwrap();
            }
            texts.insert(text);
        }
        let mut expected: BTreeSet<String> = seeded.iter().map(|s| s.to_string()).collect();
        expected.insert(probe);
        assert_eq!(texts, expected, "round {round}");
        survivor.cancel().await.unwrap();
    }
}

/// An auto-ack subscription cancelled while deliveries are on their way: the broker counts
/// them consumed once sent, so they cannot go back to the queue; `next` hands out every one
/// already received, then ends. Nothing is lost and nothing is delivered twice.
pub async fn cancelled_auto_ack_subscriptions_hand_out_what_they_received(env: &Env) {
    let payloads: Vec<String> = (0..200).map(|i| i.to_string()).collect();
    let refs: Vec<&str> = payloads.iter().map(String::as_str).collect();
    let queue = &env
        .seeded_queue(
            "spring.cloud.stream.bindings.in: {destination: '{p}noackcancel', group: g}",
            &refs,
        )
        .await;
    let mut sub = env
        .amqp()
        .subscribe(binder_amqp::SubscriptionSpec {
            auto_ack: true,
            ..binder_amqp::SubscriptionSpec::manual_ack(queue.as_str(), 0)
        })
        .await
        .unwrap();
    let mut seen = vec![next(&mut sub).await];
    sub.cancel().await.unwrap();
    while let Some(d) = tokio::time::timeout(crate::kit::WAIT, sub.next())
        .await
        .expect("after cancel, next does not wait")
    {
        seen.push(d);
    }
    let mut texts = BTreeSet::new();
    for d in &seen {
        let text = String::from_utf8(d.message().payload.to_vec()).unwrap();
        assert!(texts.insert(text.clone()), "`{text}` delivered twice");
    }
    let left = env.inspect(queue).await.messages as usize;
    assert_eq!(
        seen.len() + left,
        payloads.len(),
        "{} handed out and {left} still queued",
        seen.len()
    );
}

/// A producer closed after N confirmed sends: all N are consumable.
pub async fn confirmed_messages_survive_the_producer(env: &Env) {
    let yaml = "spring.cloud.stream.bindings.out: {destination: '{p}conf', producer: {requiredGroups: [g]}}";
    let app = env.app(yaml, |b| b.output("out")).await;
    let out = app.output("out").unwrap();
    for id in 0..50 {
        out.send(&item(id)).await.unwrap();
    }
    app.shutdown().await;
    assert_eq!(env.inspect(&format!("{}conf.g", env.p)).await.messages, 50);
}

/// Consumers joining and leaving a group while messages flow lose nothing.
pub async fn concurrent_bind_and_unbind_lose_nothing(env: &Env) {
    let yaml = "spring.cloud.stream.bindings:\n  in: {destination: '{p}churn', group: g}\n  out: {destination: '{p}churn', producer: {requiredGroups: [g]}}\n";
    let (tx, mut rx) = mpsc::unbounded_channel();
    let producer = env
        .app(yaml, |b| {
            b.output("out").listener("in", reporter(tx.clone()))
        })
        .await;
    let out = producer.output("out").unwrap();
    let send = tokio::spawn(async move {
        for id in 0..200 {
            out.send(&item(id)).await.unwrap();
        }
    });
    for _ in 0..5 {
        let app = env
            .app(
                "spring.cloud.stream.bindings.in: {destination: '{p}churn', group: g}",
                |b| b.listener("in", reporter(tx.clone())),
            )
            .await;
        tokio::task::yield_now().await;
        app.shutdown().await;
    }
    send.await.unwrap();
    let mut seen = BTreeSet::new();
    while seen.len() < 200 {
        seen.insert(recv(&mut rx).await);
    }
    producer.shutdown().await;
}

/// Pause keeps the subscription but takes nothing; resume takes again; stop leaves messages
/// in the queue; start takes them.
pub async fn pause_resume_stop_start(env: &Env) {
    let yaml = "spring.cloud.stream.bindings:\n  in: {destination: '{p}life', group: g}\n  out: {destination: '{p}life'}\n";
    let (tx, mut rx) = mpsc::unbounded_channel();
    let app = env
        .app(yaml, |b| b.listener("in", reporter(tx)).output("out"))
        .await;
    let out = app.output("out").unwrap();
    app.pause("in").await.unwrap();
    out.send(&item(1)).await.unwrap();
    app.resume("in").await.unwrap();
    assert_eq!(recv(&mut rx).await, 1);
    app.stop("in").await.unwrap();
    out.send(&item(2)).await.unwrap();
    assert_eq!(env.inspect(&format!("{}life.g", env.p)).await.messages, 1);
    app.start("in").await.unwrap();
    assert_eq!(recv(&mut rx).await, 2);
    app.shutdown().await;
}

/// With `acknowledgeMode: NONE` the broker ignores prefetch and counts a message consumed once
/// sent, so a paused binding that kept its consumer would have the whole queue streamed into
/// the process while it waits, and lost if it were then stopped. A paused auto-ack binding
/// gives its consumer up instead: what is published meanwhile stays in the queue.
pub async fn paused_auto_ack_bindings_leave_messages_queued(env: &Env) {
    let yaml = "spring.cloud.stream:\n  bindings:\n    in: {destination: '{p}noack', group: g}\n    out: {destination: '{p}noack'}\n  rabbit.bindings.in.consumer.acknowledgeMode: NONE\n";
    let (tx, mut rx) = mpsc::unbounded_channel();
    let app = env
        .app(yaml, |b| b.listener("in", reporter(tx)).output("out"))
        .await;
    let out = app.output("out").unwrap();
    out.send(&item(0)).await.unwrap();
    assert_eq!(recv(&mut rx).await, 0);
    app.pause("in").await.unwrap();
    for id in 1..=20 {
        out.send(&item(id)).await.unwrap();
    }
    let queue = format!("{}noack.g", env.p);
    let info = env.inspect(&queue).await;
    assert_eq!(
        (info.messages, info.consumers),
        (20, 0),
        "paused: the messages wait in the queue, with no consumer"
    );
    app.stop("in").await.unwrap();
    assert_eq!(env.inspect(&queue).await.messages, 20, "a stop loses none");
    app.start("in").await.unwrap();
    let mut got = BTreeSet::new();
    for _ in 1..=20 {
        got.insert(recv(&mut rx).await);
    }
    assert_eq!(got, (1..=20).collect());
    app.pause("in").await.unwrap();
    out.send(&item(21)).await.unwrap();
    app.resume("in").await.unwrap();
    assert_eq!(recv(&mut rx).await, 21);
    app.shutdown().await;
}

/// A handler that reports each id and holds ids below `hold` until `release` is notified.
fn holding_reporter(
    tx: mpsc::UnboundedSender<u32>,
    hold: u32,
    release: Arc<tokio::sync::Notify>,
) -> impl binder_core::runtime::Handler {
    handler::payload(move |i: Item| {
        let (tx, release) = (tx.clone(), release.clone());
        async move {
            let held = release.notified();
            let _ = tx.send(i.id);
            if i.id < hold {
                held.await;
            }
        }
    })
}

/// Releases held handlers until the returned task is aborted.
fn keep_releasing(release: Arc<tokio::sync::Notify>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            release.notify_waiters();
            tokio::task::yield_now().await;
        }
    })
}

/// `acknowledgeMode: NONE` with every handler slot busy and deliveries waiting in the
/// subscription: a pause keeps what was already received (the broker counts it consumed)
/// and resume hands it out first. Every message is handled exactly once.
pub async fn auto_ack_deliveries_survive_a_pause_with_busy_handlers(env: &Env) {
    let yaml = "spring.cloud.stream:\n  bindings:\n    in: {destination: '{p}noackbusy', group: g, consumer: {concurrency: 2}}\n    out: {destination: '{p}noackbusy'}\n  rabbit.bindings.in.consumer.acknowledgeMode: NONE\n";
    let (tx, mut rx) = mpsc::unbounded_channel();
    let release = Arc::new(tokio::sync::Notify::new());
    let app = env
        .app(yaml, |b| {
            b.listener("in", holding_reporter(tx, 2, release.clone()))
                .output("out")
        })
        .await;
    let out = app.output("out").unwrap();
    for id in 0..40 {
        out.send(&item(id)).await.unwrap();
    }
    // Both slots are taken by 0 and 1; the loop holds the next delivery, the subscription
    // the rest of what the broker sent.
    let mut seen = vec![recv(&mut rx).await, recv(&mut rx).await];
    app.pause("in").await.unwrap();
    for id in 40..50 {
        out.send(&item(id)).await.unwrap();
    }
    let releaser = keep_releasing(release);
    app.resume("in").await.unwrap();
    while seen.len() < 50 {
        seen.push(recv(&mut rx).await);
    }
    app.shutdown().await;
    releaser.abort();
    seen.sort_unstable();
    assert_eq!(
        seen,
        (0..50).collect::<Vec<_>>(),
        "each handled exactly once"
    );
    assert!(rx.try_recv().is_err(), "nothing handled twice");
}

/// `acknowledgeMode: NONE`: deliveries already received when a paused binding shuts down are
/// handled before the shutdown completes; the rest stay in the queue.
pub async fn auto_ack_deliveries_received_are_handled_at_shutdown(env: &Env) {
    let yaml = "spring.cloud.stream:\n  bindings:\n    in: {destination: '{p}noackstop', group: g}\n    out: {destination: '{p}noackstop'}\n  rabbit.bindings.in.consumer.acknowledgeMode: NONE\n";
    let (tx, mut rx) = mpsc::unbounded_channel();
    let release = Arc::new(tokio::sync::Notify::new());
    let app = env
        .app(yaml, |b| {
            b.listener("in", holding_reporter(tx, 1, release.clone()))
                .output("out")
        })
        .await;
    let out = app.output("out").unwrap();
    for id in 0..30 {
        out.send(&item(id)).await.unwrap();
    }
    assert_eq!(recv(&mut rx).await, 0);
    app.pause("in").await.unwrap();
    let releaser = keep_releasing(release);
    let report = app.shutdown().await;
    releaser.abort();
    assert!(report.drained);
    let mut handled = vec![0];
    while let Ok(id) = rx.try_recv() {
        handled.push(id);
    }
    let count = handled.len();
    handled.sort_unstable();
    handled.dedup();
    assert_eq!(handled.len(), count, "none handled twice");
    let left = env.inspect(&format!("{}noackstop.g", env.p)).await.messages as usize;
    assert_eq!(
        handled.len() + left,
        30,
        "{} handled, {left} still queued",
        handled.len()
    );
}

/// Shutdown with handlers in flight: they finish and are settled; the rest stay queued.
pub async fn graceful_shutdown_loses_nothing(env: &Env) {
    let yaml = "spring.cloud.stream:\n  bindings.in: {destination: '{p}drain', group: g, consumer: {concurrency: 2}}\n  rabbit.bindings.in.consumer.prefetch: 10\n";
    let started = Arc::new(AtomicU32::new(0));
    let finished = Arc::new(AtomicU32::new(0));
    let (tx, mut rx) = mpsc::unbounded_channel();
    let release = Arc::new(tokio::sync::Notify::new());
    let (s, f, r) = (started.clone(), finished.clone(), release.clone());
    let h = handler::payload(move |_: Item| {
        let (s, f, r, tx) = (s.clone(), f.clone(), r.clone(), tx.clone());
        async move {
            s.fetch_add(1, Ordering::SeqCst);
            let _ = tx.send(());
            r.notified().await;
            f.fetch_add(1, Ordering::SeqCst);
        }
    });
    let app = env.app(yaml, |b| b.listener("in", h)).await;
    for id in 0..6 {
        app.publisher()
            .send(&format!("{}drain", env.p), &item(id))
            .await
            .unwrap();
    }
    recv(&mut rx).await;
    recv(&mut rx).await;
    let shutdown = tokio::spawn(app.shutdown());
    // Release the two in flight once shutdown has begun (and keep releasing any late ones).
    let releaser = tokio::spawn(async move {
        loop {
            release.notify_waiters();
            tokio::task::yield_now().await;
        }
    });
    let report = tokio::time::timeout(crate::kit::WAIT, shutdown)
        .await
        .expect("shutdown finished")
        .unwrap();
    releaser.abort();
    assert!(report.drained);
    let done = finished.load(Ordering::SeqCst);
    assert_eq!(
        done,
        started.load(Ordering::SeqCst),
        "every started handler finished"
    );
    // The kit's binder is not the app's to close: the subscription's deliveries go back to
    // the queue as it is dropped, which a broker such as RabbitMQ completes on its own
    // time (the requeues and the count travel on different channels).
    let queue = format!("{}drain.g", env.p);
    let deadline = Instant::now() + crate::kit::WAIT;
    let mut left = env.inspect(&queue).await.messages;
    while done + left < 6 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        left = env.inspect(&queue).await.messages;
    }
    assert_eq!(
        done + left,
        6,
        "finished ones were acked, the others are back in the queue"
    );
}

/// Declaring the same topology twice declares nothing new; a conflicting redeclaration is an
/// error that names the queue and the argument.
pub async fn topology_is_idempotent_and_conflicts_are_clear(env: &Env) {
    let base = env.config("spring.cloud.stream.bindings.in: {destination: '{p}topo', group: g}");
    let plan = plan_consumer(&base.binding("in"), "x").plan;
    env.amqp().provision(&plan).await.unwrap();
    env.amqp().provision(&plan).await.unwrap();
    let conflicting = env.config(
        "spring.cloud.stream:\n  bindings.in: {destination: '{p}topo', group: g}\n  rabbit.bindings.in.consumer.ttl: 1000\n",
    );
    let err = env
        .amqp()
        .provision(&plan_consumer(&conflicting.binding("in"), "x").plan)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains(&format!("{}topo.g", env.p)), "{err}");
    assert!(err.contains("x-message-ttl"), "{err}");
    let producer = plan_producer(&base.binding("in"));
    env.amqp().provision(&producer.plan).await.unwrap();
}

/// The same YAML runs unchanged on every binder: a processor chain.
pub async fn one_yaml_runs_on_every_binder(env: &Env) {
    let yaml = r#"
spring.cloud.stream:
  bindings:
    orders: {destination: '{p}yaml-orders', group: billing, consumer: {maxAttempts: 2, backOffInitialInterval: 10}}
    invoices: {destination: '{p}yaml-invoices'}
    audit: {destination: '{p}yaml-invoices', group: audit}
  rabbit.bindings:
    orders.consumer: {autoBindDlq: true, prefetch: 5, bindingRoutingKey: "order.#"}
    invoices.producer.routingKeyExpression: "'invoice.' + payload.kind"
"#;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let app = env
        .app(yaml, |b| {
            b.processor(
                "orders",
                "invoices",
                handler::payload(|i: Item| async move {
                    Reply(Item {
                        id: i.id * 10,
                        kind: "paid".into(),
                    })
                }),
            )
            .listener("audit", reporter(tx))
        })
        .await;
    // The orders binding only takes `order.#` keys: send through an output with such a key.
    let routed = env
        .app(
            "spring.cloud.stream:\n  bindings.o: {destination: '{p}yaml-orders'}\n  rabbit.bindings.o.producer.routingKey: order.new\n",
            |b| b.output("o"),
        )
        .await;
    for id in 1..=3 {
        routed.output("o").unwrap().send(&item(id)).await.unwrap();
    }
    let mut got = collect(&mut rx, 3).await;
    got.sort_unstable();
    assert_eq!(got, vec![10, 20, 30]);
    routed.shutdown().await;
    app.shutdown().await;
}
