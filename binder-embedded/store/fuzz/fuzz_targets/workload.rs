//! Broker operations on a disk store, decoded from the input as
//! `stream_store::fuzzing::workload` describes (publishes, gets, acks, nacks, rejects that
//! dead-letter, re-drives, purges, deletions, peeks, clean and crashed restarts, a store
//! whose appends start to fail), with small segments and paging, checked against a model of
//! what every queue holds.
//!
//! Checked: no panic and no hang; every body read back is the one published; gets, peeks
//! and purges agree with the model; a clean restart recovers exactly the persistent messages
//! not settled, in order; a crash loses none of them and brings back only messages settled
//! since the last restart; a failed store refuses every later persistent message and keeps
//! what it took readable.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime")
        .block_on(stream_store::fuzzing::workload::run(data));
});
