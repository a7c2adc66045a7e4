//! Health checks, in the shapes of RabbitMQ's management plugin: `GET /api/health/checks/`
//! `alarms` and `local-alarms` (the memory and disk alarms), `virtual-hosts` (a virtual host
//! whose message store failed is down), `port-listener/{port}`, `protocol-listener/{protocol}`,
//! `certificate-expiration/{within}/{unit}` (the TLS listener's certificates),
//! `node-is-quorum-critical` and `node-is-mirror-sync-critical` (a single node: they pass),
//! `GET /api/aliveness-test/{vhost}` (a message through a queue of the virtual host), and the
//! broker's own `GET /api/stream/health/checks/stores` (a virtual host's message store that
//! failed). Each answers 200 `{"status": "ok"}`, or 503 with `"status": "failed"`, a `reason`
//! and what failed, as RabbitMQ's checks do, so a probe needs only the status code.

use std::net::SocketAddr;
use std::sync::Arc;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, StatusCode};
use serde_json::{Value, json};

use stream_engine::{FieldTable, Message, PublishOptions, QueueOptions, TryPublish};

use super::Api;
use super::error::ApiError;
use crate::auth::{Access, Resource};
use crate::envelope::WireEnvelope;

type Ctx<E> = (State<Arc<Api<E>>>, ConnectInfo<SocketAddr>, HeaderMap);
type Check = Result<(StatusCode, Json<Value>), ApiError>;

/// 200 and `{"status": "ok"}`.
fn passed() -> (StatusCode, Json<Value>) {
    (StatusCode::OK, Json(json!({"status": "ok"})))
}

/// 503 with the reason and what failed under `key`.
fn failed(reason: &str, key: &str, what: impl Into<Value>) -> (StatusCode, Json<Value>) {
    let mut body = json!({"status": "failed", "reason": reason});
    body[key] = what.into();
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
    Ok(failed("Some virtual hosts are down", "virtual-hosts", down))
}

/// `GET /api/health/checks/port-listener/{port}`: a listener of the server listens on
/// `port` (400 if it is not a number).
pub(crate) async fn port_listener<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path(port): Path<String>,
) -> Check {
    api.login(&headers, peer)?;
    let port: i64 = port
        .parse()
        .map_err(|_| ApiError::bad_request("Invalid port"))?;
    let ports: Vec<u16> = api.listeners.iter().map(|l| l.addr.port()).collect();
    if ports.iter().any(|p| i64::from(*p) == port) {
        return Ok((StatusCode::OK, Json(json!({"status": "ok", "port": port}))));
    }
    let (status, Json(mut body)) = failed("No active listener", "missing", port);
    body["ports"] = json!(ports);
    Ok((status, Json(body)))
}

/// `GET /api/health/checks/protocol-listener/{protocol}`: a listener of the server serves
/// `protocol`, in RabbitMQ's names (`amqp`, `amqp/ssl`, `http`) or their aliases
/// (`amqp091`, `amqps`, `management`, ...).
pub(crate) async fn protocol_listener<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path(protocol): Path<String>,
) -> Check {
    api.login(&headers, peer)?;
    let protocol = protocol_name(&protocol);
    let protocols: Vec<&str> = api.listeners.iter().map(|l| l.protocol).collect();
    if protocols.contains(&protocol.as_str()) {
        return Ok((
            StatusCode::OK,
            Json(json!({"status": "ok", "protocol": protocol})),
        ));
    }
    let (status, Json(mut body)) = failed("No active listener", "missing", protocol);
    body["protocols"] = json!(protocols);
    Ok((status, Json(body)))
}

/// A protocol's name as RabbitMQ's listeners are named, from the aliases its check accepts
/// (lower-cased). AMQP 1.0's aliases keep their own name: this broker does not speak it.
fn protocol_name(asked: &str) -> String {
    let asked = asked.to_lowercase();
    let name = match asked.as_str() {
        "amqp091" | "amqp0.9.1" | "amqp0-9-1" | "amqp0_9_1" => "amqp",
        "amqps" => "amqp/ssl",
        "http1" | "http1.1" | "http_api" | "management" | "management_ui" | "ui" => "http",
        "cli" | "distribution" => "clustering",
        other => other,
    };
    name.to_string()
}

/// `GET /api/health/checks/certificate-expiration/{within}/{unit}`: no certificate a TLS
/// listener serves (`certfile`) or checks clients against (`cacertfile`) expires within
/// `within` `unit`s (`days`, `weeks`, `months` of 365/12 days, `years` of 365 days), is not
/// yet valid, or cannot be read. The certificates are those the listener was started with.
pub(crate) async fn certificate_expiration<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path((within, unit)): Path<(String, String)>,
) -> Check {
    api.login(&headers, peer)?;
    let window = expiration_window(&within, &unit).map_err(ApiError::bad_request)?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let failures = |validities: &[crate::tls::Validity]| -> Vec<String> {
        validities
            .iter()
            .filter_map(|v| v.failure(now, window))
            .collect()
    };
    let node = api.node();
    let expiring: Vec<Value> = api
        .listeners
        .iter()
        .filter_map(|listener| {
            let served = listener.certificates.as_ref()?;
            let (certfile, chain) = &served.certfile;
            let certfile_failures = failures(chain);
            let cacertfile_failures = served
                .cacertfile
                .as_ref()
                .map_or_else(Vec::new, |(_, cas)| failures(cas));
            if certfile_failures.is_empty() && cacertfile_failures.is_empty() {
                return None;
            }
            Some(json!({
                "node": node,
                "protocol": listener.protocol,
                "interface": listener.addr.ip().to_string(),
                "port": listener.addr.port(),
                "certfile": certfile.display().to_string(),
                "cacertfile": served.cacertfile.as_ref().map(|(path, _)| path.display().to_string()),
                "certfile_expires_on": certfile_failures,
                "cacertfile_expires_on": cacertfile_failures,
            }))
        })
        .collect();
    if expiring.is_empty() {
        return Ok(passed());
    }
    Ok(failed("Certificates expiring", "expired", expiring))
}

/// The window of a certificate-expiration check, or RabbitMQ's words for what is wrong
/// with it.
fn expiration_window(within: &str, unit: &str) -> Result<Duration, &'static str> {
    const DAY: f64 = 86_400.0;
    let within: i64 = within.parse().map_err(|_| "Invalid expiration value.")?;
    let unit = match unit.to_lowercase().as_str() {
        "days" => DAY,
        "weeks" => DAY * 7.0,
        "months" => DAY * 365.0 / 12.0,
        "years" => DAY * 365.0,
        _ => return Err("Time unit not recognised. Supported units: days, weeks, months, years."),
    };
    // A negative window checks a date in the past: nothing expires before it but what
    // has expired already.
    Ok(Duration::from_secs_f64((within as f64 * unit).max(0.0)))
}

/// `GET /api/health/checks/node-is-quorum-critical` and `node-is-mirror-sync-critical`:
/// this broker is a single node, so shutting it down endangers no quorum or mirror; they
/// pass as RabbitMQ's do on a single node cluster.
pub(crate) async fn single_node<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
) -> Check {
    api.login(&headers, peer)?;
    Ok((
        StatusCode::OK,
        Json(json!({"status": "ok", "reason": "single node cluster"})),
    ))
}

/// The queue of the aliveness test, RabbitMQ's name.
const ALIVENESS_QUEUE: &str = "aliveness-test";

/// `GET /api/aliveness-test/{vhost}`: declares the queue `aliveness-test` in the virtual host
/// (transient; kept between checks, as RabbitMQ keeps it), publishes `test_message` to it
/// and gets a message back, as the user: configure, write and read permissions on it are
/// needed. 404 for a missing virtual host, 401 for one the user may not see.
pub(crate) async fn aliveness_test<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path(vhost): Path<String>,
) -> Check {
    let login = api.login(&headers, peer)?;
    let broker = api.broker(&login, &vhost)?;
    login.may(&vhost, Access::Configure, Resource::Queue, ALIVENESS_QUEUE)?;
    login.may(&vhost, Access::Write, Resource::Exchange, "")?;
    login.may(&vhost, Access::Read, Resource::Queue, ALIVENESS_QUEUE)?;
    let conn = broker.connect();
    let outcome = aliveness_round_trip(broker, &conn).await;
    conn.close();
    let reason = match outcome {
        Ok(None) => return Ok(passed()),
        Ok(Some(reason)) => reason,
        Err(e) => e.to_string(),
    };
    Ok((
        StatusCode::SERVICE_UNAVAILABLE,
        Json(json!({"status": "failed", "reason": reason})),
    ))
}

/// The aliveness test's declare, publish and get on a connection of the virtual host's
/// broker: `None` when the message came back, else why not. A publisher blocked by an
/// alarm fails the test at once instead of waiting for the alarm to clear.
async fn aliveness_round_trip<E: WireEnvelope>(
    broker: &stream_engine::Broker<E>,
    conn: &stream_engine::Connection<E>,
) -> stream_engine::AmqpResult<Option<String>> {
    let ch = conn.open_channel()?;
    ch.queue_declare(ALIVENESS_QUEUE, QueueOptions::default(), FieldTable::new())?;
    let message = E::from_wire(Message::new(b"test_message".to_vec()));
    match ch.try_basic_publish("", ALIVENESS_QUEUE, PublishOptions::default(), message) {
        TryPublish::Done(outcome) => {
            outcome?;
        }
        TryPublish::Pending(pending) => {
            pending.wait().await?;
        }
        TryPublish::Blocked(_) => {
            let why = broker.blocked_reason();
            return Ok(Some(why.unwrap_or_else(|| "publishers are blocked".into())));
        }
    }
    let got = ch.basic_get(ALIVENESS_QUEUE, true)?;
    ch.close();
    Ok(got
        .is_none()
        .then(|| "aliveness-test queue is empty".to_string()))
}
