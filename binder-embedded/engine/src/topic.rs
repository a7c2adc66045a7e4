//! Topic-exchange pattern matching: words separated by `.`, `*` matches exactly one word, `#`
//! matches zero or more words.

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
    fn only_a_lone_hash_matches_all_without_splitting() {
        assert!(TopicPattern::new("#").matches_all());
        assert!(TopicPattern::new("#.#").matches_all(), "collapsed to `#`");
        for p in ["#.a", "*", "a.#", ""] {
            assert!(!TopicPattern::new(p).matches_all(), "{p}");
        }
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
}
