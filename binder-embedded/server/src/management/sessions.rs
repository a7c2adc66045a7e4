//! RabbitMQ's paths for who is attached: connections (listed, shown, closed), their channels,
//! and consumers with the channel each runs on. A `management` user sees its own connections
//! and channels, `monitoring` and `administrator` users everyone's; a connection may be closed
//! by its own user or an administrator.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::UNIX_EPOCH;

use axum::Json;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::StatusCode;
use serde_json::{Value, json};
use stream_engine::{ChannelInfo, ConsumerInfo};

use super::Api;
use super::api::Ctx;
use super::error::ApiError;
use super::json;
use super::login::Login;
use super::rates::{CHANNEL_KEYS, ChannelCounts, ChannelStats};
use crate::envelope::WireEnvelope;
use crate::registry::{ConnectionInfo, ListedChannel, Listing};

type Reply = Result<Json<Value>, ApiError>;

/// The reason a management close gives when the request names none (`X-Reason`), as
/// RabbitMQ's.
const DEFAULT_CLOSE_REASON: &str = "Closed via management plugin";

/// RabbitMQ's refusal when the user may not see or close a connection or channel.
fn not_authorised_for_object() -> ApiError {
    ApiError::unauthorised("User not authorised to access object", false)
}

/// Whether the user sees this connection and its channels.
fn sees(login: &Login, listing: &Listing) -> bool {
    login.is_monitor() || listing.info.user == login.user.name
}

/// A connection the user sees, by name: 404 when there is none for a user who could see
/// any, else 401 (as RabbitMQ, which tells others nothing of connections not theirs).
fn visible_connection<E: WireEnvelope>(
    api: &Api<E>,
    login: &Login,
    name: &str,
    may_see_any: bool,
) -> Result<Arc<Listing>, ApiError> {
    match api.shared.listed.named(name) {
        Some(listing) if may_see_any || listing.info.user == login.user.name => Ok(listing),
        Some(_) => Err(not_authorised_for_object()),
        None if may_see_any => Err(ApiError::not_found()),
        None => Err(not_authorised_for_object()),
    }
}

/// The connections the user sees, oldest first; of one virtual host (404 if there is none,
/// 401 if the user may not see it) or of all.
fn visible_connections<E: WireEnvelope>(
    api: &Api<E>,
    login: &Login,
    vhost: Option<&str>,
) -> Result<Vec<Arc<Listing>>, ApiError> {
    if let Some(vhost) = vhost {
        api.broker(login, vhost)?;
    }
    Ok(api
        .shared
        .listed
        .snapshot()
        .into_iter()
        .filter(|l| sees(login, l) && vhost.is_none_or(|v| l.info.vhost == v))
        .collect())
}

fn millis(time: std::time::SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn connection_json<E: WireEnvelope>(api: &Api<E>, listing: &Listing) -> Value {
    let c: &ConnectionInfo = &listing.info;
    json!({
        "name": listing.name(),
        "node": api.node(),
        "type": "network",
        "protocol": "AMQP 0-9-1",
        "state": listing.state(),
        "user": c.user,
        "user_who_performed_action": c.user,
        "vhost": c.vhost,
        "auth_mechanism": c.mechanism,
        "client_properties": json::table(&c.client_properties),
        "channels": listing.channel_count(),
        "channel_max": c.channel_max,
        "frame_max": c.frame_max,
        "timeout": c.heartbeat,
        "peer_host": c.peer.ip().to_string(),
        "peer_port": c.peer.port(),
        "host": c.local.ip().to_string(),
        "port": c.local.port(),
        "ssl": c.tls.is_some(),
        "ssl_protocol": c.tls,
        "connected_at": millis(c.connected_at),
        "recv_oct": c.traffic.received(),
        "send_oct": c.traffic.sent(),
    })
}

/// A channel's name, as RabbitMQ's: `connection name (number)`.
fn channel_name(connection: &Listing, number: u16) -> String {
    format!("{} ({number})", connection.name())
}

/// What a consumer's JSON says of its channel.
fn channel_details<E: WireEnvelope>(api: &Api<E>, listing: &Listing, number: u16) -> Value {
    let c = &listing.info;
    json!({
        "name": channel_name(listing, number),
        "number": number,
        "connection_name": listing.name(),
        "node": api.node(),
        "peer_host": c.peer.ip().to_string(),
        "peer_port": c.peer.port(),
        "user": c.user,
    })
}

/// A channel as RabbitMQ lists it.
fn channel_json<E: WireEnvelope>(
    api: &Api<E>,
    listing: &Listing,
    number: u16,
    listed: &ListedChannel,
    info: &ChannelInfo,
) -> Value {
    let c = &listing.info;
    let unconfirmed = listed.unconfirmed.load(Ordering::Relaxed);
    let confirmed = listed.confirmed.load(Ordering::Relaxed);
    json!({
        "name": channel_name(listing, number),
        "number": number,
        "node": api.node(),
        "state": "running",
        "user": c.user,
        "user_who_performed_action": c.user,
        "vhost": c.vhost,
        "connection_details": {
            "name": listing.name(),
            "peer_host": c.peer.ip().to_string(),
            "peer_port": c.peer.port(),
        },
        "prefetch_count": info.prefetch_count,
        "global_prefetch_count": info.global_prefetch_count,
        "consumer_count": info.consumers,
        "messages_unacknowledged": info.unacknowledged,
        "messages_unconfirmed": unconfirmed,
        "messages_uncommitted": info.uncommitted_publishes,
        "acks_uncommitted": info.uncommitted_acks,
        "confirm": info.confirm,
        "transactional": info.transactional,
        "message_stats": channel_stats(
            channel_counts(info, confirmed),
            api.rates.channel(&c.vhost, info.id)
        ),
    })
}

/// A channel's counts now, in [`CHANNEL_KEYS`]' order (`confirmed` is counted by the
/// connection, which sends the confirms).
pub(crate) fn channel_counts(info: &ChannelInfo, confirmed: u64) -> ChannelCounts {
    [
        info.published,
        confirmed,
        info.counts.returned,
        info.counts.dropped_unroutable,
        info.delivered,
        info.delivered_to_consumers,
        info.counts.no_ack,
        info.counts.got,
        info.counts.got_no_ack,
        info.counts.got_empty,
        info.counts.redelivered,
        info.acknowledged,
    ]
}

/// A channel's `message_stats`: counts since it opened (now), rates over the last sample
/// interval.
fn channel_stats(counts: ChannelCounts, rates: ChannelStats) -> Value {
    let mut stats = serde_json::Map::new();
    for (i, key) in CHANNEL_KEYS.iter().enumerate() {
        stats.insert((*key).to_owned(), json!(counts[i]));
        stats.insert(format!("{key}_details"), json!({"rate": rates.0[i].rate}));
    }
    Value::Object(stats)
}

/// The engine's channels of each virtual host these connections are on, by id.
fn engine_channels<E: WireEnvelope>(
    api: &Api<E>,
    connections: &[Arc<Listing>],
) -> HashMap<String, HashMap<u64, ChannelInfo>> {
    let mut out: HashMap<String, HashMap<u64, ChannelInfo>> = HashMap::new();
    for listing in connections {
        let vhost = &listing.info.vhost;
        if out.contains_key(vhost) {
            continue;
        }
        let channels = api
            .shared
            .brokers()
            .get(vhost)
            .map(|b| b.channels().into_iter().map(|c| (c.id, c)).collect())
            .unwrap_or_default();
        out.insert(vhost.clone(), channels);
    }
    out
}

/// The channels of these connections, each connection's by number.
fn channels_json<E: WireEnvelope>(api: &Api<E>, connections: &[Arc<Listing>]) -> Vec<Value> {
    let engine = engine_channels(api, connections);
    let mut out = Vec::new();
    for listing in connections {
        let Some(infos) = engine.get(&listing.info.vhost) else {
            continue;
        };
        for (number, channel) in listing.channels() {
            // A channel the engine no longer has is closing: left out.
            if let Some(info) = infos.get(&channel.engine_id) {
                out.push(channel_json(api, listing, number, &channel, info));
            }
        }
    }
    out
}

/// `GET /api/connections`.
pub(crate) async fn connections<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
) -> Reply {
    let login = api.login(&headers, peer)?;
    let list = visible_connections(&api, &login, None)?;
    Ok(Json(Value::Array(
        list.iter().map(|l| connection_json(&api, l)).collect(),
    )))
}

/// `GET /api/vhosts/{vhost}/connections`.
pub(crate) async fn vhost_connections<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path(vhost): Path<String>,
) -> Reply {
    let login = api.login(&headers, peer)?;
    let list = visible_connections(&api, &login, Some(&vhost))?;
    Ok(Json(Value::Array(
        list.iter().map(|l| connection_json(&api, l)).collect(),
    )))
}

/// `GET /api/connections/{name}`.
pub(crate) async fn connection<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path(name): Path<String>,
) -> Reply {
    let login = api.login(&headers, peer)?;
    let listing = visible_connection(&api, &login, &name, login.is_monitor())?;
    Ok(Json(connection_json(&api, &listing)))
}

/// `DELETE /api/connections/{name}`: closes the connection with 320 CONNECTION_FORCED and
/// the request's `X-Reason` (else RabbitMQ's "Closed via management plugin"). Answers once
/// the close is asked for, as RabbitMQ: the connection then tears down what it holds and
/// sends the close (waiting at most a few seconds for a client that stopped reading).
pub(crate) async fn close_connection<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    let login = api.login(&headers, peer)?;
    let administrator = login.administrator().is_ok();
    let listing = visible_connection(&api, &login, &name, administrator)?;
    let reason = headers.get("x-reason").map_or_else(
        || DEFAULT_CLOSE_REASON.to_owned(),
        |v| String::from_utf8_lossy(v.as_bytes()).into_owned(),
    );
    tracing::info!(
        connection = %name, by = %login.user.name, %reason,
        "closing connection on a management request"
    );
    listing.request_close(reason);
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /api/connections/{name}/channels`.
pub(crate) async fn connection_channels<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path(name): Path<String>,
) -> Reply {
    let login = api.login(&headers, peer)?;
    let listing = visible_connection(&api, &login, &name, login.is_monitor())?;
    Ok(Json(Value::Array(channels_json(&api, &[listing]))))
}

/// `GET /api/channels`.
pub(crate) async fn channels<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
) -> Reply {
    let login = api.login(&headers, peer)?;
    let list = visible_connections(&api, &login, None)?;
    Ok(Json(Value::Array(channels_json(&api, &list))))
}

/// `GET /api/vhosts/{vhost}/channels`.
pub(crate) async fn vhost_channels<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path(vhost): Path<String>,
) -> Reply {
    let login = api.login(&headers, peer)?;
    let list = visible_connections(&api, &login, Some(&vhost))?;
    Ok(Json(Value::Array(channels_json(&api, &list))))
}

/// Splits RabbitMQ's channel name, `connection name (number)`.
fn split_channel_name(name: &str) -> Option<(&str, u16)> {
    let (connection, number) = name.strip_suffix(')')?.rsplit_once(" (")?;
    Some((connection, number.parse().ok()?))
}

/// `GET /api/channels/{name}`: the channel with its consumers (`consumer_details`).
pub(crate) async fn channel<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path(name): Path<String>,
) -> Reply {
    let login = api.login(&headers, peer)?;
    let monitor = login.is_monitor();
    let Some((connection, number)) = split_channel_name(&name) else {
        return Err(if monitor {
            ApiError::not_found()
        } else {
            not_authorised_for_object()
        });
    };
    let listing = visible_connection(&api, &login, connection, monitor)?;
    let Some((_, listed)) = listing.channels().into_iter().find(|(n, _)| *n == number) else {
        return Err(ApiError::not_found());
    };
    let broker = api
        .shared
        .brokers()
        .get(&listing.info.vhost)
        .ok_or_else(ApiError::not_found)?;
    let Some(info) = broker.channel(listed.engine_id) else {
        return Err(ApiError::not_found());
    };
    let mut out = channel_json(&api, &listing, number, &listed, &info);
    let details = channel_details(&api, &listing, number);
    out["consumer_details"] = broker
        .consumers()
        .iter()
        .filter(|c| c.channel == listed.engine_id)
        .map(|c| {
            let mut consumer = consumer_json(&listing.info.vhost, c);
            consumer["channel_details"] = details.clone();
            consumer
        })
        .collect();
    out["deliveries"] = json!([]);
    out["publishes"] = json!([]);
    Ok(Json(out))
}

/// A consumer as RabbitMQ lists it (without its channel).
fn consumer_json(vhost: &str, c: &ConsumerInfo) -> Value {
    json!({
        "consumer_tag": c.consumer_tag,
        "queue": {"name": c.queue, "vhost": vhost},
        "ack_required": c.ack_required,
        "exclusive": c.exclusive,
        "prefetch_count": c.prefetch_count,
        "active": true,
        "activity_status": "up",
        "arguments": {},
    })
}

/// The consumers of the virtual hosts the user sees, or of one; each with `channel_details`
/// when it runs on a network connection's channel (a service's in-process consumers have
/// none). A user who is not a monitor sees only those on its own connections, as in
/// RabbitMQ.
fn consumers_of<E: WireEnvelope>(api: &Api<E>, login: &Login, vhost: Option<&str>) -> Reply {
    let mut on_channels: HashMap<(&str, u64), (Arc<Listing>, u16)> = HashMap::new();
    let listed = api.shared.listed.snapshot();
    for listing in &listed {
        for (number, channel) in listing.channels() {
            on_channels.insert(
                (listing.info.vhost.as_str(), channel.engine_id),
                (listing.clone(), number),
            );
        }
    }
    api.list(login, vhost, |api, vhost, broker| {
        broker
            .consumers()
            .iter()
            .filter_map(|c| {
                let on = on_channels.get(&(vhost, c.channel));
                if !login.is_monitor() && !on.is_some_and(|(l, _)| sees(login, l)) {
                    return None;
                }
                let mut consumer = consumer_json(vhost, c);
                if let Some((listing, number)) = on {
                    consumer["channel_details"] = channel_details(api, listing, *number);
                }
                Some(consumer)
            })
            .collect()
    })
}

/// `GET /api/consumers`.
pub(crate) async fn consumers<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
) -> Reply {
    let login = api.login(&headers, peer)?;
    consumers_of(&api, &login, None)
}

/// `GET /api/consumers/{vhost}`.
pub(crate) async fn vhost_consumers<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path(vhost): Path<String>,
) -> Reply {
    let login = api.login(&headers, peer)?;
    consumers_of(&api, &login, Some(&vhost))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_names_split_at_the_last_parenthesis() {
        assert_eq!(
            split_channel_name("127.0.0.1:5000 -> 127.0.0.1:5673 (12)"),
            Some(("127.0.0.1:5000 -> 127.0.0.1:5673", 12))
        );
        assert_eq!(
            split_channel_name("[::1]:5000 -> [::1]:5673 (1)"),
            Some(("[::1]:5000 -> [::1]:5673", 1))
        );
        assert_eq!(split_channel_name("no number"), None);
        assert_eq!(split_channel_name("c (x)"), None);
        assert_eq!(split_channel_name("c (70000)"), None);
    }
}
