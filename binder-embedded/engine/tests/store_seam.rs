//! The store seam: a test store that records what the broker tells it, keeps it the way a
//! durable store would, and holds publisher confirms back until the test releases them.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::dead_letter_target;
use stream_engine::*;
use tokio::sync::oneshot;

/// A call the broker made.
#[derive(Debug, Clone, PartialEq)]
enum Call {
    ExchangeDeclared(String),
    ExchangeDeleted(String),
    QueueDeclared(String),
    QueueDeleted(String),
    BindingAdded(String, String, String),
    BindingRemoved(String, String, String),
    Enqueued(String, u64),
    Delivered(String, u64),
    Removed(String, u64, Removal),
    PolicySet(String),
    PolicyCleared(String),
    OperatorPolicySet(String),
    OperatorPolicyCleared(String),
}

/// What the store keeps, as a durable store would (shared by the stores of two brokers to
/// stand for a restart).
#[derive(Debug, Default)]
struct Kept {
    calls: Vec<Call>,
    exchanges: BTreeMap<String, ExchangeDef>,
    queues: BTreeMap<String, QueueDef>,
    bindings: Vec<BindingDef>,
    policies: BTreeMap<String, PolicyDef>,
    operator_policies: BTreeMap<String, PolicyDef>,
    messages: BTreeMap<(String, u64), (Published, bool)>,
    /// Durability points not yet reached, in order.
    pending: Vec<oneshot::Sender<Result<(), StoreError>>>,
    /// Make every message durable at once instead.
    immediate: bool,
    /// `(queue, seq, publication)` of every `enqueued` call.
    publications: Vec<(String, u64, u64)>,
    /// Refuse every message for this queue (as a store over its record limit does).
    refuse: Option<String>,
}

#[derive(Debug, Clone, Default)]
struct RecordingStore(Arc<Mutex<Kept>>);

impl RecordingStore {
    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.0.lock().unwrap()
    }

    fn calls(&self) -> Vec<Call> {
        self.kept().calls.clone()
    }

    fn release_all(&self) -> usize {
        let pending = std::mem::take(&mut self.kept().pending);
        let n = pending.len();
        for tx in pending {
            let _ = tx.send(Ok(()));
        }
        n
    }

    /// Waits (yielding, up to 5 s) until the broker has asked for a durability point.
    async fn until_pending(&self) {
        let asked = async {
            while self.kept().pending.is_empty() {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(Duration::from_secs(5), asked)
            .await
            .expect("a durability point within 5 s");
    }

    fn fail_all(&self) {
        for tx in std::mem::take(&mut self.kept().pending) {
            let _ = tx.send(Err(StoreError::Failed {
                detail: "disk full".into(),
            }));
        }
    }
}

impl MessageStore for RecordingStore {
    fn keeps_messages(&self) -> bool {
        true
    }

    fn recover(&self) -> Result<Recovered, StoreError> {
        let k = self.kept();
        Ok(Recovered {
            exchanges: k.exchanges.values().cloned().collect(),
            queues: k.queues.values().cloned().collect(),
            bindings: k.bindings.clone(),
            policies: k.policies.values().cloned().collect(),
            operator_policies: k.operator_policies.values().cloned().collect(),
            messages: k
                .messages
                .iter()
                .map(|((queue, seq), (published, delivered))| RecoveredMessage {
                    queue: queue.clone(),
                    seq: *seq,
                    redelivered: *delivered,
                    published: published.clone(),
                })
                .collect(),
            positions: Vec::new(),
        })
    }

    fn exchange_declared(&self, x: &ExchangeDef) {
        let mut k = self.kept();
        k.calls.push(Call::ExchangeDeclared(x.name.clone()));
        k.exchanges.insert(x.name.clone(), x.clone());
    }

    fn exchange_deleted(&self, name: &str) {
        let mut k = self.kept();
        k.calls.push(Call::ExchangeDeleted(name.into()));
        k.exchanges.remove(name);
        k.bindings
            .retain(|b| b.source != name && b.destination != name);
    }

    fn queue_declared(&self, q: &QueueDef) {
        let mut k = self.kept();
        k.calls.push(Call::QueueDeclared(q.name.clone()));
        k.queues.insert(q.name.clone(), q.clone());
    }

    fn queue_deleted(&self, name: &str) {
        let mut k = self.kept();
        k.calls.push(Call::QueueDeleted(name.into()));
        k.queues.remove(name);
        k.messages.retain(|(q, _), _| q != name);
        k.bindings.retain(|b| b.destination != name);
    }

    fn binding_added(&self, b: &BindingDef) {
        let mut k = self.kept();
        k.calls.push(Call::BindingAdded(
            b.source.clone(),
            b.destination.clone(),
            b.routing_key.clone(),
        ));
        k.bindings.push(b.clone());
    }

    fn binding_removed(&self, b: &BindingDef) {
        let mut k = self.kept();
        k.calls.push(Call::BindingRemoved(
            b.source.clone(),
            b.destination.clone(),
            b.routing_key.clone(),
        ));
        k.bindings.retain(|kept| kept != b);
    }

    fn policy_set(&self, p: &PolicyDef) {
        let mut k = self.kept();
        k.calls.push(Call::PolicySet(p.name.clone()));
        k.policies.insert(p.name.clone(), p.clone());
    }

    fn policy_cleared(&self, name: &str) {
        let mut k = self.kept();
        k.calls.push(Call::PolicyCleared(name.into()));
        k.policies.remove(name);
    }

    fn operator_policy_set(&self, p: &PolicyDef) {
        let mut k = self.kept();
        k.calls.push(Call::OperatorPolicySet(p.name.clone()));
        k.operator_policies.insert(p.name.clone(), p.clone());
    }

    fn operator_policy_cleared(&self, name: &str) {
        let mut k = self.kept();
        k.calls.push(Call::OperatorPolicyCleared(name.into()));
        k.operator_policies.remove(name);
    }

    fn enqueued(&self, m: &StoredMessage<'_>) -> Durability {
        let mut k = self.kept();
        if k.refuse.as_deref() == Some(m.queue) {
            return Durability::refused(StoreError::Failed {
                detail: "over the record limit".into(),
            });
        }
        k.calls.push(Call::Enqueued(m.queue.into(), m.seq));
        k.publications.push((m.queue.into(), m.seq, m.publication));
        k.messages
            .insert((m.queue.into(), m.seq), (m.published(), false));
        if k.immediate {
            return Durability::Durable;
        }
        let (tx, rx) = oneshot::channel();
        k.pending.push(tx);
        Durability::pending(async move {
            rx.await.unwrap_or_else(|_| {
                Err(StoreError::Failed {
                    detail: "store dropped".into(),
                })
            })
        })
    }

    fn delivered(&self, queue: &str, seq: u64) {
        let mut k = self.kept();
        k.calls.push(Call::Delivered(queue.into(), seq));
        if let Some(m) = k.messages.get_mut(&(queue.to_owned(), seq)) {
            m.1 = true;
        }
    }

    fn removed(&self, queue: &str, seq: u64, why: Removal) {
        let mut k = self.kept();
        k.calls.push(Call::Removed(queue.into(), seq, why));
        k.messages.remove(&(queue.to_owned(), seq));
    }
}

fn durable() -> QueueOptions {
    QueueOptions {
        durable: true,
        ..Default::default()
    }
}

fn persistent(text: &str) -> Message {
    let mut m = Message::new(text.as_bytes().to_vec());
    m.properties.delivery_mode = Some(2);
    m
}

fn text(d: &Delivery) -> String {
    String::from_utf8(d.message().payload.to_vec()).unwrap()
}

fn broker(store: &RecordingStore) -> Broker {
    Broker::with_store(BrokerConfig::default(), store.clone()).expect("recover")
}

#[tokio::test]
async fn a_confirm_waits_for_the_stores_durability_point() {
    let store = RecordingStore::default();
    let broker = broker(&store);
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    ch.queue_declare("orders", durable(), FieldTable::new())
        .unwrap();
    ch.queue_declare("scratch", QueueOptions::default(), FieldTable::new())
        .unwrap();
    ch.confirm_select().unwrap();

    let pending = match ch.try_basic_publish("", "orders", Default::default(), persistent("a")) {
        TryPublish::Pending(p) => p,
        other => panic!("a persistent message in a durable queue waits for the store: {other:?}"),
    };
    let waiting = tokio::spawn(pending.wait());
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiting.is_finished(), "the confirm waits for durability");
    assert_eq!(
        broker.queue_counts("orders"),
        Some((1, 0)),
        "the message is enqueued meanwhile"
    );
    assert_eq!(store.release_all(), 1);
    let outcome = waiting.await.unwrap().unwrap();
    assert_eq!(outcome.status, PublishStatus::Routed(1));
    assert_eq!(outcome.seq, Some(1));

    // basic_publish waits the same way.
    let publish = ch.basic_publish("", "orders", Default::default(), persistent("b"));
    tokio::pin!(publish);
    assert!(
        tokio::time::timeout(Duration::from_millis(50), &mut publish)
            .await
            .is_err(),
        "basic_publish returns only once the store has the message"
    );
    store.release_all();
    assert_eq!(publish.await.unwrap().status, PublishStatus::Routed(1));

    // Transient messages, and any message in a transient queue, are not the store's.
    for (queue, message) in [
        ("orders", Message::new("transient")),
        ("scratch", persistent("c")),
    ] {
        match ch.try_basic_publish("", queue, Default::default(), message) {
            TryPublish::Done(Ok(outcome)) => assert_eq!(outcome.status, PublishStatus::Routed(1)),
            other => panic!("{queue}: confirmed at once, got {other:?}"),
        }
    }
    assert_eq!(store.kept().pending.len(), 0);

    // A store that fails to keep a message fails its confirm, not the channel.
    let pending = match ch.try_basic_publish("", "orders", Default::default(), persistent("d")) {
        TryPublish::Pending(p) => p,
        other => panic!("{other:?}"),
    };
    store.fail_all();
    let error = pending.wait().await.unwrap_err();
    assert_eq!(error.code, ReplyCode::InternalError);
    assert!(error.text.contains("disk full"), "{error}");
    ch.queue_declare("orders", durable(), FieldTable::new())
        .expect("the channel stays open");
}

#[tokio::test]
async fn declarations_deliveries_and_acks_reach_the_store() {
    let store = RecordingStore::default();
    store.kept().immediate = true;
    let broker = broker(&store);
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    let durable_x = ExchangeOptions {
        durable: true,
        ..Default::default()
    };
    ch.exchange_declare("events", ExchangeKind::Topic, durable_x, FieldTable::new())
        .unwrap();
    ch.exchange_declare(
        "transient-x",
        ExchangeKind::Fanout,
        ExchangeOptions::default(),
        FieldTable::new(),
    )
    .unwrap();
    ch.queue_declare("audit", durable(), FieldTable::new())
        .unwrap();
    ch.queue_declare("temp", QueueOptions::default(), FieldTable::new())
        .unwrap();
    ch.queue_bind("audit", "events", "order.#", FieldTable::new())
        .unwrap();
    ch.queue_bind("temp", "events", "order.#", FieldTable::new())
        .unwrap();
    ch.queue_bind("audit", "events", "order.#", FieldTable::new())
        .unwrap();
    assert_eq!(
        store.calls(),
        vec![
            Call::ExchangeDeclared("events".into()),
            Call::QueueDeclared("audit".into()),
            Call::BindingAdded("events".into(), "audit".into(), "order.#".into()),
        ],
        "durable declarations only, each once"
    );

    ch.basic_publish(
        "events",
        "order.created",
        Default::default(),
        persistent("1"),
    )
    .await
    .unwrap();
    ch.basic_publish(
        "events",
        "order.created",
        Default::default(),
        persistent("2"),
    )
    .await
    .unwrap();
    let first = ch.basic_get("audit", false).unwrap().unwrap().delivery;
    ch.basic_ack(first.delivery_tag, false).unwrap();
    let second = ch.basic_get("audit", false).unwrap().unwrap().delivery;
    ch.basic_nack(second.delivery_tag, false, true).unwrap();
    let again = ch.basic_get("audit", false).unwrap().unwrap().delivery;
    assert!(again.redelivered);
    ch.basic_reject(again.delivery_tag, false).unwrap();
    ch.queue_unbind("audit", "events", "order.#", &FieldTable::new())
        .unwrap();
    ch.queue_delete("audit", false, false).unwrap();
    ch.exchange_delete("events", false).unwrap();
    assert_eq!(
        store.calls()[3..],
        [
            Call::Enqueued("audit".into(), 1),
            Call::Enqueued("audit".into(), 2),
            Call::Delivered("audit".into(), 1),
            Call::Removed("audit".into(), 1, Removal::Acked),
            Call::Delivered("audit".into(), 2),
            Call::Removed("audit".into(), 2, Removal::Dropped),
            Call::BindingRemoved("events".into(), "audit".into(), "order.#".into()),
            Call::QueueDeleted("audit".into()),
            Call::ExchangeDeleted("events".into()),
        ],
        "a redelivery is not reported again; a rejection removes the message"
    );
}

#[tokio::test]
async fn recover_restores_exchanges_queues_bindings_and_messages() {
    let store = RecordingStore::default();
    store.kept().immediate = true;
    {
        let broker = broker(&store);
        let conn = broker.connect();
        let ch = conn.open_channel().unwrap();
        let durable_x = ExchangeOptions {
            durable: true,
            ..Default::default()
        };
        ch.exchange_declare("jobs", ExchangeKind::Direct, durable_x, FieldTable::new())
            .unwrap();
        ch.queue_declare("work", durable(), FieldTable::new())
            .unwrap();
        ch.queue_bind("work", "jobs", "run", FieldTable::new())
            .unwrap();
        for body in ["one", "two", "three"] {
            let m = persistent(body).with_header("job", body);
            ch.basic_publish("jobs", "run", Default::default(), m)
                .await
                .unwrap();
        }
        let one = ch.basic_get("work", false).unwrap().unwrap().delivery;
        ch.basic_ack(one.delivery_tag, false).unwrap();
        // Delivered, never acknowledged: the broker stops with it outstanding.
        let two = ch.basic_get("work", false).unwrap().unwrap().delivery;
        assert_eq!(text(&two), "two");
        std::mem::forget(ch);
        std::mem::forget(conn);
    }

    let restarted = broker(&store);
    let conn = restarted.connect();
    let ch = conn.open_channel().unwrap();
    assert!(restarted.exchange_exists("jobs"));
    assert_eq!(restarted.queue_counts("work"), Some((2, 0)));
    let two = ch.basic_get("work", false).unwrap().unwrap().delivery;
    assert_eq!(text(&two), "two");
    assert!(two.redelivered, "delivered before the restart");
    assert_eq!(two.message().headers.get_str("job"), Some("two"));
    assert_eq!(two.exchange(), "jobs");
    assert_eq!(two.routing_key(), "run");
    let three = ch.basic_get("work", false).unwrap().unwrap().delivery;
    assert_eq!(text(&three), "three");
    assert!(!three.redelivered);

    // The binding came back: a new message routes, and is stored after the recovered ones.
    ch.basic_publish("jobs", "run", Default::default(), persistent("four"))
        .await
        .unwrap();
    assert_eq!(
        store.calls().last(),
        Some(&Call::Enqueued("work".into(), 4)),
        "recovery reports nothing back; sequence numbers go on"
    );
    ch.basic_ack(three.delivery_tag, true).unwrap();
    assert_eq!(
        store.kept().messages.keys().cloned().collect::<Vec<_>>(),
        vec![("work".to_owned(), 4)]
    );
}

#[tokio::test]
async fn a_commit_returns_once_the_store_has_its_persistent_messages() {
    let store = RecordingStore::default();
    let broker = broker(&store);
    let conn = broker.connect();
    let tx = conn.open_channel().unwrap();
    tx.queue_declare("orders", durable(), FieldTable::new())
        .unwrap();
    tx.tx_select().unwrap();
    for text in ["one", "two"] {
        let _ = tx.try_basic_publish("", "orders", Default::default(), persistent(text));
    }
    assert_eq!(
        store.kept().pending.len(),
        0,
        "nothing is written before the commit"
    );

    let commit = tx.tx_commit();
    tokio::pin!(commit);
    assert!(
        tokio::time::timeout(Duration::from_millis(50), &mut commit)
            .await
            .is_err(),
        "tx.commit waits for the store"
    );
    assert_eq!(
        broker.queue_counts("orders"),
        Some((2, 0)),
        "applied meanwhile"
    );
    assert_eq!(store.release_all(), 2);
    commit.await.expect("committed once both are durable");

    // A store that fails to keep a committed message fails the commit.
    let _ = tx.try_basic_publish("", "orders", Default::default(), persistent("three"));
    let commit = tx.tx_commit();
    tokio::pin!(commit);
    assert!(
        tokio::time::timeout(Duration::from_millis(50), &mut commit)
            .await
            .is_err()
    );
    store.fail_all();
    let error = commit.await.unwrap_err();
    assert_eq!(error.code, ReplyCode::InternalError);
    assert!(error.text.contains("disk full"), "{error}");
}

#[tokio::test]
async fn a_failed_commit_leaves_no_durability_point_for_the_next_publisher() {
    let store = RecordingStore::default();
    let broker = broker(&store);
    let conn = broker.connect();
    let tx = conn.open_channel().unwrap();
    tx.queue_declare("orders", durable(), FieldTable::new())
        .unwrap();
    tx.queue_declare("scratch", QueueOptions::default(), FieldTable::new())
        .unwrap();
    let _ = tx.try_basic_publish("", "scratch", Default::default(), Message::new("to get"));
    let got = tx
        .basic_get("scratch", false)
        .unwrap()
        .expect("a message to get");
    tx.tx_select().unwrap();
    let _ = tx.try_basic_publish("", "orders", Default::default(), persistent("in tx"));
    // The second ack of one delivery fails the commit after the publish was applied (and its
    // write handed to the store).
    tx.basic_ack(got.delivery.delivery_tag, false).unwrap();
    tx.basic_ack(got.delivery.delivery_tag, false).unwrap();
    assert!(
        tx.tx_commit().await.is_err(),
        "the commit fails on the second ack"
    );
    assert_eq!(
        store.kept().pending.len(),
        1,
        "the committed publish is being written"
    );

    let other = conn.open_channel().unwrap();
    other.confirm_select().unwrap();
    match other.try_basic_publish("", "scratch", Default::default(), Message::new("later")) {
        TryPublish::Done(Ok(outcome)) => assert_eq!(outcome.status, PublishStatus::Routed(1)),
        other => {
            panic!("a transient publish confirms at once, not after the commit's writes: {other:?}")
        }
    }
}

#[tokio::test]
async fn the_queues_of_one_publish_share_its_publication_number() {
    let store = RecordingStore::default();
    store.kept().immediate = true;
    let broker = broker(&store);
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    let durable_x = ExchangeOptions {
        durable: true,
        ..Default::default()
    };
    ch.exchange_declare("fan", ExchangeKind::Fanout, durable_x, FieldTable::new())
        .unwrap();
    for q in ["a", "b"] {
        ch.queue_declare(q, durable(), FieldTable::new()).unwrap();
        ch.queue_bind(q, "fan", "", FieldTable::new()).unwrap();
    }
    for body in ["1", "2"] {
        ch.basic_publish("fan", "", Default::default(), persistent(body))
            .await
            .unwrap();
    }
    ch.basic_publish("", "a", Default::default(), persistent("3"))
        .await
        .unwrap();
    let p = store.kept().publications.clone();
    assert_eq!(p.len(), 5);
    assert_eq!(p[0].2, p[1].2, "one fanout publish, one number: {p:?}");
    assert_eq!(p[2].2, p[3].2, "{p:?}");
    assert_ne!(p[1].2, p[2].2, "each publish has its own: {p:?}");
    assert_ne!(p[3].2, p[4].2, "{p:?}");
    let queues: Vec<&str> = p.iter().map(|(q, _, _)| q.as_str()).collect();
    let mut first = queues[..2].to_vec();
    first.sort();
    assert_eq!(first, ["a", "b"]);
}

#[tokio::test]
async fn a_redrive_removes_the_original_only_once_the_copy_is_durable() {
    let store = RecordingStore::default();
    let broker = broker(&store);
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    for q in ["work", "work.dlq"] {
        ch.queue_declare(q, durable(), FieldTable::new()).unwrap();
    }
    for text in ["a", "b"] {
        let publish = ch.basic_publish("", "work.dlq", Default::default(), persistent(text));
        tokio::pin!(publish);
        while tokio::time::timeout(Duration::from_millis(5), &mut publish)
            .await
            .is_err()
        {
            store.release_all();
        }
    }
    let seqs: Vec<u64> = broker
        .peek("work.dlq", 10)
        .unwrap()
        .iter()
        .map(|m| m.seq)
        .collect();

    // The copy's write is pending: the original stays until it is durable.
    let redrive = tokio::spawn({
        let (broker, seq) = (broker.clone(), seqs[0]);
        async move { broker.redrive("work.dlq", seq, "", "work").await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!redrive.is_finished());
    assert_eq!(
        broker.queue_counts("work.dlq"),
        Some((2, 0)),
        "both still there"
    );
    assert_eq!(
        broker.queue_counts("work"),
        Some((1, 0)),
        "the copy is enqueued"
    );
    assert_eq!(store.release_all(), 1);
    assert_eq!(redrive.await.unwrap().unwrap(), Redrive::Moved(1));
    assert_eq!(broker.queue_counts("work.dlq"), Some((1, 0)));
    assert!(
        store
            .calls()
            .contains(&Call::Removed("work.dlq".into(), seqs[0], Removal::Moved)),
        "the store forgets the original, moved"
    );

    // A store that fails to keep the copy leaves the original where it was.
    let redrive = tokio::spawn({
        let (broker, seq) = (broker.clone(), seqs[1]);
        async move { broker.redrive("work.dlq", seq, "", "work").await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    store.fail_all();
    let error = redrive.await.unwrap().unwrap_err();
    assert_eq!(error.code, ReplyCode::InternalError);
    let left = broker.peek("work.dlq", 10).unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].seq, seqs[1], "not lost");
    assert!(!left[0].redelivered, "peeking delivers nothing");

    // Unroutable: nothing moves, and a gone message is said to be gone.
    assert_eq!(
        broker
            .redrive("work.dlq", seqs[1], "amq.direct", "nowhere")
            .await
            .unwrap(),
        Redrive::Unroutable
    );
    assert_eq!(broker.queue_counts("work.dlq"), Some((1, 0)));
    assert_eq!(
        broker
            .redrive("work.dlq", seqs[0], "", "work")
            .await
            .unwrap(),
        Redrive::NotFound
    );
    assert_eq!(broker.discard("work.dlq", seqs[1]), Ok(true));
    assert!(
        store
            .calls()
            .contains(&Call::Removed("work.dlq".into(), seqs[1], Removal::Acked)),
        "a discarded message is acknowledged for the store"
    );
    assert_eq!(broker.discard("work.dlq", seqs[1]), Ok(false));
    assert_eq!(broker.queue_counts("work.dlq"), Some((0, 0)));
    assert_eq!(
        broker
            .redrive("nope", 1, "", "work")
            .await
            .unwrap_err()
            .code,
        ReplyCode::NotFound
    );

    // Counters for management: two publishes to work.dlq plus the copies to work.
    let queues = broker.queues();
    let work = queues.iter().find(|q| q.name == "work").unwrap();
    let dlq = queues.iter().find(|q| q.name == "work.dlq").unwrap();
    assert_eq!((dlq.published, dlq.delivered), (2, 0));
    assert_eq!(work.published, 2, "the redriven and the failed copy");
    assert!(work.durable);
    assert_eq!(
        broker.totals().published,
        5,
        "2 publishes and 3 redrive copies"
    );
}

/// A delivery of a queue deleted since, and declared again under the same name, belongs to
/// neither: settling it late removes nothing of the new queue's from the store, and neither
/// requeues it nor dead-letters it through the new queue; closing its channel does not
/// requeue it there either; it is not counted as the new queue's, and what it held in memory
/// goes with it.
#[tokio::test]
async fn a_deleted_queues_delivery_settled_late_leaves_a_queue_of_the_same_name_alone() {
    let store = RecordingStore::default();
    store.kept().immediate = true;
    let broker = broker(&store);
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    ch.queue_declare("orders", durable(), FieldTable::new())
        .unwrap();
    for old in ["old-1", "old-2", "old-3", "old-4"] {
        ch.basic_publish("", "orders", Default::default(), persistent(old))
            .await
            .unwrap();
    }
    let tags: Vec<u64> = (0..4)
        .map(|_| {
            ch.basic_get("orders", false)
                .unwrap()
                .unwrap()
                .delivery
                .delivery_tag
        })
        .collect();

    let other = conn.open_channel().unwrap();
    other.queue_delete("orders", false, false).unwrap();
    // The new queue dead-letters to `dead`: a late reject must not reach it.
    dead_letter_target(&other, "dlx", "dead");
    let args: FieldTable = [("x-dead-letter-exchange".to_owned(), FieldValue::from("dlx"))]
        .into_iter()
        .collect();
    other.queue_declare("orders", durable(), args).unwrap();
    for new in ["new-1", "new-2", "new-3"] {
        other
            .basic_publish("", "orders", Default::default(), persistent(new))
            .await
            .unwrap();
    }
    let before = store.calls().len();
    assert_eq!(
        broker.queue_unacked("orders"),
        Some(0),
        "the old deliveries are not its"
    );
    let info = broker
        .queues()
        .into_iter()
        .find(|q| q.name == "orders")
        .unwrap();
    assert_eq!(info.messages_unacknowledged, 0);

    ch.basic_ack(tags[0], false).unwrap();
    ch.basic_nack(tags[1], false, true).unwrap();
    ch.basic_reject(tags[2], false).unwrap();
    // The fourth is left to the channel's close, which requeues what it holds.
    ch.close();

    let after = store.calls()[before..].to_vec();
    assert!(
        !after
            .iter()
            .any(|c| matches!(c, Call::Removed(q, ..) if q == "orders")),
        "nothing of the new queue's is removed: {after:?}"
    );
    assert_eq!(
        broker.queue_counts("orders"),
        Some((3, 0)),
        "the new queue holds its own three, nothing requeued into it"
    );
    assert_eq!(
        broker.queue_counts("dead"),
        Some((0, 0)),
        "nothing dead-lettered"
    );
    other.queue_purge("orders").unwrap();
    assert_eq!(broker.memory_used(), 0, "the old deliveries hold no memory");
}

/// A redrive whose copy is still being made durable when its queue is deleted, and declared
/// again under the same name, leaves the new queue's messages alone: the original went with
/// the old queue, and the message of the same number in the new one is another message.
#[tokio::test]
async fn a_redrive_finishing_after_its_queue_was_declared_again_leaves_the_new_one_alone() {
    let store = RecordingStore::default();
    let broker = broker(&store);
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    for q in ["work", "work.dlq"] {
        ch.queue_declare(q, durable(), FieldTable::new()).unwrap();
    }
    let publish = ch.basic_publish("", "work.dlq", Default::default(), persistent("old"));
    tokio::pin!(publish);
    while tokio::time::timeout(Duration::from_millis(5), &mut publish)
        .await
        .is_err()
    {
        store.release_all();
    }
    let seq = broker.peek("work.dlq", 1).unwrap()[0].seq;

    let redrive = tokio::spawn({
        let broker = broker.clone();
        async move { broker.redrive("work.dlq", seq, "", "work").await }
    });
    store.until_pending().await;
    assert!(!redrive.is_finished(), "the copy waits for the store");
    ch.queue_delete("work.dlq", false, false).unwrap();
    ch.queue_declare("work.dlq", durable(), FieldTable::new())
        .unwrap();
    // Enough messages that one has the redriven message's number.
    let fresh = seq as u32 + 1;
    for _ in 0..fresh {
        let published = ch.try_basic_publish("", "work.dlq", Default::default(), persistent("new"));
        assert!(matches!(published, TryPublish::Pending(_)), "{published:?}");
    }
    store.release_all();
    assert_eq!(redrive.await.unwrap().unwrap(), Redrive::Moved(1));
    assert_eq!(
        broker.queue_counts("work.dlq"),
        Some((fresh, 0)),
        "the new queue keeps every message of its own"
    );
}

/// A dead letter whose copy the store refuses (over its record limit, say) is not taken by
/// its dead-letter queue, and the store keeps the original (its removal is not reported): a
/// restart brings it back to its queue rather than leave it in neither.
#[tokio::test]
async fn a_dead_letter_whose_copy_the_store_refuses_stays_in_the_store() {
    let store = RecordingStore::default();
    store.kept().immediate = true;
    store.kept().refuse = Some("work.dlq".to_owned());
    let broker = broker(&store);
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    let mut args = FieldTable::new();
    args.insert("x-dead-letter-exchange", FieldValue::from(""));
    args.insert("x-dead-letter-routing-key", FieldValue::from("work.dlq"));
    ch.queue_declare("work", durable(), args).unwrap();
    ch.queue_declare("work.dlq", durable(), FieldTable::new())
        .unwrap();
    ch.basic_publish("", "work", Default::default(), persistent("m"))
        .await
        .unwrap();
    let got = ch.basic_get("work", false).unwrap().unwrap();
    ch.basic_reject(got.delivery.delivery_tag, false).unwrap();
    assert_eq!(
        broker.queue_counts("work.dlq"),
        Some((0, 0)),
        "the copy refused"
    );
    assert!(
        !store
            .calls()
            .iter()
            .any(|c| matches!(c, Call::Removed(q, ..) if q == "work")),
        "the store keeps the original: {:?}",
        store.calls()
    );
    // A restart finds it back in its queue.
    drop((ch, conn, broker));
    let broker = self::broker(&store);
    assert_eq!(broker.queue_counts("work"), Some((1, 0)));
}

#[tokio::test]
async fn a_queue_recovered_past_its_max_length_drops_its_oldest_at_start() {
    let store = RecordingStore::default();
    store.kept().immediate = true;
    let mut limited = FieldTable::new();
    limited.insert("x-max-length", FieldValue::I32(2));
    limited.insert("x-dead-letter-exchange", FieldValue::from(""));
    limited.insert("x-dead-letter-routing-key", FieldValue::from("dlq"));
    {
        let broker = broker(&store);
        let conn = broker.connect();
        let ch = conn.open_channel().unwrap();
        ch.queue_declare("dlq", durable(), FieldTable::new())
            .unwrap();
        ch.queue_declare("work", durable(), limited).unwrap();
        for body in ["one", "two"] {
            ch.basic_publish("", "work", Default::default(), persistent(body))
                .await
                .unwrap();
        }
        // Delivered, never acknowledged: back in the queue, at its head, after the restart.
        let one = ch.basic_get("work", false).unwrap().unwrap().delivery;
        assert_eq!(text(&one), "one");
        ch.basic_publish("", "work", Default::default(), persistent("three"))
            .await
            .unwrap();
        assert_eq!(broker.queue_counts("work"), Some((2, 0)));
        std::mem::forget(ch);
        std::mem::forget(conn);
    }

    let before = store.calls().len();
    let restarted = broker(&store);
    assert_eq!(restarted.queue_counts("work"), Some((2, 0)));
    assert_eq!(
        store.calls()[before..],
        [
            Call::Enqueued("dlq".into(), 1),
            Call::Removed("work".into(), 1, Removal::DeadLettered)
        ],
        "the trim reaches the store"
    );
    assert_eq!(
        store.kept().messages.keys().cloned().collect::<Vec<_>>(),
        [
            ("dlq".to_owned(), 1),
            ("work".to_owned(), 2),
            ("work".to_owned(), 3)
        ]
    );
    let conn = restarted.connect();
    let ch = conn.open_channel().unwrap();
    let dead = ch.basic_get("dlq", true).unwrap().unwrap().delivery;
    assert_eq!(text(&dead), "one");
    let Some(FieldValue::Array(deaths)) = dead.message().headers.get("x-death") else {
        panic!("no x-death: {:?}", dead.message().headers);
    };
    let Some(FieldValue::Table(death)) = deaths.first() else {
        panic!("x-death is {deaths:?}");
    };
    assert_eq!(death.get_str("reason"), Some("maxlen"));
    for expected in ["two", "three"] {
        let d = ch.basic_get("work", true).unwrap().unwrap().delivery;
        assert_eq!(text(&d), expected);
    }
}

fn max_length(name: &str, pattern: &str, n: i64) -> PolicyDef {
    let mut definition = FieldTable::new();
    definition.insert("max-length", FieldValue::I64(n));
    PolicyDef {
        name: name.into(),
        pattern: pattern.into(),
        apply_to: PolicyTarget::Queues,
        priority: 0,
        definition,
    }
}

#[tokio::test]
async fn policies_reach_the_store_and_apply_again_after_a_restart() {
    let store = RecordingStore::default();
    store.kept().immediate = true;
    {
        let broker = broker(&store);
        let conn = broker.connect();
        let ch = conn.open_channel().unwrap();
        ch.queue_declare("work", durable(), FieldTable::new())
            .unwrap();
        for body in ["one", "two", "three"] {
            ch.basic_publish("", "work", Default::default(), persistent(body))
                .await
                .unwrap();
        }
        broker.set_policy(max_length("short", "^work$", 2)).unwrap();
        assert_eq!(broker.queue_counts("work"), Some((2, 0)));
        let calls = store.calls();
        assert_eq!(
            calls[calls.len() - 2..],
            [
                Call::PolicySet("short".into()),
                Call::Removed("work".into(), 1, Removal::Dropped)
            ],
            "the oldest message is dropped from the store as from the queue"
        );
        broker.set_policy(max_length("other", "^x", 1)).unwrap();
        broker.clear_policy("other").unwrap();
        assert_eq!(
            store.calls().last(),
            Some(&Call::PolicyCleared("other".into()))
        );
        let missing = broker.clear_policy("other").unwrap_err();
        assert_eq!(missing.code, ReplyCode::NotFound);
        assert_eq!(missing.text, "no policy 'other' in vhost '/'");
        std::mem::forget(ch);
        std::mem::forget(conn);
    }

    let restarted = broker(&store);
    assert_eq!(restarted.policies(), [max_length("short", "^work$", 2)]);
    assert_eq!(restarted.queues()[0].policy.as_deref(), Some("short"));
    let conn = restarted.connect();
    let ch = conn.open_channel().unwrap();
    ch.basic_publish("", "work", Default::default(), persistent("four"))
        .await
        .unwrap();
    assert_eq!(
        restarted.queue_counts("work"),
        Some((2, 0)),
        "still limited"
    );
    let head = ch.basic_get("work", true).unwrap().unwrap().delivery;
    assert_eq!(text(&head), "three");
}

#[tokio::test]
async fn operator_policies_are_kept_apart_from_policies_and_cap_them_after_a_restart() {
    let store = RecordingStore::default();
    store.kept().immediate = true;
    {
        let broker = broker(&store);
        let conn = broker.connect();
        let ch = conn.open_channel().unwrap();
        ch.queue_declare("work", durable(), FieldTable::new())
            .unwrap();
        for body in ["one", "two", "three", "four"] {
            ch.basic_publish("", "work", Default::default(), persistent(body))
                .await
                .unwrap();
        }
        // The same name in both sets: two policies.
        broker.set_policy(max_length("short", "^work$", 3)).unwrap();
        assert!(
            !broker
                .set_operator_policy(max_length("short", "^work$", 2))
                .unwrap()
        );
        assert_eq!(broker.queue_counts("work"), Some((2, 0)), "the smaller");
        let calls = store.calls();
        assert_eq!(
            calls[calls.len() - 2..],
            [
                Call::OperatorPolicySet("short".into()),
                Call::Removed("work".into(), 2, Removal::Dropped)
            ]
        );
        let refused = broker
            .set_operator_policy(PolicyDef {
                definition: FieldTable::from_iter([(
                    "dead-letter-exchange".to_owned(),
                    FieldValue::from("dlx"),
                )]),
                ..max_length("dlx", ".", 0)
            })
            .unwrap_err();
        assert_eq!(refused.code, ReplyCode::PreconditionFailed);
        broker
            .set_operator_policy(max_length("other", "^x", 1))
            .unwrap();
        broker.clear_operator_policy("other").unwrap();
        assert_eq!(
            store.calls().last(),
            Some(&Call::OperatorPolicyCleared("other".into()))
        );
        let missing = broker.clear_operator_policy("other").unwrap_err();
        assert_eq!(missing.text, "no operator policy 'other' in vhost '/'");
        std::mem::forget(ch);
        std::mem::forget(conn);
    }

    let restarted = broker(&store);
    assert_eq!(restarted.policies(), [max_length("short", "^work$", 3)]);
    assert_eq!(
        restarted.operator_policies(),
        [max_length("short", "^work$", 2)]
    );
    let work = &restarted.queues()[0];
    assert_eq!(
        (work.policy.as_deref(), work.operator_policy.as_deref()),
        (Some("short"), Some("short"))
    );
    assert_eq!(
        work.policy_definition.get("max-length"),
        Some(&FieldValue::I64(2))
    );
    let conn = restarted.connect();
    let ch = conn.open_channel().unwrap();
    ch.basic_publish("", "work", Default::default(), persistent("five"))
        .await
        .unwrap();
    assert_eq!(restarted.queue_counts("work"), Some((2, 0)), "still capped");
    // Clearing the operator policy leaves the policy's limit.
    restarted.clear_operator_policy("short").unwrap();
    for body in ["six", "seven"] {
        ch.basic_publish("", "work", Default::default(), persistent(body))
            .await
            .unwrap();
    }
    assert_eq!(restarted.queue_counts("work"), Some((3, 0)));
    assert_eq!(restarted.queues()[0].operator_policy, None);
}

#[tokio::test]
async fn a_kept_policy_the_broker_refuses_stays_in_the_store_unapplied_until_cleared() {
    let store = RecordingStore::default();
    let mut refused = max_length("old", "^work$", 2);
    refused
        .definition
        .insert("ha-mode", FieldValue::from("all"));
    {
        let mut kept = store.kept();
        kept.policies.insert("old".into(), refused);
        kept.policies
            .insert("short".into(), max_length("short", "^work$", 1));
        // An operator policy of the same name, with a key operator policies do not set.
        let mut operator = max_length("old", "^work$", 1);
        operator
            .definition
            .insert("dead-letter-exchange", FieldValue::from("dlx"));
        kept.operator_policies.insert("old".into(), operator);
        kept.queues.insert(
            "work".into(),
            QueueDef {
                name: "work".into(),
                options: durable(),
                arguments: FieldTable::new(),
            },
        );
    }
    let broker = broker(&store);
    assert_eq!(broker.policies(), [max_length("short", "^work$", 1)]);
    assert_eq!(broker.queues()[0].policy.as_deref(), Some("short"));
    assert!(store.calls().is_empty(), "nothing written back");
    assert_eq!(
        store.kept().policies.len(),
        2,
        "a later version may take it again"
    );
    assert!(broker.operator_policies().is_empty());
    assert_eq!(broker.queues()[0].operator_policy, None);
    // Cleared by its kind and name, as any other.
    broker.clear_policy("old").unwrap();
    assert_eq!(store.calls(), [Call::PolicyCleared("old".into())]);
    assert!(broker.clear_policy("old").is_err());
    assert_eq!(
        store.kept().operator_policies.len(),
        1,
        "not the operator one"
    );
    broker.clear_operator_policy("old").unwrap();
    assert_eq!(
        store.calls().last(),
        Some(&Call::OperatorPolicyCleared("old".into()))
    );
    assert!(broker.clear_operator_policy("old").is_err());
}
