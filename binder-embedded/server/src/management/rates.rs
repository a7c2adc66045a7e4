//! Message rates: the engine keeps cumulative counters (per queue: enqueued and delivered;
//! per broker: published; per channel: the counters of [`CHANNEL_KEYS`]); a sampler
//! reads them every interval and keeps the rate over the last one, as RabbitMQ's management
//! plugin does with its `collect_statistics_interval`. Nothing of this runs on the publish
//! path beyond the engine's counting.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// A counter and its rate per second over the last sample interval.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Rated {
    pub count: u64,
    pub rate: f64,
}

impl Rated {
    fn next(self, count: u64, elapsed: Duration) -> Rated {
        let secs = elapsed.as_secs_f64();
        let rate = if secs > 0.0 {
            count.saturating_sub(self.count) as f64 / secs
        } else {
            0.0
        };
        Rated { count, rate }
    }
}

/// A queue's (or a broker's) publish and deliver counters, rated.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Stats {
    pub publish: Rated,
    pub deliver_get: Rated,
}

impl Stats {
    /// The sample of cumulative counts `published` and `delivered` taken `elapsed` after
    /// `last`; the first sample (no `last`) has no rate yet.
    fn after(last: Option<Stats>, published: u64, delivered: u64, elapsed: Duration) -> Stats {
        let (last, elapsed) = match last {
            Some(last) => (last, elapsed),
            None => (Stats::default(), Duration::ZERO),
        };
        Stats {
            publish: last.publish.next(published, elapsed),
            deliver_get: last.deliver_get.next(delivered, elapsed),
        }
    }
}

impl std::ops::AddAssign for Stats {
    fn add_assign(&mut self, other: Stats) {
        self.publish.count += other.publish.count;
        self.publish.rate += other.publish.rate;
        self.deliver_get.count += other.deliver_get.count;
        self.deliver_get.rate += other.deliver_get.rate;
    }
}

/// The counters of a channel's `message_stats`, by RabbitMQ's names, in the order of
/// [`ChannelCounts`] and [`ChannelStats`].
pub(crate) const CHANNEL_KEYS: [&str; 12] = [
    "publish",
    "confirm",
    "return_unroutable",
    "drop_unroutable",
    "deliver_get",
    "deliver",
    "deliver_no_ack",
    "get",
    "get_no_ack",
    "get_empty",
    "redeliver",
    "ack",
];

/// One channel's cumulative counts in a sample, in [`CHANNEL_KEYS`]' order.
pub(crate) type ChannelCounts = [u64; CHANNEL_KEYS.len()];

/// A channel's counters, rated, in [`CHANNEL_KEYS`]' order.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct ChannelStats(pub [Rated; CHANNEL_KEYS.len()]);

/// The last sample of every queue and broker.
#[derive(Debug, Default)]
pub(crate) struct Rates {
    inner: Mutex<Samples>,
}

#[derive(Debug, Default)]
struct Samples {
    at: Option<Instant>,
    /// By (vhost, queue).
    queues: HashMap<(String, String), Stats>,
    /// By vhost.
    vhosts: HashMap<String, Stats>,
    /// By (vhost, engine channel id).
    channels: HashMap<(String, u64), ChannelStats>,
}

impl Rates {
    fn lock(&self) -> std::sync::MutexGuard<'_, Samples> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records one sample: each queue's cumulative `(published, delivered)` and each
    /// vhost's published total, taken at `now`. Queues not in the sample are forgotten.
    /// Returns the interval since the last sample (zero for the first).
    pub(crate) fn record(
        &self,
        now: Instant,
        queues: impl IntoIterator<Item = ((String, String), (u64, u64))>,
        vhosts: impl IntoIterator<Item = (String, u64)>,
    ) -> Duration {
        let mut s = self.lock();
        let elapsed = s.at.map_or(Duration::ZERO, |at| now - at);
        let mut next = HashMap::new();
        let mut delivered: HashMap<String, u64> = HashMap::new();
        for (key, (published, deliveries)) in queues {
            let stats = Stats::after(s.queues.get(&key).copied(), published, deliveries, elapsed);
            *delivered.entry(key.0.clone()).or_default() += deliveries;
            next.insert(key, stats);
        }
        let mut vhost_next = HashMap::new();
        for (vhost, published) in vhosts {
            let deliveries = delivered.get(&vhost).copied().unwrap_or(0);
            // Deleted queues take their deliveries with them: `next` never rates negative.
            let stats = Stats::after(
                s.vhosts.get(&vhost).copied(),
                published,
                deliveries,
                elapsed,
            );
            vhost_next.insert(vhost, stats);
        }
        s.queues = next;
        s.vhosts = vhost_next;
        s.at = Some(now);
        elapsed
    }

    /// Records each open channel's cumulative counts, taken with the queues' sample (call
    /// after [`Rates::record`], which sets the interval). Channels not in it are forgotten.
    pub(crate) fn record_channels(
        &self,
        channels: impl IntoIterator<Item = ((String, u64), ChannelCounts)>,
        elapsed: Duration,
    ) {
        let mut s = self.lock();
        let mut next = HashMap::new();
        for (key, counts) in channels {
            // A channel's first sample has no rate yet.
            let (last, elapsed) = match s.channels.get(&key) {
                Some(last) => (*last, elapsed),
                None => (ChannelStats::default(), Duration::ZERO),
            };
            let stats = ChannelStats(std::array::from_fn(|i| last.0[i].next(counts[i], elapsed)));
            next.insert(key, stats);
        }
        s.channels = next;
    }

    /// A channel's last sample (zero before its first).
    pub(crate) fn channel(&self, vhost: &str, id: u64) -> ChannelStats {
        self.lock()
            .channels
            .get(&(vhost.to_owned(), id))
            .copied()
            .unwrap_or_default()
    }

    /// A queue's last sample (zero before its first).
    pub(crate) fn queue(&self, vhost: &str, queue: &str) -> Stats {
        self.lock()
            .queues
            .get(&(vhost.to_owned(), queue.to_owned()))
            .copied()
            .unwrap_or_default()
    }

    /// A vhost's last sample.
    pub(crate) fn vhost(&self, vhost: &str) -> Stats {
        self.lock().vhosts.get(vhost).copied().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_over_the_last_interval() {
        let rates = Rates::default();
        let t0 = Instant::now();
        let key = || ("/".to_owned(), "q".to_owned());
        rates.record(t0, [(key(), (10, 0))], [("/".to_owned(), 10)]);
        assert_eq!(rates.queue("/", "q").publish.rate, 0.0, "no interval yet");
        rates.record(
            t0 + Duration::from_secs(2),
            [(key(), (30, 4))],
            [("/".to_owned(), 40)],
        );
        let q = rates.queue("/", "q");
        assert_eq!((q.publish.count, q.publish.rate), (30, 10.0));
        assert_eq!((q.deliver_get.count, q.deliver_get.rate), (4, 2.0));
        assert_eq!(rates.vhost("/").publish.rate, 15.0);
        rates.record(t0 + Duration::from_secs(3), [], [("/".to_owned(), 40)]);
        assert_eq!(rates.queue("/", "q"), Stats::default(), "deleted queues go");
        assert_eq!(rates.vhost("/").deliver_get.rate, 0.0, "never negative");
    }

    #[test]
    fn channel_rates_are_over_the_last_interval() {
        let rates = Rates::default();
        let key = || ("/".to_owned(), 7);
        let counts = |publish, redeliver| {
            let mut c = [0; CHANNEL_KEYS.len()];
            c[0] = publish;
            c[10] = redeliver;
            c
        };
        rates.record_channels([(key(), counts(10, 4))], Duration::ZERO);
        assert_eq!(
            rates.channel("/", 7).0[0],
            Rated {
                count: 10,
                rate: 0.0
            }
        );
        rates.record_channels([(key(), counts(30, 10))], Duration::from_secs(2));
        let c = rates.channel("/", 7);
        assert_eq!((c.0[0].rate, c.0[10].rate, c.0[11].rate), (10.0, 3.0, 0.0));
        assert_eq!(CHANNEL_KEYS[10], "redeliver");
        assert_eq!(c.0[10].count, 10);
        rates.record_channels([], Duration::from_secs(1));
        assert_eq!(
            rates.channel("/", 7),
            ChannelStats::default(),
            "closed channels go"
        );
    }
}
