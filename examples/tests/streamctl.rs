//! `streamctl plan` as an operator runs it.

#[path = "support/cli.rs"]
mod cli;

use cli::streamctl;
use std::process::Command;

fn write(text: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("application.yaml");
    std::fs::write(&path, text).unwrap();
    let path = path.display().to_string();
    (dir, path)
}

#[test]
fn plan_prints_json_with_the_documented_shape() {
    let (_dir, path) = write(
        "spring.cloud.stream:\n  bindings.inputProductAdd: {destination: mqTestProduct, group: addProductHandler}\n  rabbit.bindings.inputProductAdd.consumer.bindingRoutingKey: addProduct.*\n",
    );
    let out = streamctl(&["plan", "--config", &path, "--format", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "exchanges": [{"name": "mqTestProduct", "type": "topic", "durable": true,
                           "auto_delete": false, "internal": false, "arguments": {}}],
            "queues": [{"name": "mqTestProduct.addProductHandler", "durable": true,
                        "exclusive": false, "auto_delete": false, "arguments": {}}],
            "bindings": [{"source": "mqTestProduct", "destination": "mqTestProduct.addProductHandler",
                          "destination_type": "queue", "routing_key": "addProduct.*", "arguments": {}}]
        })
    );
}

#[test]
fn plan_prints_text_by_default() {
    let (_dir, path) = write("spring.cloud.stream.bindings.input: {destination: d, group: g}\n");
    let out = streamctl(&["plan", "--config", &path]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("d -> queue d.g with '#'"), "{text}");
}

#[test]
fn an_invalid_configuration_exits_2_with_every_problem_on_stderr() {
    let (_dir, path) =
        write("spring.cloud.stream.bindings.input:\n  grup: g\n  consumer.maxAttempts: 0\n");
    let out = streamctl(&["plan", "--config", &path]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("application.yaml: spring.cloud.stream.bindings.input.grup: unknown property `grup`; did you mean `group`?"), "{err}");
    assert!(
        err.contains("consumer.maxAttempts: must be at least 1"),
        "{err}"
    );
}

#[test]
fn a_missing_file_exits_2() {
    let out = streamctl(&["plan", "--config", "/nonexistent/application.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no such file"));
}

fn rabbit_up() -> bool {
    let up = std::net::TcpStream::connect_timeout(
        &"127.0.0.1:5672".parse().unwrap(),
        std::time::Duration::from_secs(2),
    )
    .is_ok();
    if !up {
        assert!(
            std::env::var("REQUIRE_RABBIT").as_deref() != Ok("1"),
            "REQUIRE_RABBIT=1 but no RabbitMQ on 127.0.0.1:5672"
        );
        eprintln!("SKIPPED: no RabbitMQ on 127.0.0.1:5672");
    }
    up
}

#[test]
fn provision_declares_the_plan_on_rabbitmq() {
    if !rabbit_up() {
        return;
    }
    let name = format!(
        "streamctl-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
            % 1_000_000_000
    );
    let (_dir, path) = write(&format!(
        "spring.cloud.stream:\n  defaultBinder: rabbit\n  bindings.out: {{destination: {name}, producer: {{requiredGroups: [audit]}}}}\n"
    ));
    let out = streamctl(&["provision", "--config", &path]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 exchanges, 1 queues, 1 bindings"));
    let queues = Command::new("rabbitmqctl")
        .args(["-q", "list_queues", "name"])
        .output()
        .unwrap();
    let queue = format!("{name}.audit");
    assert!(
        String::from_utf8_lossy(&queues.stdout)
            .lines()
            .any(|l| l.trim() == queue)
    );
    let _ = Command::new("rabbitmqctl")
        .args(["-q", "delete_queue", &queue])
        .output();
}

/// `streamctl … | head` ends it quietly, with status 0, as other tools end, not with a panic.
#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    use std::io::Read;
    use std::process::Stdio;
    let (_dir, path) =
        write("spring.cloud.stream.bindings.orders-in: {destination: orders, group: billing}\n");
    let mut child = Command::new(env!("CARGO_BIN_EXE_streamctl"))
        .args(["asyncapi", "--config", &path])
        .env_remove("STREAM_CONFIG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reading end closes before the program writes.
    drop(child.stdout.take());
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?} {stderr}");
    assert!(stderr.is_empty(), "{stderr}");
}
