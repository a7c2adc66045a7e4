//! How soon a consumer subscribes again: at once after the broker ends its subscription, then,
//! while subscribing fails, after waits that double from 100 ms up to `recoveryInterval` (up
//! to 500 ms while the broker cannot be reached at all). On tokio's paused clock, so the
//! waits are exact.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use binder_amqp::topology::TopologyPlan;
use binder_amqp::{AmqpBroker, AmqpProducer, ProducerSpec, QueueInfo, SubscriptionSpec};
use binder_core::binder::{
    Binder, BinderError, BinderResult, BoundConsumer, Producer, Subscription,
};
use binder_core::config::BindingConfig;
use binder_core::runtime::{App, BindingState, HealthStatus, RunningApp, handler};
use binder_embedded::EmbeddedBinder;
use binder_embedded::engine::Broker;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// The embedded binder, except that the first `failures` subscribes fail as if the broker
/// were down; every subscribe reports when it happened and whether it worked.
#[derive(Debug, Clone)]
struct Flaky {
    inner: EmbeddedBinder,
    failures: Arc<AtomicU32>,
    /// Whether the failures say the broker cannot be reached (else: it refused).
    unreachable: bool,
    attempts: mpsc::UnboundedSender<(Instant, bool)>,
}

#[async_trait]
impl Binder for Flaky {
    fn binder_type(&self) -> &str {
        self.inner.binder_type()
    }
    async fn bind_consumer(&self, binding: &BindingConfig) -> BinderResult<Box<dyn BoundConsumer>> {
        binder_amqp::bind_consumer(Arc::new(self.clone()), binding).await
    }
    async fn bind_producer(&self, binding: &BindingConfig) -> BinderResult<Box<dyn Producer>> {
        binder_amqp::bind_producer(self, binding).await
    }
    async fn close(&self) {
        Binder::close(&self.inner).await
    }
}

#[async_trait]
impl AmqpBroker for Flaky {
    async fn provision(&self, plan: &TopologyPlan) -> BinderResult<()> {
        self.inner.provision(plan).await
    }
    async fn producer(&self, spec: ProducerSpec) -> BinderResult<Box<dyn AmqpProducer>> {
        self.inner.producer(spec).await
    }
    async fn subscribe(&self, spec: SubscriptionSpec) -> BinderResult<Box<dyn Subscription>> {
        let fail = self
            .failures
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        let result = if fail && self.unreachable {
            Err(BinderError::unreachable("the test says so"))
        } else if fail {
            Err(BinderError::broker("ACCESS_REFUSED, the test says"))
        } else {
            self.inner.subscribe(spec).await
        };
        let _ = self.attempts.send((Instant::now(), result.is_ok()));
        result
    }
    async fn inspect(&self, queue: &str) -> BinderResult<QueueInfo> {
        self.inner.inspect(queue).await
    }
    async fn remove(&self, plan: &TopologyPlan) -> BinderResult<()> {
        self.inner.remove(plan).await
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The next subscribe attempt: how long after `since` it came, and whether it worked.
async fn next(
    rx: &mut mpsc::UnboundedReceiver<(Instant, bool)>,
    since: &mut Instant,
) -> (Duration, bool) {
    let (at, ok) = tokio::time::timeout(Duration::from_secs(3600), rx.recv())
        .await
        .expect("another subscribe attempt")
        .expect("the binder is alive");
    let gap = at - *since;
    *since = at;
    (gap, ok)
}

/// An application on a [`Flaky`] binder over `broker` whose first `failures` subscribes fail,
/// with a listener on each of `inputs`; and the binder's report of each subscribe.
async fn start(
    broker: &Broker,
    failures: u32,
    unreachable: bool,
    yaml: &str,
    inputs: &[&str],
) -> (RunningApp, mpsc::UnboundedReceiver<(Instant, bool)>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let binder = Arc::new(Flaky {
        inner: EmbeddedBinder::new(broker.clone()),
        failures: Arc::new(AtomicU32::new(failures)),
        unreachable,
        attempts: tx,
    });
    let mut builder = App::builder(common::config(yaml)).binder("embedded", binder);
    for input in inputs {
        builder = builder.listener(*input, handler::payload(|_: String| async {}));
    }
    (builder.start().await.unwrap(), rx)
}

#[tokio::test(start_paused = true)]
async fn subscribing_again_is_immediate_after_a_loss_then_backs_off_up_to_recovery_interval() {
    let broker = Broker::new();
    let (app, mut rx) = start(
        &broker,
        6,
        false,
        "spring.cloud.stream:\n  bindings.jobs-in: {destination: recovery-jobs, group: w}\n  rabbit.bindings.jobs-in.consumer.recoveryInterval: 1000\n",
        &["jobs-in"],
    )
    .await;

    // Refused from the start: 100, 200, 400, 800 ms, then recoveryInterval (1 s) each time.
    let (_, first) = rx.recv().await.unwrap();
    let mut since = Instant::now();
    assert!(!first);
    let mut gaps = Vec::new();
    loop {
        let (gap, ok) = next(&mut rx, &mut since).await;
        gaps.push(gap);
        if ok {
            break;
        }
    }
    assert_eq!(
        gaps,
        [ms(100), ms(200), ms(400), ms(800), ms(1000), ms(1000)]
    );

    // The broker ends a subscription that has lasted (its queue is deleted): the next try is
    // at once; it fails (no queue) and the waits start again from 100 ms.
    tokio::time::sleep(ms(1500)).await;
    since = Instant::now();
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    ch.queue_delete("recovery-jobs.w", false, false).unwrap();
    let (gap, ok) = next(&mut rx, &mut since).await;
    assert_eq!((gap, ok), (Duration::ZERO, false), "at once after the loss");
    assert_eq!(next(&mut rx, &mut since).await, (ms(100), false));
    ch.queue_declare("recovery-jobs.w", Default::default(), Default::default())
        .unwrap();
    assert_eq!(next(&mut rx, &mut since).await, (ms(200), true));

    // One that ends at once counts as a failed try: the waits go on doubling, no busy loop.
    ch.queue_delete("recovery-jobs.w", false, false).unwrap();
    assert_eq!(next(&mut rx, &mut since).await, (ms(400), false));
    ch.queue_declare("recovery-jobs.w", Default::default(), Default::default())
        .unwrap();
    assert_eq!(next(&mut rx, &mut since).await, (ms(800), true));
    app.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn health_and_state_follow_a_binding_that_is_not_consuming() {
    let broker = Broker::new();
    let yaml = "spring.cloud.stream.bindings:\n  jobs-in: {destination: health-jobs, group: w}\n  other-in: {destination: health-other, group: w}\n";
    let (app, mut rx) = start(&broker, 0, false, yaml, &["jobs-in", "other-in"]).await;
    let health = app.health();
    app.resume("jobs-in").await.unwrap();
    app.resume("other-in").await.unwrap();
    assert_eq!(health.status(), HealthStatus::Up);

    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    ch.queue_delete("health-jobs.w", false, false).unwrap();
    // Down, with the latest reason: the loss, then the refused subscribes after it.
    let prefix = "binding `jobs-in` (queue `health-jobs.w`) is not consuming: ";
    let down = tokio::time::timeout(
        Duration::from_secs(60),
        health.wait_for(|s| {
            matches!(s, HealthStatus::Down { reason } if reason.starts_with(prefix) && !reason.contains("ended the subscription"))
        }),
    )
    .await
    .expect("health goes down with the subscribe's own reason");
    let HealthStatus::Down { reason } = down else {
        unreachable!()
    };
    assert!(reason[prefix.len()..].contains("health-jobs.w"), "{reason}");
    assert_eq!(app.state("jobs-in"), Some(BindingState::Recovering));
    assert_eq!(app.state("other-in"), Some(BindingState::Running));
    // A binding that is recovering still counts as running for the controls.
    tokio::time::timeout(Duration::from_secs(60), app.resume("jobs-in"))
        .await
        .expect("resume does not wait for the broker")
        .unwrap();

    // Stopping it is a choice, not a failure: health is up again.
    app.stop("jobs-in").await.unwrap();
    assert_eq!(health.status(), HealthStatus::Up);
    ch.queue_declare("health-jobs.w", Default::default(), Default::default())
        .unwrap();
    while rx.try_recv().is_ok() {}
    app.start("jobs-in").await.unwrap();
    assert_eq!(app.state("jobs-in"), Some(BindingState::Running));
    assert_eq!(health.status(), HealthStatus::Up);
    app.shutdown().await;
    assert_eq!(
        health.status(),
        HealthStatus::Down {
            reason: "shut down".into()
        }
    );
}

#[tokio::test(start_paused = true)]
async fn an_unreachable_broker_is_tried_at_least_every_500_ms() {
    let yaml = "spring.cloud.stream.bindings.jobs-in: {destination: unreachable-jobs, group: w}\n";
    let (app, mut rx) = start(&Broker::new(), 6, true, yaml, &["jobs-in"]).await;
    let (_, first) = rx.recv().await.unwrap();
    assert!(!first);
    let mut since = Instant::now();
    let mut gaps = Vec::new();
    loop {
        let (gap, ok) = next(&mut rx, &mut since).await;
        gaps.push(gap);
        if ok {
            break;
        }
    }
    // The default recoveryInterval is 5 s; an outage is probed more often than that.
    assert_eq!(gaps, [ms(100), ms(200), ms(400), ms(500), ms(500), ms(500)]);
    app.shutdown().await;
}
