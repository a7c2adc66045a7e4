//! What routing through a topic exchange costs as its bindings grow: publishes to a topic
//! exchange with `N` bindings (10,000 by default; patterns `orders.<i>.*`, spread over 100
//! queues) against the same publishes to one with a single binding (`orders.*.*`), round by
//! round in one process. Every message matches exactly one binding (keys
//! `orders.<i>.created`, `i` cycling over the bindings). Prints each round's publish rates and
//! their ratio (N bindings / 1), then the median and min–max of the ratios.
//!
//! ```text
//! N=10000 ROUNDS=5 MESSAGES=100000 cargo run --release -p stream-engine --example topic_routing
//! ```

use std::time::Instant;

use stream_engine::{Broker, Channel, ExchangeKind, FieldTable, Message, TryPublish};

const QUEUES: usize = 100;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Publishes `messages` messages to `exchange`, keys cycling over `keys`; msg/s.
fn publish(ch: &Channel, exchange: &str, keys: &[String], messages: usize) -> f64 {
    let started = Instant::now();
    for i in 0..messages {
        let key = &keys[i % keys.len()];
        match ch.try_basic_publish(exchange, key, Default::default(), Message::new("x")) {
            TryPublish::Done(Ok(_)) => {}
            other => panic!("publish: {other:?}"),
        }
    }
    messages as f64 / started.elapsed().as_secs_f64()
}

fn purge(ch: &Channel) {
    for q in 0..QUEUES {
        ch.queue_purge(&format!("q{q}")).expect("purged");
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main]
async fn main() {
    let n = env("N", 10_000).max(1);
    let rounds = env("ROUNDS", 5).max(1);
    let messages = env("MESSAGES", 100_000).max(1);
    let broker: Broker = Broker::new();
    let conn = broker.connect();
    let ch = conn.open_channel().expect("a channel");
    for q in 0..QUEUES {
        ch.queue_declare(&format!("q{q}"), Default::default(), FieldTable::new())
            .expect("declared");
    }
    for x in ["one", "many"] {
        ch.exchange_declare(
            x,
            ExchangeKind::Topic,
            Default::default(),
            FieldTable::new(),
        )
        .expect("declared");
    }
    ch.queue_bind("q0", "one", "orders.*.*", FieldTable::new())
        .expect("bound");
    for i in 0..n {
        let queue = format!("q{}", i % QUEUES);
        ch.queue_bind(&queue, "many", &format!("orders.{i}.*"), FieldTable::new())
            .expect("bound");
    }
    let keys: Vec<String> = (0..n).map(|i| format!("orders.{i}.created")).collect();

    println!(
        "{messages} publishes per run; topic exchange with {n} bindings against one with 1; \
         warm-up + {rounds} rounds"
    );
    let mut ratios = Vec::new();
    for round in 0..=rounds {
        let mut rate = [0.0; 2];
        // Alternate which goes first.
        for which in [round % 2, 1 - round % 2] {
            let exchange = ["one", "many"][which];
            rate[which] = publish(&ch, exchange, &keys, messages);
            purge(&ch);
        }
        let ratio = rate[1] / rate[0];
        let label = if round == 0 {
            "warm-up".to_owned()
        } else {
            format!("round {round}")
        };
        println!(
            "{label:>8}: 1 binding {:.0} msg/s, {n} bindings {:.0} msg/s, ratio {ratio:.3}",
            rate[0], rate[1]
        );
        if round > 0 {
            ratios.push(ratio);
        }
    }
    let min = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let max = ratios.iter().copied().fold(0.0, f64::max);
    println!(
        "ratio {n} bindings / 1 binding: {:.3} ({min:.3}–{max:.3}), higher is better",
        median(ratios)
    );
}
