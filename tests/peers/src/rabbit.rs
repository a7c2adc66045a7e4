//! The RabbitMQ scenarios: transient (16 in flight) and persistent with confirms (1,000 in
//! flight). Every contender publishes with confirms through a window of that size, consumes
//! with prefetch [`PREFETCH`] and acks after decoding; queues are durable, messages are
//! delivery mode 1 (transient) or 2 (persistent). Each run has its own uniquely named
//! exchange and queue, deleted after the run.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use binder_core::binder::Binder;
use binder_rabbit::{RabbitBinder, RabbitSettings};
use lapin::options::{
    ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions, QueueDeclareOptions,
    QueueDeleteOptions,
};
use lapin::types::{FieldTable, ShortString};
use lapin::{Connection, ConnectionProperties, ExchangeKind};

use crate::ours::{self, OursApp, Target, Tuning};
use crate::payload::{BenchMsg, Sink};
use crate::peer_lapin::{self, RawLapin};
use crate::peer_rl::{RlApp, RlProducer};
use crate::rounds::Figure;

/// Every consumer's prefetch (ours: `rabbit.bindings.in.consumer.prefetch`).
pub const PREFETCH: u16 = 200;

/// The contenders, in report order (the last three only when named in `BENCH_ONLY`).
pub const CONTENDERS: [&str; 8] = [
    "ours",
    "lapin topic",
    "lapin topic, 2 connections",
    "lapin default",
    "ruststream-lapin",
    "ours producer, lapin consumer",
    "lapin producer, ours consumer",
    "lapin 2 connections, 4-word key",
];

/// Contenders that tell which side a difference is on (our producer with raw lapin's
/// consumer, and raw lapin's producer, on a connection of its own, with our consumer), and
/// what a routing key's words cost (raw lapin on two connections routing by a four-word
/// name, against the same with one word).
pub const ON_DEMAND: [&str; 3] = [CONTENDERS[5], CONTENDERS[6], CONTENDERS[7]];

/// Transient or persistent, and the window that goes with it.
#[derive(Debug, Clone, Copy)]
pub struct Mode {
    pub persistent: bool,
    pub window: usize,
}

static RUNS: AtomicUsize = AtomicUsize::new(0);

/// A name no other run, of this process or another, uses. One word to a topic exchange (no
/// dots): RabbitMQ's topic routing costs more with every word of the routing key, and every
/// exchange-routed contender routes by such a name (ours by its destination, as Spring's
/// binder does).
fn unique(kind: &str) -> String {
    format!(
        "peer-bench-{}-{}-{kind}",
        std::process::id(),
        RUNS.fetch_add(1, Ordering::Relaxed)
    )
}

/// The admin connection: declares and deletes the raw contenders' topology, and deletes ours.
#[derive(Debug)]
pub struct Admin {
    uri: String,
    conn: Connection,
}

impl Admin {
    /// Connects, or says why not (within 5 s).
    pub async fn connect(uri: &str) -> Result<Admin, String> {
        let connect = Connection::connect(uri, ConnectionProperties::default());
        match tokio::time::timeout(Duration::from_secs(5), connect).await {
            Ok(Ok(conn)) => Ok(Admin {
                uri: uri.to_owned(),
                conn,
            }),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("no answer within 5 s".to_owned()),
        }
    }

    async fn declare(&self, exchange: Option<&str>, queue: &str) {
        let ch = self.conn.create_channel().await.expect("channel.open");
        let durable = QueueDeclareOptions {
            durable: true,
            ..Default::default()
        };
        ch.queue_declare(ShortString::from(queue), durable, FieldTable::default())
            .await
            .expect("queue.declare");
        if let Some(exchange) = exchange {
            let options = ExchangeDeclareOptions {
                durable: true,
                ..Default::default()
            };
            ch.exchange_declare(
                ShortString::from(exchange),
                ExchangeKind::Topic,
                options,
                FieldTable::default(),
            )
            .await
            .expect("exchange.declare");
            ch.queue_bind(
                ShortString::from(queue),
                ShortString::from(exchange),
                ShortString::from("#"),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .expect("queue.bind");
        }
        let _ = ch.close(200, ShortString::from("OK")).await;
    }

    /// Deletes what a run declared; a failure is reported, not fatal.
    async fn delete(&self, exchange: Option<&str>, queue: &str) {
        let Ok(ch) = self.conn.create_channel().await else {
            eprintln!("peer bench: cannot open a channel to delete `{queue}`");
            return;
        };
        if let Err(e) = ch
            .queue_delete(ShortString::from(queue), QueueDeleteOptions::default())
            .await
        {
            eprintln!("peer bench: cannot delete queue `{queue}`: {e}");
        }
        if let Some(exchange) = exchange
            && let Err(e) = ch
                .exchange_delete(
                    ShortString::from(exchange),
                    ExchangeDeleteOptions::default(),
                )
                .await
        {
            eprintln!("peer bench: cannot delete exchange `{exchange}`: {e}");
        }
        let _ = ch.close(200, ShortString::from("OK")).await;
    }

    pub async fn close(self) {
        let _ = self.conn.close(200, ShortString::from("OK")).await;
    }
}

/// Our apps' settings for `mode`: the prefetch every contender uses and the delivery mode.
fn tuning(mode: Mode) -> Tuning {
    Tuning {
        prefetch: Some(PREFETCH),
        delivery_mode: Some(if mode.persistent {
            "PERSISTENT"
        } else {
            "NON_PERSISTENT"
        }),
        batch: None,
    }
}

fn rate(n: usize, elapsed: Duration) -> Vec<Figure> {
    vec![Figure::rate(n as f64 / elapsed.as_secs_f64())]
}

/// Runs contender `i` of [`CONTENDERS`] once.
pub async fn run(admin: &Admin, i: usize, msgs: Vec<BenchMsg>, mode: Mode) -> Vec<Figure> {
    match i {
        0 => ours(admin, msgs, mode).await,
        1 => raw(admin, msgs, mode, Route::Topic { words: 1 }, false).await,
        2 => raw(admin, msgs, mode, Route::Topic { words: 1 }, true).await,
        3 => raw(admin, msgs, mode, Route::Default, false).await,
        4 => rl(admin, msgs, mode).await,
        5 => hybrid(admin, msgs, mode, true).await,
        6 => hybrid(admin, msgs, mode, false).await,
        7 => raw(admin, msgs, mode, Route::Topic { words: 4 }, true).await,
        _ => unreachable!("{} contenders", CONTENDERS.len()),
    }
}

/// Ours: an app on the rabbit binder, output `out` and `#[stream_listener]` input `in` (group
/// `g`) on one destination; the producer sends through `Output::pipeline(window)`.
async fn ours(admin: &Admin, msgs: Vec<BenchMsg>, mode: Mode) -> Vec<Figure> {
    let n = msgs.len();
    let destination = unique("ours");
    let sink = Sink::new(n);
    let binder = Arc::new(RabbitBinder::new(RabbitSettings::from_uri(&admin.uri)));
    let tuning = tuning(mode);
    let app = OursApp::start(
        &Target::Rabbit(binder.clone()),
        &ours::pairs(&destination, 1, false),
        &tuning,
        Some(&[ours::ONE]),
        &sink,
    )
    .await;
    let output = app.outputs[0].clone();

    let start = Instant::now();
    let producer =
        tokio::spawn(async move { ours::send_pipelined(&output, &msgs, mode.window).await });
    sink.all_arrived().await;
    let elapsed = start.elapsed();

    producer.await.expect("producer panicked");
    sink.check();
    app.finish().await;
    binder.close().await;
    admin
        .delete(Some(&destination), &format!("{destination}.g"))
        .await;
    rate(n, elapsed)
}

/// How a raw contender routes.
#[derive(Debug, Clone, Copy)]
enum Route {
    /// Through a topic exchange bound to the queue with `#`, by the exchange's name, made of
    /// this many dot-separated words.
    Topic { words: usize },
    /// Through the default exchange, by the queue's name.
    Default,
}

/// Raw lapin routing as `route` says, publishing on a connection of its own (`apart`) or on
/// the consumer's.
async fn raw(
    admin: &Admin,
    msgs: Vec<BenchMsg>,
    mode: Mode,
    route: Route,
    apart: bool,
) -> Vec<Figure> {
    let n = msgs.len();
    let queue = unique("raw");
    let exchange = match route {
        // `<queue>-x` is one word; each further word is one more `.x`.
        Route::Topic { words } => Some(format!("{queue}-x{}", ".x".repeat(words - 1))),
        Route::Default => None,
    };
    admin.declare(exchange.as_deref(), &queue).await;
    let sink = Sink::new(n);
    let mut client = RawLapin::connect(&admin.uri, &queue, PREFETCH, apart).await;
    let consumer = client.take_consumer();
    let channel = client.publisher();
    let (ex, key) = match &exchange {
        Some(x) => (x.clone(), x.clone()),
        None => (String::new(), queue.clone()),
    };
    let mode_byte = if mode.persistent { 2 } else { 1 };

    let start = Instant::now();
    let consuming = tokio::spawn(peer_lapin::consume(consumer, n, sink.clone()));
    let producer = tokio::spawn(async move {
        peer_lapin::publish(&channel, &ex, &key, &msgs, mode_byte, mode.window).await;
    });
    let consumer = consuming.await.expect("consumer panicked");
    let elapsed = start.elapsed();

    producer.await.expect("producer panicked");
    sink.check();
    drop(consumer);
    client.close().await;
    admin.delete(exchange.as_deref(), &queue).await;
    rate(n, elapsed)
}

/// ruststream-lapin through a topic exchange bound to the queue with `#`, routing by the
/// exchange's name.
async fn rl(admin: &Admin, msgs: Vec<BenchMsg>, mode: Mode) -> Vec<Figure> {
    let n = msgs.len();
    let queue = unique("rl");
    let exchange = format!("{queue}-x");
    admin.declare(Some(&exchange), &queue).await;
    let sink = Sink::new(n);
    let app = RlApp::start(&admin.uri, &queue, PREFETCH, &sink).await;
    let producer = RlProducer::connect(&admin.uri, &exchange, mode.persistent).await;
    let key = exchange.clone();

    let start = Instant::now();
    let producing = tokio::spawn(async move {
        producer.publish(&key, &msgs, mode.window).await;
        producer
    });
    sink.all_arrived().await;
    let elapsed = start.elapsed();

    let producer = producing.await.expect("producer panicked");
    sink.check();
    producer.close().await;
    app.finish().await;
    admin.delete(Some(&exchange), &queue).await;
    rate(n, elapsed)
}

/// Half ours, half raw lapin (on two connections): our producer with a raw consumer
/// (`ours_producing`), or a raw producer with our consumer.
async fn hybrid(
    admin: &Admin,
    msgs: Vec<BenchMsg>,
    mode: Mode,
    ours_producing: bool,
) -> Vec<Figure> {
    let n = msgs.len();
    let destination = unique("hyb");
    let queue = format!("{destination}.g");
    let sink = Sink::new(n);
    let binder = Arc::new(RabbitBinder::new(RabbitSettings::from_uri(&admin.uri)));
    let tuning = tuning(mode);
    let raw_sink = Sink::new(n);
    let app = OursApp::start(
        &Target::Rabbit(binder.clone()),
        &ours::pairs(&destination, 1, false),
        &tuning,
        Some(&[ours::ONE]),
        if ours_producing { &raw_sink } else { &sink },
    )
    .await;
    let dummy = format!("{destination}.dummy");
    if ours_producing {
        app.app.stop("in").await.expect("stop in");
    } else {
        admin.declare(None, &dummy).await;
    }
    let consumed = if ours_producing {
        queue.clone()
    } else {
        dummy.clone()
    };
    let mut client = RawLapin::connect(&admin.uri, &consumed, PREFETCH, true).await;
    let consumer = client.take_consumer();
    let channel = client.publisher();
    let output = app.outputs[0].clone();
    let mode_byte = if mode.persistent { 2 } else { 1 };

    let start = Instant::now();
    let (consuming, producer) = if ours_producing {
        let consuming = tokio::spawn(peer_lapin::consume(consumer, n, sink.clone()));
        let producer = tokio::spawn(async move {
            ours::send_pipelined(&output, &msgs, mode.window).await;
        });
        (Some(consuming), producer)
    } else {
        let ex = destination.clone();
        let producer = tokio::spawn(async move {
            // Routed as ours routes: by the destination's name.
            peer_lapin::publish(&channel, &ex, &ex, &msgs, mode_byte, mode.window).await;
        });
        (None, producer)
    };
    let consumer = match consuming {
        Some(c) => Some(c.await.expect("consumer panicked")),
        None => {
            sink.all_arrived().await;
            None
        }
    };
    let elapsed = start.elapsed();

    producer.await.expect("producer panicked");
    sink.check();
    drop(consumer);
    client.close().await;
    app.finish().await;
    binder.close().await;
    admin.delete(Some(&destination), &queue).await;
    if !ours_producing {
        admin.delete(None, &dummy).await;
    }
    rate(n, elapsed)
}
