//! A three-node RabbitMQ cluster of the test's own (three private nodes joined with
//! `join_cluster`; the shared broker is never touched): a service configured with
//! `spring.rabbitmq.addresses` listing the three nodes and quorum queues
//! (`quorum.enabled: true`) streams confirmed messages to its own consumer while the node
//! leading the queue is killed with SIGKILL and then restarted. No confirmed message may be
//! lost; duplicates and the longest time without deliveries are printed. A second binding
//! checks that `quorum.deliveryLimit` (`x-delivery-limit`) sends a message requeued too often
//! to the DLQ.
//!
//! Opt-in: it runs only with `RABBIT_CLUSTER_TESTS=1` (`.ci/run` sets it), and then fails if
//! no cluster starts here. Without it, it says it is skipped and passes.
//! `RABBIT_CLUSTER_TESTS=1 cargo test -p binder-rabbit --test cluster -- --nocapture` prints
//! the figures.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use binder_core::config::{ConfigLoader, StreamConfig};
use binder_core::runtime::{App, HandlerError, HealthStatus, Output, handler};
use tokio::sync::{mpsc, watch};

mod common;

/// The variable that turns the test on.
const OPT_IN: &str = "RABBIT_CLUSTER_TESTS";
/// The `quorum.deliveryLimit` of the `limited-in` binding.
const DELIVERY_LIMIT: u32 = 2;

fn config(addresses: &str, dest: &str, limited: &str) -> StreamConfig {
    ConfigLoader::new()
        .env(Vec::<(String, String)>::new())
        .yaml_str(&format!(
            r#"
spring.rabbitmq.addresses: "{addresses}"
spring.cloud.stream:
  defaultBinder: rabbit
  bindings:
    in: {{destination: {dest}, group: g}}
    out: {{destination: {dest}, producer: {{requiredGroups: [g]}}}}
    limited-in: {{destination: {limited}, group: g, consumer: {{maxAttempts: 1}}}}
    limited-out: {{destination: {limited}}}
  rabbit.bindings:
    in.consumer: {{prefetch: 20, quorum: {{enabled: true}}}}
    out.producer: {{quorum: {{enabled: true}}}}
    limited-in.consumer:
      quorum: {{enabled: true, deliveryLimit: {DELIVERY_LIMIT}}}
      autoBindDlq: true
      dlqQuorum: {{enabled: true}}
      republishToDlq: false
      requeueRejected: true
"#
        ))
        .load()
        .unwrap()
}

/// What the consumer of `in` received: each delivery's id and when the handler got it.
struct Deliveries {
    rx: mpsc::UnboundedReceiver<(u32, Instant)>,
    all: Vec<(u32, Instant)>,
}

impl Deliveries {
    /// Takes deliveries until `done` holds for all received so far, within `limit`.
    async fn until(
        &mut self,
        what: &str,
        limit: Duration,
        sent: &Mutex<Sent>,
        done: impl Fn(&[(u32, Instant)]) -> bool,
    ) {
        let waited = tokio::time::timeout(limit, async {
            while !done(&self.all) {
                match self.rx.recv().await {
                    Some(d) => self.all.push(d),
                    None => panic!("the consumer's channel closed"),
                }
            }
        })
        .await;
        if waited.is_err() {
            let sent = sent.lock().unwrap();
            panic!(
                "{what}: not within {limit:?} ({} deliveries; {} sends confirmed, {} failed, \
                 the last failure: {})",
                self.all.len(),
                sent.confirmed.len(),
                sent.failures,
                sent.last_failure.as_deref().unwrap_or("none")
            );
        }
    }

    /// How many deliveries came at or after `t`.
    fn since(all: &[(u32, Instant)], t: Instant) -> usize {
        all.iter().filter(|(_, at)| *at >= t).count()
    }
}

/// What the stream of confirmed sends did.
#[derive(Default)]
struct Sent {
    /// Each confirmed id, with when its confirm came.
    confirmed: Vec<(u32, Instant)>,
    /// Sends that failed (and were sent again), and the last failure.
    failures: u32,
    last_failure: Option<String>,
}

/// A stream of confirmed sends of 0, 1, 2, … through `out`, one every 5 ms, each sent again
/// (after 100 ms) until it is confirmed, until `stop` is set. A message not confirmed within
/// 30 s fails the test.
async fn stream(out: Output, stop: watch::Receiver<bool>, sent: Arc<Mutex<Sent>>) {
    let mut tick = tokio::time::interval(Duration::from_millis(5));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for id in 0u32.. {
        if *stop.borrow() {
            break;
        }
        tick.tick().await;
        let first = Instant::now();
        loop {
            // A send never hangs the stream: one without an answer counts as failed.
            let why = match tokio::time::timeout(Duration::from_secs(10), out.send(&id)).await {
                Ok(Ok(())) => {
                    sent.lock().unwrap().confirmed.push((id, Instant::now()));
                    break;
                }
                Ok(Err(e)) => e.to_string(),
                Err(_) => "no answer within 10 s".to_owned(),
            };
            assert!(
                first.elapsed() < Duration::from_secs(30),
                "message {id} was not confirmed within 30 s; last: {why}"
            );
            {
                let mut sent = sent.lock().unwrap();
                sent.failures += 1;
                sent.last_failure = Some(why);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The nodes (by index) the service's connections are on, from their server ports.
fn service_nodes(cluster: &common::Cluster, via: usize) -> BTreeSet<usize> {
    cluster.nodes[via]
        .ctl(&["list_connections", "port"])
        .lines()
        .filter_map(|l| l.trim().parse::<u16>().ok())
        .filter_map(|port| cluster.nodes.iter().position(|n| n.port() == port))
        .collect()
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}

/// Milliseconds from `base` to `t`, negative when `t` is earlier.
fn after(base: Instant, t: Instant) -> i128 {
    match t.checked_duration_since(base) {
        Some(d) => d.as_millis() as i128,
        None => -((base - t).as_millis() as i128),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_queue_leader_loses_no_confirmed_message() {
    if std::env::var(OPT_IN).as_deref() != Ok("1") {
        eprintln!("SKIPPED: the three-node cluster test runs with {OPT_IN}=1");
        return;
    }
    let began = Instant::now();
    let mut cluster = tokio::task::block_in_place(|| common::Cluster::start("cluster", 3))
        .unwrap_or_else(|e| panic!("{OPT_IN}=1 but no three-node RabbitMQ cluster starts: {e}"));
    eprintln!(
        "cluster of {} started and joined in {} ms",
        cluster.nodes.len(),
        ms(began.elapsed())
    );
    let dest = common::unique("cluster");
    let limited = common::unique("limited");
    let config = config(&cluster.addresses(), &dest, &limited);

    let (tx, rx) = mpsc::unbounded_channel();
    let limited_seen = Arc::new(Mutex::new(0u32));
    let builder = App::builder(config)
        .listener(
            "in",
            handler::payload(move |id: u32| {
                let tx = tx.clone();
                async move {
                    let _ = tx.send((id, Instant::now()));
                }
            }),
        )
        .listener("limited-in", {
            let seen = limited_seen.clone();
            handler::payload(move |_: u32| {
                *seen.lock().unwrap() += 1;
                async { Err::<(), _>(HandlerError::retryable("always fails")) }
            })
        })
        .output("out")
        .output("limited-out");
    let health = builder.health();
    let app = tokio::time::timeout(Duration::from_secs(60), builder.start())
        .await
        .expect("the service starts within 60 s")
        .unwrap_or_else(|e| panic!("{e}"));
    common::health_until(&health, "up", |s| *s == HealthStatus::Up).await;

    // The queue is a quorum queue on all three nodes; find its leader.
    let queue = format!("{dest}.g");
    let types = cluster.nodes[0].ctl(&["list_queues", "name", "type", "members"]);
    let line = types
        .lines()
        .find(|l| l.starts_with(&format!("{queue}\t")))
        .unwrap_or_else(|| panic!("`{queue}` is not declared:\n{types}"));
    assert!(line.contains("\tquorum\t"), "{line}");
    for node in &cluster.nodes {
        assert!(line.contains(node.name()), "{line} lacks {}", node.name());
    }
    let leader = cluster.leader_of(&queue, 0).unwrap();
    let victim = cluster
        .index_of(&leader)
        .unwrap_or_else(|| panic!("the leader {leader} is not one of the cluster's nodes"));
    let connected = service_nodes(&cluster, 0);
    eprintln!(
        "queue `{queue}` led by node {victim}; the service is connected to nodes {connected:?}"
    );

    // The stream runs; once 300 messages are consumed the leader is killed.
    let (stop, stopping) = watch::channel(false);
    let sent = Arc::new(Mutex::new(Sent::default()));
    let streaming = tokio::spawn(stream(app.output("out").unwrap(), stopping, sent.clone()));
    let mut deliveries = Deliveries {
        rx,
        all: Vec::new(),
    };
    deliveries
        .until(
            "300 deliveries before the kill",
            Duration::from_secs(30),
            &sent,
            |all| all.len() >= 300,
        )
        .await;
    let killed = Instant::now();
    tokio::task::block_in_place(|| cluster.nodes[victim].kill()).unwrap();
    eprintln!("node {victim} ({leader}) killed with SIGKILL");
    // While it is down, the service goes on with the two others.
    let alive = (victim + 1) % cluster.nodes.len();
    deliveries
        .until(
            "200 deliveries while the killed node is down",
            Duration::from_secs(30),
            &sent,
            |all| Deliveries::since(all, killed) >= 200,
        )
        .await;
    let new_leader = cluster.leader_of(&queue, alive).unwrap();
    assert_ne!(new_leader, leader, "the queue has a new leader");
    let reconnected = service_nodes(&cluster, alive);
    assert!(
        !reconnected.is_empty() && !reconnected.contains(&victim),
        "the service is connected to live nodes only: {reconnected:?}"
    );
    eprintln!("new leader {new_leader}; the service is now connected to nodes {reconnected:?}");

    // The killed node comes back on its data directory and rejoins; the stream goes on.
    let restarting = Instant::now();
    tokio::task::block_in_place(|| cluster.nodes[victim].restart()).unwrap();
    let restarted = Instant::now();
    eprintln!(
        "node {victim} restarted in {} ms",
        ms(restarted - restarting)
    );
    cluster.nodes[alive]
        .ctl_until(&["eval", "length(rabbit_nodes:all_running())."], |out| {
            out.trim() == "3"
        })
        .await;
    deliveries
        .until(
            "200 deliveries after the restart",
            Duration::from_secs(30),
            &sent,
            |all| Deliveries::since(all, restarted) >= 200,
        )
        .await;
    stop.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(40), streaming)
        .await
        .expect("the stream ends")
        .unwrap();
    let (confirmed, failures) = {
        let sent = sent.lock().unwrap();
        let ids: BTreeSet<u32> = sent.confirmed.iter().map(|(id, _)| *id).collect();
        (ids, sent.failures)
    };
    deliveries
        .until(
            "every confirmed message consumed",
            Duration::from_secs(30),
            &sent,
            |all| {
                let seen: BTreeSet<u32> = all.iter().map(|(id, _)| *id).collect();
                confirmed.is_subset(&seen)
            },
        )
        .await;

    // The figures.
    let mut counts = BTreeMap::new();
    for (id, _) in &deliveries.all {
        *counts.entry(*id).or_insert(0u32) += 1;
    }
    let lost = confirmed
        .iter()
        .filter(|id| !counts.contains_key(id))
        .count();
    let duplicates: u32 = counts.values().map(|n| n - 1).sum();
    let (gap, gap_end) = deliveries
        .all
        .windows(2)
        .map(|w| (w[1].1.saturating_duration_since(w[0].1), w[1].1))
        .max()
        .unwrap();
    eprintln!(
        "confirmed {}, delivered {}, confirmed but never consumed {lost}, duplicates {duplicates} \
         ({} ids delivered more than once), sends failed and sent again {failures}",
        confirmed.len(),
        deliveries.all.len(),
        counts.values().filter(|n| **n > 1).count()
    );
    eprintln!(
        "longest time without deliveries {} ms, from {} ms to {} ms after the kill",
        ms(gap),
        after(killed, gap_end - gap),
        after(killed, gap_end)
    );
    assert_eq!(lost, 0, "confirmed messages were lost");
    common::health_until(&health, "up", |s| *s == HealthStatus::Up).await;

    // x-delivery-limit: a message requeued more often than quorum.deliveryLimit is
    // dead-lettered by the broker to the DLQ.
    let limited_queue = format!("{limited}.g");
    let dlq = format!("{limited_queue}.dlq");
    app.output("limited-out")
        .unwrap()
        .send(&7u32)
        .await
        .unwrap();
    let listed = cluster.nodes[alive]
        .ctl_until(&["list_queues", "name", "messages"], |out| {
            out.lines().any(|l| l == format!("{dlq}\t1"))
        })
        .await;
    assert!(
        listed.lines().any(|l| l == format!("{limited_queue}\t0")),
        "{listed}"
    );
    let attempts = *limited_seen.lock().unwrap();
    eprintln!(
        "x-delivery-limit {DELIVERY_LIMIT}: delivered {attempts} times, then dead-lettered to `{dlq}`"
    );
    assert_eq!(
        attempts,
        DELIVERY_LIMIT + 1,
        "the first delivery and {DELIVERY_LIMIT} redeliveries"
    );

    app.shutdown().await;
    eprintln!("whole test {} ms", ms(began.elapsed()));
    drop(cluster);
}
