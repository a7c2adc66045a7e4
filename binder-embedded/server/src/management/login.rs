//! Who may use the management API, and what they see: HTTP basic authentication with the
//! broker's users, RabbitMQ's tags (`management`, `policymaker`, `monitoring`,
//! `administrator`) and its visibility rules (a `management` user sees the virtual hosts it
//! has permissions on and its own connections; `monitoring` and `administrator` see all).

use std::net::IpAddr;
use std::sync::Arc;

use axum::http::HeaderMap;
use base64::Engine as _;

use super::error::ApiError;
use crate::auth::{Access, Resource, User, Users};

/// The tags that open the management API.
const MANAGEMENT_TAGS: &[&str] = &["management", "policymaker", "monitoring", "administrator"];

/// A logged-in management user.
#[derive(Debug, Clone)]
pub(crate) struct Login {
    pub user: Arc<User>,
}

impl Login {
    /// Checks the request's `Authorization: Basic` header from `peer`.
    pub(crate) fn check(
        users: &Users,
        headers: &HeaderMap,
        peer: IpAddr,
    ) -> Result<Self, ApiError> {
        let quiet = headers
            .get("x-requested-with")
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"XMLHttpRequest"));
        let unauthorised = |reason: &str| ApiError::unauthorised(reason, !quiet);
        let Some(value) = headers.get(axum::http::header::AUTHORIZATION) else {
            return Err(unauthorised("Not_Authorized"));
        };
        let encoded = value
            .to_str()
            .ok()
            .and_then(|v| {
                v.strip_prefix("Basic ")
                    .or_else(|| v.strip_prefix("basic "))
            })
            .ok_or_else(|| unauthorised("Not_Authorized"))?;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .map_err(|_| unauthorised("Not_Authorized"))?;
        let colon = decoded
            .iter()
            .position(|b| *b == b':')
            .ok_or_else(|| unauthorised("Not_Authorized"))?;
        let name =
            std::str::from_utf8(&decoded[..colon]).map_err(|_| unauthorised("Not_Authorized"))?;
        let user = users
            .login(name, &decoded[colon + 1..], peer)
            .map_err(|e| {
                tracing::info!(%peer, reason = %e, "management login refused");
                unauthorised("Login failed")
            })?;
        if !MANAGEMENT_TAGS.iter().any(|t| user.has_tag(t)) {
            return Err(unauthorised("Not management user"));
        }
        Ok(Login { user })
    }

    /// `monitoring` or `administrator`: sees every virtual host and connection.
    pub(crate) fn is_monitor(&self) -> bool {
        self.user.has_tag("monitoring") || self.user.has_tag("administrator")
    }

    /// Whether the user sees this virtual host's objects.
    pub(crate) fn sees(&self, vhost: &str) -> bool {
        self.is_monitor() || self.user.permissions(vhost).is_some()
    }

    /// Refuses a virtual host the user may not see (RabbitMQ's 401 for it).
    pub(crate) fn vhost(&self, vhost: &str) -> Result<(), ApiError> {
        if self.sees(vhost) {
            Ok(())
        } else {
            Err(ApiError::unauthorised(
                "Not authorised to access virtual host",
                false,
            ))
        }
    }

    /// Refuses a user without the `administrator` tag (RabbitMQ's 401 for the definitions).
    pub(crate) fn administrator(&self) -> Result<(), ApiError> {
        if self.user.has_tag("administrator") {
            Ok(())
        } else {
            Err(ApiError::unauthorised("Not administrator user", false))
        }
    }

    /// Refuses a virtual host the user has no permissions on (401), whatever its tags: what
    /// runs as the user there, as an AMQP connection would (RabbitMQ's aliveness test).
    pub(crate) fn connects_to(&self, vhost: &str) -> Result<(), ApiError> {
        if self.user.permissions(vhost).is_some() {
            Ok(())
        } else {
            Err(ApiError::unauthorised(
                "User not authorised to access virtual host",
                false,
            ))
        }
    }

    /// Checks what a declaration's arguments send messages to, as an AMQP declaration
    /// would ([`crate::auth::User::check_declared_targets`]; 403 when refused).
    pub(crate) fn may_target(
        &self,
        vhost: &str,
        resource: Resource,
        name: &str,
        arguments: &stream_engine::FieldTable,
    ) -> Result<(), ApiError> {
        self.user
            .check_declared_targets(vhost, resource, name, arguments)
            .map_err(ApiError::access_refused)
    }

    /// Checks a permission as an AMQP operation would (403 when refused).
    pub(crate) fn may(
        &self,
        vhost: &str,
        access: Access,
        resource: Resource,
        name: &str,
    ) -> Result<(), ApiError> {
        self.user
            .check(vhost, access, resource, name)
            .map_err(ApiError::access_refused)
    }
}
