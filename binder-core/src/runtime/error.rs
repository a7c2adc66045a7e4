//! Errors of handlers, startup and sending.

use std::fmt;

/// A handler's failure: what went wrong and whether trying again may help.
///
/// Any `std::error::Error` converts into it (retryable, its type name as the kind), so
/// handlers can use `?`. Use [`HandlerError::fatal`] for failures that retrying cannot fix.
///
/// ```
/// use binder_core::runtime::HandlerError;
///
/// let e = HandlerError::fatal("order 7 has no lines");
/// assert!(!e.is_retryable());
/// let io: HandlerError = std::io::Error::other("disk full").into();
/// assert!(io.is_retryable());
/// assert_eq!(io.kind(), "std::io::error::Error");
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct HandlerError {
    message: String,
    trace: String,
    kind: String,
    retryable: Option<bool>,
}

impl HandlerError {
    /// A retryable failure with this message.
    pub fn retryable(message: impl fmt::Display) -> Self {
        HandlerError {
            message: message.to_string(),
            trace: message.to_string(),
            kind: "retryable".to_owned(),
            retryable: Some(true),
        }
    }

    /// A failure that retrying cannot fix: it goes straight to the dead-letter path.
    pub fn fatal(message: impl fmt::Display) -> Self {
        HandlerError {
            message: message.to_string(),
            trace: message.to_string(),
            kind: "fatal".to_owned(),
            retryable: Some(false),
        }
    }

    /// A failure of a named kind, retried or not by `defaultRetryable` and
    /// `retryableExceptions` (which match the kind, or its last `::` segment).
    pub fn of_kind(kind: impl Into<String>, message: impl fmt::Display) -> Self {
        HandlerError {
            message: message.to_string(),
            trace: message.to_string(),
            kind: kind.into(),
            retryable: None,
        }
    }

    /// The message (`x-exception-message`).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The error chain (`x-exception-stacktrace`).
    pub fn trace(&self) -> &str {
        &self.trace
    }

    /// The kind (an error type name, or `fatal`/`retryable`/`decode`/`panic`).
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// Whether the error itself says it is retryable (errors of a kind defer to the
    /// binding's configuration).
    pub fn is_retryable(&self) -> bool {
        self.retryable.unwrap_or(true)
    }

    /// Whether to retry under a binding's `defaultRetryable` and `retryableExceptions`.
    pub fn should_retry(
        &self,
        default_retryable: bool,
        retryable: &std::collections::BTreeMap<String, bool>,
    ) -> bool {
        if let Some(explicit) = self.retryable {
            return explicit;
        }
        let short = self.kind.rsplit("::").next().unwrap_or(&self.kind);
        retryable
            .get(&self.kind)
            .or_else(|| retryable.get(short))
            .copied()
            .unwrap_or(default_retryable)
    }

    pub(crate) fn decode(reason: impl fmt::Display) -> Self {
        HandlerError {
            kind: "decode".to_owned(),
            retryable: Some(false),
            ..HandlerError::fatal(reason)
        }
    }

    pub(crate) fn panic(reason: impl fmt::Display) -> Self {
        HandlerError {
            message: format!("handler panicked: {reason}"),
            trace: format!("handler panicked: {reason}"),
            kind: "panic".to_owned(),
            retryable: None,
        }
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for HandlerError {
    fn from(e: E) -> Self {
        let mut trace = e.to_string();
        let mut source = e.source();
        while let Some(s) = source {
            trace.push_str("\ncaused by: ");
            trace.push_str(&s.to_string());
            source = s.source();
        }
        HandlerError {
            message: e.to_string(),
            trace,
            kind: std::any::type_name::<E>().to_owned(),
            retryable: None,
        }
    }
}

impl fmt::Debug for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerError")
            .field("kind", &self.kind)
            .field("message", &self.message)
            .finish()
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Why an application did not start. Lists every problem found.
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
#[error("the application cannot start:{}", self.problems.iter().map(|p| format!("\n  - {p}")).collect::<String>())]
pub struct StartupError {
    /// Each problem, naming the binding.
    pub problems: Vec<String>,
}

/// Shows the same text as `Display`, so `?` in a `main` returning `Result<_, Box<dyn Error>>`
/// prints the problems as a person reads them.
impl fmt::Debug for StartupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Why a send failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The payload could not be encoded.
    #[error(transparent)]
    Encode(#[from] crate::codec::EncodeError),
    /// The routing key expression could not be evaluated.
    #[error("routing key of binding `{binding}`: {reason}")]
    RoutingKey {
        /// The output binding.
        binding: String,
        /// Why.
        reason: String,
    },
    /// The destination is not allowed (`dynamicDestinations`) or the binding is unknown.
    #[error("{0}")]
    Destination(String),
    /// The binding is stopped.
    #[error("binding `{0}` is stopped")]
    Stopped(String),
    /// The binder failed or did not confirm.
    #[error(transparent)]
    Binder(#[from] crate::binder::BinderError),
}
