//! Policies and operator policies, as RabbitMQ's API serves them:
//! `GET /api/policies[/{vhost}[/{name}]]`, `PUT` and `DELETE /api/policies/{vhost}/{name}`,
//! and the same under `/api/operator-policies`. As in RabbitMQ, only `policymaker` and
//! `administrator` users see and change policies (a policymaker in the virtual hosts it has
//! permissions on); any management user lists the operator policies of the virtual hosts it
//! sees, and only administrators read one by name, set or clear them. The engine validates
//! and applies both ([`stream_engine::PolicyDef`], [`stream_engine::PolicyKind`]); a broker
//! with a data directory keeps them across a restart.

use axum::Json;
use axum::body::Body;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::StatusCode;
use serde_json::{Map, Value, json};
use stream_engine::{AmqpResult, Broker, PolicyDef, PolicyKind, PolicyTarget};

use super::Api;
use super::api::{BODY_LIMIT, Reply, body_object, read_body, same_as_path};
use super::error::ApiError;
use super::health::Ctx;
use super::json;
use super::login::Login;
use crate::envelope::WireEnvelope;

/// A policy as RabbitMQ's API and definitions show one.
pub(super) fn policy_json(vhost: &str, p: &PolicyDef) -> Value {
    json!({
        "vhost": vhost,
        "name": p.name,
        "pattern": p.pattern,
        "apply-to": p.apply_to.as_str(),
        "definition": json::table(&p.definition),
        "priority": p.priority,
    })
}

/// RabbitMQ's order: by priority, then by virtual host and name.
fn sorted(mut list: Vec<(String, PolicyDef)>) -> Vec<Value> {
    list.sort_by(|(va, a), (vb, b)| (a.priority, va, &a.name).cmp(&(b.priority, vb, &b.name)));
    list.iter().map(|(v, p)| policy_json(v, p)).collect()
}

/// Refuses a user who may not see or change `vhost`'s policies (401, RabbitMQ's reason).
fn policymaker(login: &Login, vhost: Option<&str>) -> Result<(), ApiError> {
    let user = &login.user;
    let allowed = user.has_tag("administrator")
        || (user.has_tag("policymaker") && vhost.is_none_or(|v| user.permissions(v).is_some()));
    if allowed {
        Ok(())
    } else {
        Err(ApiError::unauthorised(
            "User not authorised to access object",
            false,
        ))
    }
}

/// `GET /api/policies`: those of every virtual host the user may see policies of.
pub(crate) async fn all<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
) -> Result<Json<Value>, ApiError> {
    let login = api.login(&headers, peer)?;
    policymaker(&login, None)?;
    let mut list = Vec::new();
    for (vhost, broker) in api.shared.brokers() {
        if policymaker(&login, Some(vhost)).is_ok() {
            list.extend(broker.policies().into_iter().map(|p| (vhost.clone(), p)));
        }
    }
    Ok(Json(Value::Array(sorted(list))))
}

/// The broker of `vhost` whose policies the user may see and change: 401 for a user who may
/// not (whether or not the virtual host exists, so as to tell nothing of it), then 404 for a
/// virtual host there is not.
fn policies_of<'a, E: WireEnvelope>(
    api: &'a Api<E>,
    login: &Login,
    vhost: &str,
) -> Result<&'a Broker<E>, ApiError> {
    policymaker(login, None)?;
    let broker = api
        .shared
        .brokers()
        .get(vhost)
        .ok_or_else(ApiError::not_found)?;
    policymaker(login, Some(vhost))?;
    Ok(broker)
}

/// `GET /api/policies/{vhost}`.
pub(crate) async fn of_vhost<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path(vhost): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let login = api.login(&headers, peer)?;
    let broker = policies_of(&api, &login, &vhost)?;
    let list = broker.policies().into_iter().map(|p| (vhost.clone(), p));
    Ok(Json(Value::Array(sorted(list.collect()))))
}

/// `GET /api/policies/{vhost}/{name}`.
pub(crate) async fn one<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let login = api.login(&headers, peer)?;
    let broker = policies_of(&api, &login, &vhost)?;
    broker
        .policies()
        .into_iter()
        .find(|p| p.name == name)
        .map(|p| Json(policy_json(&vhost, &p)))
        .ok_or_else(ApiError::not_found)
}

/// A policy from a `PUT` body or a definitions entry: `pattern` and `definition` required,
/// `priority` (an integer, default 0) and `apply-to` (default `all`) optional; `name` and
/// `vhost`, when present, must be `name` and `vhost`. Anything else is refused by name.
pub(super) fn parse(
    fields: &Map<String, Value>,
    vhost: &str,
    name: &str,
) -> Result<PolicyDef, ApiError> {
    let mut pattern = None;
    let mut definition = None;
    let mut priority = 0;
    let mut apply_to = PolicyTarget::All;
    for (key, value) in fields {
        match key.as_str() {
            "pattern" => {
                pattern = Some(value.as_str().map(str::to_owned).ok_or_else(|| {
                    ApiError::bad_request(format!("pattern must be a string, not {value}"))
                })?)
            }
            "definition" => match value {
                Value::Object(map) => definition = Some(json::to_table(map)),
                _ => {
                    return Err(ApiError::bad_request(format!(
                        "definition must be a JSON object, not {value}"
                    )));
                }
            },
            "priority" => {
                priority = value.as_i64().ok_or_else(|| {
                    ApiError::bad_request(format!("priority must be an integer, not {value}"))
                })?
            }
            "apply-to" => apply_to = value
                .as_str()
                .and_then(PolicyTarget::from_name)
                .ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "apply-to {value} unrecognised; should be 'queues', 'exchanges' or 'all'"
                    ))
                })?,
            "name" => same_as_path(key, value, name)?,
            "vhost" => same_as_path(key, value, vhost)?,
            other => return Err(ApiError::bad_request(format!("unknown field '{other}'"))),
        }
    }
    let missing = |what: &str| ApiError::bad_request(format!("the policy needs a '{what}'"));
    Ok(PolicyDef {
        name: name.to_owned(),
        pattern: pattern.ok_or_else(|| missing("pattern"))?,
        apply_to,
        priority,
        definition: definition.ok_or_else(|| missing("definition"))?,
    })
}

/// `PUT /api/policies/{vhost}/{name}`: 201 when created, 204 when replaced (the whole
/// policy: what the body leaves out takes its default), 400 naming what is wrong.
pub(crate) async fn put<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path((vhost, name)): Path<(String, String)>,
    body: Body,
) -> Result<StatusCode, ApiError> {
    let login = api.login(&headers, peer)?;
    let broker = policies_of(&api, &login, &vhost)?;
    let body = read_body(body, BODY_LIMIT).await?;
    let policy = parse(&body_object(&body)?, &vhost, &name)?;
    let replaced = broker.set_policy(policy)?;
    tracing::info!(%vhost, policy = %name, user = %login.user.name, "policy set");
    Ok(if replaced {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::CREATED
    })
}

/// `DELETE /api/policies/{vhost}/{name}`: 204, or 404 when there is none of that name.
pub(crate) async fn delete<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let login = api.login(&headers, peer)?;
    let broker = policies_of(&api, &login, &vhost)?;
    broker.clear_policy(&name)?;
    tracing::info!(%vhost, policy = %name, user = %login.user.name, "policy cleared");
    Ok(StatusCode::NO_CONTENT)
}

// ---- operator policies ------------------------------------------------------------------

/// Sets a policy of `kind`; whether it replaced one.
pub(super) fn set_of_kind<E: WireEnvelope>(
    broker: &Broker<E>,
    kind: PolicyKind,
    policy: PolicyDef,
) -> AmqpResult<bool> {
    match kind {
        PolicyKind::Policy => broker.set_policy(policy),
        PolicyKind::Operator => broker.set_operator_policy(policy),
    }
}

/// `GET /api/operator-policies`: those of every virtual host the user sees, by priority
/// (as RabbitMQ lists them), then virtual host and name.
pub(crate) async fn operator_all<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
) -> Reply {
    let login = api.login(&headers, peer)?;
    let list = (api.visible(&login).into_iter())
        .flat_map(|(vhost, broker)| {
            let of_vhost = broker.operator_policies().into_iter();
            of_vhost.map(move |p| (vhost.to_owned(), p))
        })
        .collect();
    Ok(Json(Value::Array(sorted(list))))
}

/// `GET /api/operator-policies/{vhost}`: 404 for a virtual host there is not, 401 for one
/// the user does not see.
pub(crate) async fn operator_of_vhost<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path(vhost): Path<String>,
) -> Reply {
    let login = api.login(&headers, peer)?;
    let broker = api.broker(&login, &vhost)?;
    let list = broker.operator_policies().into_iter();
    Ok(Json(Value::Array(sorted(
        list.map(|p| (vhost.clone(), p)).collect(),
    ))))
}

/// The broker of `vhost` for an administrator (401 for anyone else, then 404 for a virtual
/// host there is not).
fn operator_policies_of<'a, E: WireEnvelope>(
    api: &'a Api<E>,
    login: &Login,
    vhost: &str,
) -> Result<&'a Broker<E>, ApiError> {
    login.administrator()?;
    api.shared
        .brokers()
        .get(vhost)
        .ok_or_else(ApiError::not_found)
}

/// `GET /api/operator-policies/{vhost}/{name}`, for an administrator.
pub(crate) async fn operator_one<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let login = api.login(&headers, peer)?;
    let broker = operator_policies_of(&api, &login, &vhost)?;
    broker
        .operator_policies()
        .into_iter()
        .find(|p| p.name == name)
        .map(|p| Json(policy_json(&vhost, &p)))
        .ok_or_else(ApiError::not_found)
}

/// `PUT /api/operator-policies/{vhost}/{name}`, for an administrator: 201 when created, 204
/// when replaced, 400 naming what is wrong (a key other than the limits operator policies
/// set, among others).
pub(crate) async fn operator_put<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path((vhost, name)): Path<(String, String)>,
    body: Body,
) -> Result<StatusCode, ApiError> {
    let login = api.login(&headers, peer)?;
    let broker = operator_policies_of(&api, &login, &vhost)?;
    let body = read_body(body, BODY_LIMIT).await?;
    let policy = parse(&body_object(&body)?, &vhost, &name)?;
    let replaced = broker.set_operator_policy(policy)?;
    tracing::info!(%vhost, operator_policy = %name, user = %login.user.name, "operator policy set");
    Ok(if replaced {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::CREATED
    })
}

/// `DELETE /api/operator-policies/{vhost}/{name}`, for an administrator: 204, or 404 when
/// there is none of that name.
pub(crate) async fn operator_delete<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let login = api.login(&headers, peer)?;
    let broker = operator_policies_of(&api, &login, &vhost)?;
    broker.clear_operator_policy(&name)?;
    tracing::info!(%vhost, operator_policy = %name, user = %login.user.name, "operator policy cleared");
    Ok(StatusCode::NO_CONTENT)
}
