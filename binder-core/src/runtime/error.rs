//! Errors of handlers.

use std::backtrace::{Backtrace, BacktraceStatus};
use std::fmt;
use std::sync::Arc;

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
///
/// Where it came from goes with it to `x-exception-stacktrace`: the error's `source()` chain,
/// a panic's location, and a backtrace of where it was made when `RUST_BACKTRACE` (or
/// `RUST_LIB_BACKTRACE`) asks for one.
#[derive(Clone)]
pub struct HandlerError {
    message: String,
    trace: String,
    kind: String,
    retryable: Option<bool>,
    backtrace: Option<Arc<Backtrace>>,
}

/// Errors are equal when they say the same; where they were made does not count.
impl PartialEq for HandlerError {
    fn eq(&self, other: &Self) -> bool {
        self.message == other.message
            && self.trace == other.trace
            && self.kind == other.kind
            && self.retryable == other.retryable
    }
}

impl Eq for HandlerError {}

/// A backtrace of the caller, if the environment asks for backtraces.
fn backtrace() -> Option<Arc<Backtrace>> {
    let captured = Backtrace::capture();
    (captured.status() == BacktraceStatus::Captured).then(|| Arc::new(captured))
}

impl HandlerError {
    /// A retryable failure with this message.
    pub fn retryable(message: impl fmt::Display) -> Self {
        HandlerError {
            message: message.to_string(),
            trace: message.to_string(),
            kind: "retryable".to_owned(),
            retryable: Some(true),
            backtrace: backtrace(),
        }
    }

    /// A failure that retrying cannot fix: it goes straight to the dead-letter path.
    pub fn fatal(message: impl fmt::Display) -> Self {
        HandlerError {
            message: message.to_string(),
            trace: message.to_string(),
            kind: "fatal".to_owned(),
            retryable: Some(false),
            backtrace: backtrace(),
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
            backtrace: backtrace(),
        }
    }

    /// The message (`x-exception-message`).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The error chain, or where a panic happened.
    pub fn trace(&self) -> &str {
        &self.trace
    }

    /// Where the error was made (or the handler panicked), if `RUST_BACKTRACE` asked for
    /// backtraces.
    pub fn backtrace(&self) -> Option<&Backtrace> {
        self.backtrace.as_deref()
    }

    /// What `x-exception-stacktrace` carries: [`HandlerError::trace`], then the backtrace if
    /// there is one.
    pub fn stack_trace(&self) -> String {
        match &self.backtrace {
            None => self.trace.clone(),
            Some(b) => format!("{}\nstack backtrace:\n{b}", self.trace),
        }
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

    /// A payload that does not decode. Made by the runtime, so no backtrace: it would show
    /// only the runtime's own frames.
    pub(crate) fn decode(reason: impl fmt::Display) -> Self {
        HandlerError {
            message: reason.to_string(),
            trace: reason.to_string(),
            kind: "decode".to_owned(),
            retryable: Some(false),
            backtrace: None,
        }
    }

    /// A handler that panicked with `reason`, at `location` (`file:line:column`) if known,
    /// with the backtrace taken when it panicked.
    pub(crate) fn panic(
        reason: impl fmt::Display,
        location: Option<&str>,
        backtrace: Option<Backtrace>,
    ) -> Self {
        let message = format!("handler panicked: {reason}");
        let trace = match location {
            Some(at) => format!("{message}\n  at {at}"),
            None => message.clone(),
        };
        HandlerError {
            message,
            trace,
            kind: "panic".to_owned(),
            retryable: None,
            backtrace: backtrace.map(Arc::new),
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
            backtrace: backtrace(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("order 7 cannot be invoiced")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn the_trace_walks_the_source_chain() {
        let e: HandlerError = Outer(std::io::Error::other("disk full")).into();
        assert_eq!(e.message(), "order 7 cannot be invoiced");
        assert_eq!(
            e.trace(),
            "order 7 cannot be invoiced\ncaused by: disk full"
        );
    }

    #[test]
    fn a_panic_carries_its_location() {
        let e = HandlerError::panic("boom", Some("src/orders.rs:12:5"), None);
        assert_eq!(e.message(), "handler panicked: boom");
        assert_eq!(e.trace(), "handler panicked: boom\n  at src/orders.rs:12:5");
        assert_eq!(e.stack_trace(), e.trace(), "no backtrace asked for");
    }

    /// Runs `test` of this binary again in a child process with `RUST_BACKTRACE` set or
    /// not (the process reads it once, so a test cannot change it for itself).
    fn in_child(test: &str, backtrace: bool) {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap());
        child
            .args(["--exact", test, "--test-threads=1"])
            .env("BACKTRACE_CHILD", if backtrace { "1" } else { "0" })
            .env_remove("RUST_LIB_BACKTRACE");
        if backtrace {
            child.env("RUST_BACKTRACE", "1");
        } else {
            child.env_remove("RUST_BACKTRACE");
        }
        let out = child.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "child run failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn a_backtrace_is_taken_when_rust_backtrace_asks_for_one() {
        const NAME: &str =
            "runtime::error::tests::a_backtrace_is_taken_when_rust_backtrace_asks_for_one";
        match std::env::var("BACKTRACE_CHILD").as_deref() {
            Ok("1") => {
                let e = HandlerError::fatal("no lines");
                assert!(e.backtrace().is_some());
                let trace = e.stack_trace();
                assert!(trace.starts_with("no lines\nstack backtrace:\n"), "{trace}");
                let from: HandlerError = std::io::Error::other("x").into();
                assert!(from.backtrace().is_some());
            }
            Ok(_) => {
                let e = HandlerError::fatal("no lines");
                assert!(e.backtrace().is_none());
                assert_eq!(e.stack_trace(), "no lines");
            }
            Err(_) => {
                in_child(NAME, true);
                in_child(NAME, false);
            }
        }
    }
}
