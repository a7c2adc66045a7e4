//! A service declared with the macros, run end to end on the embedded binder.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use binder_core::Message;
use binder_core::config::ConfigLoader;
use binder_core::runtime::{App, HandlerError, Out, SendError, State};
use binder_embedded::EmbeddedBinder;
use binder_embedded::engine::{Broker, ConsumeOptions};
use serde::{Deserialize, Serialize};
use stream_macros::{input, output, stream_listener};

#[input("orders-in")]
#[derive(Debug)]
pub struct OrdersIn;

#[output("invoices-out")]
#[derive(Debug)]
pub struct InvoicesOut;

#[output("audit-out")]
#[derive(Debug)]
pub struct AuditOut;

#[derive(Debug, Serialize, Deserialize)]
pub struct Order {
    id: u32,
    total: f64,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct Invoice {
    order: u32,
    amount: f64,
}

/// Counts cancellations (shared state).
#[derive(Debug, Default)]
pub struct Stats {
    cancelled: AtomicU32,
}

#[stream_listener(input = OrdersIn, output = InvoicesOut, condition = "headers['type'] == 'created'")]
async fn invoice(order: Order, audit: Out<AuditOut>) -> Result<Invoice, SendError> {
    audit.send(&format!("invoiced {}", order.id)).await?;
    Ok(Invoice {
        order: order.id,
        amount: order.total,
    })
}

#[stream_listener(input = OrdersIn, condition = "headers['type'] == 'cancelled'")]
async fn cancel(order: Order, stats: State<Stats>) -> Result<(), HandlerError> {
    if order.total < 0.0 {
        return Err(HandlerError::fatal("negative total"));
    }
    stats.cancelled.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

const CONFIG: &str = r#"
spring.cloud.stream:
  bindings:
    orders-in: {destination: orders, group: billing, consumer: {maxAttempts: 1}}
    invoices-out: {destination: invoices}
    audit-out: {destination: audit}
  rabbit.bindings.orders-in.consumer.autoBindDlq: true
"#;

async fn next(c: &mut binder_embedded::engine::Consumer) -> binder_embedded::engine::Delivery {
    tokio::time::timeout(Duration::from_secs(10), c.recv())
        .await
        .expect("nothing within 10 s")
        .expect("cancelled")
}

#[tokio::test]
async fn a_macro_declared_service_runs_end_to_end() {
    let broker = Broker::new();
    let config = ConfigLoader::new()
        .env(Vec::<(String, String)>::new())
        .yaml_str(CONFIG)
        .load()
        .unwrap();
    let app = App::builder(config)
        .binder("embedded", Arc::new(EmbeddedBinder::new(broker.clone())))
        .registered()
        .state(Stats::default())
        .start()
        .await
        .unwrap();

    // Observe the outputs and the DLQ on the broker itself.
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    let watch = |queue: &str, exchange: &str| {
        ch.queue_declare(queue, Default::default(), Default::default())
            .unwrap();
        ch.queue_bind(queue, exchange, "#", Default::default())
            .unwrap();
        ch.basic_consume(
            queue,
            ConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
        )
        .unwrap()
    };
    let mut invoices = watch("invoices.seen", "invoices");
    let mut audit = watch("audit.seen", "audit");
    let mut dlq = ch
        .basic_consume(
            "orders.billing.dlq",
            ConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
        )
        .unwrap();

    let publisher = app.publisher();
    let send = |id: u32, total: f64, kind: &str| {
        let m = Message::new(serde_json::to_vec(&Order { id, total }).unwrap())
            .with_header("type", kind);
        publisher.send_message("orders", m)
    };
    send(1, 10.5, "created").await.unwrap();
    let d = next(&mut invoices).await;
    let inv: Invoice = serde_json::from_slice(&d.message().payload).unwrap();
    assert_eq!(
        inv,
        Invoice {
            order: 1,
            amount: 10.5
        }
    );
    assert_eq!(
        &next(&mut audit).await.message().payload[..],
        br#""invoiced 1""#
    );

    send(2, 5.0, "cancelled").await.unwrap();
    send(3, -1.0, "cancelled").await.unwrap();
    let dead = next(&mut dlq).await;
    assert_eq!(
        dead.message().headers.get_str("x-exception-message"),
        Some("negative total")
    );

    // No listener for `shipped` and no unconditional listener: a failure, not a silent drop.
    send(4, 1.0, "shipped").await.unwrap();
    let dead = next(&mut dlq).await;
    let reason = dead
        .message()
        .headers
        .get_str("x-exception-message")
        .unwrap();
    assert!(
        reason.contains("no listener of binding `orders-in` accepts this message"),
        "{reason}"
    );

    let report = app.shutdown().await;
    assert!(report.drained);
    assert_eq!(broker.queue_counts("orders.billing"), Some((0, 0)));
}

#[test]
fn listeners_are_nameable_values() {
    assert_eq!(invoice_listener.input, OrdersIn::NAME);
    assert_eq!(invoice_listener.output, Some("invoices-out"));
    assert_eq!(
        invoice_listener.condition,
        Some("headers['type'] == 'created'")
    );
    assert_eq!(invoice_listener.uses, &["audit-out"]);
    assert_eq!(cancel_listener.output, None);
}

#[test]
fn listeners_declare_their_state_types() {
    let names: Vec<&str> = cancel_listener.states.iter().map(|s| s.name()).collect();
    assert_eq!(names, [std::any::type_name::<Stats>()]);
    assert!(invoice_listener.states.is_empty());
}

#[tokio::test]
async fn a_listener_whose_state_is_missing_stops_startup_naming_it() {
    let config = ConfigLoader::new()
        .env(Vec::<(String, String)>::new())
        .yaml_str(CONFIG)
        .load()
        .unwrap();
    let err = App::builder(config)
        .binder("embedded", Arc::new(EmbeddedBinder::new(Broker::new())))
        .registered()
        .start()
        .await
        .unwrap_err();
    let text = err.to_string();
    assert_eq!(err.problems.len(), 1, "{text}");
    assert!(
        text.contains("listener `cancel` of binding `orders-in` takes `State<macro_service::Stats>`, but no state of that type is registered"),
        "{text}"
    );
    // Debug (what `?` in main prints) is the same readable text.
    assert_eq!(format!("{err:?}"), text);
}
