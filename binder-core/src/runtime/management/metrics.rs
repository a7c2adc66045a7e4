//! The Prometheus metrics: an [`Observer`] counting into per-binding atomics, read at each
//! scrape by a collector of a `prometheus-client` registry, and the binders' connection states
//! read at each scrape.
//!
//! A delivery updates two values, a send one: what can be derived is, at the scrape. The
//! handled, failed and sent counters are the counts of their duration histograms, and the
//! in-flight gauge is what was received less what was handled or failed for good.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::histogram::Buckets;
use super::padded::Padded;

use super::super::control::Control;
use super::super::observe::{DeadLettered, Failed, Handled, Observer, Received, Retried, Sent};
use crate::binder::ConnectionState;

type Labels = Vec<(&'static str, String)>;

/// One binding's values. An input's are written on its consumer side and an output's by
/// its senders, each side on cache lines of its own; on each, what every message updates
/// comes first, so that a delivery (its `received`, the sum and first buckets of its
/// handler durations) and a send (the same of its latencies) each touch one line.
#[derive(Debug, Default)]
#[repr(C)]
struct Cells {
    input: Padded<InputCells>,
    output: Padded<OutputCells>,
}

/// An input binding's values.
#[derive(Debug, Default)]
#[repr(C)]
struct InputCells {
    received: AtomicU64,
    /// Durations of the attempts that succeeded: their count is `handled`.
    handled: Buckets,
    /// Deliveries whose last attempt failed (not retried): the in-flight gauge is
    /// `received` less these and `handled`. Released, as `handled`'s counts are.
    failed_for_good: AtomicU64,
    retried: AtomicU64,
    dead_lettered: AtomicU64,
    /// Durations of the attempts that failed: their count is `failed`.
    failed: Buckets,
}

impl InputCells {
    /// Deliveries received and not yet handled for good.
    fn in_flight(&self) -> i64 {
        // What left first, acquired, so that the receipts counted before it show.
        let left = self.handled.count() + self.failed_for_good.load(Ordering::Acquire);
        let received = self.received.load(Ordering::Relaxed);
        // Two's complement: the difference as the gauge's decrements would have left it.
        received.wrapping_sub(left) as i64
    }
}

/// An output binding's values.
#[derive(Debug, Default)]
#[repr(C)]
struct OutputCells {
    /// From each completed send to its confirm (or failure): their count is `sent`.
    latency: Buckets,
    send_failed: AtomicU64,
}

/// Every binding's values: the application's own in a table fixed at its start, read
/// without a lock on every event; all of them (dynamic destinations too, and every one
/// met before the start) by name, for the scrape.
#[derive(Debug, Default)]
struct Table {
    /// Fixed once the application has started ([`Metrics::know`]): by the binding's number
    /// in events (the order of `Control::bindings`), or by name for events that carry none.
    known: OnceLock<Known>,
    /// Every binding met, by name.
    by_name: RwLock<HashMap<String, Arc<Cells>>>,
}

impl Table {
    /// Runs `f` on a binding's values: the application's own from the table fixed at
    /// start (by number, else by name), without a lock or a reference count; others created
    /// on their first event.
    #[inline]
    fn with(&self, index: Option<usize>, name: &str, f: impl FnOnce(&Cells)) {
        let known = self.known.get().and_then(|known| {
            index
                .and_then(|i| known.by_index.get(i))
                .or_else(|| known.by_name.get(name))
        });
        match known {
            Some(cells) => f(cells),
            None => f(&self.binding(name)),
        }
    }

    /// A binding's values, created on its first event.
    fn binding(&self, name: &str) -> Arc<Cells> {
        if let Some(cells) = self
            .by_name
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
        {
            return cells.clone();
        }
        self.by_name
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .entry(name.to_owned())
            .or_default()
            .clone()
    }
}

/// The binding metrics' families, encoded from the [`Table`] at each scrape, each binding's
/// series in the order of their names.
#[derive(Debug)]
struct BindingFamilies(Arc<Table>);

/// A counter family: its name, its help, and its value from a binding's values.
type CounterOf = (&'static str, &'static str, fn(&Cells) -> u64);

/// The counter families, in the order they are exposed.
const COUNTERS: [CounterOf; 5] = [
    (
        "stream_binding_received",
        "Deliveries received by an input binding.",
        |c| c.input.received.load(Ordering::Relaxed),
    ),
    (
        "stream_binding_handled",
        "Handler attempts that succeeded.",
        |c| c.input.handled.count(),
    ),
    (
        "stream_binding_failed",
        "Handler attempts that failed (retried or not).",
        |c| c.input.failed.count(),
    ),
    (
        "stream_binding_retried",
        "Retries of failed deliveries.",
        |c| c.input.retried.load(Ordering::Relaxed),
    ),
    (
        "stream_binding_dead_lettered",
        "Deliveries that failed for good and went down the dead-letter path.",
        |c| c.input.dead_lettered.load(Ordering::Relaxed),
    ),
];

/// The output counter families, exposed after the handler durations.
const OUTPUT_COUNTERS: [CounterOf; 2] = [
    (
        "stream_binding_sent",
        "Sends that reached the binder and completed (confirmed or failed).",
        |c| c.output.latency.count(),
    ),
    (
        "stream_binding_send_failed",
        "Sends the binder failed (not confirmed).",
        |c| c.output.send_failed.load(Ordering::Relaxed),
    ),
];

impl BindingFamilies {
    fn counters(
        encoder: &mut DescriptorEncoder<'_>,
        bindings: &[(&str, &Cells)],
        families: &[CounterOf],
    ) -> Result<(), std::fmt::Error> {
        for (name, help, value) in families {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for (binding, cells) in bindings {
                family
                    .encode_family(&[("binding", *binding)])?
                    .encode_counter::<NoLabelSet, _, u64>(&value(cells), None)?;
            }
        }
        Ok(())
    }
}

impl Collector for BindingFamilies {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let by_name = self.0.by_name.read().unwrap_or_else(|p| p.into_inner());
        let mut bindings: Vec<(&str, &Cells)> =
            by_name.iter().map(|(n, c)| (n.as_str(), &**c)).collect();
        if bindings.is_empty() {
            // As a registry does with a family that has no series.
            return Ok(());
        }
        bindings.sort_unstable_by_key(|(name, _)| *name);
        let bindings = &bindings[..];

        Self::counters(&mut encoder, bindings, &COUNTERS)?;
        let mut family = encoder.encode_descriptor(
            "stream_binding_in_flight",
            "Deliveries received and not yet handled for good.",
            None,
            MetricType::Gauge,
        )?;
        for (binding, cells) in bindings {
            family
                .encode_family(&[("binding", *binding)])?
                .encode_gauge(&cells.input.in_flight())?;
        }
        let mut family = encoder.encode_descriptor(
            "stream_binding_handler_duration_seconds",
            "Duration of handler attempts, by outcome.",
            None,
            MetricType::Histogram,
        )?;
        for (binding, cells) in bindings {
            for (outcome, buckets) in [
                ("success", &cells.input.handled),
                ("failure", &cells.input.failed),
            ] {
                let labels = [("binding", *binding), ("outcome", outcome)];
                buckets.encode(family.encode_family(&labels)?)?;
            }
        }
        Self::counters(&mut encoder, bindings, &OUTPUT_COUNTERS)?;
        let mut family: MetricEncoder<'_> = encoder.encode_descriptor(
            "stream_binding_send_latency_seconds",
            "From a send to its confirm (or its failure).",
            None,
            MetricType::Histogram,
        )?;
        for (binding, cells) in bindings {
            cells
                .output
                .latency
                .encode(family.encode_family(&[("binding", *binding)])?)?;
        }
        Ok(())
    }
}

/// The binders' families, set at each scrape.
struct BinderFamilies {
    up: Family<Labels, Gauge>,
    state: Family<Labels, Gauge>,
}

/// The application's metrics and their registry. Cheap to share.
pub(crate) struct Metrics {
    registry: Registry,
    binders: BinderFamilies,
    table: Arc<Table>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    pub(crate) fn new() -> Self {
        let table = Arc::new(Table::default());
        let binders = BinderFamilies {
            up: Family::default(),
            state: Family::default(),
        };
        let mut registry = Registry::default();
        registry.register_collector(Box::new(BindingFamilies(table.clone())));
        // In a registry of their own, which is encoded after the collector: the binders'
        // families come after the bindings'.
        let stream = registry.sub_registry_with_prefix("stream");
        stream.register(
            "binder_up",
            "Whether a binder's connection can carry messages (1) or not (0)",
            binders.up.clone(),
        );
        stream.register(
            "binder_connection_state",
            "A binder's connection state: 1 for the state it is in, 0 for the others",
            binders.state.clone(),
        );
        Metrics {
            registry,
            binders,
            table,
        }
    }

    /// Every binding of the application appears from the first scrape on, at zero.
    pub(crate) fn know(&self, control: &Control) {
        let by_index: Vec<Arc<Cells>> = control
            .bindings
            .iter()
            .map(|b| self.table.binding(&b.name))
            .collect();
        let by_name = control
            .bindings
            .iter()
            .zip(&by_index)
            .map(|(b, m)| (b.name.clone(), m.clone()))
            .collect();
        let _ = self.table.known.set(Known { by_index, by_name });
    }

    /// The text exposition (OpenMetrics), with the binders' connection states read now.
    pub(crate) fn scrape(&self, control: Option<&Control>) -> String {
        if let Some(control) = control {
            for (name, binder) in &control.binders {
                let state = binder.connection_state();
                let labels: Labels = vec![
                    ("binder", name.clone()),
                    ("type", binder.binder_type().to_owned()),
                ];
                let up = self.binders.up.get_or_create(&labels);
                up.set(i64::from(state.is_up()));
                drop(up);
                for s in ConnectionState::NAMES {
                    let mut l = labels.clone();
                    l.push(("state", s.to_owned()));
                    let gauge = self.binders.state.get_or_create(&l);
                    gauge.set(i64::from(s == state.as_str()));
                }
            }
        }
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

/// The application's bindings' metrics, fixed at start.
#[derive(Debug)]
struct Known {
    /// By the binding's number in events.
    by_index: Vec<Arc<Cells>>,
    /// By name, for events that carry no number.
    by_name: HashMap<String, Arc<Cells>, Fnv>,
}

/// FNV-1a: binding names are short and chosen by the application, so the lookup on every
/// event needs no protection against crafted keys, only speed (SipHash costs more than the
/// counting it guards).
#[derive(Debug, Clone, Copy, Default)]
struct Fnv;

/// [`Fnv`]'s state.
#[derive(Debug)]
struct FnvHasher(u64);

impl std::hash::BuildHasher for Fnv {
    type Hasher = FnvHasher;
    fn build_hasher(&self) -> FnvHasher {
        FnvHasher(0xcbf2_9ce4_8422_2325)
    }
}

impl std::hash::Hasher for FnvHasher {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// The observer that feeds [`Metrics`].
#[derive(Debug, Clone)]
pub(crate) struct MetricsObserver(Arc<Table>);

impl MetricsObserver {
    /// The observer of these metrics.
    pub(crate) fn new(metrics: &Metrics) -> Self {
        MetricsObserver(metrics.table.clone())
    }
}

impl Observer for MetricsObserver {
    fn received(&self, event: &Received<'_>) {
        self.0.with(event.binding_index, event.binding, |c| {
            c.input.received.fetch_add(1, Ordering::Relaxed);
        });
    }

    fn handled(&self, event: &Handled<'_>) {
        self.0.with(event.binding_index, event.binding, |c| {
            c.input.handled.observe(event.duration);
        });
    }

    fn failed(&self, event: &Failed<'_>) {
        self.0.with(event.binding_index, event.binding, |c| {
            c.input.failed.observe(event.duration);
            if !event.will_retry {
                c.input.failed_for_good.fetch_add(1, Ordering::Release);
            }
        });
    }

    fn retried(&self, event: &Retried<'_>) {
        self.0.with(event.binding_index, event.binding, |c| {
            c.input.retried.fetch_add(1, Ordering::Relaxed);
        });
    }

    fn dead_lettered(&self, event: &DeadLettered<'_>) {
        self.0.with(None, event.binding, |c| {
            c.input.dead_lettered.fetch_add(1, Ordering::Relaxed);
        });
    }

    fn sent(&self, event: &Sent<'_>) {
        self.0.with(event.binding_index, event.binding, |c| {
            c.output.latency.observe(event.latency);
            if event.error.is_some() {
                c.output.send_failed.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::super::error::HandlerError;
    use super::super::super::observe::DeadLetterRoute;
    use super::*;
    use crate::binder::{BinderError, BinderErrorKind};

    /// Every event an input and an output report, on a binding with a number and on a
    /// dynamic one: the exposition is the one the metrics had when each value was counted
    /// apart (`scrape.txt`, the bindings' series now in the order of their names).
    #[test]
    fn the_exposition_counts_every_event() {
        let metrics = Metrics::new();
        let o = MetricsObserver::new(&metrics);
        let fatal = HandlerError::fatal("no");
        let nack = BinderError::new(BinderErrorKind::NotConfirmed, "nack");
        for (binding, binding_index) in [("in", Some(0)), ("dyn", None)] {
            for _ in 0..3 {
                o.received(&Received {
                    binding,
                    binding_index,
                    queue: "q",
                    redelivered: false,
                });
            }
            let handled = |attempt, duration| Handled {
                binding,
                binding_index,
                attempt,
                duration,
            };
            let failed = |attempt, duration, will_retry| Failed {
                binding,
                binding_index,
                attempt,
                duration,
                error: &fatal,
                will_retry,
            };
            o.handled(&handled(1, Duration::from_micros(50)));
            o.failed(&failed(1, Duration::from_micros(150), true));
            o.retried(&Retried {
                binding,
                binding_index,
                attempt: 2,
                delay: Duration::from_millis(1),
            });
            o.handled(&handled(2, Duration::from_millis(3)));
            o.failed(&failed(1, Duration::from_secs(100), false));
            o.dead_lettered(&DeadLettered {
                binding,
                queue: "q",
                attempts: 1,
                reason: &fatal,
                route: DeadLetterRoute::Rejected,
            });
        }
        o.received(&Received {
            binding: "in",
            binding_index: Some(0),
            queue: "q",
            redelivered: false,
        });
        for (latency, error) in [(20, None), (700, Some(&nack))] {
            o.sent(&Sent {
                binding: "out",
                binding_index: Some(1),
                partition: None,
                latency: Duration::from_micros(latency),
                error,
            });
        }
        let text = metrics.scrape(None);
        assert_eq!(text, include_str!("scrape.txt"), "{text}");
    }

    #[test]
    fn in_flight_is_what_was_received_less_what_left_for_good() {
        let cells = InputCells::default();
        cells.received.fetch_add(3, Ordering::Relaxed);
        cells.handled.observe(Duration::from_micros(1));
        cells.failed.observe(Duration::from_micros(1));
        assert_eq!(cells.in_flight(), 2, "a failure that will be retried stays");
        cells.failed_for_good.fetch_add(1, Ordering::Relaxed);
        assert_eq!(cells.in_flight(), 1);
        cells.handled.observe(Duration::from_micros(1));
        cells.handled.observe(Duration::from_micros(1));
        assert_eq!(cells.in_flight(), -1, "as the gauge's decrements would say");
    }

    #[test]
    fn a_delivery_and_a_send_each_touch_one_cache_line() {
        let cells = Cells::default();
        let base = std::ptr::from_ref(&cells) as usize;
        let line = |p: *const AtomicU64| (p as usize - base) / 64;
        let first_bucket = |b: &Buckets| line(b.first_bucket());
        let input = &cells.input;
        assert_eq!(line(&input.received), line(input.handled.sum()));
        assert_eq!(line(&input.received), first_bucket(&input.handled));
        let output = &cells.output;
        assert_eq!(line(output.latency.sum()), first_bucket(&output.latency));
        assert!(
            line(output.latency.sum()) > line(input.failed.last_bucket()),
            "the sides share no line"
        );
    }
}
