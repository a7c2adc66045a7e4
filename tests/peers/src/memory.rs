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

use binder_core::Message;
use binder_embedded::engine::{
    Broker, BrokerConfig, FieldTable, PublishOptions, PublishStatus, QueueOptions, TryPublish,
};
use tokio::sync::mpsc;

use crate::alloc::Counting;
use crate::payload::{BenchMsg, encode};
use crate::peer_rs::Parked;
use crate::rounds::{Figure, Unit};

/// The contenders, in report order.
pub const CONTENDERS: [&str; 3] = ["ours (engine)", "ruststream", "mpsc unbounded"];

fn per_message(counting: &Counting, n: usize) -> Vec<Figure> {
    vec![Figure {
        value: counting.live() as f64 / n as f64,
        unit: Unit::Bytes,
    }]
}

/// Runs contender `i` of [`CONTENDERS`] once.
pub async fn run(i: usize, msgs: &[BenchMsg]) -> Vec<Figure> {
    let n = msgs.len();
    let mut payloads: Vec<Vec<u8>> = msgs.iter().map(encode).collect();
    match i {
        0 => {
            const QUEUE: &str = "bench.memory";
            let broker = Broker::with_config(BrokerConfig {
                memory_high_watermark: None,
                ..BrokerConfig::default()
            });
            let conn = broker.connect();
            let ch = conn.open_channel().expect("channel.open");
            ch.queue_declare(QUEUE, QueueOptions::default(), FieldTable::new())
                .expect("queue.declare");
            let counting = Counting::start();
            for (published, p) in payloads.drain(..).enumerate() {
                let outcome =
                    match ch.try_basic_publish("", QUEUE, PublishOptions::default(), Message::new(p))
                    {
                        TryPublish::Done(outcome) => outcome.expect("basic.publish"),
                        TryPublish::Blocked(_) => panic!(
                            "publisher blocked after {published} messages ({:?}, {} B counted)",
                            broker.blocked_reason(),
                            broker.memory_used()
                        ),
                        TryPublish::Pending(_) => panic!("the in-memory store confirms at once"),
                    };
                assert_eq!(outcome.status, PublishStatus::Routed(1));
                // As `basic_publish` does: let the runtime's other tasks in.
                tokio::task::coop::consume_budget().await;
            }
            let figures = per_message(&counting, n);
            drop(counting);
            drop(payloads);
            drop((ch, conn, broker));
            figures
        }
        1 => {
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
        2 => {
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
