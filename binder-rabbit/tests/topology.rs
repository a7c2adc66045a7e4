//! The topology the rabbit binder declares, read back from the broker itself with
//! `rabbitmqctl`: names, types and arguments are Spring Cloud Stream's for the same YAML.
//! Without a broker the test says so and passes, unless `REQUIRE_RABBIT=1`.

use std::process::Command;

use binder_amqp::AmqpBroker;
use binder_amqp::topology::plan_consumer;
use binder_core::binder::{Binder, BinderErrorKind};
use binder_core::config::ConfigLoader;
use serde_json::Value;

mod common;

fn rabbitmqctl(args: &[&str]) -> Vec<Value> {
    let out = Command::new("rabbitmqctl")
        .args(["-q"])
        .args(args)
        .args(["--formatter", "json"])
        .output()
        .expect("rabbitmqctl is installed with RabbitMQ");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice::<Value>(&out.stdout)
        .expect("JSON")
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[tokio::test]
async fn declared_topology_is_spring_cloud_streams() {
    let Some(binder) = common::binder().await else {
        return;
    };
    let p = common::unique("topo");
    let yaml = format!(
        r#"
spring.cloud.stream:
  bindings:
    inputProductAdd: {{destination: orders, group: billing}}
  rabbit.bindings.inputProductAdd.consumer:
    prefix: "{p}."
    bindingRoutingKey: order.*
    autoBindDlq: true
    ttl: 60000
    maxLength: 1000
"#
    );
    let config = ConfigLoader::new()
        .env(Vec::<(String, String)>::new())
        .yaml_str(&yaml)
        .load()
        .unwrap();
    let plan = plan_consumer(&config.binding("inputProductAdd"), "x").plan;
    binder.provision(&plan).await.unwrap();
    binder
        .provision(&plan)
        .await
        .expect("declaring twice is fine");

    let queue = format!("{p}.orders.billing");
    let dlq = format!("{queue}.dlq");
    let dlx = format!("{p}.DLX");
    let queues = rabbitmqctl(&["list_queues", "name", "durable", "arguments"]);
    let find = |name: &str| {
        queues
            .iter()
            .find(|q| q["name"] == name)
            .unwrap_or_else(|| panic!("queue {name} not declared"))
            .clone()
    };
    let main = find(&queue);
    assert_eq!(main["durable"], true);
    let mut args: Vec<(String, String, String)> = main["arguments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a[0].as_str().unwrap().to_owned(),
                a[1].as_str().unwrap().to_owned(),
                a[2].to_string().trim_matches('"').to_owned(),
            )
        })
        .collect();
    args.sort();
    assert_eq!(
        args,
        vec![
            (
                "x-dead-letter-exchange".into(),
                "longstr".into(),
                dlx.clone()
            ),
            (
                "x-dead-letter-routing-key".into(),
                "longstr".into(),
                queue.clone()
            ),
            ("x-max-length".into(), "signedint".into(), "1000".into()),
            ("x-message-ttl".into(), "signedint".into(), "60000".into()),
        ],
        "the arguments and their AMQP types are those SCSt declares"
    );
    assert_eq!(find(&dlq)["durable"], true);

    let exchanges = rabbitmqctl(&["list_exchanges", "name", "type", "durable"]);
    let exchange = |name: &str| {
        exchanges
            .iter()
            .find(|x| x["name"] == name)
            .unwrap_or_else(|| panic!("exchange {name} not declared"))
            .clone()
    };
    assert_eq!(exchange(&format!("{p}.orders"))["type"], "topic");
    assert_eq!(exchange(&dlx)["type"], "direct");

    let bindings = rabbitmqctl(&[
        "list_bindings",
        "source_name",
        "destination_name",
        "routing_key",
    ]);
    let bound = |source: &str, dest: &str, key: &str| {
        bindings.iter().any(|b| {
            b["source_name"] == source && b["destination_name"] == dest && b["routing_key"] == key
        })
    };
    assert!(bound(&format!("{p}.orders"), &queue, "order.*"));
    assert!(bound(&dlx, &dlq, &queue));

    binder.remove(&plan).await.unwrap();
    binder.close().await;
}

#[tokio::test]
async fn a_refused_redeclaration_names_the_queue_and_the_argument() {
    let Some(binder) = common::binder().await else {
        return;
    };
    let p = common::unique("topo");
    let load = |ttl: u32| {
        ConfigLoader::new()
            .env(Vec::<(String, String)>::new())
            .yaml_str(&format!(
                "spring.cloud.stream:\n  bindings.in: {{destination: '{p}-d', group: g}}\n  rabbit.bindings.in.consumer.ttl: {ttl}\n"
            ))
            .load()
            .unwrap()
    };
    let first = plan_consumer(&load(1000).binding("in"), "x").plan;
    binder.provision(&first).await.unwrap();
    let err = binder
        .provision(&plan_consumer(&load(2000).binding("in"), "x").plan)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains(&format!("queue `{p}-d.g`")), "{err}");
    assert!(err.contains("PRECONDITION_FAILED"), "{err}");
    assert!(err.contains("x-message-ttl"), "{err}");
    binder.remove(&first).await.unwrap();
    binder.close().await;
}

#[tokio::test]
async fn quorum_and_single_active_consumer_queues_are_declared() {
    let Some(binder) = common::binder().await else {
        return;
    };
    let p = common::unique("topo");
    let config = ConfigLoader::new()
        .env(Vec::<(String, String)>::new())
        .yaml_str(&format!(
            r#"
spring.cloud.stream:
  bindings:
    q: {{destination: '{p}-quorum', group: g}}
    s: {{destination: '{p}-sac', group: g}}
  rabbit.bindings:
    q.consumer.quorum: {{enabled: true, deliveryLimit: 5}}
    s.consumer.singleActiveConsumer: true
"#
        ))
        .load()
        .unwrap();
    let quorum = plan_consumer(&config.binding("q"), "x").plan;
    let sac = plan_consumer(&config.binding("s"), "x").plan;
    binder.provision(&quorum).await.unwrap();
    binder.provision(&sac).await.unwrap();
    let queues = rabbitmqctl(&["list_queues", "name", "type", "arguments"]);
    let find = |name: &str| {
        queues
            .iter()
            .find(|q| q["name"] == name)
            .unwrap_or_else(|| panic!("queue {name} not declared"))
            .to_string()
    };
    let q = find(&format!("{p}-quorum.g"));
    assert!(q.contains("\"type\":\"quorum\""), "{q}");
    assert!(q.contains("x-delivery-limit"), "{q}");
    let s = find(&format!("{p}-sac.g"));
    assert!(s.contains("x-single-active-consumer"), "{s}");
    binder.remove(&quorum).await.unwrap();
    binder.remove(&sac).await.unwrap();
    binder.close().await;
}

#[tokio::test]
async fn inspect_tells_a_missing_queue_from_a_refused_one() {
    let Some(binder) = common::binder().await else {
        return;
    };
    let missing = common::unique("inspect-missing");
    assert!(matches!(
        binder.inspect(&missing).await,
        Err(ref e) if e.kind() == BinderErrorKind::NotFound
    ));
    // An exclusive queue of another connection exists, but the broker refuses to show it.
    let conn = lapin::Connection::connect(&common::amqp_url(), Default::default())
        .await
        .unwrap();
    let ch = conn.create_channel().await.unwrap();
    let locked = common::unique("inspect-locked");
    ch.queue_declare(
        locked.as_str().into(),
        lapin::options::QueueDeclareOptions {
            exclusive: true,
            ..Default::default()
        },
        Default::default(),
    )
    .await
    .unwrap();
    match binder.inspect(&locked).await {
        Err(e) if e.kind() == BinderErrorKind::Broker => {
            assert!(e.to_string().contains("RESOURCE_LOCKED"), "{e}")
        }
        other => panic!("an exclusive queue of another connection: {other:?}"),
    }
    conn.close(200, "OK".into()).await.unwrap();
}
