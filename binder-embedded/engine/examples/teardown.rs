//! How long a large topology takes to change: `N` queues (10,000 by default) bound to one
//! direct exchange, then each bound to a topic exchange of its own, then every queue deleted.
//!
//! ```text
//! N=10000 cargo run --release -p stream-engine --example teardown
//! ```

use std::time::Instant;

use stream_engine::{Broker, ExchangeKind, FieldTable};

#[tokio::main]
async fn main() {
    let n: usize = std::env::var("N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let broker: Broker = Broker::new();
    let conn = broker.connect();
    let ch = conn.open_channel().expect("a channel");
    ch.exchange_declare(
        "one",
        ExchangeKind::Direct,
        Default::default(),
        FieldTable::new(),
    )
    .expect("declared");
    let started = Instant::now();
    for i in 0..n {
        let q = format!("q{i}");
        ch.queue_declare(&q, Default::default(), FieldTable::new())
            .expect("declared");
        ch.queue_bind(&q, "one", &q, FieldTable::new())
            .expect("bound");
    }
    println!(
        "binding {n} queues to one exchange: {:?}",
        started.elapsed()
    );
    for i in 0..n {
        let (x, q) = (format!("x{i}"), format!("q{i}"));
        ch.exchange_declare(
            &x,
            ExchangeKind::Topic,
            Default::default(),
            FieldTable::new(),
        )
        .expect("declared");
        ch.queue_bind(&q, &x, "#", FieldTable::new())
            .expect("bound");
    }
    let started = Instant::now();
    for i in 0..n {
        ch.queue_delete(&format!("q{i}"), false, false)
            .expect("deleted");
    }
    println!(
        "deleting {n} queues, each bound to that exchange and to one of {n} others: {:?}",
        started.elapsed()
    );
}
