//! The management server's view of a rabbit binder's connection: `OUT_OF_SERVICE` while
//! startup waits for an unreachable broker, then, against RabbitMQ through a proxy this test
//! can cut, the binder `DOWN` (503, `stream_binder_up 0`) once a send finds the connection
//! lost, and `UP` again once a send reopens it. The RabbitMQ half is skipped when no RabbitMQ answers at
//! `AMQP_URL`, unless `REQUIRE_RABBIT=1`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use binder_core::Message;
use binder_core::config::ConfigLoader;
use binder_core::runtime::App;
use binder_rabbit::{RabbitBinder, RabbitSettings};
use serde_json::Value;
use stream_tests::targets::amqp_url;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// One HTTP/1.1 request on a connection of its own: the status and the body.
async fn http(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(addr).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw))
        .await
        .expect("no answer within 10 s")?;
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP response");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    Ok((status, body.to_owned()))
}

async fn health(addr: SocketAddr) -> (u16, Value) {
    let (status, body) = http(addr, "/actuator/health").await.unwrap();
    (status, serde_json::from_str(&body).unwrap())
}

/// Polls `check` every 50 ms for up to 20 s.
async fn eventually<F: std::future::Future<Output = bool>>(what: &str, check: impl Fn() -> F) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not within 20 s: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A free loopback port (bound, then released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test]
async fn out_of_service_while_startup_waits_for_the_broker() {
    let port = free_port();
    let config = ConfigLoader::new()
        .env(Vec::<(String, String)>::new())
        .yaml_str(&format!(
            "spring.cloud.stream:\n  defaultBinder: rabbit\n  bindings.wait-out.destination: mgmt-wait\nmanagement:\n  server: {{port: {port}, address: 127.0.0.1}}\n  endpoint.health.show-details: always\n"
        ))
        .load()
        .unwrap();
    // Nothing listens on port 1 of loopback: startup waits for ever.
    let binder = Arc::new(RabbitBinder::new(RabbitSettings::from_uri(
        "amqp://guest:guest@127.0.0.1:1/%2f",
    )));
    let starting = tokio::spawn(
        App::builder(config)
            .binder("rabbit", binder)
            .output("wait-out")
            .management()
            .start(),
    );
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    eventually("the server answers", || async {
        http(addr, "/actuator/health").await.is_ok()
    })
    .await;
    let (status, doc) = health(addr).await;
    assert_eq!(status, 503, "{doc}");
    assert_eq!(doc["status"], "OUT_OF_SERVICE");
    assert_eq!(doc["components"]["bindings"]["details"]["starting"], true);
    let (status, body) = http(addr, "/actuator/health/readiness").await.unwrap();
    assert_eq!(
        (status, body.as_str()),
        (503, r#"{"status":"OUT_OF_SERVICE"}"#)
    );
    let (status, _) = http(addr, "/actuator/health/liveness").await.unwrap();
    assert_eq!(status, 200);
    starting.abort();
    let _ = starting.await;
    eventually("the server stops with the abandoned startup", || async {
        http(addr, "/actuator/health").await.is_err()
    })
    .await;
}

/// A TCP proxy to the broker whose connections the test can cut.
struct Proxy {
    addr: SocketAddr,
    open: Arc<AtomicBool>,
    links: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl Proxy {
    async fn to(target: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let open = Arc::new(AtomicBool::new(true));
        let links: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let accept = {
            let (open, links) = (open.clone(), links.clone());
            tokio::spawn(async move {
                while let Ok((mut client, _)) = listener.accept().await {
                    if !open.load(Ordering::SeqCst) {
                        continue; // dropped: refused while cut
                    }
                    let target = target.clone();
                    links.lock().unwrap().push(tokio::spawn(async move {
                        if let Ok(mut server) = TcpStream::connect(target).await {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                        }
                    }));
                }
            })
        };
        Proxy {
            addr,
            open,
            links,
            accept,
        }
    }

    /// Drops every connection, and those that come until `restore`.
    fn cut(&self) {
        self.open.store(false, Ordering::SeqCst);
        for link in self.links.lock().unwrap().drain(..) {
            link.abort();
        }
    }

    fn restore(&self) {
        self.open.store(true, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
        self.accept.abort();
    }
}

#[tokio::test]
async fn the_binder_is_down_while_its_connection_is_lost() {
    let url = amqp_url();
    let authority = url
        .split('@')
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .expect("an AMQP URL with user@host:port")
        .to_owned();
    if TcpStream::connect(&authority).await.is_err() {
        assert!(
            std::env::var("REQUIRE_RABBIT").map_or(true, |v| v != "1"),
            "REQUIRE_RABBIT=1 and no RabbitMQ answers at {authority}"
        );
        eprintln!("skipped: no RabbitMQ answers at {authority}");
        return;
    }
    let proxy = Proxy::to(authority.clone()).await;
    let proxied = url.replacen(&authority, &proxy.addr.to_string(), 1);
    let destination = format!("mgmt-rabbit-{}", std::process::id());
    let config = ConfigLoader::new()
        .env(Vec::<(String, String)>::new())
        .yaml_str(&format!(
            "spring.cloud.stream:\n  defaultBinder: rabbit\n  bindings.lost-out.destination: {destination}\nmanagement:\n  server: {{port: 0, address: 127.0.0.1}}\n  endpoints.web.exposure.include: '*'\n  endpoint.health.show-details: always\n"
        ))
        .load()
        .unwrap();
    let running = App::builder(config)
        .binder(
            "rabbit",
            Arc::new(RabbitBinder::new(RabbitSettings::from_uri(&proxied))),
        )
        .output("lost-out")
        .management()
        .start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = running.management_address().unwrap();
    let (status, doc) = health(addr).await;
    assert_eq!(status, 200, "{doc}");
    let rabbit = &doc["components"]["binders"]["components"]["rabbit"];
    assert_eq!(rabbit["status"], "UP", "{doc}");
    assert_eq!(rabbit["details"]["connection"], "up", "{doc}");

    proxy.cut();
    // The binder learns of the loss when it next uses the connection: a send.
    let out = running.output("lost-out").unwrap();
    eventually("a send fails while the broker is cut off", || async {
        out.send_message(Message::new("lost")).await.is_err()
    })
    .await;
    eventually("the binder reports the lost connection", || async {
        let (status, doc) = health(addr).await;
        status == 503
            && doc["components"]["binders"]["components"]["rabbit"]["details"]["connection"]
                == "down"
    })
    .await;
    let (_, doc) = health(addr).await;
    assert_eq!(doc["status"], "DOWN", "{doc}");
    let (_, scrape) = http(addr, "/actuator/prometheus").await.unwrap();
    assert!(
        scrape
            .lines()
            .any(|l| l == r#"stream_binder_up{binder="rabbit",type="rabbit"} 0"#),
        "{scrape}"
    );
    assert!(
        scrape.lines().any(|l| l
            == r#"stream_binder_connection_state{binder="rabbit",type="rabbit",state="down"} 1"#),
        "{scrape}"
    );

    proxy.restore();
    eventually("a send reopens the connection", || async {
        out.send_message(Message::new("again")).await.is_ok()
    })
    .await;
    let (status, doc) = health(addr).await;
    assert_eq!(status, 200, "{doc}");
    assert_eq!(
        doc["components"]["binders"]["components"]["rabbit"]["details"]["connection"],
        "up"
    );
    let (_, scrape) = http(addr, "/actuator/prometheus").await.unwrap();
    assert!(
        scrape
            .lines()
            .any(|l| l == r#"stream_binder_up{binder="rabbit",type="rabbit"} 1"#),
        "{scrape}"
    );
    running.shutdown().await;
}

#[tokio::test]
async fn a_consumer_whose_connection_is_lost_is_down_until_it_resubscribes() {
    let url = amqp_url();
    let authority = url
        .split('@')
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .expect("an AMQP URL with user@host:port")
        .to_owned();
    if TcpStream::connect(&authority).await.is_err() {
        assert!(
            std::env::var("REQUIRE_RABBIT").map_or(true, |v| v != "1"),
            "REQUIRE_RABBIT=1 and no RabbitMQ answers at {authority}"
        );
        eprintln!("skipped: no RabbitMQ answers at {authority}");
        return;
    }
    let proxy = Proxy::to(authority.clone()).await;
    let proxied = url.replacen(&authority, &proxy.addr.to_string(), 1);
    let destination = format!("mgmt-rabbit-in-{}", std::process::id());
    // The group queue expires a minute after its last consumer: the shared broker keeps
    // nothing of the test.
    let config = ConfigLoader::new()
        .env(Vec::<(String, String)>::new())
        .yaml_str(&format!(
            "spring.cloud.stream:\n  defaultBinder: rabbit\n  bindings.lost-in: {{destination: {destination}, group: g}}\n  rabbit.bindings.lost-in.consumer.expires: 60000\nmanagement:\n  server: {{port: 0, address: 127.0.0.1}}\n  endpoints.web.exposure.include: health,bindings\n  endpoint.health.show-details: always\n"
        ))
        .load()
        .unwrap_or_else(|e| panic!("{e}"));
    let running = App::builder(config)
        .binder(
            "rabbit",
            Arc::new(RabbitBinder::new(RabbitSettings::from_uri(&proxied))),
        )
        .listener(
            "lost-in",
            binder_core::runtime::handler::incoming(|_m| async {
                Ok::<(), binder_core::runtime::HandlerError>(())
            }),
        )
        .management()
        .start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    running
        .health()
        .wait_for(|s| *s == binder_core::runtime::HealthStatus::Up)
        .await;
    let addr = running.management_address().unwrap();
    assert_eq!(health(addr).await.0, 200);

    proxy.cut();
    eventually("the binding and the binder report the loss", || async {
        let (status, doc) = health(addr).await;
        status == 503
            && doc["components"]["bindings"]["status"] == "DOWN"
            && doc["components"]["binders"]["components"]["rabbit"]["status"] == "DOWN"
    })
    .await;
    let (_, list) = http(addr, "/actuator/bindings/lost-in").await.unwrap();
    let list: Value = serde_json::from_str(&list).unwrap();
    assert_eq!(list[0]["extendedInfo"]["recovering"], true, "{list}");
    assert_eq!(list[0]["state"], "running", "meant to run: {list}");

    proxy.restore();
    eventually("the binding resubscribes", || async {
        let (status, doc) = health(addr).await;
        status == 200
            && doc["components"]["binders"]["components"]["rabbit"]["details"]["connection"] == "up"
    })
    .await;
    let (_, list) = http(addr, "/actuator/bindings/lost-in").await.unwrap();
    assert!(list.contains(r#""recovering":false"#), "{list}");
    running.shutdown().await;
}
