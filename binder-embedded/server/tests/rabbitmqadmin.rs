//! The management API driven by `rabbitmqadmin`, the command-line tool RabbitMQ ships with
//! its management plugin (nobody here wrote it): declaring an exchange, a queue and a
//! binding, publishing, getting, listing (connections, channels and consumers too), purging,
//! exporting and importing definitions, closing a connection, deleting, and a refusal,
//! against a server on port 0, with the broker's state checked.
//!
//! The tool is found on `PATH`, else in the RabbitMQ server's management plugin
//! (`/usr/lib/rabbitmq/lib/rabbitmq_server-*/plugins/rabbitmq_management-*/priv/www/cli/`)
//! and run with `python3`. Skipped, with the reason printed, when neither is there, unless
//! `REQUIRE_CLIENTS=1` is set: then a missing tool fails the test.

mod common;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;
use stream_broker::{ManagementConfig, Server};
use stream_engine::Broker;

/// The command that runs `rabbitmqadmin`, or why there is none.
fn rabbitmqadmin() -> Result<Vec<String>, String> {
    if Command::new("rabbitmqadmin")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return Ok(vec!["rabbitmqadmin".into()]);
    }
    let lib = PathBuf::from("/usr/lib/rabbitmq/lib");
    let plugin = std::fs::read_dir(&lib)
        .map_err(|e| format!("no rabbitmqadmin on PATH, and {}: {e}", lib.display()))?
        .flatten()
        .filter_map(|server| std::fs::read_dir(server.path().join("plugins")).ok())
        .flatten()
        .flatten()
        .map(|plugin| plugin.path().join("priv/www/cli/rabbitmqadmin"))
        .find(|script| script.is_file())
        .ok_or("no rabbitmqadmin on PATH nor in RabbitMQ's management plugin")?;
    Ok(vec!["python3".into(), plugin.display().to_string()])
}

fn required() -> bool {
    std::env::var("REQUIRE_CLIENTS").is_ok_and(|v| v == "1")
}

/// One `rabbitmqadmin` run against the API at `port`: its exit status, stdout and stderr.
fn admin(tool: &[String], port: u16, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(&tool[0])
        .args(&tool[1..])
        .args([
            "-H",
            "127.0.0.1",
            "-P",
            &port.to_string(),
            "-u",
            "guest",
            "-p",
            "guest",
        ])
        .args(args)
        .output()
        .expect("rabbitmqadmin runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `args` and expects success, with `said` in its output.
fn succeeds(tool: &[String], port: u16, args: &[&str], said: &str) -> String {
    let (ok, out, err) = admin(tool, port, args);
    assert!(
        ok && out.contains(said),
        "rabbitmqadmin {args:?}: {out}{err}"
    );
    out
}

/// Runs a `-f raw_json` listing.
fn listed(tool: &[String], port: u16, args: &[&str]) -> Value {
    let mut all = vec!["-f", "raw_json"];
    all.extend_from_slice(args);
    let out = succeeds(tool, port, &all, "");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmqadmin_declares_publishes_gets_and_deletes() {
    let tool = match rabbitmqadmin() {
        Ok(tool) => tool,
        Err(reason) => {
            assert!(!required(), "REQUIRE_CLIENTS=1 but {reason}");
            eprintln!(
                "skipped: {reason} (it comes with RabbitMQ's management plugin; REQUIRE_CLIENTS=1 makes this fail)"
            );
            return;
        }
    };
    let broker: Broker = Broker::new();
    let mut config = common::config();
    config.management = Some(ManagementConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        allow_remote: false,
        sample_interval_ms: 1000,
    });
    let brokers: HashMap<String, Broker> = [("/".to_owned(), broker.clone())].into();
    let server = Server::bind(config, brokers).await.unwrap();
    let port = server.management_addr().unwrap().port();
    // A client for `list connections`, `list channels`, `list consumers` and `close`.
    let amqp = common::lapin(&server).await;
    let watching = amqp.create_channel().await.unwrap();
    watching
        .queue_declare("adm.watch".into(), Default::default(), Default::default())
        .await
        .unwrap();
    let _consumer = watching
        .basic_consume(
            "adm.watch".into(),
            "adm.watcher".into(),
            Default::default(),
            Default::default(),
        )
        .await
        .unwrap();
    let tool2 = tool.clone();
    let run = move || {
        let tool = tool2;
        let t = &tool;
        succeeds(
            t,
            port,
            &[
                "declare",
                "exchange",
                "name=adm.x",
                "type=topic",
                "durable=true",
            ],
            "exchange declared",
        );
        succeeds(
            t,
            port,
            &[
                "declare",
                "queue",
                "name=adm.q",
                "durable=true",
                "queue_type=classic",
                r#"arguments={"x-max-length": 5}"#,
            ],
            "queue declared",
        );
        succeeds(
            t,
            port,
            &[
                "declare",
                "binding",
                "source=adm.x",
                "destination=adm.q",
                "routing_key=adm.#",
            ],
            "binding declared",
        );
        succeeds(
            t,
            port,
            &[
                "publish",
                "exchange=adm.x",
                "routing_key=adm.new",
                "payload=hello",
            ],
            "Message published",
        );
        let queues = listed(t, port, &["list", "queues"]);
        let q = queues
            .as_array()
            .unwrap()
            .iter()
            .find(|q| q["name"] == "adm.q")
            .expect("adm.q listed");
        assert_eq!(
            (q["durable"].clone(), q["messages"].clone()),
            (Value::Bool(true), Value::from(1))
        );
        assert_eq!(q["arguments"]["x-max-length"], 5);
        let bindings = listed(t, port, &["list", "bindings"]);
        assert!(
            bindings
                .as_array()
                .unwrap()
                .iter()
                .any(|b| b["source"] == "adm.x"
                    && b["destination"] == "adm.q"
                    && b["routing_key"] == "adm.#"),
            "{bindings}"
        );
        let got = listed(
            t,
            port,
            &["get", "queue=adm.q", "ackmode=ack_requeue_false"],
        );
        assert_eq!(got[0]["payload"], "hello", "{got}");
        assert_eq!(got[0]["routing_key"], "adm.new");
        succeeds(
            t,
            port,
            &["publish", "routing_key=adm.q", "payload=direct"],
            "Message published",
        );
        succeeds(t, port, &["purge", "queue", "name=adm.q"], "queue purged");
        succeeds(
            t,
            port,
            &[
                "delete",
                "binding",
                "source=adm.x",
                "destination_type=queue",
                "destination=adm.q",
                "properties_key=adm.#",
            ],
            "binding deleted",
        );
        let users = listed(t, port, &["list", "users"]);
        assert_eq!(users[0]["name"], "guest", "{users}");
        let permissions = listed(t, port, &["list", "permissions"]);
        assert_eq!(permissions[0]["user"], "guest", "{permissions}");
        let (ok, out, err) = admin(
            t,
            port,
            &["declare", "user", "name=bob", "password=pw", "tags="],
        );
        assert!(
            !ok && format!("{out}{err}").contains("configuration file"),
            "{out}{err}"
        );
        // Policies: declared, listed, applied, refused by name, deleted.
        succeeds(
            t,
            port,
            &[
                "declare",
                "policy",
                "name=adm.limit",
                "pattern=^adm\\.q$",
                r#"definition={"max-length": 100}"#,
                "priority=3",
                "apply-to=queues",
            ],
            "policy declared",
        );
        let policies = listed(t, port, &["list", "policies"]);
        assert_eq!(policies[0]["name"], "adm.limit", "{policies}");
        assert_eq!(policies[0]["definition"]["max-length"], 100, "{policies}");
        let queues = listed(t, port, &["list", "queues"]);
        let adm = queues
            .as_array()
            .unwrap()
            .iter()
            .find(|q| q["name"] == "adm.q");
        assert_eq!(adm.unwrap()["policy"], "adm.limit", "{queues}");
        let (ok, out, err) = admin(
            t,
            port,
            &[
                "declare",
                "policy",
                "name=ha",
                "pattern=.",
                r#"definition={"ha-mode": "all"}"#,
            ],
        );
        assert!(
            !ok && format!("{out}{err}").contains("unsupported key 'ha-mode'"),
            "{out}{err}"
        );
        // Operator policies likewise; the queue follows both.
        succeeds(
            t,
            port,
            &[
                "declare",
                "operator_policy",
                "name=adm.cap",
                "pattern=^adm\\.",
                r#"definition={"max-length": 50}"#,
            ],
            "operator_policy declared",
        );
        let operator = listed(t, port, &["list", "operator_policies"]);
        assert_eq!(operator[0]["name"], "adm.cap", "{operator}");
        let queues = listed(t, port, &["list", "queues"]);
        let adm = queues
            .as_array()
            .unwrap()
            .iter()
            .find(|q| q["name"] == "adm.q")
            .unwrap();
        assert_eq!(adm["operator_policy"], "adm.cap", "{queues}");
        assert_eq!(adm["effective_policy_definition"]["max-length"], 50);
        succeeds(
            t,
            port,
            &["delete", "operator_policy", "name=adm.cap"],
            "operator_policy deleted",
        );
        succeeds(
            t,
            port,
            &["delete", "policy", "name=adm.limit"],
            "policy deleted",
        );
        let nodes = listed(t, port, &["list", "nodes"]);
        assert_eq!(nodes.as_array().map(Vec::len), Some(1), "{nodes}");
        assert_eq!(nodes[0]["running"], true);
        let connections = listed(t, port, &["list", "connections"]);
        assert_eq!(connections[0]["channels"], 1, "{connections}");
        let name = connections[0]["name"].as_str().unwrap().to_owned();
        let channels = listed(t, port, &["list", "channels"]);
        assert_eq!(channels[0]["name"], format!("{name} (1)"), "{channels}");
        assert_eq!(channels[0]["consumer_count"], 1);
        let consumers = listed(t, port, &["-V", "/", "list", "consumers"]);
        assert_eq!(consumers[0]["consumer_tag"], "adm.watcher", "{consumers}");
        assert_eq!(consumers[0]["channel_details"]["connection_name"], name);
        succeeds(
            t,
            port,
            &["close", "connection", &format!("name={name}")],
            "connection closed",
        );
        // `export` and `import` carry the definitions through a file.
        let file = std::env::temp_dir().join(format!("rabbitmqadmin-{port}.json"));
        let path = file.display().to_string();
        succeeds(t, port, &["export", &path], "Exported definitions");
        let exported: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        assert!(
            exported["queues"]
                .as_array()
                .unwrap()
                .iter()
                .any(|q| q["name"] == "adm.q"),
            "{exported}"
        );
        succeeds(t, port, &["delete", "queue", "name=adm.q"], "queue deleted");
        succeeds(t, port, &["import", &path], "Uploaded definitions");
        std::fs::remove_file(&file).unwrap();
        let queues = listed(t, port, &["list", "queues"]);
        assert!(
            queues
                .as_array()
                .unwrap()
                .iter()
                .any(|q| q["name"] == "adm.q"),
            "{queues}"
        );
        let (ok, out, err) = admin(
            t,
            port,
            &["declare", "queue", "name=adm.bad", "durable=maybe"],
        );
        assert!(
            !ok && format!("{out}{err}").contains("durable must be true or false"),
            "{out}{err}"
        );
        succeeds(t, port, &["delete", "queue", "name=adm.q"], "queue deleted");
        succeeds(
            t,
            port,
            &["delete", "exchange", "name=adm.x"],
            "exchange deleted",
        );
    };
    tokio::task::spawn_blocking(run)
        .await
        .expect("the rabbitmqadmin steps pass");
    assert_eq!(broker.queue_counts("adm.q"), None);
    assert_eq!(broker.queue_counts("adm.bad"), None);
    assert!(!broker.exchange_exists("adm.x"));
    common::eventually("the connection closed by rabbitmqadmin is closed", || {
        !amqp.status().connected()
    })
    .await;
    server.shutdown().await;
}
