//! On a RabbitMQ node of the test's own (never the shared broker): a service started while the
//! node's app is stopped comes up when it starts, `rabbitmqctl stop_app` / `start_app` and
//! `close_all_connections` in the middle of a stream lose no confirmed message, and the
//! service's health is down while its consumer is not consuming and up again once it is. The
//! node is stopped and removed whatever happens. Without RabbitMQ installed the test says so
//! and passes, unless `REQUIRE_RABBIT=1`.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use binder_amqp::AmqpBroker;
use binder_amqp::topology::{plan_consumer, plan_producer};
use binder_core::binder::Binder;
use binder_core::config::{ConfigLoader, StreamConfig};
use binder_core::runtime::{App, AppBuilder, BindingState, HealthStatus, handler};
use binder_rabbit::{RabbitBinder, RabbitSettings};
use tokio::sync::mpsc;

mod common;

fn config(dest: &str) -> StreamConfig {
    ConfigLoader::new()
        .env(Vec::<(String, String)>::new())
        .yaml_str(&format!(
            r#"
spring.cloud.stream:
  bindings:
    in: {{destination: {dest}, group: g}}
    out: {{destination: {dest}, producer: {{requiredGroups: [g]}}}}
  rabbit.bindings.in.consumer: {{prefetch: 20}}  # recoveryInterval: the default
"#
        ))
        .load()
        .unwrap()
}

fn service(
    config: StreamConfig,
    binder: Arc<RabbitBinder>,
    tx: mpsc::UnboundedSender<u32>,
) -> AppBuilder {
    App::builder(config)
        .binder("embedded", binder)
        .listener(
            "in",
            handler::payload(move |id: u32| {
                let tx = tx.clone();
                async move {
                    let _ = tx.send(id);
                }
            }),
        )
        .output("out")
}

async fn consumed_all(rx: &mut mpsc::UnboundedReceiver<u32>, confirmed: &BTreeSet<u32>) -> bool {
    let mut seen = BTreeSet::new();
    tokio::time::timeout(Duration::from_secs(90), async {
        while !confirmed.is_subset(&seen) {
            match rx.recv().await {
                Some(id) => {
                    seen.insert(id);
                }
                None => return,
            }
        }
    })
    .await
    .is_ok()
        && confirmed.is_subset(&seen)
}

/// Sends `ids` through `out`, each until it is confirmed; returns the confirmed ones.
async fn send_all(out: &binder_core::runtime::Output, ids: std::ops::Range<u32>) -> BTreeSet<u32> {
    let mut confirmed = BTreeSet::new();
    for id in ids {
        let mut tries = 0;
        loop {
            match out.send(&id).await {
                Ok(()) => {
                    confirmed.insert(id);
                    break;
                }
                Err(e) => {
                    tries += 1;
                    assert!(tries < 200, "the producer never recovered: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
    confirmed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_broker_going_away_loses_nothing_and_services_wait_for_it() {
    let Some(node) = common::PrivateNode::start("restart") else {
        return;
    };
    let dest = common::unique("restart");
    let config = config(&dest);

    // 1. A service started while the broker's app is stopped waits, then comes up.
    node.ctl(&["stop_app"]);
    let binder = Arc::new(RabbitBinder::new(RabbitSettings::from_uri(&node.url())));
    let (tx, mut rx) = mpsc::unbounded_channel();
    let builder = service(config.clone(), binder.clone(), tx);
    let health = builder.health();
    let starting = tokio::spawn(builder.start());
    // Health reports what startup waits for.
    let waiting = tokio::time::timeout(
        Duration::from_secs(30),
        health.wait_for(|s| matches!(s, HealthStatus::Starting { waiting: Some(_) })),
    )
    .await
    .expect("health reports the wait for the broker");
    assert!(
        waiting.to_string().contains("cannot connect to RabbitMQ"),
        "{waiting}"
    );
    assert!(
        !starting.is_finished(),
        "startup waits for the broker instead of failing"
    );
    node.ctl(&["start_app"]);
    node.ctl(&["await_startup", "--timeout", "60"]);
    let app = tokio::time::timeout(Duration::from_secs(60), starting)
        .await
        .expect("the service came up once the broker did")
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(health.is_ready(), "health is up once the broker is");
    let out = app.output("out").unwrap();
    out.send(&1_000u32).await.unwrap();
    assert!(consumed_all(&mut rx, &BTreeSet::from([1_000])).await);

    // 2. stop_app / start_app in the middle of a stream of confirmed sends: health is down
    // while the consumer is not consuming, and up again once it is.
    let mut confirmed = send_all(&out, 0..80).await;
    node.ctl(&["stop_app"]);
    let down =
        common::health_until(&health, "down", |s| matches!(s, HealthStatus::Down { .. })).await;
    assert!(
        down.to_string().contains("binding `in`") && down.to_string().contains("not consuming"),
        "{down}"
    );
    assert_eq!(app.state("in"), Some(BindingState::Recovering));
    // How long after the node accepts connections again the consumer consumes.
    let port = node.port();
    let starting = {
        let ctl = node.ctl_command(&["start_app"]);
        std::thread::spawn(move || ctl.wait_with_output())
    };
    let accepting = loop {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            break Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    common::health_until(&health, "up", |s| *s == HealthStatus::Up).await;
    eprintln!(
        "consuming again {} ms after the broker accepted connections (stop_app / start_app)",
        accepting.elapsed().as_millis()
    );
    let _ = starting.join();
    // RabbitMQ may still cancel the new consumer while its boot finishes (then the binding
    // subscribes again): the binding must be running again soon, not at this very instant.
    let deadline = Instant::now() + Duration::from_secs(15);
    while app.state("in") != Some(BindingState::Running) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(app.state("in"), Some(BindingState::Running));
    confirmed.extend(send_all(&out, 80..200).await);
    assert!(
        consumed_all(&mut rx, &confirmed).await,
        "a confirmed message was lost across the broker restart"
    );

    // 3. Every connection closed by the broker: the consumer subscribes again (the sends
    // after the close are consumed), nothing confirmed is lost, and health is up again.
    let mut confirmed = send_all(&out, 200..260).await;
    assert!(consumed_all(&mut rx, &confirmed).await);
    let closed = Instant::now();
    node.ctl(&["close_all_connections", "test: connections closed"]);
    confirmed = send_all(&out, 260..300).await;
    assert!(
        consumed_all(&mut rx, &confirmed).await,
        "a confirmed message was lost across close_all_connections"
    );
    eprintln!(
        "all 40 sends after close_all_connections consumed {} ms after it",
        closed.elapsed().as_millis()
    );
    common::health_until(&health, "up", |s| *s == HealthStatus::Up).await;
    app.shutdown().await;
    binder
        .remove(&plan_consumer(&config.binding("in"), "x").plan)
        .await
        .unwrap();
    binder
        .remove(&plan_producer(&config.binding("out")).plan)
        .await
        .unwrap();
    binder.close().await;
}
