//! A counter and a gauge each on cache lines of their own. `prometheus-client`'s own are an
//! `Arc` of a bare atomic, a 32-byte allocation that shares its cache line with whatever the
//! allocator puts beside it, often a message block another thread is writing: every update
//! from the handler path then fights that thread for the line.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// Two cache lines (the spatial prefetcher pulls lines in pairs), so nothing else lives
/// beside the value.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Padded<T>(pub(crate) T);

/// A monotonic counter. Cheap to clone (shared).
#[derive(Debug, Clone, Default)]
pub(crate) struct PaddedCounter(Arc<Padded<AtomicU64>>);

impl PaddedCounter {
    /// Adds one.
    #[inline]
    pub(crate) fn inc(&self) {
        self.0.0.fetch_add(1, Ordering::Relaxed);
    }

    /// The count.
    pub(crate) fn get(&self) -> u64 {
        self.0.0.load(Ordering::Relaxed)
    }
}

impl TypedMetric for PaddedCounter {
    const TYPE: MetricType = MetricType::Counter;
}

impl EncodeMetric for PaddedCounter {
    fn encode(&self, mut encoder: MetricEncoder<'_>) -> Result<(), std::fmt::Error> {
        encoder.encode_counter::<NoLabelSet, _, u64>(&self.get(), None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// A gauge. Cheap to clone (shared).
#[derive(Debug, Clone, Default)]
pub(crate) struct PaddedGauge(Arc<Padded<AtomicI64>>);

impl PaddedGauge {
    /// Adds one.
    #[inline]
    pub(crate) fn inc(&self) {
        self.0.0.fetch_add(1, Ordering::Relaxed);
    }

    /// Takes one away.
    #[inline]
    pub(crate) fn dec(&self) {
        self.0.0.fetch_sub(1, Ordering::Relaxed);
    }

    /// The value.
    pub(crate) fn get(&self) -> i64 {
        self.0.0.load(Ordering::Relaxed)
    }
}

impl TypedMetric for PaddedGauge {
    const TYPE: MetricType = MetricType::Gauge;
}

impl EncodeMetric for PaddedGauge {
    fn encode(&self, mut encoder: MetricEncoder<'_>) -> Result<(), std::fmt::Error> {
        encoder.encode_gauge(&self.get())
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_value_has_its_cache_lines_to_itself() {
        assert_eq!(std::mem::align_of::<Padded<AtomicU64>>(), 128);
        assert_eq!(std::mem::size_of::<Padded<AtomicU64>>(), 128);
        let (c, g) = (PaddedCounter::default(), PaddedGauge::default());
        c.inc();
        c.clone().inc();
        g.inc();
        g.dec();
        g.dec();
        assert_eq!((c.get(), g.get()), (2, -1));
    }
}
