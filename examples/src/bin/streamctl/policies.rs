//! `set_policy`, `clear_policy` and `list_policies`, as `rabbitmqctl` names and prints them:
//! through the management API (RabbitMQ's plugin or `stream-broker`'s), in the target's
//! virtual host (`-p`, else the AMQP URI's).

use binder_rabbit::uri_component;
use serde_json::{Map, Value, json};

use crate::broker::{Target, TargetError};
use crate::listing::Format;

/// What `set_policy` sends besides the name.
pub struct PolicySpec<'a> {
    pub pattern: &'a str,
    /// The definition, a JSON object (`{"max-length": 1000}`).
    pub definition: &'a str,
    pub priority: i64,
    pub apply_to: &'a str,
}

fn failed(e: impl std::fmt::Display) -> TargetError {
    TargetError::Failed(e.to_string())
}

/// Sets (or replaces) the policy `name`.
pub fn set(target: &Target, name: &str, spec: &PolicySpec<'_>) -> Result<(), TargetError> {
    // A command-line error: exit status 2, before anything is asked of the broker.
    let definition: Map<String, Value> = serde_json::from_str(spec.definition).map_err(|e| {
        TargetError::Config(format!(
            "the definition must be a JSON object ({e}): {}",
            spec.definition
        ))
    })?;
    let api = target.required_management("set_policy", "set a policy")?;
    let vhost = target.resolve(None)?.vhost;
    if !target.quiet {
        outln!(
            "Setting policy \"{name}\" for pattern \"{}\" to \"{}\" with priority \"{}\" for vhost \"{vhost}\" ...",
            spec.pattern,
            spec.definition,
            spec.priority
        );
    }
    let body = json!({
        "pattern": spec.pattern,
        "definition": definition,
        "priority": spec.priority,
        "apply-to": spec.apply_to,
    });
    api.put(
        &format!("policies/{}/{}", uri_component(&vhost), uri_component(name)),
        body.to_string().as_bytes(),
    )
    .map_err(failed)
}

/// Clears the policy `name`.
pub fn clear(target: &Target, name: &str) -> Result<(), TargetError> {
    let api = target.required_management("clear_policy", "clear a policy")?;
    let vhost = target.resolve(None)?.vhost;
    if !target.quiet {
        outln!("Clearing policy \"{name}\" on vhost \"{vhost}\" ...");
    }
    api.delete(
        &format!("policies/{}/{}", uri_component(&vhost), uri_component(name)),
        &[],
    )
    .map_err(failed)
}

/// The columns of `list_policies`, in `rabbitmqctl`'s order.
const COLUMNS: [&str; 6] = [
    "vhost",
    "name",
    "pattern",
    "apply-to",
    "definition",
    "priority",
];

/// Lists the virtual host's policies.
pub fn list(target: &Target, format: Format) -> Result<(), TargetError> {
    let api = target.required_management("list_policies", "list policies")?;
    let vhost = target.resolve(None)?.vhost;
    let policies = match api
        .get(&format!("policies/{}", uri_component(&vhost)))
        .map_err(failed)?
    {
        Value::Array(items) => items,
        other => return Err(failed(format!("expected a JSON array, got {other}"))),
    };
    // Strings bare; the definition as compact JSON, as rabbitmqctl prints it.
    let cell = |p: &Value, column: &str| match &p[column] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    match format {
        Format::Text => {
            if !target.quiet {
                outln!("Listing policies for vhost \"{vhost}\" ...");
            }
            if !policies.is_empty() {
                outln!("{}", COLUMNS.join("\t"));
            }
            for p in &policies {
                let row: Vec<String> = COLUMNS.iter().map(|c| cell(p, c)).collect();
                outln!("{}", row.join("\t"));
            }
        }
        Format::Json => outln!("{}", Value::Array(policies)),
    }
    Ok(())
}
