//! Paging: above `memory_paging_ratio` of the memory high watermark, persistent messages in
//! durable queues are kept as stubs and read back from the segments when they are delivered,
//! fetched, inspected or dead-lettered.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use stream_engine::*;
use stream_store::{DiskStore, FaultFs, StoreConfig, SyncMode};

/// A watermark of 2 MiB: paging starts above 1 MiB (the default ratio, 0.5).
fn low_watermark() -> BrokerConfig {
    BrokerConfig {
        memory_high_watermark: Some(2 * 1024 * 1024),
        ..BrokerConfig::default()
    }
}

fn open(fs: &FaultFs, dir: &Path, config: StoreConfig) -> (DiskStore, Broker) {
    let store = DiskStore::open_with(Arc::new(fs.clone()), dir, config).expect("store opens");
    let broker = Broker::with_store(low_watermark(), store.clone()).expect("recovers");
    (store, broker)
}

/// A broker that pages every message a queue holds beyond the 512 the engine always keeps.
fn open_paging_everything(fs: &FaultFs, dir: &Path, config: StoreConfig) -> (DiskStore, Broker) {
    let store = DiskStore::open_with(Arc::new(fs.clone()), dir, config).expect("store opens");
    let broker_config = BrokerConfig {
        memory_high_watermark: Some(1 << 30),
        memory_paging_ratio: 1e-9,
        ..BrokerConfig::default()
    };
    let broker = Broker::with_store(broker_config, store.clone()).expect("recovers");
    (store, broker)
}

/// Message `i`: a 200-byte body naming it, a header and two properties.
fn message(i: u64) -> Message {
    let mut body = format!("message {i:06} ").into_bytes();
    body.resize(200, b'.');
    let mut m = persistent(body).with_header("n", FieldValue::I64(i as i64));
    m.properties.message_id = Some(format!("id-{i}"));
    m.properties.content_type = Some(Arc::from("text/plain"));
    m
}

fn check(i: u64, m: &Message) {
    let body = String::from_utf8(m.payload.to_vec()).unwrap();
    assert!(
        body.starts_with(&format!("message {i:06} ")),
        "message {i} has body {body:?}"
    );
    assert_eq!(m.payload.len(), 200);
    assert_eq!(m.headers.get("n"), Some(&FieldValue::I64(i as i64)), "{i}");
    assert_eq!(
        m.properties.message_id.as_deref(),
        Some(format!("id-{i}").as_str())
    );
    assert_eq!(m.content_type(), Some("text/plain"));
    assert!(m.properties.is_persistent());
}

async fn publish(ch: &Channel, queue: &str, range: std::ops::Range<u64>) {
    for i in range {
        let outcome = ch
            .basic_publish("", queue, Default::default(), message(i))
            .await
            .unwrap();
        assert_eq!(outcome.status, PublishStatus::Routed(1));
    }
}

/// A confirm channel on `conn` with the durable queue `q` declared.
fn durable_q(conn: &Connection) -> Channel {
    let ch = conn.open_channel().unwrap();
    ch.queue_declare("q", durable_queue(), FieldTable::new())
        .unwrap();
    ch.confirm_select().unwrap();
    ch
}

async fn next(consumer: &mut Consumer) -> Delivery {
    tokio::time::timeout(Duration::from_secs(10), consumer.recv())
        .await
        .expect("a delivery within 10 s")
        .expect("consumer open")
}

#[tokio::test]
async fn a_paged_backlog_is_delivered_complete_and_in_order() {
    let fs = FaultFs::new();
    let (_store, broker) = open(&fs, Path::new("/data"), StoreConfig::default());
    let conn = broker.connect();
    let ch = durable_q(&conn);
    publish(&ch, "q", 0..5_000).await;
    let paged = broker.paged_messages("q").unwrap();
    assert!(paged > 4_000, "only {paged} of 5000 paged");
    // Messages are held up to the paging threshold (1 MiB), the rest count 56 bytes each.
    let used = broker.memory_used();
    assert!(
        used <= 1024 * 1024 + 2 * 1024 + paged * 56,
        "memory count {used} with {paged} paged"
    );
    assert!(!broker.is_blocked());
    // Inspection reads paged bodies back without taking them.
    let peeked = broker.peek("q", 1_000).unwrap();
    assert_eq!(peeked.len(), 1_000);
    for (i, p) in peeked.iter().enumerate() {
        check(i as u64, &p.record.message);
    }
    assert_eq!(
        broker.paged_messages("q"),
        Some(paged),
        "peek changes nothing"
    );

    ch.basic_qos(100, false).unwrap();
    let mut consumer = ch.basic_consume("q", ConsumeOptions::default()).unwrap();
    for i in 0..5_000 {
        let d = next(&mut consumer).await;
        check(i, d.message());
        assert!(!d.redelivered);
        ch.basic_ack(d.delivery_tag, false).unwrap();
    }
    assert_eq!(broker.queue_counts("q"), Some((0, 1)));
    let (read, failed) = broker.pages_read();
    assert!(read >= paged as u64, "{read} read back, {paged} paged");
    assert_eq!(failed, 0);
}

#[tokio::test]
async fn paged_messages_are_redelivered_and_requeued_with_their_bodies() {
    let fs = FaultFs::new();
    let (_store, broker) = open(&fs, Path::new("/data"), StoreConfig::default());
    let conn = broker.connect();
    let ch = durable_q(&conn);
    publish(&ch, "q", 0..3_000).await;
    assert!(broker.paged_messages("q").unwrap() > 2_000);
    // Take 1,500 (the last 1,000 of them read back from the store), requeue them all.
    let taker = conn.open_channel().unwrap();
    let mut tags = Vec::new();
    for i in 0..1_500 {
        let got = taker.basic_get("q", false).unwrap().unwrap();
        check(i, got.delivery.message());
        tags.push(got.delivery.delivery_tag);
    }
    taker.basic_nack(0, true, true).unwrap();
    // Take 100 more on a channel that is then closed: they go back too.
    let closer = conn.open_channel().unwrap();
    for i in 0..100 {
        let got = closer.basic_get("q", false).unwrap().unwrap();
        check(i, got.delivery.message());
        assert!(got.delivery.redelivered);
    }
    closer.close();
    let mut consumer = ch.basic_consume("q", ConsumeOptions::default()).unwrap();
    for i in 0..3_000 {
        let d = next(&mut consumer).await;
        check(i, d.message());
        assert_eq!(d.redelivered, i < 1_500, "message {i}");
        ch.basic_ack(d.delivery_tag, false).unwrap();
    }
    assert_eq!(broker.pages_read().1, 0);
}

#[tokio::test]
async fn compaction_and_segment_deletion_keep_stubs_readable() {
    let fs = FaultFs::new();
    let config = StoreConfig {
        segment_bytes: 64 * 1024,
        ..StoreConfig::default()
    };
    let (store, broker) = open(&fs, Path::new("/data"), config);
    let conn = broker.connect();
    let ch = durable_q(&conn);
    publish(&ch, "q", 0..6_000).await;
    assert!(broker.paged_messages("q").unwrap() > 5_000);
    // Remove nine in ten of the paged messages without reading them: their segments become
    // sparse (compacted) or empty (deleted) while the stubs of the tenth point into them.
    let seqs: Vec<u64> = broker
        .peek("q", 6_000)
        .unwrap()
        .iter()
        .map(|p| p.seq)
        .collect();
    for (i, seq) in seqs.iter().enumerate() {
        if i >= 1_000 && i % 10 != 0 {
            assert!(broker.discard("q", *seq).unwrap());
        }
        if i % 200 == 0 {
            store.stats().unwrap();
        }
    }
    let stats = store.stats().unwrap();
    assert!(stats.compactions > 10, "{stats:?}");
    assert!(stats.deleted_segments > 10, "{stats:?}");
    let mut consumer = ch.basic_consume("q", ConsumeOptions::default()).unwrap();
    let expected: Vec<u64> = (0..6_000).filter(|i| *i < 1_000 || i % 10 == 0).collect();
    for i in &expected {
        let d = next(&mut consumer).await;
        check(*i, d.message());
        ch.basic_ack(d.delivery_tag, false).unwrap();
    }
    assert_eq!(broker.queue_counts("q"), Some((0, 1)));
    assert_eq!(broker.pages_read().1, 0);
}

#[tokio::test]
async fn paged_messages_are_dead_lettered_with_their_bodies() {
    let fs = FaultFs::new();
    let (_store, broker) = open(&fs, Path::new("/data"), StoreConfig::default());
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    ch.exchange_declare(
        "dlx",
        ExchangeKind::Fanout,
        durable_exchange(),
        FieldTable::new(),
    )
    .unwrap();
    ch.queue_declare("dlq", durable_queue(), FieldTable::new())
        .unwrap();
    ch.queue_bind("dlq", "dlx", "", FieldTable::new()).unwrap();
    let mut args = FieldTable::new();
    args.insert("x-dead-letter-exchange", "dlx");
    args.insert("x-message-ttl", FieldValue::I64(3_000));
    ch.queue_declare("q", durable_queue(), args).unwrap();
    ch.confirm_select().unwrap();
    publish(&ch, "q", 0..3_000).await;
    assert!(broker.paged_messages("q").unwrap() > 2_000);
    let mut consumer = ch.basic_consume("dlq", ConsumeOptions::default()).unwrap();
    // Messages that expire together are dead-lettered last first (the engine's order, paged
    // or not): every one arrives once, with its body.
    let mut seen = Vec::new();
    for _ in 0..3_000 {
        let d = next(&mut consumer).await;
        let Some(FieldValue::I64(i)) = d.message().headers.get("n").cloned() else {
            panic!("no header n");
        };
        check(i as u64, d.message());
        assert!(d.message().headers.get("x-death").is_some(), "{i}");
        seen.push(i as u64);
        ch.basic_ack(d.delivery_tag, false).unwrap();
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..3_000).collect::<Vec<u64>>());
    assert_eq!(broker.queue_counts("q"), Some((0, 0)));
    assert_eq!(broker.pages_read().1, 0);
}

#[tokio::test]
async fn a_paged_backlog_survives_a_crash() {
    let fs = FaultFs::new();
    let dir = Path::new("/data");
    let (_store, broker) = open(&fs, dir, StoreConfig::default());
    let conn = broker.connect();
    let ch = durable_q(&conn);
    publish(&ch, "q", 0..4_000).await;
    assert!(broker.paged_messages("q").unwrap() > 3_000);
    // 1,200 delivered (some of them paged and read back), 200 of those acknowledged.
    for i in 0..1_200 {
        let got = ch.basic_get("q", false).unwrap().unwrap();
        check(i, got.delivery.message());
        if i < 200 {
            ch.basic_ack(got.delivery.delivery_tag, false).unwrap();
        }
    }
    // The acks and deliveries were handed to the writer as they happened: `stats` returns
    // once it has handled them. Then the process is killed.
    _store.stats().unwrap();
    let after = fs.crash();
    drop(ch);
    drop(conn);
    drop(broker);
    let (_store, broker) = open(&after, dir, StoreConfig::default());
    assert_eq!(broker.queue_counts("q"), Some((3_800, 0)));
    let paged = broker.paged_messages("q").unwrap();
    assert!(paged > 2_000, "recovery pages too: {paged}");
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    let mut consumer = ch.basic_consume("q", ConsumeOptions::default()).unwrap();
    for i in 200..4_000 {
        let d = next(&mut consumer).await;
        check(i, d.message());
        assert_eq!(d.redelivered, i < 1_200, "message {i}");
        ch.basic_ack(d.delivery_tag, false).unwrap();
    }
    assert_eq!(broker.pages_read().1, 0);
}

#[tokio::test]
async fn a_read_error_is_reported_and_the_message_kept() {
    let fs = FaultFs::new();
    let dir = Path::new("/data");
    let (_store, broker) = open(&fs, dir, StoreConfig::default());
    let conn = broker.connect();
    let ch = durable_q(&conn);
    publish(&ch, "q", 0..2_000).await;
    assert!(broker.paged_messages("q").unwrap() > 1_000);
    // Damage every segment: flip one byte in each record's body from the 600th on.
    for path in fs.list_paths(&dir.join("segments")) {
        if path.extension().is_some_and(|e| e == "seg") {
            let mut data = fs.contents(&path).unwrap();
            let at = data.len() - 10;
            data[at] ^= 0xff;
            fs.set_contents(&path, data);
        }
    }
    let getter = conn.open_channel().unwrap();
    let mut got = 0;
    let error = loop {
        match getter.basic_get("q", true) {
            Ok(Some(_)) => got += 1,
            Ok(None) => panic!("the queue ran dry after {got} without an error"),
            Err(e) => break e,
        }
    };
    assert_eq!(error.code, ReplyCode::InternalError, "{error:?}");
    assert!(error.text.contains("checksum"), "{}", error.text);
    assert!(broker.pages_read().1 >= 1);
    // The damaged message is still in the queue: nothing was silently dropped.
    assert_eq!(broker.queue_counts("q").unwrap().0, 2_000 - got);
}

#[tokio::test]
async fn an_out_of_range_paging_ratio_is_refused_by_name() {
    for ratio in [0.0, -0.5, 1.5, f64::NAN] {
        let fs = FaultFs::new();
        let store = DiskStore::open_with(Arc::new(fs), "/data", StoreConfig::default()).unwrap();
        let config = BrokerConfig {
            memory_paging_ratio: ratio,
            ..BrokerConfig::default()
        };
        let err = Broker::<Native>::with_store(config, store).unwrap_err();
        assert!(err.to_string().contains("memory_paging_ratio"), "{err}");
    }
}

/// The ready messages of `queue`, without taking them: each one's number (checked against
/// its body, header and properties) and whether it is marked redelivered.
fn contents(broker: &Broker, queue: &str) -> Vec<(u64, bool)> {
    broker
        .peek(queue, 100_000)
        .unwrap()
        .iter()
        .map(|p| {
            let Some(FieldValue::I64(i)) = p.record.message.headers.get("n").cloned() else {
                panic!("no header n");
            };
            check(i as u64, &p.record.message);
            (i as u64, p.redelivered)
        })
        .collect()
}

#[tokio::test]
async fn a_compacted_fanout_backlog_comes_back_after_a_clean_close_and_after_a_crash() {
    let fs = FaultFs::new();
    let dir = Path::new("/data");
    let config = StoreConfig {
        segment_bytes: 64 * 1024,
        ..StoreConfig::default()
    };
    let (store, broker) = open(&fs, dir, config.clone());
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    ch.exchange_declare(
        "fan",
        ExchangeKind::Fanout,
        durable_exchange(),
        FieldTable::new(),
    )
    .unwrap();
    for q in ["a", "b"] {
        ch.queue_declare(q, durable_queue(), FieldTable::new())
            .unwrap();
        ch.queue_bind(q, "fan", "", FieldTable::new()).unwrap();
    }
    ch.confirm_select().unwrap();
    // Each message is written once, for queue a, with a reference record for queue b.
    for i in 0..4_000 {
        let outcome = ch
            .basic_publish("fan", "", Default::default(), message(i))
            .await
            .unwrap();
        assert_eq!(outcome.status, PublishStatus::Routed(2));
    }
    assert!(broker.paged_messages("a").unwrap() > 3_000);
    assert!(broker.paged_messages("b").unwrap() > 3_000);
    // Queue a keeps one in ten, b one in five: some messages are kept by both queues, some
    // only through b's reference record; compaction rewrites them and their references.
    let keep_a = |i: u64| i < 500 || i % 10 == 0;
    let keep_b = |i: u64| i < 500 || i % 5 == 0;
    for (q, keep) in [("a", &keep_a as &dyn Fn(u64) -> bool), ("b", &keep_b)] {
        let seqs: Vec<(u64, u64)> = broker
            .peek(q, 4_000)
            .unwrap()
            .iter()
            .map(|p| {
                let Some(FieldValue::I64(i)) = p.record.message.headers.get("n").cloned() else {
                    panic!("no header n");
                };
                (p.seq, i as u64)
            })
            .collect();
        for (n, (seq, i)) in seqs.iter().enumerate() {
            if !keep(*i) {
                assert!(broker.discard(q, *seq).unwrap());
            }
            if n % 200 == 0 {
                store.stats().unwrap();
            }
        }
    }
    // The first 300 of b delivered and not acknowledged: they come back redelivered.
    let getter = conn.open_channel().unwrap();
    for i in 0..300 {
        let got = getter.basic_get("b", false).unwrap().unwrap();
        check(i, got.delivery.message());
    }
    let stats = store.stats().unwrap();
    assert!(stats.compactions > 5, "{stats:?}");
    assert!(stats.deleted_segments > 5, "{stats:?}");
    let a: Vec<(u64, bool)> = (0..4_000)
        .filter(|i| keep_a(*i))
        .map(|i| (i, false))
        .collect();
    let b: Vec<(u64, bool)> = (0..4_000)
        .filter(|i| keep_b(*i))
        .map(|i| (i, i < 300))
        .collect();
    assert_eq!(stats.live_references, a.len() + b.len());
    assert_eq!(contents(&broker, "a"), a);
    drop(getter);
    drop(ch);
    drop(conn);
    drop(broker);
    store.close().unwrap();

    let (store, broker) = open(&fs, dir, config.clone());
    assert!(
        store.started_clean(),
        "the clean-shutdown snapshot was used"
    );
    assert!(broker.paged_messages("a").unwrap() > 100);
    assert_eq!(contents(&broker, "a"), a, "after a clean close");
    assert_eq!(contents(&broker, "b"), b, "after a clean close");
    let stats = store.stats().unwrap();
    assert_eq!(stats.live_references, a.len() + b.len());

    let after = fs.crash();
    drop(broker);
    drop(store);
    let (store, broker) = open(&after, dir, config);
    assert!(!store.started_clean(), "a crash means a full scan");
    assert_eq!(contents(&broker, "a"), a, "after a crash");
    assert_eq!(contents(&broker, "b"), b, "after a crash");
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    for (q, expected) in [("a", &a), ("b", &b)] {
        let mut consumer = ch.basic_consume(q, ConsumeOptions::default()).unwrap();
        for (i, redelivered) in expected {
            let d = next(&mut consumer).await;
            check(*i, d.message());
            assert_eq!(d.redelivered, *redelivered, "{q}: message {i}");
            ch.basic_ack(d.delivery_tag, false).unwrap();
        }
        consumer.cancel().unwrap();
    }
    assert_eq!(store.stats().unwrap().live_references, 0);
    assert_eq!(broker.pages_read().1, 0);
}

#[tokio::test]
async fn a_byte_limit_and_a_purge_count_paged_runs_exactly() {
    let fs = FaultFs::new();
    let (store, broker) = open(&fs, Path::new("/data"), StoreConfig::default());
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    let mut args = FieldTable::new();
    args.insert("x-max-length-bytes", FieldValue::I64(200 * 3_000));
    ch.queue_declare("q", durable_queue(), args).unwrap();
    ch.confirm_select().unwrap();
    let before = broker.memory_used();
    // 4,000 messages of 200 bytes against a limit of 3,000: the first 1,000 are dropped from
    // the head while most of the rest sit in runs.
    publish(&ch, "q", 0..4_000).await;
    assert_eq!(broker.queue_counts("q"), Some((3_000, 0)));
    assert!(broker.paged_messages("q").unwrap() > 500);
    let seen = contents(&broker, "q");
    assert_eq!(
        seen,
        (1_000..4_000).map(|i| (i, false)).collect::<Vec<_>>(),
        "the oldest went, the order is kept"
    );
    assert_eq!(ch.queue_purge("q").unwrap(), 3_000);
    assert_eq!(
        broker.memory_used(),
        before,
        "every paged message's count taken off"
    );
    assert_eq!(
        store.stats().unwrap().live_references,
        0,
        "the store was told of each"
    );
    publish(&ch, "q", 4_000..4_003).await;
    let mut consumer = ch.basic_consume("q", ConsumeOptions::default()).unwrap();
    for i in 4_000..4_003 {
        let d = next(&mut consumer).await;
        check(i, d.message());
        ch.basic_ack(d.delivery_tag, false).unwrap();
    }
    assert_eq!(broker.pages_read().1, 0);
}

/// A durable queue deleted and declared again while the store's writer is behind (in
/// `interval` mode a confirm does not wait for it): its paged messages are read back as
/// themselves, never as the deleted queue's messages at the same positions, which the
/// writer's picture of the files, lent to readers during a slow sync, still holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_declared_again_reads_back_its_own_paged_messages() {
    let fs = FaultFs::new();
    let dir = Path::new("/paging-redeclared");
    let config = StoreConfig {
        mode: SyncMode::Interval(Duration::from_millis(1)),
        ..StoreConfig::default()
    };
    let (store, broker) = open(&fs, dir, config);
    let conn = broker.connect();
    let ch = durable_q(&conn);
    publish(&ch, "q", 0..4000).await;
    store.stats().unwrap();
    assert!(broker.paged_messages("q").unwrap() > 1000, "paged");
    fs.set_sync_delay(Duration::from_millis(200));
    let begun = fs.syncs_begun();
    publish(&ch, "q", 4000..4001).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while fs.syncs_begun() == begun {
        assert!(tokio::time::Instant::now() < deadline, "no sync began");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    ch.queue_delete("q", false, false).unwrap();
    ch.queue_declare("q", durable_queue(), FieldTable::new())
        .unwrap();
    publish(&ch, "q", 10_000..14_000).await;
    let peeked = broker.peek("q", usize::MAX).unwrap();
    assert_eq!(peeked.len(), 4000);
    for (i, m) in (10_000..).zip(&peeked) {
        check(i, &m.record.message);
    }
}

/// After the store failed (a sync failed: it keeps nothing more), a queue deleted and
/// declared again holds none of the deleted queue's messages: the messages the store refuses
/// are not enqueued (paged, they would have no copy anywhere), and the failed writer still
/// takes the deletion out of the index readers look in (for messages paged just before it
/// failed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_store_failure_a_queue_declared_again_reads_back_none_of_the_deleted_messages() {
    let fs = FaultFs::new();
    let dir = Path::new("/failed-redeclared");
    let (_store, broker) = open_paging_everything(&fs, dir, StoreConfig::default());
    let conn = broker.connect();
    let ch = durable_q(&conn);
    publish(&ch, "q", 0..600).await;
    assert!(broker.paged_messages("q").unwrap() > 0, "paged");
    fs.fail_syncs(true);
    let failed = ch
        .basic_publish("", "q", Default::default(), message(600))
        .await;
    assert!(failed.is_err(), "the store failed: {failed:?}");
    let ch = conn.open_channel().unwrap();
    ch.queue_delete("q", false, false).unwrap();
    ch.queue_declare("q", durable_queue(), FieldTable::new())
        .unwrap();
    for i in 1000..1600 {
        let refused = ch
            .basic_publish("", "q", Default::default(), message(i))
            .await;
        assert_eq!(refused.unwrap_err().code, ReplyCode::InternalError);
    }
    assert_eq!(broker.queue_counts("q"), Some((0, 0)), "none taken");
    assert!(broker.peek("q", usize::MAX).unwrap().is_empty());
}

/// Messages the broker paged before it learned that the store failed (their enqueue came
/// first, their write after) have no copy in the files: the failed store keeps what it could
/// not write in memory, and they are delivered with their bodies. The writer fails on a batch
/// whose records cannot be appended: with them all, or (batches of 50) with the first 50,
/// the rest handled by the failed writer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_paged_while_the_store_fails_are_still_delivered() {
    for max_batch in [8192, 50] {
        paged_while_the_store_fails(max_batch).await;
    }
}

async fn paged_while_the_store_fails(max_batch: usize) {
    let fs = FaultFs::new();
    let dir = Path::new("/paged-while-failing");
    let config = StoreConfig {
        max_batch,
        ..StoreConfig::default()
    };
    let (store, broker) = open_paging_everything(&fs, dir, config);
    let conn = broker.connect();
    let ch = durable_q(&conn);
    publish(&ch, "q", 0..600).await;
    let written = broker.paged_messages("q").unwrap();
    assert!(written > 0, "paged");
    // A slow sync holds the writer while the next messages are enqueued (and paged), their
    // writes still to come; then every append fails.
    fs.set_sync_delay(Duration::from_millis(300));
    let begun = fs.syncs_begun();
    drop(ch.try_basic_publish("", "q", Default::default(), message(600)));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while fs.syncs_begun() == begun {
        assert!(tokio::time::Instant::now() < deadline, "no sync began");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    fs.fail_appends(true);
    for i in 601..1_000 {
        match ch.try_basic_publish("", "q", Default::default(), message(i)) {
            TryPublish::Pending(pending) => drop(pending),
            other => panic!("message {i}: {other:?}"),
        }
    }
    assert!(
        broker.paged_messages("q").unwrap() >= written + 399,
        "the unwritten messages are paged"
    );
    fs.set_sync_delay(Duration::ZERO);
    // Once the writer has taken every message (and failed), the store refuses the next.
    store.stats().unwrap();
    let refused = ch
        .basic_publish("", "q", Default::default(), message(1_000))
        .await;
    assert_eq!(refused.unwrap_err().code, ReplyCode::InternalError);
    let ch = conn.open_channel().unwrap();
    assert_eq!(broker.queue_counts("q").unwrap().0, 1_000);
    let peeked = broker.peek("q", usize::MAX).unwrap();
    for (i, m) in (0..).zip(&peeked) {
        check(i, &m.record.message);
    }
    for i in 0..1_000 {
        let got = ch.basic_get("q", true).unwrap().expect("a message");
        check(i, got.delivery.message());
    }
    assert_eq!(broker.pages_read().1, 0, "no read failed");
}
