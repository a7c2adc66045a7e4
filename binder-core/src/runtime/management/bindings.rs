//! The bindings endpoint's documents and state changes, in Spring Cloud Stream's shapes:
//! each binding as SCSt's `Binding` serializes (`bindingName`, `name` — the destination —,
//! `group`, `pausable`, `state`, `paused`, `input`, `binderName`, `binderType`,
//! `extendedInfo`), and `{"state": "STOPPED|STARTED|PAUSED|RESUMED"}` to change one.

use serde_json::{Value, json};

use super::super::control::{BindingInfo, Control};
use super::super::lifecycle::BindingState;

/// A binding's document.
pub(crate) fn describe(control: &Control, info: &BindingInfo) -> Value {
    let state = control.state(&info.name);
    let text = match state {
        Some(BindingState::Running | BindingState::Recovering) => "running",
        Some(BindingState::Paused) => "paused",
        Some(BindingState::Stopped) => "stopped",
        // Shutting down: its control is gone.
        None => "N/A",
    };
    json!({
        "bindingName": info.name,
        "name": info.destination,
        "group": info.group,
        "pausable": info.input,
        "state": text,
        "paused": state == Some(BindingState::Paused),
        "input": info.input,
        "binderName": info.binder,
        "binderType": info.binder_type,
        "extendedInfo": {
            "bindingDestination": info.destination,
            "recovering": state == Some(BindingState::Recovering),
        },
    })
}

/// Every binding's document, by name.
pub(crate) fn list(control: &Control) -> Value {
    Value::Array(
        control
            .bindings
            .iter()
            .map(|b| describe(control, b))
            .collect(),
    )
}

/// The state a change asks for: SCSt's `STOPPED`, `STARTED`, `PAUSED`, `RESUMED` (in any
/// case), as `{"state": ...}`.
pub(crate) fn requested(body: &[u8]) -> Result<BindingState, String> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
    let Some(state) = value.get("state").and_then(Value::as_str) else {
        return Err(r#"expected {"state": "STOPPED|STARTED|PAUSED|RESUMED"}"#.to_owned());
    };
    match state.to_ascii_uppercase().as_str() {
        "STOPPED" => Ok(BindingState::Stopped),
        "STARTED" | "RESUMED" => Ok(BindingState::Running),
        "PAUSED" => Ok(BindingState::Paused),
        _ => Err(format!(
            "unknown state `{state}`; expected one of STOPPED, STARTED, PAUSED, RESUMED"
        )),
    }
}
