//! The workload fuzz target's harness (`stream_store::fuzzing::workload`, driven by
//! `fuzz/fuzz_targets/workload.rs`) run in `cargo test` on generated inputs: operations on a
//! broker with a disk store (publishes, gets, settlements, dead letters, re-drives, purges,
//! deletions, peeks, clean and crashed restarts, store failures, in `sync`, `interval` and
//! `none` modes) checked against a model of every queue.
//!
//! `cargo test -p stream-store --test workload -- --ignored write_seed_corpus` writes the
//! seeds to `fuzz/seeds/workload/`.

mod common;

use std::path::Path;

use common::Rng;
use stream_store::fuzzing::workload::{
    self, FAILS, INTERVAL_KILLS, NONE_KILLS, ONE_PER_BATCH, PAGE_ALL, SMALL_SEGMENTS,
};

/// Runs an input where the target runs it: a current-thread runtime with a paused clock.
fn run(input: &[u8]) -> workload::Summary {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
        .block_on(workload::run(input))
}

/// An input of `ops` operations with these settings. Restarts are drawn less often than the
/// rest (one operation in about 40), so that backlogs build up between them.
fn generated(settings: u8, ops: usize, rng: &mut Rng) -> Vec<u8> {
    let mut input = vec![settings];
    for _ in 0..ops {
        let mut op = rng.next() as u8;
        if op & 0x0f >= 14 && rng.below(5) != 0 {
            op &= 0xf0 | rng.below(4) as u8;
        }
        input.push(op);
        // As `workload::run` reads them: operations 0–9 and 15 take an argument byte.
        if op & 0x0f <= 9 || op & 0x0f == 15 {
            input.push(rng.next() as u8);
        }
    }
    input
}

/// Deliveries left outstanding on the full dead-lettering queue (`w2`, `x-max-length` 600)
/// by a crash, then by a clean restart: back in the queue, they put it past its limit.
fn outstanding_past_the_limit(settings: u8) -> Vec<u8> {
    vec![
        settings, //
        0x22, 255, // 526 messages to w2
        0x22, 50, // 116 more: the 42 oldest dead-lettered
        0x24, 148, // a consumer takes 41 and is cancelled: they stay unacknowledged
        0x22, 20,   // 56 more: w2 full again, the 15 oldest dead-lettered
        0x0e, // crash: 641 recovered, the 41 oldest dead-lettered at the start
        0x24, 148, // 41 taken again
        0x22, 20, // 56 more
        0x0f, 0,    // clean restart: closing requeues the 41, the queue drops its oldest then
        0x0e, // crash, nothing outstanding
    ]
}

fn inputs() -> Vec<(String, Vec<u8>)> {
    let mut rng = Rng(0x00c0_ffee_0123_4567);
    let mut out = Vec::new();
    for settings in [0, SMALL_SEGMENTS | PAGE_ALL, INTERVAL_KILLS, NONE_KILLS] {
        out.push((
            format!("outstanding-past-the-limit-{settings}"),
            outstanding_past_the_limit(settings),
        ));
    }
    for settings in [
        0,
        SMALL_SEGMENTS,
        PAGE_ALL,
        SMALL_SEGMENTS | PAGE_ALL,
        SMALL_SEGMENTS | PAGE_ALL | ONE_PER_BATCH,
        SMALL_SEGMENTS | INTERVAL_KILLS,
        SMALL_SEGMENTS | PAGE_ALL | INTERVAL_KILLS,
        SMALL_SEGMENTS | PAGE_ALL | NONE_KILLS,
        SMALL_SEGMENTS | PAGE_ALL | FAILS,
        PAGE_ALL | FAILS,
        SMALL_SEGMENTS | PAGE_ALL | INTERVAL_KILLS | FAILS,
        SMALL_SEGMENTS | PAGE_ALL | NONE_KILLS | FAILS,
    ] {
        for i in 0..8 {
            let ops = 100 + rng.below(400);
            out.push((
                format!("settings-{settings}-{i}"),
                generated(settings, ops, &mut rng),
            ));
        }
    }
    out
}

#[test]
fn generated_workloads_keep_what_the_model_says() {
    let (mut paged_reads, mut paged_peeked) = (0, 0);
    let (mut failures, mut paged_at_failures) = (0, 0);
    for (name, input) in inputs() {
        match std::panic::catch_unwind(|| run(&input)) {
            Ok(summary) => {
                if input[0] & PAGE_ALL != 0 {
                    paged_reads += summary.pages_read;
                    paged_peeked += summary.paged_peeked;
                }
                failures += summary.failures;
                paged_at_failures += summary.paged_at_failures;
            }
            Err(e) => {
                let path = std::env::temp_dir().join(format!("stream-store-workload-{name}"));
                std::fs::write(&path, &input).unwrap();
                eprintln!("input {name} failed; written to {}", path.display());
                std::panic::resume_unwind(e);
            }
        }
    }
    // The inputs exercise what they are for: paged messages read back.
    assert!(
        paged_reads > 100 && paged_peeked > 1000,
        "paged messages read back: {paged_reads} delivered, {paged_peeked} peeked"
    );
    // And the store fails under some, with messages paged it could not write.
    assert!(
        failures >= 8 && paged_at_failures > 1000,
        "{failures} store failures, {paged_at_failures} paged messages just after them"
    );
}

#[test]
fn a_queue_recovered_past_its_limit_is_trimmed_at_the_start() {
    // The 41 outstanding, and perhaps the last message the burst before the crash dropped:
    // its removal comes after that publish's own write, and the power may go after the
    // sync that confirmed the publish and before the one that covers the removal.
    for settings in [0, SMALL_SEGMENTS | PAGE_ALL] {
        let summary = run(&outstanding_past_the_limit(settings));
        assert!(
            (41..=42).contains(&summary.trimmed_at_start),
            "settings {settings}: {} trimmed",
            summary.trimmed_at_start
        );
    }
    // A kill in `interval` mode may also bring back the messages dead-lettered before it,
    // whose removals were held for a sync: the start drops those again.
    for settings in [INTERVAL_KILLS, NONE_KILLS] {
        let summary = run(&outstanding_past_the_limit(settings));
        assert!(
            (41..=41 + 57).contains(&summary.trimmed_at_start),
            "settings {settings}: {} trimmed",
            summary.trimmed_at_start
        );
    }
}

#[test]
#[ignore = "writes the fuzz target's seed corpus"]
fn write_seed_corpus() {
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/workload");
    std::fs::create_dir_all(&out).unwrap();
    for (name, input) in inputs() {
        std::fs::write(out.join(name), input).unwrap();
    }
}
