//! The connection handshake: protocol header, `connection.start`/`start-ok` with SASL,
//! `tune`/`tune-ok` negotiated as RabbitMQ negotiates, and `connection.open` of a virtual
//! host the user may access.

use std::net::SocketAddr;
use std::sync::Arc;

use amq_protocol::protocol::{AMQPClass, connection};
use amq_protocol::types::{AMQPValue, FieldTable, LongString};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::auth::{AuthError, MECHANISMS, User};
use crate::config::FRAME_MIN_SIZE;
use crate::convert::short;
use crate::reply::{self, Close};
use crate::wire::{self, Encoder, PROTOCOL_HEADER};

/// What the client announced in its `capabilities` client property.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientCaps {
    /// `connection.blocked`.
    pub blocked: bool,
    /// `consumer_cancel_notify`.
    pub cancel_notify: bool,
    /// `authentication_failure_close`.
    pub auth_failure_close: bool,
}

impl ClientCaps {
    fn read(properties: &FieldTable) -> Self {
        let Some(AMQPValue::FieldTable(caps)) = properties.inner().get("capabilities") else {
            return ClientCaps::default();
        };
        let on = |k: &str| matches!(caps.inner().get(k), Some(AMQPValue::Boolean(true)));
        ClientCaps {
            blocked: on("connection.blocked"),
            cancel_notify: on("consumer_cancel_notify"),
            auth_failure_close: on("authentication_failure_close"),
        }
    }
}

/// What a successful handshake agreed.
#[derive(Debug)]
pub struct Agreed {
    /// The authenticated user.
    pub user: Arc<User>,
    /// The virtual host opened.
    pub vhost: String,
    /// Negotiated `frame_max` (whole frames).
    pub frame_max: usize,
    /// Negotiated `channel_max`.
    pub channel_max: u16,
    /// Negotiated heartbeat in seconds (0: none).
    pub heartbeat: u16,
    /// The client's capabilities.
    pub caps: ClientCaps,
    /// The SASL mechanism the client logged in with.
    pub mechanism: String,
    /// What the client said of itself (`connection.start-ok`'s `client-properties`).
    pub client_properties: stream_engine::FieldTable,
    /// The connection's place under the connection limit, given back when dropped.
    pub slot: ConnectionSlot,
}

/// One open connection counted against the limit; dropping it gives the place back.
#[derive(Debug)]
pub struct ConnectionSlot(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl ConnectionSlot {
    /// Takes a place if fewer than `max` are taken.
    pub fn take(
        open: &std::sync::Arc<std::sync::atomic::AtomicUsize>,
        max: Option<usize>,
    ) -> Option<Self> {
        use std::sync::atomic::Ordering;
        open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            max.is_none_or(|m| n < m).then_some(n + 1)
        })
        .ok()
        .map(|_| ConnectionSlot(open.clone()))
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// The limits and users the handshake checks against.
pub struct Terms<'a> {
    /// The users.
    pub users: &'a crate::auth::Users,
    /// The server's limits.
    pub limits: &'a crate::config::Limits,
    /// Whether a virtual host exists.
    pub vhost_exists: &'a (dyn Fn(&str) -> bool + Sync),
    /// Takes a connection slot (`None`: the connection limit is reached).
    pub take_slot: &'a (dyn Fn() -> Option<ConnectionSlot> + Sync),
}

impl std::fmt::Debug for Terms<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Terms")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// How a handshake ended without opening.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// The socket failed or closed.
    #[error("socket: {0}")]
    Io(#[from] std::io::Error),
    /// The client offered another protocol (we answered with ours).
    #[error("client offered protocol header {0:?}")]
    BadHeader(Vec<u8>),
    /// We closed the connection with this reply.
    #[error("{}", .0.reply_text())]
    Closed(Close),
    /// A login failed (closed with 403 if the client can take it, else dropped).
    #[error("login refused: {0}")]
    Auth(AuthError),
    /// The client closed the connection during the handshake.
    #[error("client closed the connection during the handshake")]
    ClientClosed,
}

fn server_properties() -> FieldTable {
    let mut caps = FieldTable::default();
    for cap in [
        "publisher_confirms",
        "exchange_exchange_bindings",
        "basic.nack",
        "consumer_cancel_notify",
        "connection.blocked",
        "consumer_priorities",
        "authentication_failure_close",
        "per_consumer_qos",
    ] {
        caps.insert(cap.into(), AMQPValue::Boolean(true));
    }
    let text = |s: &str| AMQPValue::LongString(LongString::from(s.as_bytes().to_vec()));
    let mut props = FieldTable::default();
    props.insert("capabilities".into(), AMQPValue::FieldTable(caps));
    props.insert("product".into(), text("stream-broker"));
    props.insert("version".into(), text(env!("CARGO_PKG_VERSION")));
    props.insert("platform".into(), text("Rust"));
    props.insert(
        "information".into(),
        text("An AMQP 0-9-1 listener in front of the stream engine"),
    );
    props
}

/// The read side of a connection's transport (a TCP socket's read half, or an in-memory
/// stream in the fuzz harness).
pub type ReadSocket = Box<dyn AsyncRead + Send + Unpin>;

/// A frame reader for the handshake and the connection's life.
pub struct Reader {
    socket: ReadSocket,
    buf: bytes::BytesMut,
    /// Frames larger than this are refused (501).
    pub frame_max: usize,
}

/// A read that failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The socket failed.
    #[error("socket: {0}")]
    Io(#[from] std::io::Error),
    /// The framing is broken.
    #[error(transparent)]
    Frame(#[from] wire::FrameError),
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("buffered", &self.buf.len())
            .field("frame_max", &self.frame_max)
            .finish_non_exhaustive()
    }
}

impl Reader {
    /// A reader on a socket's read half.
    pub fn new(socket: impl AsyncRead + Send + Unpin + 'static, frame_max: usize) -> Self {
        Reader {
            socket: Box::new(socket),
            buf: bytes::BytesMut::with_capacity(16 * 1024),
            frame_max,
        }
    }

    /// Reads the 8-octet protocol header.
    pub async fn header(&mut self) -> std::io::Result<[u8; 8]> {
        while self.buf.len() < 8 {
            if self.socket.read_buf(&mut self.buf).await? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            // A client that is not speaking AMQP at all is answered as soon as it is clear.
            if !PROTOCOL_HEADER.starts_with(&self.buf[..self.buf.len().min(4)]) {
                break;
            }
        }
        let mut header = [0u8; 8];
        let n = self.buf.len().min(8);
        header[..n].copy_from_slice(&self.buf[..n]);
        bytes::Buf::advance(&mut self.buf, n);
        Ok(header)
    }

    /// The next frame (`None`: the client closed the socket). Cancel-safe: what was read
    /// stays buffered.
    pub async fn next(&mut self) -> Result<Option<wire::RawFrame>, ReadError> {
        loop {
            if let Some(frame) = wire::decode(&mut self.buf, self.frame_max)? {
                return Ok(Some(frame));
            }
            if self.socket.read_buf(&mut self.buf).await? == 0 {
                return Ok(None);
            }
        }
    }

    /// Whether a whole frame (or a framing error) is already buffered.
    pub fn has_frame(&self) -> bool {
        if self.buf.len() < 7 {
            return false;
        }
        let size = u32::from_be_bytes([self.buf[3], self.buf[4], self.buf[5], self.buf[6]]);
        self.buf.len() >= (size as usize).saturating_add(wire::FRAME_OVERHEAD)
    }
}

/// Writes frames during the handshake (before the connection's writer task exists).
async fn send<W: AsyncWrite + Unpin>(socket: &mut W, method: AMQPClass) -> std::io::Result<()> {
    let mut e = Encoder::new();
    e.method(0, method);
    socket.write_all(&e.take()).await
}

/// Sends `connection.close` and waits briefly for `close-ok`.
pub async fn close<W: AsyncWrite + Unpin>(reader: &mut Reader, socket: &mut W, close: &Close) {
    let method = AMQPClass::Connection(connection::AMQPMethod::Close(connection::Close {
        reply_code: close.code,
        reply_text: short(&close.reply_text()),
        class_id: close.class_id,
        method_id: close.method_id,
    }));
    if send(socket, method).await.is_err() {
        return;
    }
    let wait = async {
        loop {
            match reader.next().await {
                Ok(Some(f)) if is_close_ok(&f) => return,
                Ok(Some(_)) => continue,
                _ => return,
            }
        }
    };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), wait).await;
    let _ = socket.shutdown().await;
}

fn is_close_ok(frame: &wire::RawFrame) -> bool {
    frame.kind == wire::FRAME_METHOD
        && frame.channel == 0
        && frame.payload.get(..4) == Some(&[0, 10, 0, 51])
}

/// Reads the next method on channel 0 of the handshake; heartbeats are skipped, and a
/// client's `connection.close` is answered.
async fn expect<W: AsyncWrite + Unpin>(
    reader: &mut Reader,
    socket: &mut W,
) -> Result<connection::AMQPMethod, Refused> {
    loop {
        let frame = match reader.next().await {
            Ok(Some(f)) => f,
            Ok(None) => return Err(Refused::ClientClosed),
            Err(ReadError::Io(e)) => return Err(Refused::Io(e)),
            Err(ReadError::Frame(e)) => {
                return Err(Refused::Closed(Close::new(
                    reply::FRAME_ERROR,
                    e.to_string(),
                )));
            }
        };
        if frame.kind == wire::FRAME_HEARTBEAT {
            continue;
        }
        if frame.kind != wire::FRAME_METHOD || frame.channel != 0 {
            return Err(Refused::Closed(Close::new(
                reply::COMMAND_INVALID,
                "expected a connection method on channel 0 during the handshake",
            )));
        }
        match amq_protocol::protocol::parse_class(&frame.payload[..]) {
            Ok(([], AMQPClass::Connection(connection::AMQPMethod::Close(_)))) => {
                let ok = connection::AMQPMethod::CloseOk(connection::CloseOk {});
                send(socket, AMQPClass::Connection(ok)).await?;
                let _ = socket.shutdown().await;
                return Err(Refused::ClientClosed);
            }
            Ok(([], AMQPClass::Connection(m))) => return Ok(m),
            Ok(_) => {
                return Err(Refused::Closed(Close::new(
                    reply::COMMAND_INVALID,
                    "expected a connection method during the handshake",
                )));
            }
            Err(_) => {
                return Err(Refused::Closed(Close::new(
                    reply::SYNTAX_ERROR,
                    "cannot decode the method frame",
                )));
            }
        }
    }
}

fn negotiate(field: &str, server: u32, client: u32, min: u32) -> Result<u32, Close> {
    let fail = |bound: &str, limit: u32| {
        Close::new(
            reply::NOT_ALLOWED,
            format!(
                "negotiated {field} = {client} is {} than the {bound} allowed value ({limit})",
                if bound == "minimum" {
                    "lower"
                } else {
                    "higher"
                }
            ),
        )
    };
    if client != 0 && client < min {
        return Err(fail("minimum", min));
    }
    if server != 0 && (client == 0 || client > server) {
        return Err(fail("maximum", server));
    }
    Ok(client)
}

/// Runs the handshake up to `connection.open-ok`, which [`open_ok`] sends once the caller
/// has registered the connection (a client may look itself up as soon as it is open).
pub async fn run<W: AsyncWrite + Unpin>(
    reader: &mut Reader,
    socket: &mut W,
    peer: SocketAddr,
    terms: &Terms<'_>,
) -> Result<Agreed, Refused> {
    let header = reader.header().await?;
    // RabbitMQ takes AMQP 0-9's header as 0-9-1 too.
    if &header != PROTOCOL_HEADER && &header != b"AMQP\x01\x01\x00\x09" {
        socket.write_all(PROTOCOL_HEADER).await?;
        let _ = socket.shutdown().await;
        return Err(Refused::BadHeader(header.to_vec()));
    }
    let start = connection::Start {
        version_major: 0,
        version_minor: 9,
        server_properties: server_properties(),
        mechanisms: MECHANISMS.into(),
        locales: "en_US".into(),
    };
    send(
        socket,
        AMQPClass::Connection(connection::AMQPMethod::Start(start)),
    )
    .await?;
    let start_ok = match expect(reader, socket).await? {
        connection::AMQPMethod::StartOk(s) => s,
        _ => {
            return Err(Refused::Closed(Close::new(
                reply::COMMAND_INVALID,
                "expected 'connection.start_ok'",
            )));
        }
    };
    let caps = ClientCaps::read(&start_ok.client_properties);
    let user = match terms.users.authenticate(
        start_ok.mechanism.as_str(),
        start_ok.response.as_bytes(),
        peer.ip(),
    ) {
        Ok(user) => user,
        Err(AuthError::UnknownMechanism(m)) => {
            return Err(Refused::Closed(Close::new(
                reply::COMMAND_INVALID,
                format!("unknown authentication mechanism '{m}'"),
            )));
        }
        Err(e) => {
            if caps.auth_failure_close {
                // RabbitMQ's safe text, whatever the reason (the log has it).
                let text = format!(
                    "Login was refused using authentication mechanism {}. For details see the broker logfile.",
                    start_ok.mechanism.as_str()
                );
                close(reader, socket, &Close::new(reply::ACCESS_REFUSED, text)).await;
            } else {
                let _ = socket.shutdown().await;
            }
            return Err(Refused::Auth(e));
        }
    };
    let limits = terms.limits;
    let tune = connection::Tune {
        channel_max: limits.channel_max,
        frame_max: limits.frame_max,
        heartbeat: limits.heartbeat,
    };
    send(
        socket,
        AMQPClass::Connection(connection::AMQPMethod::Tune(tune)),
    )
    .await?;
    let tune_ok = match expect(reader, socket).await? {
        connection::AMQPMethod::TuneOk(t) => t,
        _ => {
            return Err(Refused::Closed(Close::new(
                reply::COMMAND_INVALID,
                "expected 'connection.tune_ok'",
            )));
        }
    };
    let frame_max = negotiate(
        "frame_max",
        limits.frame_max,
        tune_ok.frame_max,
        FRAME_MIN_SIZE,
    )
    .map_err(|c| Refused::Closed(c.on((10, 30))))?;
    let channel_max = negotiate(
        "channel_max",
        u32::from(limits.channel_max),
        u32::from(tune_ok.channel_max),
        0,
    )
    .map_err(|c| Refused::Closed(c.on((10, 30))))?;
    reader.frame_max = frame_max as usize;
    let open = match expect(reader, socket).await? {
        connection::AMQPMethod::Open(o) => o,
        _ => {
            return Err(Refused::Closed(Close::new(
                reply::COMMAND_INVALID,
                "expected 'connection.open'",
            )));
        }
    };
    let vhost = open.virtual_host.as_str().to_owned();
    if !(terms.vhost_exists)(&vhost) {
        return Err(Refused::Closed(
            Close::new(reply::NOT_ALLOWED, format!("vhost {vhost} not found")).on((10, 40)),
        ));
    }
    if user.permissions(&vhost).is_none() {
        return Err(Refused::Closed(
            Close::new(
                reply::NOT_ALLOWED,
                format!("access to vhost '{vhost}' refused for user '{}'", user.name),
            )
            .on((10, 40)),
        ));
    }
    let Some(slot) = (terms.take_slot)() else {
        return Err(Refused::Closed(
            Close::new(
                reply::NOT_ALLOWED,
                format!(
                    "access to vhost '{vhost}' refused for user '{}': connection limit ({}) is reached",
                    user.name,
                    limits.max_connections.unwrap_or(0)
                ),
            )
            .on((10, 40)),
        ));
    };
    Ok(Agreed {
        user,
        vhost,
        frame_max: frame_max as usize,
        channel_max: channel_max as u16,
        heartbeat: tune_ok.heartbeat,
        caps,
        mechanism: start_ok.mechanism.as_str().to_owned(),
        client_properties: crate::convert::table_from_wire(&start_ok.client_properties),
        slot,
    })
}

/// Ends the handshake [`run`] agreed: `connection.open-ok`.
pub async fn open_ok<W: AsyncWrite + Unpin>(socket: &mut W) -> std::io::Result<()> {
    send(
        socket,
        AMQPClass::Connection(connection::AMQPMethod::OpenOk(connection::OpenOk {})),
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_follows_rabbitmq() {
        assert_eq!(negotiate("frame_max", 131072, 4096, 4096), Ok(4096));
        assert!(negotiate("frame_max", 131072, 0, 4096).is_err());
        assert!(negotiate("frame_max", 131072, 200_000, 4096).is_err());
        let low = negotiate("frame_max", 131072, 100, 4096).unwrap_err();
        assert_eq!(
            low.text,
            "negotiated frame_max = 100 is lower than the minimum allowed value (4096)"
        );
        assert_eq!(negotiate("channel_max", 0, 0, 0), Ok(0));
        assert_eq!(negotiate("channel_max", 2047, 10, 0), Ok(10));
    }
}
