//! Damage at every offset of the last segment's tail (cut there, or a byte flipped there):
//! recovery keeps every record before the damage, drops the rest, and the store starts.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use stream_engine::*;
use stream_store::{FaultFs, StoreConfig};

const DIR: &str = "/data";
const MESSAGES: usize = 30;
/// How many of the last records the damage sweeps over.
const TAIL_RECORDS: usize = 4;

async fn base() -> (FaultFs, PathBuf, Vec<u8>) {
    let fs = FaultFs::new();
    let dir = Path::new(DIR);
    let (store, broker) = open_fault(&fs, dir, StoreConfig::default());
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    ch.queue_declare("q", durable_queue(), FieldTable::new())
        .unwrap();
    ch.confirm_select().unwrap();
    for i in 0..MESSAGES {
        ch.basic_publish("", "q", Default::default(), persistent(format!("m{i:02}")))
            .await
            .unwrap();
    }
    store.stats().unwrap();
    let after = fs.crash();
    let segments = dir.join("segments");
    let mut segs: Vec<PathBuf> = after
        .list_paths(&segments)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    segs.sort();
    let last = segs.pop().expect("a segment");
    let data = after.contents(&last).unwrap();
    (after, last, data)
}

/// Where each record ends (16-byte header: length, CRC, sequence number; then payload).
fn record_ends(data: &[u8]) -> Vec<usize> {
    let mut ends = Vec::new();
    let mut at = 0;
    while at + 16 <= data.len() {
        let len = u32::from_le_bytes(data[at..at + 4].try_into().unwrap()) as usize;
        at += 16 + len;
        ends.push(at);
    }
    assert_eq!(at, data.len());
    ends
}

async fn recovers(fs: &FaultFs, expected: usize, what: &str) {
    let (store, broker) = open_fault(fs, Path::new(DIR), StoreConfig::default());
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    let kept = drain(&ch, "q");
    let want: Vec<(String, bool)> = (0..expected).map(|i| (format!("m{i:02}"), false)).collect();
    assert_eq!(kept, want, "{what}");
    // It starts: it takes and keeps new messages.
    ch.confirm_select().unwrap();
    ch.basic_publish("", "q", Default::default(), persistent("after"))
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    store.close().unwrap();
}

#[tokio::test]
async fn damage_anywhere_in_the_tail_keeps_every_record_before_it() {
    let (fs, last, data) = base().await;
    let ends = record_ends(&data);
    assert_eq!(ends.len(), MESSAGES, "one record per message");
    let tail_start = ends[MESSAGES - TAIL_RECORDS - 1];
    let mut runs = 0;
    for offset in tail_start..data.len() {
        let whole_before = ends.iter().filter(|&&e| e <= offset).count();
        let cut = fs.crash();
        cut.set_contents(&last, data[..offset].to_vec());
        recovers(&cut, whole_before, &format!("cut at {offset}")).await;
        let flipped = fs.crash();
        let mut damaged = data.clone();
        damaged[offset] ^= 0x5a;
        flipped.set_contents(&last, damaged);
        recovers(&flipped, whole_before, &format!("byte {offset} flipped")).await;
        runs += 2;
    }
    assert!(runs > 100, "{runs}");
}
