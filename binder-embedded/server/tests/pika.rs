//! The server driven by pika (PyPI), a Python client nobody here wrote: `clients/pika_smoke.py`
//! against a server on port 0 (confirms, prefetch with manual acks, get/nack/reject, refusals).
//!
//! Skipped, with the reason printed, when `python3` or its `pika` package is missing, unless
//! `REQUIRE_CLIENTS=1` is set: then a missing client fails the test.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

/// Why pika cannot be run here, if it cannot.
fn pika_missing() -> Option<String> {
    match Command::new("python3").args(["-c", "import pika"]).output() {
        Ok(out) if out.status.success() => None,
        Ok(out) => Some(format!(
            "python3 cannot import pika: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => Some(format!("python3 cannot be run: {e}")),
    }
}

fn required() -> bool {
    std::env::var("REQUIRE_CLIENTS").is_ok_and(|v| v == "1")
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("clients/pika_smoke.py")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pika_publishes_with_confirms_consumes_with_prefetch_and_is_refused_correctly() {
    if let Some(reason) = pika_missing() {
        assert!(!required(), "REQUIRE_CLIENTS=1 but {reason}");
        eprintln!("skipped: {reason} (pip install pika; REQUIRE_CLIENTS=1 makes this fail)");
        return;
    }
    let server = common::server(common::config()).await;
    let port = server.local_addr().port().to_string();
    let run = tokio::task::spawn_blocking(move || {
        Command::new("python3")
            .arg(script())
            .args(["--port", &port, "--messages", "1000", "--prefetch", "10"])
            .output()
    });
    let out: Output = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("pika_smoke.py did not finish in 120 s")
        .expect("the blocking task panicked")
        .expect("python3 could not be started");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    print!("{stdout}");
    assert!(
        out.status.success(),
        "pika_smoke.py failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let last = stdout.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("pika_smoke: ") && last.ends_with(" passed, 0 failed"),
        "unexpected last line {last:?}"
    );
    server.shutdown().await;
}
