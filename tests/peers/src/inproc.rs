//! The in-process scenarios: 1 → 1 throughput, latency at a fixed rate, four destinations.
//! Each run builds its app (or channel) before the clock starts and tears it down after the
//! clock stopped; the clock runs from spawning the producer(s) to the last message handled.

use std::time::{Duration, Instant};

use tokio::sync::mpsc;

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

/// Ours: `destinations` outputs and `#[stream_listener]` inputs on a fresh embedded broker,
/// default binding settings, one producer task per destination calling `Output::send`.
pub async fn ours_throughput(msgs: Vec<BenchMsg>, destinations: usize) -> Vec<Figure> {
    let n = msgs.len();
    let sink = Sink::new(n);
    let (pairs, listeners) = if destinations == 1 {
        (ours::pairs("bench", 1, false), vec![ours::ONE])
    } else {
        assert_eq!(
            destinations, 4,
            "our listeners are declared for 1 or 4 inputs"
        );
        (ours::pairs("bench", 4, true), ours::FOUR.to_vec())
    };
    let app = OursApp::start(
        &Target::Embedded,
        &pairs,
        &Tuning::default(),
        Some(&listeners),
        &sink,
    )
    .await;
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
