//! Throughput of the in-process broker engine against a plain `tokio::sync::mpsc` channel.
//!
//! Every scenario moves the same 100-byte [`Message`]s (prebuilt before the clock starts) from
//! one producer task to consumer task(s) on a tokio multi-thread runtime with 2 workers:
//!
//! 1. `mpsc bounded(200)` — **the baseline**: producer → bounded `tokio::sync::mpsc` channel of
//!    capacity 200 (the same window as the engine's prefetch) → consumer using `recv_many`.
//! 2. `mpsc unbounded` — reference only: the same over an unbounded channel, whose producer
//!    never waits, like an engine publisher.
//! 3. `engine 1→1` — publisher → direct exchange → one non-durable queue → one consumer;
//!    manual ack, `basic.qos(200)`, the consumer takes batches with `recv_many` and acks each
//!    batch once with `multiple = true`.
//! 4. `engine topic 1→4` — publisher → topic exchange → four queues bound with `bench.#` →
//!    four consumers (one task and one channel each), same ack scheme. Msgs/s counts messages
//!    published per second (each is delivered four times; deliveries/s is printed too).
//!
//! A run's time goes from spawning the tasks to the last consumer having received (and acked)
//! every message. Each scenario gets one warm-up run, then `BENCH_ROUNDS` measured rounds; a
//! round runs every scenario once, rotating which one goes first. Neither the engine publisher
//! nor the unbounded producer is flow controlled (the queues absorb everything, as on
//! RabbitMQ), so the report also gives how many messages the slowest consumer still had to
//! receive when the producer finished (the producer "ran ahead" when that is more than one
//! window of 200) and how many messages a `recv_many`, and so an ack, took on average. Each
//! run is bounded by a timeout, so the binary always ends.
//!
//! Run it with:
//!
//! ```text
//! cargo bench -p binder-embedded --bench engine_throughput
//! ```
//!
//! Environment:
//! - `BENCH_MESSAGES`: messages per run (default 200000; the prebuilt messages take about 400
//!   bytes each);
//! - `BENCH_ROUNDS`: measured rounds (default 7);
//! - `BENCH_SCENARIOS`: only these scenarios, by number, e.g. `3` or `1,4` (default all; for
//!   profiling one of them);
//! - `BENCH_YIELD_EVERY`: producers call `tokio::task::yield_now()` after every that many
//!   messages (default 0: never). `basic_publish` does not yield by itself, so a consumer woken
//!   by the publisher can wait in the publisher's worker until the publisher is done; this
//!   shows how much that costs.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use stream_engine::{
    Broker, Channel, ConsumeOptions, Consumer, Delivery, ExchangeKind, ExchangeOptions, FieldTable,
    Message, PublishOptions, PublishStatus, QueueOptions,
};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

mod support;
use support::{RateStats, env_usize, fmt_rate, median, rate_stats, run_rounds, selected_scenarios};

const PAYLOAD_SIZE: usize = 100;
/// The engine consumers' prefetch and the bounded baseline's capacity.
const WINDOW: usize = 200;
/// `recv_many` limit for every consumer.
const BATCH: usize = 200;
const FANOUT_QUEUES: usize = 4;
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    MpscBounded,
    MpscUnbounded,
    EngineDirect,
    EngineTopicFanout,
}

impl Scenario {
    const ALL: [Scenario; 4] = [
        Scenario::MpscBounded,
        Scenario::MpscUnbounded,
        Scenario::EngineDirect,
        Scenario::EngineTopicFanout,
    ];

    fn label(self) -> &'static str {
        match self {
            Scenario::MpscBounded => "mpsc bounded(200) [baseline]",
            Scenario::MpscUnbounded => "mpsc unbounded [reference]",
            Scenario::EngineDirect => "engine 1→1 direct",
            Scenario::EngineTopicFanout => "engine topic 1→4 fan-out",
        }
    }

    /// Deliveries per published message.
    fn deliveries_per_message(self) -> usize {
        match self {
            Scenario::EngineTopicFanout => FANOUT_QUEUES,
            _ => 1,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Settings {
    messages: usize,
    yield_every: usize,
}

/// One run's measurements.
#[derive(Debug, Clone, Copy)]
struct RunResult {
    /// Spawn to the last consumer done.
    elapsed: Duration,
    /// Spawn to the producer done.
    publish: Duration,
    /// Messages the slowest consumer had not yet received when the producer was done.
    unconsumed_at_publish_end: usize,
    /// Mean messages per `recv_many` (and so per ack, for the engine).
    mean_batch: f64,
}

impl RunResult {
    fn msgs_per_sec(&self, messages: usize) -> f64 {
        messages as f64 / self.elapsed.as_secs_f64()
    }

    fn ran_ahead(&self) -> bool {
        self.unconsumed_at_publish_end > WINDOW
    }
}

/// How many messages each consumer has received so far, and in how many `recv_many` batches
/// (updated once per batch).
#[derive(Debug, Clone)]
struct Progress(Arc<Vec<(AtomicUsize, AtomicUsize)>>);

impl Progress {
    fn new(consumers: usize) -> Self {
        Progress(Arc::new(
            (0..consumers)
                .map(|_| (AtomicUsize::new(0), AtomicUsize::new(0)))
                .collect(),
        ))
    }

    fn add(&self, consumer: usize, n: usize) {
        let (received, batches) = &self.0[consumer];
        received.fetch_add(n, Ordering::Relaxed);
        batches.fetch_add(1, Ordering::Relaxed);
    }

    fn slowest(&self) -> usize {
        self.0
            .iter()
            .map(|(received, _)| received.load(Ordering::Relaxed))
            .min()
            .unwrap_or(0)
    }

    /// Mean messages per batch over all consumers.
    fn mean_batch(&self) -> f64 {
        let (received, batches) = self.0.iter().fold((0, 0), |(r, b), (received, batches)| {
            (
                r + received.load(Ordering::Relaxed),
                b + batches.load(Ordering::Relaxed),
            )
        });
        received as f64 / batches.max(1) as f64
    }
}

/// `n` messages with their own 100-byte payloads (a sequence number, then filler).
fn messages(n: usize) -> Vec<Message> {
    (0..n)
        .map(|i| {
            let mut payload = vec![b'x'; PAYLOAD_SIZE];
            payload[..8].copy_from_slice(&(i as u64).to_le_bytes());
            Message::new(payload)
        })
        .collect()
}

async fn join<T>(handle: JoinHandle<T>) -> T {
    handle.await.expect("benchmark task panicked")
}

/// Lets other tasks of this worker run every `every` messages (never when 0), but not after
/// the last one, which would delay the producer's finishing time.
async fn maybe_yield(sent: usize, total: usize, every: usize) {
    if every > 0 && sent % every == 0 && sent < total {
        tokio::task::yield_now().await;
    }
}

// ---- baselines --------------------------------------------------------------------------

/// Either baseline channel's ends.
enum MpscTx {
    Bounded(mpsc::Sender<Message>),
    Unbounded(mpsc::UnboundedSender<Message>),
}

enum MpscRx {
    Bounded(mpsc::Receiver<Message>),
    Unbounded(mpsc::UnboundedReceiver<Message>),
}

impl MpscTx {
    async fn send(&self, m: Message) {
        match self {
            MpscTx::Bounded(tx) => tx.send(m).await.expect("receiver alive"),
            MpscTx::Unbounded(tx) => tx.send(m).expect("receiver alive"),
        }
    }
}

impl MpscRx {
    async fn recv_many(&mut self, buf: &mut Vec<Message>, limit: usize) -> usize {
        match self {
            MpscRx::Bounded(rx) => rx.recv_many(buf, limit).await,
            MpscRx::Unbounded(rx) => rx.recv_many(buf, limit).await,
        }
    }
}

async fn mpsc_consume(mut rx: MpscRx, n: usize, progress: Progress) -> (Instant, usize) {
    let mut buf = Vec::with_capacity(BATCH);
    let (mut count, mut bytes) = (0, 0);
    while count < n {
        let got = rx.recv_many(&mut buf, BATCH).await;
        assert!(got > 0, "channel closed after {count} of {n} messages");
        count += got;
        progress.add(0, got);
        bytes += buf.iter().map(|m| m.payload.len()).sum::<usize>();
        buf.clear();
    }
    (Instant::now(), bytes)
}

async fn run_mpsc(msgs: Vec<Message>, bounded: bool, yield_every: usize) -> RunResult {
    let n = msgs.len();
    let progress = Progress::new(1);
    let (tx, rx) = if bounded {
        let (tx, rx) = mpsc::channel::<Message>(WINDOW);
        (MpscTx::Bounded(tx), MpscRx::Bounded(rx))
    } else {
        let (tx, rx) = mpsc::unbounded_channel::<Message>();
        (MpscTx::Unbounded(tx), MpscRx::Unbounded(rx))
    };
    let probe = progress.clone();
    let stats = progress.clone();

    let start = Instant::now();
    let consumer = tokio::spawn(mpsc_consume(rx, n, progress));
    let producer = tokio::spawn(async move {
        for (i, m) in msgs.into_iter().enumerate() {
            tx.send(m).await;
            maybe_yield(i + 1, n, yield_every).await;
        }
        (Instant::now(), n - probe.slowest())
    });

    let (published, unconsumed) = join(producer).await;
    let (done, bytes) = join(consumer).await;
    assert_eq!(bytes, n * PAYLOAD_SIZE);
    RunResult {
        elapsed: done - start,
        publish: published - start,
        unconsumed_at_publish_end: unconsumed,
        mean_batch: stats.mean_batch(),
    }
}

// ---- engine -----------------------------------------------------------------------------

struct ConsumerDone {
    at: Instant,
    bytes: usize,
    // Handed back so that cancelling and closing happen after the clock stops.
    _consumer: Consumer,
    _channel: Channel,
}

async fn engine_consume(
    channel: Channel,
    mut consumer: Consumer,
    n: usize,
    progress: Progress,
    index: usize,
) -> ConsumerDone {
    let mut buf: Vec<Delivery> = Vec::with_capacity(BATCH);
    let (mut count, mut bytes) = (0, 0);
    while count < n {
        let got = consumer.recv_many(&mut buf, BATCH).await;
        assert!(
            got > 0,
            "consumer cancelled after {count} of {n} deliveries"
        );
        let last = buf.last().expect("got > 0").delivery_tag;
        channel.basic_ack(last, true).expect("basic.ack");
        count += got;
        progress.add(index, got);
        bytes += buf
            .iter()
            .map(|d| {
                assert!(!d.redelivered, "unexpected redelivery");
                d.message().payload.len()
            })
            .sum::<usize>();
        buf.clear();
    }
    ConsumerDone {
        at: Instant::now(),
        bytes,
        _consumer: consumer,
        _channel: channel,
    }
}

/// One engine topology: a publisher → `exchange` (of `kind`) → `queues` (each bound with
/// its key) → one consumer per queue.
struct Topology {
    kind: ExchangeKind,
    exchange: &'static str,
    routing_key: &'static str,
    queues: Vec<(String, &'static str)>,
}

async fn run_engine(msgs: Vec<Message>, topology: Topology, yield_every: usize) -> RunResult {
    let Topology {
        kind,
        exchange,
        routing_key,
        queues,
    } = topology;
    let n = msgs.len();
    let broker = Broker::new();
    let conn = broker.connect();
    let publisher = conn.open_channel().expect("channel.open");
    publisher
        .exchange_declare(
            exchange,
            kind,
            ExchangeOptions::default(),
            FieldTable::new(),
        )
        .expect("exchange.declare");
    let mut consumers = Vec::new();
    for (queue, binding_key) in &queues {
        publisher
            .queue_declare(queue, QueueOptions::default(), FieldTable::new())
            .expect("queue.declare");
        publisher
            .queue_bind(queue, exchange, binding_key, FieldTable::new())
            .expect("queue.bind");
        // A channel per consumer: delivery tags, and so `multiple` acks, are per channel.
        let ch = conn.open_channel().expect("channel.open");
        ch.basic_qos(WINDOW as u16, false).expect("basic.qos");
        let consumer = ch
            .basic_consume(queue, ConsumeOptions::default())
            .expect("basic.consume");
        consumers.push((ch, consumer));
    }
    let fanout = queues.len();
    let progress = Progress::new(fanout);
    let probe = progress.clone();
    let stats = progress.clone();

    let start = Instant::now();
    let consumer_tasks: Vec<_> = consumers
        .into_iter()
        .enumerate()
        .map(|(i, (ch, c))| tokio::spawn(engine_consume(ch, c, n, progress.clone(), i)))
        .collect();
    let producer = tokio::spawn(async move {
        for (i, m) in msgs.into_iter().enumerate() {
            let outcome = publisher
                .basic_publish(exchange, routing_key, PublishOptions::default(), m)
                .await
                .expect("basic.publish");
            assert_eq!(outcome.status, PublishStatus::Routed(fanout));
            maybe_yield(i + 1, n, yield_every).await;
        }
        (Instant::now(), n - probe.slowest(), publisher)
    });

    let (published, unconsumed, publisher) = join(producer).await;
    let mut done = Vec::new();
    for t in consumer_tasks {
        done.push(join(t).await);
    }
    let last = done.iter().map(|d| d.at).max().expect("consumers");
    for d in &done {
        assert_eq!(d.bytes, n * PAYLOAD_SIZE);
    }
    // Teardown after the clock stopped.
    drop(done);
    drop(publisher);
    drop(conn);
    drop(broker);
    RunResult {
        elapsed: last - start,
        publish: published - start,
        unconsumed_at_publish_end: unconsumed,
        mean_batch: stats.mean_batch(),
    }
}

async fn run(scenario: Scenario, settings: Settings) -> RunResult {
    let msgs = messages(settings.messages);
    let y = settings.yield_every;
    let fut = async move {
        match scenario {
            Scenario::MpscBounded => run_mpsc(msgs, true, y).await,
            Scenario::MpscUnbounded => run_mpsc(msgs, false, y).await,
            Scenario::EngineDirect => {
                let topology = Topology {
                    kind: ExchangeKind::Direct,
                    exchange: "bench.direct",
                    routing_key: "bench.key",
                    queues: vec![("bench.direct.q".to_owned(), "bench.key")],
                };
                run_engine(msgs, topology, y).await
            }
            Scenario::EngineTopicFanout => {
                let topology = Topology {
                    kind: ExchangeKind::Topic,
                    exchange: "bench.topic",
                    routing_key: "bench.orders.created",
                    queues: (0..FANOUT_QUEUES)
                        .map(|i| (format!("bench.topic.q{i}"), "bench.#"))
                        .collect(),
                };
                run_engine(msgs, topology, y).await
            }
        }
    };
    tokio::time::timeout(RUN_TIMEOUT, fut)
        .await
        .unwrap_or_else(|_| panic!("{} did not finish within {RUN_TIMEOUT:?}", scenario.label()))
}

fn main() {
    let settings = Settings {
        messages: env_usize("BENCH_MESSAGES", 200_000).max(1),
        yield_every: env_usize("BENCH_YIELD_EVERY", 0),
    };
    let n = settings.messages;
    let rounds = env_usize("BENCH_ROUNDS", 7).max(1);
    let selected = selected_scenarios(Scenario::ALL.len());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");

    println!(
        "engine_throughput: {n} messages of {PAYLOAD_SIZE} B per run, 1 warm-up + {rounds} rounds, \
         tokio multi-thread runtime with 2 workers, {} CPUs",
        std::thread::available_parallelism().map_or(0, |p| p.get())
    );
    println!(
        "baseline: bounded tokio mpsc, capacity {WINDOW}; engine: prefetch {WINDOW}, recv_many \
         limit {BATCH}, one ack (multiple) per batch; producers yield: {}",
        match settings.yield_every {
            0 => "never".to_owned(),
            k => format!("every {k} messages"),
        }
    );

    let results = run_rounds(
        &selected,
        rounds,
        |i| (i + 1).to_string(),
        |i| {
            let r = rt.block_on(run(Scenario::ALL[i], settings));
            (r, r.msgs_per_sec(n), r.elapsed)
        },
    );
    let stats = rate_stats(&results, |r| r.msgs_per_sec(n));
    let ratio = |med: f64, base: RateStats| match base {
        Some((b, _, _)) => format!("{:.1}%", 100.0 * med / b),
        None => "n/a".to_owned(),
    };

    println!();
    println!(
        "{:<3} {:<30} {:>10} {:>10} {:>10} {:>12} {:>10} {:>10}",
        "#", "scenario", "median/s", "min/s", "max/s", "deliveries/s", "vs base", "vs unb."
    );
    for (i, scenario) in Scenario::ALL.iter().enumerate() {
        let Some((med, min, max)) = stats[i] else {
            continue;
        };
        println!(
            "{:<3} {:<30} {:>10} {:>10} {:>10} {:>12} {:>10} {:>10}",
            i + 1,
            scenario.label(),
            fmt_rate(med),
            fmt_rate(min),
            fmt_rate(max),
            fmt_rate(med * scenario.deliveries_per_message() as f64),
            ratio(med, stats[0]),
            ratio(med, stats[1]),
        );
    }

    println!();
    println!(
        "publishing vs consumption (medians; 'ran ahead' = the producer finished with more than \
         {WINDOW} messages not yet received by the slowest consumer):"
    );
    for (i, scenario) in Scenario::ALL.iter().enumerate() {
        let rs = &results[i];
        if rs.is_empty() {
            continue;
        }
        let ahead = rs.iter().filter(|r| r.ran_ahead()).count();
        let mut publish: Vec<f64> = rs.iter().map(|r| r.publish.as_secs_f64() * 1e3).collect();
        let mut elapsed: Vec<f64> = rs.iter().map(|r| r.elapsed.as_secs_f64() * 1e3).collect();
        let mut batch: Vec<f64> = rs.iter().map(|r| r.mean_batch).collect();
        let mut unconsumed: Vec<f64> = rs
            .iter()
            .map(|r| r.unconsumed_at_publish_end as f64)
            .collect();
        println!(
            "{:<3} {:<30} publish done {:>6.1} ms, all received {:>6.1} ms, unreceived at publish \
             end {:>7.0}, ran ahead in {ahead}/{} runs, {:>5.1} msgs per recv_many",
            i + 1,
            scenario.label(),
            median(&mut publish),
            median(&mut elapsed),
            median(&mut unconsumed),
            rs.len(),
            median(&mut batch),
        );
    }
}
