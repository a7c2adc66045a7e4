//! How property names are compared and found: Spring's relaxed binding.

use config::{Value, ValueKind};

/// The spelling-insensitive form of a property name: lower case without `-` and `_`, so
/// `maxAttempts`, `max-attempts`, `max_attempts` and `MAXATTEMPTS` are one property (Spring's
/// relaxed binding).
pub fn canonical(key: &str) -> String {
    key.chars()
        .filter(|c| *c != '-' && *c != '_')
        .flat_map(char::to_lowercase)
        .collect()
}

/// Finds a key in a table by its canonical spelling.
pub(crate) fn lookup<'a>(
    table: &'a config::Map<String, Value>,
    key: &str,
) -> Option<(&'a String, &'a Value)> {
    if let Some(found) = table.get_key_value(key) {
        return Some(found);
    }
    let want = canonical(key);
    table.iter().find(|(k, _)| canonical(k) == want)
}

/// Walks `a.b.c` from `root`, matching keys by their canonical spelling ([`canonical`]), as
/// the loader does: binders read their own settings from their environment with it.
pub fn descend<'a>(root: &'a Value, path: &[&str]) -> Option<&'a Value> {
    let mut here = root;
    for segment in path {
        let ValueKind::Table(t) = &here.kind else {
            return None;
        };
        here = lookup(t, segment)?.1;
    }
    Some(here)
}
