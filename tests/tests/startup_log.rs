//! What a service logs when it starts: one line per binding, naming its binder, where the
//! messages go, the destination, the group and the queue.

use std::io::Write;
use std::sync::{Arc, Mutex};

use binder_core::config::ConfigLoader;
use binder_core::runtime::{App, handler};
use binder_embedded::EmbeddedBinder;
use binder_embedded::engine::Broker;

/// A writer into a shared buffer, for a subscriber whose output the test reads.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
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
}

// current_thread: the subscriber set as the thread's default sees every task of the test.
#[tokio::test(flavor = "current_thread")]
async fn every_binding_gets_one_startup_line() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

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
    let lines: Vec<&str> = text.lines().filter(|l| l.contains(" binding `")).collect();
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
