//! A long mixed run of publishes and acks, with a few messages held unacknowledged for a long
//! time: dead segments are deleted and sparse ones compacted, so disk use stays bounded.

mod common;

use std::collections::VecDeque;
use std::path::Path;

use common::*;
use stream_engine::*;
use stream_store::{FaultFs, StoreConfig};

#[tokio::test]
async fn segment_deletion_and_compaction_keep_disk_use_bounded() {
    let fs = FaultFs::new();
    let dir = Path::new("/data");
    let config = StoreConfig {
        segment_bytes: 64 * 1024,
        ..StoreConfig::default()
    };
    let (store, broker) = open_fault(&fs, dir, config.clone());
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    ch.queue_declare("q", durable_queue(), FieldTable::new())
        .unwrap();
    ch.confirm_select().unwrap();
    let mut held = VecDeque::new();
    let mut largest = 0;
    let body = vec![b'x'; 200];
    let mut published = 0u64;
    for i in 0..20_000u64 {
        ch.basic_publish("", "q", Default::default(), persistent(body.clone()))
            .await
            .unwrap();
        published += 1;
        // Keep about 200 ready; hold one in 50 deliveries for the next 100 held ones.
        if i >= 200 {
            let got = ch.basic_get("q", false).unwrap().unwrap();
            if i % 50 == 0 {
                held.push_back(got.delivery.delivery_tag);
                if held.len() > 100 {
                    ch.basic_ack(held.pop_front().unwrap(), false).unwrap();
                }
            } else {
                ch.basic_ack(got.delivery.delivery_tag, false).unwrap();
            }
        }
        if i % 500 == 0 {
            store.stats().unwrap();
            largest = largest.max(fs.size_under(&dir.join("segments")));
        }
    }
    let stats = store.stats().unwrap();
    // Everything ever written is 20,000 records of about 250 bytes: 5 MB.
    assert!(published * 250 > 4_000_000);
    assert!(
        largest < 1024 * 1024,
        "disk use peaked at {largest} bytes ({stats:?})"
    );
    assert!(stats.deleted_segments > 20, "{stats:?}");
    assert!(
        stats.compactions > 0,
        "held messages are moved out of old segments: {stats:?}"
    );
    assert_eq!(stats.live_messages, 200 + held.len());
    // And what is left is still all there after a crash.
    let after = fs.crash();
    let (_store, broker) = open_fault(&after, dir, config);
    let expected = 200 + held.len() as u32;
    assert_eq!(broker.queue_counts("q"), Some((expected, 0)));
}
