//! RabbitMQ's aliveness test, `GET /api/aliveness-test/{vhost}`: a message through a queue
//! of the virtual host and back, as the user.

use axum::extract::{ConnectInfo, Path, State};
use stream_engine::{AmqpResult, Broker, FieldTable, Message, PublishOptions, QueueOptions};

use super::health::{Check, Ctx, failed, passed};
use crate::auth::{Access, Resource};
use crate::envelope::WireEnvelope;

/// The queue of the aliveness test, RabbitMQ's name.
const QUEUE: &str = "aliveness-test";

/// `GET /api/aliveness-test/{vhost}`: declares the queue `aliveness-test` in the virtual host
/// (transient; kept between checks, as RabbitMQ keeps it), publishes `test_message` to it
/// through the default exchange and gets a message back. It runs as the user: permissions
/// on the virtual host (401 without) and configure, write and read on the queue (403) are
/// needed; 404 for a missing virtual host. An alarm does not block it (RabbitMQ runs it on
/// a direct connection, which alarms do not block): a liveness probe must not fail because
/// the disk is nearly full. A virtual host whose message store failed fails it: that
/// virtual host is down.
pub(crate) async fn aliveness_test<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path(vhost): Path<String>,
) -> Check {
    let login = api.login(&headers, peer)?;
    let broker = api.broker(&login, &vhost)?;
    login.connects_to(&vhost)?;
    login.may(&vhost, Access::Configure, Resource::Queue, QUEUE)?;
    login.may(&vhost, Access::Write, Resource::Exchange, "")?;
    login.may(&vhost, Access::Read, Resource::Queue, QUEUE)?;
    if let Some(cause) = broker.store_failure() {
        return Ok(failed(
            &format!("the virtual host is down: its message store failed: {cause}"),
            &[],
        ));
    }
    let reason = match round_trip(broker).await {
        Ok(true) => return Ok(passed()),
        Ok(false) => "aliveness-test queue is empty".to_string(),
        Err(e) => e.to_string(),
    };
    Ok(failed(&reason, &[]))
}

/// Declares, publishes and gets on a connection of its own: whether the message came back.
async fn round_trip<E: WireEnvelope>(broker: &Broker<E>) -> AmqpResult<bool> {
    // Dropped on every path: closing a connection closes its channels.
    let conn = broker.connect();
    let ch = conn.open_channel()?;
    ch.queue_declare(QUEUE, QueueOptions::default(), FieldTable::new())?;
    let message = E::from_wire(Message::new(b"test_message".to_vec()));
    ch.basic_publish_past_alarms("", QUEUE, PublishOptions::default(), message)
        .await?;
    let got = ch.basic_get(QUEUE, true)?;
    Ok(got.is_some())
}
