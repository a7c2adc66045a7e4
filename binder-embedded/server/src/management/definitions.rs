//! RabbitMQ's definitions, `GET` and `POST /api/definitions[/{vhost}]`: the topology (and,
//! for the whole server, its users, virtual hosts and permissions) in the JSON that RabbitMQ
//! exports and imports, so that a topology moves between stream-broker and a RabbitMQ cluster
//! with `rabbitmqadmin export`/`import` or RabbitMQ's page.
//!
//! Export writes what RabbitMQ writes: the policies, the operator policies (as RabbitMQ, among
//! the `parameters`, of component `operator_policy`), every queue that no connection owns,
//! every exchange but the default one and the `amq.` ones, and every binding between them;
//! users with their `rabbit_password_hashing_sha256` hashes. Import sets operator policies
//! and policies and declares queues, exchanges and bindings as their AMQP methods would, in
//! the order RabbitMQ applies them, and stops at the first refusal, as RabbitMQ does (what
//! was declared before it stays); a policy the broker would refuse is refused before
//! anything is applied. Users, virtual hosts and permissions come from the server's
//! configuration file: an import may list them only as configured, and the only parameters
//! it takes are operator policies; anything else is refused by name before anything is
//! declared.

use std::collections::BTreeSet;

use axum::Json;
use axum::body::Body;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use stream_engine::{
    Broker, ExchangeKind, ExchangeOptions, FieldTable, PolicyDef, PolicyKind, QueueOptions,
};

use super::api::{body_object, read_body};
use super::error::ApiError;
use super::health::Ctx;
use super::json;
use super::policies::{policy_json, set_of_kind};
use super::users::{HASHING, permissions_json, user_json};
use crate::auth::{PasswordHash, User};
use crate::envelope::WireEnvelope;
use crate::server::Shared;

/// The largest definitions body imported: 64 MiB, a few hundred thousand queues (other
/// requests keep axum's 2 MiB). It is read only once an administrator has logged in.
const DEFINITIONS_LIMIT: usize = 64 << 20;

/// The version written as `rabbit_version`: the RabbitMQ whose format is followed.
const FORMAT_VERSION: &str = "3.10.0";

// ---- export ---------------------------------------------------------------------------

/// The queues, exchanges and bindings of one virtual host as RabbitMQ exports them, each
/// entry with its `vhost` when `with_vhost`.
fn topology<E: WireEnvelope>(
    vhost: &str,
    broker: &Broker<E>,
    with_vhost: bool,
) -> (Vec<Value>, Vec<Value>, Vec<Value>) {
    let tag = |mut entry: Value| {
        if with_vhost {
            entry["vhost"] = json!(vhost);
        }
        entry
    };
    let queues: Vec<_> = broker
        .queues()
        .into_iter()
        .filter(|q| !q.exclusive)
        .collect();
    let exported: BTreeSet<&str> = queues.iter().map(|q| q.name.as_str()).collect();
    let exchanges = broker
        .exchanges()
        .into_iter()
        .filter(|x| !x.name.is_empty() && !x.name.starts_with("amq."))
        .map(|x| {
            tag(json!({
                "name": x.name,
                "type": x.kind.as_str(),
                "durable": x.durable,
                "auto_delete": x.auto_delete,
                "internal": x.internal,
                "arguments": json::table(&x.arguments),
            }))
        })
        .collect();
    let bindings = broker
        .bindings()
        .into_iter()
        .filter(|b| {
            !b.source.is_empty()
                && if b.destination_is_exchange {
                    !b.destination.is_empty()
                } else {
                    exported.contains(b.destination.as_str())
                }
        })
        .map(|b| {
            tag(json!({
                "source": b.source,
                "destination": b.destination,
                "destination_type": if b.destination_is_exchange { "exchange" } else { "queue" },
                "routing_key": b.routing_key,
                "arguments": json::table(&b.arguments),
            }))
        })
        .collect();
    let queues = queues
        .iter()
        .map(|q| {
            tag(json!({
                "name": q.name,
                "durable": q.durable,
                "auto_delete": q.auto_delete,
                "arguments": json::table(&q.arguments),
            }))
        })
        .collect();
    (queues, exchanges, bindings)
}

/// The answer to an export: the definitions, as a download named by `?download=` if asked.
fn exported(definitions: Value, uri: &Uri) -> Result<Response, ApiError> {
    let mut download = None;
    for pair in uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
    {
        match pair.split_once('=') {
            Some(("download", name)) => download = Some(name.to_owned()),
            _ => return Err(ApiError::bad_request(format!("unknown parameter '{pair}'"))),
        }
    }
    let mut response = Json(definitions).into_response();
    if let Some(name) = download {
        let value = format!("attachment; filename={name}");
        let value = value
            .parse()
            .map_err(|_| ApiError::bad_request("download is not a usable file name"))?;
        response
            .headers_mut()
            .insert(header::CONTENT_DISPOSITION, value);
    }
    Ok(response)
}

/// `GET /api/definitions`: users, virtual hosts, permissions, queues, exchanges and
/// bindings of the whole server, for an administrator.
pub(crate) async fn export_all<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    uri: Uri,
) -> Result<Response, ApiError> {
    api.login(&headers, peer)?.administrator()?;
    let users = api.shared.users().all();
    let mut vhosts: Vec<&String> = api.shared.brokers().keys().collect();
    vhosts.sort();
    let (mut queues, mut exchanges, mut bindings) = (Vec::new(), Vec::new(), Vec::new());
    let (mut policies, mut parameters) = (Vec::new(), Vec::new());
    for vhost in &vhosts {
        let broker = &api.shared.brokers()[*vhost];
        policies.extend(broker.policies().iter().map(|p| policy_json(vhost, p)));
        parameters.extend(operator_parameters(vhost, broker));
        let (q, x, b) = topology(vhost, broker, true);
        queues.extend(q);
        exchanges.extend(x);
        bindings.extend(b);
    }
    let definitions = json!({
        "rabbit_version": FORMAT_VERSION,
        "rabbitmq_version": FORMAT_VERSION,
        "product_name": "stream-broker",
        "product_version": env!("CARGO_PKG_VERSION"),
        "users": users.iter().map(|u| user_json(u)).collect::<Vec<_>>(),
        "vhosts": vhosts.iter().map(|v| json!({"name": v})).collect::<Vec<_>>(),
        "permissions": permissions_json(&api),
        "topic_permissions": [],
        "parameters": parameters,
        "global_parameters": [],
        "policies": policies,
        "queues": queues,
        "exchanges": exchanges,
        "bindings": bindings,
    });
    exported(definitions, &uri)
}

/// `GET /api/definitions/{vhost}`: the queues, exchanges and bindings of one virtual host
/// (without `vhost` fields, as RabbitMQ writes them), for an administrator; 400
/// `vhost_not_found` for a virtual host there is not.
pub(crate) async fn export_vhost<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path(vhost): Path<String>,
    uri: Uri,
) -> Result<Response, ApiError> {
    api.login(&headers, peer)?.administrator()?;
    let broker = api
        .shared
        .brokers()
        .get(&vhost)
        .ok_or_else(|| ApiError::bad_request("vhost_not_found"))?;
    let (queues, exchanges, bindings) = topology(&vhost, broker, false);
    // RabbitMQ writes a policy's vhost even in one virtual host's definitions.
    let policies: Vec<Value> = broker
        .policies()
        .iter()
        .map(|p| policy_json(&vhost, p))
        .collect();
    let definitions = json!({
        "rabbit_version": FORMAT_VERSION,
        "parameters": operator_parameters(&vhost, broker),
        "policies": policies,
        "queues": queues,
        "exchanges": exchanges,
        "bindings": bindings,
    });
    exported(definitions, &uri)
}

/// A virtual host's operator policies as RabbitMQ's definitions list them: runtime
/// parameters of component `operator_policy` (with their `vhost`, even in one virtual host's
/// definitions).
fn operator_parameters<E: WireEnvelope>(vhost: &str, broker: &Broker<E>) -> Vec<Value> {
    let list = broker.operator_policies();
    list.iter()
        .map(|p| {
            json!({
                "value": {
                    "pattern": p.pattern,
                    "definition": json::table(&p.definition),
                    "priority": p.priority,
                    "apply-to": p.apply_to.as_str(),
                },
                "vhost": vhost,
                "component": "operator_policy",
                "name": p.name,
            })
        })
        .collect()
}

// ---- import ---------------------------------------------------------------------------

/// A queue, exchange or binding to declare, read from a definitions file.
#[derive(Debug)]
enum Declaration {
    Policy {
        vhost: String,
        kind: PolicyKind,
        policy: PolicyDef,
    },
    Queue {
        vhost: String,
        name: String,
        options: QueueOptions,
        arguments: FieldTable,
    },
    Exchange {
        vhost: String,
        name: String,
        kind: ExchangeKind,
        options: ExchangeOptions,
        arguments: FieldTable,
    },
    Binding {
        vhost: String,
        source: String,
        destination: String,
        to_exchange: bool,
        routing_key: String,
        arguments: FieldTable,
    },
}

/// Where a declaration comes from: its section and its index there.
#[derive(Debug, Clone, Copy)]
struct Origin(&'static str, usize);

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}[{}]", self.0, self.1)
    }
}

impl Declaration {
    /// Whether RabbitMQ's import skips it: a queue or exchange whose name starts with
    /// `amq.` (reserved: a server-named queue, or one of the broker's own exchanges), and a
    /// binding to such a queue.
    fn skipped(&self) -> bool {
        match self {
            Declaration::Queue { name, .. } | Declaration::Exchange { name, .. } => {
                name.starts_with("amq.")
            }
            Declaration::Binding {
                destination,
                to_exchange: false,
                ..
            } => destination.starts_with("amq."),
            Declaration::Binding { .. } | Declaration::Policy { .. } => false,
        }
    }

    fn vhost(&self) -> &str {
        match self {
            Declaration::Policy { vhost, .. }
            | Declaration::Queue { vhost, .. }
            | Declaration::Exchange { vhost, .. }
            | Declaration::Binding { vhost, .. } => vhost,
        }
    }

    /// Why it cannot be declared whatever the broker holds: a name AMQP cannot carry, the
    /// default exchange (as `topology`'s checks of a `PUT` or `POST` say), or a policy the
    /// broker refuses.
    fn problem(&self) -> Option<String> {
        use super::topology::{exchange_name_problem, queue_name_problem, routing_key_problem};
        match self {
            Declaration::Policy { kind, policy, .. } => {
                policy.validate_as(*kind).err().map(|e| e.text)
            }
            Declaration::Queue { name, .. } => queue_name_problem(name),
            Declaration::Exchange { name, .. } => exchange_name_problem(name),
            Declaration::Binding {
                source,
                destination,
                to_exchange,
                routing_key,
                ..
            } => exchange_name_problem(source)
                .map(|p| format!("source: {p}"))
                .or_else(|| {
                    if *to_exchange {
                        exchange_name_problem(destination)
                    } else {
                        queue_name_problem(destination)
                    }
                    .map(|p| format!("destination: {p}"))
                })
                .or_else(|| routing_key_problem(routing_key)),
        }
    }
}

/// What is wrong with the entry `index` of `section`.
fn refused(section: &str, index: usize, problem: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(format!("{section}[{index}]: {problem}"))
}

/// A section's entries (absent: none).
fn entries<'a>(defs: &'a Map<String, Value>, section: &str) -> Result<&'a [Value], ApiError> {
    match defs.get(section) {
        None => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(_) => Err(ApiError::bad_request(format!("{section} must be a list"))),
    }
}

/// Reads one entry's fields: each key must be one of `known`.
fn fields<'a>(
    section: &str,
    index: usize,
    entry: &'a Value,
    known: &[&str],
) -> Result<&'a Map<String, Value>, ApiError> {
    let map = entry
        .as_object()
        .ok_or_else(|| refused(section, index, "not an object"))?;
    if let Some(other) = map.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(refused(section, index, format!("unknown field '{other}'")));
    }
    Ok(map)
}

fn text<'a>(
    section: &str,
    index: usize,
    map: &'a Map<String, Value>,
    key: &str,
) -> Result<&'a str, ApiError> {
    map.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| refused(section, index, format!("{key} must be a string")))
}

fn flag(
    section: &str,
    index: usize,
    map: &Map<String, Value>,
    key: &str,
) -> Result<bool, ApiError> {
    match map.get(key) {
        None => Ok(false),
        Some(v) => json::as_bool(v)
            .ok_or_else(|| refused(section, index, format!("{key} must be true or false"))),
    }
}

fn arguments(
    section: &str,
    index: usize,
    map: &Map<String, Value>,
) -> Result<FieldTable, ApiError> {
    match map.get("arguments") {
        None | Some(Value::Null) => Ok(FieldTable::new()),
        Some(Value::Object(args)) => Ok(json::to_table(args)),
        Some(_) => Err(refused(section, index, "arguments must be an object")),
    }
}

/// The virtual host of an entry: in one virtual host's import that one, whatever the entry's
/// own `vhost` field says (RabbitMQ ignores it there too, so one virtual host's export,
/// whose policies name it, imports into another), else the entry's `vhost` field.
fn entry_vhost(
    section: &str,
    index: usize,
    map: &Map<String, Value>,
    only: Option<&str>,
) -> Result<String, ApiError> {
    match (only, map.get("vhost")) {
        (Some(only), _) => Ok(only.to_owned()),
        (None, None) => Err(refused(section, index, "vhost is missing")),
        (None, Some(_)) => text(section, index, map, "vhost").map(str::to_owned),
    }
}

/// The operator policies, policies, queues, exchanges and bindings of a definitions file,
/// read and checked, in the order they are applied (RabbitMQ's).
fn declarations(
    defs: &Map<String, Value>,
    only: Option<&str>,
) -> Result<Vec<(Origin, Declaration)>, ApiError> {
    let mut out = Vec::new();
    const PARAMETER: &[&str] = &["vhost", "component", "name", "value"];
    for (i, entry) in entries(defs, "parameters")?.iter().enumerate() {
        let map = fields("parameters", i, entry, PARAMETER)?;
        let component = text("parameters", i, map, "component")?;
        if component != "operator_policy" {
            return Err(refused(
                "parameters",
                i,
                format!(
                    "component '{component}' is not supported by stream-broker (its only \
                     parameters are operator policies, component 'operator_policy'); remove \
                     it from the file"
                ),
            ));
        }
        let vhost = entry_vhost("parameters", i, map, only)?;
        let name = text("parameters", i, map, "name")?;
        let value = map
            .get("value")
            .and_then(Value::as_object)
            .ok_or_else(|| refused("parameters", i, "value must be an object"))?;
        let policy = super::policies::parse(value, &vhost, name)
            .map_err(|e| refused("parameters", i, e.reason))?;
        let kind = PolicyKind::Operator;
        let declaration = Declaration::Policy {
            vhost,
            kind,
            policy,
        };
        out.push((Origin("parameters", i), declaration));
    }
    const POLICY: &[&str] = &[
        "vhost",
        "name",
        "pattern",
        "apply-to",
        "definition",
        "priority",
    ];
    for (i, entry) in entries(defs, "policies")?.iter().enumerate() {
        let map = fields("policies", i, entry, POLICY)?;
        let vhost = entry_vhost("policies", i, map, only)?;
        let name = text("policies", i, map, "name")?;
        // Its `vhost` is `entry_vhost`'s business (ignored in one virtual host's import).
        let mut fields = map.clone();
        fields.remove("vhost");
        let policy = super::policies::parse(&fields, &vhost, name)
            .map_err(|e| refused("policies", i, e.reason))?;
        let kind = PolicyKind::Policy;
        let declaration = Declaration::Policy {
            vhost,
            kind,
            policy,
        };
        out.push((Origin("policies", i), declaration));
    }
    const QUEUE: &[&str] = &["name", "vhost", "durable", "auto_delete", "arguments"];
    for (i, entry) in entries(defs, "queues")?.iter().enumerate() {
        let map = fields("queues", i, entry, QUEUE)?;
        out.push((
            Origin("queues", i),
            Declaration::Queue {
                vhost: entry_vhost("queues", i, map, only)?,
                name: text("queues", i, map, "name")?.to_owned(),
                options: QueueOptions {
                    durable: flag("queues", i, map, "durable")?,
                    auto_delete: flag("queues", i, map, "auto_delete")?,
                    ..QueueOptions::default()
                },
                arguments: arguments("queues", i, map)?,
            },
        ));
    }
    const EXCHANGE: &[&str] = &[
        "name",
        "vhost",
        "type",
        "durable",
        "auto_delete",
        "internal",
        "arguments",
    ];
    for (i, entry) in entries(defs, "exchanges")?.iter().enumerate() {
        let map = fields("exchanges", i, entry, EXCHANGE)?;
        let kind_name = text("exchanges", i, map, "type")?;
        let kind = ExchangeKind::from_name(kind_name).ok_or_else(|| {
            refused(
                "exchanges",
                i,
                format!("type '{kind_name}' is not direct, fanout, topic or headers"),
            )
        })?;
        out.push((
            Origin("exchanges", i),
            Declaration::Exchange {
                vhost: entry_vhost("exchanges", i, map, only)?,
                name: text("exchanges", i, map, "name")?.to_owned(),
                kind,
                options: ExchangeOptions {
                    durable: flag("exchanges", i, map, "durable")?,
                    auto_delete: flag("exchanges", i, map, "auto_delete")?,
                    internal: flag("exchanges", i, map, "internal")?,
                    ..ExchangeOptions::default()
                },
                arguments: arguments("exchanges", i, map)?,
            },
        ));
    }
    const BINDING: &[&str] = &[
        "source",
        "vhost",
        "destination",
        "destination_type",
        "routing_key",
        "arguments",
    ];
    for (i, entry) in entries(defs, "bindings")?.iter().enumerate() {
        let map = fields("bindings", i, entry, BINDING)?;
        let to_exchange = match text("bindings", i, map, "destination_type")? {
            "queue" => false,
            "exchange" => true,
            other => {
                return Err(refused(
                    "bindings",
                    i,
                    format!("destination_type '{other}' is not queue or exchange"),
                ));
            }
        };
        out.push((
            Origin("bindings", i),
            Declaration::Binding {
                vhost: entry_vhost("bindings", i, map, only)?,
                source: text("bindings", i, map, "source")?.to_owned(),
                destination: text("bindings", i, map, "destination")?.to_owned(),
                to_exchange,
                routing_key: match map.get("routing_key") {
                    None => String::new(),
                    Some(_) => text("bindings", i, map, "routing_key")?.to_owned(),
                },
                arguments: arguments("bindings", i, map)?,
            },
        ));
    }
    Ok(out)
}

/// The tags of a user entry: a list, or RabbitMQ's older comma-separated string.
fn tags_of(value: Option<&Value>) -> Option<BTreeSet<String>> {
    match value {
        None => Some(BTreeSet::new()),
        Some(Value::String(s)) => Some(
            s.split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_owned)
                .collect(),
        ),
        Some(Value::Array(items)) => items
            .iter()
            .map(|t| t.as_str().map(str::to_owned))
            .collect(),
        Some(_) => None,
    }
}

/// Whether an exported password hash is the configured user's password: the same hash, or
/// a hash of its configured plain password.
fn same_password(user: &User, hash: &str) -> bool {
    user.password_hash() == hash
        || PasswordHash::parse(hash).is_ok_and(|h| {
            user.plain_password()
                .is_some_and(|p| h.verify(p.as_bytes()))
        })
}

/// Checks that users, virtual hosts and permissions listed are exactly as configured, and
/// that no section this broker does not support holds anything.
fn as_configured<E: WireEnvelope>(
    shared: &Shared<E>,
    defs: &Map<String, Value>,
    whole_server: bool,
) -> Result<(), ApiError> {
    const KNOWN: &[&str] = &[
        "rabbit_version",
        "rabbitmq_version",
        "product_name",
        "product_version",
        "users",
        "vhosts",
        "permissions",
        "topic_permissions",
        "parameters",
        "global_parameters",
        "policies",
        "queues",
        "exchanges",
        "bindings",
    ];
    if let Some(other) = defs.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return Err(ApiError::bad_request(format!("unknown section '{other}'")));
    }
    for section in ["topic_permissions", "global_parameters"] {
        // RabbitMQ's export of a node carries the identity of the cluster it came from,
        // which names that cluster, not a setting for this one.
        let settings = entries(defs, section)?
            .iter()
            .filter(|e| !(section == "global_parameters" && e["name"] == "internal_cluster_id"));
        if let Some(first) = settings.into_iter().next() {
            return Err(ApiError::bad_request(format!(
                "{section} are not supported by stream-broker (first: {first}); remove them \
                 from the file"
            )));
        }
    }
    if !whole_server {
        if let Some(section) = ["users", "vhosts", "permissions"]
            .into_iter()
            .find(|s| defs.contains_key(*s))
        {
            return Err(ApiError::bad_request(format!(
                "{section} belong to the whole server's definitions (POST /api/definitions)"
            )));
        }
        return Ok(());
    }
    const FROM_CONFIG: &str = "stream-broker's users, virtual hosts and permissions come \
                               from its configuration file; list them as configured, or \
                               leave them out";
    let users = shared.users();
    for (i, entry) in entries(defs, "users")?.iter().enumerate() {
        let map = fields(
            "users",
            i,
            entry,
            &[
                "name",
                "password_hash",
                "hashing_algorithm",
                "tags",
                "limits",
            ],
        )?;
        let name = text("users", i, map, "name")?;
        let user = users.named(name).ok_or_else(|| {
            refused(
                "users",
                i,
                format!("no user '{name}' is configured: {FROM_CONFIG}"),
            )
        })?;
        if map
            .get("hashing_algorithm")
            .is_some_and(|a| a.as_str() != Some(HASHING))
        {
            return Err(refused(
                "users",
                i,
                format!("hashing_algorithm must be {HASHING}"),
            ));
        }
        let hash = text("users", i, map, "password_hash")?;
        if !same_password(user, hash) {
            return Err(refused(
                "users",
                i,
                format!(
                    "'{name}''s password_hash is neither the configured hash nor a hash of \
                     the configured password: {FROM_CONFIG}"
                ),
            ));
        }
        let configured: BTreeSet<String> = user.tags.iter().cloned().collect();
        if tags_of(map.get("tags")).as_ref() != Some(&configured) {
            return Err(refused(
                "users",
                i,
                format!("'{name}''s tags are not the configured ones: {FROM_CONFIG}"),
            ));
        }
        if map
            .get("limits")
            .is_some_and(|l| l.as_object().is_none_or(|l| !l.is_empty()))
        {
            return Err(refused("users", i, "user limits are not supported"));
        }
    }
    for (i, entry) in entries(defs, "vhosts")?.iter().enumerate() {
        let map = fields("vhosts", i, entry, &["name", "limits", "metadata"])?;
        let name = text("vhosts", i, map, "name")?;
        if !shared.brokers().contains_key(name) {
            return Err(refused(
                "vhosts",
                i,
                format!("no virtual host '{name}' is configured: {FROM_CONFIG}"),
            ));
        }
        let empty = |v: &Value| match v {
            Value::Array(a) => a.is_empty(),
            Value::Object(o) => o.values().all(|v| match v {
                Value::String(s) => s.is_empty(),
                Value::Array(a) => a.is_empty(),
                _ => false,
            }),
            _ => false,
        };
        if let Some(key) = ["limits", "metadata"]
            .into_iter()
            .find(|k| map.get(*k).is_some_and(|v| !empty(v)))
        {
            return Err(refused(
                "vhosts",
                i,
                format!("virtual host {key} are not supported"),
            ));
        }
    }
    for (i, entry) in entries(defs, "permissions")?.iter().enumerate() {
        let map = fields(
            "permissions",
            i,
            entry,
            &["user", "vhost", "configure", "write", "read"],
        )?;
        let (name, vhost) = (
            text("permissions", i, map, "user")?,
            text("permissions", i, map, "vhost")?,
        );
        let listed = [
            text("permissions", i, map, "configure")?,
            text("permissions", i, map, "write")?,
            text("permissions", i, map, "read")?,
        ];
        let configured = users
            .named(name)
            .and_then(|u| u.permissions(vhost))
            .map(|p| p.sources());
        if configured != Some(listed) {
            return Err(refused(
                "permissions",
                i,
                format!("'{name}' on '{vhost}' is not as configured: {FROM_CONFIG}"),
            ));
        }
    }
    Ok(())
}

/// Declares one definition for `who` (an administrator, or the server's start), on a
/// connection of its own to its virtual host's broker.
fn declare<E: WireEnvelope>(shared: &Shared<E>, who: &str, d: Declaration) -> Result<(), ApiError> {
    let vhost = d.vhost().to_owned();
    let broker = shared
        .brokers()
        .get(&vhost)
        .ok_or_else(|| ApiError::bad_request(format!("no virtual host '{vhost}'")))?;
    let conn = broker.connect();
    let ch = conn.open_channel()?;
    let what = match d {
        Declaration::Policy { kind, policy, .. } => {
            let name = policy.name.clone();
            set_of_kind(broker, kind, policy)
                .map(drop)
                .map_err(|e| (format!("{} '{name}'", kind.noun()), e))
        }
        Declaration::Queue {
            name,
            options,
            arguments,
            ..
        } => ch
            .queue_declare(&name, options, arguments)
            .map(drop)
            .map_err(|e| (format!("queue '{name}'"), e)),
        Declaration::Exchange {
            name,
            kind,
            options,
            arguments,
            ..
        } => ch
            .exchange_declare(&name, kind, options, arguments)
            .map_err(|e| (format!("exchange '{name}'"), e)),
        Declaration::Binding {
            source,
            destination,
            to_exchange,
            routing_key,
            arguments,
            ..
        } => if to_exchange {
            ch.exchange_bind(&destination, &source, &routing_key, arguments)
        } else {
            ch.queue_bind(&destination, &source, &routing_key, arguments)
        }
        .map_err(|e| (format!("binding of '{destination}' to '{source}'"), e)),
    };
    what.map_err(|(what, e)| {
        ApiError::bad_request(format!("{what} in virtual host '{vhost}': {}", e.text))
    })?;
    tracing::debug!(%who, %vhost, "definition imported");
    Ok(())
}

/// Imports a definitions body (for one virtual host with `only`) for `who`; how many
/// declarations it applied.
fn import<E: WireEnvelope>(
    shared: &Shared<E>,
    who: &str,
    body: &[u8],
    only: Option<&str>,
) -> Result<usize, ApiError> {
    let defs = body_object(body)?;
    as_configured(shared, &defs, only.is_none())?;
    let declarations = declarations(&defs, only)?;
    for (origin, d) in &declarations {
        if !shared.brokers().contains_key(d.vhost()) {
            return Err(ApiError::bad_request(format!(
                "{origin}: no virtual host '{}' is configured",
                d.vhost()
            )));
        }
        if let Some(problem) = d.problem() {
            return Err(ApiError::bad_request(format!("{origin}: {problem}")));
        }
    }
    let (skipped, declarations): (Vec<_>, Vec<_>) =
        declarations.into_iter().partition(|(_, d)| d.skipped());
    for (origin, _) in &skipped {
        tracing::warn!(%origin, "definitions import skips a name starting with 'amq.' (reserved), as RabbitMQ does");
    }
    let count = declarations.len();
    for (done, (origin, d)) in declarations.into_iter().enumerate() {
        declare(shared, who, d).map_err(|e| ApiError {
            reason: format!(
                "{origin}: {}; of the {count} declarations, the {done} before this one were \
                 applied and stay",
                e.reason
            ),
            ..e
        })?;
    }
    tracing::info!(%who, vhost = only.unwrap_or("(all)"), count, skipped = skipped.len(), "definitions imported");
    Ok(count)
}

/// Imports the whole server's definitions from a file's contents at start
/// ([`ServerConfig::load_definitions`](crate::ServerConfig::load_definitions)), as
/// `POST /api/definitions` would; how many declarations it applied, or why it stopped.
pub(crate) fn load<E: WireEnvelope>(shared: &Shared<E>, body: &[u8]) -> Result<usize, String> {
    import(shared, "load_definitions", body, None).map_err(|e| e.reason)
}

/// `POST /api/definitions`: imports the whole server's definitions (204), for an
/// administrator.
pub(crate) async fn import_all<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    body: Body,
) -> Result<StatusCode, ApiError> {
    let login = api.login(&headers, peer)?;
    login.administrator()?;
    let body = read_body(body, DEFINITIONS_LIMIT).await?;
    import(&api.shared, &login.user.name, &body, None).map(|_| StatusCode::NO_CONTENT)
}

/// `POST /api/definitions/{vhost}`: imports one virtual host's queues, exchanges and
/// bindings (204), for an administrator; 404 for a virtual host there is not.
pub(crate) async fn import_vhost<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path(vhost): Path<String>,
    body: Body,
) -> Result<StatusCode, ApiError> {
    let login = api.login(&headers, peer)?;
    login.administrator()?;
    if !api.shared.brokers().contains_key(&vhost) {
        return Err(ApiError::not_found());
    }
    let body = read_body(body, DEFINITIONS_LIMIT).await?;
    import(&api.shared, &login.user.name, &body, Some(&vhost)).map(|_| StatusCode::NO_CONTENT)
}
