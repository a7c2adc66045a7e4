//! What every contender moves: 100-byte JSON payloads of [`BenchMsg`], and the [`Sink`] a
//! consumer reports each decoded message to.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

/// Bytes of every payload's JSON encoding.
pub const PAYLOAD_SIZE: usize = 100;

/// The payload struct: producers encode it, consumers decode into it. `body` pads the
/// encoding to exactly [`PAYLOAD_SIZE`] bytes. `Outgoing` lets ruststream's publish builder
/// take it (with the destination named at each publish).
#[derive(Debug, Clone, Serialize, Deserialize, ruststream::Outgoing)]
pub struct BenchMsg {
    pub id: u64,
    pub body: String,
}

/// `n` structs, ids 0 to n - 1, each encoding to exactly [`PAYLOAD_SIZE`] bytes.
pub fn bench_msgs(n: usize) -> Vec<BenchMsg> {
    (0..n as u64)
        .map(|id| {
            let mut m = BenchMsg {
                id,
                body: String::new(),
            };
            let bare = serde_json::to_vec(&m).expect("encode").len();
            m.body = "x".repeat(PAYLOAD_SIZE - bare);
            m
        })
        .collect()
}

/// The encoding of `m`, checked to be [`PAYLOAD_SIZE`] bytes, in a buffer of exactly that
/// capacity (so that what a queue holds beyond the payload can be counted).
pub fn encode(m: &BenchMsg) -> Vec<u8> {
    let bytes = serde_json::to_vec(m).expect("encode BenchMsg");
    assert_eq!(bytes.len(), PAYLOAD_SIZE, "payload size");
    bytes.into_boxed_slice().into_vec()
}

/// Decodes a payload the way every consumer without a framework does.
pub fn decode(payload: &[u8]) -> BenchMsg {
    serde_json::from_slice(payload).expect("decode BenchMsg")
}

/// What a run's consumer(s) took: a count, the sum of decoded ids (checked at the end, so a
/// decode cannot be skipped or go wrong unnoticed) and, for the latency scenario, each
/// message's send-to-handler time. Cheap to clone; every handler of every contender calls
/// [`Sink::arrived`] once per message.
#[derive(Debug, Clone)]
pub struct Sink(Arc<SinkInner>);

#[derive(Debug)]
struct SinkInner {
    expected: usize,
    received: AtomicUsize,
    id_sum: AtomicU64,
    done: Notify,
    /// Latency mode: the clock's origin, and per id the send time and the latency, in ns.
    clock: Instant,
    sent_ns: Vec<AtomicU64>,
    latency_ns: Vec<AtomicU64>,
}

impl Sink {
    /// A sink expecting `expected` messages.
    pub fn new(expected: usize) -> Sink {
        Sink::build(expected, false)
    }

    /// A sink that also records the latency of each of `expected` messages, from
    /// [`Sink::sending`] to [`Sink::arrived`].
    pub fn with_latency(expected: usize) -> Sink {
        Sink::build(expected, true)
    }

    fn build(expected: usize, latency: bool) -> Sink {
        let slots = if latency { expected } else { 0 };
        Sink(Arc::new(SinkInner {
            expected,
            received: AtomicUsize::new(0),
            id_sum: AtomicU64::new(0),
            done: Notify::new(),
            clock: Instant::now(),
            sent_ns: (0..slots).map(|_| AtomicU64::new(0)).collect(),
            latency_ns: (0..slots).map(|_| AtomicU64::new(0)).collect(),
        }))
    }

    /// Records that message `id` is being sent now (latency mode only).
    pub fn sending(&self, id: u64) {
        let now = self.0.clock.elapsed().as_nanos() as u64;
        self.0.sent_ns[id as usize].store(now, Ordering::Relaxed);
    }

    /// Records one handled message; the last expected one wakes [`Sink::all_arrived`].
    pub fn arrived(&self, m: &BenchMsg) {
        let inner = &*self.0;
        if !inner.sent_ns.is_empty() {
            let now = inner.clock.elapsed().as_nanos() as u64;
            let sent = inner.sent_ns[m.id as usize].load(Ordering::Relaxed);
            inner.latency_ns[m.id as usize].store(now.saturating_sub(sent), Ordering::Relaxed);
        }
        inner.id_sum.fetch_add(m.id, Ordering::Relaxed);
        if inner.received.fetch_add(1, Ordering::AcqRel) + 1 == inner.expected {
            inner.done.notify_one();
        }
    }

    /// Messages handled so far.
    pub fn received(&self) -> usize {
        self.0.received.load(Ordering::Acquire)
    }

    /// Resolves once every expected message was handled.
    pub async fn all_arrived(&self) {
        while self.received() < self.0.expected {
            // A permit is stored if the last message arrives before this waits.
            self.0.done.notified().await;
        }
    }

    /// Panics unless exactly the expected messages, ids 0 to n - 1, were handled.
    pub fn check(&self) {
        let n = self.0.expected as u64;
        assert_eq!(self.received() as u64, n, "messages handled");
        assert_eq!(
            self.0.id_sum.load(Ordering::Relaxed),
            n * n.saturating_sub(1) / 2,
            "sum of decoded ids"
        );
    }

    /// The recorded latencies, sorted (latency mode only).
    pub fn latencies(&self) -> Vec<Duration> {
        let mut l: Vec<Duration> = self
            .0
            .latency_ns
            .iter()
            .map(|a| Duration::from_nanos(a.load(Ordering::Relaxed)))
            .collect();
        l.sort();
        l
    }
}

/// The `q` quantile (0 to 1) of sorted `values`.
pub fn quantile(sorted: &[Duration], q: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}
