//! Dynamic destinations open independently: one whose producer cannot open does not hold
//! up sends to the others, and concurrent first sends to one destination open it once.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use binder_amqp::topology::TopologyPlan;
use binder_amqp::{AmqpBroker, AmqpProducer, ProducerSpec, QueueInfo, SubscriptionSpec};
use binder_core::binder::{Binder, BinderResult, BoundConsumer, Producer, Subscription};
use binder_core::config::BindingConfig;
use binder_embedded::EmbeddedBinder;
use binder_embedded::engine::FieldTable;
use binder_embedded::engine::{Broker, QueueOptions};
use common::{config, drain};
use tokio::sync::{Notify, watch};

/// The embedded binder, except that opening a producer for `stuck` waits until released
/// (as it would for a broker that cannot be reached); it counts the producers opened.
#[derive(Debug)]
struct Gate {
    inner: EmbeddedBinder,
    stuck: &'static str,
    entered: Notify,
    released: watch::Receiver<bool>,
    opened: Mutex<HashMap<String, usize>>,
}

impl Gate {
    fn opened(&self, exchange: &str) -> usize {
        self.opened
            .lock()
            .unwrap()
            .get(exchange)
            .copied()
            .unwrap_or(0)
    }
}

#[async_trait]
impl Binder for Gate {
    fn binder_type(&self) -> &str {
        self.inner.binder_type()
    }
    async fn bind_consumer(&self, binding: &BindingConfig) -> BinderResult<Box<dyn BoundConsumer>> {
        self.inner.bind_consumer(binding).await
    }
    /// Through the gated `producer` below.
    async fn bind_producer(&self, binding: &BindingConfig) -> BinderResult<Box<dyn Producer>> {
        binder_amqp::bind_producer(self, binding).await
    }
    async fn close(&self) {
        Binder::close(&self.inner).await
    }
}

#[async_trait]
impl AmqpBroker for Gate {
    async fn provision(&self, plan: &TopologyPlan) -> BinderResult<()> {
        self.inner.provision(plan).await
    }
    async fn producer(&self, spec: ProducerSpec) -> BinderResult<Box<dyn AmqpProducer>> {
        if spec.exchange == self.stuck {
            self.entered.notify_one();
            let mut released = self.released.clone();
            released.wait_for(|r| *r).await.unwrap();
        }
        *self
            .opened
            .lock()
            .unwrap()
            .entry(spec.exchange.clone())
            .or_default() += 1;
        self.inner.producer(spec).await
    }
    async fn subscribe(&self, spec: SubscriptionSpec) -> BinderResult<Box<dyn Subscription>> {
        self.inner.subscribe(spec).await
    }
    async fn inspect(&self, queue: &str) -> BinderResult<QueueInfo> {
        self.inner.inspect(queue).await
    }
    async fn remove(&self, plan: &TopologyPlan) -> BinderResult<()> {
        self.inner.remove(plan).await
    }
}

const WAIT: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destination_that_cannot_open_blocks_only_its_own_sends_and_opens_once() {
    let broker = Broker::new();
    let (release, released) = watch::channel(false);
    let gate = Arc::new(Gate {
        inner: EmbeddedBinder::new(broker.clone()),
        stuck: "stuck",
        entered: Notify::new(),
        released,
        opened: Mutex::new(HashMap::new()),
    });
    let running = binder_core::runtime::App::builder(config(""))
        .binder("embedded", gate.clone())
        .start()
        .await
        .unwrap();
    let publisher = running.publisher();
    publisher.send("warm", &0).await.unwrap();

    // Three concurrent first sends to `stuck`: one opens it and waits at the gate.
    let stuck: Vec<_> = (1..=3)
        .map(|i| {
            let p = publisher.clone();
            tokio::spawn(async move { p.send("stuck", &i).await })
        })
        .collect();
    tokio::time::timeout(WAIT, gate.entered.notified())
        .await
        .expect("the producer of `stuck` started opening");
    // Its exchange is declared before its producer opens: a queue bound now sees all three.
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    ch.queue_declare("stuck-q", QueueOptions::default(), FieldTable::new())
        .unwrap();
    ch.queue_bind("stuck-q", "stuck", "#", FieldTable::new())
        .unwrap();

    // Meanwhile an open destination and a new one both take sends.
    tokio::time::timeout(WAIT, publisher.send("warm", &1))
        .await
        .expect("a send to an open destination is not held up")
        .unwrap();
    tokio::time::timeout(WAIT, publisher.send("fresh", &2))
        .await
        .expect("a new destination opens while another cannot")
        .unwrap();
    assert!(
        stuck.iter().all(|s| !s.is_finished()),
        "`stuck` is still closed"
    );

    release.send(true).unwrap();
    for send in stuck {
        tokio::time::timeout(WAIT, send)
            .await
            .expect("the sends to `stuck` complete once it opens")
            .unwrap()
            .unwrap();
    }
    assert_eq!(
        gate.opened("stuck"),
        1,
        "one producer for concurrent first sends"
    );
    assert_eq!(gate.opened("warm"), 1);
    let mut got = drain(&ch, "stuck-q");
    got.sort();
    assert_eq!(got, ["1", "2", "3"]);
    running.shutdown().await;
}
