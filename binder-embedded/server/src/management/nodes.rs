//! RabbitMQ's `GET /api/nodes` and `GET /api/nodes/{name}`: this broker as the one node of
//! its cluster, with the resource figures monitoring integrations read (memory against the
//! watermark, disk free against its limit, the alarms, file descriptors, sockets, uptime).
//! Only figures this broker has are given: Erlang's (processes, run queue, garbage
//! collection, I/O statistics) are left out rather than made up.

use axum::Json;
use axum::extract::{ConnectInfo, Path, State};
use serde_json::{Value, json};

use super::Api;
use super::error::ApiError;
use super::health::Ctx;
use crate::envelope::WireEnvelope;

impl<E: WireEnvelope> Api<E> {
    /// The node as RabbitMQ's `/api/nodes` shows one.
    fn node_json(&self) -> Value {
        let brokers = self.shared.brokers();
        // Each virtual host's broker has its own watermark, and blocks its publishers when
        // what it holds reaches it: the figures are those of the one nearest its watermark,
        // so that `mem_used` reaching `mem_limit` is what raises the alarm, as in RabbitMQ
        // (with one virtual host, the broker's own figures).
        let nearest = brokers
            .values()
            .filter_map(|b| Some((b.memory_used(), b.memory_high_watermark()?)))
            .max_by(|(u1, l1), (u2, l2)| {
                // u1/l1 against u2/l2, without division.
                (*u1 as u128 * *l2 as u128).cmp(&(*u2 as u128 * *l1 as u128))
            });
        let mem_used = match nearest {
            Some((used, _)) => used,
            None => brokers.values().map(|b| b.memory_used()).sum(),
        };
        let mem_limit = nearest.map(|(_, limit)| limit);
        let alarms = brokers.values().map(|b| b.alarms());
        let (mut mem_alarm, mut disk_alarm) = (false, false);
        for a in alarms {
            mem_alarm |= a.memory;
            disk_alarm |= a.disk;
        }
        let mut node = json!({
            "name": self.node(),
            "type": "disc",
            "running": true,
            "os_pid": std::process::id().to_string(),
            "uptime": self.started.elapsed().as_millis() as u64,
            "processors": std::thread::available_parallelism().map_or(1, usize::from),
            "rates_mode": "basic",
            "partitions": [],
            "being_drained": false,
            "mem_used": mem_used,
            "mem_alarm": mem_alarm,
            "disk_free_alarm": disk_alarm,
            "sockets_used": self.shared.connections(),
        });
        if let Some(limit) = mem_limit {
            node["mem_limit"] = json!(limit);
        }
        if let Some((dir, limit)) = self.shared.disk_watch() {
            node["disk_free_limit"] = json!(limit);
            if let Ok(free) = stream_store::free_space(dir) {
                node["disk_free"] = json!(free);
            }
        }
        if let Some(max) = self.shared.limits().max_connections {
            node["sockets_total"] = json!(max);
        }
        if let Some((used, total)) = file_descriptors() {
            node["fd_used"] = json!(used);
            node["fd_total"] = json!(total);
        }
        node
    }
}

/// The process's open file descriptors and its limit on them (Linux's `/proc/self`).
fn file_descriptors() -> Option<(usize, u64)> {
    // Less the one the listing itself holds open.
    let used = std::fs::read_dir("/proc/self/fd")
        .ok()?
        .count()
        .saturating_sub(1);
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let soft = line
        .trim_start_matches("Max open files")
        .split_whitespace()
        .next()?;
    Some((used, soft.parse().ok()?))
}

/// `GET /api/nodes`: this node, for a `monitoring` or `administrator` user (401 `Not
/// monitor user` otherwise, as in RabbitMQ).
pub(crate) async fn nodes<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
) -> Result<Json<Value>, ApiError> {
    monitor(&api, &headers, peer)?;
    Ok(Json(json!([api.node_json()])))
}

/// `GET /api/nodes/{name}`: this node by its name; 404 for another.
pub(crate) async fn node<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    monitor(&api, &headers, peer)?;
    if name != api.node() {
        return Err(ApiError::not_found());
    }
    Ok(Json(api.node_json()))
}

fn monitor<E: WireEnvelope>(
    api: &Api<E>,
    headers: &axum::http::HeaderMap,
    peer: std::net::SocketAddr,
) -> Result<(), ApiError> {
    if api.login(headers, peer)?.is_monitor() {
        Ok(())
    } else {
        Err(ApiError::unauthorised("Not monitor user", false))
    }
}
