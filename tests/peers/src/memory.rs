//! Memory per queued message beyond the payload: `n` encoded payloads queued with no consumer,
//! counted by the [`crate::alloc`] allocator. The payloads are encoded (to buffers of exactly
//! their size) before the counting window opens and handed over inside it: moved into the
//! queue (ours, `mpsc`) or copied by the broker and then dropped (ruststream), so the net
//! bytes of the window over `n` are what the queue holds per message beyond the payload. The
//! vector that held the payloads is kept (emptied) until the window closed, so its own buffer
//! is not freed inside it.

use binder_core::Message;
use binder_embedded::engine::{Broker, FieldTable, PublishOptions, PublishStatus, QueueOptions};
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
            let broker = Broker::new();
            let conn = broker.connect();
            let ch = conn.open_channel().expect("channel.open");
            ch.queue_declare(QUEUE, QueueOptions::default(), FieldTable::new())
                .expect("queue.declare");
            let counting = Counting::start();
            for p in payloads.drain(..) {
                let outcome = ch
                    .basic_publish("", QUEUE, PublishOptions::default(), Message::new(p))
                    .await
                    .expect("basic.publish");
                assert_eq!(outcome.status, PublishStatus::Routed(1));
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
