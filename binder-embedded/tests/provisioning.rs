//! Provisioning on the embedded binder: the topology of every binding is declared on one
//! channel the binder keeps (not on a channel per binding), and a declaration the broker
//! refuses (which closes that channel) leaves the next binding able to declare its own.

mod common;

use binder_core::binder::{Binder, BinderErrorKind};
use binder_embedded::EmbeddedBinder;
use binder_embedded::engine::{Broker, ExchangeKind, ExchangeOptions, FieldTable};

/// Bindings `out0`… with their own destinations `dest0`…, and one to `clash`.
const YAML: &str = "
spring.cloud.stream.bindings:
  out0: { destination: dest0 }
  out1: { destination: dest1 }
  out2: { destination: dest2 }
  out3: { destination: dest3 }
  clashing: { destination: clash }
  in0: { destination: dest0, group: g }
";

#[tokio::test]
async fn every_binding_is_declared_on_one_kept_channel() {
    let broker = Broker::new();
    let binder = EmbeddedBinder::new(broker.clone());
    let cfg = common::config(YAML);
    let mut producers = Vec::new();
    for i in 0..4 {
        let binding = cfg.binding(&format!("out{i}"));
        producers.push(binder.bind_producer(&binding).await.expect("bind producer"));
        assert!(broker.exchange_exists(&format!("dest{i}")));
        // Each producer has its own channel; the declarations share one more.
        assert_eq!(broker.totals().channels, i + 2, "after out{i}");
    }
    let consumer = binder
        .bind_consumer(&cfg.binding("in0"))
        .await
        .expect("bind consumer");
    assert_eq!(broker.queue_counts("dest0.g"), Some((0, 0)));
    // The consumer opens channels when it subscribes, not when it is bound.
    assert_eq!(broker.totals().channels, 5);
    drop(consumer);
    drop(producers);
    assert_eq!(broker.totals().channels, 1, "the declaration channel stays");
    binder.close().await;
    assert_eq!(broker.totals().channels, 0, "closing the binder closes it");
}

#[tokio::test]
async fn a_refused_declaration_does_not_stop_the_next_one() {
    let broker = Broker::new();
    // `clash` exists as a direct exchange: the binder's topic declare of it is refused
    // (PRECONDITION_FAILED), which closes the channel it was made on.
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    ch.exchange_declare(
        "clash",
        ExchangeKind::Direct,
        ExchangeOptions::default(),
        FieldTable::new(),
    )
    .unwrap();
    drop(ch);

    let binder = EmbeddedBinder::new(broker.clone());
    let cfg = common::config(YAML);
    let first = binder
        .bind_producer(&cfg.binding("out0"))
        .await
        .expect("bind out0");
    let refused = binder
        .bind_producer(&cfg.binding("clashing"))
        .await
        .expect_err("a topic declare of a direct exchange is refused");
    assert_eq!(refused.kind(), BinderErrorKind::Declare, "{refused}");
    assert!(refused.to_string().contains("clash"), "{refused}");
    // The next binding declares on a channel of its own and is bound.
    let next = binder
        .bind_producer(&cfg.binding("out1"))
        .await
        .expect("bind out1 after the refusal");
    assert!(broker.exchange_exists("dest1"));
    // out0's and out1's producers, and the declaration channel opened after the refusal.
    assert_eq!(broker.totals().channels, 3);
    drop((first, next));
}
