//! Shared helpers of the engine tests.
#![allow(dead_code)]

use std::time::Duration;

use stream_engine::*;

pub fn open() -> (Broker, Connection, Channel) {
    let broker: Broker = Broker::new();
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

/// A fanout exchange `exchange` and a queue `queue` bound to it: where a queue's dead letters
/// go when it names `exchange` as its `x-dead-letter-exchange`.
pub fn dead_letter_target(ch: &Channel, exchange: &str, queue: &str) {
    ch.exchange_declare(
        exchange,
        ExchangeKind::Fanout,
        ExchangeOptions::default(),
        FieldTable::new(),
    )
    .unwrap();
    declare(ch, queue);
    ch.queue_bind(queue, exchange, "", FieldTable::new())
        .unwrap();
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

pub fn consume(ch: &Channel, queue: &str) -> Consumer {
    ch.basic_consume(queue, ConsumeOptions::default()).unwrap()
}

/// This process's resident set in bytes (`VmRSS` of `/proc/self/status`).
pub fn rss() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib: usize = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .expect("a VmRSS line")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .expect("VmRSS in kB");
    kib * 1024
}

/// `consumer` waiting for its next delivery, as a subscription waits: parked in the engine
/// once this returns (a test's runtime has one thread, and the task runs at the yield).
/// `idle` says why nothing reaches it yet.
pub async fn waiting(mut consumer: Consumer, idle: &str) -> tokio::task::JoinHandle<String> {
    let task = tokio::spawn(async move {
        let delivery = consumer.recv().await.expect("the consumer stays open");
        text(&delivery)
    });
    tokio::task::yield_now().await;
    assert!(!task.is_finished(), "{idle}");
    task
}

/// What a [`waiting`] consumer is handed, which must come within 5 s (`why` it should).
pub async fn served(task: tokio::task::JoinHandle<String>, why: &str) -> String {
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect(why)
        .unwrap()
}
