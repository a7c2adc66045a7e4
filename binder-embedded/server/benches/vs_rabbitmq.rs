//! stream-broker against the RabbitMQ on this machine, with lapin clients on both sides.
//!
//! A `stream_broker::Server::standalone` runs in this process on `127.0.0.1:0` (on its own
//! Tokio runtime with 2 workers) with a fresh data dir (durability `sync`, the default);
//! RabbitMQ is the broker at `AMQP_URL`. The clients run on a second runtime with 2 workers.
//! Both brokers share the machine's CPUs with the clients, so neither gets a core of its own.
//! Every run gets a fresh connection and a fresh, uniquely named queue (declared with
//! `x-queue-type: classic`, published to through the default exchange, deleted afterwards,
//! also after a failure); nothing else on the RabbitMQ is touched.
//!
//! Scenarios (the throughput workloads are `binder-rabbit/benches/rabbit_throughput.rs`'s raw
//! lapin ones):
//!
//! 1. `transient` — delivery mode 1 to a non-durable queue, a confirm channel with a sliding
//!    window of 16 publishes in flight (`BENCH_TRANSIENT_WINDOW`; from `basic_publish` to its
//!    confirm); one consumer
//!    with `basic.qos(200)` acking `multiple` every 50 deliveries, whenever no further
//!    delivery is buffered, and after the last one. 100-byte bodies, `BENCH_MESSAGES`
//!    messages; msg/s from spawning producer and consumer to the consumer's last ack.
//! 2. `persistent` — the same with delivery mode 2 to a durable classic queue and 1,000
//!    publishes in flight (`BENCH_WINDOW`), once per body size of `BENCH_BODY` (100 B and
//!    4 kB by default).
//!    Both brokers write the messages to disk and confirm a publish once it is synced:
//!    stream-broker into its data dir (a `tempfile` directory under `BENCH_DATA_DIR`, which
//!    must not be a tmpfs), RabbitMQ into its own (on this machine the same disk). Besides
//!    msg/s it reports publish→confirm latency (p50, p99 over every publish) and, for
//!    stream-broker, the store's syncs per second and messages per sync (`Server::store_syncs`
//!    before and after the run). Each round first times `BENCH_FSYNCS` (200) appends of 4 kB,
//!    each followed by `fdatasync`, on a file in the data dir (both brokers idle): the cost of
//!    one fsync on this disk; it prints each broker's confirm p99 over that fsync p50.
//! 3. `latency` — 1,000 msg/s for `BENCH_LATENCY_SECS`, each published (with confirms,
//!    collected aside) at its scheduled time with the send time in its body; the consumer
//!    (prefetch 200) acks each delivery on its own and records publish→deliver. p50, p99 and
//!    max in microseconds.
//!
//! A warm-up round, then `BENCH_ROUNDS` rounds; in each round every scenario runs against
//! both brokers, alternating which goes first. Each round prints both brokers' figures and
//! the ratio stream-broker/RabbitMQ (for throughput above 1 is better for stream-broker, for
//! latency below 1); the summary gives the median and min–max of those per-round ratios.
//!
//! ```text
//! cargo bench -p stream-broker --bench vs_rabbitmq
//! ```
//!
//! Environment: `AMQP_URL` (default `amqp://guest:guest@127.0.0.1:5672/%2f`),
//! `BENCH_MESSAGES` (default 100000), `BENCH_WINDOW` (the persistent scenario's publishes in
//! flight, default 1000), `BENCH_TRANSIENT_WINDOW` (the transient scenario's, default 16: with
//! 1000 it is the persistent scenario's workload without the disk, what the clients and the
//! protocol path carry at most), `BENCH_BODY` (the persistent scenario's body sizes in
//! bytes, e.g. `4096` or `100,4096`; default `100,4096`), `BENCH_DATA_DIR` (where the data
//! dir is created; default the system's temp dir), `BENCH_FSYNCS` (default 200),
//! `BENCH_LATENCY_SECS` (default 10), `BENCH_ROUNDS` (default 5), `BENCH_SCENARIOS` (e.g. `1`
//! or `1,3`; default all), `BENCH_BROKERS` (`both`, `stream-broker` or `rabbitmq`, default
//! `both`: one side alone is for profiling and prints no ratios). Without a RabbitMQ
//! answering, it says so and measures nothing.

use std::future::Future;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::{FutureExt, StreamExt};
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionProperties};
use stream_broker::{Server, ServerConfig};
use stream_store::SyncMode;
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;

#[path = "../../benches/support/mod.rs"]
#[allow(dead_code)]
mod support;
use support::{env_usize, fmt_rate, median, selected_scenarios};

const DEFAULT_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
/// The body size of the transient and latency scenarios.
const SMALL_BODY: usize = 100;
const DEFAULT_BODIES: [usize; 2] = [100, 4096];
const PREFETCH: u16 = 200;
const ACK_EVERY: usize = 50;
/// Publishes in flight in the transient scenario unless `BENCH_TRANSIENT_WINDOW` says otherwise.
const TRANSIENT_WINDOW: usize = 16;
/// Publishes in flight in the persistent scenario unless `BENCH_WINDOW` says otherwise.
const PERSISTENT_WINDOW: usize = 1_000;
/// Messages per second in the latency scenario.
const LATENCY_RATE: u64 = 1_000;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The size of one write of the fsync baseline.
const FSYNC_WRITE: usize = 4096;

type RunError = String;

fn fail(what: &str) -> impl Fn(lapin::Error) -> RunError + '_ {
    move |e| format!("{what}: {e}")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    Transient,
    Persistent,
    Latency,
}

impl Scenario {
    const ALL: [Scenario; 3] = [Scenario::Transient, Scenario::Persistent, Scenario::Latency];

    fn label(self) -> &'static str {
        match self {
            Scenario::Transient => "transient",
            Scenario::Persistent => "persistent",
            Scenario::Latency => "latency",
        }
    }
}

/// One measured workload: a scenario with its body size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Case {
    scenario: Scenario,
    body: usize,
}

impl Case {
    fn label(self) -> String {
        match self.scenario {
            Scenario::Persistent => format!("persistent {}", fmt_bytes(self.body)),
            other => other.label().to_owned(),
        }
    }
}

fn fmt_bytes(n: usize) -> String {
    if n >= 1024 && n % 1024 == 0 {
        format!("{} kB", n / 1024)
    } else {
        format!("{n} B")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    StreamBroker,
    RabbitMq,
}

impl Side {
    fn label(self) -> &'static str {
        match self {
            Side::StreamBroker => "stream-broker",
            Side::RabbitMq => "RabbitMQ",
        }
    }
}

/// How a metric's value is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    /// Messages per second.
    Rate,
    /// Microseconds.
    Micros,
    /// A plain number with one decimal.
    Number,
}

/// One named value of a run.
#[derive(Debug, Clone, Copy)]
struct Metric {
    name: &'static str,
    value: f64,
    unit: Unit,
    /// Whether the per-round ratio stream-broker/RabbitMQ of this metric is reported.
    compared: bool,
}

impl Metric {
    fn compared(name: &'static str, value: f64, unit: Unit) -> Self {
        Metric {
            name,
            value,
            unit,
            compared: true,
        }
    }

    fn own(name: &'static str, value: f64, unit: Unit) -> Self {
        Metric {
            name,
            value,
            unit,
            compared: false,
        }
    }
}

/// One run's figures.
type Figure = Vec<Metric>;

fn fmt_value(value: f64, unit: Unit) -> String {
    match unit {
        Unit::Rate => format!("{}/s", fmt_rate(value)),
        Unit::Micros if value >= 1_000.0 => format!("{:.1} ms", value / 1e3),
        Unit::Micros => format!("{value:.0} µs"),
        Unit::Number => format!("{value:.1}"),
    }
}

fn fmt_figure(f: &Figure) -> String {
    f.iter()
        .map(|m| format!("{} {}", m.name, fmt_value(m.value, m.unit)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The value at quantile `q` of a sorted, non-empty sample.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() as f64 * q) as usize).min(sorted.len() - 1)]
}

/// A spawned task that is aborted when dropped (a run that times out leaves nothing behind).
struct Task<T>(JoinHandle<T>);

impl<T: Send + 'static> Task<T> {
    fn spawn(f: impl Future<Output = T> + Send + 'static) -> Self {
        Task(tokio::spawn(f))
    }

    async fn join(mut self) -> Result<T, RunError> {
        (&mut self.0)
            .await
            .map_err(|e| format!("benchmark task failed: {e}"))
    }
}

impl<T> Drop for Task<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn check_confirm(c: Confirmation) -> Result<(), RunError> {
    match c {
        Confirmation::Ack(_) => Ok(()),
        other => Err(format!("publish not confirmed: {other:?}")),
    }
}

/// A URL without its password, for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let user = url[s + 3..at].split(':').next().unwrap_or_default();
            format!("{}{user}:***{}", &url[..s + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

/// Body `i` of `size` bytes (at least 8): its number, then `x`s.
fn payload(i: usize, size: usize) -> Vec<u8> {
    let mut payload = vec![b'x'; size];
    payload[..8].copy_from_slice(&(i as u64).to_le_bytes());
    payload
}

/// The clock latency bodies carry: nanoseconds since the first call.
fn nanos_now() -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    BASE.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// A connection with a confirm channel for publishing and a consumer on `queue`.
struct Clients {
    conn: Connection,
    publisher: Channel,
    consuming: Channel,
    consumer: lapin::Consumer,
}

async fn clients(url: &str, queue: &str) -> Result<Clients, RunError> {
    let conn = Connection::connect(url, ConnectionProperties::default())
        .await
        .map_err(fail("connect"))?;
    let publisher = conn.create_channel().await.map_err(fail("channel.open"))?;
    publisher
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .map_err(fail("confirm.select"))?;
    let consuming = conn.create_channel().await.map_err(fail("channel.open"))?;
    consuming
        .basic_qos(PREFETCH, BasicQosOptions { global: false })
        .await
        .map_err(fail("basic.qos"))?;
    let consumer = consuming
        .basic_consume(
            ShortString::from(queue),
            ShortString::from(""),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .map_err(fail("basic.consume"))?;
    Ok(Clients {
        conn,
        publisher,
        consuming,
        consumer,
    })
}

impl Clients {
    async fn close(self) {
        drop(self.consumer);
        let _ = self.publisher.close(200, ShortString::from("OK")).await;
        let _ = self.consuming.close(200, ShortString::from("OK")).await;
        let _ = self.conn.close(200, ShortString::from("OK")).await;
    }
}

// ---- throughput ---------------------------------------------------------------------------

/// Publishes `n` bodies of `size` bytes with at most `window` unconfirmed; returns the
/// channel and each publish's time from `basic_publish` to its confirm, in microseconds.
async fn publish_window(
    ch: Channel,
    queue: ShortString,
    n: usize,
    size: usize,
    delivery_mode: u8,
    window: usize,
) -> Result<(Channel, Vec<f64>), RunError> {
    let props = BasicProperties::default().with_delivery_mode(delivery_mode);
    let exchange = ShortString::from("");
    let mut confirm_micros = Vec::with_capacity(n);
    let mut in_flight = futures::stream::iter(0..n)
        .map(|i| {
            let (ch, exchange, queue, props) =
                (&ch, exchange.clone(), queue.clone(), props.clone());
            async move {
                let body = payload(i, size);
                let sent = Instant::now();
                let confirm = ch
                    .basic_publish(
                        exchange,
                        queue,
                        BasicPublishOptions::default(),
                        &body,
                        props,
                    )
                    .await
                    .map_err(fail("basic.publish"))?;
                check_confirm(confirm.await.map_err(fail("publisher confirm"))?)?;
                Ok::<_, RunError>(sent.elapsed().as_secs_f64() * 1e6)
            }
        })
        .buffer_unordered(window);
    while let Some(r) = in_flight.next().await {
        confirm_micros.push(r?);
    }
    drop(in_flight);
    Ok((ch, confirm_micros))
}

/// Receives `n` deliveries of `size` bytes, acking (`multiple`) every `ACK_EVERY`, when idle,
/// and at the end.
async fn consume_batched(
    mut consumer: lapin::Consumer,
    n: usize,
    size: usize,
) -> Result<(Instant, lapin::Consumer), RunError> {
    let ack = BasicAckOptions { multiple: true };
    let (mut count, mut bytes, mut unacked) = (0, 0, 0);
    let mut pending: Option<lapin::Acker> = None;
    while count < n {
        let next = match consumer.next().now_or_never() {
            Some(next) => next,
            None => {
                if let Some(acker) = pending.take() {
                    acker.ack(ack).await.map_err(fail("basic.ack"))?;
                    unacked = 0;
                }
                consumer.next().await
            }
        };
        let delivery = next
            .ok_or_else(|| format!("consumer ended after {count} of {n} deliveries"))?
            .map_err(fail("delivery"))?;
        if delivery.redelivered {
            return Err("unexpected redelivery".into());
        }
        count += 1;
        unacked += 1;
        bytes += delivery.data.len();
        if unacked >= ACK_EVERY || count == n {
            delivery.acker.ack(ack).await.map_err(fail("basic.ack"))?;
            unacked = 0;
            pending = None;
        } else {
            pending = Some(delivery.acker);
        }
    }
    if bytes != n * size {
        return Err(format!("received {bytes} bytes, expected {}", n * size));
    }
    Ok((Instant::now(), consumer))
}

/// The store's sync counter of the broker under test (stream-broker's), if it has one.
type SyncCounter<'a> = Option<&'a dyn Fn() -> u64>;

async fn run_throughput(
    url: &str,
    queue: &str,
    messages: usize,
    window: usize,
    case: Case,
    syncs: SyncCounter<'_>,
) -> Result<Figure, RunError> {
    let persistent = case.scenario == Scenario::Persistent;
    let Clients {
        conn,
        publisher,
        consuming,
        consumer,
    } = clients(url, queue).await?;
    let mode = if persistent { 2 } else { 1 };
    let syncs_before = syncs.map(|count| count());
    let start = Instant::now();
    let consumer = Task::spawn(consume_batched(consumer, messages, case.body));
    let producer = Task::spawn(publish_window(
        publisher,
        ShortString::from(queue),
        messages,
        case.body,
        mode,
        window,
    ));
    let (publisher, mut confirm_micros) = producer.join().await??;
    let (done, consumer) = consumer.join().await??;
    let secs = (done - start).as_secs_f64();
    let synced = syncs
        .zip(syncs_before)
        .map(|(count, before)| count() - before);
    Clients {
        conn,
        publisher,
        consuming,
        consumer,
    }
    .close()
    .await;
    let mut figure = vec![Metric::compared(
        "msg/s",
        messages as f64 / secs,
        Unit::Rate,
    )];
    if persistent {
        confirm_micros.sort_by(f64::total_cmp);
        figure.push(Metric::compared(
            "confirm p50",
            quantile(&confirm_micros, 0.50),
            Unit::Micros,
        ));
        figure.push(Metric::compared(
            "confirm p99",
            quantile(&confirm_micros, 0.99),
            Unit::Micros,
        ));
        if let Some(synced) = synced {
            if synced == 0 {
                return Err("the store did not sync once: persistent messages not on disk".into());
            }
            figure.push(Metric::own("syncs/s", synced as f64 / secs, Unit::Number));
            figure.push(Metric::own(
                "msg/sync",
                messages as f64 / synced as f64,
                Unit::Number,
            ));
        }
    }
    Ok(figure)
}

// ---- latency ------------------------------------------------------------------------------

/// Awaits each publisher confirm handed over, in order, until the sender is gone.
async fn await_confirms<F>(rx: &mut tokio::sync::mpsc::UnboundedReceiver<F>) -> Result<(), RunError>
where
    F: Future<Output = Result<Confirmation, lapin::Error>>,
{
    while let Some(confirm) = rx.recv().await {
        check_confirm(confirm.await.map_err(fail("publisher confirm"))?)?;
    }
    Ok(())
}

async fn run_latency(url: &str, queue: &str, secs: u64) -> Result<Figure, RunError> {
    let n = (LATENCY_RATE * secs).max(1) as usize;
    let Clients {
        conn,
        publisher,
        consuming,
        mut consumer,
    } = clients(url, queue).await?;
    let consumer = Task::spawn(async move {
        let mut latencies = Vec::with_capacity(n);
        while latencies.len() < n {
            let delivery = consumer
                .next()
                .await
                .ok_or_else(|| format!("consumer ended after {} of {n}", latencies.len()))?
                .map_err(fail("delivery"))?;
            let now = nanos_now();
            let sent = delivery
                .data
                .get(..8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_le_bytes)
                .ok_or("a delivery without a timestamp")?;
            latencies.push(now.saturating_sub(sent) as f64 / 1e3);
            delivery
                .acker
                .ack(BasicAckOptions::default())
                .await
                .map_err(fail("basic.ack"))?;
        }
        Ok::<_, RunError>((latencies, consumer))
    });
    // Confirms are awaited aside, so that a slow one does not delay the next publish.
    let (confirms_tx, mut confirms_rx) = tokio::sync::mpsc::unbounded_channel();
    let confirms = Task::spawn(async move { await_confirms(&mut confirms_rx).await });
    let exchange = ShortString::from("");
    let key = ShortString::from(queue);
    let props = BasicProperties::default().with_delivery_mode(1);
    let period = Duration::from_nanos(1_000_000_000 / LATENCY_RATE);
    let start = tokio::time::Instant::now();
    let mut body = vec![b'x'; SMALL_BODY];
    for i in 0..n {
        tokio::time::sleep_until(start + period * i as u32).await;
        body[..8].copy_from_slice(&nanos_now().to_le_bytes());
        let confirm = publisher
            .basic_publish(
                exchange.clone(),
                key.clone(),
                BasicPublishOptions::default(),
                &body,
                props.clone(),
            )
            .await
            .map_err(fail("basic.publish"))?;
        let _ = confirms_tx.send(confirm);
    }
    drop(confirms_tx);
    confirms.join().await??;
    let (mut latencies, consumer) = consumer.join().await??;
    Clients {
        conn,
        publisher,
        consuming,
        consumer,
    }
    .close()
    .await;
    latencies.sort_by(f64::total_cmp);
    Ok(vec![
        Metric::compared("p50", quantile(&latencies, 0.50), Unit::Micros),
        Metric::compared("p99", quantile(&latencies, 0.99), Unit::Micros),
        Metric::compared("max", latencies[latencies.len() - 1], Unit::Micros),
    ])
}

// ---- the disk -----------------------------------------------------------------------------

/// Times `n` appends of 4 kB, each followed by `fdatasync`, on a fresh file in `dir`
/// (removed afterwards): p50 and p99 in microseconds.
fn fsync_baseline(dir: &Path, n: usize) -> std::io::Result<(f64, f64)> {
    let path = dir.join("fsync-baseline");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)?;
    let block = vec![b'f'; FSYNC_WRITE];
    let mut micros = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        file.write_all(&block)?;
        file.sync_data()?;
        micros.push(start.elapsed().as_secs_f64() * 1e6);
    }
    drop(file);
    std::fs::remove_file(&path)?;
    micros.sort_by(f64::total_cmp);
    Ok((quantile(&micros, 0.50), quantile(&micros, 0.99)))
}

/// The file system `path` is on (`type` and device, from `/proc/self/mounts`), if known.
fn file_system_of(path: &Path) -> Option<(String, String)> {
    let path = path.canonicalize().ok()?;
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    let mut best: Option<(usize, String, String)> = None;
    for line in mounts.lines() {
        let mut fields = line.split(' ');
        let (Some(device), Some(mount), Some(fs_type)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        // `/proc/self/mounts` writes a space as `\040`.
        let mount = PathBuf::from(mount.replace("\\040", " "));
        let depth = mount.components().count();
        if path.starts_with(&mount) && best.as_ref().is_none_or(|(d, _, _)| depth >= *d) {
            best = Some((depth, fs_type.to_owned(), device.to_owned()));
        }
    }
    best.map(|(_, fs_type, device)| (fs_type, device))
}

// ---- runs ---------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Settings {
    messages: usize,
    /// Publishes in flight in the persistent scenario.
    persistent_window: usize,
    /// Publishes in flight in the transient scenario.
    transient_window: usize,
    latency_secs: u64,
}

/// A queue name no other run (of this or another process) uses.
fn queue_name(scenario: Scenario, side: Side, run: usize) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let side = match side {
        Side::StreamBroker => "sb",
        Side::RabbitMq => "rmq",
    };
    format!(
        "bench.vs_rabbitmq.{}.{side}.{}.{run}.{nanos}",
        scenario.label(),
        std::process::id()
    )
}

/// One broker's end: its URL and a connection for declaring and deleting queues.
struct Target {
    side: Side,
    url: String,
    admin: Connection,
}

/// One run on a fresh queue, deleted afterwards (also after a failure or a timeout).
async fn run(
    target: &Target,
    case: Case,
    settings: &Settings,
    run: usize,
    syncs: SyncCounter<'_>,
) -> Result<Figure, RunError> {
    let scenario = case.scenario;
    let queue = queue_name(scenario, target.side, run);
    let ch = target
        .admin
        .create_channel()
        .await
        .map_err(fail("channel.open"))?;
    // A classic queue (RabbitMQ's default type, named so that no server default changes it),
    // durable for the persistent scenario.
    let mut arguments = FieldTable::default();
    arguments.insert(
        ShortString::from("x-queue-type"),
        AMQPValue::LongString("classic".into()),
    );
    ch.queue_declare(
        ShortString::from(queue.as_str()),
        QueueDeclareOptions {
            durable: scenario == Scenario::Persistent,
            ..Default::default()
        },
        arguments,
    )
    .await
    .map_err(fail("queue.declare"))?;
    let limit = Duration::from_secs(60 + settings.latency_secs)
        + Duration::from_millis(settings.messages as u64 * (1 + case.body as u64 / 1024));
    let url = target.url.as_str();
    let measured = match scenario {
        Scenario::Transient | Scenario::Persistent => {
            tokio::time::timeout(
                limit,
                run_throughput(
                    url,
                    &queue,
                    settings.messages,
                    if scenario == Scenario::Persistent {
                        settings.persistent_window
                    } else {
                        settings.transient_window
                    },
                    case,
                    syncs,
                ),
            )
            .await
        }
        Scenario::Latency => {
            tokio::time::timeout(limit, run_latency(url, &queue, settings.latency_secs)).await
        }
    };
    let deleted = ch
        .queue_delete(
            ShortString::from(queue.as_str()),
            QueueDeleteOptions::default(),
        )
        .await;
    let _ = ch.close(200, ShortString::from("OK")).await;
    if let Err(e) = deleted {
        eprintln!(
            "vs_rabbitmq: cannot delete queue `{queue}` on {}: {e}",
            target.side.label()
        );
    }
    measured
        .map_err(|_| format!("did not finish within {limit:?}"))
        .and_then(|r| r)
}

async fn connect_admin(url: &str) -> Result<Connection, String> {
    match tokio::time::timeout(
        CONNECT_TIMEOUT,
        Connection::connect(url, ConnectionProperties::default()),
    )
    .await
    {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {CONNECT_TIMEOUT:?}")),
    }
}

fn runtime(name: &str) -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(name)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Which brokers `BENCH_BROKERS` selects.
fn selected_sides() -> Vec<Side> {
    match std::env::var("BENCH_BROKERS").as_deref() {
        Err(_) | Ok("both") => vec![Side::StreamBroker, Side::RabbitMq],
        Ok("stream-broker") => vec![Side::StreamBroker],
        Ok("rabbitmq") => vec![Side::RabbitMq],
        Ok(other) => {
            panic!("BENCH_BROKERS takes `both`, `stream-broker` or `rabbitmq`, got {other:?}")
        }
    }
}

/// The persistent scenario's body sizes (`BENCH_BODY`).
fn selected_bodies() -> Vec<usize> {
    let Ok(v) = std::env::var("BENCH_BODY") else {
        return DEFAULT_BODIES.to_vec();
    };
    let bodies: Vec<usize> = v
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            p.replace('_', "")
                .parse()
                .ok()
                .filter(|&n| n >= 8)
                .unwrap_or_else(|| {
                    panic!("BENCH_BODY takes body sizes in bytes (at least 8), got {v:?}")
                })
        })
        .collect();
    if bodies.is_empty() {
        panic!("BENCH_BODY takes body sizes in bytes (at least 8), got {v:?}");
    }
    bodies
}

/// The ratios stream-broker/RabbitMQ of the metrics both report, by name.
fn ratios(sb: &Figure, rmq: &Figure) -> Vec<(&'static str, f64)> {
    sb.iter()
        .filter(|m| m.compared)
        .filter_map(|a| {
            rmq.iter()
                .find(|b| b.name == a.name)
                .map(|b| (a.name, a.value / b.value))
        })
        .collect()
}

/// `median (min–max)` of a sample, each value formatted by `fmt`.
fn spread(values: &mut [f64], fmt: impl Fn(f64) -> String) -> String {
    let m = median(values);
    format!(
        "{} ({}–{})",
        fmt(m),
        fmt(values[0]),
        fmt(values[values.len() - 1])
    )
}

/// One round's figures of a case: each target's, and the fsync baseline measured before.
struct RoundFigures {
    figures: Vec<Figure>,
    fsync: Option<(f64, f64)>,
}

/// The metrics over a round's fsync baseline: each broker's confirm p99 / fsync p50.
fn fsync_ratios(figures: &[Figure], targets: &[Target], fsync_p50: f64) -> Vec<(String, f64)> {
    targets
        .iter()
        .zip(figures)
        .filter_map(|(t, f)| {
            f.iter().find(|m| m.name == "confirm p99").map(|m| {
                (
                    format!("{} confirm p99/fsync p50", t.side.label()),
                    m.value / fsync_p50,
                )
            })
        })
        .collect()
}

fn main() {
    let url = std::env::var("AMQP_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned());
    let settings = Settings {
        messages: env_usize("BENCH_MESSAGES", 100_000).max(1),
        persistent_window: env_usize("BENCH_WINDOW", PERSISTENT_WINDOW).max(1),
        transient_window: env_usize("BENCH_TRANSIENT_WINDOW", TRANSIENT_WINDOW).max(1),
        latency_secs: env_usize("BENCH_LATENCY_SECS", 10).max(1) as u64,
    };
    let rounds = env_usize("BENCH_ROUNDS", 5).max(1);
    let fsyncs = env_usize("BENCH_FSYNCS", 200).max(1);
    let selected = selected_scenarios(Scenario::ALL.len());
    let bodies = selected_bodies();
    let sides = selected_sides();
    let mut cases = Vec::new();
    for (s, scenario) in Scenario::ALL.iter().enumerate() {
        if !selected[s] {
            continue;
        }
        match scenario {
            Scenario::Persistent => cases.extend(bodies.iter().map(|&body| Case {
                scenario: *scenario,
                body,
            })),
            _ => cases.push(Case {
                scenario: *scenario,
                body: SMALL_BODY,
            }),
        }
    }
    let server_rt = runtime("stream-broker");
    let client_rt = runtime("bench-client");
    nanos_now();

    let parent = std::env::var_os("BENCH_DATA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let data = tempfile::Builder::new()
        .prefix("vs_rabbitmq.")
        .tempdir_in(&parent)
        .unwrap_or_else(|e| panic!("BENCH_DATA_DIR: cannot create a directory in {parent:?}: {e}"));
    let fs = file_system_of(data.path());
    if let Some((fs_type, _)) = &fs {
        if fs_type == "tmpfs" || fs_type == "ramfs" {
            eprintln!(
                "vs_rabbitmq: {} is on {fs_type}: persistent messages would not reach a disk; \
                 set BENCH_DATA_DIR to a directory on disk",
                data.path().display()
            );
            std::process::exit(2);
        }
    }

    let server = server_rt
        .block_on(Server::standalone(ServerConfig {
            listen: "127.0.0.1:0".parse().expect("an address"),
            data_dir: Some(data.path().join("broker")),
            durability: Some(SyncMode::Sync),
            ..ServerConfig::default()
        }))
        .expect("stream-broker binds");
    let sb_url = format!("amqp://guest:guest@{}/%2f", server.local_addr());
    let count_syncs = || server.store_syncs();

    let mut targets = Vec::new();
    for side in &sides {
        let url = match side {
            Side::StreamBroker => sb_url.clone(),
            Side::RabbitMq => url.clone(),
        };
        match client_rt.block_on(connect_admin(&url)) {
            Ok(admin) => targets.push(Target {
                side: *side,
                url,
                admin,
            }),
            Err(e) => {
                println!(
                    "vs_rabbitmq: no broker answers at {} ({e}); nothing measured. Start \
                     RabbitMQ or point AMQP_URL at one.",
                    redact(&url)
                );
                return;
            }
        }
    }

    println!(
        "vs_rabbitmq: {} CPUs; stream-broker in process at {} (runtime with 2 workers), \
         RabbitMQ at {}; lapin clients on a runtime with 2 workers",
        std::thread::available_parallelism().map_or(0, |p| p.get()),
        server.local_addr(),
        redact(&url)
    );
    println!(
        "stream-broker data dir {} on {} (durability sync: a confirm waits for the fdatasync \
         covering the message)",
        data.path().display(),
        fs.as_ref()
            .map_or("an unknown file system".to_owned(), |(t, d)| format!(
                "{t} ({d})"
            ))
    );
    println!(
        "transient: {} messages of {SMALL_BODY} B, {} in flight; persistent \
         (delivery mode 2, durable classic queue): {} messages of {}, {} in \
         flight; prefetch {PREFETCH}, acks multiple every {ACK_EVERY} (and when idle); \
         latency: {LATENCY_RATE} msg/s for {} s, ack each",
        settings.messages,
        settings.transient_window,
        settings.messages,
        bodies
            .iter()
            .map(|&b| fmt_bytes(b))
            .collect::<Vec<_>>()
            .join(" and "),
        settings.persistent_window,
        settings.latency_secs
    );
    println!(
        "fsync baseline (before each round's persistent runs, brokers idle): {fsyncs} × \
         (append {FSYNC_WRITE} B + fdatasync) in the data dir"
    );
    println!("warm-up round, then {rounds} rounds; ratio = stream-broker/RabbitMQ");

    // results[case] = per measured round, the figures of each side in `targets` order.
    let mut results: Vec<Vec<RoundFigures>> = (0..cases.len()).map(|_| Vec::new()).collect();
    let mut run_no = 0;
    for round in 0..=rounds {
        let name = if round == 0 {
            "warm-up".to_owned()
        } else {
            format!("round {round}")
        };
        for (c, case) in cases.iter().enumerate() {
            let fsync = (case.scenario == Scenario::Persistent).then(|| {
                let (p50, p99) = fsync_baseline(data.path(), fsyncs).unwrap_or_else(|e| {
                    eprintln!(
                        "vs_rabbitmq: fsync baseline in {:?} failed: {e}",
                        data.path()
                    );
                    std::process::exit(1);
                });
                println!(
                    "{name:>8} {:<16} fsync baseline p50 {} p99 {}",
                    case.label(),
                    fmt_value(p50, Unit::Micros),
                    fmt_value(p99, Unit::Micros)
                );
                (p50, p99)
            });
            let mut order: Vec<usize> = (0..targets.len()).collect();
            if (round + c) % 2 == 1 {
                order.reverse();
            }
            let mut figures = vec![None; targets.len()];
            for &t in &order {
                run_no += 1;
                let syncs: SyncCounter<'_> = match targets[t].side {
                    Side::StreamBroker => Some(&count_syncs),
                    Side::RabbitMq => None,
                };
                match client_rt.block_on(run(&targets[t], *case, &settings, run_no, syncs)) {
                    Ok(f) => figures[t] = Some(f),
                    Err(e) => {
                        eprintln!(
                            "vs_rabbitmq: {} on {} failed: {e}",
                            case.label(),
                            targets[t].side.label()
                        );
                        std::process::exit(1);
                    }
                }
            }
            let figures: Vec<Figure> = figures.into_iter().flatten().collect();
            for &t in &order {
                println!(
                    "{name:>8} {:<16} {:<13} {}",
                    case.label(),
                    targets[t].side.label(),
                    fmt_figure(&figures[t])
                );
            }
            let mut line = String::new();
            if let [sb, rmq] = &figures[..] {
                for (what, r) in ratios(sb, rmq) {
                    line.push_str(&format!("  ratio {what} {r:.2}"));
                }
            }
            if let Some((p50, _)) = fsync {
                for (what, r) in fsync_ratios(&figures, &targets, p50) {
                    line.push_str(&format!("  {what} {r:.2}"));
                }
            }
            if !line.is_empty() {
                println!("{name:>8} {:<16}{line}", case.label());
            }
            if round > 0 {
                results[c].push(RoundFigures { figures, fsync });
            }
        }
    }

    println!();
    println!("summary over {rounds} rounds: median (min–max)");
    for (c, case) in cases.iter().enumerate() {
        let label = case.label();
        let per_round = &results[c];
        if per_round.iter().any(|r| r.fsync.is_some()) {
            for (what, pick) in [
                ("p50", (|f: (f64, f64)| f.0) as fn((f64, f64)) -> f64),
                ("p99", |f| f.1),
            ] {
                let mut v: Vec<f64> = per_round.iter().filter_map(|r| r.fsync.map(pick)).collect();
                println!(
                    "{label:<16} fsync baseline {what} {}",
                    spread(&mut v, |x| fmt_value(x, Unit::Micros))
                );
            }
        }
        for (t, target) in targets.iter().enumerate() {
            let mut parts = Vec::new();
            for (k, metric) in per_round[0].figures[t].iter().enumerate() {
                let mut v: Vec<f64> = per_round.iter().map(|r| r.figures[t][k].value).collect();
                parts.push(format!(
                    "{} {}",
                    metric.name,
                    spread(&mut v, |x| fmt_value(x, metric.unit))
                ));
            }
            println!(
                "{label:<16} {:<13} {}",
                target.side.label(),
                parts.join(", ")
            );
        }
        if targets.len() == 2 {
            let per_ratio: Vec<Vec<(&str, f64)>> = per_round
                .iter()
                .map(|r| ratios(&r.figures[0], &r.figures[1]))
                .collect();
            for k in 0..per_ratio[0].len() {
                let mut v: Vec<f64> = per_ratio.iter().map(|r| r[k].1).collect();
                println!(
                    "{label:<16} ratio {:<12} {}",
                    per_ratio[0][k].0,
                    spread(&mut v, |x| format!("{x:.2}"))
                );
            }
        }
        let per_fsync: Vec<Vec<(String, f64)>> = per_round
            .iter()
            .filter_map(|r| {
                r.fsync
                    .map(|(p50, _)| fsync_ratios(&r.figures, &targets, p50))
            })
            .collect();
        if let Some(first) = per_fsync.first() {
            for k in 0..first.len() {
                let mut v: Vec<f64> = per_fsync.iter().map(|r| r[k].1).collect();
                println!(
                    "{label:<16} {} {}",
                    first[k].0,
                    spread(&mut v, |x| format!("{x:.2}"))
                );
            }
        }
    }
    for target in targets {
        let _ = client_rt.block_on(target.admin.close(200, ShortString::from("OK")));
    }
    server_rt.block_on(server.shutdown());
    drop(data);
}
