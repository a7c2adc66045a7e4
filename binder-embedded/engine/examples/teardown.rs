//! How long deleting queues takes in a large topology: `N` topic exchanges (10,000 by
//! default), each bound to its own queue, then every queue deleted.
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
    for i in 0..n {
        let (x, q) = (format!("x{i}"), format!("q{i}"));
        ch.exchange_declare(
            &x,
            ExchangeKind::Topic,
            Default::default(),
            FieldTable::new(),
        )
        .expect("declared");
        ch.queue_declare(&q, Default::default(), FieldTable::new())
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
        "deleting {n} queues bound to {n} exchanges: {:?}",
        started.elapsed()
    );
}
