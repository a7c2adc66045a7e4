//! Acknowledge modes, prefetch, binder selection and startup checks of the runtime.

mod common;

use common::{app, config, recv};

use std::sync::Arc;
use std::time::Duration;

use binder_amqp::AmqpBroker;
use binder_core::binder::Settlement;
use binder_core::runtime::{App, handler};
use binder_embedded::EmbeddedBinder;
use binder_embedded::engine::Broker;
use tokio::sync::mpsc;

#[tokio::test]
async fn prefetch_caps_deliveries_in_progress_below_concurrency() {
    let broker = Broker::new();
    let yaml = "spring.cloud.stream:\n  bindings.in: {destination: p, group: g, consumer: {concurrency: 5}}\n  rabbit.bindings.in.consumer.prefetch: 2\n";
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let (tx, mut rx) = mpsc::unbounded_channel();
    let g = gate.clone();
    let h = handler::payload(move |n: u32| {
        let (tx, g) = (tx.clone(), g.clone());
        async move {
            let _ = tx.send(n);
            let _p = g.acquire().await.unwrap();
        }
    });
    let running = app(&broker, yaml).listener("in", h).start().await.unwrap();
    for n in 0..6u32 {
        running.publisher().send("p", &n).await.unwrap();
    }
    recv(&mut rx).await;
    recv(&mut rx).await;
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    assert_eq!(
        running.in_flight(),
        2,
        "prefetch 2 holds back the other four"
    );
    assert_eq!(broker.queue_counts("p.g"), Some((4, 1)));
    gate.add_permits(10);
    for _ in 0..4 {
        recv(&mut rx).await;
    }
    running.shutdown().await;
}

#[tokio::test]
async fn manual_acknowledgement_is_left_to_the_handler() {
    let broker = Broker::new();
    let yaml = "spring.cloud.stream:\n  bindings.in: {destination: m, group: g}\n  rabbit.bindings.in.consumer.acknowledgeMode: MANUAL\n";
    let (tx, mut rx) = mpsc::unbounded_channel();
    let h = handler::incoming(move |inc| {
        let tx = tx.clone();
        async move {
            let n: u32 = inc.payload()?;
            if n == 1 {
                inc.settle(Settlement::Ack).await?;
            }
            let _ = tx.send(n);
            Ok::<(), binder_core::runtime::HandlerError>(())
        }
    });
    let running = app(&broker, yaml).listener("in", h).start().await.unwrap();
    running.publisher().send("m", &1u32).await.unwrap();
    running.publisher().send("m", &2u32).await.unwrap();
    recv(&mut rx).await;
    recv(&mut rx).await;
    running.shutdown().await;
    assert_eq!(
        broker.queue_counts("m.g"),
        Some((1, 0)),
        "2 was never acked, so it is back in the queue after shutdown"
    );
}

#[tokio::test]
async fn acknowledge_mode_none_needs_no_settlement() {
    let broker = Broker::new();
    let yaml = "spring.cloud.stream:\n  bindings.in: {destination: n, group: g}\n  rabbit.bindings.in.consumer.acknowledgeMode: NONE\n";
    let (tx, mut rx) = mpsc::unbounded_channel();
    let h = handler::payload(move |n: u32| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(n);
        }
    });
    let running = app(&broker, yaml).listener("in", h).start().await.unwrap();
    for n in 0..3u32 {
        running.publisher().send("n", &n).await.unwrap();
    }
    for _ in 0..3 {
        recv(&mut rx).await;
    }
    assert_eq!(broker.memory_used(), 0, "nothing unacknowledged");
    running.shutdown().await;
}

#[tokio::test]
async fn named_binder_configurations_choose_the_binder() {
    let broker = Broker::new();
    let yaml = r#"
spring.cloud.stream:
  defaultBinder: local
  binders:
    local: {type: embedded}
    other: {type: embedded}
  bindings:
    a: {destination: da, group: g}
    b: {destination: db, group: g, binder: other}
"#;
    let other = Broker::new();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (tx2, mut rx2) = mpsc::unbounded_channel();
    let running = App::builder(config(yaml))
        .binder("local", Arc::new(EmbeddedBinder::new(broker.clone())))
        .binder("other", Arc::new(EmbeddedBinder::new(other.clone())))
        .listener(
            "a",
            handler::payload(move |n: u32| {
                let tx = tx.clone();
                async move {
                    let _ = tx.send(n);
                }
            }),
        )
        .listener(
            "b",
            handler::payload(move |n: u32| {
                let tx = tx2.clone();
                async move {
                    let _ = tx.send(n);
                }
            }),
        )
        .start()
        .await
        .unwrap();
    assert!(broker.queue_counts("da.g").is_some() && broker.queue_counts("db.g").is_none());
    assert!(
        other.queue_counts("db.g").is_some(),
        "binding b lives on the other binder"
    );
    running.publisher().send("a", &1u32).await.unwrap();
    assert_eq!(recv(&mut rx).await, 1);
    let conn = other.connect();
    let ch = conn.open_channel().unwrap();
    ch.basic_publish(
        "db",
        "db",
        Default::default(),
        binder_core::Message::new("2"),
    )
    .await
    .unwrap();
    assert_eq!(recv(&mut rx2).await, 2);
    running.shutdown().await;
}

#[tokio::test]
async fn configured_embedded_binders_share_one_broker_in_the_process() {
    // No instance given: the `embedded` registration creates binders on the shared broker.
    let yaml = "spring.cloud.stream.bindings:\n  in: {destination: shared-dest-7f3a, group: g}\n  out: {destination: shared-dest-7f3a}\n";
    let (tx, mut rx) = mpsc::unbounded_channel();
    let consumer = App::builder(config(yaml))
        .listener(
            "in",
            handler::payload(move |n: u32| {
                let tx = tx.clone();
                async move {
                    let _ = tx.send(n);
                }
            }),
        )
        .output("out")
        .start()
        .await
        .unwrap();
    let producer = App::builder(config(
        "spring.cloud.stream.bindings.out.destination: shared-dest-7f3a\n",
    ))
    .output("out")
    .start()
    .await
    .unwrap();
    producer.output("out").unwrap().send(&42u32).await.unwrap();
    assert_eq!(recv(&mut rx).await, 42);
    assert!(
        EmbeddedBinder::shared_broker()
            .queue_counts("shared-dest-7f3a.g")
            .is_some()
    );
    producer.shutdown().await;
    consumer.shutdown().await;
}

#[tokio::test]
async fn startup_reports_every_problem_at_once() {
    let yaml = r#"
spring.cloud.stream:
  binders.mq: {type: rabbit}
  bindings:
    a: {destination: x, binder: mq}
    b: {destination: y}
    c: {destination: w, producer: {errorChannelEnabled: true}}
    unused: {destination: z}
"#;
    let err = App::builder(config(yaml))
        .listener("a", handler::payload(|_: u32| async {}))
        .listener("b", handler::payload(|_: u32| async {}))
        .listener("b", handler::payload(|_: u32| async {}))
        .output("c")
        .start()
        .await
        .unwrap_err();
    let text = err.to_string();
    for expected in [
        "binding `b` has 2 listeners without a condition",
        "binding `unused` is configured but no listener or output uses it",
        "binding `c`: producer.errorChannelEnabled is not supported: a failed send is returned to its caller",
        "binding `a` uses binder `mq` (type `rabbit`), which is not available in this program",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in\n{text}");
    }
}

/// A destination opened on first send is checked as a declared output is: an error channel
/// set for every producer refuses the send instead of being ignored.
#[tokio::test]
async fn error_channel_enabled_refuses_dynamic_destinations_too() {
    let broker = Broker::new();
    let yaml = "spring.cloud.stream:\n  default.producer.errorChannelEnabled: true\n  bindings.in: {destination: e, group: g}\n";
    let running = app(&broker, yaml)
        .listener("in", handler::payload(|_: u32| async {}))
        .start()
        .await
        .unwrap();
    let err = running
        .publisher()
        .send("anywhere", &1u32)
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("binding `anywhere`: producer.errorChannelEnabled is not supported"),
        "{err}"
    );
    assert!(err.to_string().contains("on_error"), "{err}");
    assert!(!broker.exchange_exists("anywhere"), "nothing was declared");
    running.shutdown().await;
}

#[tokio::test]
async fn a_reply_without_an_output_binding_is_a_failure_not_a_loss() {
    let broker = Broker::new();
    let yaml = "spring.cloud.stream:\n  bindings.in: {destination: r, group: g, consumer: {maxAttempts: 1}}\n  rabbit.bindings.in.consumer.autoBindDlq: true\n";
    let h = handler::payload(|n: u32| async move { binder_core::runtime::Reply(n + 1) });
    let running = app(&broker, yaml).listener("in", h).start().await.unwrap();
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    let mut dlq = ch.basic_consume("r.g.dlq", Default::default()).unwrap();
    running.publisher().send("r", &1u32).await.unwrap();
    let d = tokio::time::timeout(Duration::from_secs(10), dlq.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(
        d.message()
            .headers
            .get_str("x-exception-message")
            .unwrap()
            .contains("has no output binding")
    );
    running.shutdown().await;
}

#[tokio::test]
async fn health_is_starting_then_up_then_down() {
    use binder_core::runtime::HealthStatus;
    let broker = Broker::new();
    let builder = app(
        &broker,
        "spring.cloud.stream.bindings.in: {destination: h, group: g}\n",
    )
    .listener("in", handler::payload(|_: u32| async {}));
    let health = builder.health();
    assert_eq!(health.status(), HealthStatus::Starting { waiting: None });
    let running = builder.start().await.unwrap();
    assert!(health.is_ready());
    assert!(running.health().is_ready());
    running.shutdown().await;
    assert_eq!(
        health.status(),
        HealthStatus::Down {
            reason: "shut down".into()
        }
    );
    let failed = App::builder(config(
        "spring.cloud.stream.bindings.unused.destination: x\n",
    ));
    let health = failed.health();
    assert!(failed.start().await.is_err());
    assert!(matches!(health.status(), HealthStatus::Down { reason } if reason.contains("unused")));
}

#[tokio::test]
async fn the_binder_holds_acks_while_more_is_ready_and_sends_them_on_flush_wait_and_cancel() {
    use binder_amqp::SubscriptionSpec;
    let broker = Broker::new();
    let binder = EmbeddedBinder::new(broker.clone());
    let conn = broker.connect();
    let publisher = conn.open_channel().unwrap();
    common::declare(&publisher, "held");
    for n in 0..4 {
        common::publish(&publisher, "", "held", &n.to_string()).await;
    }
    let mut sub = binder
        .subscribe(SubscriptionSpec::manual_ack("held", 10))
        .await
        .unwrap();
    let unacked = || broker.queue_unacked("held").unwrap();

    // The four come as one batch; acks of the first ones wait for the rest of it.
    let first = sub.next().await.unwrap();
    first.settler.settle(Settlement::Ack).await.unwrap();
    assert_eq!(unacked(), 4, "held back");
    sub.flush().await.unwrap();
    assert_eq!(unacked(), 3, "sent by flush");

    // After a flush nothing is held back until the next batch (whoever flushed is not
    // coming back soon).
    let second = sub.next().await.unwrap();
    second.settler.settle(Settlement::Ack).await.unwrap();
    assert_eq!(unacked(), 2, "sent at once after the flush");

    // The next batch holds acks back again, but never a reject.
    common::publish(&publisher, "", "held", "4").await;
    let third = sub.next().await.unwrap();
    let fourth = sub.next().await.unwrap();
    let fifth = sub.next().await.unwrap();
    assert_eq!(&fifth.message().payload[..], b"4", "a new batch was taken");
    third.settler.settle(Settlement::Ack).await.unwrap();
    assert_eq!(unacked(), 3, "held back");
    fourth.settler.settle(Settlement::Reject).await.unwrap();
    assert_eq!(
        unacked(),
        2,
        "the reject went out; the held ack waits for `4`"
    );
    fifth.settler.settle(Settlement::Ack).await.unwrap();
    assert_eq!(
        unacked(),
        2,
        "short of a batch (5): held until the subscription waits"
    );

    // Nothing more in the consumer's inbox: the held acks go out before the wait, which
    // has the engine hand over the next two.
    common::publish(&publisher, "", "held", "5").await;
    common::publish(&publisher, "", "held", "6").await;
    let sixth = sub.next().await.unwrap();
    assert_eq!(&sixth.message().payload[..], b"5");
    assert_eq!(
        unacked(),
        2,
        "3 and 5 acked before waiting; 5 and 6 delivered"
    );

    // On cancel nothing stays held, and what was not handed out goes back.
    sixth.settler.settle(Settlement::Ack).await.unwrap();
    assert_eq!(unacked(), 2, "held back");
    sub.cancel().await.unwrap();
    assert_eq!(unacked(), 0, "acked, and the one not handed out requeued");
    assert_eq!(broker.queue_counts("held"), Some((1, 0)));
}

#[tokio::test(start_paused = true)]
async fn a_producer_waits_while_the_memory_alarm_blocks_publishers_then_is_confirmed() {
    use binder_core::Message;

    use binder_amqp::ProducerSpec;
    use binder_embedded::engine::BrokerConfig;
    let broker = Broker::with_config(BrokerConfig {
        // A 600-byte message counts about 1 060 bytes (payload, record, queue entry).
        memory_high_watermark: Some(1500),
        ..BrokerConfig::default()
    });
    let binder = EmbeddedBinder::new(broker.clone());
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    common::declare(&ch, "full");
    let producer = binder
        .producer(ProducerSpec {
            exchange: String::new(),
            delivery_mode: binder_core::message::DeliveryMode::Persistent,
        })
        .await
        .unwrap();
    // Confirmed at once while under the watermark; the second crosses it.
    let big = "x".repeat(600);
    producer
        .publish("full", Message::new(big.clone()))
        .await
        .unwrap();
    producer.publish("full", Message::new(big)).await.unwrap();
    assert!(broker.is_blocked());

    let waiting = producer.publish("full", Message::new("waits"));
    tokio::pin!(waiting);
    assert!(
        tokio::time::timeout(Duration::from_millis(50), &mut waiting)
            .await
            .is_err(),
        "the send waits while publishers are blocked"
    );
    assert_eq!(ch.queue_purge("full").unwrap(), 2);
    tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("unblocked")
        .expect("confirmed");
    assert_eq!(
        broker.queue_counts("full").unwrap().0,
        1,
        "the waiting message is in the queue"
    );
}
