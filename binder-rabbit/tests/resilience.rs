//! Against a RabbitMQ node of the test's own (closing every connection of the shared broker
//! would cut everyone else's): `rabbitmqctl close_all_connections` in the middle of a stream of
//! confirmed publishes and consumes loses no confirmed message. Without a local RabbitMQ
//! installation the test says so and passes, unless `REQUIRE_RABBIT=1`.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use binder_amqp::AmqpBroker;
use binder_amqp::topology::{plan_consumer, plan_producer};
use binder_core::binder::Binder;
use binder_core::config::ConfigLoader;
use binder_core::runtime::{App, handler};
use tokio::sync::mpsc;

mod common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_every_connection_loses_no_confirmed_message() {
    let Some(node) = common::PrivateNode::start("resilience") else {
        return;
    };
    let node = Arc::new(node);
    let binder = Arc::new(node.binder());
    let dest = common::unique("resilience");
    let yaml = format!(
        r#"
spring.cloud.stream:
  bindings:
    in: {{destination: {dest}, group: g}}
    out: {{destination: {dest}, producer: {{requiredGroups: [g]}}}}
  rabbit.bindings.in.consumer: {{prefetch: 20, recoveryInterval: 200}}
"#
    );
    let config = ConfigLoader::new()
        .env(Vec::<(String, String)>::new())
        .yaml_str(&yaml)
        .load()
        .unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel::<u32>();
    let app = App::builder(config.clone())
        .binder("rabbit", binder.clone())
        .binder("embedded", binder.clone())
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
        .start()
        .await
        .unwrap();
    let out = app.output("out").unwrap();

    // Publish 300 messages; a send that fails is retried, and only confirmed ids count.
    let ctl = node.clone();
    let sender = tokio::spawn(async move {
        let mut confirmed = BTreeSet::new();
        let mut failures = 0;
        for id in 0..300u32 {
            loop {
                match out.send(&id).await {
                    Ok(()) => {
                        confirmed.insert(id);
                        break;
                    }
                    Err(_) => {
                        failures += 1;
                        assert!(failures < 1000, "the producer never recovered");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
            if id == 100 {
                let before = ctl.ctl(&["list_connections", "name"]);
                let said = ctl.ctl(&["close_all_connections", "resilience test"]);
                assert!(
                    said.contains("Closed") && !said.contains("Closed 0"),
                    "no connection was closed: {said}"
                );
                // The broker closes connections asynchronously: the next sends go out once
                // it lists none of those it was asked to close, so they meet the closing.
                let closed: Vec<&str> = before.lines().filter(|l| l.contains(" -> ")).collect();
                ctl.ctl_until(&["list_connections", "name"], |now| {
                    !now.lines().any(|l| closed.contains(&l))
                })
                .await;
            }
        }
        (confirmed, failures)
    });
    let (confirmed, failures) = sender.await.unwrap();
    eprintln!(
        "sends that failed and were retried: {failures} (the binder usually notices the closed connection first and reconnects)"
    );
    assert_eq!(confirmed.len(), 300);
    let mut seen = BTreeSet::new();
    let all = tokio::time::timeout(Duration::from_secs(60), async {
        while !confirmed.is_subset(&seen) {
            match rx.recv().await {
                Some(id) => {
                    seen.insert(id);
                }
                None => break,
            }
        }
    })
    .await;
    let missing: Vec<_> = confirmed.difference(&seen).take(10).collect();
    assert!(
        all.is_ok() && missing.is_empty(),
        "confirmed but never consumed: {missing:?}…"
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
