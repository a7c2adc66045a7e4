//! The management server against a running application on the embedded binder: every
//! endpoint, each state change, exposure, path mapping and base path, 503 when down, the
//! configuration refused by key, and nothing started without a port.

#![cfg(feature = "management")]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use binder_core::Message;
use binder_core::config::{ConfigLoader, StreamConfig};
use binder_core::runtime::{App, AppBuilder, HandlerError, HealthStatus, RunningApp, handler};
use binder_embedded::EmbeddedBinder;
use binder_embedded::engine::Broker;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn config(yaml: &str) -> StreamConfig {
    ConfigLoader::new()
        .env(Vec::<(String, String)>::new())
        .yaml_str(yaml)
        .load()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// One HTTP/1.1 request on a connection of its own: the status and the body.
async fn http(addr: SocketAddr, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let body = body.unwrap_or("");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw))
        .await
        .expect("no answer within 10 s")
        .unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP response");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    (status, body.to_owned())
}

async fn get_json(addr: SocketAddr, path: &str) -> (u16, Value) {
    let (status, body) = http(addr, "GET", path, None).await;
    (
        status,
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}")),
    )
}

/// An application with an input `in` (failing for payload `fail`) and an output `out`.
async fn start(yaml: &str, broker: Broker) -> RunningApp {
    let running = builder(yaml, broker)
        .start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    running.health().wait_for(|s| *s == HealthStatus::Up).await;
    running
}

/// The application of `start`, not started yet.
fn builder(yaml: &str, broker: Broker) -> AppBuilder {
    App::builder(config(yaml))
        .binder("embedded", Arc::new(EmbeddedBinder::new(broker)))
        .listener(
            "in",
            handler::incoming(|m| async move {
                if &m.message.payload[..] == b"fail" {
                    Err(HandlerError::fatal("refused"))
                } else {
                    Ok(())
                }
            }),
        )
        .output("out")
        .management()
}

const BINDINGS: &str = "spring.cloud.stream.bindings:\n  in: {destination: mgmt-in, group: g, consumer: {maxAttempts: 1}}\n  out: {destination: mgmt-in}\n";

#[tokio::test]
async fn nothing_is_started_without_a_port() {
    let running = start(BINDINGS, Broker::new()).await;
    assert_eq!(running.management_address(), None);
    running.shutdown().await;
}

#[tokio::test]
async fn every_endpoint_when_all_are_exposed() {
    let yaml = format!(
        "{BINDINGS}management:\n  server: {{port: 0, address: 127.0.0.1}}\n  endpoints.web.exposure.include: '*'\n  endpoint.health.show-details: always\n"
    );
    let running = start(&yaml, Broker::new()).await;
    let addr = running.management_address().expect("a management server");
    assert!(addr.ip().is_loopback() && addr.port() != 0, "{addr}");

    let (status, health) = get_json(addr, "/actuator/health").await;
    assert_eq!(status, 200, "{health}");
    assert_eq!(health["status"], "UP");
    assert_eq!(health["components"]["bindings"]["status"], "UP");
    let embedded = &health["components"]["binders"]["components"]["embedded"];
    assert_eq!(embedded["status"], "UP", "{health}");
    assert_eq!(embedded["details"]["connection"], "up");
    assert_eq!(embedded["details"]["type"], "embedded");
    assert_eq!(
        get_json(addr, "/actuator/health/liveness").await.1["status"],
        "UP"
    );
    let (status, ready) = get_json(addr, "/actuator/health/readiness").await;
    assert_eq!((status, &ready["status"]), (200, &Value::from("UP")));

    // The bindings, in SCSt's shape.
    let (status, list) = get_json(addr, "/actuator/bindings").await;
    assert_eq!(status, 200);
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 2, "{list:?}");
    let input = &list[0];
    assert_eq!(input["bindingName"], "in");
    assert_eq!(input["name"], "mgmt-in");
    assert_eq!(input["group"], "g");
    assert_eq!(input["pausable"], true);
    assert_eq!(input["input"], true);
    assert_eq!(input["state"], "running");
    assert_eq!(input["paused"], false);
    assert_eq!(input["binderName"], "embedded");
    assert_eq!(input["binderType"], "embedded");
    assert_eq!(input["extendedInfo"]["bindingDestination"], "mgmt-in");
    let output = &list[1];
    assert_eq!(output["bindingName"], "out");
    assert_eq!(output["group"], Value::Null);
    assert_eq!(
        (&output["input"], &output["pausable"]),
        (&Value::from(false), &Value::from(false))
    );

    // Every state change, seen through GET and through the application.
    let state = |v: &Value| v[0]["state"].as_str().unwrap().to_owned();
    for (asked, seen) in [
        ("PAUSED", "paused"),
        ("RESUMED", "running"),
        ("STOPPED", "stopped"),
        ("STARTED", "running"),
    ] {
        let body = format!(r#"{{"state":"{asked}"}}"#);
        let (status, text) = http(addr, "POST", "/actuator/bindings/in", Some(&body)).await;
        assert_eq!(status, 204, "{asked}: {text}");
        let (status, one) = get_json(addr, "/actuator/bindings/in").await;
        assert_eq!(status, 200);
        assert_eq!(state(&one), seen, "after {asked}");
        assert_eq!(running.state("in").unwrap().to_string(), seen);
    }
    let (status, _) = http(
        addr,
        "POST",
        "/actuator/bindings/out",
        Some(r#"{"state":"STOPPED"}"#),
    )
    .await;
    assert_eq!(status, 204);
    assert_eq!(
        state(&get_json(addr, "/actuator/bindings/out").await.1),
        "stopped"
    );
    let (status, _) = http(
        addr,
        "POST",
        "/actuator/bindings/out",
        Some(r#"{"state":"STARTED"}"#),
    )
    .await;
    assert_eq!(status, 204);
    assert_eq!(
        state(&get_json(addr, "/actuator/bindings/out").await.1),
        "running"
    );

    // What is refused.
    let (status, text) = http(
        addr,
        "POST",
        "/actuator/bindings/out",
        Some(r#"{"state":"PAUSED"}"#),
    )
    .await;
    assert_eq!(status, 400, "an output cannot pause: {text}");
    let (status, text) = http(
        addr,
        "POST",
        "/actuator/bindings/in",
        Some(r#"{"state":"SLEEPING"}"#),
    )
    .await;
    assert_eq!(status, 400);
    assert!(text.contains("SLEEPING"), "{text}");
    let (status, _) = http(addr, "POST", "/actuator/bindings/in", Some("not json")).await;
    assert_eq!(status, 400);
    let (status, _) = http(
        addr,
        "POST",
        "/actuator/bindings/nope",
        Some(r#"{"state":"STOPPED"}"#),
    )
    .await;
    assert_eq!(status, 404);
    let (status, _) = http(addr, "GET", "/actuator/bindings/nope", None).await;
    assert_eq!(status, 404);

    // Metrics: a handled message, a dead-lettered one, two sends.
    let out = running.output("out").unwrap();
    out.send_message(Message::new("ok")).await.unwrap();
    out.send_message(Message::new("fail")).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let scrape = loop {
        let (status, text) = http(addr, "GET", "/actuator/prometheus", None).await;
        assert_eq!(status, 200);
        if text.contains(r#"stream_binding_dead_lettered_total{binding="in"} 1"#)
            || tokio::time::Instant::now() > deadline
        {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    for line in [
        r#"stream_binding_received_total{binding="in"} 2"#,
        r#"stream_binding_handled_total{binding="in"} 1"#,
        r#"stream_binding_failed_total{binding="in"} 1"#,
        r#"stream_binding_retried_total{binding="in"} 0"#,
        r#"stream_binding_dead_lettered_total{binding="in"} 1"#,
        r#"stream_binding_in_flight{binding="in"} 0"#,
        r#"stream_binding_handler_duration_seconds_count{binding="in",outcome="success"} 1"#,
        r#"stream_binding_handler_duration_seconds_count{binding="in",outcome="failure"} 1"#,
        r#"stream_binding_sent_total{binding="out"} 2"#,
        r#"stream_binding_send_failed_total{binding="out"} 0"#,
        r#"stream_binding_send_latency_seconds_count{binding="out"} 2"#,
        r#"stream_binder_up{binder="embedded",type="embedded"} 1"#,
        r#"stream_binder_connection_state{binder="embedded",type="embedded",state="up"} 1"#,
        r#"stream_binder_connection_state{binder="embedded",type="embedded",state="down"} 0"#,
    ] {
        assert!(
            scrape.lines().any(|l| l == line),
            "no `{line}` in:\n{scrape}"
        );
    }

    running.shutdown().await;
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "the server stops with the application"
    );
}

#[tokio::test]
async fn only_health_by_default_without_details() {
    let yaml = format!("{BINDINGS}management.server.port: 0\n");
    let running = start(&yaml, Broker::new()).await;
    let addr = running.management_address().unwrap();
    let (status, body) = http(addr, "GET", "/actuator/health", None).await;
    assert_eq!((status, body.as_str()), (200, r#"{"status":"UP"}"#));
    for path in [
        "/actuator/bindings",
        "/actuator/bindings/in",
        "/actuator/prometheus",
        "/actuator/asyncapi.json",
    ] {
        assert_eq!(http(addr, "GET", path, None).await.0, 404, "{path}");
    }
    running.shutdown().await;
}

#[tokio::test]
async fn the_asyncapi_document_at_asyncapi_json() {
    let yaml = format!(
        "{BINDINGS}spring.application.name: mgmt-svc\nmanagement:\n  server.port: 0\n  endpoints.web.exposure.include: health,asyncapi\n"
    );
    let app = builder(&yaml, Broker::new());
    // The running application builds its document when first asked for: the same.
    let before_start = app.asyncapi();
    let running = app.start().await.unwrap_or_else(|e| panic!("{e}"));
    let addr = running.management_address().unwrap();
    let (status, body) = http(addr, "GET", "/actuator/asyncapi.json", None).await;
    assert_eq!(status, 200, "{body}");
    let doc: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(&doc, before_start.as_json());
    assert_eq!(&doc, running.asyncapi().as_json());
    let (_, again) = http(addr, "GET", "/actuator/asyncapi.json", None).await;
    assert_eq!(again, body, "a second request serves the same document");
    assert_eq!(doc["asyncapi"], "3.0.0");
    assert_eq!(doc["info"]["title"], "mgmt-svc");
    // `in` and `out` share destination `mgmt-in`: one channel, an exchange, both messages.
    let channel = &doc["channels"]["mgmt-in"];
    assert_eq!(channel["address"], "mgmt-in", "{doc:#}");
    assert_eq!(channel["bindings"]["amqp"]["is"], "routingKey");
    assert_eq!(channel["bindings"]["amqp"]["exchange"]["type"], "topic");
    assert_eq!(channel["bindings"]["amqp"]["exchange"]["vhost"], "/");
    let messages = channel["messages"].as_object().unwrap();
    assert!(
        messages.contains_key("in") && messages.contains_key("out"),
        "{channel}"
    );
    // The input receives from its group's queue, a channel of its own.
    let receive = &doc["operations"]["in"];
    assert_eq!(receive["action"], "receive");
    assert_eq!(receive["x-group"], "g");
    assert_eq!(receive["channel"]["$ref"], "#/channels/mgmt-in_g");
    let queue = &doc["channels"]["mgmt-in_g"];
    assert_eq!(queue["address"], "mgmt-in.g");
    assert_eq!(queue["bindings"]["amqp"]["queue"]["name"], "mgmt-in.g");
    let send = &doc["operations"]["out"];
    assert_eq!(send["action"], "send");
    assert_eq!(send["channel"]["$ref"], "#/channels/mgmt-in");
    assert_eq!(send["bindings"]["amqp"]["cc"][0], "mgmt-in");
    assert_eq!(send["x-binder"]["type"], "embedded");
    // Handlers registered by hand: no payload type, said so.
    let payload = &doc["components"]["messages"]["in"]["payload"];
    assert!(
        payload["description"]
            .as_str()
            .unwrap()
            .contains("no payload type"),
        "{payload}"
    );
    running.shutdown().await;

    let yaml = format!(
        "{BINDINGS}management:\n  server.port: 0\n  endpoints.web:\n    exposure.include: asyncapi\n    path-mapping.asyncapi: docs/asyncapi\n"
    );
    let running = start(&yaml, Broker::new()).await;
    let addr = running.management_address().unwrap();
    let (status, doc) = get_json(addr, "/actuator/docs/asyncapi").await;
    assert_eq!((status, &doc["asyncapi"]), (200, &Value::from("3.0.0")));
    assert_eq!(
        http(addr, "GET", "/actuator/asyncapi.json", None).await.0,
        404
    );
    running.shutdown().await;
}

#[tokio::test]
async fn exclude_wins_over_include() {
    let yaml = format!(
        "{BINDINGS}management:\n  server.port: 0\n  endpoints.web.exposure: {{include: '*', exclude: bindings}}\n"
    );
    let running = start(&yaml, Broker::new()).await;
    let addr = running.management_address().unwrap();
    assert_eq!(http(addr, "GET", "/actuator/bindings", None).await.0, 404);
    assert_eq!(http(addr, "GET", "/actuator/prometheus", None).await.0, 200);
    assert_eq!(http(addr, "GET", "/actuator/health", None).await.0, 200);
    running.shutdown().await;
}

#[tokio::test]
async fn base_path_and_path_mapping() {
    let yaml = format!(
        "{BINDINGS}management:\n  server.port: 0\n  endpoints.web:\n    base-path: /manage\n    exposure.include: health,prometheus\n    path-mapping.prometheus: metrics\n"
    );
    let running = start(&yaml, Broker::new()).await;
    let addr = running.management_address().unwrap();
    let (status, text) = http(addr, "GET", "/manage/metrics", None).await;
    assert_eq!(status, 200);
    assert!(
        text.contains("# TYPE stream_binding_received counter"),
        "{text}"
    );
    assert_eq!(http(addr, "GET", "/manage/prometheus", None).await.0, 404);
    assert_eq!(
        http(addr, "GET", "/manage/health/readiness", None).await.0,
        200
    );
    assert_eq!(http(addr, "GET", "/actuator/health", None).await.0, 404);
    running.shutdown().await;

    let yaml = format!("{BINDINGS}management:\n  server.port: 0\n  endpoints.web.base-path: /\n");
    let running = start(&yaml, Broker::new()).await;
    let addr = running.management_address().unwrap();
    assert_eq!(http(addr, "GET", "/health", None).await.0, 200);
    running.shutdown().await;
}

#[tokio::test]
async fn a_binding_that_stops_consuming_answers_503() {
    let yaml = format!(
        "{BINDINGS}management:\n  server: {{port: 0}}\n  endpoint.health.show-details: always\n"
    );
    let broker = Broker::new();
    let running = start(&yaml, broker.clone()).await;
    let addr = running.management_address().unwrap();
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    ch.queue_delete("mgmt-in.g", false, false).unwrap();
    running
        .health()
        .wait_for(|s| matches!(s, HealthStatus::Down { .. }))
        .await;
    let (status, health) = get_json(addr, "/actuator/health").await;
    assert_eq!(status, 503, "{health}");
    assert_eq!(health["status"], "DOWN");
    assert_eq!(health["components"]["bindings"]["status"], "DOWN");
    assert!(
        health["components"]["bindings"]["details"]["reason"]
            .as_str()
            .unwrap()
            .contains("`in`"),
        "{health}"
    );
    let (status, ready) = get_json(addr, "/actuator/health/readiness").await;
    assert_eq!(
        (status, &ready["status"]),
        (503, &Value::from("OUT_OF_SERVICE"))
    );
    assert_eq!(
        http(addr, "GET", "/actuator/health/liveness", None).await.0,
        200
    );
    running.shutdown().await;
}

#[tokio::test]
async fn a_port_in_use_fails_the_start() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let yaml = format!("{BINDINGS}management.server: {{port: {port}, address: 127.0.0.1}}\n");
    let error = App::builder(config(&yaml))
        .binder("embedded", Arc::new(EmbeddedBinder::new(Broker::new())))
        .listener(
            "in",
            handler::incoming(|_m| async { Ok::<(), HandlerError>(()) }),
        )
        .management()
        .start()
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains(&format!(
            "management server: cannot listen on 127.0.0.1:{port}"
        )),
        "{error}"
    );
}

#[test]
fn bad_management_keys_are_refused_by_name() {
    let refused = |yaml: &str| {
        ConfigLoader::new()
            .env(Vec::<(String, String)>::new())
            .yaml_str(yaml)
            .load()
            .unwrap_err()
            .to_string()
    };
    for (yaml, expected) in [
        (
            "management.server.prot: 8080\n",
            "management.server.prot: unknown property `prot`; did you mean `port`?",
        ),
        (
            "management.sever.port: 8080\n",
            "management.sever: unknown property `sever`; did you mean `server`?",
        ),
        (
            "management.server.port: 70000\n",
            "management.server.port: expected a whole number from 0 to 65535",
        ),
        (
            "management.server.address: localhost\n",
            "management.server.address: `localhost` is not an IP address",
        ),
        (
            "management.endpoints.web.exposure.include: [health, metrics]\n",
            "management.endpoints.web.exposure.include: unknown endpoint `metrics`",
        ),
        (
            "management.endpoints.web.exposure.exclude: info\n",
            "management.endpoints.web.exposure.exclude: unknown endpoint `info`",
        ),
        (
            "management.endpoints.web.path-mapping.info: about\n",
            "management.endpoints.web.path-mapping: unknown endpoint `info`",
        ),
        (
            "management.endpoints.web.base-path: actuator\n",
            "management.endpoints.web.base-path: must start with `/`",
        ),
        (
            "management.endpoint.health.show-details: when-authorized\n",
            "management.endpoint.health.show-details",
        ),
        (
            "management.endpoint.health.show-detail: always\n",
            "did you mean `showDetails`?",
        ),
    ] {
        let text = refused(yaml);
        assert!(text.contains(expected), "{yaml}: {text}");
    }
}

#[test]
fn the_port_comes_from_the_environment_too() {
    let config = ConfigLoader::new()
        .env([("MANAGEMENT_SERVER_PORT", "9091")])
        .yaml_str("{}\n")
        .load()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.management.server.port, Some(9091));
}
