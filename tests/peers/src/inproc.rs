//! The in-process scenarios: 1 → 1 throughput, latency at a fixed rate, four destinations.
//! Each run builds its app (or channel) before the clock starts and tears it down after the
//! clock stopped; the clock runs from spawning the producer(s) to the last message handled.

use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use crate::alloc::Counting;
use crate::ours::{self, OursApp, Target, Tuning};
use crate::payload::{BenchMsg, Sink, decode, quantile};
use crate::peer_rs::{self, RsApp};
use crate::rounds::{Figure, Unit};

/// The capacity of the `mpsc` contender.
pub const MPSC_CAPACITY: usize = 1024;

async fn join<T>(h: tokio::task::JoinHandle<T>) -> T {
    h.await.expect("benchmark task panicked")
}

fn rate(n: usize, elapsed: Duration) -> Vec<Figure> {
    vec![Figure::rate(n as f64 / elapsed.as_secs_f64())]
}

/// Splits `msgs` into `parts` contiguous shares.
fn shares(msgs: Vec<BenchMsg>, parts: usize) -> Vec<Vec<BenchMsg>> {
    let per = msgs.len().div_ceil(parts);
    let mut rest = msgs.into_iter();
    (0..parts)
        .map(|_| rest.by_ref().take(per).collect())
        .collect()
}

// ---- 1 → 1 and four destinations ----------------------------------------------------------

/// The prefetch of the "ours, prefetch 200" floor: what the framework's path costs when
/// acknowledgements and deliveries go in batches (the default, 1, settles every message with
/// the broker before the next is delivered).
pub const BATCHED_PREFETCH: u16 = 200;

/// The batch size of the "ours, batches of 100" contender (`consumer.batchMode`, opted into:
/// its listeners take `Vec<BenchMsg>`).
pub const BATCH_SIZE: u16 = 100;

/// How an "ours" contender's inputs are tuned beyond the defaults.
#[derive(Debug, Clone, Copy)]
pub enum OursTuning {
    /// The defaults.
    Defaults,
    /// `prefetch` of [`BATCHED_PREFETCH`].
    Prefetch,
    /// Batches of [`BATCH_SIZE`].
    Batches,
}

/// Ours: `destinations` outputs and `#[stream_listener]` inputs on a fresh embedded broker,
/// default binding settings unless `tuned` says otherwise (prefetch 200, or batches of 100
/// with `Vec<BenchMsg>` listeners), one producer task per destination calling `Output::send`.
pub async fn ours_throughput(
    msgs: Vec<BenchMsg>,
    destinations: usize,
    tuned: OursTuning,
) -> Vec<Figure> {
    let n = msgs.len();
    let sink = Sink::new(n);
    let batches = matches!(tuned, OursTuning::Batches);
    let (pairs, listeners) = if destinations == 1 {
        let one = if batches { ours::ONE_BATCH } else { ours::ONE };
        (ours::pairs("bench", 1, false), vec![one])
    } else {
        assert_eq!(
            destinations, 4,
            "our listeners are declared for 1 or 4 inputs"
        );
        let four = if batches {
            ours::FOUR_BATCH
        } else {
            ours::FOUR
        };
        (ours::pairs("bench", 4, true), four.to_vec())
    };
    let tuning = Tuning {
        prefetch: matches!(tuned, OursTuning::Prefetch).then_some(BATCHED_PREFETCH),
        batch: batches.then_some(BATCH_SIZE),
        ..Tuning::default()
    };
    let app = OursApp::start(&Target::Embedded, &pairs, &tuning, Some(&listeners), &sink).await;
    let outputs = app.outputs.clone();

    let start = Instant::now();
    let tasks: Vec<_> = shares(msgs, destinations)
        .into_iter()
        .zip(outputs)
        .map(|(share, output)| tokio::spawn(async move { ours::send_each(&output, &share).await }))
        .collect();
    sink.all_arrived().await;
    let elapsed = start.elapsed();

    for t in tasks {
        join(t).await;
    }
    sink.check();
    app.finish().await;
    rate(n, elapsed)
}

/// ruststream: one `#[subscriber]` per name on a fresh `MemoryBroker`, one producer task per
/// name publishing typed messages.
pub async fn rs_throughput(msgs: Vec<BenchMsg>, destinations: usize) -> Vec<Figure> {
    let n = msgs.len();
    let sink = Sink::new(n);
    let names: Vec<String> = (0..destinations).map(|i| format!("bench{i}")).collect();
    let app = RsApp::start(&names, &sink).await;

    let start = Instant::now();
    let tasks: Vec<_> = shares(msgs, destinations)
        .into_iter()
        .zip(names)
        .map(|(share, name)| {
            let publisher = app.publisher();
            tokio::spawn(async move { peer_rs::publish_each(&publisher, &name, &share).await })
        })
        .collect();
    sink.all_arrived().await;
    let elapsed = start.elapsed();

    for t in tasks {
        join(t).await;
    }
    sink.check();
    app.finish().await;
    rate(n, elapsed)
}

/// tokio `mpsc` of [`MPSC_CAPACITY`]: the producer encodes each struct and sends the bytes,
/// the consumer task receives one at a time and decodes.
pub async fn mpsc_throughput(msgs: Vec<BenchMsg>) -> Vec<Figure> {
    let n = msgs.len();
    let sink = Sink::new(n);
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(MPSC_CAPACITY);
    let consumer_sink = sink.clone();

    let start = Instant::now();
    let consumer = tokio::spawn(async move {
        while let Some(p) = rx.recv().await {
            consumer_sink.arrived(&decode(&p));
        }
    });
    let producer = tokio::spawn(async move {
        for m in &msgs {
            tx.send(serde_json::to_vec(m).expect("encode"))
                .await
                .expect("receiver alive");
        }
    });
    sink.all_arrived().await;
    let elapsed = start.elapsed();

    join(producer).await;
    join(consumer).await;
    sink.check();
    rate(n, elapsed)
}

/// The engine alone, without the framework: a native broker (`stream_engine::Broker<Native>`)
/// with a queue per destination, a producer task per queue awaiting `basic_publish` of each
/// encoded struct through the default exchange on a channel of its own, and a consumer per
/// queue at prefetch 1 (the binding default) that decodes each delivery and acks it. What the
/// broker's own semantics cost per message at the defaults: a routed, queued, delivered and
/// acknowledged message, with no acknowledgement held back.
pub async fn engine_throughput(msgs: Vec<BenchMsg>, destinations: usize) -> Vec<Figure> {
    let n = msgs.len();
    let sink = Sink::new(n);
    let shares = shares(msgs, destinations);
    let counts: Vec<usize> = shares.iter().map(Vec::len).collect();
    let engine = EngineOnly::start(&counts, &sink);

    let start = Instant::now();
    let producers: Vec<_> = shares
        .into_iter()
        .enumerate()
        .map(|(i, share)| {
            let publisher = engine.conn.open_channel().expect("channel.open");
            let queue = engine_queue(i);
            tokio::spawn(async move {
                for m in &share {
                    engine_publish(&publisher, &queue, m).await;
                }
                publisher.close();
            })
        })
        .collect();
    sink.all_arrived().await;
    let elapsed = start.elapsed();

    for p in producers {
        join(p).await;
    }
    engine.finish().await;
    sink.check();
    rate(n, elapsed)
}

/// The engine-alone contender's broker: queue `bench.engine.<i>` for each of `counts`, each
/// with a consuming task at prefetch 1 that decodes its `counts[i]` deliveries into the sink
/// and acks each.
struct EngineOnly {
    conn: stream_engine::Connection<stream_engine::Native>,
    consuming: Vec<tokio::task::JoinHandle<stream_engine::Channel<stream_engine::Native>>>,
}

impl EngineOnly {
    fn start(counts: &[usize], sink: &Sink) -> EngineOnly {
        use stream_engine::{ConsumeOptions, FieldTable, QueueOptions};
        let broker = stream_engine::Broker::<stream_engine::Native>::new();
        let conn = broker.connect();
        let consuming = counts
            .iter()
            .enumerate()
            .map(|(i, &count)| {
                let ch = conn.open_channel().expect("channel.open");
                let queue = engine_queue(i);
                ch.queue_declare(&queue, QueueOptions::default(), FieldTable::new())
                    .expect("queue.declare");
                ch.basic_qos(1, false).expect("basic.qos");
                let mut consumer = ch
                    .basic_consume(&queue, ConsumeOptions::default())
                    .expect("basic.consume");
                let sink = sink.clone();
                tokio::spawn(async move {
                    for _ in 0..count {
                        let d = consumer.recv().await.expect("consumer ended");
                        sink.arrived(&decode(&d.message().payload));
                        ch.basic_ack(d.delivery_tag, false).expect("basic.ack");
                    }
                    drop(consumer);
                    ch
                })
            })
            .collect();
        EngineOnly { conn, consuming }
    }

    async fn finish(self) {
        for c in self.consuming {
            join(c).await.close();
        }
        self.conn.close();
    }
}

fn engine_queue(i: usize) -> String {
    format!("bench.engine.{i}")
}

/// Publishes one encoded struct to `queue` of the engine-alone contender (through the
/// default exchange; ours publishes through its destination's topic exchange).
async fn engine_publish(
    publisher: &stream_engine::Channel<stream_engine::Native>,
    queue: &str,
    m: &BenchMsg,
) {
    let message = stream_engine::Message::new(serde_json::to_vec(m).expect("encode"));
    publisher
        .basic_publish("", queue, stream_engine::PublishOptions::default(), message)
        .await
        .expect("basic.publish");
}

/// `destinations` tokio `mpsc` channels of [`MPSC_CAPACITY`], each drained by a task of its
/// own that decodes one payload at a time; one producer task sends the encoded structs
/// round-robin over them, awaiting each send. The runtime's own cost of many destinations:
/// with more than a few, every message finds its consumer task asleep and wakes it.
/// Figures: the rate, the time spawning the channels and tasks took, and the heap they hold
/// per destination.
pub async fn mpsc_many(msgs: Vec<BenchMsg>, destinations: usize) -> Vec<Figure> {
    let n = msgs.len();
    let sink = Sink::new(n);
    let setup = Instant::now();
    let counting = Counting::start();
    let mut senders = Vec::with_capacity(destinations);
    let mut consumers = Vec::with_capacity(destinations);
    for _ in 0..destinations {
        let (tx, mut rx) = mpsc::channel::<Vec<u8>>(MPSC_CAPACITY);
        let consumer_sink = sink.clone();
        senders.push(tx);
        consumers.push(tokio::spawn(async move {
            while let Some(p) = rx.recv().await {
                consumer_sink.arrived(&decode(&p));
            }
        }));
    }
    let setup = setup.elapsed();
    let heap = counting.live() as f64 / destinations as f64;
    drop(counting);

    let start = Instant::now();
    let producer = tokio::spawn(async move {
        for (i, m) in msgs.iter().enumerate() {
            senders[i % senders.len()]
                .send(serde_json::to_vec(m).expect("encode"))
                .await
                .expect("receiver alive");
        }
    });
    sink.all_arrived().await;
    let elapsed = start.elapsed();

    join(producer).await;
    for c in consumers {
        join(c).await;
    }
    sink.check();
    vec![
        Figure::rate(n as f64 / elapsed.as_secs_f64()),
        Figure::millis(setup),
        Figure::bytes(heap),
    ]
}

// ---- latency ------------------------------------------------------------------------------

/// Waits until message `i` is due at `per_sec` messages a second from `start`.
async fn due(start: tokio::time::Instant, i: usize, per_sec: u32) {
    let period = Duration::from_secs(1) / per_sec;
    tokio::time::sleep_until(start + period * i as u32).await;
}

fn latency_figures(sink: &Sink) -> Vec<Figure> {
    let l = sink.latencies();
    let us = |d: Duration| Figure {
        value: d.as_secs_f64() * 1e6,
        unit: Unit::Micros,
    };
    vec![us(quantile(&l, 0.5)), us(quantile(&l, 0.99))]
}

/// Ours: the 1 → 1 app, one producer sending at `per_sec`; p50 and p99 of send → handler.
pub async fn ours_latency(msgs: Vec<BenchMsg>, per_sec: u32) -> Vec<Figure> {
    let sink = Sink::with_latency(msgs.len());
    let app = OursApp::start(
        &Target::Embedded,
        &ours::pairs("bench", 1, false),
        &Tuning::default(),
        Some(&[ours::ONE]),
        &sink,
    )
    .await;
    let output = app.outputs[0].clone();
    let start = tokio::time::Instant::now();
    for (i, m) in msgs.iter().enumerate() {
        due(start, i, per_sec).await;
        sink.sending(m.id);
        output.send(m).await.expect("output.send");
    }
    sink.all_arrived().await;
    sink.check();
    drop(output);
    app.finish().await;
    latency_figures(&sink)
}

/// ruststream: the 1 → 1 service, one producer publishing at `per_sec`.
pub async fn rs_latency(msgs: Vec<BenchMsg>, per_sec: u32) -> Vec<Figure> {
    let sink = Sink::with_latency(msgs.len());
    let app = RsApp::start(&["bench0".to_owned()], &sink).await;
    let publisher = app.publisher();
    let start = tokio::time::Instant::now();
    for (i, m) in msgs.iter().enumerate() {
        due(start, i, per_sec).await;
        sink.sending(m.id);
        peer_rs::publish_one(&publisher, "bench0", m).await;
    }
    sink.all_arrived().await;
    sink.check();
    app.finish().await;
    latency_figures(&sink)
}

/// The engine alone: the broker of [`engine_throughput`], one producer publishing at
/// `per_sec`.
pub async fn engine_latency(msgs: Vec<BenchMsg>, per_sec: u32) -> Vec<Figure> {
    let sink = Sink::with_latency(msgs.len());
    let engine = EngineOnly::start(&[msgs.len()], &sink);
    let publisher = engine.conn.open_channel().expect("channel.open");
    let queue = engine_queue(0);
    let start = tokio::time::Instant::now();
    for (i, m) in msgs.iter().enumerate() {
        due(start, i, per_sec).await;
        sink.sending(m.id);
        engine_publish(&publisher, &queue, m).await;
    }
    sink.all_arrived().await;
    sink.check();
    publisher.close();
    engine.finish().await;
    latency_figures(&sink)
}
