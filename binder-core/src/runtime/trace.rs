//! Trace context: the W3C `traceparent` of the message being handled travels to everything
//! the handler sends.

use futures::future::Either;
use tokio::task::futures::TaskLocalFuture;

use crate::message::Message;

/// The W3C trace-context header.
pub const TRACEPARENT: &str = "traceparent";

tokio::task_local! {
    static CURRENT: Option<String>;
}

/// `fut` with the trace context of `message` in scope. A plain function, not an `async fn`:
/// an async wrapper would store `fut` twice in the caller's state machine. A message without
/// a `traceparent` runs `fut` as it is: outside any scope there is no context to propagate
/// either, and deliveries are never handled inside another delivery's scope.
pub(crate) fn scope<F: std::future::Future>(
    message: &Message,
    fut: F,
) -> Either<TaskLocalFuture<Option<String>, F>, F> {
    match message.headers.get_str(TRACEPARENT) {
        Some(parent) => Either::Left(CURRENT.scope(Some(parent.to_owned()), fut)),
        None => Either::Right(fut),
    }
}

/// Copies the current trace context onto an outgoing message that has none.
pub(crate) fn propagate(message: &mut Message) {
    if message.headers.contains(TRACEPARENT) {
        return;
    }
    let current = CURRENT.try_with(Clone::clone).ok().flatten();
    if let Some(parent) = current {
        message.headers.insert(TRACEPARENT, parent);
    }
}
