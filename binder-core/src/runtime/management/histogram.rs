//! A duration histogram on atomics: the handler path records into it without a lock
//! (`prometheus-client`'s `Histogram` takes a write lock per observation).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::encoding::{MetricEncoder, NoLabelSet};

/// Upper bounds in seconds: 100 µs to about 26 s, doubling (19 buckets, then `+Inf`).
const BOUNDS: [f64; 19] = {
    let mut b = [0.0; 19];
    let mut i = 0;
    let mut v = 0.0001;
    while i < 19 {
        b[i] = v;
        v *= 2.0;
        i += 1;
    }
    b
};

/// [`BOUNDS`]' first bound, 100 µs, in nanoseconds.
const FIRST_BOUND_NANOS: u64 = 100_000;

/// Durations counted per bucket, with their sum in nanoseconds: a field of the structure that
/// holds a binding's values, so that the sum and the first buckets (where most durations
/// land) share a cache line with what is counted beside them.
#[derive(Debug, Default)]
#[repr(C)]
pub(crate) struct Buckets {
    sum_nanos: AtomicU64,
    /// Per bucket (not cumulative); the last is `+Inf`.
    counts: [AtomicU64; 20],
}

impl Buckets {
    /// Counts one duration. The bucket's count is released: whoever reads it with
    /// [`Buckets::count`] also sees what was counted before it on the same delivery (its
    /// `received`), so a gauge derived from both never goes below zero.
    #[inline]
    pub(crate) fn observe(&self, d: Duration) {
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        // Bucket `i` holds up to 100 µs · 2^i: the first bound at or above the duration,
        // found from the bits of its multiple of 100 µs rather than by comparing floats.
        let bucket = if nanos <= FIRST_BOUND_NANOS {
            0
        } else {
            let multiple = (nanos - 1) / FIRST_BOUND_NANOS;
            ((u64::BITS - multiple.leading_zeros()) as usize).min(BOUNDS.len())
        };
        self.counts[bucket].fetch_add(1, Ordering::Release);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// How many durations were counted.
    pub(crate) fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Acquire)).sum()
    }

    /// Encodes the histogram (in seconds).
    pub(crate) fn encode(&self, mut encoder: MetricEncoder<'_>) -> Result<(), std::fmt::Error> {
        let buckets: Vec<(f64, u64)> = BOUNDS
            .iter()
            .copied()
            .chain(std::iter::once(f64::MAX))
            .zip(self.counts.iter().map(|c| c.load(Ordering::Acquire)))
            .collect();
        let count = buckets.iter().map(|(_, c)| c).sum();
        let sum = self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }
}

/// Where the values lie, for the tests of the layouts that hold a histogram.
#[cfg(test)]
impl Buckets {
    pub(crate) fn sum(&self) -> &AtomicU64 {
        &self.sum_nanos
    }

    pub(crate) fn first_bucket(&self) -> &AtomicU64 {
        &self.counts[0]
    }

    pub(crate) fn last_bucket(&self) -> &AtomicU64 {
        &self.counts[BOUNDS.len()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_lands_in_the_first_bucket_whose_bound_holds_it() {
        let h = Buckets::default();
        h.observe(Duration::from_micros(50));
        h.observe(Duration::from_micros(100));
        h.observe(Duration::from_micros(150));
        h.observe(Duration::from_secs(3600));
        let counts: Vec<u64> = h.counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        assert_eq!(counts[0], 2, "50 µs and 100 µs are within 100 µs");
        assert_eq!(counts[1], 1, "150 µs is within 200 µs");
        assert_eq!(counts[19], 1, "an hour is beyond the last bound");
        assert_eq!(
            h.sum_nanos.load(Ordering::Relaxed),
            300_000 + 3_600_000_000_000
        );
        h.observe(Duration::from_micros(200));
        h.observe(Duration::from_nanos(200_001));
        h.observe(Duration::from_micros(100 << 18));
        h.observe(Duration::from_nanos((100_000 << 18) + 1));
        let counts: Vec<u64> = h.counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        assert_eq!(counts[1], 2, "200 µs is within 200 µs");
        assert_eq!(counts[2], 1, "just above 200 µs is within 400 µs");
        assert_eq!(counts[18], 1, "the last bound holds itself");
        assert_eq!(counts[19], 2, "just above the last bound is beyond it");
        assert_eq!(h.count(), 8);
    }
}
