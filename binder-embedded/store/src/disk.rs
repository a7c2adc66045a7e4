//! The free-disk watermark (RabbitMQ's `disk_free_limit`): a thread that looks at the free
//! space of the file system a store writes to and reports when it falls below a limit, so
//! that the broker blocks publishers before the disk fills
//! ([`Broker::set_disk_alarm`](stream_engine::Broker::set_disk_alarm)).
//!
//! ```no_run
//! # fn main() -> std::io::Result<()> {
//! use std::time::Duration;
//! use stream_engine::Broker;
//! use stream_store::{DEFAULT_DISK_FREE_LIMIT, DiskMonitor};
//!
//! let broker: Broker = Broker::new();
//! let alarm = broker.clone();
//! let monitor = DiskMonitor::start(
//!     "/var/lib/app/broker",
//!     DEFAULT_DISK_FREE_LIMIT,
//!     Duration::from_secs(1),
//!     move |change| alarm.set_disk_alarm(change.low),
//! )?;
//! // … the alarm follows the free space until `monitor` is dropped.
//! # drop(monitor);
//! # Ok(()) }
//! ```

use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::Duration;

use stream_engine::{Broker, Envelope};

/// How often [`DiskMonitor::for_brokers`] measures the free space (a `statvfs` call).
pub const DISK_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// RabbitMQ's default `disk_free_limit.absolute`: 50 MB.
pub const DEFAULT_DISK_FREE_LIMIT: u64 = 50_000_000;

/// The bytes an unprivileged process may still write on the file system holding `dir`
/// (`statvfs`'s available blocks times the fragment size).
pub fn free_space(dir: impl AsRef<Path>) -> io::Result<u64> {
    let stats = rustix::fs::statvfs(dir.as_ref())?;
    Ok(stats.f_bavail.saturating_mul(stats.f_frsize))
}

/// The disk alarm went on or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskAlarm {
    /// The free space is below the limit: publishers are to be blocked.
    pub low: bool,
    /// The free space measured, in bytes.
    pub free: u64,
    /// The limit, in bytes.
    pub limit: u64,
}

/// Watches the free space of a directory's file system from a thread of its own, calling
/// back each time it crosses the limit (and once at start if it is below already). Stops
/// when dropped.
#[derive(Debug)]
pub struct DiskMonitor {
    dir: PathBuf,
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl DiskMonitor {
    /// Measures the free space of `dir`'s file system now (an error if it cannot be
    /// measured, so that a broker refuses to start rather than run unguarded), then every
    /// `interval`. `on_change` is called from the monitor's thread, with the alarm on at
    /// start if the space is below `limit` already, and then at every crossing. A
    /// measurement that fails later keeps the alarm as it was.
    pub fn start(
        dir: impl Into<PathBuf>,
        limit: u64,
        interval: Duration,
        on_change: impl FnMut(DiskAlarm) + Send + 'static,
    ) -> io::Result<DiskMonitor> {
        let dir = dir.into();
        let probe_dir = dir.clone();
        Self::with_probe(
            dir,
            move || free_space(&probe_dir),
            limit,
            interval,
            on_change,
        )
    }

    /// Sets and clears the disk alarm of `brokers` as the free space of `dir`'s file system
    /// crosses `limit`, measured every [`DISK_CHECK_INTERVAL`], logging each change (a
    /// warning when it goes on, as RabbitMQ does).
    pub fn for_brokers<E: Envelope>(
        dir: impl Into<PathBuf>,
        limit: u64,
        brokers: Vec<Broker<E>>,
    ) -> io::Result<DiskMonitor> {
        let dir = dir.into();
        let shown = dir.display().to_string();
        Self::start(dir, limit, DISK_CHECK_INTERVAL, move |change| {
            if change.low {
                tracing::warn!(
                    dir = %shown,
                    free_bytes = change.free,
                    disk_free_limit = change.limit,
                    "free disk space below the limit: publishers are blocked"
                );
            } else {
                tracing::info!(
                    dir = %shown,
                    free_bytes = change.free,
                    disk_free_limit = change.limit,
                    "free disk space back above the limit: publishers resume"
                );
            }
            for broker in &brokers {
                broker.set_disk_alarm(change.low);
            }
        })
    }

    /// [`DiskMonitor::start`] with the measurement given (for tests).
    fn with_probe(
        dir: PathBuf,
        mut probe: impl FnMut() -> io::Result<u64> + Send + 'static,
        limit: u64,
        interval: Duration,
        mut on_change: impl FnMut(DiskAlarm) + Send + 'static,
    ) -> io::Result<DiskMonitor> {
        let free = probe()?;
        let mut low = free < limit;
        if low {
            on_change(DiskAlarm { low, free, limit });
        }
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("disk-monitor".into())
            .spawn(move || {
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(interval) {
                    let Ok(free) = probe() else { continue };
                    if (free < limit) != low {
                        low = !low;
                        on_change(DiskAlarm { low, free, limit });
                    }
                }
            })?;
        Ok(DiskMonitor {
            dir,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The directory watched.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for DiskMonitor {
    fn drop(&mut self) {
        // Dropping the sender wakes the thread at once.
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};

    #[test]
    fn the_free_space_of_a_real_directory_is_measured() {
        let dir = tempfile::tempdir().unwrap();
        assert!(free_space(dir.path()).unwrap() > 0);
        assert!(free_space(dir.path().join("missing")).is_err());
    }

    #[test]
    fn a_directory_that_cannot_be_measured_is_refused_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let err = DiskMonitor::start(
            dir.path().join("missing"),
            1,
            Duration::from_millis(5),
            |_| {},
        )
        .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }

    /// Polls `seen` until it has `n` changes (bounded).
    fn wait_for(seen: &Mutex<Vec<DiskAlarm>>, n: usize) -> Vec<DiskAlarm> {
        for _ in 0..500 {
            let got = seen.lock().unwrap().clone();
            if got.len() >= n {
                return got;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        seen.lock().unwrap().clone()
    }

    #[test]
    fn the_alarm_is_called_at_start_and_at_each_crossing_only() {
        let free = Arc::new(AtomicU64::new(10));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (probe_free, sink) = (free.clone(), seen.clone());
        let monitor = DiskMonitor::with_probe(
            PathBuf::from("/data"),
            move || Ok(probe_free.load(Ordering::SeqCst)),
            100,
            Duration::from_millis(1),
            move |change| sink.lock().unwrap().push(change),
        )
        .unwrap();
        let alarm = |low, free| DiskAlarm {
            low,
            free,
            limit: 100,
        };
        assert_eq!(wait_for(&seen, 1), [alarm(true, 10)], "below at start");

        free.store(100, Ordering::SeqCst);
        assert_eq!(
            wait_for(&seen, 2)[1],
            alarm(false, 100),
            "at the limit is enough"
        );
        free.store(150, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(seen.lock().unwrap().len(), 2, "no call without a crossing");

        free.store(99, Ordering::SeqCst);
        assert_eq!(wait_for(&seen, 3)[2], alarm(true, 99));
        drop(monitor);
        free.store(1_000, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(seen.lock().unwrap().len(), 3, "stopped when dropped");
    }

    #[test]
    fn a_limit_above_the_free_space_blocks_the_brokers_until_the_monitor_stops() {
        let dir = tempfile::tempdir().unwrap();
        let broker: Broker = Broker::new();
        let monitor = DiskMonitor::for_brokers(dir.path(), u64::MAX, vec![broker.clone()]).unwrap();
        assert_eq!(monitor.dir(), dir.path());
        assert_eq!(broker.blocked_reason().as_deref(), Some("low on disk"));
        drop(monitor);

        let free: Broker = Broker::new();
        let _monitor = DiskMonitor::for_brokers(dir.path(), 1, vec![free.clone()]).unwrap();
        assert!(!free.is_blocked());
    }

    #[test]
    fn a_failed_measurement_keeps_the_alarm_as_it_was() {
        let calls = Arc::new(AtomicU64::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (probe_calls, sink) = (calls.clone(), seen.clone());
        let _monitor = DiskMonitor::with_probe(
            PathBuf::from("/data"),
            move || match probe_calls.fetch_add(1, Ordering::SeqCst) {
                0 => Ok(1_000),
                _ => Err(io::Error::other("statvfs failed")),
            },
            100,
            Duration::from_millis(1),
            move |change| sink.lock().unwrap().push(change),
        )
        .unwrap();
        while calls.load(Ordering::SeqCst) < 10 {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(seen.lock().unwrap().is_empty());
    }
}
