//! An arbitrary data directory (the metadata log, the clean-shutdown marker, segments and
//! their ack files, built from the input as `stream_store::fuzzing` describes) opened by the
//! store and recovered by a broker, then closed and opened again.
//!
//! Checked: no panic and no hang; the store starts or refuses with an error; one that
//! started, and was then written to and closed, starts again from its clean-shutdown marker
//! with the same exchanges, queues, bindings and messages, and the full scan of the same
//! files (marker removed) finds them too.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime");
    let _entered = rt.enter();
    stream_store::fuzzing::check(data);
});
