//! `spring.embedded.listen` with a `[management]` table in `spring.embedded.server-config`:
//! the binder's broker serves the HTTP management API (the server's own code, tested in depth
//! in `server/tests/management.rs`) over the binder's own message records.

use std::net::SocketAddr;

use binder_core::binder::Binder;
use binder_core::config::ConfigLoader;
use binder_embedded::EmbeddedBinder;
use binder_embedded::engine::Broker;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One HTTP/1.1 request as `guest`; the status and the JSON body (`null` when empty).
async fn call(addr: SocketAddr, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\
         Authorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    assert!(!head.to_ascii_lowercase().contains("chunked"), "{head}");
    let json = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(body).unwrap()
    };
    (status, json)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_management_table_in_the_server_config_serves_the_api() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("broker.toml");
    std::fs::write(&file, "[management]\nlisten = \"127.0.0.1:0\"\n").unwrap();
    let yaml = format!(
        "spring.embedded:\n  listen: 127.0.0.1:0\n  server-config: {}\n",
        file.display()
    );
    let cfg = ConfigLoader::new()
        .env(Vec::<(String, String)>::new())
        .yaml_str(&yaml)
        .load()
        .unwrap();
    let binder = EmbeddedBinder::new(Broker::new());
    binder
        .configure(&cfg.binder_environment("embedded"))
        .unwrap();
    let api = binder.management_addr().expect("management served");
    assert_ne!(api.port(), 0, "the port chosen for port 0");

    let amqp = lapin::Connection::connect(
        &format!("amqp://guest:guest@{}/%2f", binder.local_addr().unwrap()),
        Default::default(),
    )
    .await
    .unwrap();
    let ch = amqp.create_channel().await.unwrap();
    ch.queue_declare("served".into(), Default::default(), Default::default())
        .await
        .unwrap();
    let publish =
        json!({"properties": {"headers": {"k": "v"}}, "routing_key": "served", "payload": "hello"});
    let (status, routed) = call(
        api,
        "POST",
        "/api/exchanges/%2F/amq.default/publish",
        Some(publish),
    )
    .await;
    assert_eq!((status, routed), (200, json!({"routed": true})));
    let (_, q) = call(api, "GET", "/api/queues/%2F/served", None).await;
    assert_eq!(q["messages_ready"], 1);
    let get = json!({"count": 1, "ackmode": "ack_requeue_true"});
    let (_, got) = call(api, "POST", "/api/queues/%2F/served/get", Some(get)).await;
    assert_eq!(got[0]["payload"], "hello");
    assert_eq!(got[0]["properties"]["headers"], json!({"k": "v"}));
    let (status, _) = call(api, "DELETE", "/api/queues/%2F/served/contents", None).await;
    assert_eq!(status, 204);
    let (_, q) = call(api, "GET", "/api/queues/%2F/served", None).await;
    assert_eq!(q["messages_ready"], 0);
    let (_, conns) = call(api, "GET", "/api/connections", None).await;
    assert_eq!(conns.as_array().unwrap().len(), 1);
    amqp.close(200, "bye".into()).await.unwrap();
    binder.close().await;
}
