//! `run_service` starts the management server when `management.server.port` is set: this
//! test runs itself again as a child process that calls `run_service_with` on a
//! configuration file, reads the address the child logs, and asks the child's endpoints.

#![cfg(feature = "management")]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

// Links the embedded binder's registration into this test program.
use binder_embedded as _;

const CHILD: &str = "SERVICE_MANAGEMENT_CHILD";
const NAME: &str = "run_service_serves_the_management_endpoints";

fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    (
        head.split(' ').nth(1).unwrap().parse().unwrap(),
        body.to_owned(),
    )
}

/// Kills the child service when the test ends, passed or not.
struct Service(std::process::Child);

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn run_service_serves_the_management_endpoints() {
    if std::env::var_os(CHILD).is_some() {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let exit = runtime.block_on(binder_core::runtime::run_service_with(|app| {
            app.listener(
                "in",
                binder_core::runtime::handler::incoming(|_m| async {
                    Ok::<(), binder_core::runtime::HandlerError>(())
                }),
            )
        }));
        std::process::exit(i32::from(exit.code()));
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("application.yaml");
    std::fs::write(
        &file,
        "spring.cloud.stream.bindings.in: {destination: svc-mgmt, group: g}\nmanagement:\n  server: {port: 0, address: 127.0.0.1}\n  endpoints.web.exposure.include: health,bindings\n",
    )
    .unwrap();
    let mut child = Service(
        Command::new(std::env::current_exe().unwrap())
            .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
            .env(CHILD, "1")
            .env("STREAM_CONFIG", &file)
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let stderr = BufReader::new(child.0.stderr.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if line.contains("management server listening") {
                let _ = tx.send(line.clone());
            }
        }
    });
    let line = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the service logs where its management server listens");
    let addr: SocketAddr = line
        .split("addr=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in `{line}`"));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, body) = get(addr, "/actuator/health");
        if status == 200 {
            assert_eq!(body, r#"{"status":"UP"}"#);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not up within 20 s: {status} {body}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (status, body) = get(addr, "/actuator/bindings");
    assert_eq!(status, 200);
    assert!(body.contains(r#""bindingName":"in""#), "{body}");
    assert_eq!(get(addr, "/actuator/prometheus").0, 404, "not exposed");
}
