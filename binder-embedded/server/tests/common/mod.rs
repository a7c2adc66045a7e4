//! Helpers shared by the server's tests: a server on port 0, a raw AMQP client for malformed
//! input.
#![allow(dead_code)]

use std::collections::HashMap;
use std::time::Duration;

use amq_protocol::frame::{AMQPFrame, WriteContext, gen_frame, parse_frame};
use amq_protocol::protocol::{AMQPClass, channel, connection};
use amq_protocol::types::FieldTable;
use stream_broker::{Server, ServerConfig};
use stream_engine::Broker;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// A config listening on an ephemeral loopback port.
pub fn config() -> ServerConfig {
    ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..ServerConfig::default()
    }
}

/// A server with its own brokers.
pub async fn server(config: ServerConfig) -> Server {
    Server::standalone(config).await.unwrap()
}

/// A server over a broker the test keeps.
pub async fn server_with(config: ServerConfig, broker: Broker) -> Server {
    let brokers: HashMap<String, Broker> = [("/".to_owned(), broker)].into();
    Server::bind(config, brokers).await.unwrap()
}

pub fn uri(server: &Server, user: &str, password: &str, query: &str) -> String {
    format!(
        "amqp://{user}:{password}@{}/%2f{}",
        server.local_addr(),
        query
    )
}

pub async fn lapin(server: &Server) -> lapin::Connection {
    lapin::Connection::connect(&uri(server, "guest", "guest", ""), Default::default())
        .await
        .unwrap()
}

/// A raw client speaking frames by hand, over TCP or another stream (TLS).
pub struct Raw<S = TcpStream> {
    pub socket: S,
    buf: Vec<u8>,
    /// Octets written to the server so far.
    pub written: usize,
    /// Octets read from the server so far.
    pub read: usize,
}

impl Raw {
    pub async fn connect(server: &Server) -> Raw {
        Raw::over(TcpStream::connect(server.local_addr()).await.unwrap())
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Raw<S> {
    /// A raw client on a connected stream.
    pub fn over(socket: S) -> Raw<S> {
        Raw {
            socket,
            buf: Vec::new(),
            written: 0,
            read: 0,
        }
    }

    pub async fn send_bytes(&mut self, bytes: &[u8]) {
        self.socket.write_all(bytes).await.unwrap();
        self.written += bytes.len();
    }

    pub async fn send(&mut self, frame: AMQPFrame) {
        let ctx = gen_frame(&frame)(WriteContext::from(Vec::new())).unwrap();
        self.send_bytes(&ctx.into_inner().0).await;
    }

    pub async fn method(&mut self, channel: u16, method: AMQPClass) {
        self.send(AMQPFrame::Method(channel, method)).await;
    }

    /// The next frame, or `None` at end of stream (5 s at most).
    pub async fn next(&mut self) -> Option<AMQPFrame> {
        tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                if !self.buf.is_empty() {
                    match parse_frame(&self.buf[..]) {
                        Ok((rest, frame)) => {
                            let used = self.buf.len() - rest.len();
                            self.buf.drain(..used);
                            return Some(frame);
                        }
                        Err(e) if e.is_incomplete() => {}
                        Err(e) => panic!("server sent an unparsable frame: {e:?}"),
                    }
                }
                let mut chunk = [0u8; 4096];
                match self.socket.read(&mut chunk).await {
                    Ok(0) | Err(_) => return None,
                    Ok(n) => {
                        self.read += n;
                        self.buf.extend_from_slice(&chunk[..n]);
                    }
                }
            }
        })
        .await
        .expect("server sent nothing within 5 s")
    }

    /// The next method frame, skipping heartbeats.
    pub async fn next_method(&mut self) -> Option<(u16, AMQPClass)> {
        loop {
            match self.next().await? {
                AMQPFrame::Method(ch, m) => return Some((ch, m)),
                AMQPFrame::Heartbeat => continue,
                other => panic!("expected a method, got {other:?}"),
            }
        }
    }

    /// Expects `connection.close` with this code, answers close-ok, and expects the socket
    /// to close.
    pub async fn expect_connection_close(&mut self, code: u16) -> String {
        let (ch, m) = self.next_method().await.expect("connection.close");
        let AMQPClass::Connection(connection::AMQPMethod::Close(close)) = m else {
            panic!("expected connection.close, got {m:?}");
        };
        assert_eq!((ch, close.reply_code), (0, code), "{close:?}");
        self.method(
            0,
            AMQPClass::Connection(connection::AMQPMethod::CloseOk(connection::CloseOk {})),
        )
        .await;
        assert!(
            self.next().await.is_none(),
            "socket stays open after close-ok"
        );
        close.reply_text.as_str().to_owned()
    }

    /// Runs the handshake as `guest` with these tune values.
    pub async fn handshake(&mut self, frame_max: u32, channel_max: u16, heartbeat: u16) {
        self.send_bytes(b"AMQP\x00\x00\x09\x01").await;
        let (_, start) = self.next_method().await.unwrap();
        assert!(matches!(
            start,
            AMQPClass::Connection(connection::AMQPMethod::Start(_))
        ));
        self.method(
            0,
            AMQPClass::Connection(connection::AMQPMethod::StartOk(connection::StartOk {
                client_properties: FieldTable::default(),
                mechanism: "PLAIN".into(),
                response: "\0guest\0guest".into(),
                locale: "en_US".into(),
            })),
        )
        .await;
        let (_, tune) = self.next_method().await.unwrap();
        assert!(matches!(
            tune,
            AMQPClass::Connection(connection::AMQPMethod::Tune(_))
        ));
        self.method(
            0,
            AMQPClass::Connection(connection::AMQPMethod::TuneOk(connection::TuneOk {
                channel_max,
                frame_max,
                heartbeat,
            })),
        )
        .await;
        self.method(
            0,
            AMQPClass::Connection(connection::AMQPMethod::Open(connection::Open {
                virtual_host: "/".into(),
            })),
        )
        .await;
        let (_, ok) = self.next_method().await.unwrap();
        assert!(
            matches!(ok, AMQPClass::Connection(connection::AMQPMethod::OpenOk(_))),
            "{ok:?}"
        );
    }

    pub async fn open_channel(&mut self, id: u16) {
        self.method(
            id,
            AMQPClass::Channel(channel::AMQPMethod::Open(channel::Open {})),
        )
        .await;
        let (ch, ok) = self.next_method().await.unwrap();
        assert_eq!(ch, id);
        assert!(matches!(
            ok,
            AMQPClass::Channel(channel::AMQPMethod::OpenOk(_))
        ));
    }
}

/// Waits (5 s at most) until `done` holds, checking every 10 ms; panics naming `what`
/// otherwise. For what a client learns asynchronously (a channel closed by the server).
pub async fn eventually(what: &str, done: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not within 5 s: {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// The server still completes a handshake and opens a channel.
pub async fn still_serving(server: &Server) {
    let mut raw = Raw::connect(server).await;
    raw.handshake(131072, 2047, 0).await;
    raw.open_channel(1).await;
}
