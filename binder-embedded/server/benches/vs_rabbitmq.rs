//! stream-broker against the RabbitMQ on this machine, with lapin clients on both sides.
//!
//! A `stream_broker::Server::standalone` runs in this process on `127.0.0.1:0` (on its own
//! Tokio runtime with 2 workers); RabbitMQ is the broker at `AMQP_URL`. The clients run on a
//! second runtime with 2 workers. Both brokers share the machine's CPUs with the clients, so
//! neither gets a core of its own. Every run gets a fresh connection and a fresh, uniquely
//! named queue (declared through the default exchange's routing, deleted afterwards, also
//! after a failure); nothing else on the RabbitMQ is touched.
//!
//! Scenarios (the throughput workloads are `binder-rabbit/benches/rabbit_throughput.rs`'s raw
//! lapin ones):
//!
//! 1. `transient` — delivery mode 1 to a non-durable queue, a confirm channel with a sliding
//!    window of 16 publishes in flight (from `basic_publish` to its confirm); one consumer
//!    with `basic.qos(200)` acking `multiple` every 50 deliveries, whenever no further
//!    delivery is buffered, and after the last one. 100-byte bodies, `BENCH_MESSAGES`
//!    messages; msg/s from spawning producer and consumer to the consumer's last ack.
//! 2. `persistent` — the same with delivery mode 2 to a durable queue and 1,000 publishes
//!    in flight. stream-broker keeps persistent messages in memory until the engine's
//!    durable store exists, while RabbitMQ writes them to disk: not yet like for like.
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
//! `BENCH_MESSAGES` (default 100000), `BENCH_LATENCY_SECS` (default 10), `BENCH_ROUNDS`
//! (default 5), `BENCH_SCENARIOS` (e.g. `1` or `1,3`; default all), `BENCH_BROKERS`
//! (`both`, `stream-broker` or `rabbitmq`, default `both`: one side alone is for profiling
//! and prints no ratios). Without a RabbitMQ answering, it says so and measures nothing.

use std::future::Future;
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::{FutureExt, StreamExt};
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionProperties};
use stream_broker::{Server, ServerConfig};
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;

#[path = "../../benches/support/mod.rs"]
#[allow(dead_code)]
mod support;
use support::{env_usize, fmt_rate, median, selected_scenarios};

const DEFAULT_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
const PAYLOAD_SIZE: usize = 100;
const PREFETCH: u16 = 200;
const ACK_EVERY: usize = 50;
const TRANSIENT_WINDOW: usize = 16;
const PERSISTENT_WINDOW: usize = 1_000;
/// Messages per second in the latency scenario.
const LATENCY_RATE: u64 = 1_000;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

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

/// One run's figure.
#[derive(Debug, Clone, Copy)]
enum Figure {
    /// Messages per second, end to end.
    Rate(f64),
    /// Publish→deliver in microseconds.
    Latency { p50: f64, p99: f64, max: f64 },
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

fn payloads(n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let mut payload = vec![b'x'; PAYLOAD_SIZE];
            payload[..8].copy_from_slice(&(i as u64).to_le_bytes());
            payload
        })
        .collect()
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

async fn publish_window(
    ch: Channel,
    queue: ShortString,
    payloads: Vec<Vec<u8>>,
    delivery_mode: u8,
    window: usize,
) -> Result<Channel, RunError> {
    let props = BasicProperties::default().with_delivery_mode(delivery_mode);
    let exchange = ShortString::from("");
    let mut in_flight = futures::stream::iter(payloads)
        .map(|payload| {
            let (ch, exchange, queue, props) =
                (&ch, exchange.clone(), queue.clone(), props.clone());
            async move {
                let confirm = ch
                    .basic_publish(
                        exchange,
                        queue,
                        BasicPublishOptions::default(),
                        &payload,
                        props,
                    )
                    .await
                    .map_err(fail("basic.publish"))?;
                check_confirm(confirm.await.map_err(fail("publisher confirm"))?)
            }
        })
        .buffer_unordered(window);
    while let Some(r) = in_flight.next().await {
        r?;
    }
    drop(in_flight);
    Ok(ch)
}

/// Receives `n` deliveries, acking (`multiple`) every `ACK_EVERY`, when idle, and at the end.
async fn consume_batched(
    mut consumer: lapin::Consumer,
    n: usize,
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
    if bytes != n * PAYLOAD_SIZE {
        return Err(format!(
            "received {bytes} bytes, expected {}",
            n * PAYLOAD_SIZE
        ));
    }
    Ok((Instant::now(), consumer))
}

async fn run_throughput(
    url: &str,
    queue: &str,
    messages: usize,
    persistent: bool,
) -> Result<Figure, RunError> {
    let payloads = payloads(messages);
    let Clients {
        conn,
        publisher,
        consuming,
        consumer,
    } = clients(url, queue).await?;
    let (mode, window) = if persistent {
        (2, PERSISTENT_WINDOW)
    } else {
        (1, TRANSIENT_WINDOW)
    };
    let start = Instant::now();
    let consumer = Task::spawn(consume_batched(consumer, messages));
    let producer = Task::spawn(publish_window(
        publisher,
        ShortString::from(queue),
        payloads,
        mode,
        window,
    ));
    let publisher = producer.join().await??;
    let (done, consumer) = consumer.join().await??;
    let rate = messages as f64 / (done - start).as_secs_f64();
    Clients {
        conn,
        publisher,
        consuming,
        consumer,
    }
    .close()
    .await;
    Ok(Figure::Rate(rate))
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
    let mut body = vec![b'x'; PAYLOAD_SIZE];
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
    let at = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
    Ok(Figure::Latency {
        p50: at(0.50),
        p99: at(0.99),
        max: latencies[latencies.len() - 1],
    })
}

// ---- runs ---------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Settings {
    messages: usize,
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
    scenario: Scenario,
    settings: &Settings,
    run: usize,
) -> Result<Figure, RunError> {
    let queue = queue_name(scenario, target.side, run);
    let ch = target
        .admin
        .create_channel()
        .await
        .map_err(fail("channel.open"))?;
    ch.queue_declare(
        ShortString::from(queue.as_str()),
        QueueDeclareOptions {
            durable: scenario == Scenario::Persistent,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .map_err(fail("queue.declare"))?;
    let limit = Duration::from_secs(60 + settings.latency_secs)
        + Duration::from_millis(settings.messages as u64);
    let url = target.url.as_str();
    let measured = match scenario {
        Scenario::Transient => {
            tokio::time::timeout(limit, run_throughput(url, &queue, settings.messages, false)).await
        }
        Scenario::Persistent => {
            tokio::time::timeout(limit, run_throughput(url, &queue, settings.messages, true)).await
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

fn fmt_figure(f: Figure) -> String {
    match f {
        Figure::Rate(r) => format!("{}/s", fmt_rate(r)),
        Figure::Latency { p50, p99, max } => {
            format!("p50 {p50:.0} µs p99 {p99:.0} µs max {max:.0} µs")
        }
    }
}

/// The ratios stream-broker/RabbitMQ a pair of figures gives, by name.
fn ratios(sb: Figure, rmq: Figure) -> Vec<(&'static str, f64)> {
    match (sb, rmq) {
        (Figure::Rate(a), Figure::Rate(b)) => vec![("msg/s", a / b)],
        (
            Figure::Latency {
                p50: a50,
                p99: a99,
                max: amax,
            },
            Figure::Latency {
                p50: b50,
                p99: b99,
                max: bmax,
            },
        ) => vec![("p50", a50 / b50), ("p99", a99 / b99), ("max", amax / bmax)],
        _ => Vec::new(),
    }
}

fn main() {
    let url = std::env::var("AMQP_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned());
    let settings = Settings {
        messages: env_usize("BENCH_MESSAGES", 100_000).max(1),
        latency_secs: env_usize("BENCH_LATENCY_SECS", 10).max(1) as u64,
    };
    let rounds = env_usize("BENCH_ROUNDS", 5).max(1);
    let selected = selected_scenarios(Scenario::ALL.len());
    let sides = selected_sides();
    let server_rt = runtime("stream-broker");
    let client_rt = runtime("bench-client");
    nanos_now();

    let server = server_rt
        .block_on(Server::standalone(ServerConfig {
            listen: "127.0.0.1:0".parse().expect("an address"),
            ..ServerConfig::default()
        }))
        .expect("stream-broker binds");
    let sb_url = format!("amqp://guest:guest@{}/%2f", server.local_addr());

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
        "transient/persistent: {} messages of {PAYLOAD_SIZE} B, confirms with {TRANSIENT_WINDOW}/\
         {PERSISTENT_WINDOW} in flight, prefetch {PREFETCH}, acks multiple every {ACK_EVERY} \
         (and when idle); latency: {LATENCY_RATE} msg/s for {} s, ack each",
        settings.messages, settings.latency_secs
    );
    println!(
        "note: `persistent` is not like for like yet: stream-broker keeps persistent messages \
         in memory until the engine's durable store exists; RabbitMQ writes them to disk"
    );
    println!("warm-up round, then {rounds} rounds; ratio = stream-broker/RabbitMQ");

    // results[scenario] = per round, the figure of each side in `targets` order.
    let mut results: Vec<Vec<Vec<Figure>>> = vec![Vec::new(); Scenario::ALL.len()];
    let mut run_no = 0;
    for round in 0..=rounds {
        let name = if round == 0 {
            "warm-up".to_owned()
        } else {
            format!("round {round}")
        };
        for (s, scenario) in Scenario::ALL.iter().enumerate() {
            if !selected[s] {
                continue;
            }
            let mut order: Vec<usize> = (0..targets.len()).collect();
            if (round + s) % 2 == 1 {
                order.reverse();
            }
            let mut figures = vec![None; targets.len()];
            for &t in &order {
                run_no += 1;
                match client_rt.block_on(run(&targets[t], *scenario, &settings, run_no)) {
                    Ok(f) => figures[t] = Some(f),
                    Err(e) => {
                        eprintln!(
                            "vs_rabbitmq: {} on {} failed: {e}",
                            scenario.label(),
                            targets[t].side.label()
                        );
                        std::process::exit(1);
                    }
                }
            }
            let figures: Vec<Figure> = figures.into_iter().flatten().collect();
            let mut line = format!("{name:>8} {:<10}", scenario.label());
            for &t in &order {
                line.push_str(&format!(
                    "  {}: {}",
                    targets[t].side.label(),
                    fmt_figure(figures[t])
                ));
            }
            if let [sb, rmq] = figures[..] {
                for (what, r) in ratios(sb, rmq) {
                    line.push_str(&format!("  ratio {what} {r:.2}"));
                }
            }
            println!("{line}");
            if round > 0 {
                results[s].push(figures);
            }
        }
    }

    println!();
    println!("summary over {rounds} rounds: median (min–max)");
    for (s, scenario) in Scenario::ALL.iter().enumerate() {
        if results[s].is_empty() {
            continue;
        }
        for (t, target) in targets.iter().enumerate() {
            let column = |pick: fn(Figure) -> f64| {
                let mut v: Vec<f64> = results[s].iter().map(|r| pick(r[t])).collect();
                let m = median(&mut v);
                (m, v[0], v[v.len() - 1])
            };
            let text = match results[s][0][t] {
                Figure::Rate(_) => {
                    let (m, lo, hi) = column(|f| match f {
                        Figure::Rate(r) => r,
                        Figure::Latency { .. } => f64::NAN,
                    });
                    format!("{}/s ({}–{})", fmt_rate(m), fmt_rate(lo), fmt_rate(hi))
                }
                Figure::Latency { .. } => {
                    let mut parts = Vec::new();
                    for (what, pick) in [
                        (
                            "p50",
                            (|f| match f {
                                Figure::Latency { p50, .. } => p50,
                                Figure::Rate(_) => f64::NAN,
                            }) as fn(Figure) -> f64,
                        ),
                        ("p99", |f| match f {
                            Figure::Latency { p99, .. } => p99,
                            Figure::Rate(_) => f64::NAN,
                        }),
                        ("max", |f| match f {
                            Figure::Latency { max, .. } => max,
                            Figure::Rate(_) => f64::NAN,
                        }),
                    ] {
                        let (m, lo, hi) = column(pick);
                        parts.push(format!("{what} {m:.0} µs ({lo:.0}–{hi:.0})"));
                    }
                    parts.join(", ")
                }
            };
            println!(
                "{:<10} {:<13} {text}",
                scenario.label(),
                target.side.label()
            );
        }
        if targets.len() == 2 {
            let per_round: Vec<Vec<(&str, f64)>> =
                results[s].iter().map(|r| ratios(r[0], r[1])).collect();
            for k in 0..per_round[0].len() {
                let what = per_round[0][k].0;
                let mut v: Vec<f64> = per_round.iter().map(|r| r[k].1).collect();
                let m = median(&mut v);
                println!(
                    "{:<10} ratio {what:<7} {m:.2} ({:.2}–{:.2})",
                    scenario.label(),
                    v[0],
                    v[v.len() - 1]
                );
            }
        }
    }
    for target in targets {
        let _ = client_rt.block_on(target.admin.close(200, ShortString::from("OK")));
    }
    server_rt.block_on(server.shutdown());
}
