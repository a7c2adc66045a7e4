//! `set_policy`, `clear_policy` and `list_policies`, and the same for operator policies
//! (`set_operator_policy`, ...), as `rabbitmqctl` names and prints them: through the
//! management API (RabbitMQ's plugin or `stream-broker`'s), in the target's virtual host
//! (`-p`, else the AMQP URI's).

use binder_rabbit::uri_component;
use serde_json::{Map, Value, json};

use crate::broker::{Target, TargetError};
use crate::listing::Format;

/// Policies or operator policies: where the API keeps them and how `rabbitmqctl` speaks of
/// them.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    Policy,
    Operator,
}

impl Kind {
    /// The API's path for them, under `/api/`.
    fn path(self) -> &'static str {
        match self {
            Kind::Policy => "policies",
            Kind::Operator => "operator-policies",
        }
    }

    /// The verb doing `action` on them, and what AMQP 0-9-1 has no way to do without the
    /// API.
    fn verb(self, action: Action) -> (&'static str, &'static str) {
        match (self, action) {
            (Kind::Policy, Action::Set) => ("set_policy", "set a policy"),
            (Kind::Policy, Action::Clear) => ("clear_policy", "clear a policy"),
            (Kind::Policy, Action::List) => ("list_policies", "list policies"),
            (Kind::Operator, Action::Set) => ("set_operator_policy", "set an operator policy"),
            (Kind::Operator, Action::Clear) => {
                ("clear_operator_policy", "clear an operator policy")
            }
            (Kind::Operator, Action::List) => ("list_operator_policies", "list operator policies"),
        }
    }

    /// How `rabbitmqctl`'s informational lines name one.
    fn noun(self) -> &'static str {
        match self {
            Kind::Policy => "policy",
            Kind::Operator => "operator policy",
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Action {
    Set,
    Clear,
    List,
}

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
pub fn set(
    target: &Target,
    kind: Kind,
    name: &str,
    spec: &PolicySpec<'_>,
) -> Result<(), TargetError> {
    // A command-line error: exit status 2, before anything is asked of the broker.
    let definition: Map<String, Value> = serde_json::from_str(spec.definition).map_err(|e| {
        TargetError::Config(format!(
            "the definition must be a JSON object ({e}): {}",
            spec.definition
        ))
    })?;
    let (verb, what) = kind.verb(Action::Set);
    let api = target.required_management(verb, what)?;
    let vhost = target.resolve(None)?.vhost;
    if !target.quiet {
        let override_ = if matches!(kind, Kind::Operator) {
            " override"
        } else {
            ""
        };
        outln!(
            "Setting {}{override_} \"{name}\" for pattern \"{}\" to \"{}\" with priority \"{}\" for vhost \"{vhost}\" ...",
            kind.noun(),
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
    api.put(&one(kind, &vhost, name), body.to_string().as_bytes())
        .map_err(failed)
}

/// The API path of the policy `name` in `vhost`.
fn one(kind: Kind, vhost: &str, name: &str) -> String {
    format!(
        "{}/{}/{}",
        kind.path(),
        uri_component(vhost),
        uri_component(name)
    )
}

/// Clears the policy `name`.
pub fn clear(target: &Target, kind: Kind, name: &str) -> Result<(), TargetError> {
    let (verb, what) = kind.verb(Action::Clear);
    let api = target.required_management(verb, what)?;
    let vhost = target.resolve(None)?.vhost;
    if !target.quiet {
        outln!(
            "Clearing {} \"{name}\" on vhost \"{vhost}\" ...",
            kind.noun()
        );
    }
    api.delete(&one(kind, &vhost, name), &[]).map_err(failed)
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
pub fn list(target: &Target, kind: Kind, format: Format) -> Result<(), TargetError> {
    let (verb, what) = kind.verb(Action::List);
    let api = target.required_management(verb, what)?;
    let vhost = target.resolve(None)?.vhost;
    let policies = match api
        .get(&format!("{}/{}", kind.path(), uri_component(&vhost)))
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
                match kind {
                    Kind::Policy => outln!("Listing policies for vhost \"{vhost}\" ..."),
                    Kind::Operator => {
                        outln!("Listing operator policy overrides for vhost \"{vhost}\" ...")
                    }
                }
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
