//! Memory per queued message beyond the payload: `n` encoded payloads queued with no consumer,
//! counted by the [`crate::alloc`] allocator. The payloads are encoded (to buffers of exactly
//! their size) before the counting window opens and handed over inside it: moved into the
//! queue (ours, `mpsc`) or copied by the broker and then dropped (ruststream), so the net
//! bytes of the window over `n` are what the queue holds per message beyond the payload. The
//! vector that held the payloads is kept (emptied) until the window closed, so its own buffer
//! is not freed inside it.
//!
//! Our broker runs without a memory high watermark: with the default one (400 MiB), 1 M
//! messages nobody consumes would block the publisher (RabbitMQ's flow control, by design)
//! and the run would wait forever; it publishes with `try_basic_publish` and fails, saying
//! so, if it is ever blocked.

use binder_core::{DeliveryMode, Message, Properties, SharedProperties};
use binder_embedded::engine::{
    Broker, BrokerConfig, FieldTable, PublishOptions, PublishStatus, QueueOptions,
};
use tokio::sync::mpsc;

use crate::alloc::Counting;
use crate::payload::{BenchMsg, encode};
use crate::peer_rs::Parked;
use crate::rounds::Figure;

/// The contenders, in report order: the engine as the `embedded` binder runs it (holding the
/// framework's records), once with bare messages and once with the properties an output
/// gives every message it sends (its content type and delivery mode, one allocation the
/// output shares between them), and the engine with its own records
/// (`stream_engine::Message`).
pub const CONTENDERS: [&str; 5] = [
    "ours (engine)",
    "ours, Output::send's properties",
    "engine, native records",
    "ruststream",
    "mpsc unbounded",
];

/// Publishes every payload into a fresh queue of `broker` (no watermark); `wrap` makes the
/// message. Returns the counted bytes per message.
fn queue_all<E: stream_engine::Envelope>(
    broker: stream_engine::Broker<E>,
    payloads: &mut Vec<Vec<u8>>,
    wrap: impl Fn(Vec<u8>) -> E::Message,
) -> Vec<Figure> {
    const QUEUE: &str = "bench.memory";
    let n = payloads.len();
    let conn = broker.connect();
    let ch = conn.open_channel().expect("channel.open");
    ch.queue_declare(QUEUE, QueueOptions::default(), FieldTable::new())
        .expect("queue.declare");
    let counting = Counting::start();
    for (published, p) in payloads.drain(..).enumerate() {
        let outcome = match ch.try_basic_publish("", QUEUE, PublishOptions::default(), wrap(p)) {
            stream_engine::TryPublish::Done(outcome) => outcome.expect("basic.publish"),
            stream_engine::TryPublish::Blocked(_) => panic!(
                "publisher blocked after {published} messages ({:?}, {} B counted)",
                broker.blocked_reason(),
                broker.memory_used()
            ),
            stream_engine::TryPublish::Pending(_) => panic!("the in-memory store confirms at once"),
        };
        assert_eq!(outcome.status, PublishStatus::Routed(1));
    }
    let figures = per_message(&counting, n);
    drop(counting);
    drop((ch, conn, broker));
    figures
}

fn unwatermarked() -> BrokerConfig {
    BrokerConfig {
        memory_high_watermark: None,
        ..BrokerConfig::default()
    }
}

fn per_message(counting: &Counting, n: usize) -> Vec<Figure> {
    vec![Figure::bytes(counting.live() as f64 / n as f64)]
}

/// Runs contender `i` of [`CONTENDERS`] once.
pub async fn run(i: usize, msgs: &[BenchMsg]) -> Vec<Figure> {
    let n = msgs.len();
    let mut payloads: Vec<Vec<u8>> = msgs.iter().map(encode).collect();
    match i {
        0 => {
            let figures = queue_all(Broker::with_config(unwatermarked()), &mut payloads, |p| {
                Message::new(p)
            });
            drop(payloads);
            figures
        }
        1 => {
            // What `Output::send` puts on every message: the binding's content type and the
            // producer's delivery mode, in one allocation the output holds and shares.
            let output: SharedProperties = Properties {
                content_type: Some("application/json".into()),
                delivery_mode: Some(DeliveryMode::Persistent),
                ..Properties::default()
            }
            .into();
            let figures = queue_all(Broker::with_config(unwatermarked()), &mut payloads, |p| {
                Message::new(p).with_properties(output.clone())
            });
            drop(payloads);
            figures
        }
        2 => {
            let broker =
                stream_engine::Broker::<stream_engine::Native>::with_config(unwatermarked());
            let figures = queue_all(broker, &mut payloads, stream_engine::Message::new);
            drop(payloads);
            figures
        }
        3 => {
            const NAME: &str = "bench.memory";
            let parked = Parked::open(NAME);
            let counting = Counting::start();
            for p in payloads.drain(..) {
                parked.publish_raw(NAME, &p).await;
            }
            let figures = per_message(&counting, n);
            drop(counting);
            drop(payloads);
            drop(parked);
            figures
        }
        4 => {
            let (tx, rx) = mpsc::unbounded_channel::<Vec<u8>>();
            let counting = Counting::start();
            for p in payloads.drain(..) {
                tx.send(p).expect("receiver alive");
            }
            let figures = per_message(&counting, n);
            drop(counting);
            drop(payloads);
            drop((tx, rx));
            figures
        }
        _ => unreachable!("{} contenders", CONTENDERS.len()),
    }
}
