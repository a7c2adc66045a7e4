//! RabbitMQ's paths for users and permissions, read-only: `GET /api/users[/{name}]` and
//! `GET /api/permissions[/{vhost}/{user}]`, for administrators. They come from the server's
//! configuration file, so the paths that would change them (`PUT` and `DELETE` on users,
//! permissions and virtual hosts) answer 405 saying where they are configured, rather than
//! 404.

use axum::Json;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::Api;
use super::error::ApiError;
use super::health::Ctx;
use crate::auth::User;
use crate::envelope::WireEnvelope;

/// The hashing algorithm of every password hash shown.
pub(super) const HASHING: &str = "rabbit_password_hashing_sha256";

/// A user as RabbitMQ's API and definitions show one.
pub(super) fn user_json(user: &User) -> Value {
    json!({
        "name": user.name,
        "password_hash": user.password_hash(),
        "hashing_algorithm": HASHING,
        "tags": user.tags,
        "limits": {},
    })
}

/// Every permission of every user, by user then virtual host.
pub(super) fn permissions_json<E: WireEnvelope>(api: &Api<E>) -> Vec<Value> {
    let mut out = Vec::new();
    for user in api.shared.users().all() {
        let mut on: Vec<_> = user.all_permissions().collect();
        on.sort_by_key(|(vhost, _)| *vhost);
        for (vhost, p) in on {
            let [configure, write, read] = p.sources();
            out.push(json!({
                "user": user.name,
                "vhost": vhost,
                "configure": configure,
                "write": write,
                "read": read,
            }));
        }
    }
    out
}

/// `GET /api/users`: every configured user (with its password hash, as RabbitMQ shows it).
pub(crate) async fn users<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
) -> Result<Json<Value>, ApiError> {
    api.login(&headers, peer)?.administrator()?;
    let all: Vec<Value> = api
        .shared
        .users()
        .all()
        .into_iter()
        .map(user_json)
        .collect();
    Ok(Json(Value::Array(all)))
}

/// `GET /api/users/{name}`: one user; 404 for a name not configured.
pub(crate) async fn user<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    api.login(&headers, peer)?.administrator()?;
    let user = api
        .shared
        .users()
        .named(&name)
        .ok_or_else(ApiError::not_found)?;
    Ok(Json(user_json(user)))
}

/// `GET /api/permissions`: every user's permissions on every virtual host.
pub(crate) async fn permissions<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
) -> Result<Json<Value>, ApiError> {
    api.login(&headers, peer)?.administrator()?;
    Ok(Json(Value::Array(permissions_json(&api))))
}

/// `GET /api/permissions/{vhost}/{user}`: one user's permissions on one virtual host; 404
/// when it has none there.
pub(crate) async fn permission<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    api.login(&headers, peer)?.administrator()?;
    permissions_json(&api)
        .into_iter()
        .find(|p| p["user"] == name.as_str() && p["vhost"] == vhost.as_str())
        .map(Json)
        .ok_or_else(ApiError::not_found)
}

/// `PUT` or `DELETE` on a user, a permission or a virtual host: for an
/// administrator (401 otherwise, as RabbitMQ answers), 405 naming where they are configured
/// instead, with `Allow: GET`.
pub(crate) async fn configured_in_the_file<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
) -> Response {
    if let Err(refused) = api.login(&headers, peer).and_then(|l| l.administrator()) {
        return refused.into_response();
    }
    let refusal = ApiError {
        status: StatusCode::METHOD_NOT_ALLOWED,
        error: "method_not_allowed",
        reason: "stream-broker's users, permissions and virtual hosts come from its \
                 configuration file ([[users]], vhosts): change the file and restart the \
                 server"
            .into(),
        challenge: false,
    };
    ([(header::ALLOW, "GET")], refusal).into_response()
}
