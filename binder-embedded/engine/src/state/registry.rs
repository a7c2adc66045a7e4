//! The registry: exchanges, queues and the bindings between them (held by their source
//! exchanges), and routing through them.

use std::borrow::Cow;
use std::sync::Arc;

use rustc_hash::FxHashMap as HashMap;

use crate::envelope::Envelope;
use crate::exchange::{Exchange, Target};
use crate::field::FieldTable;
use crate::queue::Queue;
use crate::types::ExchangeKind;

/// The exchanges RabbitMQ declares in every virtual host.
const PREDECLARED: &[(&str, ExchangeKind)] = &[
    ("amq.direct", ExchangeKind::Direct),
    ("amq.fanout", ExchangeKind::Fanout),
    ("amq.topic", ExchangeKind::Topic),
    ("amq.headers", ExchangeKind::Headers),
    ("amq.match", ExchangeKind::Headers),
];

/// The headers of a message routed where no headers exchange looks at them: shared, so
/// routing neither builds nor drops a table per message.
static NO_HEADERS: FieldTable = FieldTable::new();

/// Every exchange and queue, by name.
#[derive(Debug)]
pub(crate) struct Registry<E: Envelope> {
    pub exchanges: HashMap<Arc<str>, Exchange>,
    pub queues: HashMap<Arc<str>, Queue<E>>,
    /// For each binding target, the exchanges bound to it and with how many bindings each:
    /// deleting a queue or an exchange visits the exchanges that route to it, not all of them.
    pub sources: HashMap<Target, HashMap<Arc<str>, u32>>,
    /// The default exchange's name (`""`), shared by every message published to it.
    default_exchange: Arc<str>,
    /// Counts the changes that can change where a message goes (an exchange, a queue or a
    /// binding declared or deleted): a routing result found at one version holds until the
    /// next ([`super::route_cache`]).
    routing_version: u64,
}

impl<E: Envelope> Registry<E> {
    /// The predeclared exchanges and no queues.
    pub(crate) fn new() -> Self {
        let mut exchanges = HashMap::default();
        for (name, kind) in PREDECLARED {
            let name: Arc<str> = Arc::from(*name);
            exchanges.insert(
                name.clone(),
                Exchange::new(name, *kind, true, false, false, FieldTable::new()),
            );
        }
        Registry {
            exchanges,
            queues: HashMap::default(),
            sources: HashMap::default(),
            default_exchange: Arc::from(""),
            routing_version: 0,
        }
    }

    /// The current routing version (see [`Registry::routing_changed`]).
    pub(crate) fn routing_version(&self) -> u64 {
        self.routing_version
    }

    /// Notes a change that can change where messages go: every routing result kept so far
    /// is stale. Called by every declaration and deletion of an exchange or a queue and every
    /// binding added or removed.
    pub(crate) fn routing_changed(&mut self) {
        self.routing_version += 1;
    }

    /// Whether routing through `exchange` depends on the routing key alone, so that its
    /// result can be kept for the next message with the same key: the default exchange, or
    /// an exchange that is not a headers exchange and routes to queues only (no alternate
    /// exchange, no exchange-to-exchange binding).
    pub(crate) fn routes_by_key(&self, exchange: &str) -> bool {
        exchange.is_empty()
            || self.exchanges.get(exchange).is_some_and(|x| {
                x.kind != ExchangeKind::Headers
                    && x.alternate.is_none()
                    && !x.has_exchange_targets()
            })
    }

    /// Whether `source` has any binding to `target`.
    pub(crate) fn binds(&self, source: &str, target: &Target) -> bool {
        self.sources
            .get(target)
            .is_some_and(|from| from.contains_key(source))
    }

    /// Records `count` more bindings from `source` to `target`.
    pub(crate) fn add_sources(&mut self, target: &Target, source: &Arc<str>, count: u32) {
        *self
            .sources
            .entry(target.clone())
            .or_default()
            .entry(source.clone())
            .or_default() += count;
    }

    /// Records `count` fewer bindings from `source` to `target`.
    pub(crate) fn remove_sources(&mut self, target: &Target, source: &str, count: u32) {
        let Some(from) = self.sources.get_mut(target) else {
            return;
        };
        if let Some(n) = from.get_mut(source) {
            *n = n.saturating_sub(count);
            if *n == 0 {
                from.remove(source);
            }
        }
        if from.is_empty() {
            self.sources.remove(target);
        }
    }

    /// The index of binding sources as it should be: counted from every exchange's bindings.
    #[cfg(test)]
    pub(crate) fn sources_from_bindings(&self) -> HashMap<Target, HashMap<Arc<str>, u32>> {
        let mut want: HashMap<Target, HashMap<Arc<str>, u32>> = HashMap::default();
        for (name, x) in &self.exchanges {
            for b in &x.bindings {
                *want
                    .entry(b.target.clone())
                    .or_default()
                    .entry(name.clone())
                    .or_default() += 1;
            }
        }
        want
    }

    /// The exchanges whose routing index is not what their bindings say: none, ever.
    #[cfg(test)]
    pub(crate) fn inexact_indexes(&self) -> Vec<Arc<str>> {
        self.exchanges
            .iter()
            .filter(|(_, x)| !x.index_is_exact())
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// How many bindings repeat an earlier one of their exchange (same target, key and
    /// arguments): none, ever.
    #[cfg(test)]
    pub(crate) fn repeated_bindings(&self) -> usize {
        self.exchanges
            .values()
            .map(|x| {
                let b = &x.bindings;
                (0..b.len())
                    .filter(|&i| {
                        b[..i]
                            .iter()
                            .any(|e| e.same(&b[i].target, &b[i].key, &b[i].args))
                    })
                    .count()
            })
            .sum()
    }

    /// Takes the exchanges bound to `target` out of the index (it is going away).
    pub(crate) fn take_sources(&mut self, target: &Target) -> Vec<Arc<str>> {
        self.sources
            .remove(target)
            .map(|from| from.into_keys().collect())
            .unwrap_or_default()
    }

    /// Ready messages and consumers of a queue.
    pub(crate) fn queue_counts(&self, queue: &str) -> Option<(u32, u32)> {
        self.queues
            .get(queue)
            .map(|q| (q.storage.len() as u32, q.consumers.len() as u32))
    }

    pub(crate) fn exchange_exists(&self, name: &str) -> bool {
        self.exchanges.contains_key(name)
    }

    /// Durable queues (not exclusive) an exchange can route to, directly, through
    /// exchange-to-exchange bindings or through its alternate exchange; sorted, each once.
    pub(crate) fn durable_queues_reached(&self, exchange: &str) -> Vec<String> {
        let mut seen: Vec<&str> = Vec::new();
        let mut todo: Vec<&str> = vec![exchange];
        let mut found = Vec::new();
        while let Some(name) = todo.pop() {
            let Some(x) = self.exchanges.get(name) else {
                continue;
            };
            if seen.contains(&name) {
                continue;
            }
            seen.push(name);
            for b in &x.bindings {
                match &b.target {
                    Target::Queue(q) => {
                        // An exclusive queue goes with its connection, durable or not.
                        if self
                            .queues
                            .get(q)
                            .is_some_and(|q| q.durable && q.owner.is_none())
                        {
                            found.push(q.to_string());
                        }
                    }
                    Target::Exchange(e) => todo.push(e),
                }
            }
            if let Some(alt) = &x.alternate {
                todo.push(alt);
            }
        }
        found.sort();
        found.dedup();
        found
    }

    /// The shared name of `exchange` (the default exchange's for `""`; a name of its own when
    /// no such exchange is declared).
    pub(crate) fn exchange_name(&self, exchange: &str) -> Arc<str> {
        if exchange.is_empty() {
            return self.default_exchange.clone();
        }
        match self.exchanges.get_key_value(exchange) {
            Some((name, _)) => name.clone(),
            None => Arc::from(exchange),
        }
    }

    /// [`Registry::route`] for a record: its headers are read (and converted, for an
    /// envelope that holds other types) only when a headers exchange is on the way. Looks
    /// the exchange up once in the common case (no onward routing), as `route` does.
    pub(crate) fn route_record(
        &self,
        exchange: &str,
        body: &E::Record,
        queues: &mut Vec<Arc<str>>,
    ) {
        let key = E::routing_key(body);
        if exchange.is_empty() {
            self.route(exchange, key, &NO_HEADERS, queues);
            return;
        }
        let Some(x) = self.exchanges.get(exchange) else {
            return;
        };
        if x.alternate.is_none() && !x.has_exchange_targets() {
            let before = queues.len();
            if x.kind == ExchangeKind::Headers {
                x.matching_queues(key, &E::headers(body), queues);
            } else {
                x.matching_queues(key, &NO_HEADERS, queues);
            }
            dedup_from(queues, before);
            return;
        }
        let headers = if self.reads_headers(exchange) {
            E::headers(body)
        } else {
            Cow::Borrowed(&NO_HEADERS)
        };
        let mut visited = Vec::new();
        self.route_exchange(exchange, key, &headers, &mut visited, queues);
    }

    /// Whether routing through `exchange` may look at message headers: it, or an exchange
    /// it routes on to, is a headers exchange.
    fn reads_headers(&self, exchange: &str) -> bool {
        let mut seen: Vec<&str> = Vec::new();
        let mut todo: Vec<&str> = vec![exchange];
        while let Some(name) = todo.pop() {
            let Some(x) = self.exchanges.get(name) else {
                continue;
            };
            if seen.contains(&name) {
                continue;
            }
            seen.push(name);
            if x.kind == ExchangeKind::Headers {
                return true;
            }
            todo.extend(x.bindings.iter().filter_map(|b| match &b.target {
                Target::Exchange(e) => Some(&**e),
                Target::Queue(_) => None,
            }));
            todo.extend(x.alternate.as_deref());
        }
        false
    }

    /// Adds the queues a message reaches, each once, to `queues`; returns the exchange's
    /// shared name (for the published message).
    pub(crate) fn route(
        &self,
        exchange: &str,
        routing_key: &str,
        headers: &FieldTable,
        queues: &mut Vec<Arc<str>>,
    ) -> Arc<str> {
        if exchange.is_empty() {
            if let Some((name, _)) = self.queues.get_key_value(routing_key) {
                queues.push(name.clone());
            }
            return self.default_exchange.clone();
        }
        let Some((name, x)) = self.exchanges.get_key_value(exchange) else {
            return Arc::from(exchange);
        };
        if x.alternate.is_none() && !x.has_exchange_targets() {
            // The common case: no onward routing, so no loop detection is needed.
            let before = queues.len();
            x.matching_queues(routing_key, headers, queues);
            dedup_from(queues, before);
            return name.clone();
        }
        let mut visited = Vec::new();
        self.route_exchange(exchange, routing_key, headers, &mut visited, queues);
        name.clone()
    }

    /// Routes through one exchange, following exchange-to-exchange bindings and the alternate
    /// exchange. `visited` breaks loops; both lists are short, so linear scans beat hashing.
    pub(crate) fn route_exchange(
        &self,
        exchange: &str,
        routing_key: &str,
        headers: &FieldTable,
        visited: &mut Vec<Arc<str>>,
        queues: &mut Vec<Arc<str>>,
    ) {
        let Some(x) = self.exchanges.get(exchange) else {
            return;
        };
        if visited.contains(&x.name) {
            return;
        }
        visited.push(x.name.clone());
        let before = queues.len();
        let mut targets = Vec::new();
        x.matching(routing_key, headers, &mut targets);
        for t in targets {
            match t {
                Target::Queue(q) => {
                    if !queues.contains(&q) {
                        queues.push(q);
                    }
                }
                Target::Exchange(e) => {
                    self.route_exchange(&e, routing_key, headers, visited, queues)
                }
            }
        }
        if queues.len() == before {
            if let Some(alt) = &x.alternate {
                self.route_exchange(alt, routing_key, headers, visited, queues);
            }
        }
    }
}

/// Removes repeats from `queues[from..]`, keeping first occurrences (lists are short).
fn dedup_from(queues: &mut Vec<Arc<str>>, from: usize) {
    let mut i = from + 1;
    while i < queues.len() {
        if queues[from..i].contains(&queues[i]) {
            queues.remove(i);
        } else {
            i += 1;
        }
    }
}
