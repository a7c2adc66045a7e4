//! Every message that fails for good is logged once, at `warn`, with the binding, the queue,
//! the attempts, the error and what was done with it. The log is captured by a small
//! subscriber on the test's thread (a current-thread runtime runs every task there).

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use binder_core::Message;
use binder_core::runtime::{FailureAction, HandlerError, handler};
use binder_embedded::engine::Broker;
use common::{app, recv};
use tokio::sync::mpsc;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata};

/// An event's fields by name (its text under `message`).
type Fields = BTreeMap<String, String>;

/// The runtime's events: level and fields.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<(Level, Fields)>>>);

struct Visitor<'a>(&'a mut Fields);

impl Visit for Visitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl tracing::Subscriber for Captured {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        if !event.metadata().target().starts_with("binder_core") {
            return;
        }
        let mut fields = BTreeMap::new();
        event.record(&mut Visitor(&mut fields));
        self.0
            .lock()
            .unwrap()
            .push((*event.metadata().level(), fields));
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

impl Captured {
    fn warnings(&self) -> Vec<Fields> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(level, _)| *level == Level::WARN)
            .map(|(_, fields)| fields.clone())
            .collect()
    }
}

/// Runs a service whose handler fails `message` once (it succeeds on a redelivery), waits
/// for the failure to be handled and returns what was done and the warnings logged.
async fn fail_once(yaml: &str, message: Message) -> (FailureAction, Vec<Fields>) {
    let captured = Captured::default();
    let _default = tracing::subscriber::set_default(captured.clone());
    let broker = Broker::new();
    let (failed, mut failures) = mpsc::unbounded_channel();
    let (handled, mut handles) = mpsc::unbounded_channel();
    let h = handler::incoming(move |inc| {
        let handled = handled.clone();
        async move {
            if inc.redelivered {
                let _ = handled.send(());
                return Ok(());
            }
            Err(HandlerError::fatal("cannot ship"))
        }
    });
    let running = app(&broker, yaml)
        .listener("in", h)
        .on_error(move |f| {
            let _ = failed.send(f.action);
        })
        .start()
        .await
        .unwrap();
    running
        .publisher()
        .send_message("orders", message)
        .await
        .unwrap();
    let action = recv(&mut failures).await;
    if action == FailureAction::Requeued {
        recv(&mut handles).await;
    }
    running.shutdown().await;
    (action, captured.warnings())
}

fn config(consumer: &str, rabbit: &str) -> String {
    format!(
        "spring.cloud.stream:\n  bindings.in: {{destination: orders, group: svc, consumer: {{maxAttempts: 1{consumer}}}}}\n  rabbit.bindings.in.consumer: {{{rabbit}}}\n"
    )
}

/// The one warning of a failure, checked for the binding, queue, attempts and error.
fn the_warning(warnings: &[Fields]) -> &Fields {
    assert_eq!(warnings.len(), 1, "one warning per failure: {warnings:#?}");
    let w = &warnings[0];
    assert_eq!(w["binding"], "in");
    assert_eq!(w["queue"], "orders.svc");
    assert_eq!(w["attempts"], "1");
    assert_eq!(w["error"], "cannot ship");
    w
}

#[tokio::test]
async fn a_republish_to_the_dlq_is_logged_once() {
    let (action, warnings) = fail_once(&config("", "autoBindDlq: true"), Message::new("1")).await;
    assert_eq!(action, FailureAction::Republished);
    let w = the_warning(&warnings);
    assert!(
        w["message"].contains("dead-lettered: republished to exchange `DLX`"),
        "{w:?}"
    );
}

#[tokio::test]
async fn a_republish_the_frame_cannot_take_is_logged_once_as_a_reject() {
    let foreign = Message::new("1").with_header("x-foreign", "f".repeat(140_000));
    let (action, warnings) = fail_once(&config("", "autoBindDlq: true"), foreign).await;
    assert_eq!(action, FailureAction::Rejected);
    let w = the_warning(&warnings);
    assert!(
        w["message"].contains("republishing to the DLQ failed")
            && w["message"].contains("frame_max"),
        "{w:?}"
    );
}

#[tokio::test]
async fn a_reject_to_the_broker_dlx_is_logged_once() {
    let yaml = config("", "autoBindDlq: true, republishToDlq: false");
    let (action, warnings) = fail_once(&yaml, Message::new("1")).await;
    assert_eq!(action, FailureAction::Rejected);
    let w = the_warning(&warnings);
    assert!(w["message"].contains("message rejected"), "{w:?}");
}

#[tokio::test]
async fn a_requeue_is_logged_once() {
    let (action, warnings) =
        fail_once(&config("", "requeueRejected: true"), Message::new("1")).await;
    assert_eq!(action, FailureAction::Requeued);
    let w = the_warning(&warnings);
    assert!(w["message"].contains("message requeued"), "{w:?}");
}

#[tokio::test]
async fn a_dropped_auto_ack_message_is_logged_once() {
    let (action, warnings) =
        fail_once(&config("", "acknowledgeMode: NONE"), Message::new("1")).await;
    assert_eq!(action, FailureAction::Dropped);
    let w = the_warning(&warnings);
    assert!(w["message"].contains("message dropped"), "{w:?}");
}
