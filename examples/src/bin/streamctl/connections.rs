//! `close_connection`, as `rabbitmqctl` names it: asks the broker, through its management
//! API (RabbitMQ's plugin or `stream-broker`'s), to close a client's connection with 320
//! CONNECTION_FORCED and an explanation the client is told.

use binder_rabbit::uri_component;

use crate::broker::{Target, TargetError};

/// Closes the connection named `name` (`peer -> local`, as `list_connections name` prints
/// it), telling the client `explanation`.
pub fn close(target: &Target, name: &str, explanation: &str) -> Result<(), TargetError> {
    let api =
        target.required_management("close_connection", "close another client's connection")?;
    if !target.quiet {
        outln!("Closing connection {name}, reason: {explanation}...");
    }
    api.delete(
        &format!("connections/{}", uri_component(name)),
        &[("X-Reason", explanation)],
    )
    .map_err(|e| TargetError::Failed(e.to_string()))
}
