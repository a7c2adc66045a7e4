//! `streamctl`'s operator verbs (`list_*`, `purge_queue`, `dlq …`) as an operator runs them:
//! against the shared RabbitMQ over AMQP (it has no management plugin), against a private
//! RabbitMQ node with the management plugin, and against `stream-broker`.
#[path = "support/cli.rs"]
mod cli;

use cli::streamctl;

#[path = "../../binder-rabbit/tests/common/mod.rs"]
mod common;

use std::process::Output;

use common::{PrivateNode, amqp_url, unique};
use lapin::options::{BasicPublishOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Connection, ConnectionProperties};

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn assert_ok(out: &Output) {
    assert!(
        out.status.success(),
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status,
        text(out),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Whether the shared broker answers (a failure with `REQUIRE_RABBIT=1` if not).
async fn rabbit_up() -> bool {
    common::binder().await.is_some()
}

/// A consumer binding `input` on `destination` with group `g`, dead-lettering by
/// republishing, on the broker at `port`.
fn config(dir: &tempfile::TempDir, destination: &str, port: u16) -> String {
    let path = dir.path().join("application.yaml");
    std::fs::write(
        &path,
        format!(
            "spring.rabbitmq: {{host: 127.0.0.1, port: {port}}}\n\
             spring.cloud.stream:\n  defaultBinder: rabbit\n  \
             bindings.input: {{destination: {destination}, group: g}}\n  \
             rabbit.bindings.input.consumer: {{autoBindDlq: true, republishToDlq: true}}\n"
        ),
    )
    .unwrap();
    path.display().to_string()
}

fn port_of(url: &str) -> u16 {
    let authority = url.rsplit('@').next().unwrap();
    let port = authority.split(':').nth(1).unwrap();
    port.split('/').next().unwrap().parse().unwrap()
}

/// Publishes to the dead-letter exchange `DLX` with the DLQ's routing key, as a failed
/// delivery republished by the framework looks: with the origin headers when given.
async fn dead_letter(url: &str, routing_key: &str, body: &str, origin: Option<(&str, &str)>) {
    let conn = Connection::connect(url, ConnectionProperties::default())
        .await
        .unwrap();
    let ch = conn.create_channel().await.unwrap();
    let mut headers = FieldTable::default();
    headers.insert(
        ShortString::from("x-exception-message"),
        AMQPValue::LongString(format!("failed: {body}").into()),
    );
    if let Some((exchange, key)) = origin {
        headers.insert(
            ShortString::from("x-original-exchange"),
            AMQPValue::LongString(exchange.into()),
        );
        headers.insert(
            ShortString::from("x-original-routingKey"),
            AMQPValue::LongString(key.into()),
        );
    }
    ch.basic_publish(
        ShortString::from("DLX"),
        ShortString::from(routing_key),
        BasicPublishOptions::default(),
        body.as_bytes(),
        BasicProperties::default().with_headers(headers),
    )
    .await
    .unwrap();
    // A round trip after the publish: it has reached its queue.
    ch.queue_declare(
        ShortString::from(format!("{routing_key}.dlq")),
        QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap();
    conn.close(200, ShortString::from("OK")).await.unwrap();
}

/// Ready messages in `queue`.
async fn depth(url: &str, queue: &str) -> u32 {
    let conn = Connection::connect(url, ConnectionProperties::default())
        .await
        .unwrap();
    let ch = conn.create_channel().await.unwrap();
    let q = ch
        .queue_declare(
            ShortString::from(queue),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    conn.close(200, ShortString::from("OK")).await.unwrap();
    q.message_count()
}

async fn delete_queues(url: &str, queues: &[&str]) {
    let conn = Connection::connect(url, ConnectionProperties::default())
        .await
        .unwrap();
    let ch = conn.create_channel().await.unwrap();
    for q in queues {
        let _ = ch
            .queue_delete(ShortString::from(*q), QueueDeleteOptions::default())
            .await;
    }
    let _ = conn.close(200, ShortString::from("OK")).await;
}

/// The whole dead-letter round on the broker at `url`: list leaves the messages, replay
/// sends back those it can and keeps the others with the reason, purge empties.
async fn dead_letter_round(url: &str) {
    let destination = unique("sc-dlq");
    let dir = tempfile::tempdir().unwrap();
    let config = config(&dir, &destination, port_of(url));
    let queue = format!("{destination}.g");
    let dlq = format!("{queue}.dlq");
    assert_ok(&streamctl(&["provision", "--config", &config]));

    dead_letter(url, &queue, "one", Some((&destination, "k"))).await;
    dead_letter(url, &queue, "lost", None).await;
    dead_letter(url, &queue, "two", Some((&destination, "k"))).await;
    dead_letter(url, &queue, "nowhere", Some(("amq.direct", "no-such-key"))).await;

    // list: every message, its reason and origin; all still there afterwards.
    let out = streamctl(&[
        "dlq",
        "list",
        "--binding",
        "input",
        "--config",
        &config,
        "--format",
        "json",
    ]);
    assert_ok(&out);
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let listed = listed.as_array().unwrap();
    let payloads: Vec<&str> = listed
        .iter()
        .map(|m| m["payload"].as_str().unwrap())
        .collect();
    assert_eq!(payloads, ["one", "lost", "two", "nowhere"]);
    assert_eq!(listed[0]["headers"]["x-exception-message"], "failed: one");
    assert_eq!(
        listed[0]["origin"],
        serde_json::json!({"exchange": destination, "routing_key": "k"})
    );
    assert!(listed[1]["origin"].is_null());
    assert_eq!(listed[0]["routing_key"], queue);
    assert_eq!(depth(url, &dlq).await, 4);

    let out = streamctl(&["dlq", "list", "--binding", "input", "--config", &config]);
    assert_ok(&out);
    let shown = text(&out);
    assert!(
        shown.contains(&format!("Dead-letter queue {dlq}: 4 shown")),
        "{shown}"
    );
    assert!(
        shown.contains("x-exception-message: failed: lost"),
        "{shown}"
    );
    assert!(shown.contains("origin unknown"), "{shown}");

    // replay: two go home, two stay (in their order) with the reason; exit status 1.
    let out = streamctl(&["dlq", "replay", "--binding", "input", "--config", &config]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let said = text(&out);
    assert!(
        said.contains(&format!("replayed 2 messages from {dlq}")),
        "{said}"
    );
    assert!(
        said.contains("no x-original-exchange or x-death header"),
        "{said}"
    );
    assert!(
        said.contains("exchange `amq.direct` routes key `no-such-key` to no queue"),
        "{said}"
    );
    assert_eq!(depth(url, &queue).await, 2);
    assert_eq!(depth(url, &dlq).await, 2);
    let out = streamctl(&[
        "dlq", "list", "--queue", &dlq, "--config", &config, "--format", "json",
    ]);
    assert_ok(&out);
    let left: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let left: Vec<&str> = left
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["payload"].as_str().unwrap())
        .collect();
    assert_eq!(left, ["lost", "nowhere"]);

    // purge: the DLQ, then the queue by name.
    let out = streamctl(&["dlq", "purge", "--binding", "input", "--config", &config]);
    assert_ok(&out);
    assert!(text(&out).contains(&format!("purged 2 messages from {dlq}")));
    assert_eq!(depth(url, &dlq).await, 0);
    let out = streamctl(&["purge_queue", "--config", &config, &queue]);
    assert_ok(&out);
    assert!(text(&out).contains(&format!("Purging queue '{queue}' in vhost '/' ...")));
    assert!(text(&out).contains("purged 2 messages"));
    assert_eq!(depth(url, &queue).await, 0);

    delete_queues(url, &[&queue, &dlq]).await;
}

#[tokio::test]
async fn dlq_verbs_on_rabbitmq_over_amqp() {
    if !rabbit_up().await {
        return;
    }
    dead_letter_round(&amqp_url()).await;
}

// The server runs on the worker threads while the test waits for streamctl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlq_verbs_on_stream_broker() {
    let server = stream_broker::Server::standalone(stream_broker::ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..Default::default()
    })
    .await
    .unwrap();
    let url = format!("amqp://guest:guest@{}/%2f", server.local_addr());
    dead_letter_round(&url).await;
    server.shutdown().await;
}

#[tokio::test]
async fn without_a_management_api_lists_what_the_configuration_declares() {
    if !rabbit_up().await {
        return;
    }
    let destination = unique("sc-list");
    let dir = tempfile::tempdir().unwrap();
    let url = amqp_url();
    let config = config(&dir, &destination, port_of(&url));
    let queue = format!("{destination}.g");
    let dlq = format!("{queue}.dlq");
    assert_ok(&streamctl(&["provision", "--config", &config]));
    dead_letter(&url, &queue, "x", None).await;

    let out = streamctl(&["list_queues", "--config", &config, "--no-management"]);
    assert_ok(&out);
    assert_eq!(
        text(&out),
        format!(
            "Listing queues for vhost / (over AMQP) ...\nname\tmessages\n{queue}\t0\n{dlq}\t1\n"
        )
    );
    let out = streamctl(&[
        "list_queues",
        "--config",
        &config,
        "-q",
        "--no-management",
        "name",
        "consumers",
        "messages_ready",
    ]);
    assert_ok(&out);
    assert_eq!(
        text(&out),
        format!("name\tconsumers\tmessages_ready\n{queue}\t0\t0\n{dlq}\t0\t1\n")
    );
    let out = streamctl(&[
        "list_exchanges",
        "-q",
        "--config",
        &config,
        "--no-management",
    ]);
    assert_ok(&out);
    assert_eq!(
        text(&out),
        format!("name\ttype\n{destination}\ttopic\nDLX\tdirect\n")
    );

    // What AMQP cannot tell is refused, naming what would.
    let out = streamctl(&[
        "list_queues",
        "--config",
        &config,
        "--no-management",
        "memory",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("column `memory` needs a management API")
    );
    let out = streamctl(&["list_bindings", "--config", &config, "--no-management"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("listing bindings needs a management API")
    );
    let out = streamctl(&["list_queues", "--no-management"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("AMQP 0-9-1 cannot list"));
    // A column rabbitmqctl does not have is a usage error.
    let out = streamctl(&["list_queues", "--config", &config, "sizes"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unknown column `sizes` for list_queues")
    );
    // A binding without a dead-letter queue, or none of that name.
    let out = streamctl(&["dlq", "list", "--binding", "nope", "--config", &config]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no binding `nope` in the configuration")
    );

    delete_queues(&url, &[&queue, &dlq]).await;
}

#[tokio::test]
async fn with_rabbitmq_s_management_api_lists_everything() {
    let Some(node) = PrivateNode::start_management("sc-mgmt") else {
        return;
    };
    let url = node.url();
    let dir = tempfile::tempdir().unwrap();
    let config = config(&dir, "orders", node.port());
    assert_ok(&streamctl(&["provision", "--config", &config]));
    dead_letter(&url, "orders.g", "x", None).await;
    let management = node.management_url();
    // The plugin may still be starting its listener once the node has booted, and it
    // counts a new queue's messages at its next statistics round (every 5 s).
    let expected = "name\tmessages\tdurable\targuments\n\
         orders.g\t0\ttrue\t[{\"x-dead-letter-exchange\",\"DLX\"},{\"x-dead-letter-routing-key\",\"orders.g\"}]\n\
         orders.g.dlq\t1\ttrue\t[]\n";
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let out = loop {
        let out = streamctl(&[
            "list_queues",
            "-q",
            "--config",
            &config,
            "--management",
            &management,
            "name",
            "messages",
            "durable",
            "arguments",
        ]);
        if text(&out) == expected || std::time::Instant::now() > deadline {
            break out;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    assert_ok(&out);
    assert_eq!(text(&out), expected);

    let out = streamctl(&[
        "list_exchanges",
        "-q",
        "--config",
        &config,
        "--management",
        &management,
    ]);
    assert_ok(&out);
    let listed = text(&out);
    for row in [
        "\tdirect\n",
        "DLX\tdirect\n",
        "orders\ttopic\n",
        "amq.topic\ttopic\n",
    ] {
        assert!(listed.contains(row), "{row:?} in {listed}");
    }

    let out = streamctl(&[
        "list_bindings",
        "-q",
        "--config",
        &config,
        "--management",
        &management,
    ]);
    assert_ok(&out);
    let listed = text(&out);
    assert!(listed.starts_with(
        "source_name\tsource_kind\tdestination_name\tdestination_kind\trouting_key\targuments\n"
    ));
    for row in [
        "orders\texchange\torders.g\tqueue\t#\t[]\n",
        "DLX\texchange\torders.g.dlq\tqueue\torders.g\t[]\n",
        "\texchange\torders.g\tqueue\torders.g\t[]\n",
    ] {
        assert!(listed.contains(row), "{row:?} in {listed}");
    }

    // A client's connection, channel and consumer, listed and then closed through the plugin.
    let client = Connection::connect(&url, ConnectionProperties::default())
        .await
        .unwrap();
    let mut events = client.events_listener();
    let channel = client.create_channel().await.unwrap();
    let _consumer = channel
        .basic_consume(
            "orders.g".into(),
            "watcher".into(),
            Default::default(),
            Default::default(),
        )
        .await
        .unwrap();
    let listed = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["-q", "--config", &config, "--management", &management]);
        streamctl(&all)
    };
    // The plugin lists a channel's consumers at its next statistics round.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let consumers = loop {
        let out = listed(&[
            "list_consumers",
            "queue_name",
            "channel_name",
            "consumer_tag",
        ]);
        assert_ok(&out);
        if text(&out).contains("\twatcher\n") || std::time::Instant::now() > deadline {
            break text(&out);
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    let out = listed(&["list_connections", "name", "user", "protocol"]);
    assert_ok(&out);
    let connections = text(&out);
    assert_eq!(
        connections.lines().count(),
        2,
        "the client's alone: {connections}"
    );
    let name = connections
        .lines()
        .nth(1)
        .and_then(|row| row.strip_suffix("\tguest\tAMQP 0-9-1"))
        .unwrap_or_else(|| panic!("one connection of guest in {connections}"))
        .to_owned();
    assert!(
        consumers.contains(&format!("orders.g\t{name} (1)\twatcher\n")),
        "{consumers}"
    );
    let out = listed(&["list_channels", "name", "connection", "number"]);
    assert_ok(&out);
    assert!(
        text(&out).contains(&format!("{name} (1)\t{name}\t1\n")),
        "{}",
        text(&out)
    );
    assert_ok(&listed(&["close_connection", &name, "moving you"]));
    let heard = loop {
        use futures::StreamExt;
        match tokio::time::timeout(std::time::Duration::from_secs(10), events.next()).await {
            Ok(Some(lapin::Event::Error(e))) => break e.to_string(),
            Ok(Some(_)) => continue,
            other => panic!("the client heard no close: {other:?}"),
        }
    };
    assert!(heard.contains("CONNECTION_FORCED - moving you"), "{heard}");

    // Without --management, port 15672 on the AMQP host is tried; the node's is elsewhere.
    let out = streamctl(&["list_queues", "--config", &config]);
    assert_ok(&out);
    assert!(text(&out).contains("(over AMQP)"), "{}", text(&out));

    // Wrong credentials: the API's refusal, with its status.
    let bad = management.replace("http://", "http://guest:wrong@");
    let out = streamctl(&["list_queues", "--config", &config, "--management", &bad]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("HTTP 401"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    policy_round(&config, &management);
    drop(node);
}

/// `set_policy`, `list_policies` and `clear_policy` on the broker `config` names, through
/// the management API at `management`; the queue `orders.g.dlq` follows the policy set (a
/// management plugin shows it at its next statistics round: waited for up to 30 s). Then the
/// same for operator policies, whose `max-length` of 0 empties that queue.
fn policy_round(config: &str, management: &str) {
    let with = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--config", config, "--management", management]);
        streamctl(&all)
    };
    let out = with(&[
        "set_policy",
        "--apply-to",
        "queues",
        "--priority",
        "2",
        "cap",
        "^orders\\.g\\.dlq$",
        "{\"max-length\": 1000}",
    ]);
    assert_ok(&out);
    assert_eq!(
        text(&out),
        "Setting policy \"cap\" for pattern \"^orders\\.g\\.dlq$\" to \"{\"max-length\": 1000}\" with priority \"2\" for vhost \"/\" ...\n"
    );
    let out = with(&["list_policies", "-q"]);
    assert_ok(&out);
    assert_eq!(
        text(&out),
        "vhost\tname\tpattern\tapply-to\tdefinition\tpriority\n/\tcap\t^orders\\.g\\.dlq$\tqueues\t{\"max-length\":1000}\t2\n"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let out = with(&["list_queues", "-q", "name", "policy"]);
        assert_ok(&out);
        let listed = text(&out);
        if listed.contains("orders.g.dlq\tcap\n") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{listed}");
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    let out = with(&["set_policy", "bad", ".", "{max-length: 1}"]);
    assert_eq!(out.status.code(), Some(2), "a command-line error");
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        said.contains("the definition must be a JSON object"),
        "{said}"
    );
    // A pattern starting with '-' is a pattern, not an option.
    assert_ok(&with(&[
        "set_policy",
        "dash",
        "-dlq$",
        "{\"max-length\": 5}",
    ]));
    assert_ok(&with(&["clear_policy", "dash"]));
    let out = with(&["clear_policy", "cap"]);
    assert_ok(&out);
    assert_eq!(text(&out), "Clearing policy \"cap\" on vhost \"/\" ...\n");
    let out = with(&["clear_policy", "cap"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "no policy of that name any more"
    );
    assert_eq!(text(&with(&["list_policies", "-q"])), "");

    // Operator policies: the same verbs with rabbitmqctl's words; their limit applies.
    let out = with(&[
        "set_operator_policy",
        "--apply-to",
        "queues",
        "--priority",
        "3",
        "cap",
        "^orders\\.g\\.dlq$",
        "{\"max-length\": 0}",
    ]);
    assert_ok(&out);
    assert_eq!(
        text(&out),
        "Setting operator policy override \"cap\" for pattern \"^orders\\.g\\.dlq$\" to \"{\"max-length\": 0}\" with priority \"3\" for vhost \"/\" ...\n"
    );
    let out = with(&["list_operator_policies", "-q"]);
    assert_ok(&out);
    assert_eq!(
        text(&out),
        "vhost\tname\tpattern\tapply-to\tdefinition\tpriority\n/\tcap\t^orders\\.g\\.dlq$\tqueues\t{\"max-length\":0}\t3\n"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let out = with(&["list_queues", "-q", "name", "messages"]);
        assert_ok(&out);
        let listed = text(&out);
        if listed.contains("orders.g.dlq\t0\n") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{listed}");
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    let out = with(&[
        "set_operator_policy",
        "bad",
        ".",
        "{\"dead-letter-exchange\": \"x\"}",
    ]);
    assert_eq!(out.status.code(), Some(1), "refused by the broker");
    let out = with(&["clear_operator_policy", "cap"]);
    assert_ok(&out);
    assert_eq!(
        text(&out),
        "Clearing operator policy \"cap\" on vhost \"/\" ...\n"
    );
    let out = with(&["clear_operator_policy", "cap"]);
    assert_eq!(out.status.code(), Some(1), "none of that name any more");
    assert_eq!(text(&with(&["list_operator_policies", "-q"])), "");
}

/// A stream-broker on port 0 with its management API on port 0.
async fn stream_broker_with_management() -> stream_broker::Server {
    stream_broker::Server::standalone(stream_broker::ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        management: Some(stream_broker::ManagementConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            allow_remote: false,
            sample_interval_ms: 5000,
        }),
        ..Default::default()
    })
    .await
    .unwrap()
}

// The server runs on the worker threads while the test waits for streamctl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_stream_broker_s_management_api_lists_everything() {
    let server = stream_broker_with_management().await;
    let url = format!("amqp://guest:guest@{}/%2f", server.local_addr());
    let management = format!("http://{}", server.management_addr().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let config = config(&dir, "orders", server.local_addr().port());
    assert_ok(&streamctl(&["provision", "--config", &config]));
    dead_letter(&url, "orders.g", "x", None).await;

    let out = streamctl(&[
        "list_queues",
        "-q",
        "--config",
        &config,
        "--management",
        &management,
        "name",
        "messages",
        "consumers",
        "durable",
    ]);
    assert_ok(&out);
    assert_eq!(
        text(&out),
        "name\tmessages\tconsumers\tdurable\norders.g\t0\t0\ttrue\norders.g.dlq\t1\t0\ttrue\n"
    );
    let out = streamctl(&[
        "list_exchanges",
        "-q",
        "--config",
        &config,
        "--management",
        &management,
    ]);
    assert_ok(&out);
    let listed = text(&out);
    for row in ["DLX\tdirect\n", "orders\ttopic\n"] {
        assert!(listed.contains(row), "{row:?} in {listed}");
    }
    let out = streamctl(&[
        "list_bindings",
        "-q",
        "--config",
        &config,
        "--management",
        &management,
    ]);
    assert_ok(&out);
    let listed = text(&out);
    for row in [
        "orders\texchange\torders.g\tqueue\t#\t[]\n",
        "DLX\texchange\torders.g.dlq\tqueue\torders.g\t[]\n",
    ] {
        assert!(listed.contains(row), "{row:?} in {listed}");
    }
    policy_round(&config, &management);
    server.shutdown().await;
}

/// `export_definitions` and `import_definitions`, as rabbitmqctl names them: one
/// stream-broker's topology, written to a file through its management API, declared on
/// another; both verbs refuse without a management API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn definitions_move_from_one_stream_broker_to_another() {
    let server = stream_broker_with_management;
    let (from, to) = (server().await, server().await);
    let dir = tempfile::tempdir().unwrap();
    let config = config(&dir, "orders", from.local_addr().port());
    assert_ok(&streamctl(&["provision", "--config", &config]));
    let file = dir.path().join("definitions.json");
    let file = file.to_str().unwrap();
    let url = |s: &stream_broker::Server| format!("amqp://guest:guest@{}/%2f", s.local_addr());
    let management = |s: &stream_broker::Server| format!("http://{}", s.management_addr().unwrap());
    // `streamctl ARGS --url … --management …` against one of the servers.
    let on = |s: &stream_broker::Server, args: &[&str]| {
        let (url, management) = (url(s), management(s));
        let mut all = args.to_vec();
        all.extend(["--url", &url, "--management", &management]);
        streamctl(&all)
    };

    let out = on(&from, &["export_definitions", file]);
    assert_ok(&out);
    assert!(
        text(&out).starts_with("Exported definitions of http://"),
        "{}",
        text(&out)
    );
    let exported: serde_json::Value =
        serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
    let queues: Vec<&str> = exported["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["name"].as_str().unwrap())
        .collect();
    assert_eq!(queues, ["orders.g", "orders.g.dlq"], "{exported}");

    let out = on(&to, &["import_definitions", "-q", file]);
    assert_ok(&out);
    assert_eq!(text(&out), "");
    let out = on(&to, &["list_bindings", "-q"]);
    assert_ok(&out);
    assert!(
        text(&out).contains("orders\texchange\torders.g\tqueue\t#\t[]\n"),
        "{}",
        text(&out)
    );

    // Through `-`: standard output holds the definitions alone, standard input takes them.
    let out = on(&from, &["export_definitions", "-"]);
    assert_ok(&out);
    let piped: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(piped["queues"], exported["queues"]);
    let third = server().await;
    let mut import = std::process::Command::new(env!("CARGO_BIN_EXE_streamctl"))
        .args([
            "import_definitions",
            "--url",
            &url(&third),
            "--management",
            &management(&third),
            "-",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = import.stdin.take().unwrap();
        stdin.write_all(&out.stdout).unwrap();
    }
    let imported = import.wait_with_output().unwrap();
    assert_ok(&imported);
    let out = on(&third, &["list_queues", "-q"]);
    assert_ok(&out);
    assert!(text(&out).contains("orders.g.dlq\t"), "{}", text(&out));
    third.shutdown().await;

    for verb in ["export_definitions", "import_definitions"] {
        let out = streamctl(&[verb, "--url", &url(&to), "--no-management", file]);
        assert_eq!(out.status.code(), Some(1), "{verb}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("needs a management API"),
            "{verb}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    from.shutdown().await;
    to.shutdown().await;
}

/// `list_connections`, `list_channels`, `list_consumers` and `close_connection`, as
/// rabbitmqctl names them, through stream-broker's management API (RabbitMQ's plugin: in
/// `with_rabbitmq_s_management_api_lists_everything`): a client's connection,
/// its channel and consumer listed with rabbitmqctl's columns, then closed with the
/// explanation the client is told; the verbs refuse without a management API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_listed_and_closed() {
    use futures::StreamExt;

    let server = stream_broker_with_management().await;
    let url = format!("amqp://guest:guest@{}/%2f", server.local_addr());
    let management = format!("http://{}", server.management_addr().unwrap());
    let on = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["-q", "--url", &url, "--management", &management]);
        streamctl(&all)
    };
    let client = lapin::Connection::connect(&url, Default::default())
        .await
        .unwrap();
    let mut events = client.events_listener();
    let channel = client.create_channel().await.unwrap();
    channel
        .queue_declare("watched".into(), Default::default(), Default::default())
        .await
        .unwrap();
    let _consumer = channel
        .basic_consume(
            "watched".into(),
            "watcher".into(),
            Default::default(),
            Default::default(),
        )
        .await
        .unwrap();

    let out = on(&["list_connections", "name", "user", "channels", "protocol"]);
    assert_ok(&out);
    let listed = text(&out);
    let mut lines = listed.lines();
    assert_eq!(lines.next(), Some("name\tuser\tchannels\tprotocol"));
    let row: Vec<&str> = lines.next().expect("one connection").split('\t').collect();
    assert_eq!(row[1..], ["guest", "1", "AMQP 0-9-1"], "{listed}");
    let name = row[0].to_owned();
    assert!(
        name.ends_with(&format!(" -> {}", server.local_addr())),
        "{name}"
    );
    let out = on(&["list_connections", "recv_oct", "send_oct"]);
    assert_ok(&out);
    let octets: Vec<u64> = text(&out)
        .lines()
        .nth(1)
        .unwrap()
        .split('\t')
        .map(|n| n.parse().unwrap())
        .collect();
    assert!(octets.iter().all(|n| *n > 0), "{octets:?}");
    let out = on(&["list_connections"]);
    assert_ok(&out);
    assert!(text(&out).starts_with("user\tpeer_host\tpeer_port\tstate\nguest\t127.0.0.1\t"));

    let out = on(&[
        "list_channels",
        "name",
        "connection",
        "number",
        "consumer_count",
    ]);
    assert_ok(&out);
    assert_eq!(
        text(&out),
        format!("name\tconnection\tnumber\tconsumer_count\n{name} (1)\t{name}\t1\t1\n")
    );
    let out = on(&[
        "list_consumers",
        "queue_name",
        "channel_name",
        "consumer_tag",
    ]);
    assert_ok(&out);
    assert_eq!(
        text(&out),
        format!("queue_name\tchannel_name\tconsumer_tag\nwatched\t{name} (1)\twatcher\n")
    );
    let out = on(&["list_channels", "pid"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    // `-p` narrows connections and channels to one virtual host (all without it).
    let out = on(&["list_connections", "-p", "/", "user"]);
    assert_ok(&out);
    assert_eq!(text(&out), "user\nguest\n");
    let out = on(&["list_channels", "-p", "elsewhere"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("404"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = on(&["close_connection", &name, "moving you"]);
    assert_ok(&out);
    let heard = loop {
        match tokio::time::timeout(std::time::Duration::from_secs(5), events.next()).await {
            Ok(Some(lapin::Event::Error(e))) => break e.to_string(),
            Ok(Some(_)) => continue,
            other => panic!("the client heard no close: {other:?}"),
        }
    };
    assert!(heard.contains("CONNECTION_FORCED - moving you"), "{heard}");
    let out = on(&["close_connection", &name, "again"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("404"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    for args in [
        vec!["list_connections"],
        vec!["list_channels"],
        vec!["list_consumers"],
        vec!["close_connection", &name, "why"],
    ] {
        let mut all = args.clone();
        all.extend(["--url", &url, "--no-management"]);
        let out = streamctl(&all);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("needs a management API"),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    server.shutdown().await;
}
