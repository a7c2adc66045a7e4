//! A binding that asks the embedded binder for durable storage (a durable group queue, a
//! producer's required groups, persistent messages to a durable queue) is warned about once,
//! at startup: the engine keeps messages in memory only.

mod common;

use std::fmt;
use std::sync::{Arc, Mutex};

use binder_core::runtime::handler;
use binder_embedded::engine::Broker;
use common::app;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// A warning as logged: the `binding` field and the message.
#[derive(Debug, Clone, PartialEq)]
struct Warning {
    binding: String,
    message: String,
}

/// A subscriber that keeps the embedded binder's `warn` events.
#[derive(Debug, Clone, Default)]
struct Warnings(Arc<Mutex<Vec<Warning>>>);

impl Warnings {
    fn taken(&self) -> Vec<Warning> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

#[derive(Default)]
struct Fields {
    binding: Option<String>,
    message: Option<String>,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        match field.name() {
            "binding" => self.binding = Some(format!("{value:?}")),
            "message" => self.message = Some(format!("{value:?}")),
            _ => {}
        }
    }
}

impl Subscriber for Warnings {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= Level::WARN
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let meta = event.metadata();
        if *meta.level() != Level::WARN || !meta.target().starts_with("binder_embedded") {
            return;
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        self.0.lock().unwrap().push(Warning {
            binding: fields.binding.unwrap_or_default(),
            message: fields.message.unwrap_or_default(),
        });
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

const CONFIG: &str = r#"
spring.cloud.stream:
  bindings:
    billing-in: {destination: orders, group: billing}
    loose-in: {destination: orders, group: loose}
    anonymous-in: {destination: orders}
    orders-out: {destination: orders}
    transient-out: {destination: orders}
    required-out: {destination: audit, producer: {requiredGroups: [archive]}}
    events-out: {destination: events}
  rabbit.bindings:
    loose-in.consumer: {durableSubscription: false}
    transient-out.producer: {deliveryMode: NON_PERSISTENT}
"#;

#[tokio::test]
async fn bindings_asking_for_durability_are_warned_about_once_at_startup() {
    let warnings = Warnings::default();
    let _guard = tracing::subscriber::set_default(warnings.clone());
    let broker = Broker::new();
    let nothing = || handler::payload(|_: String| async {});
    let running = app(&broker, CONFIG)
        .listener("billing-in", nothing())
        .listener("loose-in", nothing())
        .listener("anonymous-in", nothing())
        .output("orders-out")
        .output("transient-out")
        .output("required-out")
        .output("events-out")
        .start()
        .await
        .unwrap();

    let mut got = warnings.taken();
    got.sort_by(|a, b| a.binding.cmp(&b.binding));
    let bindings: Vec<&str> = got.iter().map(|w| w.binding.as_str()).collect();
    assert_eq!(
        bindings,
        ["billing-in", "orders-out", "required-out"],
        "one warning per binding asking for durability: {got:#?}"
    );
    let lost = "but the embedded binder keeps messages in memory only: they are lost when the \
                process exits (set `spring.embedded.data-dir` to keep them on disk)";
    let expected = [
        "binding `billing-in` consumes from durable queues (`orders.billing`)",
        "binding `orders-out` sends persistent messages (deliveryMode PERSISTENT) to durable \
         queues (`orders.billing`)",
        "binding `required-out` declares durable queues for its required groups \
         (`audit.archive`)",
    ];
    for (warning, start) in got.iter().zip(expected) {
        assert_eq!(warning.message, format!("{start}, {lost}"));
    }

    // Not per message.
    let out = running.output("orders-out").unwrap();
    for i in 0..10 {
        out.send(&format!("order {i}")).await.unwrap();
    }
    let required = running.output("required-out").unwrap();
    required.send("kept").await.unwrap();
    assert_eq!(warnings.taken(), Vec::new(), "sending warns about nothing");
    running.shutdown().await;
}
