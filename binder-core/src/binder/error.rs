//! Why a binder operation failed: a [`BinderError`] of some [`BinderErrorKind`], with the
//! middleware's own error kept as its source.

use std::error::Error;
use std::fmt;
use std::sync::Arc;

/// What kind of failure a [`BinderError`] is. The kind tells a caller what to do: wait and
/// try again ([`BinderErrorKind::is_retryable`]), or stop and report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BinderErrorKind {
    /// A declaration was refused (e.g. a redeclaration with other arguments).
    Declare,
    /// The broker refused a publish (negative confirm), or no confirm came.
    NotConfirmed,
    /// The queue or exchange does not exist.
    NotFound,
    /// The broker cannot be reached (connection refused, broker stopped, no answer).
    /// Startup waits and tries again; a lost subscription is resumed.
    Unreachable,
    /// The broker answered and refused the connection: wrong credentials, an unknown
    /// virtual host, no access to it. Waiting does not help.
    Refused,
    /// The binder, producer or subscription is closed (a channel or connection went away).
    Closed,
    /// The binder's own configuration is invalid (the message names the key).
    Config,
    /// The delivery was settled before: a delivery is settled once.
    AlreadySettled,
    /// The binding settles its deliveries itself (`acknowledgeMode` is not `MANUAL`), so a
    /// handler may not.
    NotManual,
    /// The binder does not offer this operation.
    Unsupported,
    /// The message cannot be routed as the binding says (its routing key expression fails
    /// on it); it was not sent.
    Unroutable,
    /// Any other broker failure.
    Broker,
}

impl BinderErrorKind {
    /// Whether waiting and trying again can help: the broker was unreachable, the channel or
    /// connection closed under the operation, or a publish got no positive confirm (a full
    /// queue, a broker under alarm). Refusals, missing entities, configuration mistakes and
    /// misuse are not retryable.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            BinderErrorKind::Unreachable | BinderErrorKind::Closed | BinderErrorKind::NotConfirmed
        )
    }
}

/// Why a binder operation failed: its [`kind`](BinderError::kind), a message for people
/// (which names the entity and the broker's reason), and the middleware's error as its
/// [`source`](Error::source) when there is one.
///
/// ```
/// use binder_core::binder::{BinderError, BinderErrorKind};
///
/// let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
/// let e = BinderError::unreachable("connection refused").with_source(io);
/// assert_eq!(e.kind(), BinderErrorKind::Unreachable);
/// assert!(e.is_retryable());
/// assert_eq!(e.to_string(), "the broker cannot be reached: connection refused");
/// assert!(std::error::Error::source(&e).is_some());
/// ```
#[derive(Clone)]
pub struct BinderError {
    kind: BinderErrorKind,
    message: String,
    source: Option<Arc<dyn Error + Send + Sync>>,
}

impl BinderError {
    /// An error of `kind` whose text is `message` as it is.
    pub fn new(kind: BinderErrorKind, message: impl Into<String>) -> Self {
        BinderError {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// A refused declaration of `what` (e.g. "queue `orders.billing`").
    pub fn declare(what: impl fmt::Display, reason: impl fmt::Display) -> Self {
        Self::new(
            BinderErrorKind::Declare,
            format!("cannot declare {what}: {reason}"),
        )
    }

    /// A publish to `exchange` with `routing_key` that was refused or not confirmed.
    pub fn not_confirmed(exchange: &str, routing_key: &str, reason: impl fmt::Display) -> Self {
        Self::new(
            BinderErrorKind::NotConfirmed,
            format!(
                "publish to exchange `{exchange}` with key `{routing_key}` was not confirmed: {reason}"
            ),
        )
    }

    /// `what` (e.g. "queue `orders.billing`") does not exist.
    pub fn not_found(what: impl fmt::Display) -> Self {
        Self::new(BinderErrorKind::NotFound, format!("{what} does not exist"))
    }

    /// The broker cannot be reached.
    pub fn unreachable(reason: impl fmt::Display) -> Self {
        Self::new(
            BinderErrorKind::Unreachable,
            format!("the broker cannot be reached: {reason}"),
        )
    }

    /// The broker refused the connection.
    pub fn refused(reason: impl fmt::Display) -> Self {
        Self::new(
            BinderErrorKind::Refused,
            format!("the broker refused the connection: {reason}"),
        )
    }

    /// `what` (a channel, a producer, a subscription) is closed.
    pub fn closed(what: impl fmt::Display) -> Self {
        Self::new(BinderErrorKind::Closed, format!("{what} is closed"))
    }

    /// The binder's configuration is invalid; `problem` names the key.
    pub fn config(problem: impl fmt::Display) -> Self {
        Self::new(
            BinderErrorKind::Config,
            format!("invalid configuration: {problem}"),
        )
    }

    /// Delivery `tag` was settled before.
    pub fn already_settled(tag: u64) -> Self {
        Self::new(
            BinderErrorKind::AlreadySettled,
            format!("delivery {tag} is already settled"),
        )
    }

    /// A handler tried to settle a delivery of a binding the runtime settles itself.
    pub fn not_manual() -> Self {
        Self::new(
            BinderErrorKind::NotManual,
            "this binding settles automatically (acknowledgeMode is not MANUAL)",
        )
    }

    /// Any other broker failure.
    pub fn broker(reason: impl fmt::Display) -> Self {
        Self::new(BinderErrorKind::Broker, reason.to_string())
    }

    /// Keeps `source` (the middleware's error) as the cause.
    pub fn with_source(mut self, source: impl Error + Send + Sync + 'static) -> Self {
        self.source = Some(Arc::new(source));
        self
    }

    /// The same error with `note` appended to its message (`"…; note"`), its kind and
    /// source kept.
    pub fn with_note(mut self, note: impl fmt::Display) -> Self {
        self.message = format!("{}; {note}", self.message);
        self
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> BinderErrorKind {
        self.kind
    }

    /// Whether waiting and trying again can help (see [`BinderErrorKind::is_retryable`]).
    pub fn is_retryable(&self) -> bool {
        self.kind.is_retryable()
    }
}

impl fmt::Display for BinderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Debug for BinderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("BinderError");
        d.field("kind", &self.kind).field("message", &self.message);
        if let Some(source) = &self.source {
            d.field("source", source);
        }
        d.finish()
    }
}

impl Error for BinderError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.source.as_deref().map(|s| s as &(dyn Error + 'static))
    }
}

/// Shorthand for binder results.
pub type BinderResult<T> = Result<T, BinderError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_name_what_failed_and_kinds_tell_what_to_do() {
        let cases = [
            (
                BinderError::declare("queue `q`", "PRECONDITION_FAILED"),
                "cannot declare queue `q`: PRECONDITION_FAILED",
                false,
            ),
            (
                BinderError::not_confirmed("x", "k", "nack"),
                "publish to exchange `x` with key `k` was not confirmed: nack",
                true,
            ),
            (
                BinderError::not_found("queue `q`"),
                "queue `q` does not exist",
                false,
            ),
            (
                BinderError::refused("ACCESS_REFUSED"),
                "the broker refused the connection: ACCESS_REFUSED",
                false,
            ),
            (
                BinderError::closed("channel 3"),
                "channel 3 is closed",
                true,
            ),
            (
                BinderError::config("`a.b` is wrong"),
                "invalid configuration: `a.b` is wrong",
                false,
            ),
            (
                BinderError::already_settled(7),
                "delivery 7 is already settled",
                false,
            ),
        ];
        for (error, text, retryable) in cases {
            assert_eq!(error.to_string(), text);
            assert_eq!(error.is_retryable(), retryable, "{text}");
        }
        assert_eq!(BinderError::not_manual().kind(), BinderErrorKind::NotManual);
    }

    #[test]
    fn a_note_keeps_the_kind_and_the_source() {
        let io = std::io::Error::other("refused");
        let e = BinderError::unreachable("refused")
            .with_source(io)
            .with_note("gave up");
        assert_eq!(e.kind(), BinderErrorKind::Unreachable);
        assert_eq!(
            e.to_string(),
            "the broker cannot be reached: refused; gave up"
        );
        assert_eq!(e.source().unwrap().to_string(), "refused");
        let cloned = e.clone();
        assert!(cloned.source().is_some());
    }
}
