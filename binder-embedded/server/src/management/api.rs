//! RabbitMQ's management API paths the broker serves that read and move messages, with its
//! JSON shapes: overview, vhosts, queues, exchanges, bindings, consumers, connections,
//! `whoami`, purge, `get` and `publish`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, StatusCode};
use serde_json::{Map, Value, json};
use stream_engine::{
    BindingInfo, Broker, ExchangeInfo, Message, PublishOptions, PublishStatus, QueueInfo,
};

use super::Api;
use super::error::ApiError;
use super::json;
use super::login::Login;
use super::rates::Stats;
use crate::auth::{Access, Resource};
use crate::envelope::WireEnvelope;

pub(super) type Reply = Result<Json<Value>, ApiError>;
pub(super) type Ctx<E> = (State<Arc<Api<E>>>, ConnectInfo<SocketAddr>, HeaderMap);

/// The most a request body may hold (axum's default limit), definitions apart.
pub(super) const BODY_LIMIT: usize = 2 * 1024 * 1024;

/// Reads a request body once its user has logged in and may use the virtual host, so that
/// nobody else makes the server buffer one; up to `limit` bytes (413 beyond, 400 for a body
/// that could not be read).
pub(super) async fn read_body(body: Body, limit: usize) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        let reason = format!("the body could not be read: {e}");
        if e.into_inner().is::<http_body_util::LengthLimitError>() {
            ApiError {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                error: "bad_request",
                reason: format!("the body is over its limit of {limit} bytes"),
                challenge: false,
            }
        } else {
            ApiError::bad_request(reason)
        }
    })
}

/// The RabbitMQ version whose management API shapes are followed.
const RABBITMQ_VERSION: &str = "3.10.0";

impl<E: WireEnvelope> Api<E> {
    pub(crate) fn login(&self, headers: &HeaderMap, peer: SocketAddr) -> Result<Login, ApiError> {
        Login::check(self.shared.users(), headers, peer.ip())
    }

    /// A vhost's broker, 404 if there is none, 401 if the user may not see it.
    pub(crate) fn broker(&self, login: &Login, vhost: &str) -> Result<&Broker<E>, ApiError> {
        let broker = self
            .shared
            .brokers()
            .get(vhost)
            .ok_or_else(ApiError::not_found)?;
        login.vhost(vhost)?;
        Ok(broker)
    }

    /// The vhosts the user sees, sorted.
    pub(super) fn visible(&self, login: &Login) -> Vec<(&str, &Broker<E>)> {
        let mut out: Vec<_> = self
            .shared
            .brokers()
            .iter()
            .filter(|(v, _)| login.sees(v))
            .map(|(v, b)| (v.as_str(), b))
            .collect();
        out.sort_by_key(|(v, _)| *v);
        out
    }

    /// One JSON value per item of every vhost the user sees (`vhost` `None`), or of one vhost
    /// (404 if there is none, 401 if the user may not see it).
    pub(super) fn list(
        &self,
        login: &Login,
        vhost: Option<&str>,
        items: impl Fn(&Self, &str, &Broker<E>) -> Vec<Value>,
    ) -> Reply {
        let list = match vhost {
            Some(vhost) => items(self, vhost, self.broker(login, vhost)?),
            None => self
                .visible(login)
                .into_iter()
                .flat_map(|(vhost, broker)| items(self, vhost, broker))
                .collect(),
        };
        Ok(Json(Value::Array(list)))
    }

    pub(super) fn node(&self) -> String {
        format!("stream-broker@{}", self.addr)
    }
}

fn rated(stats: Stats) -> Value {
    json!({
        "publish": stats.publish.count,
        "publish_details": {"rate": stats.publish.rate},
        "deliver_get": stats.deliver_get.count,
        "deliver_get_details": {"rate": stats.deliver_get.rate},
    })
}

/// A queue as RabbitMQ's API shows it.
fn queue_json<E: WireEnvelope>(api: &Api<E>, vhost: &str, q: &QueueInfo) -> Value {
    let messages = q.messages_ready + q.messages_unacknowledged;
    json!({
        "name": q.name,
        "vhost": vhost,
        "durable": q.durable,
        "auto_delete": q.auto_delete,
        "exclusive": q.exclusive,
        "arguments": json::table(&q.arguments),
        "policy": q.policy,
        "operator_policy": q.operator_policy,
        "effective_policy_definition": json::table(&q.policy_definition),
        "type": "classic",
        "state": "running",
        "node": api.node(),
        "messages": messages,
        "messages_ready": q.messages_ready,
        "messages_unacknowledged": q.messages_unacknowledged,
        "message_bytes_ready": q.message_bytes_ready,
        "consumers": q.consumers,
        "message_stats": rated(api.rates.queue(vhost, &q.name)),
    })
}

fn exchange_json(vhost: &str, x: &ExchangeInfo) -> Value {
    let mut out = json!({
        "name": x.name,
        "vhost": vhost,
        "type": x.kind.as_str(),
        "durable": x.durable,
        "auto_delete": x.auto_delete,
        "internal": x.internal,
        "arguments": json::table(&x.arguments),
    });
    // As RabbitMQ: present only when a policy applies.
    if let Some(policy) = &x.policy {
        out["policy"] = json!(policy);
    }
    out
}

pub(super) fn binding_json(vhost: &str, b: &BindingInfo) -> Value {
    let key = super::binding_key::properties_key(&b.routing_key, &b.arguments);
    json!({
        "source": b.source,
        "vhost": vhost,
        "destination": b.destination,
        "destination_type": if b.destination_is_exchange { "exchange" } else { "queue" },
        "routing_key": b.routing_key,
        "arguments": json::table(&b.arguments),
        "properties_key": key,
    })
}

/// RabbitMQ's name for the default exchange in paths.
pub(super) fn exchange_name(name: &str) -> &str {
    if name == "amq.default" { "" } else { name }
}

pub(crate) async fn overview<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
) -> Reply {
    let login = api.login(&headers, peer)?;
    let (mut queues, mut exchanges, mut consumers, mut channels) = (0, 0, 0u64, 0u64);
    let (mut ready, mut unacked) = (0u64, 0u64);
    let mut stats = Stats::default();
    for (vhost, broker) in api.visible(&login) {
        let qs = broker.queues();
        queues += qs.len();
        ready += qs.iter().map(|q| q.messages_ready).sum::<u64>();
        unacked += qs.iter().map(|q| q.messages_unacknowledged).sum::<u64>();
        exchanges += broker.exchanges().len();
        let totals = broker.totals();
        consumers += u64::from(totals.consumers);
        channels += u64::from(totals.channels);
        stats += api.rates.vhost(vhost);
    }
    let connections = api
        .shared
        .listed
        .snapshot()
        .into_iter()
        .filter(|c| login.is_monitor() || c.info.user == login.user.name)
        .count();
    Ok(Json(json!({
        "management_version": RABBITMQ_VERSION,
        "rabbitmq_version": RABBITMQ_VERSION,
        "product_name": "stream-broker",
        "product_version": env!("CARGO_PKG_VERSION"),
        "rates_mode": "basic",
        "node": api.node(),
        "cluster_name": api.node(),
        "statistics_db_event_queue": 0,
        "object_totals": {
            "connections": connections,
            "channels": channels,
            "exchanges": exchanges,
            "queues": queues,
            "consumers": consumers,
        },
        "queue_totals": {
            "messages": ready + unacked,
            "messages_ready": ready,
            "messages_unacknowledged": unacked,
        },
        "message_stats": rated(stats),
        "listeners": api.listeners.iter().map(|l| json!({
            "node": api.node(),
            "protocol": l.protocol,
            "port": l.addr.port(),
            "ip_address": l.addr.ip().to_string(),
        })).collect::<Vec<_>>(),
    })))
}

fn vhost_json<E: WireEnvelope>(api: &Api<E>, vhost: &str, broker: &Broker<E>) -> Value {
    let qs = broker.queues();
    let ready: u64 = qs.iter().map(|q| q.messages_ready).sum();
    let unacked: u64 = qs.iter().map(|q| q.messages_unacknowledged).sum();
    json!({
        "name": vhost,
        "messages": ready + unacked,
        "messages_ready": ready,
        "messages_unacknowledged": unacked,
        "tracing": false,
        "message_stats": rated(api.rates.vhost(vhost)),
    })
}

pub(crate) async fn vhosts<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
) -> Reply {
    let login = api.login(&headers, peer)?;
    let list: Vec<Value> = api
        .visible(&login)
        .into_iter()
        .map(|(vhost, broker)| vhost_json(&api, vhost, broker))
        .collect();
    Ok(Json(Value::Array(list)))
}

/// `GET /api/vhosts/{name}`: one virtual host (404 if there is none, 401 if the user may
/// not see it).
pub(crate) async fn vhost<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path(vhost): Path<String>,
) -> Reply {
    let login = api.login(&headers, peer)?;
    let broker = api.broker(&login, &vhost)?;
    Ok(Json(vhost_json(&api, &vhost, broker)))
}

pub(crate) async fn queues<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
) -> Reply {
    api.list(&api.login(&headers, peer)?, None, queues_of)
}

pub(crate) async fn vhost_queues<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path(vhost): Path<String>,
) -> Reply {
    api.list(&api.login(&headers, peer)?, Some(&vhost), queues_of)
}

fn queues_of<E: WireEnvelope>(api: &Api<E>, vhost: &str, broker: &Broker<E>) -> Vec<Value> {
    broker
        .queues()
        .iter()
        .map(|q| queue_json(api, vhost, q))
        .collect()
}

pub(crate) async fn queue<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path((vhost, name)): Path<(String, String)>,
) -> Reply {
    let login = api.login(&headers, peer)?;
    let broker = api.broker(&login, &vhost)?;
    let q = broker
        .queues()
        .into_iter()
        .find(|q| q.name == name)
        .ok_or_else(ApiError::not_found)?;
    Ok(Json(queue_json(&api, &vhost, &q)))
}

pub(crate) async fn purge<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let login = api.login(&headers, peer)?;
    let broker = api.broker(&login, &vhost)?;
    login.may(&vhost, Access::Read, Resource::Queue, &name)?;
    let conn = broker.connect();
    let ch = conn.open_channel()?;
    let purged = ch.queue_purge(&name)?;
    tracing::info!(user = %login.user.name, %vhost, queue = %name, purged, "queue purged over HTTP");
    Ok(StatusCode::NO_CONTENT)
}

/// How `get` settles what it took (RabbitMQ's `ackmode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AckMode {
    AckRequeueTrue,
    AckRequeueFalse,
    RejectRequeueTrue,
    RejectRequeueFalse,
}

/// A body field naming what the path names (`vhost`, `name`, `queue`, `source`, ...), as
/// RabbitMQ's page and `rabbitmqadmin` send them along: must be the path's.
pub(super) fn same_as_path(field: &str, value: &Value, path: &str) -> Result<(), ApiError> {
    if value.as_str() == Some(path) {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "{field} {value} is not the path's '{path}'"
        )))
    }
}

pub(super) fn body_object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(ApiError::bad_request("the body must be a JSON object")),
        Err(e) => Err(ApiError::bad_request(format!("invalid JSON: {e}"))),
    }
}

pub(crate) async fn get<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path((vhost, name)): Path<(String, String)>,
    body: Body,
) -> Reply {
    let login = api.login(&headers, peer)?;
    let broker = api.broker(&login, &vhost)?;
    let body = read_body(body, BODY_LIMIT).await?;
    let req = body_object(&body)?;
    let mut count = 1u64;
    let mut mode = None;
    let mut base64 = false;
    let mut truncate: Option<usize> = None;
    for (k, v) in &req {
        match k.as_str() {
            "count" => {
                count = json::as_u64(v)
                    .filter(|n| *n > 0)
                    .ok_or_else(|| ApiError::bad_request("count must be a positive integer"))?
            }
            "ackmode" => {
                mode = Some(match v.as_str() {
                    Some("ack_requeue_true") => AckMode::AckRequeueTrue,
                    Some("ack_requeue_false") => AckMode::AckRequeueFalse,
                    Some("reject_requeue_true") => AckMode::RejectRequeueTrue,
                    Some("reject_requeue_false") => AckMode::RejectRequeueFalse,
                    _ => {
                        return Err(ApiError::bad_request(format!(
                            "ackmode {v} is not one of ack_requeue_true, ack_requeue_false, \
                             reject_requeue_true, reject_requeue_false"
                        )));
                    }
                })
            }
            "encoding" => {
                base64 = match v.as_str() {
                    Some("auto") => false,
                    Some("base64") => true,
                    _ => {
                        return Err(ApiError::bad_request(format!(
                            "encoding {v} is not auto or base64"
                        )));
                    }
                }
            }
            "truncate" => {
                truncate = match v {
                    Value::Null => None,
                    _ => Some(json::as_u64(v).ok_or_else(|| {
                        ApiError::bad_request("truncate must be a non-negative integer")
                    })? as usize),
                }
            }
            // What RabbitMQ's own page and `rabbitmqadmin` send along: the path's, or
            // refused.
            "vhost" => same_as_path(k, v, &vhost)?,
            "name" | "queue" => same_as_path(k, v, &name)?,
            other => return Err(ApiError::bad_request(format!("unknown field '{other}'"))),
        }
    }
    let mode = mode.ok_or_else(|| ApiError::bad_request("ackmode is required"))?;
    login.may(&vhost, Access::Read, Resource::Queue, &name)?;
    let conn = broker.connect();
    let ch = conn.open_channel()?;
    let no_ack = mode == AckMode::AckRequeueFalse;
    let mut out = Vec::new();
    let mut tags = Vec::new();
    for _ in 0..count {
        let Some(got) = ch.basic_get(&name, no_ack)? else {
            break;
        };
        tags.push(got.delivery.delivery_tag);
        out.push(message_json::<E>(
            &got.delivery.body,
            got.delivery.redelivered,
            got.message_count,
            base64,
            truncate,
        ));
    }
    // One by one, in the order taken: dead-lettered ones keep their order.
    for tag in tags {
        match mode {
            AckMode::AckRequeueFalse => {}
            AckMode::AckRequeueTrue | AckMode::RejectRequeueTrue => ch.basic_reject(tag, true)?,
            AckMode::RejectRequeueFalse => ch.basic_reject(tag, false)?,
        }
    }
    Ok(Json(Value::Array(out)))
}

/// One message as `get` returns it.
pub(crate) fn message_json<E: WireEnvelope>(
    record: &E::Record,
    redelivered: bool,
    message_count: u32,
    base64: bool,
    truncate: Option<usize>,
) -> Value {
    let message = E::to_wire(record);
    let bytes = &message.payload[..];
    let shown = &bytes[..truncate.map_or(bytes.len(), |t| t.min(bytes.len()))];
    let (payload, encoding) = json::payload(shown, base64);
    json!({
        "payload_bytes": bytes.len(),
        "redelivered": redelivered,
        "exchange": &**E::exchange(record),
        "routing_key": &**E::routing_key(record),
        "message_count": message_count,
        "properties": json::properties(&message),
        "payload": payload,
        "payload_encoding": encoding,
    })
}

pub(crate) async fn exchanges<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
) -> Reply {
    api.list(&api.login(&headers, peer)?, None, exchanges_of)
}

pub(crate) async fn vhost_exchanges<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path(vhost): Path<String>,
) -> Reply {
    api.list(&api.login(&headers, peer)?, Some(&vhost), exchanges_of)
}

fn exchanges_of<E: WireEnvelope>(_: &Api<E>, vhost: &str, broker: &Broker<E>) -> Vec<Value> {
    broker
        .exchanges()
        .iter()
        .map(|x| exchange_json(vhost, x))
        .collect()
}

pub(crate) async fn exchange<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path((vhost, name)): Path<(String, String)>,
) -> Reply {
    let login = api.login(&headers, peer)?;
    let broker = api.broker(&login, &vhost)?;
    let name = exchange_name(&name);
    let x = broker
        .exchanges()
        .into_iter()
        .find(|x| x.name == name)
        .ok_or_else(ApiError::not_found)?;
    Ok(Json(exchange_json(&vhost, &x)))
}

pub(crate) async fn publish<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path((vhost, name)): Path<(String, String)>,
    body: Body,
) -> Reply {
    let login = api.login(&headers, peer)?;
    let broker = api.broker(&login, &vhost)?;
    let body = read_body(body, BODY_LIMIT).await?;
    let exchange = exchange_name(&name);
    if !exchange.is_empty() && !broker.exchange_exists(exchange) {
        return Err(ApiError::not_found());
    }
    let req = body_object(&body)?;
    let mut routing_key = None;
    let mut payload = None;
    let mut encoding = "string";
    let mut properties = (Default::default(), Default::default());
    for (k, v) in &req {
        match k.as_str() {
            "routing_key" => {
                routing_key = Some(
                    v.as_str()
                        .ok_or_else(|| ApiError::bad_request("routing_key must be a string"))?,
                )
            }
            "payload" => {
                payload = Some(
                    v.as_str()
                        .ok_or_else(|| ApiError::bad_request("payload must be a string"))?,
                )
            }
            "payload_encoding" => {
                encoding = match v.as_str() {
                    Some("string") => "string",
                    Some("base64") => "base64",
                    _ => {
                        return Err(ApiError::bad_request(format!(
                            "payload_encoding {v} is not string or base64"
                        )));
                    }
                }
            }
            "properties" => {
                let map = v
                    .as_object()
                    .ok_or_else(|| ApiError::bad_request("properties must be an object"))?;
                properties =
                    json::to_properties(map).map_err(|e| ApiError::bad_request(e.to_string()))?;
            }
            "vhost" => same_as_path(k, v, &vhost)?,
            "name" | "exchange" => same_as_path(k, v, &name)?,
            other => return Err(ApiError::bad_request(format!("unknown field '{other}'"))),
        }
    }
    let routing_key =
        routing_key.ok_or_else(|| ApiError::bad_request("routing_key is required"))?;
    let payload = payload.ok_or_else(|| ApiError::bad_request("payload is required"))?;
    let bytes = match encoding {
        "base64" => {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD
                .decode(payload)
                .map_err(|e| ApiError::bad_request(format!("payload is not base64: {e}")))?
        }
        _ => payload.as_bytes().to_vec(),
    };
    if bytes.len() as u64 > api.shared.limits().max_message_size {
        return Err(ApiError::bad_request(format!(
            "message size {} is larger than the configured maximum {}",
            bytes.len(),
            api.shared.limits().max_message_size
        )));
    }
    login.may(&vhost, Access::Write, Resource::Exchange, exchange)?;
    let (props, hdrs) = properties;
    let message = Message {
        payload: bytes.into(),
        headers: hdrs,
        properties: props.into(),
    };
    let conn = broker.connect();
    let ch = conn.open_channel()?;
    // Not held back by an alarm: RabbitMQ publishes from its management API on a direct
    // connection, which alarms do not block.
    let outcome = ch
        .basic_publish_past_alarms(
            exchange,
            routing_key,
            PublishOptions::default(),
            E::from_wire(message),
        )
        .await?;
    let routed = matches!(outcome.status, PublishStatus::Routed(_));
    Ok(Json(json!({ "routed": routed })))
}

pub(crate) async fn bindings<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
) -> Reply {
    api.list(&api.login(&headers, peer)?, None, bindings_of)
}

pub(crate) async fn vhost_bindings<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path(vhost): Path<String>,
) -> Reply {
    api.list(&api.login(&headers, peer)?, Some(&vhost), bindings_of)
}

fn bindings_of<E: WireEnvelope>(_: &Api<E>, vhost: &str, broker: &Broker<E>) -> Vec<Value> {
    broker
        .bindings()
        .iter()
        .map(|b| binding_json(vhost, b))
        .collect()
}

/// The bindings of one end of a virtual host's bindings that pass `keep`, once `exists`
/// holds (404 otherwise).
fn bindings_where<E: WireEnvelope>(
    api: &Api<E>,
    login: &Login,
    vhost: &str,
    exists: impl Fn(&Broker<E>) -> bool,
    keep: impl Fn(&BindingInfo) -> bool,
) -> Reply {
    let broker = api.broker(login, vhost)?;
    if !exists(broker) {
        return Err(ApiError::not_found());
    }
    let list = broker
        .bindings()
        .iter()
        .filter(|b| keep(b))
        .map(|b| binding_json(vhost, b))
        .collect();
    Ok(Json(Value::Array(list)))
}

/// `GET /api/queues/{vhost}/{name}/bindings`: the queue's bindings, the default exchange's
/// first; 404 for a queue there is not.
pub(crate) async fn queue_bindings<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path((vhost, name)): Path<(String, String)>,
) -> Reply {
    let login = api.login(&headers, peer)?;
    bindings_where(
        &api,
        &login,
        &vhost,
        |broker| broker.queue_counts(&name).is_some(),
        |b| !b.destination_is_exchange && b.destination == name,
    )
}

/// `GET /api/exchanges/{vhost}/{name}/bindings/source`: the bindings from the exchange (for
/// `amq.default`, one per queue); 404 for an exchange there is not.
pub(crate) async fn exchange_source_bindings<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path((vhost, name)): Path<(String, String)>,
) -> Reply {
    let login = api.login(&headers, peer)?;
    exchange_bindings(&api, &login, &vhost, exchange_name(&name), |b, name| {
        b.source == name
    })
}

/// `GET /api/exchanges/{vhost}/{name}/bindings/destination`: the bindings to the exchange
/// from other exchanges; 404 for an exchange there is not.
pub(crate) async fn exchange_destination_bindings<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path((vhost, name)): Path<(String, String)>,
) -> Reply {
    let login = api.login(&headers, peer)?;
    exchange_bindings(&api, &login, &vhost, exchange_name(&name), |b, name| {
        b.destination_is_exchange && b.destination == name
    })
}

/// An exchange's bindings that `end` picks (`""` is the default exchange).
fn exchange_bindings<E: WireEnvelope>(
    api: &Api<E>,
    login: &Login,
    vhost: &str,
    name: &str,
    end: impl Fn(&BindingInfo, &str) -> bool,
) -> Reply {
    bindings_where(
        api,
        login,
        vhost,
        |broker| name.is_empty() || broker.exchange_exists(name),
        |b| end(b, name),
    )
}

/// `GET /api/whoami`: the logged-in user's name and tags.
pub(crate) async fn whoami<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
) -> Reply {
    let login = api.login(&headers, peer)?;
    Ok(Json(json!({
        "name": login.user.name,
        "tags": login.user.tags,
    })))
}
