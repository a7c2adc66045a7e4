//! Helpers the store's tests share: a broker on a store, persistent messages, confirms.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;

use stream_engine::*;
use stream_store::{DiskStore, FaultFs, StoreConfig};

pub fn durable_queue() -> QueueOptions {
    QueueOptions {
        durable: true,
        ..Default::default()
    }
}

pub fn durable_exchange() -> ExchangeOptions {
    ExchangeOptions {
        durable: true,
        ..Default::default()
    }
}

pub fn persistent(body: impl Into<bytes::Bytes>) -> Message {
    let mut m = Message::new(body);
    m.properties.delivery_mode = Some(2);
    m
}

pub fn text(d: &Delivery) -> String {
    String::from_utf8(d.message().payload.to_vec()).unwrap()
}

/// A store on `fs` in `dir`, and a broker on it.
pub fn open_fault(fs: &FaultFs, dir: &Path, config: StoreConfig) -> (DiskStore, Broker) {
    let store = DiskStore::open_with(Arc::new(fs.clone()), dir, config).expect("store opens");
    let broker = Broker::with_store(BrokerConfig::default(), store.clone()).expect("recovers");
    (store, broker)
}

pub fn open_real(dir: &Path, config: StoreConfig) -> (DiskStore, Broker) {
    let store = DiskStore::open(dir, config).expect("store opens");
    let broker = Broker::with_store(BrokerConfig::default(), store.clone()).expect("recovers");
    (store, broker)
}

/// Every message left in `queue`, fetched without acknowledging (body, redelivered).
pub fn drain(ch: &Channel, queue: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    while let Some(got) = ch.basic_get(queue, false).unwrap() {
        out.push((text(&got.delivery), got.delivery.redelivered));
    }
    out
}

/// Publishes each body as a persistent message to `queue` through the default exchange,
/// waiting for its confirm if the channel is in confirm mode.
pub async fn publish_each(ch: &Channel, queue: &str, bodies: impl IntoIterator<Item = String>) {
    for body in bodies {
        ch.basic_publish("", queue, PublishOptions::default(), persistent(body))
            .await
            .unwrap();
    }
}

/// A small deterministic generator (xorshift64*).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}
