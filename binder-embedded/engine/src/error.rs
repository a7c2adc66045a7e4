//! Engine errors, one-to-one with AMQP 0-9-1 reply codes.

use std::fmt;

/// AMQP reply codes the engine produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReplyCode {
    /// 403: the operation is not permitted (reserved names, internal exchanges, exclusivity).
    AccessRefused,
    /// 404: the entity does not exist.
    NotFound,
    /// 405: the queue is exclusive to another connection.
    ResourceLocked,
    /// 406: the request contradicts the current state (redeclaration with other attributes,
    /// unknown delivery tag, `if-unused`/`if-empty` not met).
    PreconditionFailed,
    /// 504: the channel is closed.
    ChannelError,
    /// 530: the operation is not allowed (a connection error).
    NotAllowed,
    /// 540: the feature is not implemented (a connection error).
    NotImplemented,
    /// 541: the broker failed (here: its message store could not keep a message).
    InternalError,
}

impl ReplyCode {
    /// The numeric AMQP code.
    pub fn code(self) -> u16 {
        match self {
            ReplyCode::AccessRefused => 403,
            ReplyCode::NotFound => 404,
            ReplyCode::ResourceLocked => 405,
            ReplyCode::PreconditionFailed => 406,
            ReplyCode::ChannelError => 504,
            ReplyCode::NotAllowed => 530,
            ReplyCode::NotImplemented => 540,
            ReplyCode::InternalError => 541,
        }
    }

    /// The AMQP reply text constant.
    pub fn name(self) -> &'static str {
        match self {
            ReplyCode::AccessRefused => "ACCESS_REFUSED",
            ReplyCode::NotFound => "NOT_FOUND",
            ReplyCode::ResourceLocked => "RESOURCE_LOCKED",
            ReplyCode::PreconditionFailed => "PRECONDITION_FAILED",
            ReplyCode::ChannelError => "CHANNEL_ERROR",
            ReplyCode::NotAllowed => "NOT_ALLOWED",
            ReplyCode::NotImplemented => "NOT_IMPLEMENTED",
            ReplyCode::InternalError => "INTERNAL_ERROR",
        }
    }

    /// Whether AMQP closes the whole connection for this code (otherwise only the channel).
    /// (A store failure reported as [`ReplyCode::InternalError`] reaches only the publisher
    /// whose confirm it fails: the broker closes nothing for it.)
    pub fn is_connection_error(self) -> bool {
        matches!(self, ReplyCode::NotAllowed | ReplyCode::NotImplemented)
    }
}

impl fmt::Display for ReplyCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.code(), self.name())
    }
}

/// An AMQP error: the reply code and a text in RabbitMQ's style.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code} - {text}")]
pub struct AmqpError {
    /// The reply code.
    pub code: ReplyCode,
    /// What happened.
    pub text: String,
}

impl AmqpError {
    pub(crate) fn new(code: ReplyCode, text: impl Into<String>) -> Self {
        AmqpError {
            code,
            text: text.into(),
        }
    }

    pub(crate) fn not_found(what: impl fmt::Display) -> Self {
        Self::new(ReplyCode::NotFound, format!("no {what}"))
    }

    pub(crate) fn precondition(text: impl Into<String>) -> Self {
        Self::new(ReplyCode::PreconditionFailed, text)
    }

    pub(crate) fn access_refused(text: impl Into<String>) -> Self {
        Self::new(ReplyCode::AccessRefused, text)
    }

    pub(crate) fn channel_closed() -> Self {
        Self::new(ReplyCode::ChannelError, "channel is closed")
    }

    /// The store could not keep a published message (its confirm fails).
    pub(crate) fn store_failed(error: &crate::store::StoreError) -> Self {
        Self::new(
            ReplyCode::InternalError,
            format!("message store failed to keep the message: {error}"),
        )
    }
}

/// Shorthand for engine results.
pub type AmqpResult<T> = Result<T, AmqpError>;
