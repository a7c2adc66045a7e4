//! A paged backlog does not grow the heap by its bodies: past the paging threshold, each more
//! persistent message costs its stub and the store's index entry, not its body and record.
//! (One test in its own binary: it measures the process's RSS.)

mod common;

use std::collections::VecDeque;

use common::*;
use stream_engine::*;
use stream_store::{DiskStore, StoreConfig};

fn rss() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

async fn publish(ch: &Channel, n: usize) {
    let mut pending = VecDeque::new();
    for _ in 0..n {
        if pending.len() == 1_000 {
            let p: PendingConfirm = pending.pop_front().unwrap();
            p.wait().await.unwrap();
        }
        match ch.try_basic_publish("", "q", Default::default(), persistent(vec![b'x'; 100])) {
            TryPublish::Pending(p) => pending.push_back(p),
            other => panic!("expected a pending confirm: {other:?}"),
        }
    }
    for p in pending {
        p.wait().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rss_grows_by_a_run_slot_and_two_index_slots_per_paged_message() {
    let dir = tempfile::tempdir().unwrap();
    let store = DiskStore::open(dir.path(), StoreConfig::default()).unwrap();
    // Paging from 16 MiB; the watermark itself (1 GiB) is never reached.
    let config = BrokerConfig {
        memory_high_watermark: Some(1 << 30),
        memory_paging_ratio: 1.0 / 64.0,
        ..BrokerConfig::default()
    };
    let broker: Broker = Broker::with_store(config, store.clone()).unwrap();
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    ch.queue_declare("q", durable_queue(), FieldTable::new())
        .unwrap();
    ch.confirm_select().unwrap();
    // Past the threshold (about 32,000 held 100-byte messages), then measure 200,000 more.
    publish(&ch, 100_000).await;
    store.stats().unwrap();
    let (rss_before, count_before) = (rss(), broker.memory_used());
    let paged_before = broker.paged_messages("q").unwrap();
    publish(&ch, 200_000).await;
    store.stats().unwrap();
    let (rss_after, count_after) = (rss(), broker.memory_used());
    let paged = broker.paged_messages("q").unwrap() - paged_before;
    assert_eq!(paged, 200_000, "every message past the threshold is paged");
    assert_eq!(
        count_after - count_before,
        paged * std::mem::size_of::<u32>(),
        "a paged message in a run counts as its 4-byte slot"
    );
    let per_message = rss_after.saturating_sub(rss_before) / paged;
    println!("RSS growth per paged 100-byte message: {per_message} bytes");
    // A run's slot (4 bytes) and the store's two index slots (16 + 8 bytes); a held 100-byte
    // message costs about 530 bytes in the engine alone, a stub 32.
    assert!(
        per_message < 64,
        "RSS grew by {per_message} bytes per paged message"
    );
    let mut consumer = ch
        .basic_consume(
            "q",
            ConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
        )
        .unwrap();
    for _ in 0..300_000 {
        let d = consumer.recv().await.unwrap();
        assert_eq!(d.message().payload.len(), 100);
    }
    assert_eq!(broker.pages_read().1, 0);
}
