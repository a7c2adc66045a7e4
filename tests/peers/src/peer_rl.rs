//! ruststream-lapin 0.7.2: a ruststream service on `LapinBroker` (prefetch set) with a
//! `#[subscriber(RabbitQueue)]` handler named at the mount site, decoding into [`BenchMsg`];
//! the producer is a `ConfirmsPublisher` (publisher confirms) on a connected broker, with a
//! window of typed publishes in flight.

use std::convert::Infallible;
use std::num::NonZeroU16;
use std::sync::Mutex;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use ruststream::ConnectedBroker;
use ruststream_lapin::prelude::*;
use ruststream_lapin::{ConfirmsPublisher, ConnectedLapinBroker};

use crate::payload::{BenchMsg, Sink};

/// The queue the next [`RlApp::start`] consumes: the attribute's source expression is
/// evaluated when the service mounts the handler, and `RabbitQueue` cannot be named at the
/// mount site (it has no by-name constructor).
static QUEUE: Mutex<String> = Mutex::new(String::new());

fn queue() -> String {
    QUEUE.lock().expect("queue name").clone()
}

#[subscriber(RabbitQueue::new(queue()))]
async fn handle(m: &BenchMsg, State(sink): State<Sink>) -> HandlerOutcome {
    sink.arrived(m);
    HandlerOutcome::ack()
}

/// A started service consuming `queue` (declared by the caller).
pub struct RlApp {
    running: RunningApp,
}

impl std::fmt::Debug for RlApp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RlApp")
    }
}

impl RlApp {
    pub async fn start(uri: &str, queue: &str, prefetch: u16, sink: &Sink) -> RlApp {
        let state = sink.clone();
        let broker =
            LapinBroker::new(uri).prefetch(NonZeroU16::new(prefetch).expect("prefetch > 0"));
        *QUEUE.lock().expect("queue name") = queue.to_owned();
        let app = RustStream::new(AppInfo::new("peer-bench", "0.0.0"))
            .on_startup(async move |()| Ok::<_, Infallible>(state))
            .with_broker(broker, move |b| {
                b.include(handle);
            });
        let running = app.start().await.expect("ruststream-lapin service starts");
        RlApp { running }
    }

    pub async fn finish(self) {
        self.running
            .shutdown()
            .await
            .expect("ruststream-lapin shutdown");
    }
}

/// A connected producer: a `ConfirmsPublisher` on its own connection.
pub struct RlProducer {
    connected: ConnectedLapinBroker,
    publisher: ConfirmsPublisher,
}

impl std::fmt::Debug for RlProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RlProducer")
    }
}

impl RlProducer {
    pub async fn connect(uri: &str, exchange: &str, persistent: bool) -> RlProducer {
        let connected = LapinBroker::new(uri)
            .connect()
            .await
            .expect("ruststream-lapin connect");
        let publisher = connected.publisher(
            LapinPublish::default()
                .exchange(exchange)
                .persistent(persistent)
                .confirms(),
        );
        RlProducer {
            connected,
            publisher,
        }
    }

    /// Publishes every message to `routing_key`, with at most `window` publishes awaiting
    /// their confirms.
    pub async fn publish(&self, routing_key: &str, msgs: &[BenchMsg], window: usize) {
        let mut in_flight = FuturesUnordered::new();
        for m in msgs {
            if in_flight.len() >= window {
                in_flight.next().await;
            }
            in_flight.push(self.publish_one(routing_key, m));
        }
        while in_flight.next().await.is_some() {}
    }

    /// One typed publish, awaiting its confirm.
    async fn publish_one(&self, routing_key: &str, m: &BenchMsg) {
        self.publisher
            .message(m)
            .to(routing_key)
            .publish()
            .await
            .expect("ruststream-lapin publish");
    }

    pub async fn close(self) {
        drop(self.publisher);
        self.connected
            .shutdown()
            .await
            .expect("ruststream-lapin producer shutdown");
    }
}
