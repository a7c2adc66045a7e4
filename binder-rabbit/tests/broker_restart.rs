//! Against the real broker: a service started while RabbitMQ's app is stopped comes up when it
//! starts, and `rabbitmqctl stop_app` / `start_app` in the middle of a stream loses no confirmed
//! message. The broker is started again at the end whatever happens. Without a broker the test
//! says so and passes, unless `REQUIRE_RABBIT=1`.

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use binder_core::binder::Binder;
use binder_core::config::{ConfigLoader, StreamConfig};
use binder_core::runtime::{App, AppBuilder, HealthStatus, handler};
use binder_core::topology::{plan_consumer, plan_producer};
use binder_rabbit::{RabbitBinder, RabbitSettings};
use tokio::sync::mpsc;

mod common;

fn rabbitmqctl(args: &[&str]) {
    common::rabbitmqctl(args);
}

/// Starts the broker's app again when dropped, even if the test panicked.
struct Restart;

impl Drop for Restart {
    fn drop(&mut self) {
        let _ = Command::new("rabbitmqctl").args(["start_app"]).output();
        let _ = Command::new("rabbitmqctl")
            .args(["await_startup", "--timeout", "60"])
            .output();
    }
}

fn config(dest: &str) -> StreamConfig {
    ConfigLoader::new()
        .env(Vec::<(String, String)>::new())
        .yaml_str(&format!(
            r#"
spring.cloud.stream:
  bindings:
    in: {{destination: {dest}, group: g}}
    out: {{destination: {dest}, producer: {{requiredGroups: [g]}}}}
  rabbit.bindings.in.consumer: {{prefetch: 20, recoveryInterval: 250}}
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_broker_going_away_loses_nothing_and_services_wait_for_it() {
    let Some(probe) = common::binder().await else {
        return;
    };
    probe.close().await;
    let _restart = Restart;
    let dest = common::unique("restart");
    let config = config(&dest);

    // 1. A service started while the broker's app is stopped waits, then comes up.
    rabbitmqctl(&["stop_app"]);
    let binder = Arc::new(RabbitBinder::new(RabbitSettings::from_uri(
        &common::amqp_url(),
    )));
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
    rabbitmqctl(&["start_app"]);
    rabbitmqctl(&["await_startup", "--timeout", "60"]);
    let app = tokio::time::timeout(Duration::from_secs(60), starting)
        .await
        .expect("the service came up once the broker did")
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(health.is_ready(), "health is up once the broker is");
    let out = app.output("out").unwrap();
    out.send(&1_000u32).await.unwrap();
    assert!(consumed_all(&mut rx, &BTreeSet::from([1_000])).await);

    // 2. stop_app / start_app in the middle of a stream of confirmed sends.
    let mut confirmed = BTreeSet::new();
    for id in 0..200u32 {
        if id == 80 {
            rabbitmqctl(&["stop_app"]);
            rabbitmqctl(&["start_app"]);
            rabbitmqctl(&["await_startup", "--timeout", "60"]);
        }
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
    assert!(
        consumed_all(&mut rx, &confirmed).await,
        "a confirmed message was lost across the broker restart"
    );
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
