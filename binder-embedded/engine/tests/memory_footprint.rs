//! The memory the engine counts against its high watermark matches what queued messages cost
//! the process (RSS growth per message), for small messages, messages with headers and
//! properties, and deliveries awaiting their acknowledgement.
//!
//! It reads this process's resident set, so it is the only test in its file (each test file
//! runs in a process of its own).

mod common;

use common::rss;
use stream_engine::*;

fn publish_all(ch: &Channel, queue: &str, n: usize, make: impl Fn(usize) -> Message) {
    for i in 0..n {
        match ch.try_basic_publish("", queue, PublishOptions::default(), make(i)) {
            TryPublish::Done(out) => {
                out.unwrap();
            }
            TryPublish::Blocked(_) => panic!("no watermark is set, nothing blocks"),
            TryPublish::Pending(_) => panic!("the in-memory store confirms at once"),
        }
    }
}

/// Publishes `n` messages into a fresh queue; returns (RSS growth, counted growth) per message.
fn measure(
    broker: &Broker,
    ch: &Channel,
    queue: &str,
    n: usize,
    make: impl Fn(usize) -> Message,
) -> (f64, f64) {
    ch.queue_declare(queue, QueueOptions::default(), FieldTable::new())
        .unwrap();
    let (rss0, counted0) = (rss(), broker.memory_used());
    publish_all(ch, queue, n, make);
    let (rss1, counted1) = (rss(), broker.memory_used());
    (
        (rss1 - rss0) as f64 / n as f64,
        (counted1 - counted0) as f64 / n as f64,
    )
}

#[tokio::test]
async fn the_counted_footprint_of_queued_messages_matches_their_resident_cost() {
    let broker: Broker = Broker::with_config(BrokerConfig {
        memory_high_watermark: None,
        ..Default::default()
    });
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    const N: usize = 200_000;

    let small = measure(&broker, &ch, "small", N, |_| Message::new(vec![7u8; 20]));
    let rich = measure(&broker, &ch, "rich", N / 4, |i| {
        let mut m = Message::new(vec![7u8; 200])
            .with_header("kind", "order-created")
            .with_header("attempt", FieldValue::I32(1))
            .with_header("source", format!("instance-{i}"));
        m.properties.message_id = Some(format!("message-{i:08}"));
        m.properties.correlation_id = Some(format!("correlation-{i:08}"));
        m
    });
    // Deliveries awaiting their ack: the channel's record of each, and the delivery the
    // consumer took (as the binder keeps a batch until the runtime settles it).
    let holder = conn.open_channel().unwrap();
    let held = {
        ch.queue_declare("held", QueueOptions::default(), FieldTable::new())
            .unwrap();
        let (rss0, counted0) = (rss(), broker.memory_used());
        publish_all(&ch, "held", N, |_| Message::new(vec![7u8; 20]));
        holder.basic_qos(0, false).unwrap();
        let mut consumer = holder
            .basic_consume("held", ConsumeOptions::default())
            .unwrap();
        let mut taken = Vec::with_capacity(N);
        while taken.len() < N {
            assert!(consumer.recv_many(&mut taken, N).await > 0);
        }
        assert_eq!(broker.queue_unacked("held"), Some(N as u32));
        let (rss1, counted1) = (rss(), broker.memory_used());
        let per = |a: usize, b: usize| (a - b) as f64 / N as f64;
        (per(rss1, rss0), per(counted1, counted0))
    };
    for (what, (real, counted)) in [("small", small), ("rich", rich), ("held", held)] {
        println!("{what}: resident {real:.0} B per message, counted {counted:.0} B");
        assert!(
            real <= counted * 1.1,
            "{what}: counted {counted:.0} B per message, but each costs {real:.0} B"
        );
        assert!(
            real >= counted * 0.6,
            "{what}: counted {counted:.0} B per message, far above its cost of {real:.0} B"
        );
    }
}
