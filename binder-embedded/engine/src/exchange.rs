//! Exchanges and their bindings: who receives a message published with a routing key and
//! headers.

use std::sync::Arc;

use rustc_hash::FxHashMap as HashMap;

use crate::field::{FieldTable, FieldValue};

use super::topic::{Matches, TopicKey, TopicPattern, TopicTrie};
use super::types::ExchangeKind;

/// A topic exchange with at most this many bindings matches each pattern in turn, which
/// costs less than a walk through its trie for so few.
const MATCH_EACH_UP_TO: usize = 8;

/// Where a binding delivers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Target {
    Queue(Arc<str>),
    Exchange(Arc<str>),
}

/// One binding of an exchange.
#[derive(Debug, Clone)]
pub(crate) struct Binding {
    pub target: Target,
    pub key: String,
    pub args: FieldTable,
    topic: Option<TopicPattern>,
}

impl Binding {
    pub(crate) fn same(&self, target: &Target, key: &str, args: &FieldTable) -> bool {
        self.target == *target && self.key == key && self.args == *args
    }
}

/// One exchange.
#[derive(Debug)]
pub(crate) struct Exchange {
    pub name: Arc<str>,
    pub kind: ExchangeKind,
    pub durable: bool,
    pub auto_delete: bool,
    pub internal: bool,
    /// The alternate exchange in effect: its argument's, else its policy's.
    pub alternate: Option<String>,
    /// The policy it follows, if any.
    pub policy: Option<Arc<str>>,
    /// The arguments as declared (listed and exported; only `alternate-exchange` acts).
    pub arguments: FieldTable,
    pub bindings: Vec<Binding>,
    /// Direct exchanges: routing key to binding indexes.
    direct_index: HashMap<String, Vec<usize>>,
    /// Topic exchanges: the binding patterns as a trie, with binding indexes.
    topic_index: TopicTrie,
    /// Bindings whose target is an exchange.
    exchange_targets: usize,
}

impl Exchange {
    pub(crate) fn new(
        name: Arc<str>,
        kind: ExchangeKind,
        durable: bool,
        auto_delete: bool,
        internal: bool,
        args: FieldTable,
    ) -> Self {
        let alternate = args.get_str("alternate-exchange").map(str::to_owned);
        Exchange {
            name,
            kind,
            durable,
            auto_delete,
            internal,
            alternate,
            policy: None,
            arguments: args,
            bindings: Vec::new(),
            direct_index: HashMap::default(),
            topic_index: TopicTrie::default(),
            exchange_targets: 0,
        }
    }

    /// Adds a binding unless an identical one exists; returns whether it was added.
    /// `target_bound` says whether this exchange has any binding to `target` already: when it
    /// has none, no binding can be identical and the bindings are not searched.
    pub(crate) fn bind(
        &mut self,
        target: Target,
        key: &str,
        args: FieldTable,
        target_bound: bool,
    ) -> bool {
        if target_bound && self.bindings.iter().any(|b| b.same(&target, key, &args)) {
            return false;
        }
        let topic = (self.kind == ExchangeKind::Topic).then(|| TopicPattern::new(key));
        if matches!(target, Target::Exchange(_)) {
            self.exchange_targets += 1;
        }
        let at = self.bindings.len();
        if self.kind == ExchangeKind::Direct {
            self.direct_index
                .entry(key.to_owned())
                .or_default()
                .push(at);
        }
        if let Some(pattern) = &topic {
            self.topic_index.insert(pattern, at);
        }
        self.bindings.push(Binding {
            target,
            key: key.to_owned(),
            args,
            topic,
        });
        true
    }

    /// Removes a binding; returns whether one was removed.
    pub(crate) fn unbind(&mut self, target: &Target, key: &str, args: &FieldTable) -> bool {
        self.remove_where(|b| b.same(target, key, args)) > 0
    }

    /// Removes every binding to `target`; returns how many.
    pub(crate) fn unbind_target(&mut self, target: &Target) -> usize {
        self.remove_where(|b| b.target == *target)
    }

    /// Removes the bindings `gone` selects, keeping the others in order, and updates the
    /// routing index in place (positions shift down; no key is copied); returns how many.
    fn remove_where(&mut self, gone: impl Fn(&Binding) -> bool) -> usize {
        let removed: Vec<usize> = (0..self.bindings.len())
            .filter(|&i| gone(&self.bindings[i]))
            .collect();
        if removed.is_empty() {
            return 0;
        }
        for &i in &removed {
            let binding = &self.bindings[i];
            if matches!(binding.target, Target::Exchange(_)) {
                self.exchange_targets -= 1;
            }
            if let Some(pattern) = &binding.topic {
                self.topic_index.remove(pattern, i);
            }
        }
        let mut at = 0;
        self.bindings.retain(|_| {
            at += 1;
            removed.binary_search(&(at - 1)).is_err()
        });
        self.direct_index.retain(|_, positions| {
            positions.retain_mut(|p| match removed.binary_search(p) {
                Ok(_) => false,
                Err(below) => {
                    *p -= below;
                    true
                }
            });
            !positions.is_empty()
        });
        if self.kind == ExchangeKind::Topic {
            self.topic_index
                .renumber(|p| p - removed.partition_point(|&r| r < p));
        }
        removed.len()
    }

    /// Whether the routing index and the count of exchange targets are what the bindings
    /// say (they are updated in place as bindings come and go).
    #[cfg(test)]
    pub(crate) fn index_is_exact(&self) -> bool {
        let mut direct: HashMap<String, Vec<usize>> = HashMap::default();
        if self.kind == ExchangeKind::Direct {
            for (i, b) in self.bindings.iter().enumerate() {
                direct.entry(b.key.clone()).or_default().push(i);
            }
        }
        let mut topic = TopicTrie::default();
        for (i, b) in self.bindings.iter().enumerate() {
            if let Some(pattern) = &b.topic {
                topic.insert(pattern, i);
            }
        }
        let targets = self
            .bindings
            .iter()
            .filter(|b| matches!(b.target, Target::Exchange(_)))
            .count();
        direct == self.direct_index
            && topic.entries() == self.topic_index.entries()
            && topic.nodes_in_use() == self.topic_index.nodes_in_use()
            && targets == self.exchange_targets
    }

    /// Whether any binding routes on to another exchange.
    pub(crate) fn has_exchange_targets(&self) -> bool {
        self.exchange_targets > 0
    }

    /// The queues a message matches directly (for exchanges without exchange targets).
    pub(crate) fn matching_queues(
        &self,
        routing_key: &str,
        headers: &FieldTable,
        out: &mut Vec<Arc<str>>,
    ) {
        let queue = |t: &Target| match t {
            Target::Queue(q) => Some(q.clone()),
            Target::Exchange(_) => None,
        };
        match self.kind {
            ExchangeKind::Direct => {
                if let Some(idx) = self.direct_index.get(routing_key) {
                    out.extend(idx.iter().filter_map(|i| queue(&self.bindings[*i].target)));
                }
            }
            ExchangeKind::Fanout => {
                out.extend(self.bindings.iter().filter_map(|b| queue(&b.target)))
            }
            ExchangeKind::Topic => self.each_topic_match(routing_key, |b| {
                out.extend(queue(&b.target));
            }),
            ExchangeKind::Headers => out.extend(
                self.bindings
                    .iter()
                    .filter(|b| headers_match(&b.args, headers))
                    .filter_map(|b| queue(&b.target)),
            ),
        }
    }

    /// Calls `f` with each binding of a topic exchange that `routing_key` matches, in binding
    /// order. Up to [`MATCH_EACH_UP_TO`] bindings each pattern is tried in turn (the key split
    /// once, and only if a pattern needs it); beyond, the key's words walk the patterns' trie.
    fn each_topic_match<'a>(&'a self, routing_key: &str, mut f: impl FnMut(&'a Binding)) {
        if self.topic_index.len() > MATCH_EACH_UP_TO {
            let mut found = Matches::new();
            self.topic_index.matching(routing_key, &mut found);
            for i in found {
                f(&self.bindings[i]);
            }
            return;
        }
        let mut words: Option<TopicKey<'_>> = None;
        for b in &self.bindings {
            if b.topic.as_ref().is_some_and(|t| {
                t.matches_all()
                    || t.matches_key(words.get_or_insert_with(|| TopicKey::new(routing_key)))
            }) {
                f(b);
            }
        }
    }

    /// The binding targets a message matches.
    pub(crate) fn matching(&self, routing_key: &str, headers: &FieldTable, out: &mut Vec<Target>) {
        match self.kind {
            ExchangeKind::Direct => {
                if let Some(idx) = self.direct_index.get(routing_key) {
                    out.extend(idx.iter().map(|i| self.bindings[*i].target.clone()));
                }
            }
            ExchangeKind::Fanout => out.extend(self.bindings.iter().map(|b| b.target.clone())),
            ExchangeKind::Topic => {
                self.each_topic_match(routing_key, |b| out.push(b.target.clone()))
            }
            ExchangeKind::Headers => out.extend(
                self.bindings
                    .iter()
                    .filter(|b| headers_match(&b.args, headers))
                    .map(|b| b.target.clone()),
            ),
        }
    }
}

fn values_equal(a: &FieldValue, b: &FieldValue) -> bool {
    match (a.as_i64(), b.as_i64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// FieldTable-exchange matching: `x-match` is `all` (default), `any`, `all-with-x` or
/// `any-with-x`. Binding arguments starting with `x-` are ignored unless `-with-x`; a `void`
/// argument matches on presence alone.
pub(crate) fn headers_match(binding_args: &FieldTable, headers: &FieldTable) -> bool {
    let mode = binding_args.get_str("x-match").unwrap_or("all");
    let (all, with_x) = match mode {
        "any" => (false, false),
        "any-with-x" => (false, true),
        "all-with-x" => (true, true),
        _ => (true, false),
    };
    let mut considered = binding_args
        .iter()
        .filter(|(k, _)| k.as_str() != "x-match" && (with_x || !k.starts_with("x-")));
    let matches = |(k, v): (&String, &FieldValue)| match (v, headers.get(k)) {
        (_, None) => false,
        (FieldValue::Void, Some(_)) => true,
        (v, Some(h)) => values_equal(v, h),
    };
    if all {
        considered.all(matches)
    } else {
        considered.any(matches)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As bindings are added to a topic exchange one by one (past the count where matching
    /// switches from trying each pattern to the trie) and then removed from the front, every
    /// key routes to exactly the bindings whose pattern matches it, in binding order.
    #[test]
    fn topic_routing_matches_each_pattern_on_both_sides_of_the_trie_threshold() {
        let patterns = [
            "#", "a.*", "*.b", "a.#", "#.b", "a.b", "", "*", "a.#.b", "#.a.#", "b.*.a", "a..b",
            "*.*", "#.*", "b", "a.b.#", "*.a.*", "#.b.#", "a", "b.#",
        ];
        let keys = [
            "", "a", "b", "a.b", "b.a", "a.b.a", "a..b", "b.x.a", "a.a.a", "x.a.b.b", ".",
        ];
        let mut x = Exchange::new(
            "t".into(),
            ExchangeKind::Topic,
            false,
            false,
            false,
            FieldTable::new(),
        );
        let check = |x: &Exchange| {
            for key in keys {
                let mut routed = Vec::new();
                x.matching(key, &FieldTable::new(), &mut routed);
                let expected: Vec<Target> = x
                    .bindings
                    .iter()
                    .filter(|b| crate::topic_matches(&b.key, key))
                    .map(|b| b.target.clone())
                    .collect();
                assert_eq!(
                    routed,
                    expected,
                    "key {key:?} with {} bindings",
                    x.bindings.len()
                );
            }
            assert!(x.index_is_exact());
        };
        for (i, p) in patterns.iter().enumerate() {
            assert!(x.bind(
                Target::Queue(format!("q{i}").into()),
                p,
                FieldTable::new(),
                false
            ));
            check(&x);
        }
        for i in 0..patterns.len() {
            assert_eq!(x.unbind_target(&Target::Queue(format!("q{i}").into())), 1);
            check(&x);
        }
    }

    fn h(pairs: &[(&str, FieldValue)]) -> FieldTable {
        pairs.iter().cloned().collect()
    }

    #[test]
    fn headers_all_and_any() {
        let msg = h(&[("format", "pdf".into()), ("type", "report".into())]);
        let all = h(&[
            ("x-match", "all".into()),
            ("format", "pdf".into()),
            ("type", "report".into()),
        ]);
        assert!(headers_match(&all, &msg));
        let all_miss = h(&[("format", "pdf".into()), ("type", "log".into())]);
        assert!(!headers_match(&all_miss, &msg), "all is the default");
        let any = h(&[
            ("x-match", "any".into()),
            ("format", "zip".into()),
            ("type", "report".into()),
        ]);
        assert!(headers_match(&any, &msg));
    }

    #[test]
    fn x_headers_count_only_with_x() {
        let msg = h(&[("x-tenant", "a".into())]);
        let plain = h(&[("x-match", "all".into()), ("x-tenant", "b".into())]);
        assert!(
            headers_match(&plain, &msg),
            "x- arguments are ignored by all"
        );
        let with_x = h(&[("x-match", "all-with-x".into()), ("x-tenant", "b".into())]);
        assert!(!headers_match(&with_x, &msg));
        let any_with_x = h(&[("x-match", "any-with-x".into()), ("x-tenant", "a".into())]);
        assert!(headers_match(&any_with_x, &msg));
    }

    #[test]
    fn void_matches_presence_and_integers_compare_by_value() {
        let msg = h(&[("k", FieldValue::I64(5))]);
        assert!(headers_match(&h(&[("k", FieldValue::Void)]), &msg));
        assert!(headers_match(&h(&[("k", FieldValue::I32(5))]), &msg));
        assert!(!headers_match(&h(&[("k", FieldValue::I32(6))]), &msg));
        assert!(!headers_match(&h(&[("other", FieldValue::Void)]), &msg));
    }
}
