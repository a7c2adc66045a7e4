//! The checks made before anything connects: listeners, conditions, state, bindings in use,
//! output settings. No I/O.

use super::blueprint::Blueprint;
use super::output;
use super::spel::syntax::ast::Condition;
use super::startup::StartupProblem;

/// Problems found before anything connects, each naming its binding.
pub(crate) fn problems(app: &Blueprint) -> Vec<StartupProblem> {
    let mut problems: Vec<String> = Vec::new();
    let mut typed: Vec<StartupProblem> = Vec::new();
    let mut inputs: Vec<&str> = Vec::new();
    for l in &app.listeners {
        if let Some(c) = &l.condition {
            if let Err(e) = Condition::parse(c) {
                problems.push(format!("{} of binding `{}`: {e}", l.name, l.input));
            }
        }
        let unconditional = app
            .listeners
            .iter()
            .filter(|o| o.input == l.input && o.condition.is_none())
            .count();
        if unconditional > 1 && !inputs.contains(&l.input.as_str()) {
            problems.push(format!(
                "binding `{}` has {unconditional} listeners without a condition; at most one can take what no condition matches",
                l.input
            ));
        }
        if !inputs.contains(&l.input.as_str()) {
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
        if app.outputs.contains(&l.input) {
            problems.push(format!(
                "binding `{}` is used both as an input and as an output",
                l.input
            ));
        }
    }
    for name in app.config.bindings.keys() {
        if !inputs.contains(&name.as_str()) && !app.outputs.contains(name) {
            problems.push(format!(
                "binding `{name}` is configured but no listener or output uses it (bindings in use: {})",
                inputs
                    .iter()
                    .copied()
                    .chain(app.outputs.iter().map(String::as_str))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    for input in &inputs {
        let b = app.config.binding(input);
        if b.consumer.batch_mode {
            problems.push(format!(
                "binding `{input}`: consumer.batchMode is not supported yet"
            ));
        }
    }
    for name in &app.outputs {
        let b = app.config.binding(name);
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
