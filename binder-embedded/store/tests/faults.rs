//! The fault-injecting file layer shows that a confirm is never released for data a crash
//! could lose, and that a failed sync fails the publish without losing what was confirmed.

mod common;

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use common::*;
use stream_engine::*;
use stream_store::{FaultFs, StoreConfig, SyncMode};

const DIR: &str = "/data";

/// The bodies in queue `q` once a store is opened again on `files` (what a crash left).
fn recovered(files: &FaultFs) -> Vec<String> {
    let (_store, broker) = open_fault(files, Path::new(DIR), StoreConfig::default());
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    drain(&ch, "q").into_iter().map(|(b, _)| b).collect()
}

/// What the publishers got confirmed, and a count the test waits on.
#[derive(Debug)]
struct Confirmed {
    bodies: Mutex<Vec<String>>,
    count: watch::Sender<usize>,
}

impl Confirmed {
    fn new() -> Arc<Self> {
        Arc::new(Confirmed {
            bodies: Mutex::new(Vec::new()),
            count: watch::Sender::new(0),
        })
    }

    fn push(&self, body: String) {
        self.bodies.lock().unwrap().push(body);
        self.count.send_modify(|n| *n += 1);
    }

    /// Waits until `n` were confirmed (at most 30 s: publishers that stopped fail the test).
    async fn reach(&self, n: usize) {
        let mut count = self.count.subscribe();
        tokio::time::timeout(Duration::from_secs(30), count.wait_for(|c| *c >= n))
            .await
            .unwrap_or_else(|_| panic!("{n} confirms did not come in 30 s"))
            .expect("the count lives as long as the test");
    }

    fn bodies(&self) -> Vec<String> {
        self.bodies.lock().unwrap().clone()
    }
}

fn declare(broker: &Broker) {
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    ch.queue_declare("q", durable_queue(), FieldTable::new())
        .unwrap();
    ch.close();
    conn.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_confirm_is_released_for_data_a_crash_loses() {
    for (round, crash_after) in [5usize, 40, 150, 400, 900].into_iter().enumerate() {
        let fs = FaultFs::new();
        let (store, broker) = open_fault(&fs, Path::new(DIR), StoreConfig::default());
        declare(&broker);
        let confirmed = Confirmed::new();
        let mut publishers = Vec::new();
        for p in 0..4 {
            let broker = broker.clone();
            let confirmed = confirmed.clone();
            publishers.push(tokio::spawn(async move {
                let conn = broker.connect();
                let ch = conn.open_channel().unwrap();
                ch.confirm_select().unwrap();
                for i in 0.. {
                    let body = format!("p{p}-{i}");
                    match ch
                        .basic_publish("", "q", Default::default(), persistent(body.clone()))
                        .await
                    {
                        Ok(_) => confirmed.push(body),
                        Err(e) => {
                            assert_eq!(e.code, ReplyCode::InternalError, "{e}");
                            return;
                        }
                    }
                }
            }));
        }
        confirmed.reach(crash_after).await;
        let after = fs.crash();
        for p in publishers {
            p.await.unwrap();
        }
        let confirmed: HashSet<String> = confirmed.bodies().into_iter().collect();
        assert!(confirmed.len() >= crash_after);
        drop(broker);
        drop(store);
        let kept = recovered(&after);
        let unique: HashSet<String> = kept.iter().cloned().collect();
        assert_eq!(unique.len(), kept.len(), "round {round}: each message once");
        let lost: Vec<&String> = confirmed.difference(&unique).collect();
        assert!(
            lost.is_empty(),
            "round {round}: confirmed but lost in the crash: {lost:?}"
        );
    }
}

#[tokio::test]
async fn a_failed_sync_fails_the_publish_and_keeps_what_was_confirmed() {
    let fs = FaultFs::new();
    let (store, broker) = open_fault(&fs, Path::new(DIR), StoreConfig::default());
    declare(&broker);
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    ch.confirm_select().unwrap();
    for i in 0..10 {
        ch.basic_publish("", "q", Default::default(), persistent(format!("ok{i}")))
            .await
            .unwrap();
    }
    fs.fail_syncs(true);
    let error = ch
        .basic_publish("", "q", Default::default(), persistent("lost"))
        .await
        .unwrap_err();
    assert_eq!(error.code, ReplyCode::InternalError);
    assert!(error.text.contains("injected sync failure"), "{error}");
    // The store stays failed: later publishes fail too, the channel stays open.
    fs.fail_syncs(false);
    let again = ch
        .basic_publish("", "q", Default::default(), persistent("later"))
        .await
        .unwrap_err();
    assert_eq!(again.code, ReplyCode::InternalError);
    ch.queue_declare("q", durable_queue(), FieldTable::new())
        .expect("the channel stays open");
    // Transient messages are not the store's: they still go.
    ch.basic_publish("", "q", Default::default(), Message::new("transient"))
        .await
        .unwrap();
    assert!(store.close().is_err(), "closing a failed store reports it");

    let after = fs.crash();
    let kept = recovered(&after);
    let want: Vec<String> = (0..10).map(|i| format!("ok{i}")).collect();
    assert_eq!(kept, want);
}

#[tokio::test]
async fn concurrent_publishers_share_syncs() {
    let fs = FaultFs::new();
    // A sync takes as long as a real disk's, so publishers arrive while one is under way.
    fs.set_sync_delay(Duration::from_millis(5));
    let (store, broker) = open_fault(&fs, Path::new(DIR), StoreConfig::default());
    declare(&broker);
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    ch.confirm_select().unwrap();
    let before = store.syncs();
    let mut pending = Vec::new();
    for i in 0..500 {
        match ch.try_basic_publish("", "q", Default::default(), persistent(format!("{i}"))) {
            TryPublish::Pending(p) => pending.push(p),
            other => panic!("a persistent message waits for the store: {other:?}"),
        }
    }
    for p in pending {
        p.wait().await.unwrap();
    }
    let syncs = store.syncs() - before;
    assert!((1..50).contains(&syncs), "500 confirms took {syncs} syncs");
}

#[tokio::test]
async fn interval_mode_confirms_at_once_and_syncs_within_the_interval() {
    let fs = FaultFs::new();
    let config = StoreConfig {
        mode: SyncMode::Interval(Duration::from_millis(20)),
        ..StoreConfig::default()
    };
    let (_store, broker) = open_fault(&fs, Path::new(DIR), config.clone());
    declare(&broker);
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    ch.confirm_select().unwrap();
    match ch.try_basic_publish("", "q", Default::default(), persistent("x")) {
        TryPublish::Done(Ok(_)) => {}
        other => panic!("interval mode confirms at once: {other:?}"),
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = fs.crash();
    let (_store, broker) = open_fault(&after, Path::new(DIR), config);
    assert_eq!(broker.queue_counts("q"), Some((1, 0)));
}

/// Publishes `count` persistent messages named `{prefix}{i}` in one transaction and commits.
async fn commit_batch(ch: &Channel, prefix: &str, count: usize) -> AmqpResult<()> {
    for i in 0..count {
        ch.basic_publish(
            "",
            "q",
            Default::default(),
            persistent(format!("{prefix}{i}")),
        )
        .await?;
    }
    ch.tx_commit().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_commit_ok_is_released_for_a_transaction_a_crash_loses() {
    for (round, crash_after) in [1usize, 10, 60].into_iter().enumerate() {
        let fs = FaultFs::new();
        // Syncs take a real disk's time, so commits are under way when the crash comes.
        fs.set_sync_delay(Duration::from_millis(2));
        let (store, broker) = open_fault(&fs, Path::new(DIR), StoreConfig::default());
        declare(&broker);
        let committed = Confirmed::new();
        let mut publishers = Vec::new();
        for p in 0..3 {
            let broker = broker.clone();
            let committed = committed.clone();
            publishers.push(tokio::spawn(async move {
                let conn = broker.connect();
                let ch = conn.open_channel().unwrap();
                ch.tx_select().unwrap();
                // Bounded, so that a broker that never fails a commit ends the test too.
                for t in 0..2000 {
                    let prefix = format!("p{p}-t{t}-");
                    match commit_batch(&ch, &prefix, 5).await {
                        Ok(()) => committed.push(prefix),
                        Err(e) => {
                            assert_eq!(e.code, ReplyCode::InternalError, "{e}");
                            return;
                        }
                    }
                }
            }));
        }
        committed.reach(crash_after).await;
        let after = fs.crash();
        for p in publishers {
            p.await.unwrap();
        }
        let committed = committed.bodies();
        drop(broker);
        drop(store);
        let kept: HashSet<String> = recovered(&after).into_iter().collect();
        for prefix in &committed {
            for i in 0..5 {
                let body = format!("{prefix}{i}");
                assert!(
                    kept.contains(&body),
                    "round {round}: {body} was committed (commit-ok) but lost in the crash"
                );
            }
        }
    }
}

#[tokio::test]
async fn a_failed_sync_fails_the_commit_and_keeps_earlier_commits() {
    let fs = FaultFs::new();
    let (_store, broker) = open_fault(&fs, Path::new(DIR), StoreConfig::default());
    declare(&broker);
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    ch.tx_select().unwrap();
    commit_batch(&ch, "ok", 3).await.unwrap();
    fs.fail_syncs(true);
    let error = commit_batch(&ch, "lost", 3).await.unwrap_err();
    assert_eq!(error.code, ReplyCode::InternalError);
    assert!(error.text.contains("injected sync failure"), "{error}");
    // Nothing of the failed commit was confirmed: after a crash only the first commit is there.
    let after = fs.crash();
    let kept = recovered(&after);
    assert_eq!(kept, ["ok0", "ok1", "ok2"]);
}
