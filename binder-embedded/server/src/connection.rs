//! One connection's life after the handshake: the read loop (frames to methods, content
//! assembly, publishing, the memory alarm), the channels' engine events, heartbeats, the
//! writer task with its bounded output, and closing in both directions.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use amq_protocol::frame::AMQPContentHeader;
use amq_protocol::protocol::{AMQPClass, BasicProperties, basic, connection};
use bytes::{Bytes, BytesMut};
use stream_engine::{
    AmqpError, Broker, Channel, ChannelEvent, ChannelEvents, Connection, PublishOptions, TryPublish,
};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::auth::User;
use crate::convert::{message_from_wire, properties_to_wire, short};
use crate::envelope::WireEnvelope;
use crate::handshake::{Agreed, ClientCaps, ReadError, Reader};
use crate::registry::Listing;
use crate::reply::{self, Close, Fault};
use crate::wire::{self, Encoder, RawFrame};

/// Entries (each a batch of encoded frames) the writer may have queued: with the consumer
/// pumps' chunk size this bounds what a connection buffers for a socket that does not drain.
const OUTPUT_DEPTH: usize = 32;

/// How long a connection the client closed keeps its socket, for the client's own end.
const LINGER: Duration = Duration::from_secs(3);

/// How long a connection the server closes waits to queue its `connection.close` behind the
/// output the writer still holds, and then for the client's `close-ok`.
const CLOSE_WAIT: Duration = Duration::from_secs(3);

/// The close text at the server's shutdown, as RabbitMQ's.
const SHUTDOWN: &str = "broker forced connection closure with reason 'shutdown'";

/// A publish being assembled from its method, content header and body frames.
#[derive(Debug)]
pub struct Assembly {
    pub exchange: String,
    pub routing_key: String,
    pub mandatory: bool,
    pub header: Option<(BasicProperties, u64)>,
    pub body: BytesMut,
}

/// A publish an alarm (memory or disk) holds back: the connection stops reading until the
/// alarms clear.
#[derive(Debug)]
struct Stalled<E: WireEnvelope> {
    channel: u16,
    exchange: String,
    routing_key: String,
    mandatory: bool,
    message: Box<E::Message>,
}

/// An open channel.
#[derive(Debug)]
pub struct ChannelState<E: WireEnvelope> {
    pub engine: Channel<E>,
    pub events: ChannelEvents<E>,
    pub assembly: Option<Assembly>,
    pub flow: watch::Sender<bool>,
    pub consumers: HashMap<String, JoinHandle<()>>,
    /// Confirms of immediate publishes not yet sent: the first and last sequence number of a
    /// contiguous run of acks (sent as one `multiple` ack).
    pub acks: Option<(u64, u64)>,
    /// Confirms waiting for the message store; while any is out, acks are sent singly.
    pub pending_confirms: Arc<std::sync::atomic::AtomicUsize>,
    /// Publishes acked (confirm mode) since the channel opened, for management.
    pub confirmed: Arc<std::sync::atomic::AtomicU64>,
    /// The queue last declared on the channel (what an empty queue name means).
    pub last_queue: Option<String>,
}

/// A channel number's state.
#[derive(Debug)]
pub enum Slot<E: WireEnvelope> {
    /// Open.
    Open(Box<ChannelState<E>>),
    /// We sent `channel.close` and wait for `close-ok`; other frames are dropped.
    Closing,
}

/// A connection after its handshake.
#[derive(Debug)]
pub struct Conn<E: WireEnvelope> {
    pub peer: SocketAddr,
    pub user: Arc<User>,
    pub vhost: String,
    pub broker: Broker<E>,
    /// The engine connection: owns the channels and the exclusive queues. Taken (closed)
    /// once the connection is torn down, so its exclusive queues are gone before the client
    /// sees `connection.close-ok`, even though the socket may linger.
    pub engine: Option<Connection<E>>,
    pub out: mpsc::Sender<Bytes>,
    pub frame_max: usize,
    pub channel_max: u16,
    pub max_message_size: u64,
    pub caps: ClientCaps,
    pub channels: HashMap<u16, Slot<E>>,
    blocked_sent: bool,
    stalled: Option<Stalled<E>>,
    /// The connection's entry in the management API's list: its channels, close requests.
    listing: Arc<Listing>,
    /// The server's stop signal.
    stop: watch::Receiver<bool>,
}

/// How a connection ended, for the log.
#[derive(Debug)]
pub enum Ended {
    /// The client closed it (`connection.close`).
    ClientClosed,
    /// The socket closed or failed.
    Dropped(String),
    /// We closed it with this reply.
    Closed(Close),
    /// Missed heartbeats.
    HeartbeatTimeout,
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ended::ClientClosed => f.write_str("closed by the client"),
            Ended::Dropped(why) => write!(f, "socket closed: {why}"),
            Ended::Closed(c) => write!(f, "closed by the server: {}", c.reply_text()),
            Ended::HeartbeatTimeout => f.write_str("missed heartbeats from the client"),
        }
    }
}

/// The writer task: writes what the connection and its consumers queue, and a heartbeat when
/// nothing was written for an interval. Returns when every sender is gone (after flushing).
fn spawn_writer(
    mut socket: impl AsyncWrite + Send + Unpin + 'static,
    mut rx: mpsc::Receiver<Bytes>,
    heartbeat: Option<Duration>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut bufw = tokio::io::BufWriter::with_capacity(64 * 1024, &mut socket);
        loop {
            let next = match heartbeat {
                Some(interval) => match tokio::time::timeout(interval, rx.recv()).await {
                    Ok(next) => next,
                    Err(_) => {
                        let mut e = Encoder::new();
                        e.heartbeat();
                        Some(e.take())
                    }
                },
                None => rx.recv().await,
            };
            let Some(bytes) = next else { break };
            if bufw.write_all(&bytes).await.is_err() {
                return;
            }
            while let Ok(more) = rx.try_recv() {
                if bufw.write_all(&more).await.is_err() {
                    return;
                }
            }
            if bufw.flush().await.is_err() {
                return;
            }
        }
        let _ = bufw.flush().await;
        let _ = socket.shutdown().await;
    })
}

/// The class and method ids at the front of a method frame's payload.
fn method_ids(payload: &[u8]) -> (u16, u16) {
    match payload {
        [a, b, c, d, ..] => (u16::from_be_bytes([*a, *b]), u16::from_be_bytes([*c, *d])),
        _ => (0, 0),
    }
}

/// Decodes a method frame's payload; the close a connection sends when it cannot.
pub(crate) fn decode_method(payload: &[u8]) -> Result<AMQPClass, Close> {
    let ids = method_ids(payload);
    match amq_protocol::protocol::parse_class(payload) {
        Ok(([], method)) => Ok(method),
        Ok(_) => Err(Close::new(reply::SYNTAX_ERROR, "method frame has trailing octets").on(ids)),
        Err(_) => Err(Close::new(
            reply::COMMAND_INVALID,
            format!(
                "unknown or malformed method (class {}, method {})",
                ids.0, ids.1
            ),
        )
        .on(ids)),
    }
}

/// Decodes a content header frame's payload; the close a connection sends when it cannot.
pub(crate) fn decode_header(payload: &[u8]) -> Result<AMQPContentHeader, Close> {
    match amq_protocol::frame::parsing::parse_content_header(payload) {
        Ok(([], header)) => Ok(header),
        _ => Err(Close::new(
            reply::SYNTAX_ERROR,
            "cannot decode the content header",
        )),
    }
}

impl<E: WireEnvelope> Conn<E> {
    /// Serves an opened connection until it ends.
    pub async fn serve(
        agreed: Agreed,
        mut reader: Reader,
        socket: impl AsyncWrite + Send + Unpin + 'static,
        (peer, listing): (SocketAddr, Arc<Listing>),
        broker: Broker<E>,
        max_message_size: u64,
        mut shutdown: watch::Receiver<bool>,
    ) -> Ended {
        // Counted against the connection limit until the connection has ended.
        let slot = agreed.slot;
        let (out, rx) = mpsc::channel(OUTPUT_DEPTH);
        let heartbeat =
            (agreed.heartbeat > 0).then(|| Duration::from_secs(agreed.heartbeat.into()));
        // As RabbitMQ: a heartbeat after half an interval without output; the client is
        // dropped after two intervals without input.
        let writer = spawn_writer(socket, rx, heartbeat.map(|h| h / 2));
        let engine = broker.connect();
        let mut conn = Conn {
            peer,
            user: agreed.user,
            vhost: agreed.vhost,
            broker,
            engine: Some(engine),
            out,
            frame_max: agreed.frame_max,
            channel_max: if agreed.channel_max == 0 {
                u16::MAX
            } else {
                agreed.channel_max
            },
            max_message_size,
            caps: agreed.caps,
            channels: HashMap::new(),
            blocked_sent: false,
            stalled: None,
            listing,
            stop: shutdown.clone(),
        };
        let ended = conn.run(&mut reader, heartbeat, &mut shutdown).await;
        conn.listing.set_closing();
        // Everything the connection owned goes first, as on RabbitMQ: its consumers stop,
        // its unacknowledged deliveries are requeued and its exclusive queues deleted before
        // the client hears of the close.
        conn.teardown().await;
        // Both bounded: a client that stopped reading (its socket full) must not keep the
        // connection, nor what it holds, open.
        match &ended {
            Ended::Closed(close) => conn.close_connection(&mut reader, close).await,
            Ended::ClientClosed => {
                let _ = tokio::time::timeout(LINGER, conn.linger(&mut reader)).await;
            }
            Ended::Dropped(_) | Ended::HeartbeatTimeout => {}
        }
        drop(conn);
        // Flushed once every sender is gone; a confirm still waiting for a slow store must not
        // keep the socket open for long.
        let abort = writer.abort_handle();
        if tokio::time::timeout(Duration::from_secs(5), writer)
            .await
            .is_err()
        {
            abort.abort();
        }
        drop(slot);
        ended
    }

    async fn run(
        &mut self,
        reader: &mut Reader,
        heartbeat: Option<Duration>,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Ended {
        let mut last_read = Instant::now();
        // Half a heartbeat interval, and at least once a second while a publish is held back
        // by the memory alarm (its Unblocked event is what normally resumes it).
        let tick = heartbeat
            .map_or(Duration::from_secs(1), |h| h / 2)
            .clamp(Duration::from_millis(10), Duration::from_secs(1));
        let mut ticker = tokio::time::interval(tick);
        let mut close_requests = self.listing.close_requests();
        // One future for the whole loop: a close request costs nothing per frame.
        let close_requested = close_requests.requested();
        tokio::pin!(close_requested);
        loop {
            let reading = self.stalled.is_none();
            tokio::select! {
                _ = crate::server::stopped(shutdown) => {
                    return Ended::Closed(Close::new(reply::CONNECTION_FORCED, SHUTDOWN));
                }
                reason = &mut close_requested => {
                    return Ended::Closed(Close::new(reply::CONNECTION_FORCED, reason));
                }
                (channel, event) = next_event(&mut self.channels) => {
                    if let Err(fault) = self.on_event(channel, event).await {
                        if let Some(end) = self.fault(fault).await { return end; }
                    }
                }
                read = reader.next(), if reading => {
                    last_read = Instant::now();
                    let frame = match read {
                        Ok(Some(frame)) => frame,
                        Ok(None) => return Ended::Dropped("end of stream".into()),
                        Err(ReadError::Io(e)) => return Ended::Dropped(e.to_string()),
                        Err(ReadError::Frame(e)) => {
                            return Ended::Closed(Close::new(reply::FRAME_ERROR, e.to_string()));
                        }
                    };
                    match self.on_frame(frame).await {
                        Ok(true) => return Ended::ClientClosed,
                        Ok(false) => {}
                        Err(fault) => if let Some(end) = self.fault(fault).await { return end; },
                    }
                    // Confirms held for coalescing go out once the frames at hand are
                    // handled, or when reading stops for the memory alarm.
                    if (!reader.has_frame() || self.stalled.is_some())
                        && let Err(fault) = self.flush_acks().await
                        && let Some(end) = self.fault(fault).await
                    {
                        return end;
                    }
                }
                _ = ticker.tick() => {
                    if let Some(interval) = heartbeat
                        && reading
                        && last_read.elapsed() > interval * 2
                    {
                        return Ended::HeartbeatTimeout;
                    }
                    if !reading && !self.broker.is_blocked()
                        && let Err(fault) = self.retry_stalled().await
                        && let Some(end) = self.fault(fault).await
                    {
                        return end;
                    }
                    if !reading {
                        // Reading resumes with heartbeats counted afresh.
                        last_read = Instant::now();
                    }
                }
            }
        }
    }

    /// Handles a fault: a channel close is sent and the connection goes on; otherwise the
    /// connection ends.
    async fn fault(&mut self, fault: Fault) -> Option<Ended> {
        // The engine may have closed the channel on its own (an acknowledgement timeout)
        // just before a frame of it found it gone (504, `channel is closed`): the client is
        // told why. Other errors keep their own close, which names the method that failed.
        let fault = match fault {
            Fault::Channel(channel, close) if close.code == reply::CHANNEL_ERROR => {
                match self.closed_by_engine(channel) {
                    Some(error) => Fault::engine(channel, error, (0, 0)),
                    None => Fault::Channel(channel, close),
                }
            }
            other => other,
        };
        match fault {
            Fault::Channel(channel, close) => {
                tracing::debug!(peer = %self.peer, channel, reason = %close.reply_text(), "closing channel");
                self.drop_channel(channel).await;
                self.channels.insert(channel, Slot::Closing);
                let method =
                    AMQPClass::Channel(amq_protocol::protocol::channel::AMQPMethod::Close(
                        amq_protocol::protocol::channel::Close {
                            reply_code: close.code,
                            reply_text: short(&close.reply_text()),
                            class_id: close.class_id,
                            method_id: close.method_id,
                        },
                    ));
                match self.send_method(channel, method).await {
                    Ok(()) => None,
                    // Closed (or shut down) while waiting for the client to read.
                    Err(Fault::Connection(close)) => Some(Ended::Closed(close)),
                    Err(_) => Some(Ended::Dropped("output closed".into())),
                }
            }
            Fault::Connection(close) => Some(Ended::Closed(close)),
            Fault::Gone => Some(Ended::Dropped("output closed".into())),
        }
    }

    /// The error the engine closed `channel` with, if its events hold one (the channel is
    /// closing: its other events would be dropped with it).
    fn closed_by_engine(&mut self, channel: u16) -> Option<AmqpError> {
        let Some(Slot::Open(state)) = self.channels.get_mut(&channel) else {
            return None;
        };
        while let Ok(event) = state.events.try_recv() {
            if let ChannelEvent::Closed { error } = event {
                return Some(error);
            }
        }
        None
    }

    /// Sends `connection.close` and waits for `close-ok`, dropping other frames: each step
    /// [`CLOSE_WAIT`] at most, so a client that does not read is not waited for long, and
    /// one that reads slowly still gets the close behind what it was sent before.
    async fn close_connection(&mut self, reader: &mut Reader, close: &Close) {
        let method = AMQPClass::Connection(connection::AMQPMethod::Close(connection::Close {
            reply_code: close.code,
            reply_text: short(&close.reply_text()),
            class_id: close.class_id,
            method_id: close.method_id,
        }));
        let mut e = Encoder::new();
        e.method(0, method);
        // Straight to the writer, not through `send`: the close request that may have ended
        // the connection must not cut this one short.
        match tokio::time::timeout(CLOSE_WAIT, self.out.send(e.take())).await {
            Ok(Ok(())) => {}
            _ => return,
        }
        let wait = async {
            loop {
                match reader.next().await {
                    Ok(Some(f))
                        if f.kind == wire::FRAME_METHOD
                            && f.channel == 0
                            && method_ids(&f.payload) == (10, 51) =>
                    {
                        return;
                    }
                    Ok(Some(_)) => continue,
                    _ => return,
                }
            }
        };
        let _ = tokio::time::timeout(CLOSE_WAIT, wait).await;
    }

    /// Stops every consumer pump, closes every channel, then the engine connection (deleting
    /// its exclusive queues). Running it again does nothing.
    async fn teardown(&mut self) {
        let ids: Vec<u16> = self.channels.keys().copied().collect();
        for id in ids {
            self.drop_channel(id).await;
        }
        if let Some(engine) = self.engine.take() {
            engine.close();
        }
    }

    /// After the client's `connection.close` was answered (and the channels torn down): the
    /// socket stays open until the client closes it, at most [`LINGER`], as RabbitMQ keeps
    /// it. A client whose threads close concurrently sends more than one `connection.close`;
    /// each gets its close-ok, and any other frame is discarded.
    async fn linger(&mut self, reader: &mut Reader) {
        let until = tokio::time::Instant::now() + LINGER;
        while let Ok(Ok(Some(frame))) = tokio::time::timeout_at(until, reader.next()).await {
            let close = frame.kind == wire::FRAME_METHOD
                && frame.channel == 0
                && method_ids(&frame.payload) == (10, 50);
            if close {
                let ok =
                    AMQPClass::Connection(connection::AMQPMethod::CloseOk(connection::CloseOk {}));
                if self.send_method(0, ok).await.is_err() {
                    return;
                }
            }
        }
    }

    /// Lists an opened channel for the management API.
    pub fn list_channel(&self, number: u16, channel: crate::registry::ListedChannel) {
        self.listing.open_channel(number, channel);
    }

    /// Stops a channel's pumps and closes its engine channel (requeueing its unacked
    /// deliveries); the slot is removed.
    pub async fn drop_channel(&mut self, channel: u16) {
        if let Some(Slot::Open(state)) = self.channels.remove(&channel) {
            self.listing.close_channel(channel);
            for (_, pump) in state.consumers {
                pump.abort();
                let _ = pump.await;
            }
            drop(state.engine);
        }
        if self.stalled.as_ref().is_some_and(|s| s.channel == channel) {
            self.stalled = None;
            self.listing.set_blocked(false);
        }
    }

    /// Queues encoded frames for the writer.
    pub async fn send(&mut self, bytes: Bytes) -> Result<(), Fault> {
        let bytes = match self.out.try_send(bytes) {
            Ok(()) => return Ok(()),
            Err(mpsc::error::TrySendError::Closed(_)) => return Err(Fault::Gone),
            Err(mpsc::error::TrySendError::Full(bytes)) => bytes,
        };
        // The client is not reading: wait for room, but not past a close request or the
        // server's shutdown, which must reach a connection stuck here too.
        let mut requests = self.listing.close_requests();
        let mut stop = self.stop.clone();
        tokio::select! {
            sent = self.out.send(bytes) => sent.map_err(|_| Fault::Gone),
            reason = requests.requested() => {
                Err(Fault::Connection(Close::new(reply::CONNECTION_FORCED, reason)))
            }
            _ = crate::server::stopped(&mut stop) => {
                Err(Fault::Connection(Close::new(reply::CONNECTION_FORCED, SHUTDOWN)))
            }
        }
    }

    /// Queues one method.
    pub async fn send_method(&mut self, channel: u16, method: AMQPClass) -> Result<(), Fault> {
        let mut e = Encoder::new();
        e.method(channel, method);
        self.send(e.take()).await
    }

    /// Handles a frame; `Ok(true)` when the client closed the connection.
    async fn on_frame(&mut self, frame: RawFrame) -> Result<bool, Fault> {
        match frame.kind {
            wire::FRAME_HEARTBEAT => {
                if frame.channel != 0 {
                    return Err(Fault::connection(
                        reply::UNEXPECTED_FRAME,
                        format!("heartbeat frame on channel {}", frame.channel),
                    ));
                }
                Ok(false)
            }
            wire::FRAME_METHOD => self.on_method_frame(frame).await,
            _ if frame.channel == 0 => Err(Self::unexpected("content frame on channel 0")),
            wire::FRAME_HEADER => self.on_header(frame).await.map(|()| false),
            _ => self.on_body(frame).await.map(|()| false),
        }
    }

    async fn on_method_frame(&mut self, frame: RawFrame) -> Result<bool, Fault> {
        let ids = method_ids(&frame.payload);
        let method = decode_method(&frame.payload).map_err(Fault::Connection)?;
        let channel = frame.channel;
        if ids == (60, 10) && frame.payload.get(4..8) != Some(&[0, 0, 0, 0]) {
            // amq-protocol drops basic.qos's prefetch-size; RabbitMQ refuses a non-zero one.
            let size = frame
                .payload
                .get(4..8)
                .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
            return Err(Fault::Connection(
                Close::new(reply::NOT_IMPLEMENTED, format!("prefetch_size!=0 ({size})")).on(ids),
            ));
        }
        if channel == 0 {
            return self.on_connection_method(method, ids).await;
        }
        if let AMQPClass::Connection(_) = method {
            return Err(Fault::Connection(
                Close::new(
                    reply::COMMAND_INVALID,
                    format!("connection method on channel {channel}"),
                )
                .on(ids),
            ));
        }
        if let Some(Slot::Open(state)) = self.channels.get(&channel)
            && state.assembly.is_some()
        {
            return Err(Fault::Connection(
                Close::new(
                    reply::UNEXPECTED_FRAME,
                    "expected content header for class 60, got non content header frame instead",
                )
                .on(ids),
            ));
        }
        self.on_channel_method(channel, method, ids).await?;
        Ok(false)
    }

    async fn on_connection_method(
        &mut self,
        method: AMQPClass,
        ids: (u16, u16),
    ) -> Result<bool, Fault> {
        match method {
            AMQPClass::Connection(connection::AMQPMethod::Close(_)) => {
                // Everything the connection owned goes first, as on RabbitMQ: a client that
                // has its close-ok finds its exclusive queues deleted and its unacked
                // deliveries requeued.
                self.teardown().await;
                self.send_method(
                    0,
                    AMQPClass::Connection(connection::AMQPMethod::CloseOk(connection::CloseOk {})),
                )
                .await?;
                Ok(true)
            }
            // A reply to a close we sent is handled where we wait for it.
            AMQPClass::Connection(connection::AMQPMethod::CloseOk(_)) => Ok(true),
            AMQPClass::Connection(connection::AMQPMethod::UpdateSecret(_)) => {
                // As RabbitMQ with its internal user database: a password does not expire,
                // so the new secret is accepted and changes nothing.
                self.send_method(
                    0,
                    AMQPClass::Connection(connection::AMQPMethod::UpdateSecretOk(
                        connection::UpdateSecretOk {},
                    )),
                )
                .await?;
                Ok(false)
            }
            AMQPClass::Connection(_) => Err(Fault::Connection(
                Close::new(
                    reply::CHANNEL_ERROR,
                    "unexpected method in connection state running",
                )
                .on(ids),
            )),
            _ => Err(Fault::Connection(
                Close::new(reply::COMMAND_INVALID, "non-connection method on channel 0").on(ids),
            )),
        }
    }

    fn unexpected(text: &str) -> Fault {
        Fault::connection(reply::UNEXPECTED_FRAME, text)
    }

    async fn on_header(&mut self, frame: RawFrame) -> Result<(), Fault> {
        let channel = frame.channel;
        let max = self.max_message_size;
        let state = match self.channels.get_mut(&channel) {
            Some(Slot::Closing) => return Ok(()),
            Some(Slot::Open(state)) => state,
            None => {
                return Err(Fault::connection(
                    reply::CHANNEL_ERROR,
                    format!("expected 'channel.open' on channel {channel}"),
                ));
            }
        };
        let Some(assembly) = state.assembly.as_mut().filter(|a| a.header.is_none()) else {
            return Err(Self::unexpected(
                "expected method frame, got non method frame instead",
            ));
        };
        let header = decode_header(&frame.payload).map_err(Fault::Connection)?;
        if header.class_id != 60 {
            return Err(Self::unexpected(&format!(
                "content header for class {} does not match method class 60",
                header.class_id
            )));
        }
        if header.body_size > max {
            state.assembly = None;
            return Err(Fault::Channel(
                channel,
                Close::new(
                    reply::PRECONDITION_FAILED,
                    format!(
                        "message size {} is larger than configured max size {max}",
                        header.body_size
                    ),
                )
                .on((60, 40)),
            ));
        }
        let size = header.body_size;
        assembly.header = Some((header.properties, size));
        // Grown as body frames arrive, not trusted from the header.
        assembly.body.reserve((size as usize).min(1 << 20));
        if size == 0 {
            return self.publish(channel).await;
        }
        Ok(())
    }

    async fn on_body(&mut self, frame: RawFrame) -> Result<(), Fault> {
        let channel = frame.channel;
        let state = match self.channels.get_mut(&channel) {
            Some(Slot::Closing) => return Ok(()),
            Some(Slot::Open(state)) => state,
            None => {
                return Err(Fault::connection(
                    reply::CHANNEL_ERROR,
                    format!("expected 'channel.open' on channel {channel}"),
                ));
            }
        };
        let Some(assembly) = state.assembly.as_mut() else {
            return Err(Self::unexpected(
                "expected method frame, got non method frame instead",
            ));
        };
        let Some((_, size)) = assembly.header.as_ref() else {
            return Err(Self::unexpected(
                "expected content header for class 60, got non content header frame instead",
            ));
        };
        let size = *size;
        if assembly.body.len() as u64 + frame.payload.len() as u64 > size {
            return Err(Self::unexpected(&format!(
                "content body exceeds the declared size {size}"
            )));
        }
        assembly.body.extend_from_slice(&frame.payload);
        if assembly.body.len() as u64 == size {
            return self.publish(channel).await;
        }
        Ok(())
    }

    /// Publishes the assembled message of a channel.
    async fn publish(&mut self, channel: u16) -> Result<(), Fault> {
        let Some(Slot::Open(state)) = self.channels.get_mut(&channel) else {
            return Ok(());
        };
        let Some(Assembly {
            exchange,
            routing_key,
            mandatory,
            header: Some((properties, _)),
            body,
        }) = state.assembly.take()
        else {
            return Ok(());
        };
        let message = E::from_wire(message_from_wire(&properties, body.freeze()));
        self.try_publish(channel, exchange, routing_key, mandatory, message)
            .await
    }

    async fn try_publish(
        &mut self,
        channel: u16,
        exchange: String,
        routing_key: String,
        mandatory: bool,
        message: E::Message,
    ) -> Result<(), Fault> {
        let Some(Slot::Open(state)) = self.channels.get_mut(&channel) else {
            return Ok(());
        };
        let published = state.engine.try_basic_publish(
            &exchange,
            &routing_key,
            PublishOptions { mandatory },
            message,
        );
        match published {
            TryPublish::Done(Ok(outcome)) => {
                // Returns of this publish go out before its confirm.
                self.drain_events(channel).await?;
                if let Some(seq) = outcome.seq {
                    self.confirm(channel, seq, outcome.is_ack()).await?;
                }
                Ok(())
            }
            TryPublish::Done(Err(e)) => Err(Fault::engine(channel, e, (60, 40))),
            TryPublish::Pending(pending) => {
                self.drain_events(channel).await?;
                self.flush_acks().await?;
                let Some(Slot::Open(state)) = self.channels.get_mut(&channel) else {
                    return Ok(());
                };
                let out = self.out.clone();
                let counter = state.pending_confirms.clone();
                let confirmed = state.confirmed.clone();
                counter.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                tokio::spawn(async move {
                    // A message the store failed to keep is nacked, as RabbitMQ does.
                    let seq = pending.seq();
                    let ack = match pending.wait().await {
                        Ok(o) => o.is_ack(),
                        Err(e) => {
                            tracing::warn!(error = %e, "publish nacked: the message store failed");
                            false
                        }
                    };
                    if let Some(seq) = seq {
                        if ack {
                            confirmed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        let _ = out.send(confirm_frame(channel, seq, false, ack)).await;
                    }
                    // Only once its confirm is queued: until then later confirms go out one by
                    // one, so no `multiple` ack can cover this message before its own ack or
                    // nack.
                    counter.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
                });
                Ok(())
            }
            TryPublish::Blocked(message) => {
                self.listing.set_blocked(true);
                self.stalled = Some(Stalled {
                    channel,
                    exchange,
                    routing_key,
                    mandatory,
                    message,
                });
                // The alarm may have cleared since: then nothing is told, and the stalled
                // publish is retried as reading resumes.
                match self.broker.blocked_reason() {
                    Some(reason) => self.notify_blocked(&reason).await,
                    None => Ok(()),
                }
            }
        }
    }

    async fn retry_stalled(&mut self) -> Result<(), Fault> {
        if let Some(s) = self.stalled.take() {
            // Blocked again if the alarm is still on.
            self.listing.set_blocked(false);
            self.try_publish(
                s.channel,
                s.exchange,
                s.routing_key,
                s.mandatory,
                *s.message,
            )
            .await?;
            // Its confirm goes out now: held for coalescing, it would wait for the client's
            // next frame, and a client waiting for it may send none (lapin: until its next
            // heartbeat, 30 s at the defaults).
            self.flush_acks().await?;
        }
        Ok(())
    }

    async fn notify_blocked(&mut self, reason: &str) -> Result<(), Fault> {
        if self.caps.blocked && !self.blocked_sent {
            self.blocked_sent = true;
            self.send_method(
                0,
                AMQPClass::Connection(connection::AMQPMethod::Blocked(connection::Blocked {
                    reason: short(reason),
                })),
            )
            .await?;
        }
        Ok(())
    }

    /// Records an immediate confirm: acks in a row are sent as one `multiple` ack.
    async fn confirm(&mut self, channel: u16, seq: u64, ack: bool) -> Result<(), Fault> {
        let Some(Slot::Open(state)) = self.channels.get_mut(&channel) else {
            return Ok(());
        };
        if ack {
            state
                .confirmed
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let no_pending = state
            .pending_confirms
            .load(std::sync::atomic::Ordering::Acquire)
            == 0;
        if ack && no_pending {
            match &mut state.acks {
                Some((_, last)) if *last + 1 == seq => {
                    *last = seq;
                    return Ok(());
                }
                None => {
                    state.acks = Some((seq, seq));
                    return Ok(());
                }
                Some(_) => {}
            }
        }
        let before = state.acks.take();
        if let Some((first, last)) = before {
            self.send(confirm_frame(channel, last, first != last, true))
                .await?;
        }
        if ack && no_pending {
            if let Some(Slot::Open(state)) = self.channels.get_mut(&channel) {
                state.acks = Some((seq, seq));
            }
            Ok(())
        } else {
            self.send(confirm_frame(channel, seq, false, ack)).await
        }
    }

    /// Sends the acks held back for coalescing.
    pub async fn flush_acks(&mut self) -> Result<(), Fault> {
        let mut e = Encoder::new();
        for (id, slot) in self.channels.iter_mut() {
            if let Slot::Open(state) = slot
                && let Some((first, last)) = state.acks.take()
            {
                e.method(*id, confirm_method(last, first != last, true));
            }
        }
        if e.is_empty() {
            return Ok(());
        }
        self.send(e.take()).await
    }

    /// Handles the events a channel has queued now (returns after a publish).
    pub async fn drain_events(&mut self, channel: u16) -> Result<(), Fault> {
        loop {
            let Some(Slot::Open(state)) = self.channels.get_mut(&channel) else {
                return Ok(());
            };
            match state.events.try_recv() {
                Ok(event) => Box::pin(self.on_event(channel, Some(event))).await?,
                Err(_) => return Ok(()),
            }
        }
    }

    async fn on_event(
        &mut self,
        channel: u16,
        event: Option<ChannelEvent<E>>,
    ) -> Result<(), Fault> {
        let Some(event) = event else {
            return Ok(());
        };
        match event {
            ChannelEvent::Return {
                reply_code,
                reply_text,
                body,
            } => {
                self.flush_acks().await?;
                let message = E::to_wire(&body);
                let mut e = Encoder::new();
                e.method(
                    channel,
                    AMQPClass::Basic(basic::AMQPMethod::Return(basic::Return {
                        reply_code,
                        reply_text: short(&reply_text),
                        exchange: short(E::exchange(&body)),
                        routing_key: short(E::routing_key(&body)),
                    })),
                );
                e.content(
                    channel,
                    properties_to_wire(&message),
                    &message.payload,
                    self.frame_max,
                );
                self.send(e.take()).await
            }
            ChannelEvent::ConsumerCancelled { consumer_tag } => {
                if let Some(Slot::Open(state)) = self.channels.get_mut(&channel) {
                    state.consumers.remove(&consumer_tag);
                }
                if self.caps.cancel_notify {
                    self.send_method(
                        channel,
                        AMQPClass::Basic(basic::AMQPMethod::Cancel(basic::Cancel {
                            consumer_tag: short(&consumer_tag),
                            nowait: true,
                        })),
                    )
                    .await?;
                }
                Ok(())
            }
            ChannelEvent::Blocked { .. } => {
                // As RabbitMQ's reader: a connection is told `connection.blocked` when it
                // publishes under the alarm (see `try_publish`), not as the alarm goes off.
                // A client told so stops writing altogether (lapin does), and a connection
                // that only consumes must go on acknowledging.
                Ok(())
            }
            ChannelEvent::Unblocked => {
                if self.blocked_sent {
                    self.blocked_sent = false;
                    self.send_method(
                        0,
                        AMQPClass::Connection(connection::AMQPMethod::Unblocked(
                            connection::Unblocked {},
                        )),
                    )
                    .await?;
                }
                self.retry_stalled().await
            }
            ChannelEvent::Closed { error } => Err(Fault::engine(channel, error, (0, 0))),
            ChannelEvent::Ack { seq, multiple } => {
                self.flush_acks().await?;
                self.send(confirm_frame(channel, seq, multiple, true)).await
            }
            ChannelEvent::Nack { seq, multiple } => {
                self.flush_acks().await?;
                self.send(confirm_frame(channel, seq, multiple, false))
                    .await
            }
        }
    }
}

fn confirm_method(seq: u64, multiple: bool, ack: bool) -> AMQPClass {
    AMQPClass::Basic(if ack {
        basic::AMQPMethod::Ack(basic::Ack {
            delivery_tag: seq,
            multiple,
        })
    } else {
        basic::AMQPMethod::Nack(basic::Nack {
            delivery_tag: seq,
            multiple,
            requeue: false,
        })
    })
}

fn confirm_frame(channel: u16, seq: u64, multiple: bool, ack: bool) -> Bytes {
    let mut e = Encoder::new();
    e.method(channel, confirm_method(seq, multiple, ack));
    e.take()
}

/// The next engine event of any open channel (pending while there is none).
async fn next_event<E: WireEnvelope>(
    channels: &mut HashMap<u16, Slot<E>>,
) -> (u16, Option<ChannelEvent<E>>) {
    std::future::poll_fn(|cx| {
        for (id, slot) in channels.iter_mut() {
            if let Slot::Open(state) = slot
                && let Poll::Ready(event) = state.events.poll_recv(cx)
            {
                if event.is_none() {
                    // The engine dropped the channel's sender; nothing more will come.
                    continue;
                }
                return Poll::Ready((*id, event));
            }
        }
        Poll::Pending
    })
    .await
}
