//! A measurement (not a test) of paging: the RSS of a backlog of N persistent 100-byte
//! messages in a durable queue with a low memory watermark (so nearly all of them are paged),
//! and the delivery rate of a paged backlog against an in-memory one, in alternating rounds.
//!
//! `cargo run --release -p stream-store --example paging -- <empty dir on a real disk> [N] [rounds] [backlog per round]`

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::Instant;

use stream_engine::*;
use stream_store::{DiskStore, StoreConfig};

const IN_FLIGHT: usize = 1_000;
/// The memory high watermark: paged messages count against it too (32 bytes a stub, 4 bytes
/// a message in a run), so it is large enough for 10 M stubs.
const WATERMARK: usize = 1024 * 1024 * 1024;
/// Paging starts at 32 MiB.
const PAGING_RATIO: f64 = 1.0 / 32.0;

fn rss() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

fn persistent() -> Message {
    let mut m = Message::new(vec![b'x'; 100]);
    m.properties.delivery_mode = Some(2);
    m
}

fn durable() -> QueueOptions {
    QueueOptions {
        durable: true,
        ..Default::default()
    }
}

async fn publish(ch: &Channel, queue: &str, n: usize) {
    let mut pending = VecDeque::with_capacity(IN_FLIGHT);
    for _ in 0..n {
        if pending.len() == IN_FLIGHT {
            let p: PendingConfirm = pending.pop_front().unwrap();
            p.wait().await.unwrap();
        }
        match ch.try_basic_publish("", queue, Default::default(), persistent()) {
            TryPublish::Pending(p) => pending.push_back(p),
            other => panic!("expected a pending confirm: {other:?}"),
        }
    }
    for p in pending {
        p.wait().await.unwrap();
    }
}

/// Consumes `n` messages (prefetch 1,000, an ack with `multiple` every 100); msg/s.
async fn consume(ch: &Channel, queue: &str, n: usize) -> f64 {
    ch.basic_qos(1_000, false).unwrap();
    let mut consumer = ch.basic_consume(queue, ConsumeOptions::default()).unwrap();
    let start = Instant::now();
    let mut buf = Vec::new();
    let mut got = 0;
    while got < n {
        buf.clear();
        consumer.recv_many(&mut buf, 1_000).await;
        for d in &buf {
            assert_eq!(d.message().payload.len(), 100);
            got += 1;
            if got % 100 == 0 || got == n {
                ch.basic_ack(d.delivery_tag, true).unwrap();
            }
        }
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    consumer.cancel().unwrap();
    rate
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let dir: PathBuf = args
        .next()
        .expect("usage: paging <empty dir> [N] [rounds] [backlog per round]")
        .into();
    let n: usize = args.next().map_or(1_000_000, |a| a.parse().unwrap());
    let rounds: usize = args.next().map_or(5, |a| a.parse().unwrap());
    let backlog: usize = args.next().map_or(200_000, |a| a.parse().unwrap());
    std::fs::create_dir_all(&dir).unwrap();
    let store = DiskStore::open(dir.join("rss"), StoreConfig::default()).unwrap();
    let config = BrokerConfig {
        memory_high_watermark: Some(WATERMARK),
        memory_paging_ratio: PAGING_RATIO,
        ..BrokerConfig::default()
    };
    let broker: Broker = Broker::with_store(config, store.clone()).unwrap();
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    ch.confirm_select().unwrap();
    ch.queue_declare("backlog", durable(), FieldTable::new())
        .unwrap();
    let before = rss();
    let start = Instant::now();
    publish(&ch, "backlog", n).await;
    let secs = start.elapsed().as_secs_f64();
    let after = rss();
    let paged = broker.paged_messages("backlog").unwrap();
    println!(
        "backlog of {n} x 100 B persistent, watermark {} MiB, paging from {} MiB: RSS {} -> {} MiB ({:.0} B per message), {paged} paged, memory count {} MiB, filled at {:.0} msg/s",
        WATERMARK >> 20,
        (WATERMARK as f64 * PAGING_RATIO) as usize >> 20,
        before >> 20,
        after >> 20,
        (after - before) as f64 / n as f64,
        broker.memory_used() >> 20,
        n as f64 / secs
    );
    ch.queue_purge("backlog").unwrap();
    ch.queue_delete("backlog", false, false).unwrap();
    store.stats().unwrap();

    // Delivery of a paged backlog against an in-memory one, alternating.
    let mut ratios = Vec::new();
    for round in 0..rounds {
        let mut rates = [0.0; 2];
        for (i, paged) in [(round % 2 == 0), (round % 2 != 0)].into_iter().enumerate() {
            let _ = i;
            broker.set_memory_high_watermark(if paged { Some(WATERMARK) } else { None });
            let q = format!("round-{round}-{}", if paged { "paged" } else { "memory" });
            ch.queue_declare(&q, durable(), FieldTable::new()).unwrap();
            if paged {
                // Fill past the paging threshold first, so the measured backlog is paged.
                let filler = format!("{q}-filler");
                ch.queue_declare(&filler, durable(), FieldTable::new())
                    .unwrap();
                publish(&ch, &filler, 300_000).await;
                publish(&ch, &q, backlog).await;
                ch.queue_delete(&filler, false, false).unwrap();
                let stubs = broker.paged_messages(&q).unwrap();
                assert!(stubs > backlog * 9 / 10, "{stubs} of {backlog} paged");
            } else {
                publish(&ch, &q, backlog).await;
                assert_eq!(broker.paged_messages(&q), Some(0));
            }
            let consumer_ch = conn.open_channel().unwrap();
            let rate = consume(&consumer_ch, &q, backlog).await;
            consumer_ch.close();
            ch.queue_delete(&q, false, false).unwrap();
            rates[usize::from(!paged)] = rate;
        }
        let ratio = rates[0] / rates[1];
        println!(
            "round {round}: paged {:.0} msg/s, in memory {:.0} msg/s, ratio {ratio:.2}",
            rates[0], rates[1]
        );
        ratios.push(ratio);
    }
    ratios.sort_by(f64::total_cmp);
    if !ratios.is_empty() {
        println!(
            "paged / in-memory delivery: median {:.2}, min {:.2}, max {:.2} over {rounds} rounds",
            ratios[ratios.len() / 2],
            ratios[0],
            ratios[ratios.len() - 1]
        );
    }
    let (read, failed) = broker.pages_read();
    println!("read back {read}, failed {failed}");
    drop(ch);
    drop(conn);
    store.close().unwrap();
}
