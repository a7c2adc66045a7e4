//! A quick measurement (not a test): confirmed persistent publishes per second through
//! `Broker::with_store` with 1,000 in flight, 100-byte bodies, `sync` mode, with fsyncs per
//! second; then recovery time for 1 M messages, from the clean-shutdown marker and by a full
//! scan.
//!
//! `cargo run --release -p stream-store --example measure -- <empty dir on a real disk>`

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::Instant;

use stream_engine::*;
use stream_store::{DiskStore, StoreConfig};

const IN_FLIGHT: usize = 1_000;
const RECOVERY_MESSAGES: usize = 1_000_000;

/// No memory watermark: 1 M messages stay in memory (paging is not built yet).
fn config() -> BrokerConfig {
    BrokerConfig {
        memory_high_watermark: None,
        ..BrokerConfig::default()
    }
}

fn persistent() -> Message {
    let mut m = Message::new(vec![b'x'; 100]);
    m.properties.delivery_mode = Some(2);
    m
}

/// Publishes `n` messages with confirms, `IN_FLIGHT` at a time; returns (msg/s, fsyncs/s).
async fn publish(store: &DiskStore, broker: &Broker, n: usize) -> (f64, f64) {
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    ch.queue_declare(
        "bench",
        QueueOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::new(),
    )
    .unwrap();
    ch.confirm_select().unwrap();
    let syncs = store.syncs();
    let start = Instant::now();
    let mut pending = VecDeque::with_capacity(IN_FLIGHT);
    for _ in 0..n {
        if pending.len() == IN_FLIGHT {
            let p: PendingConfirm = pending.pop_front().unwrap();
            p.wait().await.unwrap();
        }
        match ch.try_basic_publish("", "bench", Default::default(), persistent()) {
            TryPublish::Pending(p) => pending.push_back(p),
            other => panic!("expected a pending confirm: {other:?}"),
        }
    }
    for p in pending {
        p.wait().await.unwrap();
    }
    let secs = start.elapsed().as_secs_f64();
    std::mem::forget(ch);
    std::mem::forget(conn);
    (n as f64 / secs, (store.syncs() - syncs) as f64 / secs)
}

fn reopen(dir: &Path) -> (f64, usize, bool) {
    let start = Instant::now();
    let store = DiskStore::open(dir, StoreConfig::default()).unwrap();
    println!(
        "  the store read its files in {:.2} s",
        start.elapsed().as_secs_f64()
    );
    let broker: Broker = Broker::with_store(config(), store.clone()).unwrap();
    let secs = start.elapsed().as_secs_f64();
    let (ready, _) = broker.queue_counts("bench").unwrap();
    let clean = store.started_clean();
    store.close().unwrap();
    (secs, ready as usize, clean)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir: PathBuf = std::env::args()
        .nth(1)
        .expect("usage: measure <empty dir on a real disk>")
        .into();
    std::fs::create_dir_all(&dir).unwrap();
    let throughput_dir = dir.join("throughput");
    let store = DiskStore::open(&throughput_dir, StoreConfig::default()).unwrap();
    let broker = Broker::with_store(config(), store.clone()).unwrap();
    let (rate, fsyncs) = publish(&store, &broker, 200_000).await;
    println!(
        "sync mode, {IN_FLIGHT} in flight, 100-byte bodies: {rate:.0} confirmed msg/s, {fsyncs:.0} fsyncs/s"
    );
    store.close().unwrap();
    drop(broker);

    let recovery_dir = dir.join("recovery");
    if recovery_dir.join("meta.log").exists() {
        for _ in 0..2 {
            let (secs, n, clean) = reopen(&recovery_dir);
            println!("recovery of {n} messages (clean marker used: {clean}): {secs:.2} s");
        }
        return;
    }
    let store = DiskStore::open(&recovery_dir, StoreConfig::default()).unwrap();
    let broker = Broker::with_store(config(), store.clone()).unwrap();
    let (rate, _) = publish(&store, &broker, RECOVERY_MESSAGES).await;
    println!("filled 1 M messages at {rate:.0} msg/s");
    store.close().unwrap();
    drop(broker);
    let (secs, n, clean) = reopen(&recovery_dir);
    println!("recovery of {n} messages (clean marker used: {clean}): {secs:.2} s");
    std::fs::remove_file(recovery_dir.join("clean")).unwrap();
    let (secs, n, clean) = reopen(&recovery_dir);
    println!("recovery of {n} messages (clean marker used: {clean}): {secs:.2} s");
    std::fs::remove_file(recovery_dir.join("clean")).unwrap();
    let (secs, n, clean) = reopen(&recovery_dir);
    println!("recovery of {n} messages (clean marker used: {clean}): {secs:.2} s");
}
