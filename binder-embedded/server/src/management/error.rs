//! The management API's errors, as RabbitMQ's plugin answers them: a status and
//! `{"error": ..., "reason": ...}`.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use stream_engine::{AmqpError, ReplyCode};

/// A refused request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status} {error}: {reason}")]
pub(crate) struct ApiError {
    pub status: StatusCode,
    pub error: &'static str,
    pub reason: String,
    /// Send `WWW-Authenticate: Basic` (not to the page's own requests, so the browser shows
    /// no dialog of its own).
    pub challenge: bool,
}

impl ApiError {
    pub(crate) fn unauthorised(reason: &str, challenge: bool) -> Self {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            error: "not_authorised",
            reason: reason.to_owned(),
            challenge,
        }
    }

    pub(crate) fn not_found() -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            error: "Object Not Found",
            reason: "Not Found".to_owned(),
            challenge: false,
        }
    }

    pub(crate) fn bad_request(reason: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            error: "bad_request",
            reason: reason.into(),
            challenge: false,
        }
    }

    pub(crate) fn access_refused(reason: String) -> Self {
        ApiError {
            status: StatusCode::FORBIDDEN,
            error: "access_refused",
            reason,
            challenge: false,
        }
    }

    pub(crate) fn internal(reason: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            error: "internal_error",
            reason: reason.into(),
            challenge: false,
        }
    }
}

impl From<AmqpError> for ApiError {
    fn from(e: AmqpError) -> Self {
        match e.code {
            ReplyCode::NotFound => ApiError::not_found(),
            ReplyCode::AccessRefused => ApiError::access_refused(e.text),
            ReplyCode::InternalError => ApiError::internal(e.text),
            ReplyCode::ResourceLocked => ApiError {
                status: StatusCode::METHOD_NOT_ALLOWED,
                error: "resource_locked",
                reason: e.text,
                challenge: false,
            },
            _ => ApiError::bad_request(e.text),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({"error": self.error, "reason": self.reason});
        let mut response = (self.status, axum::Json(body)).into_response();
        if self.challenge {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Basic realm=\"RabbitMQ Management\""),
            );
        }
        response
    }
}
