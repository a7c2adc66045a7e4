//! The broker's own extension for dead-letter queues, under `/api/stream/` (not a RabbitMQ
//! path): messages seen in place with their arrival position (`seq`), and re-drive or
//! removal of exactly one message (or re-drive of all). Re-drive publishes a copy to the
//! original exchange and routing key and removes the original only once the copy is safe
//! ([`Broker::redrive`](stream_engine::Broker::redrive)): nothing is lost when it fails.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use serde_json::{Value, json};
use stream_engine::{FieldValue, Redrive};

use super::Api;
use super::api::{BODY_LIMIT, message_json, read_body};
use super::error::ApiError;
use crate::auth::{Access, Resource};
use crate::envelope::WireEnvelope;

type Ctx<E> = (State<Arc<Api<E>>>, ConnectInfo<SocketAddr>, HeaderMap);

/// Messages listed when `count` is not given.
const DEFAULT_COUNT: usize = 100;

/// Where a dead-lettered message came from: `x-original-exchange` and
/// `x-original-routingKey` (written by the binders' republishing recoverer), else the newest
/// `x-death` entry's `exchange` and first `routing-keys`.
pub(crate) fn origin<E: WireEnvelope>(record: &E::Record) -> Option<(String, String)> {
    let headers = E::headers(record);
    if let (Some(x), Some(k)) = (
        headers.get_str("x-original-exchange"),
        headers.get_str("x-original-routingKey"),
    ) {
        return Some((x.to_owned(), k.to_owned()));
    }
    let Some(FieldValue::Array(deaths)) = headers.get("x-death") else {
        return None;
    };
    let Some(FieldValue::Table(newest)) = deaths.first() else {
        return None;
    };
    let exchange = newest.get_str("exchange")?.to_owned();
    let key = match newest.get("routing-keys") {
        Some(FieldValue::Array(keys)) => keys.first().and_then(FieldValue::as_str)?.to_owned(),
        _ => return None,
    };
    Some((exchange, key))
}

fn count(uri: &Uri) -> Result<usize, ApiError> {
    for pair in uri.query().unwrap_or("").split('&') {
        match pair.split_once('=') {
            Some(("count", n)) => {
                return n
                    .parse()
                    .map_err(|_| ApiError::bad_request("count must be a non-negative integer"));
            }
            None if pair.is_empty() => {}
            _ => return Err(ApiError::bad_request(format!("unknown parameter '{pair}'"))),
        }
    }
    Ok(DEFAULT_COUNT)
}

/// `GET /api/stream/queues/{vhost}/{name}/messages[?count=N]`: up to N ready messages in
/// delivery order, not delivered (nothing is marked redelivered), each with its `seq` and
/// where a re-drive would send it (`redrive_to`, `null` when unknown).
pub(crate) async fn messages<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path((vhost, name)): Path<(String, String)>,
    uri: Uri,
) -> Result<Json<Value>, ApiError> {
    let login = api.login(&headers, peer)?;
    let broker = api.broker(&login, &vhost)?;
    let count = count(&uri)?;
    login.may(&vhost, Access::Read, Resource::Queue, &name)?;
    let peeked = broker.peek(&name, count)?;
    let total = broker.queue_counts(&name).map_or(0, |(ready, _)| ready);
    let list = peeked
        .iter()
        .map(|m| {
            let mut v = message_json::<E>(&m.record, m.redelivered, total, false, None);
            v["seq"] = json!(m.seq);
            v["redrive_to"] = match origin::<E>(&m.record) {
                Some((exchange, routing_key)) => {
                    json!({"exchange": exchange, "routing_key": routing_key})
                }
                None => Value::Null,
            };
            v
        })
        .collect();
    Ok(Json(Value::Array(list)))
}

/// A target given in the request body, else the message's origin.
fn target<E: WireEnvelope>(body: &Bytes, record: &E::Record) -> Result<(String, String), ApiError> {
    if !body.iter().all(u8::is_ascii_whitespace) {
        let v: Value = serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("invalid JSON: {e}")))?;
        let Value::Object(map) = v else {
            return Err(ApiError::bad_request("the body must be a JSON object"));
        };
        let (mut exchange, mut key) = (None, None);
        for (k, v) in &map {
            let text = || {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| ApiError::bad_request(format!("{k} must be a string")))
            };
            match k.as_str() {
                "exchange" => exchange = Some(text()?),
                "routing_key" => key = Some(text()?),
                other => return Err(ApiError::bad_request(format!("unknown field '{other}'"))),
            }
        }
        match (exchange, key) {
            (Some(x), Some(k)) => return Ok((x, k)),
            (None, None) => {}
            _ => return Err(ApiError::bad_request("give both exchange and routing_key")),
        }
    }
    origin::<E>(record).ok_or_else(|| {
        ApiError::bad_request(
            "the message has no x-death or x-original-exchange header: give exchange and \
             routing_key",
        )
    })
}

/// Re-drives one message (seen as `record` at `seq`): the JSON answer, `None` if the
/// message is no longer there (taken, expired or removed meanwhile), or why not.
async fn redrive_one<E: WireEnvelope>(
    api: &Api<E>,
    login: &super::login::Login,
    (vhost, queue): (&str, &str),
    (seq, record): (u64, &E::Record),
    body: &Bytes,
) -> Result<Option<Value>, ApiError> {
    let broker = api.broker(login, vhost)?;
    let (exchange, key) = target::<E>(body, record)?;
    login.may(vhost, Access::Write, Resource::Exchange, &exchange)?;
    match broker.redrive(queue, seq, &exchange, &key).await? {
        Redrive::Moved(queues) => {
            tracing::info!(user = %login.user.name, %vhost, %queue, seq, %exchange, routing_key = %key, "message re-driven");
            Ok(Some(json!({
                "redriven": true,
                "seq": seq,
                "exchange": exchange,
                "routing_key": key,
                "queues": queues,
            })))
        }
        Redrive::NotFound => Ok(None),
        failed => Err(ApiError {
            status: StatusCode::CONFLICT,
            error: "not_redriven",
            reason: format!(
                "{} (exchange '{exchange}', routing key '{key}'): the message stays in '{queue}'",
                if failed == Redrive::Unroutable {
                    "no queue took the copy"
                } else {
                    "a full queue refused the copy"
                }
            ),
            challenge: false,
        }),
    }
}

/// `POST /api/stream/queues/{vhost}/{name}/messages/{seq}/redrive`, body empty or
/// `{"exchange": .., "routing_key": ..}`.
pub(crate) async fn redrive<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path((vhost, name, seq)): Path<(String, String, u64)>,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let login = api.login(&headers, peer)?;
    let broker = api.broker(&login, &vhost)?;
    login.may(&vhost, Access::Read, Resource::Queue, &name)?;
    let body = read_body(body, BODY_LIMIT).await?;
    let peeked = broker.peek(&name, usize::MAX)?;
    let message = peeked
        .iter()
        .find(|m| m.seq == seq)
        .ok_or_else(ApiError::not_found)?;
    redrive_one(&api, &login, (&vhost, &name), (seq, &message.record), &body)
        .await?
        .map(Json)
        .ok_or_else(ApiError::not_found)
}

/// `POST /api/stream/queues/{vhost}/{name}/redrive`: every ready message to its origin;
/// those that cannot go stay, listed in `failed`.
pub(crate) async fn redrive_all<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let login = api.login(&headers, peer)?;
    let broker = api.broker(&login, &vhost)?;
    login.may(&vhost, Access::Read, Resource::Queue, &name)?;
    let peeked = broker.peek(&name, usize::MAX)?;
    let (mut redriven, mut failed) = (0, Vec::new());
    let none = Bytes::new();
    for m in &peeked {
        match redrive_one(&api, &login, (&vhost, &name), (m.seq, &m.record), &none).await {
            Ok(Some(_)) => redriven += 1,
            Ok(None) => {}
            Err(e) => failed.push(json!({"seq": m.seq, "reason": e.reason})),
        }
    }
    Ok(Json(json!({"redriven": redriven, "failed": failed})))
}

/// `DELETE /api/stream/queues/{vhost}/{name}/messages/{seq}`: removes one message (as if
/// acknowledged; it is not dead-lettered again).
pub(crate) async fn discard<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path((vhost, name, seq)): Path<(String, String, u64)>,
) -> Result<StatusCode, ApiError> {
    let login = api.login(&headers, peer)?;
    let broker = api.broker(&login, &vhost)?;
    login.may(&vhost, Access::Read, Resource::Queue, &name)?;
    if broker.discard(&name, seq)? {
        tracing::info!(user = %login.user.name, %vhost, queue = %name, seq, "message removed over HTTP");
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found())
    }
}
