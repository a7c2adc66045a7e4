//! The recovery fuzz target's harness (`stream_store::fuzzing`, driven by
//! `fuzz/fuzz_targets/recovery.rs`) run in `cargo test`: on the seeds, data directories that
//! workloads leave behind (crashed or closed), and on a fixed set of mutations of each
//! (bytes flipped, set, cut, repeated, removed), so that the checks run on damaged
//! directories in every test run, not only under `cargo fuzz`.
//!
//! It also replays the inputs the fuzz target failed on (`fuzz/regressions/recovery/`).
//!
//! `cargo test -p stream-store --test fuzz_seeds -- --ignored write_seed_corpus` writes the
//! seeds to `fuzz/seeds/recovery/`.

mod common;

use std::path::Path;

use common::*;
use stream_engine::*;
use stream_store::fuzzing::{self, DIR};
use stream_store::{FaultFs, StoreConfig};

/// Declares, publishes, acks and leaves deliveries unacknowledged; the store is closed
/// cleanly or not. Small segments, so that messages span several and some are deleted.
async fn workload(fanout: bool, close: bool) -> FaultFs {
    let fs = FaultFs::new();
    let config = StoreConfig {
        segment_bytes: 4096,
        ..StoreConfig::default()
    };
    let (store, broker) = open_fault(&fs, Path::new(DIR), config);
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    ch.confirm_select().unwrap();
    let kind = if fanout {
        ExchangeKind::Fanout
    } else {
        ExchangeKind::Direct
    };
    ch.exchange_declare("x", kind, durable_exchange(), FieldTable::new())
        .unwrap();
    let mut priority = FieldTable::new();
    priority.insert("x-max-priority", FieldValue::I32(5));
    let mut dead_lettered = FieldTable::new();
    dead_lettered.insert("x-dead-letter-exchange", FieldValue::from("x"));
    dead_lettered.insert("x-max-length", FieldValue::I32(6));
    for (q, args) in [
        ("a", FieldTable::new()),
        ("b", priority),
        ("c", dead_lettered),
    ] {
        ch.queue_declare(q, durable_queue(), args).unwrap();
        ch.queue_bind(q, "x", q, FieldTable::new()).unwrap();
    }
    for i in 0..24u8 {
        let mut m = persistent(vec![i; 200 + usize::from(i)]);
        m.properties.priority = Some(i % 6);
        m.properties.message_id = Some(format!("m{i}"));
        if i % 3 == 0 {
            m.headers.insert("n", FieldValue::I32(i32::from(i)));
        }
        let key = ["a", "b", "c"][usize::from(i % 3)];
        ch.basic_publish("x", key, PublishOptions::default(), m)
            .await
            .unwrap();
    }
    for q in ["a", "b"] {
        for _ in 0..3 {
            let got = ch.basic_get(q, false).unwrap().expect("a message");
            ch.basic_ack(got.delivery.delivery_tag, false).unwrap();
        }
    }
    // Delivered, never acknowledged: redelivered after the restart.
    let kept = conn.open_channel().unwrap();
    kept.basic_get("a", false).unwrap().expect("a message");
    // Policies: one kept (it limits `a`, which holds more than that: the oldest go), one
    // set and cleared.
    for name in ["limit", "gone"] {
        let mut definition = FieldTable::new();
        definition.insert("max-length", FieldValue::I32(2));
        broker
            .set_policy(PolicyDef {
                name: name.into(),
                pattern: "^a$".into(),
                apply_to: PolicyTarget::Queues,
                priority: 1,
                definition,
            })
            .unwrap();
    }
    broker.clear_policy("gone").unwrap();
    // Operator policies likewise, named as the policies: their own records.
    for name in ["limit", "gone"] {
        let mut definition = FieldTable::new();
        definition.insert("max-length", FieldValue::I32(5));
        broker
            .set_operator_policy(PolicyDef {
                name: name.into(),
                pattern: "^b$".into(),
                apply_to: PolicyTarget::All,
                priority: 0,
                definition,
            })
            .unwrap();
    }
    broker.clear_operator_policy("gone").unwrap();
    // A queue deleted and declared again: the old incarnation's records are dead.
    ch.queue_delete("c", false, false).unwrap();
    ch.queue_declare("c", durable_queue(), FieldTable::new())
        .unwrap();
    ch.basic_publish("", "c", PublishOptions::default(), persistent("new c"))
        .await
        .unwrap();
    store.stats().unwrap();
    if close {
        drop(kept);
        drop(ch);
        drop(conn);
        drop(broker);
        store.close().unwrap();
    }
    fs.crash()
}

async fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut seeds = Vec::new();
    for fanout in [false, true] {
        for close in [false, true] {
            let fs = workload(fanout, close).await;
            for framed in [false, true] {
                let name = format!(
                    "{}-{}-{}",
                    if fanout { "fanout" } else { "direct" },
                    if close { "closed" } else { "crashed" },
                    if framed { "framed" } else { "raw" }
                );
                seeds.push((name, fuzzing::input(&fs, framed)));
            }
        }
    }
    seeds
}

/// Runs the check where the target runs it: a current-thread runtime with a paused clock.
fn check(input: &[u8]) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    let _entered = rt.enter();
    fuzzing::check(input);
}

fn mutate(seed: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut m = seed.to_vec();
    let at = 1 + rng.below(m.len() - 1);
    match rng.below(5) {
        0 => m[at] ^= 1 << rng.below(8),
        1 => m[at] = rng.next() as u8,
        2 => m.truncate(at),
        3 => {
            let end = (at + 1 + rng.below(32)).min(m.len());
            let piece = m[at..end].to_vec();
            m.splice(at..at, piece);
        }
        _ => {
            let end = (at + 1 + rng.below(32)).min(m.len());
            m.drain(at..end);
        }
    }
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeds_and_their_mutations_recover_consistently() {
    let seeds = seeds().await;
    assert_eq!(seeds.len(), 8);
    for (i, (name, seed)) in seeds.iter().enumerate() {
        assert!(seed.len() > 1000, "{name}: {} bytes", seed.len());
        // The seed itself starts: a workload's directory always recovers.
        let fs = fuzzing::files(seed);
        open_fault(&fs, Path::new(DIR), StoreConfig::default());
        let seed = seed.clone();
        let mut rng = Rng(0x5eed_0f57_0e00 + i as u64);
        tokio::task::spawn_blocking(move || {
            check(&seed);
            for _ in 0..150 {
                check(&mutate(&seed, &mut rng));
            }
        })
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
    }
}

/// The inputs the fuzz target failed on (`fuzz/regressions/recovery/`), each named after
/// what it found, pass the check.
#[test]
fn the_inputs_the_fuzz_target_failed_on_recover_consistently() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions/recovery");
    let mut replayed = 0;
    let mut failed = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let input = std::fs::read(&path).unwrap();
        if std::panic::catch_unwind(|| check(&input)).is_err() {
            failed.push(path.file_name().unwrap().to_string_lossy().into_owned());
        }
        replayed += 1;
    }
    assert!(replayed >= 4, "{replayed} inputs in {}", dir.display());
    assert!(failed.is_empty(), "these fail the check: {failed:?}");
}

#[tokio::test]
#[ignore = "writes the fuzz target's seed corpus"]
async fn write_seed_corpus() {
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/recovery");
    std::fs::create_dir_all(&out).unwrap();
    for (name, seed) in seeds().await {
        std::fs::write(out.join(name), seed).unwrap();
    }
}
