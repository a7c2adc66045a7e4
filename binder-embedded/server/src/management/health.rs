//! Health checks: RabbitMQ's `GET /api/health/checks/alarms` and `local-alarms` (the memory
//! and disk alarms), and the broker's own `GET /api/stream/health/checks/stores` (a virtual
//! host's message store that failed). Each answers 200 `{"status": "ok"}`, or 503 with
//! `"status": "failed"`, a `reason` and what failed, as RabbitMQ's checks do, so a probe
//! needs only the status code.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Json;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode};
use serde_json::{Value, json};

use super::Api;
use super::error::ApiError;
use crate::envelope::WireEnvelope;

type Ctx<E> = (State<Arc<Api<E>>>, ConnectInfo<SocketAddr>, HeaderMap);
type Check = Result<(StatusCode, Json<Value>), ApiError>;

/// 200 and `{"status": "ok"}`.
fn passed() -> (StatusCode, Json<Value>) {
    (StatusCode::OK, Json(json!({"status": "ok"})))
}

/// 503 with the reason and what failed under `key`.
fn failed(reason: &str, key: &str, what: Vec<Value>) -> (StatusCode, Json<Value>) {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(json!({"status": "failed", "reason": reason, key: what})),
    )
}

/// The resource alarms in effect, in RabbitMQ's names (`memory`, `disk space`), each once,
/// from every virtual host's broker: a node's alarms are the node's, whichever virtual host
/// the user sees (each broker has its own memory watermark, the disk alarm is the data
/// directory's). A broker whose publishers are not blocked is asked without its lock.
fn alarms_in_effect<E: WireEnvelope>(api: &Api<E>) -> Vec<Value> {
    let (mut memory, mut disk) = (false, false);
    for broker in api.shared.brokers().values() {
        let alarms = broker.alarms();
        memory |= alarms.memory;
        disk |= alarms.disk;
    }
    let node = api.node();
    [("memory", memory), ("disk space", disk)]
        .into_iter()
        .filter(|(_, on)| *on)
        .map(|(resource, _)| json!({"node": node, "resource": resource}))
        .collect()
}

/// Passes while no memory or disk alarm is in effect; else fails with `reason`.
async fn no_alarms<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    reason: &str,
) -> Check {
    api.login(&headers, peer)?;
    let alarms = alarms_in_effect(&api);
    if alarms.is_empty() {
        return Ok(passed());
    }
    Ok(failed(reason, "alarms", alarms))
}

/// `GET /api/health/checks/alarms`: no memory or disk alarm in effect (this one node is the
/// cluster).
pub(crate) async fn alarms<E: WireEnvelope>(ctx: Ctx<E>) -> Check {
    no_alarms(ctx, "There are alarms in effect in the cluster").await
}

/// `GET /api/health/checks/local-alarms`: the same, for this node.
pub(crate) async fn local_alarms<E: WireEnvelope>(ctx: Ctx<E>) -> Check {
    no_alarms(ctx, "There are alarms in effect on the node").await
}

/// `GET /api/stream/health/checks/stores`: no message store of a virtual host the user sees
/// has failed. A failed store refuses every persistent message to a durable queue (541)
/// until the server restarts; each is listed with its virtual host and its cause.
pub(crate) async fn stores<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
) -> Check {
    let login = api.login(&headers, peer)?;
    let failures: Vec<Value> = api
        .visible(&login)
        .into_iter()
        .filter_map(|(vhost, broker)| {
            let cause = broker.store_failure()?;
            Some(json!({"vhost": vhost, "reason": cause}))
        })
        .collect();
    if failures.is_empty() {
        return Ok(passed());
    }
    Ok(failed(
        "A message store failed: persistent messages to durable queues are refused until the server restarts",
        "stores",
        failures,
    ))
}
