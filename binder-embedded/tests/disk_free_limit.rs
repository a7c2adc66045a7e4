//! `spring.embedded.disk-free-limit`: while the data directory's disk has less free space
//! than the limit, the shared broker blocks publishers, and its management API's node says
//! so with the free space and the limit (its own file: the shared broker is made once per
//! process, with the first configuration's storage).

mod common;

use std::time::Duration;

use binder_core::runtime::App;
use binder_embedded::EmbeddedBinder;
use common::config;

#[tokio::test]
async fn a_disk_free_limit_above_the_free_space_blocks_the_shared_brokers_publishers() {
    let dir = tempfile::tempdir().unwrap();
    let free = stream_store::free_space(dir.path()).unwrap();
    // The management API on a port free now (the binder binds it at start).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let server_config = dir.path().join("broker.toml");
    std::fs::write(
        &server_config,
        format!("[management]\nlisten = \"127.0.0.1:{port}\"\n"),
    )
    .unwrap();
    let data = dir.path().join("data");
    let yaml = format!(
        "spring.embedded:\n  data-dir: {}\n  disk-free-limit: {}\n  listen: 127.0.0.1:0\n  server-config: {}\nspring.cloud.stream.bindings:\n  orders-out:\n    destination: guarded-orders\n    producer: {{requiredGroups: billing}}\n",
        data.display(),
        free.saturating_mul(2),
        server_config.display()
    );
    let app = App::builder(config(&yaml))
        .output("orders-out")
        .start()
        .await
        .unwrap();
    let shared = EmbeddedBinder::shared_broker();
    assert_eq!(shared.blocked_reason().as_deref(), Some("low on disk"));
    let node = nodes(port).await;
    assert_eq!(node["disk_free_alarm"], true, "{node}");
    assert_eq!(node["disk_free_limit"], free.saturating_mul(2));
    assert!(node["disk_free"].as_u64().unwrap() > 0, "{node}");
    let out = app.output("orders-out").unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(300), out.send("held"))
            .await
            .is_err(),
        "a send went through under the disk alarm"
    );
    assert_eq!(shared.queue_counts("guarded-orders.billing"), Some((0, 0)));
    // The disk alarm is what holds it: lifted (as the monitor does once space is freed),
    // the send goes through.
    shared.set_disk_alarm(false);
    tokio::time::timeout(Duration::from_secs(5), out.send("free"))
        .await
        .expect("sent once the alarm is lifted")
        .unwrap();
    assert_eq!(shared.queue_counts("guarded-orders.billing"), Some((1, 0)));
    app.shutdown().await;
}

/// `GET /api/nodes` on the management port as `guest`: the one node.
async fn nodes(port: u16) -> serde_json::Value {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let req = "GET /api/nodes HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\
               Authorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\n\r\n";
    s.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let nodes: serde_json::Value = serde_json::from_str(body).unwrap();
    nodes[0].clone()
}
