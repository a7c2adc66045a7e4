//! `consumer.batchMode` with the AMQP extension's consumer-side batching (`enableBatching`,
//! `batchSize`, `receiveTimeout`): batches sized and cut short as Spring AMQP's, the prefetch
//! raised to the batch size, a failed batch retried whole and then dead-lettered message by
//! message, `#[stream_listener]` listeners taking `Vec<T>`, and the startup refusals.

mod common;

use common::{app, next, recv, watch_queue};

use std::sync::Arc;
use std::time::Duration;

use binder_core::config::ConfigLoader;
use binder_core::runtime::{HandlerError, State, handler};
use binder_embedded::engine::Broker;
use stream_macros::{input, stream_listener};
use tokio::sync::mpsc;

const BATCHES: &str = "spring.cloud.stream:
  bindings.in: {destination: b, group: g, consumer: {batchMode: true, autoStartup: false}}
  rabbit.bindings.in.consumer: {enableBatching: true, batchSize: 10, receiveTimeout: 50}
";

#[tokio::test]
async fn batches_fill_to_the_batch_size_and_a_short_one_goes_out_after_the_receive_timeout() {
    let broker = Broker::new();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let g = gate.clone();
    let h = handler::batch(move |items: Vec<u32>| {
        let (tx, g) = (tx.clone(), g.clone());
        async move {
            let first = items[0] == 0;
            let _ = tx.send(items);
            if first {
                let _held = g.acquire().await.unwrap();
            }
        }
    });
    let running = app(&broker, BATCHES)
        .listener("in", h)
        .start()
        .await
        .unwrap();
    for n in 0..25u32 {
        running.publisher().send("b", &n).await.unwrap();
    }
    running.start("in").await.unwrap();
    let first = recv(&mut rx).await;
    assert_eq!(first, (0..10).collect::<Vec<_>>());
    assert_eq!(broker.queue_counts("b.g"), Some((15, 1)));
    assert_eq!(
        broker.queue_unacked("b.g"),
        Some(10),
        "the prefetch (1 by default) is raised to the batch size, and no further"
    );
    gate.add_permits(1);
    assert_eq!(recv(&mut rx).await, (10..20).collect::<Vec<_>>());
    let started = tokio::time::Instant::now();
    assert_eq!(recv(&mut rx).await, (20..25).collect::<Vec<_>>());
    assert!(
        started.elapsed() >= Duration::from_millis(40),
        "the short batch waited for the receive timeout"
    );
    running.shutdown().await;
    assert_eq!(broker.queue_counts("b.g"), Some((0, 0)), "every one acked");
}

#[tokio::test]
async fn a_failed_batch_is_retried_whole_then_each_message_is_dead_lettered() {
    let broker = Broker::new();
    let yaml = "spring.cloud.stream:
  bindings.in: {destination: f, group: g, consumer: {batchMode: true, autoStartup: false, maxAttempts: 2, backOffInitialInterval: 10}}
  rabbit.bindings.in.consumer: {enableBatching: true, batchSize: 3, receiveTimeout: 50, autoBindDlq: true}
";
    let (tx, mut rx) = mpsc::unbounded_channel();
    let h = handler::batch(move |items: Vec<u32>| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(items);
            Err::<(), _>(HandlerError::retryable("ledger unavailable"))
        }
    });
    let running = app(&broker, yaml).listener("in", h).start().await.unwrap();
    let mut dlq = watch_queue(&broker, "f.g.dlq");
    for n in 0..3u32 {
        running.publisher().send("f", &n).await.unwrap();
    }
    running.start("in").await.unwrap();
    for _ in 0..2 {
        assert_eq!(recv(&mut rx).await, vec![0, 1, 2], "attempted whole");
    }
    for n in 0..3 {
        let dead = next(&mut dlq.consumer).await;
        let headers = &dead.message().headers;
        assert_eq!(
            headers.get_str("x-exception-message"),
            Some("ledger unavailable")
        );
        assert_eq!(dead.message().payload.as_ref(), n.to_string().as_bytes());
    }
    running.shutdown().await;
    assert!(rx.try_recv().is_err(), "maxAttempts attempts, no more");
    assert_eq!(broker.queue_counts("f.g"), Some((0, 0)));
}

#[tokio::test]
async fn an_undecodable_message_fails_its_batch_naming_it() {
    let broker = Broker::new();
    let yaml = "spring.cloud.stream:
  bindings.in: {destination: u, group: g, consumer: {batchMode: true, autoStartup: false}}
  rabbit.bindings.in.consumer: {enableBatching: true, batchSize: 2, autoBindDlq: true}
";
    let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u32>>();
    let h = handler::batch(move |items: Vec<u32>| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(items);
        }
    });
    let running = app(&broker, yaml).listener("in", h).start().await.unwrap();
    let mut dlq = watch_queue(&broker, "u.g.dlq");
    running.publisher().send("u", &1u32).await.unwrap();
    running.publisher().send("u", &"one").await.unwrap();
    running.start("in").await.unwrap();
    for _ in 0..2 {
        let dead = next(&mut dlq.consumer).await;
        let said = dead.message().headers.get_str("x-exception-message");
        assert!(
            said.is_some_and(|s| s.starts_with("message 2 of 2: ")),
            "{said:?}"
        );
    }
    running.shutdown().await;
    assert!(
        rx.try_recv().is_err(),
        "the listener never ran, nor retried"
    );
}

/// Pauses and resumes while batches fill and run: every message is handled once, in both
/// the acknowledging mode and `acknowledgeMode: NONE` (where a delivery dropped on the way
/// would be gone), and the prefetch lets each of `concurrency` handlers fill a batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pauses_while_batches_fill_lose_and_repeat_nothing() {
    for mode in ["AUTO", "NONE"] {
        let broker = Broker::new();
        let yaml = format!(
            "spring.cloud.stream:
  bindings.in: {{destination: p, group: g, consumer: {{batchMode: true, concurrency: 2}}}}
  rabbit.bindings.in.consumer: {{enableBatching: true, batchSize: 4, receiveTimeout: 5, acknowledgeMode: {mode}}}
"
        );
        let (tx, mut rx) = mpsc::unbounded_channel();
        let h = handler::batch(move |items: Vec<u32>| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(items);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        });
        let running = app(&broker, &yaml).listener("in", h).start().await.unwrap();
        let publisher = running.publisher();
        let sending = tokio::spawn(async move {
            for n in 0..200u32 {
                publisher.send("p", &n).await.unwrap();
                if n % 16 == 0 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        });
        for _ in 0..15 {
            running.pause("in").await.unwrap();
            tokio::time::sleep(Duration::from_millis(2)).await;
            running.resume("in").await.unwrap();
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        sending.await.unwrap();
        let mut seen = Vec::new();
        while seen.len() < 200 {
            let batch = recv(&mut rx).await;
            assert!(batch.len() <= 4, "{batch:?}");
            seen.extend(batch);
        }
        seen.sort_unstable();
        assert_eq!(seen, (0..200).collect::<Vec<_>>(), "{mode}: each once");
        running.shutdown().await;
        assert!(rx.try_recv().is_err(), "{mode}: nothing handled twice");
    }
}

/// Pauses that arrive, from another thread, while large batches fill from a backlog: with
/// `acknowledgeMode: NONE`, where a delivery dropped on the way would be gone, every message
/// still arrives once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_while_a_batch_fills_from_a_backlog_drops_nothing() {
    let broker = Broker::new();
    let yaml = "spring.cloud.stream:
  bindings.in: {destination: q, group: g, consumer: {batchMode: true, autoStartup: false}}
  rabbit.bindings.in.consumer: {enableBatching: true, batchSize: 300, receiveTimeout: 5, acknowledgeMode: NONE}
";
    let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u32>>();
    let h = handler::batch(move |items: Vec<u32>| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(items);
        }
    });
    let running = Arc::new(app(&broker, yaml).listener("in", h).start().await.unwrap());
    for n in 0..3000u32 {
        running.publisher().send("q", &n).await.unwrap();
    }
    running.start("in").await.unwrap();
    let control = running.clone();
    let pauser = tokio::spawn(async move {
        for _ in 0..20 {
            control.pause("in").await.unwrap();
            control.resume("in").await.unwrap();
        }
    });
    let mut seen = Vec::new();
    while seen.len() < 3000 {
        seen.extend(recv(&mut rx).await);
    }
    pauser.await.unwrap();
    seen.sort_unstable();
    assert_eq!(seen, (0..3000).collect::<Vec<_>>());
    Arc::into_inner(running).unwrap().shutdown().await;
}

/// Two handlers fill a batch each: the prefetch is `batchSize` times `concurrency`.
#[tokio::test]
async fn each_concurrent_handler_fills_a_batch() {
    let broker = Broker::new();
    let yaml = "spring.cloud.stream:
  bindings.in: {destination: c, group: g, consumer: {batchMode: true, autoStartup: false, concurrency: 2}}
  rabbit.bindings.in.consumer: {enableBatching: true, batchSize: 3, receiveTimeout: 50}
";
    let (tx, mut rx) = mpsc::unbounded_channel();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let g = gate.clone();
    let h = handler::batch(move |items: Vec<u32>| {
        let (tx, g) = (tx.clone(), g.clone());
        async move {
            let _ = tx.send(items);
            let _held = g.acquire().await.unwrap();
        }
    });
    let running = app(&broker, yaml).listener("in", h).start().await.unwrap();
    for n in 0..10u32 {
        running.publisher().send("c", &n).await.unwrap();
    }
    running.start("in").await.unwrap();
    assert_eq!(recv(&mut rx).await, vec![0, 1, 2]);
    assert_eq!(recv(&mut rx).await, vec![3, 4, 5]);
    assert_eq!(broker.queue_unacked("c.g"), Some(6), "two batches held");
    gate.add_permits(10);
    let mut rest = Vec::new();
    while rest.len() < 4 {
        rest.extend(recv(&mut rx).await);
    }
    rest.sort_unstable();
    assert_eq!(rest, vec![6, 7, 8, 9]);
    running.shutdown().await;
}

#[input("orders")]
#[derive(Debug)]
struct Orders;

/// The lists a listener saw.
type Seen = mpsc::UnboundedSender<Vec<u32>>;

#[stream_listener(input = Orders)]
async fn totals(ids: Vec<u32>, seen: State<Seen>) {
    let _ = seen.send(ids);
}

#[tokio::test]
async fn a_stream_listener_taking_a_vec_takes_batches_and_elsewhere_one_list() {
    let broker = Broker::new();
    let yaml = "spring.cloud.stream:
  bindings.orders: {destination: o, group: g, consumer: {batchMode: true, autoStartup: false}}
  rabbit.bindings.orders.consumer: {enableBatching: true, batchSize: 4, receiveTimeout: 20}
";
    let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u32>>();
    // The AsyncAPI document gives each message's payload type, not the list's.
    let doc = app(&broker, yaml)
        .register(&totals_listener)
        .asyncapi()
        .into_json();
    assert_eq!(doc["components"]["messages"]["orders"]["name"], "u32");
    let running = app(&broker, yaml)
        .register(&totals_listener)
        .state(tx.clone())
        .start()
        .await
        .unwrap();
    for n in 0..6u32 {
        running.publisher().send("o", &n).await.unwrap();
    }
    running.start("orders").await.unwrap();
    assert_eq!(recv(&mut rx).await, vec![0, 1, 2, 3]);
    assert_eq!(recv(&mut rx).await, vec![4, 5]);
    running.shutdown().await;

    // The same listener without batchMode: one message whose payload is a list.
    let one = "spring.cloud.stream.bindings.orders: {destination: o2, group: g}\n";
    let doc = app(&broker, one)
        .register(&totals_listener)
        .asyncapi()
        .into_json();
    let name = &doc["components"]["messages"]["orders"]["name"];
    assert!(name.as_str().is_some_and(|n| n.contains("Vec")), "{name}");
    let running = app(&broker, one)
        .register(&totals_listener)
        .state(tx)
        .start()
        .await
        .unwrap();
    running.publisher().send("o2", &[7u32, 8]).await.unwrap();
    assert_eq!(recv(&mut rx).await, vec![7, 8]);
    running.shutdown().await;
}

#[tokio::test]
async fn batch_settings_that_cannot_work_are_refused_at_startup() {
    let yaml = "spring.cloud.stream:
  bindings:
    a: {destination: a, group: g, consumer: {batchMode: true}}
    b: {destination: b, group: g}
    c: {destination: c, group: g}
    d: {destination: d, group: g, consumer: {batchMode: true}}
  rabbit.bindings:
    b.consumer: {enableBatching: true}
    c.consumer: {batchSize: 5, receiveTimeout: 100}
    d.consumer: {enableBatching: true, acknowledgeMode: MANUAL}
";
    let err = ConfigLoader::new()
        .env(Vec::<(String, String)>::new())
        .yaml_str(yaml)
        .load()
        .unwrap_err()
        .to_string();
    for expected in [
        "bindings.a.consumer.batchMode: needs `rabbit.bindings.<binding>.consumer.enableBatching: true`",
        "rabbit.bindings.b.consumer.enableBatching: needs `consumer.batchMode: true`",
        "rabbit.bindings.c.consumer.batchSize: sizes the batches of `enableBatching: true` only",
        "rabbit.bindings.c.consumer.receiveTimeout: sizes the batches",
        "rabbit.bindings.d.consumer.acknowledgeMode: MANUAL cannot go with `consumer.batchMode`",
    ] {
        assert!(err.contains(expected), "missing {expected:?} in\n{err}");
    }

    // A listener that takes one message at a time on a batch binding.
    let broker = Broker::new();
    let err = app(&broker, BATCHES)
        .listener("in", handler::payload(|_: u32| async {}))
        .start()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("binding `in` (consumer.batchMode): its listener of `in` takes one message at a time: give it a `Vec<...>` payload argument"),
        "{err}"
    );
}
