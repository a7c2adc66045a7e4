//! How the runtime settles deliveries when they finish out of order: a delivery retried in
//! the background and failed for good after later ones were acked, acks of deliveries that
//! finish while the binding is paused, a handler that panics before it returns its future.

mod common;

use common::{app, recv, watch_queue};

use std::sync::Arc;

use binder_core::runtime::{HandlerError, handler};
use binder_embedded::engine::Broker;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Order {
    id: u32,
}

/// Publishes orders `ids` to `destination`.
async fn publish(
    running: &binder_core::runtime::RunningApp,
    destination: &str,
    ids: std::ops::Range<u32>,
) {
    for id in ids {
        running
            .publisher()
            .send(destination, &Order { id })
            .await
            .unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_message_rejected_after_later_ones_were_acked_is_dead_lettered() {
    let broker = Broker::new();
    let yaml = "spring.cloud.stream:\n  bindings.in: {destination: jobs, group: w, consumer: {maxAttempts: 2, backOffInitialInterval: 300}}\n  rabbit.bindings.in.consumer: {autoBindDlq: true, republishToDlq: false, prefetch: 10}\n";
    let (tx, mut rx) = mpsc::unbounded_channel();
    let h = handler::payload(move |o: Order| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(o.id);
            if o.id == 0 {
                Err(HandlerError::retryable("always fails"))
            } else {
                Ok(())
            }
        }
    });
    let running = app(&broker, yaml).listener("in", h).start().await.unwrap();
    let mut dlq = watch_queue(&broker, "jobs.w.dlq");
    publish(&running, "jobs", 0..3).await;
    // 0 fails, 1 and 2 are acked (held back while 0 waits for its retry), 0 fails again.
    let mut calls = Vec::new();
    for _ in 0..4 {
        calls.push(recv(&mut rx).await);
    }
    calls.sort();
    assert_eq!(calls, vec![0, 0, 1, 2]);
    let dead = common::next(&mut dlq.consumer).await;
    assert_eq!(
        serde_json::from_slice::<Order>(&dead.message().payload).unwrap(),
        Order { id: 0 }
    );
    assert_eq!(
        broker.queue_counts("jobs.w"),
        Some((0, 1)),
        "the consumer is still there"
    );
    assert_eq!(broker.queue_unacked("jobs.w"), Some(0));
    running.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_message_requeued_after_later_ones_were_acked_comes_back() {
    let broker = Broker::new();
    let yaml = "spring.cloud.stream:\n  bindings.in: {destination: jq, group: w, consumer: {maxAttempts: 2, backOffInitialInterval: 300}}\n  rabbit.bindings.in.consumer: {requeueRejected: true, prefetch: 10}\n";
    let (tx, mut rx) = mpsc::unbounded_channel();
    let h = handler::incoming(move |inc| {
        let tx = tx.clone();
        async move {
            let o: Order = inc.payload().unwrap();
            let _ = tx.send((o.id, inc.redelivered));
            if o.id == 0 && !inc.redelivered {
                Err(HandlerError::retryable("fails until redelivered"))
            } else {
                Ok(())
            }
        }
    });
    let running = app(&broker, yaml).listener("in", h).start().await.unwrap();
    publish(&running, "jq", 0..3).await;
    loop {
        if recv(&mut rx).await == (0, true) {
            break;
        }
    }
    let report = running.shutdown().await;
    assert!(report.drained);
    assert_eq!(broker.queue_counts("jq.w"), Some((0, 0)));
    assert_eq!(broker.queue_unacked("jq.w"), Some(0));
}

#[tokio::test(start_paused = true)]
async fn acks_of_deliveries_that_finish_during_a_pause_are_sent() {
    let broker = Broker::new();
    let yaml = "spring.cloud.stream:\n  bindings.in: {destination: p, group: g, consumer: {maxAttempts: 2, backOffInitialInterval: 500, autoStartup: false}}\n  rabbit.bindings.in.consumer.prefetch: 10\n";
    let (tx, mut rx) = mpsc::unbounded_channel();
    let release = Arc::new(tokio::sync::Notify::new());
    let gate = release.clone();
    let h = handler::incoming(move |inc| {
        let (tx, gate) = (tx.clone(), gate.clone());
        async move {
            let o: Order = inc.payload().unwrap();
            let _ = tx.send((o.id, inc.attempt));
            if o.id == 0 && inc.attempt == 1 {
                return Err(HandlerError::retryable("once"));
            }
            if o.id == 1 {
                gate.notified().await;
            }
            Ok(())
        }
    });
    let running = app(&broker, yaml).listener("in", h).start().await.unwrap();
    publish(&running, "p", 0..6).await;
    running.start("in").await.unwrap();
    assert_eq!(recv(&mut rx).await, (0, 1));
    assert_eq!(recv(&mut rx).await, (1, 1));
    // 0 waits for its retry and 1 for the gate, with 2 to 5 buffered, when the pause comes.
    running.pause("in").await.unwrap();
    release.notify_one();
    assert_eq!(recv(&mut rx).await, (0, 2));
    // The acks follow within a few scheduler turns (the clock is paused, so turns, not time,
    // bound the wait).
    for _ in 0..1000 {
        if broker.queue_unacked("p.g") == Some(4) {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(
        broker.queue_unacked("p.g"),
        Some(4),
        "0 and 1 are acked during the pause; only the 4 buffered stay unacked"
    );
    running.resume("in").await.unwrap();
    let mut rest: Vec<u32> = Vec::new();
    for _ in 0..4 {
        rest.push(recv(&mut rx).await.0);
    }
    assert_eq!(rest, vec![2, 3, 4, 5]);
    running.shutdown().await;
    assert_eq!(broker.queue_unacked("p.g"), Some(0));
}

#[tokio::test]
async fn a_handler_that_panics_before_returning_its_future_does_not_stop_the_binding() {
    let broker = Broker::new();
    let yaml = "spring.cloud.stream.bindings.in: {destination: sp, group: g, consumer: {maxAttempts: 1}}\nspring.cloud.stream.rabbit.bindings.in.consumer.autoBindDlq: true\n";
    let (tx, mut rx) = mpsc::unbounded_channel();
    let h = handler::payload(move |o: Order| {
        assert!(o.id != 1, "a panic in the synchronous part of the handler");
        let tx = tx.clone();
        async move {
            let _ = tx.send(o.id);
        }
    });
    let running = app(&broker, yaml).listener("in", h).start().await.unwrap();
    let mut dlq = watch_queue(&broker, "sp.g.dlq");
    publish(&running, "sp", 1..3).await;
    assert_eq!(
        recv(&mut rx).await,
        2,
        "the binding goes on after the panic"
    );
    let dead = common::next(&mut dlq.consumer).await;
    let reason = dead
        .message()
        .headers
        .get_str("x-exception-message")
        .unwrap_or_default()
        .to_owned();
    assert!(reason.contains("synchronous part"), "{reason}");
    running.shutdown().await;
}
