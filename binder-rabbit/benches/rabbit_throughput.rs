//! Throughput of the `rabbit` binder against raw lapin used well, on a real RabbitMQ.
//!
//! Every scenario moves the same 100-byte payloads (prebuilt before the clock starts) from one
//! producer task to one consumer task through one queue, on a tokio multi-thread runtime with
//! 2 workers. The consumer uses `basic.qos(200)` and manual acks. Each run gets a fresh,
//! uniquely named queue, declared with lapin directly (non-durable for the transient
//! scenarios, durable for the persistent ones) and deleted afterwards, and a fresh connection
//! (raw lapin: one connection with a publishing and a consuming channel, like the binder's
//! one connection with a channel per producer and per subscription). Messages go through the
//! default exchange (`""`) with the queue's name as routing key.
//!
//! 1. `A raw transient` — the baseline for the binder's transient producer: delivery mode 1,
//!    a confirm channel with a sliding window of 16 publishes in flight (publisher confirms
//!    are kept on, because the binder always publishes with confirms); the consumer acks with
//!    `multiple = true` every 50 deliveries, and at once whenever no further delivery is
//!    already buffered (idle) or the last one arrived (end).
//! 2. `B raw persistent` — the baseline for persistent publishing: durable queue, delivery
//!    mode 2, a sliding window of 1,000 publishes awaiting their confirms; same consumer.
//! 3. `C binder transient` — `RabbitBinder`: `AmqpBroker::producer` with
//!    `ProducerSpec { exchange: "", delivery_mode: NonPersistent }`, 16 concurrent
//!    `AmqpProducer::publish(queue, Message)` futures (`for_each_concurrent`); the consumer is
//!    `AmqpBroker::subscribe` (prefetch 200, manual ack) and settles every `Inbound` with
//!    `Settlement::Ack` before taking the next one — the SPI settles one delivery at a
//!    time, and the binder turns those into `multiple` acks (for the batch it took from
//!    lapin's buffer), which is part of what is measured. Its `acks/run` column counts
//!    settlements, not ack frames.
//! 4. `C binder persistent` — the same with `DeliveryMode::Persistent`, a durable queue and
//!    1,000 concurrent publishes.
//!
//! In both raw scenarios a publish is "in flight" from the moment `basic_publish` is called
//! to the moment its confirm is received: up to N futures (`buffer_unordered(N)`) each write
//! one message and await its confirm — the same shape the binder scenarios run, minus the
//! binder — so a new publish starts as soon as one is confirmed, and several publishes can
//! share one socket write.
//!
//! A run's time goes from spawning the producer and consumer tasks to the consumer having
//! received every message and handed its last ack to lapin; connecting, opening channels,
//! `basic.qos`, `basic.consume` and opening the binder producer's confirm channel (by
//! publishing one unroutable message before the clock) all happen before the clock starts,
//! and closing after it stops. Each scenario gets one warm-up run, then `BENCH_ROUNDS`
//! measured rounds; a round runs every scenario once, rotating which one goes first. The
//! report gives msgs/s as median (min–max) per scenario, the ratios of the binder's medians to
//! the raw baselines (C-transient/A, C-persistent/B) with the range of the per-round ratios,
//! when the producer was done (every confirm in) and how many acks the consumer sent. Each run
//! is bounded by a timeout, so the binary always ends; if no broker answers it says so and
//! exits successfully without measuring.
//!
//! Run it with:
//!
//! ```text
//! cargo bench -p binder-rabbit --bench rabbit_throughput
//! ```
//!
//! Environment:
//! - `BENCH_AMQP_URI`: the broker (default `amqp://guest:guest@127.0.0.1:5672/%2f`);
//! - `BENCH_MESSAGES`: messages per run (default 20000);
//! - `BENCH_ROUNDS`: measured rounds (default 5);
//! - `BENCH_SCENARIOS`: only these scenarios, by number, e.g. `3` or `1,3` (default all; for
//!   profiling one of them).
//!
//! The broker is whatever `BENCH_AMQP_URI` points at; when it runs on the same machine it
//! competes with the benchmark for the CPUs, so compare ratios rather than absolute rates
//! across machines.

use std::future::Future;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use binder_amqp::AmqpBroker;
use binder_amqp::{ProducerSpec, SubscriptionSpec};
use binder_core::binder::{Binder, BinderError, Settlement};
use binder_core::{DeliveryMode, Message};
use binder_rabbit::{RabbitBinder, RabbitSettings};
use futures::{FutureExt, StreamExt};
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionProperties};
use tokio::task::JoinHandle;

#[path = "../../binder-embedded/benches/support/mod.rs"]
mod support;
use support::{env_usize, fmt_rate, median, rate_stats, run_rounds, selected_scenarios};

const DEFAULT_URI: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
const PAYLOAD_SIZE: usize = 100;
/// Every consumer's `basic.qos` prefetch.
const PREFETCH: u16 = 200;
/// Raw consumers ack (`multiple = true`) after this many deliveries at the latest.
const ACK_EVERY: usize = 50;
/// Publishes in flight for the transient scenarios.
const TRANSIENT_WINDOW: usize = 16;
/// Publishes in flight for the persistent scenarios.
const PERSISTENT_WINDOW: usize = 1_000;
/// How long the broker gets to answer the first connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    RawTransient,
    RawPersistent,
    BinderTransient,
    BinderPersistent,
}

impl Scenario {
    const ALL: [Scenario; 4] = [
        Scenario::RawTransient,
        Scenario::RawPersistent,
        Scenario::BinderTransient,
        Scenario::BinderPersistent,
    ];

    fn label(self) -> &'static str {
        match self {
            Scenario::RawTransient => "A raw lapin transient",
            Scenario::RawPersistent => "B raw lapin persistent",
            Scenario::BinderTransient => "C binder transient",
            Scenario::BinderPersistent => "C binder persistent",
        }
    }

    fn short(self) -> &'static str {
        match self {
            Scenario::RawTransient => "A",
            Scenario::RawPersistent => "B",
            Scenario::BinderTransient => "Ct",
            Scenario::BinderPersistent => "Cp",
        }
    }

    fn persistent(self) -> bool {
        matches!(self, Scenario::RawPersistent | Scenario::BinderPersistent)
    }

    fn window(self) -> usize {
        if self.persistent() {
            PERSISTENT_WINDOW
        } else {
            TRANSIENT_WINDOW
        }
    }

    fn is_binder(self) -> bool {
        matches!(self, Scenario::BinderTransient | Scenario::BinderPersistent)
    }

    /// The raw baseline a binder scenario is compared with.
    fn baseline(self) -> Option<Scenario> {
        match self {
            Scenario::BinderTransient => Some(Scenario::RawTransient),
            Scenario::BinderPersistent => Some(Scenario::RawPersistent),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
struct Settings {
    uri: String,
    messages: usize,
}

/// One run's measurements.
#[derive(Debug, Clone, Copy)]
struct RunResult {
    /// Spawn to the consumer done.
    elapsed: Duration,
    /// Spawn to the producer done (every confirm received).
    publish: Duration,
    /// Ack frames the consumer sent.
    acks: usize,
}

impl RunResult {
    fn msgs_per_sec(&self, messages: usize) -> f64 {
        messages as f64 / self.elapsed.as_secs_f64()
    }
}

type RunError = String;

fn fail(what: &str) -> impl Fn(lapin::Error) -> RunError + '_ {
    move |e| format!("{what}: {e}")
}

fn fail_binder(what: &str) -> impl Fn(BinderError) -> RunError + '_ {
    move |e| format!("{what}: {e}")
}

/// A URI without its password, for messages.
fn redact(uri: &str) -> String {
    match (uri.find("://"), uri.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let user = uri[s + 3..at].split(':').next().unwrap_or_default();
            format!("{}{user}:***{}", &uri[..s + 3], &uri[at..])
        }
        _ => uri.to_owned(),
    }
}

/// `n` 100-byte payloads (a sequence number, then filler).
fn payloads(n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let mut payload = vec![b'x'; PAYLOAD_SIZE];
            payload[..8].copy_from_slice(&(i as u64).to_le_bytes());
            payload
        })
        .collect()
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

// ---- raw lapin ----------------------------------------------------------------------------

/// Publishes every payload with at most `window` publishes in flight (from `basic_publish`
/// to its confirm).
async fn raw_publish(
    ch: Channel,
    queue: ShortString,
    payloads: Vec<Vec<u8>>,
    delivery_mode: u8,
    window: usize,
) -> Result<(Instant, Channel), RunError> {
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
    Ok((Instant::now(), ch))
}

/// Receives `n` deliveries, acking (`multiple`) every `ACK_EVERY` of them, whenever no further
/// delivery is buffered, and after the last one.
async fn raw_consume(
    mut consumer: lapin::Consumer,
    n: usize,
) -> Result<(Instant, usize, lapin::Consumer), RunError> {
    let ack = BasicAckOptions { multiple: true };
    let (mut count, mut bytes, mut acks, mut unacked) = (0, 0, 0, 0);
    let mut pending: Option<lapin::Acker> = None;
    while count < n {
        let next = match consumer.next().now_or_never() {
            Some(next) => next,
            None => {
                // Idle: ack what we have before waiting.
                if let Some(acker) = pending.take() {
                    acker.ack(ack).await.map_err(fail("basic.ack"))?;
                    acks += 1;
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
            acks += 1;
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
    Ok((Instant::now(), acks, consumer))
}

async fn run_raw(
    uri: &str,
    queue: &str,
    payloads: Vec<Vec<u8>>,
    scenario: Scenario,
) -> Result<RunResult, RunError> {
    let n = payloads.len();
    let conn = Connection::connect(uri, ConnectionProperties::default())
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
    let mode = if scenario.persistent() { 2 } else { 1 };

    let start = Instant::now();
    let consumer = Task::spawn(raw_consume(consumer, n));
    let producer = Task::spawn(raw_publish(
        publisher,
        ShortString::from(queue),
        payloads,
        mode,
        scenario.window(),
    ));
    let (published, publisher) = producer.join().await??;
    let (done, acks, consumer) = consumer.join().await??;

    // Teardown after the clock stopped.
    drop(consumer);
    let _ = publisher.close(200, ShortString::from("OK")).await;
    let _ = consuming.close(200, ShortString::from("OK")).await;
    let _ = conn.close(200, ShortString::from("OK")).await;
    Ok(RunResult {
        elapsed: done - start,
        publish: published - start,
        acks,
    })
}

// ---- the binder ---------------------------------------------------------------------------

async fn run_binder(
    uri: &str,
    queue: &str,
    payloads: Vec<Vec<u8>>,
    scenario: Scenario,
) -> Result<RunResult, RunError> {
    let n = payloads.len();
    let messages: Vec<Message> = payloads.into_iter().map(Message::new).collect();
    let binder = RabbitBinder::new(RabbitSettings::from_uri(uri));
    let producer = binder
        .producer(ProducerSpec {
            exchange: String::new(),
            delivery_mode: if scenario.persistent() {
                DeliveryMode::Persistent
            } else {
                DeliveryMode::NonPersistent
            },
        })
        .await
        .map_err(fail_binder("producer"))?;
    // The producer opens its confirm channel on first use: do that before the clock, with a
    // message the default exchange drops (no queue has this name) and still confirms.
    producer
        .publish(&format!("{queue}.unroutable"), Message::new(&b"prime"[..]))
        .await
        .map_err(fail_binder("priming publish"))?;
    let mut subscription = binder
        .subscribe(SubscriptionSpec {
            queue: queue.to_owned(),
            prefetch: PREFETCH,
            auto_ack: false,
            exclusive: false,
            consumer_tag: None,
        })
        .await
        .map_err(fail_binder("subscribe"))?;
    let window = scenario.window();
    let key = queue.to_owned();

    let start = Instant::now();
    let consumer = Task::spawn(async move {
        let (mut count, mut bytes) = (0, 0);
        while count < n {
            let inbound = subscription
                .next()
                .await
                .ok_or_else(|| format!("subscription ended after {count} of {n} deliveries"))?;
            if inbound.redelivered {
                return Err("unexpected redelivery".to_owned());
            }
            bytes += inbound.message().payload.len();
            inbound
                .settler
                .settle(Settlement::Ack)
                .await
                .map_err(fail_binder("settle"))?;
            count += 1;
        }
        if bytes != n * PAYLOAD_SIZE {
            return Err(format!(
                "received {bytes} bytes, expected {}",
                n * PAYLOAD_SIZE
            ));
        }
        Ok::<_, RunError>((Instant::now(), subscription))
    });
    let producer = Task::spawn(async move {
        let mut in_flight = futures::stream::iter(messages)
            .map(|m| producer.publish(&key, m))
            .buffer_unordered(window);
        while let Some(r) = in_flight.next().await {
            r.map_err(fail_binder("publish"))?;
        }
        drop(in_flight);
        Ok::<_, RunError>((Instant::now(), producer))
    });
    let (published, producer) = producer.join().await??;
    let (done, mut subscription) = consumer.join().await??;

    // Teardown after the clock stopped.
    let _ = subscription.cancel().await;
    drop(subscription);
    drop(producer);
    binder.close().await;
    Ok(RunResult {
        elapsed: done - start,
        publish: published - start,
        acks: n,
    })
}

// ---- runs ---------------------------------------------------------------------------------

/// A queue name no other run (of this or another process) uses.
fn queue_name(scenario: Scenario, run: usize) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "bench.rabbit_throughput.{}.{}.{run}.{nanos}",
        scenario.short().to_lowercase(),
        std::process::id()
    )
}

/// One run on a fresh queue, deleted afterwards (also after a failure or a timeout).
async fn run(
    admin: &Connection,
    scenario: Scenario,
    settings: &Settings,
    run: usize,
) -> Result<RunResult, RunError> {
    let payloads = payloads(settings.messages);
    let queue = queue_name(scenario, run);
    let ch = admin.create_channel().await.map_err(fail("channel.open"))?;
    ch.queue_declare(
        ShortString::from(queue.as_str()),
        QueueDeclareOptions {
            durable: scenario.persistent(),
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .map_err(fail("queue.declare"))?;

    // Generous: the slowest scenario moves well over 1,000 msgs/s even on a busy machine.
    let limit = Duration::from_secs(60) + Duration::from_millis(settings.messages as u64);
    let measured = if scenario.is_binder() {
        tokio::time::timeout(limit, run_binder(&settings.uri, &queue, payloads, scenario)).await
    } else {
        tokio::time::timeout(limit, run_raw(&settings.uri, &queue, payloads, scenario)).await
    };
    let deleted = ch
        .queue_delete(
            ShortString::from(queue.as_str()),
            QueueDeleteOptions::default(),
        )
        .await;
    let _ = ch.close(200, ShortString::from("OK")).await;
    let result = measured
        .map_err(|_| format!("did not finish within {limit:?}"))
        .and_then(|r| r);
    if let Err(e) = deleted {
        eprintln!("rabbit_throughput: cannot delete queue `{queue}`: {e}");
    }
    result
}

/// Connects the admin connection, or says why not.
async fn connect_admin(uri: &str) -> Result<Connection, String> {
    match tokio::time::timeout(
        CONNECT_TIMEOUT,
        Connection::connect(uri, ConnectionProperties::default()),
    )
    .await
    {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {CONNECT_TIMEOUT:?}")),
    }
}

fn main() {
    let settings = Settings {
        uri: std::env::var("BENCH_AMQP_URI").unwrap_or_else(|_| DEFAULT_URI.to_owned()),
        messages: env_usize("BENCH_MESSAGES", 20_000).max(1),
    };
    let n = settings.messages;
    let rounds = env_usize("BENCH_ROUNDS", 5).max(1);
    let selected = selected_scenarios(Scenario::ALL.len());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");

    let admin = match rt.block_on(connect_admin(&settings.uri)) {
        Ok(c) => c,
        Err(e) => {
            println!(
                "rabbit_throughput: no RabbitMQ broker answers at {} ({e}); nothing measured. \
                 Start one or point BENCH_AMQP_URI at one.",
                redact(&settings.uri)
            );
            return;
        }
    };

    println!(
        "rabbit_throughput: {n} messages of {PAYLOAD_SIZE} B per run, 1 warm-up + {rounds} rounds, \
         tokio multi-thread runtime with 2 workers, {} CPUs, broker {}",
        std::thread::available_parallelism().map_or(0, |p| p.get()),
        redact(&settings.uri)
    );
    println!(
        "1 producer, 1 consumer, default exchange, prefetch {PREFETCH}, manual ack; publishes in \
         flight: {TRANSIENT_WINDOW} transient, {PERSISTENT_WINDOW} persistent (all with \
         publisher confirms); raw consumer acks multiple every {ACK_EVERY} (and when idle), \
         binder consumer settles each delivery"
    );

    let mut run_no = 0;
    let results = run_rounds(
        &selected,
        rounds,
        |i| Scenario::ALL[i].short().to_string(),
        |i| {
            let scenario = Scenario::ALL[i];
            run_no += 1;
            match rt.block_on(run(&admin, scenario, &settings, run_no)) {
                Ok(r) => (r, r.msgs_per_sec(n), r.elapsed),
                Err(e) => {
                    eprintln!("rabbit_throughput: {} failed: {e}", scenario.label());
                    std::process::exit(1);
                }
            }
        },
    );
    let _ = rt.block_on(admin.close(200, ShortString::from("OK")));

    let stats = rate_stats(&results, |r| r.msgs_per_sec(n));

    println!();
    println!(
        "{:<24} {:>6} {:>9} {:>17} {:>14} {:>9}",
        "scenario", "window", "median/s", "(min–max)/s", "publish done", "acks/run"
    );
    for (i, scenario) in Scenario::ALL.iter().enumerate() {
        let Some((med, min, max)) = stats[i] else {
            continue;
        };
        let mut publish: Vec<f64> = results[i]
            .iter()
            .map(|r| r.publish.as_secs_f64() * 1e3)
            .collect();
        let mut acks: Vec<f64> = results[i].iter().map(|r| r.acks as f64).collect();
        println!(
            "{:<24} {:>6} {:>9} {:>17} {:>11.0} ms {:>9.0}",
            scenario.label(),
            scenario.window(),
            fmt_rate(med),
            format!("({}–{})", fmt_rate(min), fmt_rate(max)),
            median(&mut publish),
            median(&mut acks),
        );
    }

    println!();
    for (i, scenario) in Scenario::ALL.iter().enumerate() {
        let Some(base) = scenario.baseline() else {
            continue;
        };
        let b = Scenario::ALL
            .iter()
            .position(|s| *s == base)
            .expect("baseline is a scenario");
        let (Some((med, _, _)), Some((base_med, _, _))) = (stats[i], stats[b]) else {
            continue;
        };
        // Ratios of the runs of the same round.
        let mut paired: Vec<f64> = results[i]
            .iter()
            .zip(&results[b])
            .map(|(c, r)| c.msgs_per_sec(n) / r.msgs_per_sec(n))
            .collect();
        paired.sort_by(f64::total_cmp);
        println!(
            "{} / {}: {:.1}% of the raw median (per-round ratios {:.1}%–{:.1}%)",
            scenario.label(),
            base.label(),
            100.0 * med / base_med,
            100.0 * paired[0],
            100.0 * paired[paired.len() - 1],
        );
    }
}
