//! Throughput of the full runtime path (output binding → embedded binder → engine → input
//! binding → typed handler) against the engine alone and a plain `tokio::sync::mpsc` channel.
//!
//! Every scenario moves the same 100-byte JSON payloads, the encoding of a small
//! `BenchMsg { id, body }` struct, from producer task(s) to a consumer that decodes each one
//! back into the struct with `serde_json`, on a tokio multi-thread runtime with 2 workers:
//!
//! 1. `mpsc bounded(200)` — **the baseline**: the payloads, pre-serialized to `Vec<u8>` before
//!    the clock starts, go producer → bounded `tokio::sync::mpsc` channel of capacity 200 →
//!    consumer, which takes batches with `recv_many` and decodes each payload.
//! 2. `engine 1→1` — the engine scenario of `engine_throughput`: prebuilt [`Message`]s with the
//!    same pre-serialized payloads are published to a direct exchange → one queue → one
//!    consumer; manual ack, `basic.qos(200)`, batches taken with `recv_many` and acked once
//!    each with `multiple = true`; the consumer decodes each payload.
//! 3. `app, 1 sender` — the full handler path: an [`App`] on the embedded binder with an
//!    output binding `out` and an input binding `in` (group `g`) on the same destination,
//!    `prefetch: 200`, the default acknowledge mode (AUTO: the runtime acks each message after
//!    its handler), and a typed handler `handler::payload(|m: BenchMsg| ...)` that counts the
//!    messages. The producer is given the (prebuilt) structs and calls `output.send(&msg)`,
//!    which encodes each one and waits for its publisher confirm, so this path pays JSON
//!    encoding as well as decoding.
//! 4. `app, 16 senders` — the same with 16 sender tasks sharing clones of the [`Output`], each
//!    sending its share of the messages.
//! 5. `app sends only` and 6. `app handler only` — where the time goes: the app of scenario 3
//!    with its input binding stopped; one sender fills the group queue with nobody consuming
//!    (5 times that), then the binding starts and drains it (6 times that). Each side then
//!    has a core to itself. 3 can beat 6: there the handler reads messages the sender has
//!    just written, still in cache, while 6 drains a queue of 100 000 written long before.
//!    3 also depends on how the host runs the machine's two vCPUs: on some runs both
//!    threads get half speed, and 2, 3 and 4 (two busy threads) drop by half while 1, 5 and
//!    6 (one busy thread; the baseline's two tasks mostly share one worker) do not move.
//! 7. `app, 1 sender, metrics` — scenario 3 with the management server on (port 0) and its
//!    Prometheus metrics exposed (`management.endpoints.web.exposure.include: prometheus`): the
//!    metrics observer sees every delivery, handler attempt, settlement and send. The report
//!    gives its rate over scenario 3's, round by round: what metrics cost on the handler path.
//! 8. `app, 1 sender, #[stream_listener]` — scenario 3 with the handler declared by the macro
//!    (`async fn count(m: BenchMsg, tally: State<Tally>)`, registered with
//!    `AppBuilder::register`, its counters in `State`) instead of `handler::payload`. The
//!    report gives its rate over scenario 3's, round by round: what the macro's generated
//!    handler costs against the plain one.
//!
//! A run's time goes from spawning the producer task(s) to the consumer having received
//! every message (for the app, to the handler having counted the last one; its ack follows).
//! The app is started before the clock starts and shut down after it stops; each app run has
//! its own broker and destination (`bench-<run>`), so runs do not interfere. Each scenario gets
//! one warm-up run, then `BENCH_ROUNDS` measured rounds; a round runs every scenario once,
//! rotating which one goes first. Neither the engine publisher nor a confirmed send waits for
//! consumers (queues absorb everything, as on RabbitMQ), so the report also gives how many
//! messages were still unconsumed when the producer finished: it "ran ahead" when that is more
//! than one window of 200. Each run is bounded by a timeout, so the binary always ends.
//!
//! Run it with:
//!
//! ```text
//! cargo bench -p binder-embedded --bench runtime_throughput
//! ```
//!
//! Environment:
//! - `BENCH_MESSAGES`: messages per run (default 100000);
//! - `BENCH_ROUNDS`: measured rounds (default 7);
//! - `BENCH_SCENARIOS`: only these scenarios, by number, e.g. `3` or `1,4` (default all; for
//!   profiling one of them);
//! - `BENCH_SENDERS`: sender tasks of scenario 4 (default 16).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use binder_core::Message;
use binder_core::config::ConfigLoader;
use binder_core::runtime::{App, Output, RunningApp, State, handler};
use binder_embedded::EmbeddedBinder;
use binder_embedded::engine::{
    Broker, Channel, ConsumeOptions, Consumer, Delivery, ExchangeKind, ExchangeOptions, FieldTable,
    PublishOptions, PublishStatus, QueueOptions,
};
use serde::{Deserialize, Serialize};
use stream_macros::{input, stream_listener};
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;

mod support;
use support::{env_usize, fmt_rate, median, rate_stats, run_rounds, selected_scenarios};

const PAYLOAD_SIZE: usize = 100;
/// The engine's and the app's prefetch, and the bounded baseline's capacity.
const WINDOW: usize = 200;
/// `recv_many` limit of the baseline and engine consumers.
const BATCH: usize = 200;
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// The payload: its JSON encoding is exactly [`PAYLOAD_SIZE`] bytes (`body` pads it).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct BenchMsg {
    id: u64,
    body: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    MpscBounded,
    EngineDirect,
    AppOneSender,
    AppManySenders,
    AppPublishOnly,
    AppConsumeOnly,
    AppOneSenderMetrics,
    AppOneSenderMacro,
}

impl Scenario {
    const ALL: [Scenario; 8] = [
        Scenario::MpscBounded,
        Scenario::EngineDirect,
        Scenario::AppOneSender,
        Scenario::AppManySenders,
        Scenario::AppPublishOnly,
        Scenario::AppConsumeOnly,
        Scenario::AppOneSenderMetrics,
        Scenario::AppOneSenderMacro,
    ];

    fn label(self, senders: usize) -> String {
        match self {
            Scenario::MpscBounded => "mpsc bounded(200) [baseline]".to_owned(),
            Scenario::EngineDirect => "engine 1→1 direct".to_owned(),
            Scenario::AppOneSender => "app handler, 1 sender".to_owned(),
            Scenario::AppManySenders => format!("app handler, {senders} senders"),
            Scenario::AppPublishOnly => "app sends only (no consumer)".to_owned(),
            Scenario::AppConsumeOnly => "app handler only (full queue)".to_owned(),
            Scenario::AppOneSenderMetrics => "app handler, 1 sender, metrics".to_owned(),
            Scenario::AppOneSenderMacro => "app macro listener, 1 sender".to_owned(),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Settings {
    messages: usize,
    senders: usize,
}

/// One run's measurements.
#[derive(Debug, Clone, Copy)]
struct RunResult {
    /// Spawn to the consumer done.
    elapsed: Duration,
    /// Spawn to the producer(s) done.
    publish: Duration,
    /// Messages the consumer had not yet received when the producer(s) were done.
    unconsumed_at_publish_end: usize,
    /// Mean messages per `recv_many` (and so per ack, for the engine); the app's consumer
    /// loop is not observable from here.
    mean_batch: Option<f64>,
}

impl RunResult {
    fn msgs_per_sec(&self, messages: usize) -> f64 {
        messages as f64 / self.elapsed.as_secs_f64()
    }

    fn ran_ahead(&self) -> bool {
        self.unconsumed_at_publish_end > WINDOW
    }
}

/// What a consumer has taken so far: messages, batches and the sum of decoded ids (checked
/// at the end, so decoding cannot be optimized away or go wrong unnoticed).
#[derive(Debug, Default)]
struct Progress {
    received: AtomicUsize,
    batches: AtomicUsize,
    id_sum: AtomicU64,
}

impl Progress {
    fn add(&self, n: usize, id_sum: u64) {
        self.received.fetch_add(n, Ordering::Relaxed);
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.id_sum.fetch_add(id_sum, Ordering::Relaxed);
    }

    fn received(&self) -> usize {
        self.received.load(Ordering::Relaxed)
    }

    fn mean_batch(&self) -> f64 {
        self.received() as f64 / self.batches.load(Ordering::Relaxed).max(1) as f64
    }

    fn check(&self, n: usize) {
        assert_eq!(self.received(), n, "messages received");
        assert_eq!(
            self.id_sum.load(Ordering::Relaxed),
            expected_id_sum(n),
            "sum of decoded ids"
        );
    }
}

fn expected_id_sum(n: usize) -> u64 {
    let n = n as u64;
    n * n.saturating_sub(1) / 2
}

/// `n` payload structs, ids 0 to n - 1, each encoding to exactly 100 bytes of JSON.
fn bench_msgs(n: usize) -> Vec<BenchMsg> {
    (0..n as u64)
        .map(|id| {
            let mut m = BenchMsg {
                id,
                body: String::new(),
            };
            let bare = serde_json::to_vec(&m).expect("encode").len();
            m.body = "x".repeat(PAYLOAD_SIZE - bare);
            m
        })
        .collect()
}

/// The same payloads, pre-serialized.
fn payloads(n: usize) -> Vec<Vec<u8>> {
    bench_msgs(n)
        .iter()
        .map(|m| {
            let bytes = serde_json::to_vec(m).expect("encode");
            assert_eq!(bytes.len(), PAYLOAD_SIZE);
            bytes
        })
        .collect()
}

fn decode(payload: &[u8]) -> BenchMsg {
    serde_json::from_slice(payload).expect("decode BenchMsg")
}

async fn join<T>(handle: JoinHandle<T>) -> T {
    handle.await.expect("benchmark task panicked")
}

// ---- 1. baseline ------------------------------------------------------------------------

async fn run_mpsc(payloads: Vec<Vec<u8>>) -> RunResult {
    let n = payloads.len();
    let progress = Arc::new(Progress::default());
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(WINDOW);
    let probe = progress.clone();
    let stats = progress.clone();

    let start = Instant::now();
    let consumer = tokio::spawn(async move {
        let mut buf = Vec::with_capacity(BATCH);
        while progress.received() < n {
            let got = rx.recv_many(&mut buf, BATCH).await;
            assert!(
                got > 0,
                "channel closed after {} messages",
                progress.received()
            );
            let ids: u64 = buf.iter().map(|p| decode(p).id).sum();
            progress.add(got, ids);
            buf.clear();
        }
        Instant::now()
    });
    let producer = tokio::spawn(async move {
        for p in payloads {
            tx.send(p).await.expect("receiver alive");
        }
        (Instant::now(), n - probe.received())
    });

    let (published, unconsumed) = join(producer).await;
    let done = join(consumer).await;
    stats.check(n);
    RunResult {
        elapsed: done - start,
        publish: published - start,
        unconsumed_at_publish_end: unconsumed,
        mean_batch: Some(stats.mean_batch()),
    }
}

// ---- 2. engine alone --------------------------------------------------------------------

async fn run_engine(msgs: Vec<Message>) -> RunResult {
    const EXCHANGE: &str = "bench.direct";
    const QUEUE: &str = "bench.direct.q";
    const KEY: &str = "bench.key";
    let n = msgs.len();
    let broker = Broker::new();
    let conn = broker.connect();
    let publisher = conn.open_channel().expect("channel.open");
    publisher
        .exchange_declare(
            EXCHANGE,
            ExchangeKind::Direct,
            ExchangeOptions::default(),
            FieldTable::new(),
        )
        .expect("exchange.declare");
    publisher
        .queue_declare(QUEUE, QueueOptions::default(), FieldTable::new())
        .expect("queue.declare");
    publisher
        .queue_bind(QUEUE, EXCHANGE, KEY, FieldTable::new())
        .expect("queue.bind");
    let channel = conn.open_channel().expect("channel.open");
    channel.basic_qos(WINDOW as u16, false).expect("basic.qos");
    let consumer = channel
        .basic_consume(QUEUE, ConsumeOptions::default())
        .expect("basic.consume");
    let progress = Arc::new(Progress::default());
    let probe = progress.clone();
    let stats = progress.clone();

    let start = Instant::now();
    let consumer = tokio::spawn(engine_consume(channel, consumer, n, progress));
    let producer = tokio::spawn(async move {
        for m in msgs {
            let outcome = publisher
                .basic_publish(EXCHANGE, KEY, PublishOptions::default(), m)
                .await
                .expect("basic.publish");
            assert_eq!(outcome.status, PublishStatus::Routed(1));
        }
        (Instant::now(), n - probe.received(), publisher)
    });

    let (published, unconsumed, publisher) = join(producer).await;
    let done = join(consumer).await;
    stats.check(n);
    // Teardown after the clock stopped.
    let at = done.at;
    drop(done);
    drop(publisher);
    drop(conn);
    drop(broker);
    RunResult {
        elapsed: at - start,
        publish: published - start,
        unconsumed_at_publish_end: unconsumed,
        mean_batch: Some(stats.mean_batch()),
    }
}

struct ConsumerDone {
    at: Instant,
    // Handed back so that cancelling and closing happen after the clock stops.
    _consumer: Consumer,
    _channel: Channel,
}

async fn engine_consume(
    channel: Channel,
    mut consumer: Consumer,
    n: usize,
    progress: Arc<Progress>,
) -> ConsumerDone {
    let mut buf: Vec<Delivery> = Vec::with_capacity(BATCH);
    while progress.received() < n {
        let got = consumer.recv_many(&mut buf, BATCH).await;
        assert!(
            got > 0,
            "consumer cancelled after {} deliveries",
            progress.received()
        );
        let last = buf.last().expect("got > 0").delivery_tag;
        channel.basic_ack(last, true).expect("basic.ack");
        let ids: u64 = buf
            .iter()
            .map(|d| {
                assert!(!d.redelivered, "unexpected redelivery");
                decode(&d.message().payload).id
            })
            .sum();
        progress.add(got, ids);
        buf.clear();
    }
    ConsumerDone {
        at: Instant::now(),
        _consumer: consumer,
        _channel: channel,
    }
}

// ---- 3, 4. the full handler path --------------------------------------------------------

/// Distinguishes the destinations of app runs.
static APP_RUNS: AtomicUsize = AtomicUsize::new(0);

fn app_yaml(destination: &str, auto_startup: bool, metrics: bool) -> String {
    let management = if metrics {
        "management:\n  server:\n    port: 0\n    address: 127.0.0.1\n  endpoints:\n    web:\n      exposure:\n        include: prometheus\n"
    } else {
        ""
    };
    format!(
        "{management}spring:\n  cloud:\n    stream:\n      bindings:\n        out:\n          destination: {destination}\n        in:\n          destination: {destination}\n          group: g\n          consumer:\n            autoStartup: {auto_startup}\n      rabbit:\n        bindings:\n          in:\n            consumer:\n              prefetch: {WINDOW}\n"
    )
}

/// How the app of a handler scenario declares its handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HandlerKind {
    /// `handler::payload` with a closure (scenarios 3 to 7).
    Payload,
    /// `#[stream_listener]` on [`count`] (scenario 8).
    Macro,
}

/// The input binding of the app scenarios, for the macro's listener.
#[input("in")]
struct BenchIn;

/// The state of [`count`]: what it has handled, and whom to tell after the `n`-th.
struct Tally {
    progress: Arc<Progress>,
    all_handled: Arc<Notify>,
    n: usize,
}

/// Scenario 8's handler: what scenario 3's closure does, as a listener declared with the
/// macro.
#[stream_listener(input = BenchIn)]
async fn count(m: BenchMsg, tally: State<Tally>) {
    tally.progress.id_sum.fetch_add(m.id, Ordering::Relaxed);
    if tally.progress.received.fetch_add(1, Ordering::Relaxed) + 1 == tally.n {
        tally.all_handled.notify_one();
    }
}

/// A started app of the handler scenarios, before the clock starts: output `out`, input
/// `in` with a handler that counts and sums the ids of `n` messages.
struct BenchApp {
    app: RunningApp,
    broker: Broker,
    output: Output,
    progress: Arc<Progress>,
    /// Notified (a permit stored if nobody waits yet) once the `n`-th message is handled.
    all_handled: Arc<Notify>,
}

impl BenchApp {
    async fn start(n: usize, auto_startup: bool, metrics: bool, kind: HandlerKind) -> BenchApp {
        let destination = format!("bench-{}", APP_RUNS.fetch_add(1, Ordering::Relaxed));
        let config = ConfigLoader::new()
            .env(Vec::<(String, String)>::new())
            .yaml_str(&app_yaml(&destination, auto_startup, metrics))
            .load()
            .unwrap_or_else(|e| panic!("configuration: {e}"));
        let progress = Arc::new(Progress::default());
        let all_handled = Arc::new(Notify::new());
        let handler = {
            let progress = progress.clone();
            let all_handled = all_handled.clone();
            handler::payload(move |m: BenchMsg| {
                let progress = progress.clone();
                let all_handled = all_handled.clone();
                async move {
                    progress.id_sum.fetch_add(m.id, Ordering::Relaxed);
                    if progress.received.fetch_add(1, Ordering::Relaxed) + 1 == n {
                        all_handled.notify_one();
                    }
                }
            })
        };
        let broker = Broker::new();
        let builder =
            App::builder(config).binder("embedded", Arc::new(EmbeddedBinder::new(broker.clone())));
        let builder = match kind {
            HandlerKind::Payload => builder.listener("in", handler),
            HandlerKind::Macro => builder.register(&count_listener).state(Tally {
                progress: progress.clone(),
                all_handled: all_handled.clone(),
                n,
            }),
        };
        let app = builder
            .output("out")
            .management()
            .start()
            .await
            .unwrap_or_else(|e| panic!("app start: {e}"));
        let output = app.output("out").expect("output binding `out`");
        BenchApp {
            app,
            broker,
            output,
            progress,
            all_handled,
        }
    }

    /// Checks what was handled and tears down, after the clock stopped.
    async fn finish(self, n: usize) {
        self.progress.check(n);
        drop(self.output);
        let report = self.app.shutdown().await;
        assert!(report.drained, "shutdown did not drain: {report:?}");
        drop(self.broker);
    }
}

async fn run_app(
    msgs: Vec<BenchMsg>,
    senders: usize,
    metrics: bool,
    kind: HandlerKind,
) -> RunResult {
    let n = msgs.len();
    let senders = senders.clamp(1, n);
    let bench = BenchApp::start(n, true, metrics, kind).await;

    // Each sender's share, contiguous, split before the clock starts.
    let per_sender = n.div_ceil(senders);
    let mut shares: Vec<Vec<BenchMsg>> = Vec::with_capacity(senders);
    let mut rest = msgs.into_iter();
    for _ in 0..senders {
        shares.push(rest.by_ref().take(per_sender).collect());
    }
    let probe = bench.progress.clone();

    let start = Instant::now();
    let tasks: Vec<JoinHandle<()>> = shares
        .into_iter()
        .map(|share| tokio::spawn(send_all(bench.output.clone(), share)))
        .collect();
    let producer = tokio::spawn(async move {
        for t in tasks {
            join(t).await;
        }
        (Instant::now(), n - probe.received())
    });
    bench.all_handled.notified().await;
    let done = Instant::now();

    let (published, unconsumed) = join(producer).await;
    bench.finish(n).await;
    RunResult {
        elapsed: done - start,
        publish: published - start,
        unconsumed_at_publish_end: unconsumed,
        mean_batch: None,
    }
}

async fn send_all(output: Output, msgs: Vec<BenchMsg>) {
    for m in &msgs {
        output.send(m).await.expect("output.send");
    }
}

// ---- 5, 6. each side of the handler path alone ------------------------------------------

/// Which half of [`run_app_split`] is timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Publish,
    Consume,
}

/// The app of scenario 3 with its input binding stopped at first: the sender fills the
/// group queue with no consumer running (timed for [`Phase::Publish`]), then the binding is
/// started and drains it (timed for [`Phase::Consume`]). Each side then has a core to itself,
/// which shows what each costs without the other competing for the CPU and the engine lock.
async fn run_app_split(msgs: Vec<BenchMsg>, phase: Phase) -> RunResult {
    let n = msgs.len();
    let bench = BenchApp::start(n, false, false, HandlerKind::Payload).await;

    let start = Instant::now();
    send_all(bench.output.clone(), msgs).await;
    let published = Instant::now();
    bench.app.start("in").await.expect("start `in`");
    bench.all_handled.notified().await;
    let done = Instant::now();

    bench.finish(n).await;
    let elapsed = match phase {
        Phase::Publish => published - start,
        Phase::Consume => done - published,
    };
    RunResult {
        elapsed,
        publish: elapsed,
        unconsumed_at_publish_end: 0,
        mean_batch: None,
    }
}

// ---- driver -----------------------------------------------------------------------------

async fn run(scenario: Scenario, settings: Settings) -> RunResult {
    use HandlerKind::{Macro, Payload};
    let n = settings.messages;
    // Inputs are built before the timed part of each scenario.
    let fut = async move {
        match scenario {
            Scenario::MpscBounded => run_mpsc(payloads(n)).await,
            Scenario::EngineDirect => {
                run_engine(payloads(n).into_iter().map(Message::new).collect()).await
            }
            Scenario::AppOneSender => run_app(bench_msgs(n), 1, false, Payload).await,
            Scenario::AppManySenders => {
                run_app(bench_msgs(n), settings.senders, false, Payload).await
            }
            Scenario::AppOneSenderMetrics => run_app(bench_msgs(n), 1, true, Payload).await,
            Scenario::AppOneSenderMacro => run_app(bench_msgs(n), 1, false, Macro).await,
            Scenario::AppPublishOnly => run_app_split(bench_msgs(n), Phase::Publish).await,
            Scenario::AppConsumeOnly => run_app_split(bench_msgs(n), Phase::Consume).await,
        }
    };
    tokio::time::timeout(RUN_TIMEOUT, fut)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{} did not finish within {RUN_TIMEOUT:?}",
                scenario.label(settings.senders)
            )
        })
}

fn main() {
    let settings = Settings {
        messages: env_usize("BENCH_MESSAGES", 100_000).max(1),
        senders: env_usize("BENCH_SENDERS", 16).max(1),
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
        "runtime_throughput: {n} messages of {PAYLOAD_SIZE} B JSON per run, 1 warm-up + {rounds} \
         rounds, tokio multi-thread runtime with 2 workers, {} CPUs",
        std::thread::available_parallelism().map_or(0, |p| p.get())
    );
    println!(
        "baseline: bounded tokio mpsc, capacity {WINDOW}, pre-serialized Vec<u8> payloads, \
         recv_many limit {BATCH}, serde_json decode per message; engine: prefetch {WINDOW}, one \
         ack (multiple) per batch; app: prefetch {WINDOW}, acknowledgeMode AUTO, concurrency 1, \
         output.send(&struct) awaiting each confirm"
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

    println!();
    println!(
        "{:<3} {:<30} {:>10} {:>10} {:>10} {:>10}",
        "#", "scenario", "median/s", "min/s", "max/s", "vs base"
    );
    for (i, scenario) in Scenario::ALL.iter().enumerate() {
        let Some((med, min, max)) = stats[i] else {
            continue;
        };
        let ratio = match stats[0] {
            Some((base, _, _)) => format!("{:.1}%", 100.0 * med / base),
            None => "n/a".to_owned(),
        };
        println!(
            "{:<3} {:<30} {:>10} {:>10} {:>10} {:>10}",
            i + 1,
            scenario.label(settings.senders),
            fmt_rate(med),
            fmt_rate(min),
            fmt_rate(max),
            ratio,
        );
    }

    println!();
    println!(
        "publishing vs consumption (medians; 'ran ahead' = the producer finished with more than \
         {WINDOW} messages not yet received):"
    );
    let mut ahead_note = Vec::new();
    for (i, scenario) in Scenario::ALL.iter().enumerate() {
        let rs = &results[i];
        if rs.is_empty() {
            continue;
        }
        let ahead = rs.iter().filter(|r| r.ran_ahead()).count();
        if ahead > 0 {
            ahead_note.push(format!(
                "{} ({ahead}/{})",
                scenario.label(settings.senders),
                rs.len()
            ));
        }
        let mut publish: Vec<f64> = rs.iter().map(|r| r.publish.as_secs_f64() * 1e3).collect();
        let mut elapsed: Vec<f64> = rs.iter().map(|r| r.elapsed.as_secs_f64() * 1e3).collect();
        let mut unconsumed: Vec<f64> = rs
            .iter()
            .map(|r| r.unconsumed_at_publish_end as f64)
            .collect();
        let mut batches: Vec<f64> = rs.iter().filter_map(|r| r.mean_batch).collect();
        let batch = if batches.is_empty() {
            "n/a".to_owned()
        } else {
            format!("{:.1}", median(&mut batches))
        };
        println!(
            "{:<3} {:<30} publish done {:>6.1} ms, all received {:>6.1} ms, unreceived at publish \
             end {:>7.0}, ran ahead in {ahead}/{} runs, {batch:>5} msgs per recv_many",
            i + 1,
            scenario.label(settings.senders),
            median(&mut publish),
            median(&mut elapsed),
            median(&mut unconsumed),
            rs.len(),
        );
    }
    for (label, of) in [
        ("metrics on / off (7 / 3)", 6),
        ("#[stream_listener] / handler::payload (8 / 3)", 7),
    ] {
        let (with, without) = (&results[of], &results[2]);
        if with.is_empty() || with.len() != without.len() {
            continue;
        }
        let mut ratios: Vec<f64> = with
            .iter()
            .zip(without)
            .map(|(m, p)| m.msgs_per_sec(n) / p.msgs_per_sec(n))
            .collect();
        let (lo, hi) = ratios
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), r| (lo.min(*r), hi.max(*r)));
        println!();
        println!(
            "{label}, per round: median {:.3} ({lo:.3}–{hi:.3}) over {} rounds",
            median(&mut ratios),
            ratios.len()
        );
    }
    println!(
        "producer ran ahead of its consumer in: {}",
        if ahead_note.is_empty() {
            "no scenario".to_owned()
        } else {
            ahead_note.join(", ")
        }
    );
}
