//! Through `Broker::with_store`: what is declared durable and published persistent comes
//! back after a restart from the same directory; what was acknowledged does not.

mod common;

use common::*;
use std::time::Duration;
use stream_engine::*;
use stream_store::{FaultFs, StoreConfig, SyncMode};

/// Declares, publishes with confirms, acknowledges some and leaves one delivered but
/// unacknowledged; returns nothing, the broker is left for the caller to stop.
async fn fill(broker: &Broker) {
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    ch.exchange_declare(
        "orders",
        ExchangeKind::Topic,
        durable_exchange(),
        FieldTable::new(),
    )
    .unwrap();
    let mut noted = FieldTable::new();
    noted.insert("x-note", FieldValue::from("kept"));
    ch.exchange_declare("fan", ExchangeKind::Fanout, durable_exchange(), noted)
        .unwrap();
    let mut args = FieldTable::new();
    args.insert("x-max-priority", FieldValue::U8(5));
    ch.queue_declare("work", durable_queue(), args).unwrap();
    ch.queue_declare("audit", durable_queue(), FieldTable::new())
        .unwrap();
    ch.queue_declare("scratch", QueueOptions::default(), FieldTable::new())
        .unwrap();
    ch.queue_bind("work", "orders", "order.*", FieldTable::new())
        .unwrap();
    ch.queue_bind("audit", "fan", "", FieldTable::new())
        .unwrap();
    ch.queue_bind("work", "fan", "", FieldTable::new()).unwrap();
    ch.queue_bind("scratch", "fan", "", FieldTable::new())
        .unwrap();
    ch.confirm_select().unwrap();
    for i in 0..50 {
        let m = persistent(format!("w{i}")).with_header("n", FieldValue::I64(i));
        let outcome = ch
            .basic_publish("orders", "order.created", Default::default(), m)
            .await
            .unwrap();
        assert_eq!(outcome.status, PublishStatus::Routed(1));
    }
    // Transient: not kept.
    ch.basic_publish(
        "orders",
        "order.created",
        Default::default(),
        Message::new("t"),
    )
    .await
    .unwrap();
    // One publish reaching three queues (two durable).
    ch.basic_publish("fan", "", Default::default(), persistent("fanned"))
        .await
        .unwrap();
    for _ in 0..20 {
        let got = ch.basic_get("work", false).unwrap().unwrap();
        ch.basic_ack(got.delivery.delivery_tag, false).unwrap();
    }
    // Delivered, never acknowledged.
    let held = ch.basic_get("work", false).unwrap().unwrap();
    assert_eq!(text(&held.delivery), "w20");
    broker.set_policy(limits()).unwrap();
    broker
        .set_policy(PolicyDef {
            name: "gone".into(),
            ..limits()
        })
        .unwrap();
    broker.clear_policy("gone").unwrap();
    broker.set_operator_policy(cap()).unwrap();
    broker
        .set_operator_policy(PolicyDef {
            name: "gone".into(),
            ..cap()
        })
        .unwrap();
    broker.clear_operator_policy("gone").unwrap();
    std::mem::forget(ch);
    std::mem::forget(conn);
}

/// A policy `fill` leaves set (and another it sets and clears).
fn limits() -> PolicyDef {
    let mut definition = FieldTable::new();
    definition.insert("max-length", FieldValue::I64(5));
    definition.insert("dead-letter-exchange", FieldValue::from("dlx"));
    PolicyDef {
        name: "limits".into(),
        pattern: "^audit$".into(),
        apply_to: PolicyTarget::Queues,
        priority: -3,
        definition,
    }
}

/// An operator policy `fill` leaves set, named as the policy (the two sets are apart).
fn cap() -> PolicyDef {
    let mut definition = FieldTable::new();
    definition.insert("expires", FieldValue::I64(3_600_000));
    PolicyDef {
        name: "limits".into(),
        pattern: "^audit$".into(),
        apply_to: PolicyTarget::All,
        priority: 2,
        definition,
    }
}

async fn check(broker: &Broker) {
    assert!(broker.exchange_exists("orders"));
    assert!(broker.exchange_exists("fan"));
    let fan = broker.exchanges().into_iter().find(|x| x.name == "fan");
    assert_eq!(
        fan.map(|x| x.arguments.get_str("x-note").map(str::to_owned)),
        Some(Some("kept".to_owned())),
        "an exchange's arguments come back with it"
    );
    assert_eq!(
        broker.queue_counts("scratch"),
        None,
        "a transient queue is gone"
    );
    assert_eq!(broker.queue_counts("work"), Some((31, 0)));
    assert_eq!(broker.queue_counts("audit"), Some((1, 0)));
    assert_eq!(
        broker.policies(),
        [limits()],
        "the policy set, not the one cleared"
    );
    assert_eq!(broker.operator_policies(), [cap()]);
    let audit = broker.queues().into_iter().find(|q| q.name == "audit");
    let audit = audit.unwrap();
    assert_eq!(audit.policy.as_deref(), Some("limits"));
    assert_eq!(audit.operator_policy.as_deref(), Some("limits"));
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    let first = ch.basic_get("work", false).unwrap().unwrap().delivery;
    assert_eq!(text(&first), "w20");
    assert!(first.redelivered, "delivered before the restart");
    assert_eq!(first.message().headers.get("n"), Some(&FieldValue::I64(20)));
    assert_eq!(first.exchange(), "orders");
    assert_eq!(first.routing_key(), "order.created");
    let rest = drain(&ch, "work");
    assert_eq!(rest.len(), 30);
    assert_eq!(rest[0], ("w21".to_owned(), false));
    assert_eq!(rest.last().unwrap().0, "fanned");
    assert_eq!(drain(&ch, "audit"), vec![("fanned".to_owned(), false)]);
    // The bindings came back: a new publish routes to both durable queues.
    ch.basic_publish("fan", "", Default::default(), persistent("after"))
        .await
        .unwrap();
    assert_eq!(drain(&ch, "audit").len(), 1);
}

#[tokio::test]
async fn a_clean_restart_from_the_same_directory_keeps_everything_but_the_acked() {
    let dir = tempfile::tempdir().unwrap();
    let (store, broker) = open_real(dir.path(), StoreConfig::default());
    assert!(!store.started_clean());
    fill(&broker).await;
    store.close().unwrap();
    drop(broker);
    drop(store);
    let (store, broker) = open_real(dir.path(), StoreConfig::default());
    assert!(
        store.started_clean(),
        "the clean-shutdown marker spares the scan"
    );
    check(&broker).await;
    store.close().unwrap();
}

#[tokio::test]
async fn a_crash_restart_scans_and_keeps_everything_but_the_acked() {
    let fs = FaultFs::new();
    let dir = std::path::Path::new("/data");
    let (store, broker) = open_fault(&fs, dir, StoreConfig::default());
    fill(&broker).await;
    // Acks are not waited for: let the writer take them before the crash.
    store.stats().unwrap();
    let after = fs.crash();
    drop(broker);
    drop(store);
    let (store, broker) = open_fault(&after, dir, StoreConfig::default());
    assert!(!store.started_clean(), "no marker after a crash: full scan");
    check(&broker).await;
}

#[tokio::test]
async fn a_message_reaching_several_durable_queues_is_written_once() {
    let fs = FaultFs::new();
    let dir = std::path::Path::new("/data");
    let (store, broker) = open_fault(&fs, dir, StoreConfig::default());
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    ch.exchange_declare(
        "fan",
        ExchangeKind::Fanout,
        durable_exchange(),
        FieldTable::new(),
    )
    .unwrap();
    for q in ["a", "b", "c", "d"] {
        ch.queue_declare(q, durable_queue(), FieldTable::new())
            .unwrap();
        ch.queue_bind(q, "fan", "", FieldTable::new()).unwrap();
    }
    ch.confirm_select().unwrap();
    let body = vec![7u8; 64 * 1024];
    ch.basic_publish("fan", "", Default::default(), persistent(body))
        .await
        .unwrap();
    let stats = store.stats().unwrap();
    assert_eq!(stats.live_messages, 1);
    assert_eq!(stats.live_references, 4);
    let on_disk = fs.size_under(&dir.join("segments"));
    assert!(
        on_disk < 66 * 1024,
        "one copy of the 64 KiB body, not four: {on_disk} bytes"
    );
    // Acked in three queues, the message stays for the fourth, across a crash.
    for q in ["a", "b", "c"] {
        let got = ch.basic_get(q, false).unwrap().unwrap();
        ch.basic_ack(got.delivery.delivery_tag, false).unwrap();
    }
    store.stats().unwrap();
    let after = fs.crash();
    let (_store, broker) = open_fault(&after, dir, StoreConfig::default());
    for (q, n) in [("a", 0), ("b", 0), ("c", 0), ("d", 1)] {
        assert_eq!(broker.queue_counts(q), Some((n, 0)), "{q}");
    }
}

#[tokio::test]
async fn a_queue_deleted_and_declared_again_does_not_get_the_old_messages() {
    let fs = FaultFs::new();
    let dir = std::path::Path::new("/data");
    let (store, broker) = open_fault(&fs, dir, StoreConfig::default());
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    ch.queue_declare("q", durable_queue(), FieldTable::new())
        .unwrap();
    ch.confirm_select().unwrap();
    for body in ["old1", "old2"] {
        ch.basic_publish("", "q", Default::default(), persistent(body))
            .await
            .unwrap();
    }
    ch.queue_delete("q", false, false).unwrap();
    ch.queue_declare("q", durable_queue(), FieldTable::new())
        .unwrap();
    ch.basic_publish("", "q", Default::default(), persistent("new"))
        .await
        .unwrap();
    store.stats().unwrap();
    let after = fs.crash();
    let (_store, broker) = open_fault(&after, dir, StoreConfig::default());
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    assert_eq!(drain(&ch, "q"), vec![("new".to_owned(), false)]);
}

/// A queue's highest positions acknowledged before a restart are not handed out again after
/// it: the acknowledgements are still in the ack file, and a new message under the same
/// position would be taken for the acknowledged one by the next full scan (lost after a
/// second crash), whether the first restart was a crash or a clean close.
#[tokio::test]
async fn a_position_acknowledged_before_a_restart_is_not_reused_after_it() {
    for clean in [false, true] {
        let fs = FaultFs::new();
        let dir = std::path::Path::new("/reuse");
        let (store, broker) = open_fault(&fs, dir, StoreConfig::default());
        let conn = broker.connect();
        let ch = conn.open_channel().unwrap();
        ch.confirm_select().unwrap();
        ch.queue_declare("q", durable_queue(), FieldTable::new())
            .unwrap();
        publish_each(&ch, "q", (1..=5).map(|i| format!("m{i}"))).await;
        let mut tags = Vec::new();
        for _ in 0..5 {
            tags.push(
                ch.basic_get("q", false)
                    .unwrap()
                    .unwrap()
                    .delivery
                    .delivery_tag,
            );
        }
        // The two highest positions are acknowledged first (a priority queue, or a consumer
        // that acks out of order).
        ch.basic_ack(tags[4], false).unwrap();
        ch.basic_ack(tags[3], false).unwrap();
        store.stats().unwrap();
        let fs = if clean {
            drop((ch, conn, broker));
            store.close().unwrap();
            fs.crash()
        } else {
            fs.crash()
        };

        let (store, broker) = open_fault(&fs, dir, StoreConfig::default());
        assert_eq!(store.started_clean(), clean);
        let conn = broker.connect();
        let ch = conn.open_channel().unwrap();
        ch.confirm_select().unwrap();
        ch.basic_publish("", "q", PublishOptions::default(), persistent("after"))
            .await
            .unwrap();
        store.stats().unwrap();
        let fs = fs.crash();

        let (_store, broker) = open_fault(&fs, dir, StoreConfig::default());
        let conn = broker.connect();
        let ch = conn.open_channel().unwrap();
        let left: Vec<String> = drain(&ch, "q").into_iter().map(|(body, _)| body).collect();
        assert_eq!(
            left,
            ["m1", "m2", "m3", "after"],
            "clean first restart: {clean}"
        );
    }
}

/// A queue deleted and declared again after the metadata log was rewritten (compacted) gets
/// a new incarnation, not the deleted one's: the deleted queue's records still in a segment
/// would otherwise come back into it at the next full scan.
#[tokio::test]
async fn a_queue_declared_again_after_the_log_was_rewritten_gets_none_of_the_old_messages() {
    let fs = FaultFs::new();
    let dir = std::path::Path::new("/rewritten");
    let (store, broker) = open_fault(&fs, dir, StoreConfig::default());
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    ch.confirm_select().unwrap();
    ch.queue_declare("keep", durable_queue(), FieldTable::new())
        .unwrap();
    ch.queue_declare("q", durable_queue(), FieldTable::new())
        .unwrap();
    publish_each(&ch, "q", (1..=3).map(|i| format!("old{i}"))).await;
    // Live messages in the same segment keep it, with the deleted queue's records (too
    // many for it to be compacted).
    for _ in 0..10 {
        ch.basic_publish(
            "",
            "keep",
            PublishOptions::default(),
            persistent(vec![b'k'; 1024]),
        )
        .await
        .unwrap();
    }
    ch.queue_delete("q", false, false).unwrap();
    // Enough changes for the log to be rewritten as the state it holds (bindings: they name
    // no incarnation, so after the rewrite no record names the deleted queue's).
    for i in 0..200 {
        let key = format!("k{i}");
        ch.queue_bind("keep", "amq.direct", &key, FieldTable::new())
            .unwrap();
        ch.queue_unbind("keep", "amq.direct", &key, &FieldTable::new())
            .unwrap();
        ch.basic_publish("", "none", PublishOptions::default(), persistent("x"))
            .await
            .unwrap();
    }
    store.stats().unwrap();
    drop((ch, conn, broker));
    store.close().unwrap();
    let fs = fs.crash();

    let (store, broker) = open_fault(&fs, dir, StoreConfig::default());
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    ch.confirm_select().unwrap();
    ch.queue_declare("q", durable_queue(), FieldTable::new())
        .unwrap();
    ch.basic_publish("", "q", PublishOptions::default(), persistent("new"))
        .await
        .unwrap();
    store.stats().unwrap();
    let fs = fs.crash();

    let (_store, broker) = open_fault(&fs, dir, StoreConfig::default());
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    let left: Vec<String> = drain(&ch, "q").into_iter().map(|(body, _)| body).collect();
    assert_eq!(left, ["new"]);
}

/// A store and broker on `fs` with a durable queue `work` that dead-letters into `dlq` (and
/// a third one, `other`), one persistent message published to `work` and fetched, not
/// acknowledged; everything so far synced. Returns them with the delivery's tag.
async fn one_message_to_dead_letter(
    fs: &FaultFs,
    dir: &std::path::Path,
    config: StoreConfig,
) -> (stream_store::DiskStore, Broker, Connection, Channel, u64) {
    let (store, broker) = open_fault(fs, dir, config);
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    ch.confirm_select().unwrap();
    let mut dead_letters = FieldTable::new();
    dead_letters.insert("x-dead-letter-exchange", FieldValue::from(""));
    dead_letters.insert("x-dead-letter-routing-key", FieldValue::from("dlq"));
    ch.queue_declare("work", durable_queue(), dead_letters)
        .unwrap();
    for q in ["dlq", "other"] {
        ch.queue_declare(q, durable_queue(), FieldTable::new())
            .unwrap();
    }
    publish_each(&ch, "work", ["m".to_owned()]).await;
    let got = ch.basic_get("work", false).unwrap().expect("the message");
    store.stats().unwrap();
    (store, broker, conn, ch, got.delivery.delivery_tag)
}

/// Recovers the files a crash left and asserts the message is in `work` or `dlq` (or both),
/// once at most in each.
fn assert_in_one_queue_or_both(after: &FaultFs, dir: &std::path::Path, config: StoreConfig) {
    let (_store, broker) = open_fault(after, dir, config);
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    let work = drain(&ch, "work");
    let dlq = drain(&ch, "dlq");
    assert!(
        work.len() + dlq.len() >= 1,
        "the message is in neither queue"
    );
    assert!(work.len() <= 1 && dlq.len() <= 1, "{work:?} {dlq:?}");
}

/// A message rejected into its dead-letter queue just before a crash is in one of the two
/// queues after it (both, at worst), never in neither: the store hears of the copy before
/// the removal. One command per batch and slow syncs make the crash fall between the two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_dead_lettered_just_before_a_crash_is_not_lost() {
    let fs = FaultFs::new();
    let dir = std::path::Path::new("/dead-lettered");
    let config = StoreConfig {
        max_batch: 1,
        ..StoreConfig::default()
    };
    let (store, broker, conn, ch, tag) = one_message_to_dead_letter(&fs, dir, config.clone()).await;
    fs.set_sync_delay(Duration::from_millis(200));
    ch.basic_reject(tag, false).unwrap();
    // The first of the two commands is synced after 200 ms, the second after 400 ms.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = fs.crash();
    drop((ch, conn, broker, store));
    assert_in_one_queue_or_both(&after, dir, config);
}

/// Waits until `fs` has begun `n` syncs (10 s at most).
async fn wait_for_syncs(fs: &FaultFs, n: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while fs.syncs_begun() < n {
        assert!(tokio::time::Instant::now() < deadline, "no sync began");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The same when the dead-letter queue was deleted and declared again in the batch of the
/// reject: the ack files are synced after the metadata log and the segment, so the removal
/// is never kept without the copy and the queue it went to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_into_a_queue_declared_in_the_same_batch_is_not_lost() {
    let fs = FaultFs::new();
    let dir = std::path::Path::new("/declared-in-the-batch");
    let (store, broker, conn, ch, tag) =
        one_message_to_dead_letter(&fs, dir, StoreConfig::default()).await;
    fs.set_sync_delay(Duration::from_millis(100));
    // Keeps the writer in a sync, so that the next commands wait and make one batch.
    let before = fs.syncs_begun();
    let _busy = ch.try_basic_publish("", "other", PublishOptions::default(), persistent("x"));
    wait_for_syncs(&fs, before + 1).await;
    ch.queue_delete("dlq", false, false).unwrap();
    ch.queue_declare("dlq", durable_queue(), FieldTable::new())
        .unwrap();
    ch.basic_reject(tag, false).unwrap();
    // That batch syncs three files (metadata log, segment, and the ack file, which exists
    // since the get marked the delivery) one after the other: crash once the third sync has
    // begun.
    wait_for_syncs(&fs, before + 4).await;
    let after = fs.crash();
    drop((ch, conn, broker, store));
    assert_in_one_queue_or_both(&after, dir, StoreConfig::default());
}

/// The same when the disk wrote the ack file back before the segment's sync ended (a disk
/// writes dirty data in any order): the acknowledgements of a batch are only written once
/// its records are synced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_is_not_lost_when_the_ack_file_reaches_the_disk_first() {
    let fs = FaultFs::new();
    let dir = std::path::Path::new("/written-back");
    let (store, broker, conn, ch, tag) =
        one_message_to_dead_letter(&fs, dir, StoreConfig::default()).await;
    fs.set_sync_delay(Duration::from_millis(200));
    let before = fs.syncs_begun();
    ch.basic_reject(tag, false).unwrap();
    // The segment's sync (the copy) is under way; whatever the ack files hold by now is on
    // the disk.
    wait_for_syncs(&fs, before + 1).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let after = fs.crash_with_writeback(|path| path.extension().is_some_and(|e| e == "ack"));
    drop((ch, conn, broker, store));
    assert_in_one_queue_or_both(&after, dir, StoreConfig::default());
}

/// In `interval` mode, a dead letter whose old segment has nothing else live: the segment
/// is deleted only after a sync, so a crash before it neither keeps the removal (the deleted
/// segment) nor loses the unsynced copy with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_interval_mode_a_dead_letter_is_not_lost_with_the_segment_it_left() {
    let fs = FaultFs::new();
    let dir = std::path::Path::new("/interval");
    let config = StoreConfig {
        mode: SyncMode::Interval(Duration::from_secs(1)),
        segment_bytes: 4096,
        ..StoreConfig::default()
    };
    let (store, broker, conn, ch, tag) = one_message_to_dead_letter(&fs, dir, config.clone()).await;
    // Enough beside it in its segment for the next one to be started, all delivered.
    for i in 0..40 {
        ch.basic_publish(
            "",
            "other",
            PublishOptions::default(),
            persistent(vec![b'f'; 200 + i]),
        )
        .await
        .unwrap();
    }
    let mut fillers = Vec::new();
    while let Some(got) = ch.basic_get("other", false).unwrap() {
        fillers.push(got.delivery.delivery_tag);
    }
    assert_eq!(fillers.len(), 40);
    let synced = until_synced(&fs, &store).await;
    assert!(store.stats().unwrap().segments > 1, "one segment only");
    // In one batch, unsynced: the segment's last live messages settled, one of them into the
    // dead-letter queue.
    for filler in fillers {
        ch.basic_ack(filler, false).unwrap();
    }
    ch.basic_reject(tag, false).unwrap();
    store.stats().unwrap();
    let after = fs.crash();
    assert_eq!(
        fs.syncs(),
        synced,
        "the interval ran out: nothing was left unsynced"
    );
    drop((ch, conn, broker, store));
    assert_in_one_queue_or_both(&after, dir, config);
}

/// Waits, in `interval` mode of a second, until a sync covers what the store was sent so
/// far (a batch starts the interval when none is running: it may take two); returns the
/// count of syncs then.
async fn until_synced(fs: &FaultFs, store: &stream_store::DiskStore) -> u64 {
    let synced = fs.syncs();
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(1100)).await;
        store.stats().unwrap();
        if fs.syncs() != synced {
            return fs.syncs();
        }
    }
    panic!("no sync within 11 s");
}

/// A crash in which the disk wrote back the ack files' unsynced data and nothing else, once
/// the store has handled everything; no sync may have run since `synced`.
fn crash_keeping_the_ack_files(
    fs: &FaultFs,
    store: &stream_store::DiskStore,
    synced: u64,
) -> FaultFs {
    store.stats().unwrap();
    let after = fs.crash_with_writeback(|path| path.extension().is_some_and(|e| e == "ack"));
    assert_eq!(fs.syncs(), synced, "the interval ran out");
    after
}

/// `interval` mode, a sync a second.
fn every_second() -> StoreConfig {
    StoreConfig {
        mode: SyncMode::Interval(Duration::from_secs(1)),
        ..StoreConfig::default()
    }
}

/// In `interval` mode an acknowledgement is written with its batch, not at the next sync: a
/// process killed before that sync (the machine still running) does not deliver the
/// acknowledged messages again.
#[tokio::test]
async fn in_interval_mode_acknowledgements_survive_a_killed_process() {
    let fs = FaultFs::new();
    let dir = std::path::Path::new("/killed");
    let config = StoreConfig {
        mode: SyncMode::Interval(Duration::from_secs(600)),
        ..StoreConfig::default()
    };
    let (store, broker) = open_fault(&fs, dir, config.clone());
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    ch.confirm_select().unwrap();
    ch.queue_declare("work", durable_queue(), FieldTable::new())
        .unwrap();
    publish_each(&ch, "work", (0..3).map(|i| format!("m{i}"))).await;
    let tags: Vec<u64> = (0..3)
        .map(|_| {
            ch.basic_get("work", false)
                .unwrap()
                .unwrap()
                .delivery
                .delivery_tag
        })
        .collect();
    ch.basic_ack(tags[0], false).unwrap();
    ch.basic_ack(tags[2], false).unwrap();
    store.stats().unwrap();
    let after = fs.kill();
    drop((ch, conn, broker, store));
    let (_store, broker) = open_fault(&after, dir, config);
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    assert_eq!(drain(&ch, "work"), vec![("m1".to_owned(), true)]);
}

/// In `interval` mode a message rejected into its dead-letter queue is not lost when the
/// disk writes the ack file back before the dead letter's copy is synced: the removal waits
/// for the sync that covers the copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_interval_mode_a_dead_letter_is_not_lost_when_the_ack_file_reaches_the_disk_first() {
    let fs = FaultFs::new();
    let dir = std::path::Path::new("/interval-rejected");
    let (store, broker, conn, ch, tag) = one_message_to_dead_letter(&fs, dir, every_second()).await;
    let synced = until_synced(&fs, &store).await;
    ch.basic_reject(tag, false).unwrap();
    let after = crash_keeping_the_ack_files(&fs, &store, synced);
    drop((ch, conn, broker, store));
    assert_in_one_queue_or_both(&after, dir, every_second());
}

/// The same for a re-drive, which removes the original once its copy is written (in
/// `interval` mode, before it is synced).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_interval_mode_a_redriven_message_is_not_lost_when_the_ack_file_reaches_the_disk_first()
{
    let fs = FaultFs::new();
    let dir = std::path::Path::new("/interval-redriven");
    let (store, broker) = open_fault(&fs, dir, every_second());
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    ch.confirm_select().unwrap();
    for q in ["work", "dlq"] {
        ch.queue_declare(q, durable_queue(), FieldTable::new())
            .unwrap();
    }
    publish_each(&ch, "dlq", ["acked".to_owned(), "m".to_owned()]).await;
    // The segment's ack file, there after a crash once synced.
    let acked = ch.basic_get("dlq", false).unwrap().unwrap();
    ch.basic_ack(acked.delivery.delivery_tag, false).unwrap();
    let synced = until_synced(&fs, &store).await;
    let seq = broker.peek("dlq", 1).unwrap()[0].seq;
    assert_eq!(
        broker.redrive("dlq", seq, "", "work").await.unwrap(),
        Redrive::Moved(1)
    );
    let after = crash_keeping_the_ack_files(&fs, &store, synced);
    drop((ch, conn, broker, store));
    assert_in_one_queue_or_both(&after, dir, every_second());
}

/// A queue declared, given a message and acknowledged within one interval, then a power loss
/// that keeps the acknowledgement (its ack file's data written back) but not the declaration
/// (the metadata log's tail): the queue declared again after the crash does not get the lost
/// declaration's incarnation, so that acknowledgement does not remove the new queue's
/// message at the same position.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_declared_again_after_its_declaration_was_lost_keeps_its_messages() {
    let fs = FaultFs::new();
    let dir = std::path::Path::new("/lost-declaration");
    let (store, broker) = open_fault(&fs, dir, every_second());
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    ch.confirm_select().unwrap();
    ch.queue_declare("other", durable_queue(), FieldTable::new())
        .unwrap();
    // `stays` keeps the segment (and its ack file) from being deleted.
    publish_each(&ch, "other", ["first".to_owned(), "stays".to_owned()]).await;
    let first = ch.basic_get("other", false).unwrap().unwrap();
    ch.basic_ack(first.delivery.delivery_tag, false).unwrap();
    // The segment's ack file and the log so far are durable.
    let synced = until_synced(&fs, &store).await;
    ch.queue_declare("q", durable_queue(), FieldTable::new())
        .unwrap();
    publish_each(&ch, "q", ["acked".to_owned()]).await;
    let acked = ch.basic_get("q", false).unwrap().unwrap();
    ch.basic_ack(acked.delivery.delivery_tag, false).unwrap();
    let after = crash_keeping_the_ack_files(&fs, &store, synced);
    drop((ch, conn, broker, store));

    let (store, broker) = open_fault(&after, dir, every_second());
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    ch.confirm_select().unwrap();
    assert!(
        ch.queue_declare(
            "q",
            QueueOptions {
                passive: true,
                ..durable_queue()
            },
            FieldTable::new()
        )
        .is_err(),
        "the declaration was lost"
    );
    let ch = conn.open_channel().unwrap();
    ch.confirm_select().unwrap();
    ch.queue_declare("q", durable_queue(), FieldTable::new())
        .unwrap();
    publish_each(&ch, "q", ["kept".to_owned()]).await;
    until_synced(&after, &store).await;
    let again = after.crash();
    drop((ch, conn, broker, store));

    let (_store, broker) = open_fault(&again, dir, every_second());
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    assert_eq!(drain(&ch, "q"), vec![("kept".to_owned(), false)]);
}

/// In `none` mode a clean close syncs everything, the segments it rolled without a sync
/// among them: a power loss after a clean shutdown loses nothing, and the restart uses the
/// clean-shutdown marker. The first run rolls segments; the second deletes those whose
/// messages it acknowledges. (A deletion at start, which `none` mode does not sync either,
/// is left to `tests/workload.rs`, whose `none` inputs fail without the directory sync at
/// close.)
#[tokio::test]
async fn in_none_mode_a_clean_close_makes_every_segment_durable() {
    let fs = FaultFs::new();
    let dir = std::path::Path::new("/none");
    let config = StoreConfig {
        mode: SyncMode::None,
        segment_bytes: 4096,
        ..StoreConfig::default()
    };
    let bodies: Vec<String> = (0..100).map(|i| format!("{i:0>200}")).collect();
    let mut fs = fs;
    for run in 0..2 {
        let (store, broker) = open_fault(&fs, dir, config.clone());
        assert_eq!(store.started_clean(), run > 0, "started from the marker");
        let conn = broker.connect();
        let ch = conn.open_channel().unwrap();
        ch.confirm_select().unwrap();
        if run == 0 {
            ch.queue_declare("work", durable_queue(), FieldTable::new())
                .unwrap();
            publish_each(&ch, "work", bodies.clone()).await;
            assert!(store.stats().unwrap().segments > 3, "segments rolled");
        }
        for _ in 0..50 {
            let got = ch.basic_get("work", false).unwrap().unwrap();
            if run == 1 {
                ch.basic_ack(got.delivery.delivery_tag, false).unwrap();
            }
        }
        if run == 1 {
            assert!(
                store.stats().unwrap().deleted_segments > 0,
                "segments deleted"
            );
        }
        ch.close();
        conn.close();
        drop(broker);
        store.close().unwrap();
        fs = fs.crash();
    }
    let (store, broker) = open_fault(&fs, dir, config);
    assert!(store.started_clean(), "started from the marker");
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    let kept: Vec<String> = drain(&ch, "work").into_iter().map(|(b, _)| b).collect();
    assert_eq!(kept, bodies[50..]);
}

/// An exclusive queue, even declared durable, goes with its connection: the store never
/// hears of it nor of its messages, so a persistent publish to it is confirmed (not refused
/// for a queue the store does not know), and nothing of it comes back after a restart.
#[tokio::test]
async fn an_exclusive_durable_queue_takes_persistent_messages_and_is_not_kept() {
    let fs = FaultFs::new();
    let dir = std::path::Path::new("/exclusive");
    let (store, broker) = open_fault(&fs, dir, StoreConfig::default());
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    ch.confirm_select().unwrap();
    let exclusive = QueueOptions {
        durable: true,
        exclusive: true,
        ..QueueOptions::default()
    };
    ch.queue_declare("mine", exclusive, FieldTable::new())
        .unwrap();
    publish_each(&ch, "mine", (0..3).map(|i| format!("m{i}"))).await;
    assert_eq!(store.stats().unwrap().live_messages, 0, "nothing written");
    let texts: Vec<String> = drain(&ch, "mine").into_iter().map(|(t, _)| t).collect();
    assert_eq!(texts, ["m0", "m1", "m2"]);
    let after = fs.crash();
    drop((ch, conn, broker, store));
    let (_store, broker) = open_fault(&after, dir, StoreConfig::default());
    assert_eq!(broker.queue_counts("mine"), None, "not kept");
}
