//! What the fuzz targets in `fuzz/` drive: the frame decoder, the payload decoders and one
//! whole connection (handshake and life) over any in-memory transport. Hidden and not a
//! stable API: thin wrappers over the server's own code, with no behaviour of their own.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use stream_engine::{Broker, Native};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;

pub use crate::reply::{
    CHANNEL_ERROR, COMMAND_INVALID, FRAME_ERROR, SYNTAX_ERROR, UNEXPECTED_FRAME,
};
pub use crate::wire::{
    FRAME_BODY, FRAME_END, FRAME_HEADER, FRAME_HEARTBEAT, FRAME_METHOD, FRAME_OVERHEAD, FrameError,
    PROTOCOL_HEADER, RawFrame, decode,
};

use crate::server::Shared;
use crate::{ServerConfig, ServerError};

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
            peer,
            self.shared.clone(),
            self.stop.subscribe(),
        )
        .await;
    }
}
