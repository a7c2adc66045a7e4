//! Environment overrides, Spring style.
//!
//! * `SPRING_APPLICATION_JSON` holds a JSON tree merged over the files, with names exactly as
//!   written (the way to override a binding whose name has upper-case letters or `_`).
//! * `SPRING_CLOUD_STREAM_…`, `SPRING_RABBITMQ_…`, `SPRING_EMBEDDED_…` and `SPRING_PROFILES_…`
//!   map to key paths by Spring's relaxed rule: `_` separates keys, case does not matter, and a property's words
//!   are run together (`…_CONSUMER_MAXATTEMPTS`). A segment matches an existing key when their
//!   spellings agree ignoring case, `-` and `_`, so `…_BINDINGS_ORDERSIN0_…` reaches binding
//!   `orders-in-0` and `…_BINDINGS_INPUTPRODUCTADD_…` reaches `inputProductAdd`.

use config::{Value, ValueKind};

use super::error::Problems;
use super::key::canonical;
use super::node::Table;

/// The relaxed prefixes that are read from the environment.
pub const ENV_PREFIXES: &[&str] = &[
    "SPRING_CLOUD_STREAM_",
    "SPRING_RABBITMQ_",
    "SPRING_EMBEDDED_",
    "SPRING_PROFILES_",
    "MANAGEMENT_",
];

/// The JSON override variable.
pub const JSON_VAR: &str = "SPRING_APPLICATION_JSON";

/// Applies the environment to the merged tree: JSON first, then the relaxed variables (in name
/// order, so the result does not depend on the process's variable order).
pub(crate) fn apply(root: &mut Value, vars: &[(String, String)], problems: &mut Problems) {
    if let Some((_, json)) = vars.iter().find(|(k, _)| k == JSON_VAR) {
        match serde_json::from_str::<serde_json::Value>(json) {
            Ok(tree @ serde_json::Value::Object(_)) => merge(root, from_json(&tree)),
            Ok(_) => problems.push(Some(JSON_VAR), JSON_VAR, "expected a JSON object"),
            Err(e) => problems.push(Some(JSON_VAR), JSON_VAR, format!("invalid JSON: {e}")),
        }
    }
    let mut relaxed: Vec<&(String, String)> = vars
        .iter()
        .filter(|(k, _)| ENV_PREFIXES.iter().any(|p| k.starts_with(p)))
        .collect();
    relaxed.sort();
    let known = names_in_maps(root);
    for (name, value) in relaxed {
        let tokens: Vec<&str> = name.split('_').filter(|t| !t.is_empty()).collect();
        let origin = format!("environment variable {name}");
        set_relaxed(
            root,
            &tokens,
            Value::new(Some(&origin), value.as_str()),
            &known,
        );
    }
}

/// Binding and binder names written anywhere, so a variable reaches `orders-in-0` under
/// `rabbit.bindings` even when only `bindings` names it so far.
fn names_in_maps(root: &Value) -> Vec<String> {
    let maps: [&[&str]; 3] = [
        &["spring", "cloud", "stream", "bindings"],
        &["spring", "cloud", "stream", "rabbit", "bindings"],
        &["spring", "cloud", "stream", "binders"],
    ];
    let mut names = Vec::new();
    for path in maps {
        if let Some(ValueKind::Table(t)) = super::key::descend(root, path).map(|v| &v.kind) {
            names.extend(t.keys().cloned());
        }
    }
    names
}

/// Splits `a.b: v` into `a: {b: v}` at every level (Spring's dotted keys); a key written in
/// brackets, `[orders.v1]`, stays one key, without the brackets.
pub(crate) fn expand_dotted(value: &mut Value) {
    match &mut value.kind {
        ValueKind::Table(table) => {
            let keys: Vec<String> = table.keys().cloned().collect();
            for key in keys {
                let Some(mut child) = table.remove(&key) else {
                    continue;
                };
                expand_dotted(&mut child);
                let segments = split_key(&key);
                let origin = child.origin().map(str::to_owned);
                let mut nested = child;
                for segment in segments.iter().skip(1).rev() {
                    let mut t = Table::new();
                    t.insert(segment.clone(), nested);
                    nested = Value::new(origin.as_ref(), ValueKind::Table(t));
                }
                match table.get_mut(&segments[0]) {
                    Some(existing) => merge(existing, nested),
                    None => {
                        table.insert(segments[0].clone(), nested);
                    }
                }
            }
        }
        ValueKind::Array(items) => items.iter_mut().for_each(expand_dotted),
        _ => {}
    }
}

fn split_key(key: &str) -> Vec<String> {
    if key.starts_with('[') && key.ends_with(']') && key.len() >= 2 {
        return vec![key[1..key.len() - 1].to_owned()];
    }
    let parts: Vec<String> = key
        .split('.')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    if parts.is_empty() {
        vec![key.to_owned()]
    } else {
        parts
    }
}

fn from_json(v: &serde_json::Value) -> Value {
    let origin = Some(&JSON_VAR.to_owned());
    match v {
        serde_json::Value::Null => Value::new(origin, ValueKind::Nil),
        serde_json::Value::Bool(b) => Value::new(origin, *b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Value::new(origin, i),
            None => Value::new(origin, n.as_f64().unwrap_or_default()),
        },
        serde_json::Value::String(s) => Value::new(origin, s.as_str()),
        serde_json::Value::Array(items) => Value::new(
            origin,
            ValueKind::Array(items.iter().map(from_json).collect()),
        ),
        serde_json::Value::Object(map) => Value::new(
            origin,
            ValueKind::Table(
                map.iter()
                    .map(|(k, v)| (k.clone(), from_json(v)))
                    .collect::<Table>(),
            ),
        ),
    }
}

/// Deep merge: tables merge key by key (keys matched by exact name), anything else replaces.
pub(crate) fn merge(into: &mut Value, from: Value) {
    let from_origin = from.origin().map(str::to_owned);
    match (&mut into.kind, from.kind) {
        (ValueKind::Table(dst), ValueKind::Table(src)) => {
            for (k, v) in src {
                match dst.get_mut(&k) {
                    Some(existing) => merge(existing, v),
                    None => {
                        dst.insert(k, v);
                    }
                }
            }
        }
        (_, kind) => {
            let origin = from_origin;
            *into = Value::new(origin.as_ref(), kind)
        }
    }
}

fn set_relaxed(here: &mut Value, tokens: &[&str], leaf: Value, known: &[String]) {
    if tokens.is_empty() {
        *here = leaf;
        return;
    }
    if !matches!(here.kind, ValueKind::Table(_)) {
        here.kind = ValueKind::Table(Table::new());
    }
    let ValueKind::Table(table) = &mut here.kind else {
        unreachable!("made a table above");
    };
    // Longest run of tokens that spells an existing key wins, so binding names that contain
    // `-` or `_` are reached; otherwise one token is one new lower-case key.
    let mut chosen: Option<(String, usize)> = None;
    for take in (1..=tokens.len()).rev() {
        let joined = canonical(&tokens[..take].concat());
        if let Some(key) = table.keys().find(|k| canonical(k) == joined) {
            chosen = Some((key.clone(), take));
            break;
        }
    }
    if chosen.is_none() {
        for take in (1..tokens.len()).rev() {
            let joined = canonical(&tokens[..take].concat());
            if let Some(name) = known.iter().find(|k| canonical(k) == joined) {
                chosen = Some((name.clone(), take));
                break;
            }
        }
    }
    let (key, take) = chosen.unwrap_or_else(|| (tokens[0].to_ascii_lowercase(), 1));
    let child = table
        .entry(key)
        .or_insert_with(|| Value::new(None, ValueKind::Table(Table::new())));
    set_relaxed(child, &tokens[take..], leaf, known);
}
