//! What the fuzz targets in `fuzz/` drive: the frame decoder, the payload decoders and one
//! whole connection (handshake and life) over any in-memory transport. Hidden and not a
//! stable API: thin wrappers over the server's own code, with no behaviour of their own.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use amq_protocol::protocol::{AMQPClass, basic, channel, connection, queue};
use amq_protocol::types::{FieldTable, LongString};
use stream_engine::{Broker, Native};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

pub use crate::reply::{
    CHANNEL_ERROR, COMMAND_INVALID, FRAME_ERROR, SYNTAX_ERROR, UNEXPECTED_FRAME,
};
pub use crate::wire::{
    FRAME_BODY, FRAME_END, FRAME_HEADER, FRAME_HEARTBEAT, FRAME_METHOD, FRAME_OVERHEAD, FrameError,
    PROTOCOL_HEADER, RawFrame, decode,
};

use crate::server::Shared;
use crate::wire::Encoder;
use crate::{ServerConfig, ServerError};

/// The `frame_max` the session prefixes agree in `tune-ok`.
pub const PREFIX_FRAME_MAX: u32 = 4096;

/// How many session prefixes [`session_prefix`] knows.
pub const PREFIX_MODES: u8 = 6;

/// The protocol header and a valid start of a session as `guest` on `/`, as far as `mode`
/// says (taken modulo [`PREFIX_MODES`]): 0 nothing more, 1 `start-ok` (PLAIN), 2 `+
/// tune-ok` (frame_max 4096, channel_max 16, no heartbeat), 3 `+ connection.open`, 4 `+
/// channel.open` on channel 1, 5 `+` an exclusive `queue.declare` of `fq` and a
/// `basic.consume` on it.
pub fn session_prefix(mode: u8) -> Vec<u8> {
    let mode = mode % PREFIX_MODES;
    let mut e = Encoder::new();
    if mode >= 1 {
        let start_ok = connection::StartOk {
            client_properties: FieldTable::default(),
            mechanism: "PLAIN".into(),
            response: LongString::from(b"\0guest\0guest".to_vec()),
            locale: "en_US".into(),
        };
        e.method(
            0,
            AMQPClass::Connection(connection::AMQPMethod::StartOk(start_ok)),
        );
    }
    if mode >= 2 {
        let tune_ok = connection::TuneOk {
            channel_max: 16,
            frame_max: PREFIX_FRAME_MAX,
            heartbeat: 0,
        };
        e.method(
            0,
            AMQPClass::Connection(connection::AMQPMethod::TuneOk(tune_ok)),
        );
    }
    if mode >= 3 {
        let open = connection::Open {
            virtual_host: "/".into(),
        };
        e.method(0, AMQPClass::Connection(connection::AMQPMethod::Open(open)));
    }
    if mode >= 4 {
        e.method(
            1,
            AMQPClass::Channel(channel::AMQPMethod::Open(channel::Open {})),
        );
    }
    if mode >= 5 {
        let declare = queue::Declare {
            queue: "fq".into(),
            passive: false,
            durable: false,
            exclusive: true,
            auto_delete: false,
            nowait: false,
            arguments: FieldTable::default(),
        };
        e.method(1, AMQPClass::Queue(queue::AMQPMethod::Declare(declare)));
        let consume = basic::Consume {
            queue: "fq".into(),
            consumer_tag: "".into(),
            no_local: false,
            no_ack: false,
            exclusive: false,
            nowait: false,
            arguments: FieldTable::default(),
        };
        e.method(1, AMQPClass::Basic(basic::AMQPMethod::Consume(consume)));
    }
    let mut out = PROTOCOL_HEADER.to_vec();
    out.extend_from_slice(&e.take());
    out
}

/// Decodes a frame's payload as the connection does (a method frame's method, a content
/// header frame's header); `Err` is the reply code the connection closes with.
pub fn decode_payload(frame: &RawFrame) -> Result<(), u16> {
    match frame.kind {
        FRAME_METHOD => crate::connection::decode_method(&frame.payload)
            .map(drop)
            .map_err(|close| close.code),
        FRAME_HEADER => crate::connection::decode_header(&frame.payload)
            .map(drop)
            .map_err(|close| close.code),
        _ => Ok(()),
    }
}

/// What a client saw of a session run by [`Harness::session`].
#[derive(Debug)]
pub struct Session {
    /// Everything the server wrote.
    pub output: Vec<u8>,
    /// From the end of the client's input (or the server refusing more of it) to the end of
    /// the connection's task.
    pub ended_after_eof: std::time::Duration,
}

/// One server (configuration and users) over one broker for virtual host `/`, serving
/// connections on transports the caller hands it.
#[derive(Debug)]
pub struct Harness {
    shared: Arc<Shared<Native>>,
    broker: Broker,
    stop: watch::Sender<bool>,
}

impl Harness {
    /// A server with this configuration (its `vhosts` must be `["/"]`) over `broker`.
    pub fn new(config: &ServerConfig, broker: Broker) -> Result<Self, ServerError> {
        let brokers = HashMap::from([("/".to_owned(), broker.clone())]);
        Ok(Harness {
            shared: Arc::new(Shared::new(config, brokers)?),
            broker,
            stop: watch::channel(false).0,
        })
    }

    /// The broker.
    pub fn broker(&self) -> &Broker {
        &self.broker
    }

    /// Connections past their handshake and not yet ended.
    pub fn connections(&self) -> usize {
        self.shared.connections()
    }

    /// Runs one connection (handshake and life) on this transport until it ends, exactly as
    /// the listener runs an accepted socket (`peer` is what the loopback rule sees).
    pub async fn serve(
        &self,
        read: impl AsyncRead + Send + Unpin + 'static,
        write: impl AsyncWrite + Send + Unpin + 'static,
        peer: SocketAddr,
    ) {
        crate::server::serve(
            read,
            write,
            (peer, peer),
            self.shared.clone(),
            self.stop.subscribe(),
            tokio::time::Instant::now() + self.shared.handshake_timeout(),
            None,
        )
        .await;
    }

    /// Runs one connection on an in-memory duplex stream from peer `127.0.0.1`: the client
    /// writes `input` (until the server stops taking it), shuts its side down and reads
    /// everything the server writes until the server closes.
    pub async fn session(&self, input: &[u8]) -> Session {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let (server_read, server_write) = tokio::io::split(server);
        let (mut client_read, mut client_write) = tokio::io::split(client);
        let peer = SocketAddr::from(([127, 0, 0, 1], 49152));
        let serve = async {
            self.serve(server_read, server_write, peer).await;
            tokio::time::Instant::now()
        };
        let write = async {
            // The server may close first: then the rest cannot be written.
            let _ = client_write.write_all(input).await;
            let _ = client_write.shutdown().await;
            tokio::time::Instant::now()
        };
        let read = async {
            let mut output = Vec::new();
            let _ = client_read.read_to_end(&mut output).await;
            output
        };
        let (ended, eof, output) = tokio::join!(serve, write, read);
        Session {
            output,
            ended_after_eof: ended.saturating_duration_since(eof),
        }
    }
}
