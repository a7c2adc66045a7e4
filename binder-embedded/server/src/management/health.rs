//! Health checks of the node's state, in the shapes of RabbitMQ's management plugin:
//! `GET /api/health/checks/alarms` and `local-alarms` (the memory and disk alarms),
//! `virtual-hosts` (a virtual host whose message store failed is down),
//! `node-is-quorum-critical` and `node-is-mirror-sync-critical` (a single node: they pass),
//! and the broker's own `GET /api/stream/health/checks/stores` (a virtual host's message store
//! that failed). The listener checks are in [`super::listener_checks`], the aliveness test in
//! [`super::aliveness`]. Each answers 200 `{"status": "ok"}` (with details for some), or 503
//! with `"status": "failed"`, a `reason` and what failed, as RabbitMQ's checks do, so a probe
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

pub(super) type Ctx<E> = (State<Arc<Api<E>>>, ConnectInfo<SocketAddr>, HeaderMap);
pub(super) type Check = Result<(StatusCode, Json<Value>), ApiError>;

/// 200 and `{"status": "ok"}` with `details`.
pub(super) fn passed_with(details: &[(&str, Value)]) -> (StatusCode, Json<Value>) {
    let mut body = json!({"status": "ok"});
    for (key, value) in details {
        body[*key] = value.clone();
    }
    (StatusCode::OK, Json(body))
}

/// 200 and `{"status": "ok"}`.
pub(super) fn passed() -> (StatusCode, Json<Value>) {
    passed_with(&[])
}

/// 503 with the reason and what failed (`details`).
pub(super) fn failed(reason: &str, details: &[(&str, Value)]) -> (StatusCode, Json<Value>) {
    let mut body = json!({"status": "failed", "reason": reason});
    for (key, value) in details {
        body[*key] = value.clone();
    }
    (StatusCode::SERVICE_UNAVAILABLE, Json(body))
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
    Ok(failed(reason, &[("alarms", alarms.into())]))
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
        &[("stores", failures.into())],
    ))
}

/// `GET /api/health/checks/virtual-hosts`: no virtual host is down. A virtual host whose
/// message store failed is down, as RabbitMQ's is when its message store's process is (it
/// still carries transient messages, and refuses persistent ones to durable queues until the
/// server restarts). The status is the node's; the names listed are those the user sees.
pub(crate) async fn virtual_hosts<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
) -> Check {
    let login = api.login(&headers, peer)?;
    let mut down: Vec<&str> = api
        .shared
        .brokers()
        .iter()
        .filter(|(_, broker)| broker.store_failure().is_some())
        .map(|(vhost, _)| vhost.as_str())
        .collect();
    if down.is_empty() {
        return Ok(passed());
    }
    down.retain(|vhost| login.sees(vhost));
    down.sort_unstable();
    Ok(failed(
        "Some virtual hosts are down",
        &[("virtual-hosts", json!(down))],
    ))
}

/// `GET /api/health/checks/node-is-quorum-critical` and `node-is-mirror-sync-critical`:
/// this broker is a single node, so shutting it down endangers no quorum or mirror; they
/// pass as RabbitMQ's do on a single node cluster.
pub(crate) async fn single_node<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
) -> Check {
    api.login(&headers, peer)?;
    Ok(passed_with(&[("reason", json!("single node cluster"))]))
}
