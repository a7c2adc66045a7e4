//! The runtime on the embedded binder: handlers, groups, routing, retries, dead letters,
//! lifecycle, shutdown, tracing. Each test has its own broker.

mod common;

use common::{app, next, recv, watch_queue};

use std::sync::Arc;
use std::time::Duration;

use binder_core::runtime::{BindingState, FailureAction, Reply, handler};
use binder_core::{HeaderValue, Message};
use binder_embedded::engine::{Broker, ConsumeOptions};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Order {
    id: u32,
    #[serde(default)]
    fail: bool,
}

/// A handler that reports each order it sees.
fn recorder(tx: mpsc::UnboundedSender<Order>) -> impl binder_core::runtime::Handler {
    handler::payload(move |o: Order| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(o);
        }
    })
}

#[tokio::test]
async fn groups_compete_and_each_group_gets_every_message_once() {
    let broker = Broker::new();
    let yaml = "spring.cloud.stream.bindings:\n  in: {destination: orders, group: billing}\n  out: {destination: orders}\n";
    let yaml_audit = "spring.cloud.stream.bindings.in: {destination: orders, group: audit}\n";
    let (tx1, mut rx1) = mpsc::unbounded_channel();
    let (tx2, mut rx2) = mpsc::unbounded_channel();
    let (tx3, mut rx3) = mpsc::unbounded_channel();
    let billing_a = app(&broker, yaml)
        .listener("in", recorder(tx1))
        .output("out")
        .start()
        .await
        .unwrap();
    let billing_b = app(&broker, yaml_audit.replace("audit", "billing").as_str())
        .listener("in", recorder(tx2))
        .start()
        .await
        .unwrap();
    let audit = app(&broker, yaml_audit)
        .listener("in", recorder(tx3))
        .start()
        .await
        .unwrap();
    let out = billing_a.output("out").unwrap();
    for id in 0..20 {
        out.send(&Order { id, fail: false }).await.unwrap();
    }
    let mut billing = Vec::new();
    let mut audited = Vec::new();
    while billing.len() < 20 {
        tokio::select! {
            o = recv(&mut rx1) => billing.push(o.id),
            o = recv(&mut rx2) => billing.push(o.id),
        }
    }
    while audited.len() < 20 {
        audited.push(recv(&mut rx3).await.id);
    }
    billing.sort();
    audited.sort();
    assert_eq!(
        billing,
        (0..20).collect::<Vec<_>>(),
        "the group got each once"
    );
    assert_eq!(audited, (0..20).collect::<Vec<_>>());
    assert!(
        rx1.try_recv().is_err() && rx2.try_recv().is_err(),
        "no duplicates"
    );
    for a in [billing_a, billing_b, audit] {
        assert!(a.shutdown().await.drained);
    }
}

#[tokio::test]
async fn anonymous_consumers_each_get_every_message() {
    let broker = Broker::new();
    let yaml = "spring.cloud.stream.bindings.in.destination: ticks\n";
    let (tx1, mut rx1) = mpsc::unbounded_channel();
    let (tx2, mut rx2) = mpsc::unbounded_channel();
    let a = app(&broker, yaml)
        .listener("in", recorder(tx1))
        .start()
        .await
        .unwrap();
    let b = app(&broker, yaml)
        .listener("in", recorder(tx2))
        .start()
        .await
        .unwrap();
    let publisher = a.publisher();
    for id in 0..5 {
        publisher
            .send("ticks", &Order { id, fail: false })
            .await
            .unwrap();
    }
    for rx in [&mut rx1, &mut rx2] {
        let ids: Vec<u32> = futures_collect(rx, 5).await;
        assert_eq!(ids, vec![0, 1, 2, 3, 4]);
    }
    a.shutdown().await;
    b.shutdown().await;
}

async fn futures_collect(rx: &mut mpsc::UnboundedReceiver<Order>, n: usize) -> Vec<u32> {
    let mut out = Vec::new();
    while out.len() < n {
        out.push(recv(rx).await.id);
    }
    out
}

#[tokio::test]
async fn binding_routing_keys_select_and_expressions_route() {
    let broker = Broker::new();
    let yaml = r#"
spring.cloud.stream:
  bindings:
    created-in: {destination: events, group: c}
    out: {destination: events}
  rabbit.bindings:
    created-in.consumer.bindingRoutingKey: "order.created.*"
    out.producer.routingKeyExpression: "'order.' + headers['type'] + '.' + payload.id"
"#;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let running = app(&broker, yaml)
        .listener("created-in", recorder(tx))
        .output("out")
        .start()
        .await
        .unwrap();
    let out = running.output("out").unwrap();
    for (id, kind) in [(1, "created"), (2, "cancelled"), (3, "created")] {
        let m = Message::new(serde_json::to_vec(&Order { id, fail: false }).unwrap())
            .with_header("type", kind);
        out.send_message(m).await.unwrap();
    }
    assert_eq!(futures_collect(&mut rx, 2).await, vec![1, 3]);
    let err = out.send_message(Message::new("{}")).await.unwrap_err();
    assert!(
        err.to_string().contains("header `type` is missing"),
        "{err}"
    );
    running.shutdown().await;
}

/// Partition keys hash as Java hashes what Spring would see: a JSON integer is an `Integer`
/// (or a `Long` beyond its range), a fraction a `Double`, a string a `String`, an `i64`
/// header a `Long`. The expected partitions of 5 are `jshell`'s, with Spring's selector.
#[tokio::test]
async fn partition_keys_hash_as_java_types() {
    let broker = Broker::new();
    let yaml = r#"
spring.cloud.stream.bindings:
  out:
    destination: parts
    producer: {partitionKeyExpression: payload.id, partitionCount: 5, requiredGroups: [g]}
  by-header:
    destination: hparts
    producer: {partitionKeyExpression: "headers['k']", partitionCount: 5, requiredGroups: [g]}
"#;
    let running = app(&broker, yaml)
        .output("out")
        .output("by-header")
        .start()
        .await
        .unwrap();
    let out = running.output("out").unwrap();
    // (key, Java type and partition): Integer 1 → 1, Integer 7 → 2, Integer -3 → 3,
    // Long 4294967298 → 3, Double 2.5 → 3, Boolean true → 1, String "x7" → 0, String "1" → 4.
    let keys = [
        ("1", 1),
        ("7", 2),
        ("-3", 3),
        ("4294967298", 3),
        ("2.5", 3),
        ("true", 1),
        (r#""x7""#, 0),
        (r#""1""#, 4),
    ];
    let mut watches: Vec<_> = (0..5)
        .map(|n| watch_queue(&broker, &format!("parts.g-{n}")))
        .collect();
    for (key, partition) in keys {
        out.send_message(Message::new(format!(r#"{{"id":{key}}}"#)))
            .await
            .unwrap();
        let d = next(&mut watches[partition].consumer).await;
        assert_eq!(
            d.message().payload,
            format!(r#"{{"id":{key}}}"#).as_bytes(),
            "key {key} on partition {partition}"
        );
    }
    for w in &mut watches {
        assert!(common::ready(&mut w.consumer).is_empty());
    }
    let err = out
        .send_message(Message::new(r#"{"id":null}"#))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("null"), "{err}");

    // An `i64` header is a `Long`: -1 hashes to 0, partition 0 (an `Integer` -1 would hash to
    // -1, partition 1); 9 hashes to 9, partition 4 of 5.
    let by_header = running.output("by-header").unwrap();
    let mut watches: Vec<_> = (0..5)
        .map(|n| watch_queue(&broker, &format!("hparts.g-{n}")))
        .collect();
    for (k, partition) in [(-1i64, 0), (9, 4)] {
        by_header
            .send_message(Message::new("h").with_header("k", k))
            .await
            .unwrap();
        let d = next(&mut watches[partition].consumer).await;
        assert_eq!(d.message().headers.get("k"), Some(&HeaderValue::I64(k)));
    }
    let err = by_header
        .send_message(Message::new("h").with_header("k", HeaderValue::Void))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("null"), "{err}");
    // The engine delivers before it confirms: no partition holds anything more.
    for w in &mut watches {
        assert!(common::ready(&mut w.consumer).is_empty());
    }
    running.shutdown().await;
}

#[tokio::test]
async fn a_bad_expression_and_unused_bindings_fail_startup_together() {
    let broker = Broker::new();
    let yaml = r#"
spring.cloud.stream:
  bindings:
    out: {destination: d, producer: {partitionKeyExpression: "headers[type]", partitionCount: 2}}
    forgotten: {destination: x}
"#;
    let err = app(&broker, yaml).output("out").start().await.unwrap_err();
    let text = err.to_string();
    assert_eq!(err.problems.len(), 2, "{text}");
    assert!(
        text.contains("binding `forgotten` is configured but no listener or output uses it"),
        "{text}"
    );
    assert!(
        text.contains("binding `out`: partitionKeyExpression: invalid expression"),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn retries_back_off_without_blocking_other_messages_then_republish_to_the_dlq() {
    let broker = Broker::new();
    let yaml = r#"
spring.cloud.stream:
  bindings:
    in: {destination: payments, group: ledger, consumer: {maxAttempts: 3, backOffInitialInterval: 1000, backOffMultiplier: 2.0}}
  # Prefetch bounds what can flow while a message waits for its retry.
  rabbit.bindings.in.consumer: {autoBindDlq: true, prefetch: 10}
"#;
    let (tx, mut rx) = mpsc::unbounded_channel::<(u32, u32, tokio::time::Instant)>();
    let h = handler::incoming(move |inc| {
        let tx = tx.clone();
        async move {
            let order: Order = inc.payload()?;
            let _ = tx.send((order.id, inc.attempt, tokio::time::Instant::now()));
            if order.fail {
                Err(binder_core::runtime::HandlerError::retryable(
                    "card declined",
                ))
            } else {
                Ok(())
            }
        }
    });
    let (failures_tx, mut failures) = mpsc::unbounded_channel();
    let running = app(&broker, yaml)
        .listener("in", h)
        .on_error(move |f| {
            let _ = failures_tx.send((f.attempts, f.action));
        })
        .start()
        .await
        .unwrap();
    let mut dlq = watch_queue(&broker, "payments.ledger.dlq");
    let p = running.publisher();
    p.send("payments", &Order { id: 1, fail: true })
        .await
        .unwrap();
    p.send("payments", &Order { id: 2, fail: false })
        .await
        .unwrap();

    let mut seen = Vec::new();
    while seen.len() < 4 {
        seen.push(recv(&mut rx).await);
    }
    let failing: Vec<&(u32, u32, tokio::time::Instant)> =
        seen.iter().filter(|s| s.0 == 1).collect();
    assert_eq!(
        failing.len(),
        3,
        "exactly maxAttempts deliveries to the handler"
    );
    assert_eq!(
        failing.iter().map(|s| s.1).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert_eq!(failing[1].2 - failing[0].2, Duration::from_millis(1000));
    assert_eq!(failing[2].2 - failing[1].2, Duration::from_millis(2000));
    let good = seen.iter().find(|s| s.0 == 2).unwrap();
    assert!(
        good.2 < failing[1].2,
        "the good message did not wait for the retries"
    );

    let dead = next(&mut dlq.consumer).await;
    let h = &dead.message().headers;
    assert_eq!(h.get_str("x-exception-message"), Some("card declined"));
    assert!(h.get_str("x-exception-stacktrace").is_some());
    assert_eq!(h.get_str("x-original-exchange"), Some("payments"));
    assert_eq!(h.get_str("x-original-routingKey"), Some("payments"));
    assert_eq!(h.get("x-attempts"), Some(&HeaderValue::I64(3)));
    assert_eq!(failures.recv().await, Some((3, FailureAction::Republished)));
    let report = running.shutdown().await;
    assert!(report.drained);
    assert_eq!(
        broker.queue_counts("payments.ledger"),
        Some((0, 0)),
        "nothing left unsettled"
    );
}

#[tokio::test]
async fn without_republish_the_broker_dead_letters_rejected_messages() {
    let broker = Broker::new();
    let yaml = r#"
spring.cloud.stream:
  bindings.in: {destination: jobs, group: w, consumer: {maxAttempts: 1}}
  rabbit.bindings.in.consumer: {autoBindDlq: true, republishToDlq: false}
"#;
    let h = handler::payload(|_: Order| async {
        Err::<(), _>(binder_core::runtime::HandlerError::fatal("bad job"))
    });
    let running = app(&broker, yaml).listener("in", h).start().await.unwrap();
    let mut dlq = watch_queue(&broker, "jobs.w.dlq");
    running
        .publisher()
        .send("jobs", &Order { id: 9, fail: true })
        .await
        .unwrap();
    let dead = next(&mut dlq.consumer).await;
    let death = match dead.message().headers.get("x-death") {
        Some(HeaderValue::Array(items)) => items[0].clone(),
        other => panic!("no x-death: {other:?}"),
    };
    let HeaderValue::Table(t) = death else {
        panic!()
    };
    assert_eq!(t.get_str("reason"), Some("rejected"));
    assert_eq!(t.get_str("queue"), Some("jobs.w"));
    assert!(dead.message().headers.get("x-exception-message").is_none());
    running.shutdown().await;
}

#[tokio::test]
async fn poison_messages_and_panics_go_to_the_dlq_and_the_service_keeps_running() {
    let broker = Broker::new();
    let yaml = r#"
spring.cloud.stream:
  bindings.in: {destination: orders, group: svc, consumer: {backOffInitialInterval: 10, backOffMaxInterval: 20}}
  rabbit.bindings.in.consumer.autoBindDlq: true
"#;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let h = handler::payload(move |o: Order| {
        let tx = tx.clone();
        async move {
            if o.id == 13 {
                panic!("unlucky order");
            }
            let _ = tx.send(o);
        }
    });
    let running = app(&broker, yaml).listener("in", h).start().await.unwrap();
    let mut dlq = watch_queue(&broker, "orders.svc.dlq");
    let p = running.publisher();
    p.send_message(
        "orders",
        Message::new("{not json").with_content_type("application/json"),
    )
    .await
    .unwrap();
    let dead = next(&mut dlq.consumer).await;
    let reason = dead
        .message()
        .headers
        .get_str("x-exception-message")
        .unwrap()
        .to_owned();
    assert!(
        reason.contains("cannot decode the payload as `runtime::Order`"),
        "{reason}"
    );
    assert_eq!(
        dead.message().headers.get("x-attempts"),
        Some(&HeaderValue::I64(1)),
        "decode errors are not retried"
    );

    // Valid JSON, but gzip-encoded by its header: nothing undoes that, so it is refused.
    let mut gzipped = Message::new(r#"{"id":1}"#).with_content_type("application/json");
    gzipped.properties.content_encoding = Some("gzip".into());
    p.send_message("orders", gzipped).await.unwrap();
    let dead = next(&mut dlq.consumer).await;
    let reason = dead
        .message()
        .headers
        .get_str("x-exception-message")
        .unwrap();
    assert!(reason.contains("content-encoding `gzip`"), "{reason}");
    assert_eq!(
        dead.message().headers.get("x-attempts"),
        Some(&HeaderValue::I64(1))
    );

    p.send(
        "orders",
        &Order {
            id: 13,
            fail: false,
        },
    )
    .await
    .unwrap();
    let dead = tokio::time::timeout(Duration::from_secs(20), dlq.consumer.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(
        dead.message()
            .headers
            .get_str("x-exception-message")
            .unwrap()
            .contains("handler panicked: unlucky order")
    );

    p.send(
        "orders",
        &Order {
            id: 14,
            fail: false,
        },
    )
    .await
    .unwrap();
    assert_eq!(recv(&mut rx).await.id, 14, "still running");
    running.shutdown().await;
}

#[tokio::test]
async fn requeue_rejected_puts_failures_back() {
    let broker = Broker::new();
    let yaml = r#"
spring.cloud.stream:
  bindings.in: {destination: q, group: g, consumer: {maxAttempts: 1}}
  rabbit.bindings.in.consumer.requeueRejected: true
"#;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let h = handler::incoming(move |inc| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(inc.redelivered);
            if inc.redelivered {
                Ok(())
            } else {
                Err(binder_core::runtime::HandlerError::retryable("first time"))
            }
        }
    });
    let running = app(&broker, yaml).listener("in", h).start().await.unwrap();
    running.publisher().send("q", &1).await.unwrap();
    assert!(!recv(&mut rx).await);
    assert!(recv(&mut rx).await, "requeued and redelivered");
    running.shutdown().await;
}

#[tokio::test]
async fn concurrency_runs_handlers_in_parallel_up_to_the_limit() {
    let broker = Broker::new();
    let yaml = "spring.cloud.stream:\n  bindings.in: {destination: work, group: g, consumer: {concurrency: 3}}\n  rabbit.bindings.in.consumer.prefetch: 10\n";
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let (tx, mut rx) = mpsc::unbounded_channel();
    let g = gate.clone();
    let h = handler::payload(move |o: Order| {
        let (tx, g) = (tx.clone(), g.clone());
        async move {
            let _ = tx.send(o.id);
            let _permit = g.acquire().await.unwrap();
        }
    });
    let running = app(&broker, yaml).listener("in", h).start().await.unwrap();
    for id in 0..6 {
        running
            .publisher()
            .send("work", &Order { id, fail: false })
            .await
            .unwrap();
    }
    let mut started = Vec::new();
    for _ in 0..3 {
        started.push(recv(&mut rx).await);
    }
    assert_eq!(running.in_flight(), 3);
    assert!(rx.try_recv().is_err(), "no fourth handler while three run");
    gate.add_permits(6);
    for _ in 0..3 {
        started.push(recv(&mut rx).await);
    }
    started.sort();
    assert_eq!(started, vec![0, 1, 2, 3, 4, 5]);
    running.shutdown().await;
}

#[tokio::test]
async fn concurrency_one_keeps_order() {
    let broker = Broker::new();
    let yaml = "spring.cloud.stream.bindings.in: {destination: seq, group: g}\nspring.cloud.stream.rabbit.bindings.in.consumer.prefetch: 50\n";
    let (tx, mut rx) = mpsc::unbounded_channel();
    let running = app(&broker, yaml)
        .listener("in", recorder(tx))
        .start()
        .await
        .unwrap();
    for id in 0..50 {
        running
            .publisher()
            .send("seq", &Order { id, fail: false })
            .await
            .unwrap();
    }
    assert_eq!(
        futures_collect(&mut rx, 50).await,
        (0..50).collect::<Vec<_>>()
    );
    running.shutdown().await;
}

#[tokio::test]
async fn pause_resume_stop_start() {
    let broker = Broker::new();
    let yaml = "spring.cloud.stream.bindings:\n  in: {destination: life, group: g}\n  out: {destination: life}\n";
    let (tx, mut rx) = mpsc::unbounded_channel();
    let running = app(&broker, yaml)
        .listener("in", recorder(tx))
        .output("out")
        .start()
        .await
        .unwrap();
    let out = running.output("out").unwrap();
    assert_eq!(running.state("in"), Some(BindingState::Running));

    running.pause("in").await.unwrap();
    assert_eq!(running.state("in"), Some(BindingState::Paused));
    out.send(&Order { id: 1, fail: false }).await.unwrap();
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert!(rx.try_recv().is_err(), "paused: nothing handled");
    running.resume("in").await.unwrap();
    assert_eq!(recv(&mut rx).await.id, 1);

    running.stop("in").await.unwrap();
    out.send(&Order { id: 2, fail: false }).await.unwrap();
    // Stopped: the subscription is cancelled, so the message waits in the group queue.
    assert_eq!(broker.queue_counts("life.g"), Some((1, 0)));
    running.start("in").await.unwrap();
    assert_eq!(recv(&mut rx).await.id, 2);

    running.stop("out").await.unwrap();
    assert!(out.send(&Order { id: 3, fail: false }).await.is_err());
    assert!(
        running.pause("out").await.is_err(),
        "outputs are not pausable"
    );
    assert!(running.stop("nope").await.is_err());
    running.shutdown().await;
}

#[tokio::test]
async fn a_waiting_handler_releases_earlier_acks_and_a_stop_takes_effect_while_it_runs() {
    let broker = Broker::new();
    let yaml = "spring.cloud.stream.bindings.in: {destination: busy, group: g}\nspring.cloud.stream.rabbit.bindings.in.consumer.prefetch: 10\n";
    let (tx, mut rx) = mpsc::unbounded_channel();
    let release = Arc::new(tokio::sync::Notify::new());
    let gate = release.clone();
    let h = handler::payload(move |o: Order| {
        let (tx, gate) = (tx.clone(), gate.clone());
        async move {
            let waits = o.id == 3;
            let _ = tx.send(o.id);
            if waits {
                gate.notified().await;
            }
        }
    });
    let running = app(&broker, yaml).listener("in", h).start().await.unwrap();
    for id in 0..6 {
        running
            .publisher()
            .send("busy", &Order { id, fail: false })
            .await
            .unwrap();
    }
    for id in 0..4 {
        assert_eq!(recv(&mut rx).await, id);
    }
    // 0 to 2 are acked although their acks were held back for the batch: 3 waits.
    let (ready, _) = broker.queue_counts("busy.g").unwrap();
    let unacked = broker.queue_unacked("busy.g").unwrap();
    assert_eq!(ready + unacked, 3, "only 3, 4 and 5 are left");

    // The stop does not wait for the handler; 4 and 5 go back to the queue.
    tokio::time::timeout(Duration::from_secs(5), running.stop("in"))
        .await
        .expect("stop returns while a handler runs")
        .unwrap();
    assert_eq!(broker.queue_counts("busy.g"), Some((2, 0)));
    assert_eq!(
        broker.queue_unacked("busy.g"),
        Some(1),
        "3 is still handled"
    );
    assert_eq!(running.in_flight(), 1);

    release.notify_one();
    tokio::time::timeout(Duration::from_secs(5), async {
        while broker.queue_unacked("busy.g") != Some(0) {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("3 is acked once its handler ends");
    running.start("in").await.unwrap();
    assert_eq!(recv(&mut rx).await, 4);
    assert_eq!(recv(&mut rx).await, 5);
    let report = running.shutdown().await;
    assert!(report.drained);
    assert_eq!(broker.queue_unacked("busy.g"), Some(0));
}

#[tokio::test]
async fn shutdown_waits_for_in_flight_handlers_and_loses_nothing() {
    let broker = Broker::new();
    let yaml = "spring.cloud.stream.bindings.in: {destination: slow, group: g, consumer: {concurrency: 2}}\nspring.cloud.stream.rabbit.bindings.in.consumer.prefetch: 10\n";
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let (done_tx, mut done) = mpsc::unbounded_channel();
    let release = Arc::new(tokio::sync::Notify::new());
    let r = release.clone();
    let h = handler::payload(move |o: Order| {
        let (s, d, r) = (started_tx.clone(), done_tx.clone(), r.clone());
        async move {
            let _ = s.send(o.id);
            r.notified().await;
            let _ = d.send(o.id);
        }
    });
    let running = app(&broker, yaml).listener("in", h).start().await.unwrap();
    for id in 0..5 {
        running
            .publisher()
            .send("slow", &Order { id, fail: false })
            .await
            .unwrap();
    }
    recv(&mut started).await;
    recv(&mut started).await;
    let shutdown = tokio::spawn(running.shutdown());
    tokio::task::yield_now().await;
    release.notify_waiters();
    let report = shutdown.await.unwrap();
    assert!(report.drained);
    assert_eq!(
        done.recv().await.is_some() as u8 + done.recv().await.is_some() as u8,
        2
    );
    // The two in flight were acked; the three never started are back in the queue.
    assert_eq!(broker.queue_counts("slow.g"), Some((3, 0)));
}

#[tokio::test(start_paused = true)]
async fn shutdown_timeout_abandons_stuck_handlers_and_their_messages_return() {
    let broker = Broker::new();
    let yaml = "spring.cloud.stream.bindings.in: {destination: stuck, group: g}\n";
    let (tx, mut rx) = mpsc::unbounded_channel();
    let h = handler::payload(move |o: Order| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(o.id);
            std::future::pending::<()>().await;
        }
    });
    let running = app(&broker, yaml)
        .listener("in", h)
        .shutdown_timeout(Duration::from_secs(5))
        .start()
        .await
        .unwrap();
    running
        .publisher()
        .send("stuck", &Order { id: 1, fail: false })
        .await
        .unwrap();
    recv(&mut rx).await;
    let report = running.shutdown().await;
    assert!(!report.drained);
    assert_eq!(report.abandoned, 1);
    assert_eq!(
        broker.queue_counts("stuck.g"),
        Some((1, 0)),
        "returned to the queue"
    );
}

#[tokio::test]
async fn processors_reply_and_the_trace_context_follows() {
    let broker = Broker::new();
    let yaml = "spring.cloud.stream.bindings:\n  in: {destination: orders, group: invoicing}\n  out: {destination: invoices}\n";
    let h = handler::payload(|o: Order| async move { Reply(format!("invoice-{}", o.id)) });
    let running = app(&broker, yaml)
        .processor("in", "out", h)
        .start()
        .await
        .unwrap();
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    ch.queue_declare("invoices.seen", Default::default(), Default::default())
        .unwrap();
    ch.queue_bind("invoices.seen", "invoices", "#", Default::default())
        .unwrap();
    let mut seen = ch
        .basic_consume(
            "invoices.seen",
            ConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
        )
        .unwrap();
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let m = Message::new(serde_json::to_vec(&Order { id: 5, fail: false }).unwrap())
        .with_header("traceparent", traceparent);
    running.publisher().send_message("orders", m).await.unwrap();
    let d = next(&mut seen).await;
    assert_eq!(&d.message().payload[..], br#""invoice-5""#);
    assert_eq!(d.message().content_type(), Some("application/json"));
    assert_eq!(
        d.message().headers.get_str("traceparent"),
        Some(traceparent)
    );
    running.shutdown().await;
}

#[tokio::test]
async fn dynamic_destinations_are_created_on_first_send_and_can_be_restricted() {
    let broker = Broker::new();
    let running = app(&broker, "").start().await.unwrap();
    let p = running.publisher();
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    for i in 0..50 {
        p.send(&format!("tenant-{i}"), &i).await.unwrap();
    }
    assert!(broker.exchange_exists("tenant-0") && broker.exchange_exists("tenant-49"));
    drop(ch);
    running.shutdown().await;

    let restricted = app(
        &broker,
        "spring.cloud.stream.dynamicDestinations: [allowed]\n",
    )
    .start()
    .await
    .unwrap();
    restricted.publisher().send("allowed", &1).await.unwrap();
    let err = restricted.publisher().send("other", &1).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("not in spring.cloud.stream.dynamicDestinations"),
        "{err}"
    );
    restricted.shutdown().await;
}

/// A payload whose encoding fails when asked to.
struct MaybeBad(Option<u32>);

impl Serialize for MaybeBad {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Some(id) => Order { id, fail: false }.serialize(s),
            None => Err(serde::ser::Error::custom("this one does not encode")),
        }
    }
}

#[tokio::test]
async fn send_all_stops_at_the_first_failure_and_reports_it_by_index() {
    let broker = Broker::new();
    let yaml = "spring.cloud.stream.bindings:\n  in: {destination: bulk, group: g}\n  out: {destination: bulk}\n";
    let (tx, mut rx) = mpsc::unbounded_channel();
    let app = app(&broker, yaml)
        .listener("in", recorder(tx))
        .output("out")
        .start()
        .await
        .unwrap();
    let out = app.output("out").unwrap();
    let payloads = [
        MaybeBad(Some(0)),
        MaybeBad(Some(1)),
        MaybeBad(None),
        MaybeBad(Some(3)),
    ];
    let e = out.send_all(&payloads, 8).await.unwrap_err();
    assert_eq!(e.confirmed, 2);
    assert_eq!(e.failures.len(), 1);
    assert_eq!(e.failures[0].0, 2);
    assert!(e.to_string().contains("this one does not encode"), "{e}");
    // The two before it arrived; the one after it was never sent: the next is a marker.
    assert_eq!(recv(&mut rx).await.id, 0);
    assert_eq!(recv(&mut rx).await.id, 1);
    out.send(&Order {
        id: 99,
        fail: false,
    })
    .await
    .unwrap();
    assert_eq!(recv(&mut rx).await.id, 99);

    // A stopped binding fails each send in flight; the pipeline reports them in order.
    app.stop("out").await.unwrap();
    let mut pipeline = out.pipeline(4);
    for id in 0..3 {
        pipeline.send(&Order { id, fail: false }).await.unwrap();
    }
    let confirms = pipeline.flush().await;
    assert_eq!(
        confirms.iter().map(|c| c.seq).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    assert!(
        confirms
            .iter()
            .all(|c| matches!(c.result, Err(binder_core::runtime::SendError::Stopped(_))))
    );
    assert!(pipeline.next_confirm().await.is_none());
    app.shutdown().await;
}
