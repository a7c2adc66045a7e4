//! Property tests for `engine::topic_matches` against a small, obviously-correct recursive
//! reference matcher for RabbitMQ topic-exchange semantics (`*` is exactly one word, `#` is zero
//! or more words, the empty string has zero words, `a..b` has an empty middle word).

use proptest::prelude::*;
use stream_engine::topic_matches;

/// Splits into words as RabbitMQ does: the empty string has no words, otherwise split on `.`.
fn words(s: &str) -> Vec<&str> {
    if s.is_empty() {
        Vec::new()
    } else {
        s.split('.').collect()
    }
}

/// The textbook recursive definition, exponential but obviously correct.
fn reference(pattern: &[&str], key: &[&str]) -> bool {
    match pattern.split_first() {
        None => key.is_empty(),
        Some((&"#", rest)) => {
            // `#` consumes nothing, or consumes one word and stays.
            reference(rest, key) || (!key.is_empty() && reference(pattern, &key[1..]))
        }
        Some((&"*", rest)) => !key.is_empty() && reference(rest, &key[1..]),
        Some((literal, rest)) => key.first() == Some(literal) && reference(rest, &key[1..]),
    }
}

fn reference_str(pattern: &str, key: &str) -> bool {
    reference(&words(pattern), &words(key))
}

fn key_strategy(max_words: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(vec!["a", "b", "c", ""]), 0..max_words)
        .prop_map(|w| w.join("."))
}

fn pattern_strategy(max_words: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec!["a", "b", "*", "#", ""]),
        0..max_words,
    )
    .prop_map(|w| w.join("."))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn agrees_with_reference(pattern in pattern_strategy(6), key in key_strategy(6)) {
        prop_assert_eq!(
            topic_matches(&pattern, &key),
            reference_str(&pattern, &key),
            "pattern {:?}, key {:?}",
            pattern,
            key
        );
    }

    /// Longer keys (more than eight words) exercise the matcher's spill-to-heap path.
    #[test]
    fn agrees_with_reference_on_long_keys(pattern in pattern_strategy(8), key in key_strategy(14)) {
        prop_assert_eq!(
            topic_matches(&pattern, &key),
            reference_str(&pattern, &key),
            "pattern {:?}, key {:?}",
            pattern,
            key
        );
    }

    /// A key matches any pattern made from it by replacing words with `*` and inserting `#`s.
    #[test]
    fn generalised_key_matches(
        key in key_strategy(6),
        stars in prop::collection::vec(any::<bool>(), 6),
        hashes in prop::collection::vec(any::<bool>(), 7),
    ) {
        let key_words = words(&key);
        let mut pattern_words: Vec<&str> = Vec::new();
        for (i, w) in key_words.iter().enumerate() {
            if hashes[i] {
                pattern_words.push("#");
            }
            pattern_words.push(if stars[i] { "*" } else { w });
        }
        if hashes[key_words.len()] {
            pattern_words.push("#");
        }
        let pattern = pattern_words.join(".");
        prop_assert!(reference_str(&pattern, &key), "reference: {:?} vs {:?}", pattern, key);
        prop_assert!(topic_matches(&pattern, &key), "pattern {:?}, key {:?}", pattern, key);
    }
}

#[test]
fn hash_alone_matches_everything() {
    for key in ["", "a", ".", "a.b", "a..b", "a.b.c.d.e.f.g.h.i.j"] {
        assert!(topic_matches("#", key), "key {key:?}");
    }
}

#[test]
fn hash_between_literals() {
    assert!(topic_matches("a.#.b", "a.b"));
    assert!(topic_matches("a.#.b", "a.x.b"));
    assert!(topic_matches("a.#.b", "a.x.y.b"));
    assert!(topic_matches("a.#.b", "a.b.b"));
    assert!(!topic_matches("a.#.b", "a"));
    assert!(!topic_matches("a.#.b", "a.b.c"));
    assert!(!topic_matches("a.#.b", "b.a.b"));
}

#[test]
fn double_hash() {
    assert!(topic_matches("#.#", ""));
    assert!(topic_matches("#.#", "a"));
    assert!(topic_matches("#.#", "a.b.c"));
    assert!(topic_matches("#.#.a", "a"));
    assert!(!topic_matches("#.#.a", "b"));
}

#[test]
fn empty_words() {
    assert!(topic_matches(".", "."));
    assert!(topic_matches("*.*", "."));
    assert!(!topic_matches("*", "."));
    assert!(topic_matches("a..b", "a..b"));
    assert!(topic_matches("a.*.b", "a..b"));
    assert!(!topic_matches("a.b", "a..b"));
    assert!(topic_matches("a.", "a."));
    assert!(!topic_matches("a", "a."));
    assert!(topic_matches("#.", "a."));
    assert!(topic_matches(".#", "."));
}

#[test]
fn empty_key_has_no_words() {
    assert!(topic_matches("", ""));
    assert!(topic_matches("#", ""));
    assert!(!topic_matches("*", ""));
    assert!(!topic_matches("", "a"));
    assert!(!topic_matches(".", ""));
    assert!(!topic_matches("a", ""));
}
