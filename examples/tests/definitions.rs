//! Definitions moved between `stream-broker` and RabbitMQ through their management APIs, as
//! an operator moves a topology to a RabbitMQ cluster (and back): stream-broker's export is
//! imported by a private RabbitMQ node with the management plugin, whose own export then
//! lists the same queues, exchanges and bindings, and whose users can log in with the
//! exported password hashes; RabbitMQ's exports of a virtual host and of the whole node are
//! imported by stream-broker. Skipped, said loudly, when no private RabbitMQ node starts, unless
//! `REQUIRE_RABBIT=1`.

#[path = "../../binder-rabbit/tests/common/mod.rs"]
mod common;

use std::time::Duration;

use base64::Engine as _;
use common::PrivateNode;
use serde_json::{Value, json};

/// One request as `guest`: the status and the body (JSON, or `Null` when empty).
fn call(method: &str, url: &str, body: Option<&Value>) -> (u16, Value) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(30)))
        .http_status_as_error(false)
        .build()
        .into();
    let token = base64::engine::general_purpose::STANDARD.encode("guest:guest");
    let auth = format!("Basic {token}");
    let response = match (method, body) {
        ("GET", _) => agent.get(url).header("Authorization", &auth).call(),
        ("PUT", body) => agent
            .put(url)
            .header("Authorization", &auth)
            .header("Content-Type", "application/json")
            .send(body.unwrap_or(&json!({})).to_string()),
        ("POST", body) => agent
            .post(url)
            .header("Authorization", &auth)
            .header("Content-Type", "application/json")
            .send(body.unwrap_or(&json!({})).to_string()),
        _ => unreachable!("the test's own methods"),
    };
    let mut response = response.unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap();
    let value = if text.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{method} {url}: {e}: {text}"))
    };
    (status, value)
}

/// A definitions section's entries, sorted, for comparing two brokers' exports.
fn sorted(defs: &Value, section: &str) -> Vec<String> {
    let mut items: Vec<String> = defs[section]
        .as_array()
        .unwrap_or_else(|| panic!("{section} in {defs}"))
        .iter()
        .map(Value::to_string)
        .collect();
    items.sort();
    items
}

/// Retries `GET url` until it answers 200 (the plugin may still be starting its listener once
/// the node has booted).
fn when_up(url: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(2)))
            .http_status_as_error(false)
            .build()
            .into();
        let token = base64::engine::general_purpose::STANDARD.encode("guest:guest");
        let up = agent
            .get(url)
            .header("Authorization", format!("Basic {token}"))
            .call()
            .is_ok_and(|r| r.status() == 200);
        if up {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{url} did not answer within 30 s"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

// The server runs on the worker threads while the test blocks on HTTP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn definitions_move_between_stream_broker_and_rabbitmq() {
    let Some(node) = PrivateNode::start_management("defs") else {
        return;
    };
    let rabbit = node.management_url();
    let server = stream_broker::Server::standalone(stream_broker::ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        management: Some(stream_broker::ManagementConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            allow_remote: false,
            sample_interval_ms: 5000,
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    let ours = format!("http://{}", server.management_addr().unwrap());

    let steps = tokio::task::spawn_blocking(move || {
        // A topology declared over stream-broker's API: a dead-lettering queue with a length
        // limit, its dead-letter exchange and queue, a topic exchange bound to both an
        // exchange and a queue, a transient queue.
        for (method, path, body) in [
            (
                "PUT",
                "/api/exchanges/%2F/defs.x",
                json!({"type": "topic", "durable": true}),
            ),
            (
                "PUT",
                "/api/exchanges/%2F/defs.dlx",
                json!({"type": "fanout", "durable": true}),
            ),
            (
                "PUT",
                "/api/queues/%2F/defs.q",
                json!({"durable": true, "arguments": {"x-max-length": 10, "x-dead-letter-exchange": "defs.dlx"}}),
            ),
            ("PUT", "/api/queues/%2F/defs.dlq", json!({"durable": true})),
            (
                "PUT",
                "/api/queues/%2F/defs.transient",
                json!({"durable": false}),
            ),
            (
                "POST",
                "/api/bindings/%2F/e/defs.x/q/defs.q",
                json!({"routing_key": "a.#"}),
            ),
            ("POST", "/api/bindings/%2F/e/defs.dlx/q/defs.dlq", json!({})),
            (
                "POST",
                "/api/bindings/%2F/e/defs.x/e/defs.dlx",
                json!({"routing_key": "b.*"}),
            ),
            (
                "PUT",
                "/api/policies/%2F/defs.limit",
                json!({"pattern": "^defs\\.q$", "definition": {"max-length": 5, "dead-letter-exchange": "defs.dlx"}, "priority": 1, "apply-to": "queues"}),
            ),
        ] {
            let (status, body) = call(method, &format!("{ours}{path}"), Some(&body));
            assert!(
                status == 201 || status == 204,
                "{method} {path}: {status} {body}"
            );
        }

        // stream-broker → RabbitMQ, the whole server's definitions: the same topology.
        when_up(&format!("{rabbit}/api/overview"));
        let (status, exported) = call("GET", &format!("{ours}/api/definitions"), None);
        assert_eq!(status, 200);
        let (status, body) = call(
            "POST",
            &format!("{rabbit}/api/definitions"),
            Some(&exported),
        );
        assert!(
            status < 300,
            "RabbitMQ refused stream-broker's definitions: {status} {body}"
        );
        let (_, theirs) = call("GET", &format!("{rabbit}/api/definitions"), None);
        for section in [
            "queues",
            "exchanges",
            "bindings",
            "vhosts",
            "permissions",
            "policies",
        ] {
            assert_eq!(
                sorted(&theirs, section),
                sorted(&exported, section),
                "{section}"
            );
        }
        // RabbitMQ took the exported hash of guest's password: guest still logs in, with
        // the tags stream-broker gave it.
        let (status, me) = call("GET", &format!("{rabbit}/api/whoami"), None);
        assert_eq!(status, 200, "{me}");
        assert_eq!(me["tags"], json!(["administrator"]));

        // RabbitMQ → stream-broker, one virtual host's definitions, with a queue only
        // RabbitMQ had.
        let (status, body) = call(
            "PUT",
            &format!("{rabbit}/api/queues/%2F/from.rabbit"),
            Some(&json!({"durable": true, "arguments": {"x-message-ttl": 60000}})),
        );
        assert!(status < 300, "{status} {body}");
        let (status, body) = call(
            "PUT",
            &format!("{rabbit}/api/policies/%2F/from.rabbit.ttl"),
            Some(
                &json!({"pattern": "^from\\.", "definition": {"message-ttl": 30000}, "apply-to": "queues"}),
            ),
        );
        assert!(status < 300, "{status} {body}");
        let (_, vhost) = call("GET", &format!("{rabbit}/api/definitions/%2F"), None);
        let (status, body) = call("POST", &format!("{ours}/api/definitions/%2F"), Some(&vhost));
        assert_eq!(
            status, 204,
            "stream-broker refused RabbitMQ's definitions: {body}"
        );
        let (status, q) = call("GET", &format!("{ours}/api/queues/%2F/from.rabbit"), None);
        assert_eq!(status, 200);
        assert_eq!(
            (
                q["durable"].clone(),
                q["arguments"]["x-message-ttl"].clone()
            ),
            (json!(true), json!(60000))
        );
        assert_eq!(
            q["policy"], "from.rabbit.ttl",
            "RabbitMQ's policy came along"
        );
        let (_, back) = call("GET", &format!("{ours}/api/definitions/%2F"), None);
        for section in ["queues", "exchanges", "bindings", "policies"] {
            assert_eq!(sorted(&back, section), sorted(&vhost, section), "{section}");
        }
        // And RabbitMQ's export of the whole node (its `internal_cluster_id` left aside):
        // its users and permissions are stream-broker's own, as imported above.
        let (_, node) = call("GET", &format!("{rabbit}/api/definitions"), None);
        assert_eq!(
            node["global_parameters"][0]["name"], "internal_cluster_id",
            "{node}"
        );
        let (status, body) = call("POST", &format!("{ours}/api/definitions"), Some(&node));
        assert_eq!(
            status, 204,
            "stream-broker refused RabbitMQ's node definitions: {body}"
        );
    });
    let outcome = steps.await;
    server.shutdown().await;
    drop(node);
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}
