//! Shared helpers of the binder's and the runtime's tests on the embedded engine.
#![allow(dead_code)]

use std::time::Duration;

use binder_core::Message;
use binder_embedded::engine::*;

pub fn open() -> (Broker, Connection, Channel) {
    let broker = Broker::new();
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    (broker, conn, ch)
}

pub fn msg(text: &str) -> Message {
    Message::new(text.as_bytes().to_vec())
}

pub fn text(d: &Delivery) -> String {
    String::from_utf8(d.message().payload.to_vec()).unwrap()
}

pub fn args(pairs: &[(&str, FieldValue)]) -> FieldTable {
    pairs.iter().cloned().collect()
}

pub fn declare(ch: &Channel, name: &str) {
    ch.queue_declare(name, QueueOptions::default(), FieldTable::new())
        .unwrap();
}

pub fn declare_with(ch: &Channel, name: &str, a: FieldTable) {
    ch.queue_declare(name, QueueOptions::default(), a).unwrap();
}

pub async fn publish(ch: &Channel, exchange: &str, key: &str, body: &str) -> PublishOutcome {
    ch.basic_publish(exchange, key, PublishOptions::default(), msg(body))
        .await
        .unwrap()
}

/// Texts of every message ready in a queue, taken with `basic.get` (no ack).
pub fn drain(ch: &Channel, queue: &str) -> Vec<String> {
    std::iter::from_fn(|| ch.basic_get(queue, true).unwrap())
        .map(|g| text(&g.delivery))
        .collect()
}

/// Deliveries already handed to a consumer (the engine dispatches synchronously).
pub fn ready(consumer: &mut Consumer) -> Vec<Delivery> {
    std::iter::from_fn(|| consumer.try_recv()).collect()
}

pub async fn next(consumer: &mut Consumer) -> Delivery {
    tokio::time::timeout(Duration::from_secs(10), consumer.recv())
        .await
        .expect("no delivery within 10 s")
        .expect("consumer cancelled")
}

/// A configuration from YAML text, without the process environment.
pub fn config(yaml: &str) -> binder_core::config::StreamConfig {
    binder_core::config::ConfigLoader::new()
        .env(Vec::<(String, String)>::new())
        .yaml_str(yaml)
        .load()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// An application builder on this broker.
pub fn app(broker: &Broker, yaml: &str) -> binder_core::runtime::AppBuilder {
    binder_core::runtime::App::builder(config(yaml)).binder(
        "embedded",
        std::sync::Arc::new(binder_embedded::EmbeddedBinder::new(broker.clone())),
    )
}

/// The next value of a channel, within 10 s.
pub async fn recv<T>(rx: &mut tokio::sync::mpsc::UnboundedReceiver<T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("nothing arrived within 10 s")
        .expect("channel closed")
}

/// A no-ack consumer watching a queue directly on the broker; it stops when dropped.
pub struct Watch {
    _connection: Connection,
    _channel: Channel,
    /// The deliveries.
    pub consumer: Consumer,
}

pub fn watch_queue(broker: &Broker, queue: &str) -> Watch {
    let connection = broker.connect();
    let channel = connection.open_channel().unwrap();
    let consumer = channel
        .basic_consume(
            queue,
            ConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
        )
        .unwrap();
    Watch {
        _connection: connection,
        _channel: channel,
        consumer,
    }
}
