//! The Prometheus metrics: an [`Observer`] counting into a `prometheus-client` registry, per
//! binding, and the binders' connection states read at each scrape.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::histogram::DurationHistogram;
use super::padded::{PaddedCounter, PaddedGauge};

use super::super::control::Control;
use super::super::observe::{DeadLettered, Failed, Handled, Observer, Received, Retried, Sent};
use crate::binder::ConnectionState;

type Labels = Vec<(&'static str, String)>;
type Histograms = Family<Labels, DurationHistogram>;

/// Every metric family.
struct Families {
    received: Family<Labels, PaddedCounter>,
    handled: Family<Labels, PaddedCounter>,
    failed: Family<Labels, PaddedCounter>,
    retried: Family<Labels, PaddedCounter>,
    dead_lettered: Family<Labels, PaddedCounter>,
    in_flight: Family<Labels, PaddedGauge>,
    handler_duration: Histograms,
    sent: Family<Labels, PaddedCounter>,
    send_failed: Family<Labels, PaddedCounter>,
    send_latency: Histograms,
    binder_up: Family<Labels, Gauge>,
    binder_state: Family<Labels, Gauge>,
}

/// One binding's metrics, looked up once (no label set built per event), each value on
/// cache lines of its own.
struct BindingMetrics {
    received: PaddedCounter,
    handled: PaddedCounter,
    failed: PaddedCounter,
    retried: PaddedCounter,
    dead_lettered: PaddedCounter,
    in_flight: PaddedGauge,
    handled_duration: DurationHistogram,
    failed_duration: DurationHistogram,
    sent: PaddedCounter,
    send_failed: PaddedCounter,
    send_latency: DurationHistogram,
}

/// The application's metrics and their registry. Cheap to share.
pub(crate) struct Metrics {
    registry: Registry,
    families: Families,
    /// The application's bindings, fixed once it has started ([`Metrics::know`]): read
    /// without a lock on every event, by the binding's number in events (the order of
    /// `Control::bindings`), or by name for events that carry no number.
    known: OnceLock<Known>,
    /// Bindings met later (dynamic destinations), and all of them before the start.
    bindings: RwLock<HashMap<String, Arc<BindingMetrics>>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    pub(crate) fn new() -> Self {
        let families = Families {
            received: Family::default(),
            handled: Family::default(),
            failed: Family::default(),
            retried: Family::default(),
            dead_lettered: Family::default(),
            in_flight: Family::default(),
            handler_duration: Family::default(),
            sent: Family::default(),
            send_failed: Family::default(),
            send_latency: Family::default(),
            binder_up: Family::default(),
            binder_state: Family::default(),
        };
        let mut registry = Registry::default();
        let r = &mut registry;
        let f = &families;
        r.register(
            "stream_binding_received",
            "Deliveries received by an input binding",
            f.received.clone(),
        );
        r.register(
            "stream_binding_handled",
            "Handler attempts that succeeded",
            f.handled.clone(),
        );
        r.register(
            "stream_binding_failed",
            "Handler attempts that failed (retried or not)",
            f.failed.clone(),
        );
        r.register(
            "stream_binding_retried",
            "Retries of failed deliveries",
            f.retried.clone(),
        );
        r.register(
            "stream_binding_dead_lettered",
            "Deliveries that failed for good and went down the dead-letter path",
            f.dead_lettered.clone(),
        );
        r.register(
            "stream_binding_in_flight",
            "Deliveries received and not yet handled for good",
            f.in_flight.clone(),
        );
        r.register(
            "stream_binding_handler_duration_seconds",
            "Duration of handler attempts, by outcome",
            f.handler_duration.clone(),
        );
        r.register(
            "stream_binding_sent",
            "Sends that reached the binder and completed (confirmed or failed)",
            f.sent.clone(),
        );
        r.register(
            "stream_binding_send_failed",
            "Sends the binder failed (not confirmed)",
            f.send_failed.clone(),
        );
        r.register(
            "stream_binding_send_latency_seconds",
            "From a send to its confirm (or its failure)",
            f.send_latency.clone(),
        );
        r.register(
            "stream_binder_up",
            "Whether a binder's connection can carry messages (1) or not (0)",
            f.binder_up.clone(),
        );
        r.register(
            "stream_binder_connection_state",
            "A binder's connection state: 1 for the state it is in, 0 for the others",
            f.binder_state.clone(),
        );
        Metrics {
            registry,
            families,
            known: OnceLock::new(),
            bindings: RwLock::new(HashMap::new()),
        }
    }

    /// Runs `f` on a binding's metrics: the application's own from the table fixed at
    /// start (by number, else by name), without a lock or a reference count; others created
    /// on their first event.
    #[inline]
    fn with(&self, index: Option<usize>, name: &str, f: impl FnOnce(&BindingMetrics)) {
        let known = self.known.get().and_then(|known| {
            index
                .and_then(|i| known.by_index.get(i))
                .or_else(|| known.by_name.get(name))
        });
        match known {
            Some(m) => f(m),
            None => f(&self.binding(name)),
        }
    }

    /// A binding's metrics, created on its first event.
    fn binding(&self, name: &str) -> Arc<BindingMetrics> {
        if let Some(m) = self
            .bindings
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
        {
            return m.clone();
        }
        let f = &self.families;
        let labels: Labels = vec![("binding", name.to_owned())];
        let outcome = |o: &str| {
            let mut l = labels.clone();
            l.push(("outcome", o.to_owned()));
            l
        };
        // One statement each: `get_or_create` holds its family's lock until the end of
        // the statement, and creating the next series of the same family takes it again.
        fn one<M: Clone, C: prometheus_client::metrics::family::MetricConstructor<M>>(
            family: &Family<Labels, M, C>,
            labels: &Labels,
        ) -> M {
            let metric = family.get_or_create(labels);
            metric.clone()
        }
        let made = Arc::new(BindingMetrics {
            received: one(&f.received, &labels),
            handled: one(&f.handled, &labels),
            failed: one(&f.failed, &labels),
            retried: one(&f.retried, &labels),
            dead_lettered: one(&f.dead_lettered, &labels),
            in_flight: one(&f.in_flight, &labels),
            handled_duration: one(&f.handler_duration, &outcome("success")),
            failed_duration: one(&f.handler_duration, &outcome("failure")),
            sent: one(&f.sent, &labels),
            send_failed: one(&f.send_failed, &labels),
            send_latency: one(&f.send_latency, &labels),
        });
        self.bindings
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .entry(name.to_owned())
            .or_insert(made)
            .clone()
    }

    /// Every binding of the application appears from the first scrape on, at zero.
    pub(crate) fn know(&self, control: &Control) {
        let by_index: Vec<Arc<BindingMetrics>> = control
            .bindings
            .iter()
            .map(|b| self.binding(&b.name))
            .collect();
        let by_name = control
            .bindings
            .iter()
            .zip(&by_index)
            .map(|(b, m)| (b.name.clone(), m.clone()))
            .collect();
        let _ = self.known.set(Known { by_index, by_name });
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
                let up = self.families.binder_up.get_or_create(&labels);
                up.set(i64::from(state.is_up()));
                drop(up);
                for s in ConnectionState::NAMES {
                    let mut l = labels.clone();
                    l.push(("state", s.to_owned()));
                    let gauge = self.families.binder_state.get_or_create(&l);
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
struct Known {
    /// By the binding's number in events.
    by_index: Vec<Arc<BindingMetrics>>,
    /// By name, for events that carry no number.
    by_name: HashMap<String, Arc<BindingMetrics>, Fnv>,
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
pub(crate) struct MetricsObserver(pub(crate) Arc<Metrics>);

impl Observer for MetricsObserver {
    fn received(&self, event: &Received<'_>) {
        self.0.with(event.binding_index, event.binding, |m| {
            m.received.inc();
            m.in_flight.inc();
        });
    }

    fn handled(&self, event: &Handled<'_>) {
        self.0.with(event.binding_index, event.binding, |m| {
            m.handled.inc();
            m.handled_duration.observe(event.duration);
            m.in_flight.dec();
        });
    }

    fn failed(&self, event: &Failed<'_>) {
        self.0.with(event.binding_index, event.binding, |m| {
            m.failed.inc();
            m.failed_duration.observe(event.duration);
            if !event.will_retry {
                m.in_flight.dec();
            }
        });
    }

    fn retried(&self, event: &Retried<'_>) {
        self.0.with(event.binding_index, event.binding, |m| {
            m.retried.inc();
        });
    }

    fn dead_lettered(&self, event: &DeadLettered<'_>) {
        self.0.with(None, event.binding, |m| {
            m.dead_lettered.inc();
        });
    }

    fn sent(&self, event: &Sent<'_>) {
        self.0.with(event.binding_index, event.binding, |m| {
            m.sent.inc();
            if event.error.is_some() {
                m.send_failed.inc();
            }
            m.send_latency.observe(event.latency);
        });
    }
}
