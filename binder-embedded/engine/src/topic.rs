//! Topic-exchange pattern matching: words separated by `.`, `*` matches exactly one word, `#`
//! matches zero or more words. [`TopicPattern`] matches one pattern; [`TopicTrie`] holds the
//! patterns of a whole exchange as a trie of words, so that routing a key costs a walk of its
//! words rather than a match against every binding (RabbitMQ's topic trie).

use rustc_hash::FxHashMap as HashMap;
use smallvec::SmallVec;

/// A binding pattern split into words once, at bind time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TopicPattern {
    words: Vec<Word>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Word {
    Literal(String),
    One,
    Many,
}

impl TopicPattern {
    pub(crate) fn new(pattern: &str) -> Self {
        let mut words: Vec<Word> = Vec::new();
        // As in RabbitMQ, the empty string has no words; `a..b` has an empty middle word.
        for w in pattern.split('.').filter(|_| !pattern.is_empty()) {
            let word = match w {
                "*" => Word::One,
                "#" => Word::Many,
                other => Word::Literal(other.to_owned()),
            };
            // `#.#` is the same as `#`; collapsing keeps matching linear.
            if word == Word::Many && words.last() == Some(&Word::Many) {
                continue;
            }
            words.push(word);
        }
        TopicPattern { words }
    }

    /// Whether every routing key matches (`#`, the pattern Spring Cloud Stream binds group
    /// queues with): no need to split the key.
    pub(crate) fn matches_all(&self) -> bool {
        matches!(self.words.as_slice(), [Word::Many])
    }

    /// Whether `routing_key` matches. Runs in O(pattern × key) without allocation.
    pub(crate) fn matches(&self, routing_key: &str) -> bool {
        self.matches_key(&TopicKey::new(routing_key))
    }

    /// Whether a routing key split once (for all bindings of an exchange) matches.
    pub(crate) fn matches_key(&self, key: &TopicKey<'_>) -> bool {
        matches_from(&self.words, key.0.as_slice())
    }
}

/// The edge from a trie node to a child: one word of a pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Edge<'a> {
    Literal(&'a str),
    One,
    Many,
}

impl Word {
    fn edge(&self) -> Edge<'_> {
        match self {
            Word::Literal(w) => Edge::Literal(w),
            Word::One => Edge::One,
            Word::Many => Edge::Many,
        }
    }
}

/// The binding positions a routing key matches: inline while few.
pub(crate) type Matches = SmallVec<[usize; 8]>;

/// One node of a [`TopicTrie`]: the children by next pattern word, and the values of the
/// patterns that end here.
#[derive(Debug, Default)]
struct Node {
    literal: HashMap<Box<str>, usize>,
    one: Option<usize>,
    many: Option<usize>,
    values: Vec<usize>,
}

impl Node {
    fn child(&self, edge: Edge<'_>) -> Option<usize> {
        match edge {
            Edge::Literal(w) => self.literal.get(w).copied(),
            Edge::One => self.one,
            Edge::Many => self.many,
        }
    }

    /// Links `word`'s edge to node `id`, or unlinks it (`None`).
    fn set_child(&mut self, word: &Word, id: Option<usize>) {
        match (word, id) {
            (Word::Literal(w), Some(id)) => {
                self.literal.insert(w.as_str().into(), id);
            }
            (Word::Literal(w), None) => {
                self.literal.remove(w.as_str());
            }
            (Word::One, id) => self.one = id,
            (Word::Many, id) => self.many = id,
        }
    }

    fn is_leaf(&self) -> bool {
        self.literal.is_empty() && self.one.is_none() && self.many.is_none()
    }
}

/// The binding patterns of a topic exchange as a trie of their words, each pattern with the
/// values (binding positions) bound with it. [`TopicTrie::matching`] walks a routing key's
/// words through it: a literal word follows its own edge, `*` any one word, `#` any number of
/// words, so the cost grows with the key and the patterns it can match, not with the number
/// of bindings. Nodes no pattern passes through any more are removed.
#[derive(Debug)]
pub(crate) struct TopicTrie {
    /// Node 0 is the root; removed nodes' slots are reused.
    nodes: Vec<Node>,
    free: Vec<usize>,
    values: usize,
}

impl Default for TopicTrie {
    fn default() -> Self {
        TopicTrie {
            nodes: vec![Node::default()],
            free: Vec::new(),
            values: 0,
        }
    }
}

impl TopicTrie {
    /// How many values it holds.
    pub(crate) fn len(&self) -> usize {
        self.values
    }

    fn new_node(&mut self) -> usize {
        match self.free.pop() {
            Some(id) => id,
            None => {
                self.nodes.push(Node::default());
                self.nodes.len() - 1
            }
        }
    }

    /// Adds `value` under `pattern`.
    pub(crate) fn insert(&mut self, pattern: &TopicPattern, value: usize) {
        let mut at = 0;
        for word in &pattern.words {
            at = match self.nodes[at].child(word.edge()) {
                Some(next) => next,
                None => {
                    let next = self.new_node();
                    self.nodes[at].set_child(word, Some(next));
                    next
                }
            };
        }
        self.nodes[at].values.push(value);
        self.values += 1;
    }

    /// Removes `value` from under `pattern`, and the nodes left with nothing below them;
    /// returns whether it was there.
    pub(crate) fn remove(&mut self, pattern: &TopicPattern, value: usize) -> bool {
        let mut path = Vec::with_capacity(pattern.words.len() + 1);
        path.push(0);
        for word in &pattern.words {
            match self.nodes[path[path.len() - 1]].child(word.edge()) {
                Some(next) => path.push(next),
                None => return false,
            }
        }
        let end = path[path.len() - 1];
        let values = &mut self.nodes[end].values;
        let Some(i) = values.iter().position(|v| *v == value) else {
            return false;
        };
        values.remove(i);
        self.values -= 1;
        // Prune upwards: a node with no values and no children is unlinked from its parent.
        for (depth, word) in pattern.words.iter().enumerate().rev() {
            let id = path[depth + 1];
            let node = &self.nodes[id];
            if !node.values.is_empty() || !node.is_leaf() {
                break;
            }
            self.nodes[path[depth]].set_child(word, None);
            self.nodes[id] = Node::default();
            self.free.push(id);
        }
        true
    }

    /// Changes every value `v` to `f(v)` (positions shifting down after removals).
    pub(crate) fn renumber(&mut self, mut f: impl FnMut(usize) -> usize) {
        for node in &mut self.nodes {
            for v in &mut node.values {
                *v = f(*v);
            }
        }
    }

    /// Appends the values of every pattern `routing_key` matches, each once, in ascending
    /// order.
    pub(crate) fn matching(&self, routing_key: &str, out: &mut Matches) {
        self.walk(routing_key, out);
    }

    /// [`Self::matching`], returning how many nodes the walk visited (0 when the key was not
    /// split): what a test bounds to show the walk stays linear in the key.
    fn walk(&self, routing_key: &str, out: &mut Matches) -> usize {
        let start = out.len();
        let root = &self.nodes[0];
        let only_trailing_hash = root.literal.is_empty()
            && root.one.is_none()
            && root.values.is_empty()
            && root.many.is_none_or(|m| self.nodes[m].is_leaf());
        if only_trailing_hash {
            // Only `#` patterns (Spring Cloud Stream's group queues), or none: every key
            // matches them, and the key need not be split.
            if let Some(many) = root.many {
                out.extend_from_slice(&self.nodes[many].values);
            }
            return 0;
        }
        let key = TopicKey::new(routing_key);
        let mut walk = Walk {
            trie: self,
            explored: SmallVec::new(),
            visits: 0,
            out,
        };
        walk.from(0, key.0.as_slice());
        let visits = walk.visits;
        let found = &mut out[start..];
        if found.len() > 1 {
            // A node can be reached more than once (`#.a.#` and `a.a`).
            found.sort_unstable();
            let mut kept = 1;
            for i in 1..found.len() {
                if found[i] != found[kept - 1] {
                    found[kept] = found[i];
                    kept += 1;
                }
            }
            out.truncate(start + kept);
        }
        visits
    }

    /// Every pattern's words with its values, sorted (for tests comparing two tries).
    #[cfg(test)]
    pub(crate) fn entries(&self) -> Vec<(Vec<String>, Vec<usize>)> {
        fn visit(
            trie: &TopicTrie,
            at: usize,
            prefix: &mut Vec<String>,
            out: &mut Vec<(Vec<String>, Vec<usize>)>,
        ) {
            let node = &trie.nodes[at];
            if !node.values.is_empty() {
                let mut values = node.values.clone();
                values.sort_unstable();
                out.push((prefix.clone(), values));
            }
            let mut children: Vec<(String, usize)> = node
                .literal
                .iter()
                .map(|(w, id)| (format!("={w}"), *id))
                .chain(node.one.map(|id| ("*".to_owned(), id)))
                .chain(node.many.map(|id| ("#".to_owned(), id)))
                .collect();
            children.sort();
            for (word, id) in children {
                prefix.push(word);
                visit(trie, id, prefix, out);
                prefix.pop();
            }
        }
        let mut out = Vec::new();
        visit(self, 0, &mut Vec::new(), &mut out);
        out
    }

    /// Nodes in use, root included (for tests: removal prunes).
    #[cfg(test)]
    pub(crate) fn nodes_in_use(&self) -> usize {
        self.nodes.len() - self.free.len()
    }
}

/// One walk of a routing key's words through a [`TopicTrie`].
struct Walk<'t, 'o> {
    trie: &'t TopicTrie,
    /// The `#` nodes already entered, each with the most words left at an entry: a `#`
    /// entered with fewer words left can only swallow its way to suffixes already walked
    /// from it, so each `#` node walks each suffix of the key once (patterns with several
    /// `#` would otherwise make the walk exponential in the key's length).
    explored: SmallVec<[(usize, usize); 8]>,
    /// Nodes visited.
    visits: usize,
    out: &'o mut Matches,
}

impl Walk<'_, '_> {
    /// Collects the values `words` reaches from node `at`.
    fn from(&mut self, at: usize, words: &[&str]) {
        self.visits += 1;
        let node = &self.trie.nodes[at];
        if let Some(many) = node.many {
            self.through_many(many, words);
        }
        match words.split_first() {
            None => self.out.extend_from_slice(&node.values),
            Some((word, rest)) => {
                if let Some(&next) = node.literal.get(*word) {
                    self.from(next, rest);
                }
                if let Some(next) = node.one {
                    self.from(next, rest);
                }
            }
        }
    }

    /// Collects the values reached through a `#` edge into node `many`, which swallows any
    /// number of the `words` left.
    fn through_many(&mut self, many: usize, words: &[&str]) {
        let node = &self.trie.nodes[many];
        if node.is_leaf() {
            // A trailing `#` matches whatever is left.
            self.out.extend_from_slice(&node.values);
            return;
        }
        // Suffixes up to this many words were walked from `many` at an earlier entry.
        let walked = match self.explored.iter_mut().find(|(node, _)| *node == many) {
            Some((_, most)) if *most >= words.len() => return,
            Some((_, most)) => Some(std::mem::replace(most, words.len())),
            None => {
                self.explored.push((many, words.len()));
                None
            }
        };
        let longest_skip = words.len() - walked.map_or(0, |w| w + 1);
        for skip in 0..=longest_skip {
            // A `#` node has no `#` child (patterns collapse `#.#`), so this does not recurse
            // into `through_many` for the same node.
            self.from(many, &words[skip..]);
        }
    }
}

/// A routing key split into words.
pub(crate) struct TopicKey<'a>(smallvec_like::Words<'a>);

impl<'a> TopicKey<'a> {
    pub(crate) fn new(routing_key: &'a str) -> Self {
        TopicKey(smallvec_like::Words::new(routing_key))
    }
}

fn matches_from(pattern: &[Word], key: &[&str]) -> bool {
    // Iterative matching with one backtrack point for the latest `#` (like glob matching).
    let (mut p, mut k) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    loop {
        if p < pattern.len() {
            match &pattern[p] {
                Word::Many => {
                    star = Some((p, k));
                    p += 1;
                    continue;
                }
                Word::One if k < key.len() => {
                    p += 1;
                    k += 1;
                    continue;
                }
                Word::Literal(w) if k < key.len() && w == key[k] => {
                    p += 1;
                    k += 1;
                    continue;
                }
                _ => {}
            }
        } else if k == key.len() {
            return true;
        }
        // Mismatch: let the last `#` swallow one more word, if there is one.
        match star {
            Some((sp, sk)) if sk < key.len() => {
                star = Some((sp, sk + 1));
                p = sp + 1;
                k = sk + 1;
            }
            _ => return false,
        }
    }
}

/// Splits a routing key into words on the stack for the common short keys.
mod smallvec_like {
    pub(crate) struct Words<'a> {
        inline: [&'a str; 8],
        len: usize,
        spill: Vec<&'a str>,
    }

    impl<'a> Words<'a> {
        pub(crate) fn new(key: &'a str) -> Self {
            let mut w = Words {
                inline: [""; 8],
                len: 0,
                spill: Vec::new(),
            };
            for (i, part) in key.split('.').filter(|_| !key.is_empty()).enumerate() {
                if i < 8 {
                    w.inline[i] = part;
                    w.len = i + 1;
                } else {
                    if w.spill.is_empty() {
                        w.spill.extend_from_slice(&w.inline);
                    }
                    w.spill.push(part);
                }
            }
            w
        }

        pub(crate) fn as_slice(&self) -> &[&'a str] {
            if self.spill.is_empty() {
                &self.inline[..self.len]
            } else {
                &self.spill
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, k: &str) -> bool {
        TopicPattern::new(p).matches(k)
    }

    #[test]
    fn star_matches_exactly_one_word() {
        assert!(m("a.*.c", "a.b.c"));
        assert!(!m("a.*.c", "a.c"));
        assert!(!m("a.*.c", "a.b.b.c"));
        assert!(m("*", "a"));
        assert!(!m("*", "a.b"));
        assert!(!m("*", ""), "the empty key has no words");
        assert!(m("*.*", "."), "`.` is two empty words");
    }

    #[test]
    fn hash_matches_zero_or_more_words() {
        assert!(m("#", ""));
        assert!(m("#", "a.b.c"));
        assert!(m("a.#", "a"));
        assert!(m("a.#", "a.b.c"));
        assert!(m("a.#.b", "a.b"));
        assert!(m("a.#.b", "a.x.y.b"));
        assert!(!m("a.#.b", "a.x.y.c"));
        assert!(m("#.#", "a.b"));
        assert!(m("#.b.#", "b"));
        assert!(m("#.*", "a"));
        assert!(!m("#.*", ""));
    }

    #[test]
    fn empty_words_are_words() {
        assert!(m("a..b", "a..b"));
        assert!(m("a.*.b", "a..b"));
        assert!(!m("a.b", "a..b"));
        assert!(m("", ""));
        assert!(!m("", "a"));
    }

    #[test]
    fn long_keys_spill() {
        let key = (0..20).map(|i| i.to_string()).collect::<Vec<_>>().join(".");
        assert!(m("0.#.19", &key));
        assert!(m("#.18.*", &key));
        assert!(!m("#.18", &key));
    }

    /// Patterns and keys of a small alphabet (with empty words, `*` and `#`), so that
    /// matches, near misses and shared prefixes are frequent.
    fn words(
        max: usize,
        with_wildcards: bool,
    ) -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let word = if with_wildcards {
            prop::sample::select(vec!["a", "b", "", "*", "#"])
        } else {
            prop::sample::select(vec!["a", "b", ""])
        };
        prop::collection::vec(word, 0..=max).prop_map(|w| w.join("."))
    }

    proptest::proptest! {
        /// The trie finds exactly the patterns that match one by one, each once and in
        /// order, while patterns come and go; removing them all leaves only the root.
        #[test]
        fn the_trie_matches_what_each_pattern_matches(
            patterns in proptest::collection::vec(words(5, true), 1..24),
            keys in proptest::collection::vec(words(6, false), 1..12),
            removals in proptest::collection::vec(proptest::prelude::any::<proptest::sample::Index>(), 0..24),
        ) {
            let compiled: Vec<TopicPattern> = patterns.iter().map(|p| TopicPattern::new(p)).collect();
            let mut trie = TopicTrie::default();
            for (i, p) in compiled.iter().enumerate() {
                trie.insert(p, i);
            }
            let mut live: Vec<usize> = (0..compiled.len()).collect();
            let check = |trie: &TopicTrie, live: &[usize]| {
                for key in &keys {
                    let mut found = Matches::new();
                    trie.matching(key, &mut found);
                    let expected: Vec<usize> =
                        live.iter().copied().filter(|&i| compiled[i].matches(key)).collect();
                    assert_eq!(found.as_slice(), expected.as_slice(), "key {key:?}, patterns {patterns:?}");
                }
            };
            check(&trie, &live);
            for r in removals {
                if live.is_empty() {
                    break;
                }
                let i = live.remove(r.index(live.len()));
                assert!(trie.remove(&compiled[i], i));
                assert!(!trie.remove(&compiled[i], i), "removed twice");
                check(&trie, &live);
            }
            for i in live.drain(..) {
                assert!(trie.remove(&compiled[i], i));
            }
            assert_eq!(trie.len(), 0);
            assert_eq!(trie.nodes_in_use(), 1, "every node but the root pruned");
        }
    }

    #[test]
    fn many_hashes_against_a_long_key_stay_linear() {
        let mut trie = TopicTrie::default();
        let pattern = TopicPattern::new("#.a.#.a.#.a.#.b");
        trie.insert(&pattern, 0);
        trie.insert(&TopicPattern::new("#.a.#.a.#.a.#.c"), 1);
        trie.insert(&TopicPattern::new("a.*.#.b"), 2);
        // Without walking each suffix once per `#` node, 60 words take about 60^4 / 24 ways.
        let words = 60;
        let key = vec!["a"; words].join(".") + ".b";
        let mut found = Matches::new();
        let visits = trie.walk(&key, &mut found);
        assert_eq!(found.as_slice(), &[0, 2]);
        assert!(pattern.matches(&key));
        // Each of the 4 `#` nodes walks each of the key's suffixes once, and each such walk
        // visits the `a` child after it: a few times the key's length.
        assert!(visits <= 12 * (words + 2), "{visits} nodes visited");
    }

    #[test]
    fn a_lone_hash_matches_every_key_and_renumbering_follows_removals() {
        let mut trie = TopicTrie::default();
        trie.insert(&TopicPattern::new("#"), 0);
        trie.insert(&TopicPattern::new("a.*"), 1);
        trie.insert(&TopicPattern::new("#"), 2);
        let matching = |trie: &TopicTrie, key: &str| {
            let mut found = Matches::new();
            trie.matching(key, &mut found);
            found.to_vec()
        };
        assert_eq!(matching(&trie, "a.b"), [0, 1, 2]);
        assert_eq!(matching(&trie, ""), [0, 2]);
        assert!(trie.remove(&TopicPattern::new("a.*"), 1));
        trie.renumber(|v| if v > 1 { v - 1 } else { v });
        assert_eq!(
            matching(&trie, "a.b"),
            [0, 1],
            "only `#` bindings left: no split"
        );
        assert!(!trie.remove(&TopicPattern::new("#"), 2), "renumbered to 1");
        assert!(trie.remove(&TopicPattern::new("#"), 1));
        assert_eq!(matching(&trie, "x"), [0]);
    }
}
