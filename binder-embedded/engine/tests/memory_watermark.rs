//! The memory high watermark holds for small messages: ten million 20-byte messages against a
//! 64 MiB watermark block the publisher, and the process stays within twice the watermark.
//!
//! It reads this process's resident set, so it is the only test in its file (each test file
//! runs in a process of its own).

mod common;

use common::rss;
use std::time::Duration;

use stream_engine::*;

const WATERMARK: usize = 64 << 20;
const MESSAGES: usize = 10_000_000;

#[tokio::test]
async fn ten_million_small_messages_block_the_publisher_within_twice_the_watermark() {
    let broker: Broker = Broker::with_config(BrokerConfig {
        memory_high_watermark: Some(WATERMARK),
        ..Default::default()
    });
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    let mut events = ch.events().unwrap();
    ch.queue_declare("small", QueueOptions::default(), FieldTable::new())
        .unwrap();

    let mut published = 0;
    let mut blocked = false;
    for i in 0..MESSAGES {
        match ch.try_basic_publish(
            "",
            "small",
            PublishOptions::default(),
            Message::new(vec![7u8; 20]),
        ) {
            TryPublish::Done(out) => {
                out.unwrap();
                published += 1;
            }
            TryPublish::Blocked(_) => {
                blocked = true;
                break;
            }
            TryPublish::Pending(_) => unreachable!("the in-memory store confirms at once"),
        }
        // Without a working bound this would grow to gigabytes: stop as soon as it is
        // clear that it does not hold.
        if i % 65_536 == 0 {
            let now = rss();
            assert!(
                now <= 2 * WATERMARK,
                "RSS {now} above twice the watermark after {published} messages, not blocked"
            );
        }
    }
    assert!(
        blocked,
        "all {published} messages were published: the publisher never blocked"
    );

    let event = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match events.recv().await {
                Some(ChannelEvent::Blocked { reason }) => return reason,
                Some(_) => {}
                None => panic!("the channel's events ended"),
            }
        }
    })
    .await
    .expect("no Blocked event within 10 s");
    assert_eq!(event, "low on memory");
    assert!(broker.is_blocked());

    let resident = rss();
    println!(
        "blocked after {published} messages: counted {} B, RSS {resident} B, watermark {WATERMARK} B",
        broker.memory_used()
    );
    assert!(
        broker.memory_used() > WATERMARK && broker.memory_used() < WATERMARK + 4096,
        "blocked just above the watermark, at {} B",
        broker.memory_used()
    );
    assert!(
        resident <= 2 * WATERMARK,
        "RSS {resident} B is above twice the {WATERMARK} B watermark"
    );
    // Publishers stay blocked: the message is handed back, not queued.
    match ch.try_basic_publish(
        "",
        "small",
        PublishOptions::default(),
        Message::new(vec![7u8; 20]),
    ) {
        TryPublish::Blocked(_) => {}
        other => panic!("published while blocked: {other:?}"),
    }
    assert_eq!(broker.queue_counts("small"), Some((published as u32, 0)));
}
