//! How long a large topology takes to change, in three steps over `N` queues (10,000 by
//! default): each bound to a topic exchange of its own, then deleted; all bound to one direct
//! exchange; each bound to that exchange and to one of its own, then deleted.
//!
//! ```text
//! N=10000 cargo run --release -p stream-engine --example teardown
//! ```

use std::time::Instant;

use stream_engine::{Broker, Channel, ExchangeKind, FieldTable};

fn declare_exchange(ch: &Channel, name: &str, kind: ExchangeKind) {
    ch.exchange_declare(name, kind, Default::default(), FieldTable::new())
        .expect("declared");
}

fn declare_queue(ch: &Channel, name: &str) {
    ch.queue_declare(name, Default::default(), FieldTable::new())
        .expect("declared");
}

fn bind(ch: &Channel, queue: &str, exchange: &str, key: &str) {
    ch.queue_bind(queue, exchange, key, FieldTable::new())
        .expect("bound");
}

/// Binds each queue to a topic exchange of its own (declared here).
fn bind_each_to_its_own(ch: &Channel, n: usize) {
    for i in 0..n {
        declare_exchange(ch, &format!("x{i}"), ExchangeKind::Topic);
        bind(ch, &format!("q{i}"), &format!("x{i}"), "#");
    }
}

/// Deletes the queues and says how long it took.
fn delete_all(ch: &Channel, n: usize, what: &str) {
    let started = Instant::now();
    for i in 0..n {
        ch.queue_delete(&format!("q{i}"), false, false)
            .expect("deleted");
    }
    println!("{what}: {:?}", started.elapsed());
}

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
        declare_queue(&ch, &format!("q{i}"));
    }
    bind_each_to_its_own(&ch, n);
    delete_all(
        &ch,
        n,
        &format!("deleting {n} queues, each bound to an exchange of its own"),
    );

    declare_exchange(&ch, "one", ExchangeKind::Direct);
    let started = Instant::now();
    for i in 0..n {
        let q = format!("q{i}");
        declare_queue(&ch, &q);
        bind(&ch, &q, "one", &q);
    }
    println!(
        "binding {n} queues to one exchange: {:?}",
        started.elapsed()
    );

    bind_each_to_its_own(&ch, n);
    delete_all(
        &ch,
        n,
        "deleting them, each also bound to an exchange of its own",
    );
}
