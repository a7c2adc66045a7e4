//! The `stream-broker` binary: starts from a TOML file, serves, and shuts down gracefully on
//! SIGTERM.

#[path = "common/process.rs"]
mod process;

use std::process::Command;
use std::time::Duration;

/// How long the binary may take to log that it listens.
const WAIT: Duration = Duration::from_secs(30);

#[test]
fn the_binary_serves_and_stops_on_sigterm() {
    let dir = std::env::temp_dir().join(format!("stream-broker-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("broker.toml");
    std::fs::write(
        &file,
        "vhosts = [\"/\"]\n[limits]\nheartbeat = 30\n[[users]]\nname = \"guest\"\npassword = \"guest\"\npermissions = { \"/\" = { configure = \".*\", write = \".*\", read = \".*\" } }\n",
    )
    .unwrap();
    let mut command = process::stream_broker();
    command.args([
        "--config",
        file.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
    ]);
    let (mut child, addr) = process::spawn_until(command, "local_addr=", "local_addr", WAIT);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let conn = lapin::Connection::connect(
            &format!("amqp://guest:guest@{addr}/%2f"),
            Default::default(),
        )
        .await
        .unwrap();
        conn.create_channel().await.unwrap();
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while conn.status().connected() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "SIGTERM did not close the connection within 5 s"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn an_unknown_key_stops_the_binary_with_its_name() {
    let dir = std::env::temp_dir().join(format!("stream-broker-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("broker.toml");
    std::fs::write(&file, "listen = \"127.0.0.1:0\"\nlisten_backlog = 5\n").unwrap();
    let out = process::stream_broker()
        .args(["--config", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("listen_backlog"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn management_listen_serves_the_api_and_a_remote_address_must_be_allowed() {
    let mut command = process::stream_broker();
    command.args([
        "--listen",
        "127.0.0.1:0",
        "--management-listen",
        "127.0.0.1:0",
    ]);
    let (mut child, addr) = process::spawn_until(command, "management API listening", "addr", WAIT);
    let answer = {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        // guest:guest
        s.write_all(
            b"GET /api/overview HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\n\r\n",
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    };
    let _ = child.kill();
    let _ = child.wait();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        answer.contains("\"product_name\":\"stream-broker\""),
        "{answer}"
    );

    let out = process::stream_broker()
        .args([
            "--listen",
            "127.0.0.1:0",
            "--management-listen",
            "0.0.0.0:0",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("management.allow_remote"), "{err}");
}

#[test]
fn load_definitions_declares_a_file_s_topology_before_listening_or_stops_the_binary() {
    let dir = std::env::temp_dir().join(format!("stream-broker-defs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("definitions.json");
    std::fs::write(
        &file,
        r#"{"queues": [{"name": "loaded.q", "vhost": "/", "durable": false, "auto_delete": false, "arguments": {}}]}"#,
    )
    .unwrap();
    let mut command = process::stream_broker();
    command.args([
        "--listen",
        "127.0.0.1:0",
        "--load-definitions",
        file.to_str().unwrap(),
    ]);
    let (mut child, addr) = process::spawn_until(command, "local_addr=", "local_addr", WAIT);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let declared = runtime.block_on(async {
        let conn = lapin::Connection::connect(
            &format!("amqp://guest:guest@{addr}/%2f"),
            Default::default(),
        )
        .await
        .unwrap();
        let ch = conn.create_channel().await.unwrap();
        let passive = lapin::options::QueueDeclareOptions {
            passive: true,
            ..Default::default()
        };
        ch.queue_declare("loaded.q".into(), passive, Default::default())
            .await
            .is_ok()
    });
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        declared,
        "the file's queue is there when the binary listens"
    );

    std::fs::write(
        &file,
        r#"{"policies": [{"vhost": "/", "name": "mirrored", "pattern": ".", "definition": {"ha-mode": "all"}}]}"#,
    )
    .unwrap();
    let out = process::stream_broker()
        .args(["--listen", "127.0.0.1:0", "--load-definitions"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("load_definitions") && err.contains("policies[0]: unsupported key 'ha-mode'"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
