//! The `stream-broker` binary as a child process.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A command running the `stream-broker` binary built for these tests.
pub fn stream_broker() -> Command {
    Command::new(env!("CARGO_BIN_EXE_stream-broker"))
}

/// Spawns `command` with its stdout piped and waits up to `timeout` for the first log line
/// containing `needle`; returns the child and the word after `field=` on that line. The rest of
/// its stdout is drained on a thread, so the child never blocks on a full pipe.
pub fn spawn_until(
    mut command: Command,
    needle: &str,
    field: &str,
    timeout: Duration,
) -> (Child, String) {
    let mut child = command
        .stdout(Stdio::piped())
        .spawn()
        .expect("stream-broker starts");
    let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
    let (wanted, key) = (needle.to_owned(), format!("{field}="));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stdout.lines() {
            let Ok(line) = line else { break };
            if !line.contains(&wanted) {
                continue;
            }
            if let Some(rest) = line.split(&key).nth(1) {
                let _ = tx.send(rest.split_whitespace().next().unwrap_or("").to_owned());
            }
        }
    });
    match rx.recv_timeout(timeout) {
        Ok(value) => (child, value),
        Err(_) => {
            let _ = child.kill();
            panic!("stream-broker logged no line with `{needle}` and `{field}` within {timeout:?}");
        }
    }
}
