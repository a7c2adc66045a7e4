//! The management page end to end in headless Chromium, driven over WebDriver
//! (`chromedriver`): log in, see the queues, open a dead-letter queue, re-drive one message,
//! purge one, re-drive all, purge all, close a client's connection, by clicking. A screenshot goes to
//! `$SCREENSHOT` (default `stream-broker-management-page.png` in the temporary directory).
//!
//! Skipped, with the reason printed, when `chromium` or `chromedriver` is missing, unless
//! `REQUIRE_CLIENTS=1` is set: then a missing browser fails the test (Debian:
//! `apt-get install -y chromium chromium-driver`).

mod common;
#[path = "common/http.rs"]
mod http;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};
use stream_broker::ManagementConfig;
use stream_engine::{
    Broker, FieldTable, FieldValue, Message, PolicyDef, PolicyTarget, PublishOptions, QueueOptions,
};

fn required() -> bool {
    std::env::var("REQUIRE_CLIENTS").is_ok_and(|v| v == "1")
}

fn missing() -> Option<String> {
    for tool in ["chromium", "chromedriver"] {
        if Command::new(tool).arg("--version").output().is_err() {
            return Some(format!("`{tool}` is not installed"));
        }
    }
    None
}

/// chromedriver on a free port, killed on drop.
struct Driver {
    child: Child,
    addr: SocketAddr,
    session: String,
}

/// The W3C WebDriver element reference key.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

impl Driver {
    async fn start() -> Driver {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let mut driver = Driver {
            child,
            addr,
            session: String::new(),
        };
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(addr).await.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1300,1400"]
            }
        }}});
        let r = driver.call("POST", "/session", Some(caps)).await;
        driver.session = r["sessionId"].as_str().expect("a session").to_owned();
        driver
    }

    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let r = http::request(self.addr, method, path, None, body.as_ref()).await;
        let v = r.json();
        assert_eq!(r.status, 200, "{method} {path}: {v}");
        v["value"].clone()
    }

    fn path(&self, tail: &str) -> String {
        format!("/session/{}{tail}", self.session)
    }

    async fn go(&self, url: &str) {
        self.call("POST", &self.path("/url"), Some(json!({"url": url})))
            .await;
    }

    /// Waits (up to 10 s) for an element matching `css`.
    async fn find(&self, css: &str) -> String {
        for _ in 0..100 {
            let r = http::request(
                self.addr,
                "POST",
                &self.path("/element"),
                None,
                Some(&json!({"using": "css selector", "value": css})),
            )
            .await;
            if r.status == 200 {
                let v = r.json();
                return v["value"][ELEMENT]
                    .as_str()
                    .unwrap_or_else(|| panic!("{v}"))
                    .to_owned();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("no element {css}");
    }

    /// Clicks the element matching `css`; the page redraws its tables every two seconds, so
    /// an element found just before a redraw is found again.
    async fn click(&self, css: &str) {
        for _ in 0..20 {
            let id = self.find(css).await;
            let r = http::request(
                self.addr,
                "POST",
                &self.path(&format!("/element/{id}/click")),
                None,
                Some(&json!({})),
            )
            .await;
            if r.status == 200 {
                return;
            }
            let v = r.json();
            assert_eq!(
                v["value"]["error"], "stale element reference",
                "click {css}: {v}"
            );
        }
        panic!("{css} kept going stale");
    }

    async fn type_into(&self, css: &str, text: &str) {
        let id = self.find(css).await;
        self.call(
            "POST",
            &self.path(&format!("/element/{id}/value")),
            Some(json!({"text": text})),
        )
        .await;
    }

    async fn script(&self, js: &str) -> Value {
        self.call(
            "POST",
            &self.path("/execute/sync"),
            Some(json!({"script": js, "args": []})),
        )
        .await
    }

    /// Waits (up to 30 s: a loaded machine slows the browser) until `js` returns `true`.
    async fn until(&self, what: &str, js: &str) {
        for _ in 0..300 {
            if self.script(&format!("return ({js});")).await == json!(true) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let page = self.script("return document.body.innerText").await;
        panic!(
            "timed out waiting for {what}; the page says:\n{}",
            page.as_str().unwrap_or("")
        );
    }

    async fn screenshot(&self) -> Vec<u8> {
        let v = self.call("GET", &self.path("/screenshot"), None).await;
        base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap())
            .unwrap()
    }
}

impl Drop for Driver {
    /// Ends the session first (chromedriver then closes the browser, which would outlive a
    /// killed chromedriver), also when a test panics.
    fn drop(&mut self) {
        if !self.session.is_empty() {
            use std::io::{Read, Write};
            if let Ok(mut s) = std::net::TcpStream::connect(self.addr) {
                let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                let req = format!(
                    "DELETE /session/{} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
                    self.session, self.addr
                );
                if s.write_all(req.as_bytes()).is_ok() {
                    // The answer comes once the browser is closed.
                    let _ = s.read(&mut [0u8; 1024]);
                }
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Rows of a dead-letter panel.
fn rows(queue: &str) -> String {
    format!("document.querySelectorAll('section[data-dlq=\"{queue}\"] tbody tr').length")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_queues_and_redrives_and_purges_dead_letters_and_closes_connections_by_clicking()
 {
    if let Some(reason) = missing() {
        assert!(!required(), "REQUIRE_CLIENTS=1 but {reason}");
        eprintln!(
            "skipped: {reason} (apt-get install -y chromium chromium-driver; REQUIRE_CLIENTS=1 makes this fail)"
        );
        return;
    }
    let broker: Broker = Broker::new();
    let mut config = common::config();
    // A monitoring user sees every connection but may close only its own.
    config.users.push(stream_broker::UserConfig {
        name: "watcher".into(),
        password_hash: None,
        password: Some("pw".into()),
        tags: vec!["monitoring".into()],
        permissions: Default::default(),
    });
    config.management = Some(ManagementConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        allow_remote: false,
        sample_interval_ms: 500,
    });
    let server = common::server_with(config, broker.clone()).await;
    let api = server.management_addr().unwrap();
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    let mut dl = FieldTable::new();
    dl.insert("x-dead-letter-exchange", "");
    dl.insert("x-dead-letter-routing-key", "orders.dlq");
    ch.queue_declare("orders", QueueOptions::default(), dl)
        .unwrap();
    ch.queue_declare("orders.dlq", QueueOptions::default(), FieldTable::new())
        .unwrap();
    // Not named *.dlq, but its messages carry x-death: shown as a dead-letter queue too.
    let mut parked = FieldTable::new();
    parked.insert("x-dead-letter-exchange", "");
    parked.insert("x-dead-letter-routing-key", "parking");
    ch.queue_declare("retry", QueueOptions::default(), parked)
        .unwrap();
    ch.queue_declare("parking", QueueOptions::default(), FieldTable::new())
        .unwrap();
    ch.basic_publish(
        "",
        "retry",
        PublishOptions::default(),
        Message::new("parked"),
    )
    .await
    .unwrap();
    let got = ch.basic_get("retry", false).unwrap().unwrap();
    ch.basic_reject(got.delivery.delivery_tag, false).unwrap();
    for i in 0..4 {
        let m = Message::new(format!("order {i}"))
            .with_header("x-exception-message", format!("boom {i}"));
        ch.basic_publish("", "orders", PublishOptions::default(), m)
            .await
            .unwrap();
    }
    for _ in 0..4 {
        let got = ch.basic_get("orders", false).unwrap().unwrap();
        ch.basic_reject(got.delivery.delivery_tag, false).unwrap();
    }
    for i in 0..3 {
        ch.basic_publish(
            "",
            "orders",
            PublishOptions::default(),
            Message::new(format!("live {i}")),
        )
        .await
        .unwrap();
    }
    assert_eq!(broker.queue_counts("orders.dlq"), Some((4, 0)));
    let mut limit = FieldTable::new();
    limit.insert("max-length", FieldValue::I64(1000));
    broker
        .set_policy(PolicyDef {
            name: "orders-limit".into(),
            pattern: "^orders$".into(),
            apply_to: PolicyTarget::Queues,
            priority: 0,
            definition: limit,
        })
        .unwrap();

    let driver = Driver::start().await;
    driver.go(&format!("http://{api}/")).await;
    driver.type_into("#login-user", "guest").await;
    driver.type_into("#login-password", "guest").await;
    driver.click("#login-button").await;
    driver
        .until(
            "the queues table",
            "document.querySelector('tr[data-queue=\"orders\"] td.ready')?.textContent === '3'",
        )
        .await;
    assert_eq!(
        driver
            .script(
                "return document.querySelector('tr[data-queue=\"orders\"] td.policy').textContent"
            )
            .await,
        json!("orders-limit"),
        "the queue's policy"
    );
    driver
        .until("the dead letters", &format!("{} === 4", rows("orders.dlq")))
        .await;
    driver
        .until(
            "the parking queue, by its x-death",
            &format!("{} === 1", rows("parking")),
        )
        .await;
    assert_eq!(
        driver.script(&format!("return {}", rows("retry"))).await,
        json!(0),
        "a queue without dead letters is not shown"
    );
    let text = driver
        .script("return document.querySelector('section[data-dlq=\"orders.dlq\"]').innerText")
        .await;
    let text = text.as_str().unwrap();
    assert!(text.contains("x-death: rejected from orders"), "{text}");
    assert!(text.contains("x-exception-message: boom 0"), "{text}");
    // An AMQP client, listed with the connections.
    let client = common::lapin(&server).await;
    let _client_channel = client.create_channel().await.unwrap();
    // Some traffic on a queue of its own for the rates and charts, then keep the picture.
    let traffic = tokio::spawn({
        let broker = broker.clone();
        async move {
            let conn = broker.connect();
            let ch = conn.open_channel().unwrap();
            ch.queue_declare("payments", QueueOptions::default(), FieldTable::new())
                .unwrap();
            let consume = stream_engine::ConsumeOptions {
                no_ack: true,
                ..Default::default()
            };
            let mut consumer = ch.basic_consume("payments", consume).unwrap();
            for i in 0u64.. {
                ch.basic_publish(
                    "",
                    "payments",
                    PublishOptions::default(),
                    Message::new("pay"),
                )
                .await
                .unwrap();
                // Consumed in bursts, so depth goes up and down.
                if i % 40 > 25 {
                    while consumer.try_recv().is_some() {}
                }
                tokio::time::sleep(Duration::from_millis(10 + (i % 7) * 3)).await;
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(9000)).await;
    let png = driver.screenshot().await;
    assert_eq!(&png[1..4], b"PNG");
    let out = std::env::var("SCREENSHOT").unwrap_or_else(|_| {
        std::env::temp_dir()
            .join("stream-broker-management-page.png")
            .display()
            .to_string()
    });
    std::fs::write(&out, &png).unwrap();
    eprintln!("screenshot: {out}");

    traffic.abort();
    let _ = traffic.await;

    // Re-drive the first dead letter: back to `orders`.
    let first = broker.peek("orders.dlq", 10).unwrap()[0].seq;
    driver
        .click(&format!(
            "section[data-dlq=\"orders.dlq\"] tr[data-seq=\"{first}\"] button.redrive"
        ))
        .await;
    driver
        .until("one fewer", &format!("{} === 3", rows("orders.dlq")))
        .await;
    assert_eq!(broker.queue_counts("orders"), Some((4, 0)));
    assert_eq!(broker.queue_counts("orders.dlq"), Some((3, 0)));
    // Purge the next one.
    let second = broker.peek("orders.dlq", 10).unwrap()[0].seq;
    driver
        .click(&format!(
            "section[data-dlq=\"orders.dlq\"] tr[data-seq=\"{second}\"] button.purge"
        ))
        .await;
    driver
        .until("two fewer", &format!("{} === 2", rows("orders.dlq")))
        .await;
    assert_eq!(
        broker.queue_counts("orders"),
        Some((4, 0)),
        "purged, not re-driven"
    );
    // Re-drive all.
    driver
        .click("section[data-dlq=\"orders.dlq\"] button.redrive-all")
        .await;
    driver
        .until("none left", &format!("{} === 0", rows("orders.dlq")))
        .await;
    assert_eq!(broker.queue_counts("orders"), Some((6, 0)));
    // Purge all: dead-letter two more, then purge them from the page.
    for _ in 0..2 {
        let got = ch.basic_get("orders", false).unwrap().unwrap();
        ch.basic_reject(got.delivery.delivery_tag, false).unwrap();
    }
    driver
        .until("two again", &format!("{} === 2", rows("orders.dlq")))
        .await;
    driver
        .click("section[data-dlq=\"orders.dlq\"] button.purge-all")
        .await;
    driver
        .until("purged", &format!("{} === 0", rows("orders.dlq")))
        .await;
    assert_eq!(broker.queue_counts("orders.dlq"), Some((0, 0)));
    assert_eq!(broker.queue_counts("orders"), Some((4, 0)));

    // Close the AMQP client's connection from the page: it hears 320 and leaves the list.
    let connections = "document.querySelectorAll('#connections tbody tr').length";
    driver
        .until("the client's connection", &format!("{connections} === 1"))
        .await;
    let row = driver
        .script("return document.querySelector('#connections tbody tr').innerText")
        .await;
    let row = row.as_str().unwrap();
    assert!(
        row.contains("guest") && row.contains("lapin") && row.contains("running"),
        "{row}"
    );
    driver.click("#connections tbody tr button.close").await;
    driver
        .until("the connection closed", &format!("{connections} === 0"))
        .await;
    common::eventually("the client hears the close", || {
        !client.status().connected()
    })
    .await;

    // A monitoring user's Close on another's connection is refused with the reason shown,
    // and the user stays logged in.
    let other = common::lapin(&server).await;
    driver
        .script("sessionStorage.clear(); location.reload(); return 0")
        .await;
    driver.type_into("#login-user", "watcher").await;
    driver.type_into("#login-password", "pw").await;
    driver.click("#login-button").await;
    driver
        .until(
            "guest's connection, seen by a monitor",
            &format!("{connections} === 1"),
        )
        .await;
    driver.click("#connections tbody tr button.close").await;
    driver
        .until(
            "the refusal shown",
            "document.getElementById('status').textContent === 'User not authorised to access object'",
        )
        .await;
    assert_eq!(
        driver
            .script("return document.getElementById('app').hidden")
            .await,
        json!(false),
        "still logged in"
    );
    // The dead-letter queue it may not read says so in its own panel, and leaves the
    // page-wide status line to the refused Close (it overwrote it on every refresh before).
    driver
        .until(
            "the unreadable panel",
            "(document.querySelector('section.dlq[data-dlq=\"orders.dlq\"] .unreadable') || {}).textContent === \"access to queue 'orders.dlq' in vhost '/' refused for user 'watcher'\"",
        )
        .await;
    let refreshed = driver
        .script("return document.body.dataset.refreshed")
        .await;
    driver
        .until(
            "another refresh",
            &format!("document.body.dataset.refreshed !== {refreshed}"),
        )
        .await;
    assert_eq!(
        driver
            .script("return document.getElementById('status').textContent")
            .await,
        json!("User not authorised to access object")
    );
    assert!(other.status().connected());

    drop(driver);
    server.shutdown().await;
}
