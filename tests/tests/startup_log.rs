//! What a service logs when it starts (one line per binding, naming its binder, where the
//! messages go, the destination, the group and the queue) and when something holds it up: a
//! lost subscription, an unreachable broker, sends waiting on a blocked broker.

use std::io::Write;
use std::sync::{Arc, Mutex};

use binder_core::config::ConfigLoader;
use binder_core::runtime::{App, handler};
use binder_embedded::EmbeddedBinder;
use binder_embedded::engine::Broker;

/// A writer into a shared buffer, for a subscriber whose output the test reads.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>, Arc<tokio::sync::Notify>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        self.1.notify_waiters();
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }

    /// Waits (10 s at most) until the output has a line containing `needle`, and returns it.
    async fn line_with(&self, needle: &str) -> String {
        let wait = async {
            loop {
                let written = self.1.notified();
                if let Some(line) = self.text().lines().find(|l| l.contains(needle)) {
                    return line.to_owned();
                }
                written.await;
            }
        };
        match tokio::time::timeout(std::time::Duration::from_secs(10), wait).await {
            Ok(line) => line,
            Err(_) => panic!("no line with `{needle}` within 10 s:\n{}", self.text()),
        }
    }

    /// A subscriber writing here, set as this thread's default while the guard lives.
    fn install(&self) -> tracing::subscriber::DefaultGuard {
        let writer = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::set_default(subscriber)
    }
}

// current_thread: the subscriber set as the thread's default sees every task of the test.
#[tokio::test(flavor = "current_thread")]
async fn every_binding_gets_one_startup_line() {
    let captured = Captured::default();
    let _guard = captured.install();

    let config = ConfigLoader::new()
        .env(Vec::<(String, String)>::new())
        .yaml_str(
            "spring.cloud.stream.bindings:\n  words-in: {destination: startup-log-words, group: counter}\n  events-in: {destination: startup-log-events}\n  counts-out: {destination: startup-log-counts}\n",
        )
        .load()
        .unwrap();
    let app = App::builder(config)
        .binder("embedded", Arc::new(EmbeddedBinder::new(Broker::new())))
        .listener("words-in", handler::payload(|_: String| async {}))
        .listener("events-in", handler::payload(|_: String| async {}))
        .output("counts-out")
        .start()
        .await
        .unwrap();
    app.shutdown().await;

    let text = captured.text();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("binder_core::runtime::start:") && l.contains(" binding `"))
        .collect();
    assert_eq!(lines.len(), 3, "{text}");
    let in_process = "binder `embedded` on in-process broker: messages stay inside this process and are lost when it exits";
    let words = lines.iter().find(|l| l.contains("`words-in`")).unwrap();
    assert!(words.contains(" INFO "), "{words}");
    assert!(words.contains(in_process), "{words}");
    assert!(
        words.contains(
            "destination `startup-log-words`, group `counter`, queue `startup-log-words.counter`"
        ),
        "{words}"
    );
    let events = lines.iter().find(|l| l.contains("`events-in`")).unwrap();
    assert!(
        events.contains("no group (anonymous), queue `startup-log-events.anonymous."),
        "{events}"
    );
    let counts = lines.iter().find(|l| l.contains("`counts-out`")).unwrap();
    assert!(counts.contains("output binding `counts-out`"), "{counts}");
    assert!(counts.contains(in_process), "{counts}");
    assert!(
        counts.contains("destination `startup-log-counts`"),
        "{counts}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_lost_subscription_and_the_resubscription_are_logged_at_warn() {
    let captured = Captured::default();
    let _guard = captured.install();
    let broker = Broker::new();
    let config = ConfigLoader::new()
        .env(Vec::<(String, String)>::new())
        .yaml_str(
            "spring.cloud.stream:\n  bindings.jobs-in: {destination: startup-log-jobs, group: worker}\n  rabbit.bindings.jobs-in.consumer.recoveryInterval: 20\n",
        )
        .load()
        .unwrap();
    let app = App::builder(config)
        .binder("embedded", Arc::new(EmbeddedBinder::new(broker.clone())))
        .listener("jobs-in", handler::payload(|_: String| async {}))
        .start()
        .await
        .unwrap();
    // Returns once the binding is running: subscribed.
    app.resume("jobs-in").await.unwrap();
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    ch.queue_delete("startup-log-jobs.worker", false, false)
        .unwrap();
    let ended = captured
        .line_with("the broker ended the subscription")
        .await;
    assert!(ended.contains(" WARN "), "{ended}");
    assert!(ended.contains("queue=startup-log-jobs.worker"), "{ended}");
    let refused = captured.line_with("cannot consume; retrying").await;
    assert!(refused.contains(" WARN "), "{refused}");
    assert!(refused.contains("startup-log-jobs.worker"), "{refused}");

    ch.queue_declare(
        "startup-log-jobs.worker",
        Default::default(),
        Default::default(),
    )
    .unwrap();
    let again = captured.line_with("consuming again").await;
    assert!(again.contains(" WARN "), "{again}");
    assert!(again.contains("binding=jobs-in"), "{again}");
    app.shutdown().await;
}

#[tokio::test(flavor = "current_thread")]
async fn sends_waiting_on_a_blocked_embedded_broker_are_logged_once_at_warn() {
    let captured = Captured::default();
    let _guard = captured.install();
    let broker = Broker::new();
    let config = ConfigLoader::new()
        .env(Vec::<(String, String)>::new())
        .yaml_str("spring.cloud.stream.bindings.held-out.destination: blocked-log-held\n")
        .load()
        .unwrap();
    let app = App::builder(config)
        .binder("embedded", Arc::new(EmbeddedBinder::new(broker.clone())))
        .output("held-out")
        .start()
        .await
        .unwrap();
    let out = app.output("held-out").unwrap();
    broker.set_disk_alarm(true);
    let sends: Vec<_> = (0..3)
        .map(|i| {
            let out = out.clone();
            tokio::spawn(async move { out.send(&format!("held {i}")).await })
        })
        .collect();
    let waits = captured.line_with("sends to `blocked-log-held` wait").await;
    assert!(waits.contains(" WARN "), "{waits}");
    assert!(waits.contains("low on disk"), "{waits}");
    broker.set_disk_alarm(false);
    for send in sends {
        send.await.unwrap().unwrap();
    }
    let resumed = captured
        .line_with("sends to `blocked-log-held` go on after")
        .await;
    assert!(resumed.contains(" INFO "), "{resumed}");
    let text = captured.text();
    assert_eq!(
        text.matches("sends to `blocked-log-held` wait").count(),
        1,
        "one warning for the three waiting sends:\n{text}"
    );
    assert_eq!(
        text.matches("sends to `blocked-log-held` go on").count(),
        1,
        "{text}"
    );
    app.shutdown().await;
}

#[tokio::test(flavor = "current_thread")]
async fn an_unreachable_broker_is_logged_at_warn_while_startup_waits() {
    let captured = Captured::default();
    let _guard = captured.install();
    let config = ConfigLoader::new()
        .env(Vec::<(String, String)>::new())
        .yaml_str(
            "spring.cloud.stream:\n  defaultBinder: rabbit\n  bindings.down-out.destination: startup-log-down\n",
        )
        .load()
        .unwrap();
    // Nothing listens on port 1 of loopback: every connection attempt is refused.
    let binder = Arc::new(binder_rabbit::RabbitBinder::new(
        binder_rabbit::RabbitSettings::from_uri("amqp://guest:guest@127.0.0.1:1/%2f"),
    ));
    let starting = App::builder(config)
        .binder("rabbit", binder)
        .output("down-out")
        .start();
    tokio::select! {
        _ = starting => panic!("startup cannot finish without a broker"),
        line = captured.line_with("broker unreachable; waiting for it") => {
            assert!(line.contains(" WARN "), "{line}");
            assert!(line.contains("binding `down-out`"), "{line}");
            assert!(line.contains("127.0.0.1:1"), "{line}");
        }
    }
    let refused = captured.line_with("cannot connect to RabbitMQ").await;
    assert!(
        refused.contains(" WARN ") && refused.contains("Connection refused"),
        "{refused}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn startup_gives_up_on_an_unreachable_broker_after_startup_timeout() {
    let config = ConfigLoader::new()
        .env(Vec::<(String, String)>::new())
        .yaml_str(
            "spring.cloud.stream:\n  defaultBinder: rabbit\n  startupTimeout: 300\n  bindings.down-out.destination: startup-timeout-down\n",
        )
        .load()
        .unwrap();
    assert_eq!(
        config.startup_timeout,
        Some(std::time::Duration::from_millis(300))
    );
    let binder = Arc::new(binder_rabbit::RabbitBinder::new(
        binder_rabbit::RabbitSettings::from_uri("amqp://guest:guest@127.0.0.1:1/%2f"),
    ));
    let started = std::time::Instant::now();
    let error = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        App::builder(config)
            .binder("rabbit", binder)
            .output("down-out")
            .start(),
    )
    .await
    .expect("startup gives up by itself")
    .unwrap_err()
    .to_string();
    assert!(started.elapsed() >= std::time::Duration::from_millis(300));
    assert!(
        error.contains("binding `down-out`")
            && error.contains("gave up after spring.cloud.stream.startupTimeout (300ms)"),
        "{error}"
    );
}
