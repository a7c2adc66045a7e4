//! Declaring and deleting over HTTP, in RabbitMQ's paths and shapes: `PUT` and `DELETE`
//! `/api/queues/{vhost}/{name}` and `/api/exchanges/{vhost}/{name}`, and bindings under
//! `/api/bindings/{vhost}/e/{source}/{q|e}/{destination}` (`POST` to bind, `GET` to list,
//! `DELETE .../{props}` to unbind). Each runs as its AMQP method would, on a connection of
//! its own to the virtual host's broker, with the same permission checks; what the engine
//! refuses answers as RabbitMQ's plugin does (400 for an inequivalent declaration, 403, 404).

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};
use stream_engine::{Broker, ExchangeKind, ExchangeOptions, FieldTable, QueueOptions};

use super::Api;
use super::api::{BODY_LIMIT, binding_json, body_object, exchange_name, read_body, same_as_path};
use super::binding_key::{names, properties_key};
use super::error::ApiError;
use super::health::Ctx;
use super::json;
use super::login::Login;
use crate::auth::{Access, Resource};
use crate::envelope::WireEnvelope;

/// 201 when the declaration created it, 204 when it existed already (as RabbitMQ answers a
/// `PUT`).
fn declared(created: bool) -> StatusCode {
    if created {
        StatusCode::CREATED
    } else {
        StatusCode::NO_CONTENT
    }
}

/// A `PUT` body: an empty one is an empty object.
fn put_body(body: &Bytes) -> Result<Map<String, Value>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        Ok(Map::new())
    } else {
        body_object(body)
    }
}

fn flag(key: &str, value: &Value) -> Result<bool, ApiError> {
    json::as_bool(value)
        .ok_or_else(|| ApiError::bad_request(format!("{key} must be true or false")))
}

fn arguments(value: &Value) -> Result<FieldTable, ApiError> {
    value
        .as_object()
        .map(json::to_table)
        .ok_or_else(|| ApiError::bad_request("arguments must be an object"))
}

/// AMQP's limit on a queue or exchange name and a routing key (a short string).
const NAME_LIMIT: usize = 255;

/// Why a declaration may not use this queue name: 1 to 255 bytes (an empty one asks AMQP for
/// a server-named queue, which only its own connection could use).
pub(super) fn queue_name_problem(name: &str) -> Option<String> {
    (name.is_empty() || name.len() > NAME_LIMIT)
        .then(|| format!("a queue name is 1 to {NAME_LIMIT} bytes long"))
}

/// Why a declaration may not use this exchange name: 1 to 255 bytes.
pub(super) fn exchange_name_problem(name: &str) -> Option<String> {
    (name.is_empty() || name.len() > NAME_LIMIT)
        .then(|| format!("an exchange name is 1 to {NAME_LIMIT} bytes long"))
}

/// Why a binding may not use this routing key: at most 255 bytes.
pub(super) fn routing_key_problem(key: &str) -> Option<String> {
    (key.len() > NAME_LIMIT).then(|| format!("a routing key is at most {NAME_LIMIT} bytes long"))
}

impl<E: WireEnvelope> Api<E> {
    /// A body's `node`: this node is the only one a queue or exchange can be placed on.
    fn on_this_node(&self, value: &Value) -> Result<(), ApiError> {
        if value.as_str() == Some(self.node().as_str()) {
            Ok(())
        } else {
            Err(ApiError::bad_request(format!(
                "node {value} is not this node ('{}'): a single node places everything on itself",
                self.node()
            )))
        }
    }
}

/// `PUT /api/queues/{vhost}/{name}`: `queue.declare` with the body's `durable`,
/// `auto_delete` (both default false, as the method's) and `arguments`; needs configure on
/// the queue.
pub(crate) async fn declare_queue<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path((vhost, name)): Path<(String, String)>,
    body: Body,
) -> Result<StatusCode, ApiError> {
    let login = api.login(&headers, peer)?;
    let broker = api.broker(&login, &vhost)?;
    let body = read_body(body, BODY_LIMIT).await?;
    let mut options = QueueOptions::default();
    let mut args = FieldTable::new();
    let mut queue_type = None;
    for (key, value) in &put_body(&body)? {
        match key.as_str() {
            "durable" => options.durable = flag(key, value)?,
            "auto_delete" => options.auto_delete = flag(key, value)?,
            "arguments" => args = arguments(value)?,
            "node" => api.on_this_node(value)?,
            // `rabbitmqadmin declare queue queue_type=...` sends it besides `x-queue-type`.
            "queue_type" => queue_type = Some(value.clone()),
            "vhost" => same_as_path(key, value, &vhost)?,
            "name" => same_as_path(key, value, &name)?,
            other => return Err(ApiError::bad_request(format!("unknown field '{other}'"))),
        }
    }
    if let Some(queue_type) = queue_type {
        let Value::String(queue_type) = queue_type else {
            return Err(ApiError::bad_request("queue_type must be a string"));
        };
        match args.get_str("x-queue-type") {
            None => {
                args.insert("x-queue-type", queue_type.as_str());
            }
            Some(t) if t == queue_type => {}
            Some(t) => {
                return Err(ApiError::bad_request(format!(
                    "queue_type '{queue_type}' is not the arguments' x-queue-type '{t}'"
                )));
            }
        }
    }
    if let Some(problem) = queue_name_problem(&name) {
        return Err(ApiError::bad_request(problem));
    }
    login.may(&vhost, Access::Configure, Resource::Queue, &name)?;
    let created = broker.queue_counts(&name).is_none();
    if created {
        login.may_target(&vhost, Resource::Queue, &name, &args)?;
    }
    let conn = broker.connect();
    conn.open_channel()?.queue_declare(&name, options, args)?;
    tracing::info!(user = %login.user.name, %vhost, queue = %name, "queue declared over HTTP");
    Ok(declared(created))
}

/// `DELETE /api/queues/{vhost}/{name}[?if-unused=true][&if-empty=true]`: `queue.delete`;
/// needs configure on the queue. 404 for a missing queue.
pub(crate) async fn delete_queue<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path((vhost, name)): Path<(String, String)>,
    uri: Uri,
) -> Result<StatusCode, ApiError> {
    let login = api.login(&headers, peer)?;
    let broker = api.broker(&login, &vhost)?;
    let conditions = Conditions::of(&uri, true)?;
    login.may(&vhost, Access::Configure, Resource::Queue, &name)?;
    if broker.queue_counts(&name).is_none() {
        return Err(ApiError::not_found());
    }
    let conn = broker.connect();
    let removed =
        conn.open_channel()?
            .queue_delete(&name, conditions.if_unused, conditions.if_empty)?;
    tracing::info!(user = %login.user.name, %vhost, queue = %name, removed, "queue deleted over HTTP");
    Ok(StatusCode::NO_CONTENT)
}

/// A delete's conditions, from its query: `if-unused` and (for a queue) `if-empty`, each
/// `true` or `false`; anything else is a 400.
#[derive(Debug, Default, PartialEq, Eq)]
struct Conditions {
    if_unused: bool,
    if_empty: bool,
}

impl Conditions {
    fn of(uri: &Uri, queue: bool) -> Result<Self, ApiError> {
        let mut out = Conditions::default();
        for pair in uri
            .query()
            .unwrap_or("")
            .split('&')
            .filter(|p| !p.is_empty())
        {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let condition = match key {
                "if-unused" => &mut out.if_unused,
                "if-empty" if queue => &mut out.if_empty,
                _ => return Err(ApiError::bad_request(format!("unknown parameter '{key}'"))),
            };
            *condition = match value {
                "true" => true,
                "false" => false,
                _ => {
                    return Err(ApiError::bad_request(format!(
                        "{key} must be true or false"
                    )));
                }
            };
        }
        Ok(out)
    }
}

/// `PUT /api/exchanges/{vhost}/{name}`: `exchange.declare` with the body's `type` (default
/// `direct`, as the method's), `durable`, `auto_delete`, `internal` (default false) and
/// `arguments`; needs configure on the exchange. The default exchange and `amq.` names are
/// refused (403), as over AMQP.
pub(crate) async fn declare_exchange<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path((vhost, name)): Path<(String, String)>,
    body: Body,
) -> Result<StatusCode, ApiError> {
    let login = api.login(&headers, peer)?;
    let broker = api.broker(&login, &vhost)?;
    let body = read_body(body, BODY_LIMIT).await?;
    let mut kind = ExchangeKind::Direct;
    let mut options = ExchangeOptions::default();
    let mut args = FieldTable::new();
    for (key, value) in &put_body(&body)? {
        match key.as_str() {
            "type" => {
                kind = value
                    .as_str()
                    .and_then(ExchangeKind::from_name)
                    .ok_or_else(|| {
                        ApiError::bad_request(format!(
                            "type {value} is not direct, fanout, topic or headers"
                        ))
                    })?
            }
            "durable" => options.durable = flag(key, value)?,
            "auto_delete" => options.auto_delete = flag(key, value)?,
            "internal" => options.internal = flag(key, value)?,
            "arguments" => args = arguments(value)?,
            "vhost" => same_as_path(key, value, &vhost)?,
            "name" => same_as_path(key, value, &name)?,
            other => return Err(ApiError::bad_request(format!("unknown field '{other}'"))),
        }
    }
    let exchange = exchange_name(&name);
    if exchange.is_empty() {
        return Err(ApiError::access_refused(
            "the default exchange cannot be declared".into(),
        ));
    }
    if let Some(problem) = exchange_name_problem(exchange) {
        return Err(ApiError::bad_request(problem));
    }
    login.may(&vhost, Access::Configure, Resource::Exchange, exchange)?;
    let created = !broker.exchange_exists(exchange);
    if created {
        login.may_target(&vhost, Resource::Exchange, exchange, &args)?;
    }
    let conn = broker.connect();
    conn.open_channel()?
        .exchange_declare(exchange, kind, options, args)?;
    tracing::info!(user = %login.user.name, %vhost, %exchange, "exchange declared over HTTP");
    Ok(declared(created))
}

/// `DELETE /api/exchanges/{vhost}/{name}[?if-unused=true]`: `exchange.delete`; needs
/// configure on the exchange. 404 for a missing exchange; the default exchange and `amq.`
/// names are refused (403).
pub(crate) async fn delete_exchange<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path((vhost, name)): Path<(String, String)>,
    uri: Uri,
) -> Result<StatusCode, ApiError> {
    let login = api.login(&headers, peer)?;
    let broker = api.broker(&login, &vhost)?;
    let conditions = Conditions::of(&uri, false)?;
    let exchange = exchange_name(&name);
    if exchange.is_empty() || exchange.starts_with("amq.") {
        return Err(ApiError::access_refused(format!(
            "exchange '{name}' in vhost '{vhost}' cannot be deleted"
        )));
    }
    login.may(&vhost, Access::Configure, Resource::Exchange, exchange)?;
    if !broker.exchange_exists(exchange) {
        return Err(ApiError::not_found());
    }
    let conn = broker.connect();
    conn.open_channel()?
        .exchange_delete(exchange, conditions.if_unused)?;
    tracing::info!(user = %login.user.name, %vhost, %exchange, "exchange deleted over HTTP");
    Ok(StatusCode::NO_CONTENT)
}

/// A binding path's destination kind: `q` (a queue) or `e` (an exchange).
fn to_exchange(kind: &str) -> Result<bool, ApiError> {
    match kind {
        "q" => Ok(false),
        "e" => Ok(true),
        _ => Err(ApiError::not_found()),
    }
}

/// Checks what binding or unbinding needs, as over AMQP: write on the destination, read on
/// the source; and that both exist (404).
fn may_bind<E: WireEnvelope>(
    login: &Login,
    broker: &Broker<E>,
    vhost: &str,
    source: &str,
    destination: &str,
    destination_is_exchange: bool,
) -> Result<(), ApiError> {
    let (resource, exists) = if destination_is_exchange {
        (Resource::Exchange, broker.exchange_exists(destination))
    } else {
        (Resource::Queue, broker.queue_counts(destination).is_some())
    };
    login.may(vhost, Access::Write, resource, destination)?;
    login.may(vhost, Access::Read, Resource::Exchange, source)?;
    if !exists || (!source.is_empty() && !broker.exchange_exists(source)) {
        return Err(ApiError::not_found());
    }
    Ok(())
}

/// `POST /api/bindings/{vhost}/e/{source}/{q|e}/{destination}`: binds with the body's
/// `routing_key` (default empty) and `arguments`; 201 with the new binding's path in
/// `Location` (its last segment is the `properties_key`). Binding from or to the default
/// exchange is refused (403), as over AMQP.
pub(crate) async fn bind<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path((vhost, source, kind, destination)): Path<(String, String, String, String)>,
    body: Body,
) -> Result<Response, ApiError> {
    let login = api.login(&headers, peer)?;
    let broker = api.broker(&login, &vhost)?;
    let body = read_body(body, BODY_LIMIT).await?;
    let to_exchange = to_exchange(&kind)?;
    let mut routing_key = String::new();
    let mut args = FieldTable::new();
    for (key, value) in &put_body(&body)? {
        match key.as_str() {
            "routing_key" => {
                routing_key = value
                    .as_str()
                    .ok_or_else(|| ApiError::bad_request("routing_key must be a string"))?
                    .to_owned()
            }
            "arguments" => args = arguments(value)?,
            // What `rabbitmqadmin` sends along: the path's, or refused.
            "vhost" => same_as_path(key, value, &vhost)?,
            "source" => same_as_path(key, value, &source)?,
            "destination" => same_as_path(key, value, &destination)?,
            "destination_type" => {
                let kind_name = if to_exchange { "exchange" } else { "queue" };
                if value.as_str() != Some(kind_name) {
                    return Err(ApiError::bad_request(format!(
                        "destination_type {value} is not the path's '{kind_name}'"
                    )));
                }
            }
            other => return Err(ApiError::bad_request(format!("unknown field '{other}'"))),
        }
    }
    let (src, dest) = (
        exchange_name(&source),
        binding_end(&destination, to_exchange),
    );
    if src.is_empty() || (to_exchange && dest.is_empty()) {
        return Err(ApiError::access_refused(
            "operation not permitted on the default exchange".into(),
        ));
    }
    if let Some(problem) = routing_key_problem(&routing_key) {
        return Err(ApiError::bad_request(problem));
    }
    may_bind(&login, broker, &vhost, src, dest, to_exchange)?;
    let props = properties_key(&routing_key, &args);
    let conn = broker.connect();
    let ch = conn.open_channel()?;
    if to_exchange {
        ch.exchange_bind(dest, src, &routing_key, args)?;
    } else {
        ch.queue_bind(dest, src, &routing_key, args)?;
    }
    tracing::info!(user = %login.user.name, %vhost, source = %src, destination = %dest, %routing_key, "bound over HTTP");
    let location = format!(
        "/api/bindings/{}/e/{}/{kind}/{}/{}",
        segment(&vhost),
        segment(&source),
        segment(&destination),
        segment(&props)
    );
    Ok((StatusCode::CREATED, [(header::LOCATION, location)]).into_response())
}

/// A binding path's destination, the default exchange under its path name `amq.default`.
fn binding_end(name: &str, is_exchange: bool) -> &str {
    if is_exchange {
        exchange_name(name)
    } else {
        name
    }
}

/// A path segment, percent-encoded (a `/` in a name, `%2F` for the vhost `/`).
fn segment(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The bindings from `source` to `destination` (a queue, or with `to_exchange` an
/// exchange).
fn between<E: WireEnvelope>(
    broker: &Broker<E>,
    source: &str,
    destination: &str,
    to_exchange: bool,
) -> Vec<stream_engine::BindingInfo> {
    broker
        .bindings()
        .into_iter()
        .filter(|b| {
            b.source == source
                && b.destination == destination
                && b.destination_is_exchange == to_exchange
        })
        .collect()
}

/// `GET /api/bindings/{vhost}/e/{source}/{q|e}/{destination}`: the bindings between them;
/// 404 when either is missing.
pub(crate) async fn list_between<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path((vhost, source, kind, destination)): Path<(String, String, String, String)>,
) -> Result<axum::Json<Value>, ApiError> {
    let login = api.login(&headers, peer)?;
    let broker = api.broker(&login, &vhost)?;
    let to_exchange = to_exchange(&kind)?;
    let (src, dest) = (
        exchange_name(&source),
        binding_end(&destination, to_exchange),
    );
    let destination_exists = if to_exchange {
        dest.is_empty() || broker.exchange_exists(dest)
    } else {
        broker.queue_counts(dest).is_some()
    };
    if !destination_exists || (!src.is_empty() && !broker.exchange_exists(src)) {
        return Err(ApiError::not_found());
    }
    let list = between(broker, src, dest, to_exchange)
        .iter()
        .map(|b| binding_json(&vhost, b))
        .collect();
    Ok(axum::Json(Value::Array(list)))
}

/// `DELETE /api/bindings/{vhost}/e/{source}/{q|e}/{destination}/{props}`: removes the
/// binding whose `properties_key` is `props`; 404 if there is none.
pub(crate) async fn unbind<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path((vhost, source, kind, destination, props)): Path<(String, String, String, String, String)>,
) -> Result<StatusCode, ApiError> {
    let login = api.login(&headers, peer)?;
    let broker = api.broker(&login, &vhost)?;
    let to_exchange = to_exchange(&kind)?;
    let (src, dest) = (
        exchange_name(&source),
        binding_end(&destination, to_exchange),
    );
    if src.is_empty() || (to_exchange && dest.is_empty()) {
        return Err(ApiError::access_refused(
            "operation not permitted on the default exchange".into(),
        ));
    }
    may_bind(&login, broker, &vhost, src, dest, to_exchange)?;
    let binding = between(broker, src, dest, to_exchange)
        .into_iter()
        .find(|b| names(&props, &b.routing_key, &b.arguments))
        .ok_or_else(ApiError::not_found)?;
    let conn = broker.connect();
    let ch = conn.open_channel()?;
    if to_exchange {
        ch.exchange_unbind(dest, src, &binding.routing_key, &binding.arguments)?;
    } else {
        ch.queue_unbind(dest, src, &binding.routing_key, &binding.arguments)?;
    }
    tracing::info!(user = %login.user.name, %vhost, source = %src, destination = %dest, routing_key = %binding.routing_key, "unbound over HTTP");
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_segments_are_percent_encoded() {
        assert_eq!(segment("/"), "%2F");
        assert_eq!(segment("order.new~x"), "order.new~x");
        assert_eq!(segment("a b/c"), "a%20b%2Fc");
    }

    #[test]
    fn delete_conditions_are_true_false_or_refused() {
        let uri: Uri = "/x?if-unused=true&if-empty=false".parse().unwrap();
        assert_eq!(
            Conditions::of(&uri, true),
            Ok(Conditions {
                if_unused: true,
                if_empty: false
            })
        );
        for query in ["/x?if-unsed=true", "/x?if-unused=yes"] {
            assert!(
                Conditions::of(&query.parse().unwrap(), true).is_err(),
                "{query}"
            );
        }
        // An exchange has no `if-empty`.
        assert!(Conditions::of(&"/x?if-empty=true".parse().unwrap(), false).is_err());
    }
}
