//! The peer benchmark: our send → handler → ack path against ruststream 0.7.7
//! (`MemoryBroker`), ruststream-lapin 0.7.2, raw lapin and tokio `mpsc`, in one process, round
//! by round, reporting per scenario the median and min–max of the per-round ratios (ours /
//! peer) and each contender's absolute figures. What each scenario measures is in the
//! crate's README and in the module of each scenario.
//!
//! ```text
//! cargo run --release --manifest-path tests/peers/Cargo.toml
//! ```

mod alloc;
mod inproc;
mod many;
mod memory;
mod ours;
mod payload;
mod peer_lapin;
mod peer_rl;
mod peer_rs;
mod rabbit;
mod rounds;

#[path = "../../../binder-embedded/benches/support/mod.rs"]
#[allow(dead_code)]
mod support;

use std::time::Duration;

use payload::{PAYLOAD_SIZE, bench_msgs};
use rounds::{Figure, report, run_rounds, run_rounds_with};
use support::{env_usize, selected_scenarios};

#[global_allocator]
static ALLOC: alloc::CountingAlloc = alloc::CountingAlloc;

const DEFAULT_URI: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
/// A run that takes longer has hung.
const RUN_TIMEOUT: Duration = Duration::from_secs(300);

/// Everything the environment sets.
#[derive(Debug)]
struct Settings {
    rounds: usize,
    messages: usize,
    rabbit_messages: usize,
    latency_messages: usize,
    latency_rate: u32,
    memory_messages: usize,
    destinations: usize,
    /// The runtime's worker threads.
    workers: usize,
    uri: String,
}

impl Settings {
    fn from_env() -> Settings {
        Settings {
            rounds: env_usize("BENCH_ROUNDS", 5).max(1),
            messages: env_usize("BENCH_MESSAGES", 100_000).max(4),
            rabbit_messages: env_usize("BENCH_RABBIT_MESSAGES", 20_000).max(1),
            latency_messages: env_usize("BENCH_LATENCY_MESSAGES", 3_000).max(1),
            latency_rate: u32::try_from(env_usize("BENCH_LATENCY_RATE", 1_000).max(1))
                .expect("BENCH_LATENCY_RATE fits in u32"),
            memory_messages: env_usize("BENCH_MEMORY_MESSAGES", 1_000_000).max(1),
            destinations: env_usize("BENCH_DESTINATIONS", 10_000).max(2),
            workers: env_usize("BENCH_WORKERS", 2).max(1),
            uri: std::env::var("BENCH_AMQP_URI").unwrap_or_else(|_| DEFAULT_URI.to_owned()),
        }
    }
}

const SCENARIOS: [&str; 7] = [
    "in process 1 → 1, msg/s",
    "latency send → handler at a fixed rate, 1 → 1",
    "four handlers on four destinations, msg/s",
    "RabbitMQ transient, 16 in flight, msg/s",
    "RabbitMQ persistent with confirms, 1,000 in flight, msg/s",
    "memory per queued message beyond the payload, no consumer",
    "many destinations against one (embedded)",
];

/// A run of one contender, boxed so that every contender of a scenario has one type.
type Run<'a> = std::pin::Pin<Box<dyn Future<Output = Vec<Figure>> + 'a>>;

/// Scenarios 1 and 3: `messages` over `destinations`, ours at the defaults, at
/// [`inproc::BATCHED_PREFETCH`] and in batches of [`inproc::BATCH_SIZE`], ruststream, the
/// engine alone, and with one destination tokio's `mpsc`.
fn in_process_throughput<'a>(
    s: &Settings,
    destinations: usize,
    timed: &impl Fn(Run<'a>) -> Vec<Figure>,
) {
    use inproc::OursTuning;
    let mut c = vec![
        "ours",
        "ruststream",
        "engine alone",
        "ours, prefetch 200",
        "ours, batches of 100",
    ];
    let mut ratios = vec![
        (0, 1, 0),
        (2, 1, 0),
        (0, 2, 0),
        (3, 1, 0),
        (3, 0, 0),
        (4, 1, 0),
        (4, 0, 0),
    ];
    if destinations == 1 {
        c.push("mpsc(1024)");
        ratios.extend([(0, 5, 0), (1, 5, 0)]);
    }
    let r = run_rounds(&c, s.rounds, |i| {
        let msgs = bench_msgs(s.messages);
        timed(match i {
            0 => Box::pin(inproc::ours_throughput(
                msgs,
                destinations,
                OursTuning::Defaults,
            )),
            1 => Box::pin(inproc::rs_throughput(msgs, destinations)),
            2 => Box::pin(inproc::engine_throughput(msgs, destinations)),
            3 => Box::pin(inproc::ours_throughput(
                msgs,
                destinations,
                OursTuning::Prefetch,
            )),
            4 => Box::pin(inproc::ours_throughput(
                msgs,
                destinations,
                OursTuning::Batches,
            )),
            _ => Box::pin(inproc::mpsc_throughput(msgs)),
        })
    });
    report(&c, &[""], &r, &ratios);
}

fn main() {
    let s = Settings::from_env();
    let selected = selected_scenarios(SCENARIOS.len());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(s.workers)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let timed = |f: Run<'_>| {
        rt.block_on(async {
            tokio::time::timeout(RUN_TIMEOUT, f)
                .await
                .unwrap_or_else(|_| panic!("a run did not finish within {RUN_TIMEOUT:?}"))
        })
    };

    println!(
        "stream-peer-bench: {PAYLOAD_SIZE} B JSON payloads (encoded by every producer, decoded \
         into a struct by every consumer), 1 warm-up + {} rounds, contenders' order rotating per \
         round, tokio multi-thread runtime with {} workers, {} CPUs, {}",
        s.rounds,
        s.workers,
        std::thread::available_parallelism().map_or(0, |p| p.get()),
        alloc::NAME
    );

    for (idx, title) in SCENARIOS.iter().enumerate() {
        if !selected[idx] {
            continue;
        }
        println!();
        println!("{}. {title}", idx + 1);
        match idx {
            0 => {
                println!(
                    "  {} messages; ours: #[stream_listener] on `embedded`, default settings \
                     (prefetch 1), Output::send awaited per message; engine alone: the broker \
                     engine without the framework, prefetch 1, an ack per message; ours, \
                     prefetch {}: ours with `consumer.prefetch: {}`; ours, batches of {}: \
                     ours with `consumer.batchMode` and `enableBatching`, `batchSize: {}`, \
                     `receiveTimeout: {}`, listeners taking Vec<BenchMsg>",
                    s.messages,
                    inproc::BATCHED_PREFETCH,
                    inproc::BATCHED_PREFETCH,
                    inproc::BATCH_SIZE,
                    inproc::BATCH_SIZE,
                    ours::BATCH_RECEIVE_TIMEOUT_MS
                );
                in_process_throughput(&s, 1, &timed);
            }
            1 => {
                let c = ["ours", "ruststream", "engine alone"];
                println!(
                    "  {} messages at {} msg/s, one producer",
                    s.latency_messages, s.latency_rate
                );
                let r = run_rounds(&c, s.rounds, |i| {
                    let msgs = bench_msgs(s.latency_messages);
                    timed(match i {
                        0 => Box::pin(inproc::ours_latency(msgs, s.latency_rate)),
                        1 => Box::pin(inproc::rs_latency(msgs, s.latency_rate)),
                        _ => Box::pin(inproc::engine_latency(msgs, s.latency_rate)),
                    })
                });
                report(
                    &c,
                    &["p50", "p99"],
                    &r,
                    &[(0, 1, 0), (0, 1, 1), (2, 1, 0), (2, 1, 1)],
                );
            }
            2 => {
                println!("  {} messages, a producer task per destination", s.messages);
                in_process_throughput(&s, 4, &timed);
            }
            3 | 4 => {
                let mode = rabbit::Mode {
                    persistent: idx == 4,
                    window: if idx == 4 { 1_000 } else { 16 },
                };
                let admin = match rt.block_on(rabbit::Admin::connect(&s.uri)) {
                    Ok(a) => a,
                    Err(e) => {
                        println!("  skipped: no RabbitMQ answers at BENCH_AMQP_URI ({e})");
                        continue;
                    }
                };
                println!(
                    "  {} messages, prefetch {}, durable queues, {} publishes in flight with \
                     confirms; ours: Output::pipeline, #[stream_listener], AUTO ack; lapin topic: \
                     raw lapin through a topic exchange like ours, routing by its one-word \
                     name as ours does, on one connection or publishing on a second (like \
                     ours); lapin default: raw lapin through the default exchange",
                    s.rabbit_messages,
                    rabbit::PREFETCH,
                    mode.window
                );
                let c = rabbit::CONTENDERS;
                let r = run_rounds_with(&c, &rabbit::ON_DEMAND, s.rounds, |i| {
                    let msgs = bench_msgs(s.rabbit_messages);
                    timed(Box::pin(rabbit::run(&admin, i, msgs, mode)))
                });
                rt.block_on(admin.close());
                report(
                    &c,
                    &[""],
                    &r,
                    // Then the floors: what the publisher connection apart costs raw lapin
                    // itself, and where raw lapin stands against ruststream-lapin; and what
                    // three more words in the routing key cost raw lapin (on demand).
                    &[
                        (0, 1, 0),
                        (0, 2, 0),
                        (0, 3, 0),
                        (0, 4, 0),
                        (5, 2, 0),
                        (6, 2, 0),
                        (2, 1, 0),
                        (2, 4, 0),
                        (7, 2, 0),
                    ],
                );
            }
            5 => {
                let c = memory::CONTENDERS;
                println!(
                    "  {} messages queued; counted by a counting global allocator (net bytes \
                     allocated while queueing / messages); ours: a queue of the embedded binder's \
                     engine (framework records), bare and with the properties Output::send gives; native: the engine with its own records; \
                     ruststream: a MemoryBroker subscription nobody reads; mpsc: tokio \
                     unbounded; no memory watermark",
                    s.memory_messages
                );
                let msgs = bench_msgs(s.memory_messages);
                let r = run_rounds(&c, s.rounds, |i| timed(Box::pin(memory::run(i, &msgs))));
                report(
                    &c,
                    &[""],
                    &r,
                    &[(0, 3, 0), (1, 3, 0), (0, 4, 0), (2, 3, 0), (2, 4, 0)],
                );
            }
            _ => {
                let many = format!("{} destinations", s.destinations);
                let mpsc_many = format!("mpsc, {} channels", s.destinations);
                let c = [
                    "1 destination",
                    many.as_str(),
                    "mpsc, 1 channel",
                    mpsc_many.as_str(),
                ];
                println!(
                    "  {} messages sent round-robin over the outputs; handler::payload listeners; \
                     mpsc: a channel and a consumer task per destination (its start: spawning them)",
                    s.messages
                );
                let r = run_rounds(&c, s.rounds, |i| {
                    let msgs = bench_msgs(s.messages);
                    let count = if i % 2 == 0 { 1 } else { s.destinations };
                    timed(if i < 2 {
                        Box::pin(many::run(msgs, count))
                    } else {
                        Box::pin(inproc::mpsc_many(msgs, count))
                    })
                });
                report(
                    &c,
                    &["throughput", "App::start", "heap per destination"],
                    &r,
                    &[(1, 0, 0), (1, 0, 1), (3, 2, 0), (1, 3, 2)],
                );
            }
        }
    }
}
