//! The checks made before anything connects: listeners, conditions, state, bindings in use,
//! output settings. No I/O.

use std::collections::{HashMap, HashSet};

use super::blueprint::Blueprint;
use super::output;
use super::spel::syntax::ast::Condition;
use super::startup::StartupProblem;

/// Problems found before anything connects, each naming its binding.
pub(crate) fn problems(app: &Blueprint) -> Vec<StartupProblem> {
    let mut problems: Vec<String> = Vec::new();
    let mut typed: Vec<StartupProblem> = Vec::new();
    // Input bindings in the order their first listener was added; sets and counts so the
    // checks stay linear in the number of bindings.
    let mut inputs: Vec<&str> = Vec::new();
    let mut unconditional: HashMap<&str, usize> = HashMap::new();
    for l in &app.listeners {
        if l.condition.is_none() {
            *unconditional.entry(l.input.as_str()).or_default() += 1;
        }
    }
    let outputs: HashSet<&str> = app.outputs.iter().map(String::as_str).collect();
    let mut seen: HashSet<&str> = HashSet::new();
    for l in &app.listeners {
        if let Some(c) = &l.condition {
            if let Err(e) = Condition::parse(c) {
                problems.push(format!("{} of binding `{}`: {e}", l.name, l.input));
            }
        }
        let first = seen.insert(l.input.as_str());
        let count = unconditional.get(l.input.as_str()).copied().unwrap_or(0);
        if count > 1 && first {
            problems.push(format!(
                "binding `{}` has {count} listeners without a condition; at most one can take what no condition matches",
                l.input
            ));
        }
        if first {
            inputs.push(&l.input);
        }
        for state in l.states {
            if !app.state.contains_key(&state.id()) {
                problems.push(format!(
                    "listener `{}` of binding `{}` takes `State<{}>`, but no state of that type is registered; add it with AppBuilder::state (or in run_service_with's hook)",
                    l.name,
                    l.input,
                    state.name()
                ));
            }
        }
        if outputs.contains(l.input.as_str()) {
            problems.push(format!(
                "binding `{}` is used both as an input and as an output",
                l.input
            ));
        }
    }
    let unused: Vec<&String> = app
        .config
        .bindings
        .keys()
        .filter(|name| !seen.contains(name.as_str()) && !outputs.contains(name.as_str()))
        .collect();
    if !unused.is_empty() {
        let in_use = inputs
            .iter()
            .copied()
            .chain(app.outputs.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(", ");
        for name in unused {
            problems.push(format!(
                "binding `{name}` is configured but no listener or output uses it (bindings in use: {in_use})"
            ));
        }
    }
    for name in &app.outputs {
        let b = app.config.binding_ref(name);
        if let Err(e) = output::check(&b) {
            typed.push(e.into());
        }
    }
    problems
        .into_iter()
        .map(StartupProblem::Check)
        .chain(typed)
        .collect()
}
