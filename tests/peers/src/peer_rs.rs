//! ruststream 0.7.7 on its in-process `MemoryBroker`: a `#[subscriber]` handler per name,
//! decoding into [`BenchMsg`], its state a [`Sink`]; producers publish typed messages through
//! the broker's publisher (`message(&m).to(name).publish()`, JSON-encoded by the framework).

use std::convert::Infallible;

use ruststream::memory::MemoryPublisher;
use ruststream::memory::prelude::*;

use crate::payload::{BenchMsg, Sink};

impl FromRef<Sink> for Sink {
    fn from_ref(state: &Sink) -> Sink {
        state.clone()
    }
}

#[subscriber]
async fn handle(m: &BenchMsg, State(sink): State<Sink>) -> HandlerOutcome {
    sink.arrived(m);
    HandlerOutcome::ack()
}

/// A started ruststream service with one subscriber per name, on a fresh `MemoryBroker`.
pub struct RsApp {
    running: RunningApp,
    broker: MemoryBroker,
}

impl std::fmt::Debug for RsApp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RsApp")
    }
}

impl RsApp {
    /// Starts the service; it returns once every subscription is open.
    pub async fn start(names: &[String], sink: &Sink) -> RsApp {
        let broker = MemoryBroker::new();
        let state = sink.clone();
        let names = names.to_vec();
        let app = RustStream::new(AppInfo::new("peer-bench", "0.0.0"))
            .on_startup(async move |()| Ok::<_, Infallible>(state))
            .with_broker(broker.clone(), move |b| {
                for name in names {
                    b.include(handle.name(name));
                }
            });
        let running = app.start().await.expect("ruststream service starts");
        RsApp { running, broker }
    }

    /// A publisher on the service's broker.
    pub fn publisher(&self) -> MemoryPublisher {
        self.broker.publisher()
    }

    /// Stops the service (after the clock stopped).
    pub async fn finish(self) {
        self.running.shutdown().await.expect("ruststream shutdown");
    }
}

/// Publishes every message to `name`, each encoded by the framework and awaited.
pub async fn publish_each(publisher: &MemoryPublisher, name: &str, msgs: &[BenchMsg]) {
    for m in msgs {
        publisher
            .message(m)
            .to(name)
            .publish()
            .await
            .expect("ruststream publish");
    }
}

/// Publishes one message (the latency scenario paces its own loop).
pub async fn publish_one(publisher: &MemoryPublisher, name: &str, m: &BenchMsg) {
    publisher
        .message(m)
        .to(name)
        .publish()
        .await
        .expect("ruststream publish");
}

/// A bare `MemoryBroker` subscription nobody reads and its publisher, for the memory
/// scenario: what the broker keeps per queued message.
pub struct Parked {
    _subscription: ruststream::memory::MemorySubscriber,
    publisher: MemoryPublisher,
    _broker: MemoryBroker,
}

impl std::fmt::Debug for Parked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Parked")
    }
}

impl Parked {
    pub fn open(name: &str) -> Parked {
        let broker = MemoryBroker::new();
        Parked {
            _subscription: broker.subscribe(name),
            publisher: broker.publisher(),
            _broker: broker,
        }
    }

    /// Publishes one encoded payload to `name` (the broker copies it; the caller drops it).
    pub async fn publish_raw(&self, name: &str, payload: &[u8]) {
        self.publisher
            .publish(ruststream::OutgoingMessage::new(name, payload), None)
            .await
            .expect("ruststream publish");
    }
}
