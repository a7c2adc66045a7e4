//! A channel's last routing result, reused while nothing that routes has changed.
//!
//! A channel usually publishes to one exchange with one routing key, message after message.
//! Routing each of them again looks the exchange up, walks its bindings (a topic exchange's
//! patterns) and collects the queues: the same answer every time, until an exchange, a queue
//! or a binding comes or goes. The registry counts those changes
//! ([`Registry::routing_version`](super::registry::Registry::routing_version)); a channel keeps
//! the queues its last route reached with the version they were found at, and a publish of the
//! same route at the same version takes them as they are.

use std::sync::Arc;

use smallvec::SmallVec;

/// The queues one route reached, at one routing version. Kept only for a route whose result
/// depends on the exchange and routing key alone (no headers exchange on the way:
/// [`Registry::routes_by_key`](super::registry::Registry::routes_by_key)).
#[derive(Debug)]
pub(crate) struct RouteCache {
    version: u64,
    exchange: Arc<str>,
    routing_key: Arc<str>,
    queues: SmallVec<[Arc<str>; 1]>,
}

impl RouteCache {
    /// The queues a message routed through `exchange` by `routing_key` reached at `version`.
    pub(crate) fn new(
        version: u64,
        exchange: &Arc<str>,
        routing_key: &Arc<str>,
        queues: &[Arc<str>],
    ) -> Self {
        RouteCache {
            version,
            exchange: exchange.clone(),
            routing_key: routing_key.clone(),
            queues: queues.iter().cloned().collect(),
        }
    }

    /// The queues, when this is the answer for a message whose route shares these names (the
    /// same allocations: a channel's consecutive publishes share their route) at `version`.
    /// The cache holds the names, so an equal address is the same name.
    pub(crate) fn queues(
        &self,
        version: u64,
        exchange: &Arc<str>,
        routing_key: &Arc<str>,
    ) -> Option<&[Arc<str>]> {
        let hit = self.version == version
            && Arc::ptr_eq(&self.exchange, exchange)
            && Arc::ptr_eq(&self.routing_key, routing_key);
        hit.then_some(&self.queues[..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_only_for_the_same_names_at_the_same_version() {
        let x: Arc<str> = Arc::from("orders");
        let key: Arc<str> = Arc::from("orders");
        let q: Arc<str> = Arc::from("orders.g");
        let cache = RouteCache::new(3, &x, &key, std::slice::from_ref(&q));
        assert_eq!(cache.queues(3, &x, &key), Some(&[q.clone()][..]));
        assert_eq!(cache.queues(4, &x, &key), None, "the registry changed");
        let same_text: Arc<str> = Arc::from("orders");
        assert_eq!(
            cache.queues(3, &x, &same_text),
            None,
            "another route's allocation: routed afresh"
        );
        assert_eq!(cache.queues(3, &key, &x), None);
    }
}
