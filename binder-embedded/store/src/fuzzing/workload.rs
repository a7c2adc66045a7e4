//! What the `workload` fuzz target drives: broker operations on a disk store, decoded from
//! the input, checked at every step against a model of what each queue holds. Small segments
//! make the writer delete and compact them under the workload; with paging on, a queue's
//! messages beyond the 512 the engine always keeps in memory are paged, so that deliveries,
//! peeks, dead letters and re-drives read them back from the segments.
//!
//! An input is a settings byte (bit 0: segments of 4 KiB, else 64 KiB; bit 1: page every
//! persistent message the engine may page, else none; bit 2: one command per writer batch, so
//! that a crash falls between the commands of one operation more often; bit 3: `interval`
//! mode, a sync every 10 ms, where a crash is the process killed once the store's writer has
//! handled every command, rather than the power lost, since a power loss may take what
//! `interval` mode confirmed, and so may a kill before the writer took it; bit 4: the same
//! with `none` mode, which syncs only at a clean close; bit 5: the store can fail, see
//! operation 10), then operations: a
//! byte whose low four bits choose the operation and whose high four bits its queue (modulo
//! 4), and for operations 0–9 and 15 an argument byte:
//!
//! | low bits | operation |
//! |---|---|
//! | 0, 1 | publish one persistent message (size `23 × arg`, priority `arg % 4`), confirmed |
//! | 2 | publish `16 + 2 × arg` small persistent messages at once (a queue up to 800), then await their confirms |
//! | 3 | `arg` ≥ 128: publish one persistent message to the fanout exchange (`w0` and `w1`); else one transient message |
//! | 4 | `arg` ≥ 128: consume with a prefetch of `2 × (arg & 127) + 1`, take what comes, cancel; else get `arg % 4 + 1` messages |
//! | 5, 6, 7, 8 | ack, ack `multiple`, nack with requeue, reject one held delivery (`arg` modulo their count) |
//! | 9 | re-drive a ready dead letter (`arg` modulo their count) to queue `arg >> 4` |
//! | 10 | peek; with settings bit 5, on `w0` holding at least 400 messages, the first time, the store fails instead: every append fails from then on (a full disk; with bit 6 of the operation's byte set, after 20 ms, a stalling one) while a burst of up to 300 persistent messages goes to `w0`; those the broker took before it learned of the failure stay, paged or not, without a copy in the files, and every later persistent message (a publish, a dead letter's or a re-drive's copy) is refused, until the next restart, which is a crash |
//! | 11, 12 | purge, delete and declare again |
//! | 13 | close the channel (its deliveries are requeued) and open another |
//! | 14 | crash (the files cut to what was synced; with settings bit 3, the process killed: the files as written) and restart |
//! | 15 | clean restart; with `arg` odd the marker is removed first (a full scan) |
//!
//! The queues: `w0` (plain), `w1` (`x-max-priority: 3`), `w2` (dead-letters to `dlq`
//! through the default exchange, rejected messages and those its `x-max-length` of 600
//! drops), `dlq` (plain), all durable, and a durable fanout exchange `fan` bound to `w0` and
//! `w1` (a message published to it is written once, with a reference record for its second
//! queue). Every message carries its own id
//! in its body, so a delivery, a peek or a recovery names what it holds.
//!
//! With `STREAM_STORE_WORKLOAD_TRACE` set, each operation is printed to stderr as it runs.
//!
//! Checked:
//! * every body read back (delivered, fetched, peeked, re-driven) is the one published under
//!   its id;
//! * a get returns the message the model says is next, a consumer the first ones up to its
//!   prefetch (arrival order; priority first in `w1`; requeued messages at their old place);
//!   a peek lists exactly the ready ones in that order; a purge counts them;
//! * after a clean restart each queue holds exactly its persistent messages that were not
//!   settled (unacknowledged ones requeued), in order, from the marker; a restart that
//!   removes the marker first recovers the same by the full scan;
//! * after a crash (what was not synced is lost) each queue holds every persistent message
//!   it held, in order, none more often than it held it, and nothing else but messages
//!   settled since the last restart (after a kill: in `interval` mode only those
//!   dead-lettered or re-driven away, in `none` mode none; and those settled while the store
//!   failed). A message dead-lettered since then may be missing from its dead-letter queue
//!   only if it is back in the old one, and one whose copy the failed store refused must be
//!   back. Messages the failed store could not write are not counted;
//! * after a store failure, every persistent publish is refused with 541, and every message
//!   the broker took is still delivered and peeked with its body;
//! * `w2` never holds more than its limit: a requeue past it (a nack, a closed channel)
//!   dead-letters its oldest at once, and so does a start that recovers it past the limit
//!   (deliveries a crash left outstanding, removals a kill lost). After a crash the model
//!   takes the fewest of the dead-letter queue's last messages, put back at the head of
//!   `w2`, that make a recovery the checks above accept.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use stream_engine::{
    AmqpResult, Broker, BrokerConfig, Channel, Connection, ConsumeOptions, ExchangeKind,
    ExchangeOptions, FieldTable, FieldValue, Message, PublishOptions, PublishOutcome,
    PublishStatus, QueueOptions, Redrive, ReplyCode, TryPublish,
};

use crate::fs::FileSystem;
use crate::{DiskStore, FaultFs, StoreConfig, SyncMode, layout};

use super::DIR;

/// Settings bit: 4 KiB segments (else 64 KiB).
pub const SMALL_SEGMENTS: u8 = 1;
/// Settings bit: every persistent message in a durable queue is paged.
pub const PAGE_ALL: u8 = 2;
/// Settings bit: the store's writer takes one command per batch (one sync each).
pub const ONE_PER_BATCH: u8 = 4;
/// Settings bit: `interval` mode (a sync every 10 ms), and crashes that kill the process
/// (what was written stays, synced or not) instead of losing the power.
pub const INTERVAL_KILLS: u8 = 8;
/// Settings bit: `none` mode (no sync but at a clean close), and crashes that kill the
/// process, as with [`INTERVAL_KILLS`] (which this bit overrides).
pub const NONE_KILLS: u8 = 16;
/// Settings bit: the store fails once, at a peek of `w0` (see the module's documentation).
pub const FAILS: u8 = 32;

/// The most messages the failure operation publishes while the store fails.
const FAILING_BURST: usize = 300;
/// The failure operation's queue holds at least this many messages (not settled) first, so
/// that the messages of its burst are paged when paging is on.
const FAILS_FROM: usize = 400;
/// How long a failing append takes when the failure operation's byte has bit 6 set: long
/// enough for the whole burst to be enqueued before the writer fails (a stalling disk).
const SLOW_APPEND: std::time::Duration = std::time::Duration::from_millis(20);

/// At most this many operations are run (the rest of a longer input is ignored).
const MAX_OPS: usize = 4096;

/// A burst publishes no more than it takes a queue to this many messages (not settled): far
/// enough past the 512 the engine keeps in memory, and small enough that an input's peeks
/// and restarts, which read every message, stay quick.
const BURST_UP_TO: usize = 800;

const QUEUES: [&str; 4] = ["w0", "w1", "w2", "dlq"];
const PRIORITY_QUEUE: usize = 1;
const DEAD_LETTERING: usize = 2;
const DLQ: usize = 3;
/// The dead-lettering queue's `x-max-length`: a publish past it drops the head (dead-lettered,
/// read back from the store if it was paged).
const MAX_LENGTH: usize = 600;

fn queue_arguments(q: usize) -> FieldTable {
    let mut args = FieldTable::new();
    if q == PRIORITY_QUEUE {
        args.insert("x-max-priority", FieldValue::I32(3));
    }
    if q == DEAD_LETTERING {
        args.insert("x-dead-letter-exchange", FieldValue::from(""));
        args.insert("x-dead-letter-routing-key", FieldValue::from(QUEUES[DLQ]));
        args.insert("x-max-length", FieldValue::I32(MAX_LENGTH as i32));
    }
    args
}

/// A durable fanout exchange bound to the first two queues: a message published to it is
/// written once, with a reference record for its second queue.
const FANOUT: &str = "fan";
const FANNED: [usize; 2] = [0, PRIORITY_QUEUE];

/// Declares the queue and, for those the fanout reaches, the exchange and the binding (all
/// idempotent: declaring what exists changes nothing).
fn declare(ch: &Channel, q: usize) {
    ch.queue_declare(QUEUES[q], durable(), queue_arguments(q))
        .expect("declared");
    if FANNED.contains(&q) {
        let options = ExchangeOptions {
            durable: true,
            ..ExchangeOptions::default()
        };
        ch.exchange_declare(FANOUT, ExchangeKind::Fanout, options, FieldTable::new())
            .expect("exchange declared");
        ch.queue_bind(QUEUES[q], FANOUT, "", FieldTable::new())
            .expect("bound");
    }
}

fn durable() -> QueueOptions {
    QueueOptions {
        durable: true,
        ..QueueOptions::default()
    }
}

/// A message's body: its id, then its length's worth of a byte derived from the id.
fn body(id: u32, size: usize) -> Vec<u8> {
    let mut b = id.to_le_bytes().to_vec();
    b.resize(size.max(4), fill(id));
    b
}

fn fill(id: u32) -> u8 {
    (id as u8) ^ 0x5a
}

/// What the model knows of a message.
#[derive(Debug, Clone, Copy)]
struct Sent {
    size: usize,
    priority: u8,
    persistent: bool,
    /// Taken by the broker while the store failed: never written, so no restart brings it
    /// back.
    unwritten: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Ready,
    /// Delivered to the current channel, not settled.
    Held,
    /// Acknowledged, dropped, purged or its queue deleted since the last restart.
    Gone,
    /// Dead-lettered or re-driven away since the last restart: in `interval` mode its
    /// removal waits for the next sync, so a killed process may bring it back.
    Moved,
}

impl State {
    fn settled(self) -> bool {
        matches!(self, State::Gone | State::Moved)
    }
}

/// A message in a queue of the model, in arrival order.
#[derive(Debug, Clone)]
struct Slot {
    id: u32,
    state: State,
    /// The queue it was dead-lettered from since the last restart: a crash may leave it there
    /// instead.
    from: Option<usize>,
}

/// A delivery of the current channel not yet settled.
#[derive(Debug, Clone, Copy)]
struct Held {
    tag: u64,
    queue: usize,
    /// Its slot in the queue (slots keep their places until a restart).
    at: usize,
}

/// What runs on the files: the store, the broker on it, a connection and a confirm channel.
struct Live {
    store: DiskStore,
    broker: Broker,
    conn: Connection,
    ch: Channel,
}

impl Live {
    /// Opens the store and the broker, and declares the topology (a declaration a crash
    /// lost is made again; declaring what exists changes nothing).
    fn open(fs: &FaultFs, config: &StoreConfig, broker_config: &BrokerConfig) -> Live {
        let store = DiskStore::open_with(Arc::new(fs.clone()), DIR, config.clone())
            .unwrap_or_else(|e| panic!("the store does not open: {e}"));
        let broker = Broker::with_store(broker_config.clone(), store.clone())
            .unwrap_or_else(|e| panic!("the broker does not recover: {e}"));
        let conn = broker.connect();
        let ch = channel(&conn);
        for q in 0..QUEUES.len() {
            declare(&ch, q);
        }
        Live {
            store,
            broker,
            conn,
            ch,
        }
    }
}

struct Run {
    fs: FaultFs,
    /// A crash kills the process (see [`INTERVAL_KILLS`] and [`NONE_KILLS`]).
    kills: bool,
    /// `interval` mode: the removal of a message dead-lettered or re-driven away waits for
    /// the next sync.
    holds_moves: bool,
    config: StoreConfig,
    broker_config: BrokerConfig,
    /// Always there but during a restart.
    live: Option<Live>,
    sent: HashMap<u32, Sent>,
    queues: [Vec<Slot>; 4],
    held: Vec<Held>,
    next_id: u32,
    /// Paged messages read back for deliveries by the brokers before the current one.
    pages_read: u64,
    /// Paged messages peeked (read back from the store by a peek) so far.
    paged_peeked: u64,
    /// With settings bit 5, whether the store may still be made to fail.
    may_fail: bool,
    /// The store failed since the last restart.
    failed: bool,
    /// Store failures so far.
    failures: u64,
    /// The paged messages of the failure operation's queue just after each failure.
    paged_at_failures: u64,
    /// Messages the starts dropped from the dead-lettering queue, recovered past its limit.
    trimmed_at_start: u64,
    /// Slots (queue, place) settled since the store failed: their removals were not
    /// written, so the next crash may bring them back, after a kill too.
    unrecorded: HashSet<(usize, usize)>,
    /// Slots of messages dead-lettered while the store failed, whose copies it refused:
    /// the store keeps them where they were, so the next crash brings them back there.
    kept_back: HashSet<(usize, usize)>,
}

/// What a run did, beyond passing its checks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    /// Paged messages read back from the store to be delivered (by a consumer or a get).
    pub pages_read: u64,
    /// Paged messages read back from the store by peeks (the peek operation's, and every
    /// restart's check).
    pub paged_peeked: u64,
    /// Store failures (settings bit 5).
    pub failures: u64,
    /// The paged messages of the failure operation's queue just after each failure (read
    /// back by the peek that follows it).
    pub paged_at_failures: u64,
    /// Messages the starts dropped from the dead-lettering queue, recovered past its limit
    /// (the deliveries a crash left outstanding back in a full queue).
    pub trimmed_at_start: u64,
}

fn channel(conn: &Connection) -> Channel {
    let ch = conn.open_channel().expect("a channel opens");
    ch.confirm_select().expect("confirm mode");
    ch
}

impl Run {
    fn live(&self) -> &Live {
        self.live.as_ref().expect("running")
    }

    fn ch(&self) -> &Channel {
        &self.live().ch
    }

    fn broker(&self) -> &Broker {
        &self.live().broker
    }

    fn new(settings: u8) -> Run {
        let config = StoreConfig {
            segment_bytes: if settings & SMALL_SEGMENTS != 0 {
                4096
            } else {
                64 * 1024
            },
            max_batch: if settings & ONE_PER_BATCH != 0 {
                1
            } else {
                StoreConfig::default().max_batch
            },
            mode: if settings & NONE_KILLS != 0 {
                SyncMode::None
            } else if settings & INTERVAL_KILLS != 0 {
                SyncMode::Interval(std::time::Duration::from_millis(10))
            } else {
                SyncMode::Sync
            },
        };
        // A watermark no workload reaches (publishers are never blocked), and a paging
        // threshold of a few bytes or of the whole watermark.
        let broker_config = BrokerConfig {
            memory_high_watermark: Some(1 << 30),
            memory_paging_ratio: if settings & PAGE_ALL != 0 { 1e-9 } else { 1.0 },
            ..BrokerConfig::default()
        };
        let fs = FaultFs::new();
        let live = Live::open(&fs, &config, &broker_config);
        Run {
            fs,
            kills: settings & (INTERVAL_KILLS | NONE_KILLS) != 0,
            holds_moves: settings & NONE_KILLS == 0 && settings & INTERVAL_KILLS != 0,
            config,
            broker_config,
            live: Some(live),
            sent: HashMap::new(),
            queues: Default::default(),
            held: Vec::new(),
            next_id: 0,
            pages_read: 0,
            paged_peeked: 0,
            may_fail: settings & FAILS != 0,
            failed: false,
            failures: 0,
            paged_at_failures: 0,
            trimmed_at_start: 0,
            unrecorded: HashSet::new(),
            kept_back: HashSet::new(),
        }
    }

    /// The id a body names, after checking the body is the one published under it.
    fn id_of(&self, payload: &[u8], what: &str) -> u32 {
        assert!(
            payload.len() >= 4,
            "{what}: a body of {} bytes",
            payload.len()
        );
        let id = u32::from_le_bytes(payload[..4].try_into().expect("four bytes"));
        let sent = self
            .sent
            .get(&id)
            .unwrap_or_else(|| panic!("{what}: message {id} was never published"));
        assert_eq!(
            payload.len(),
            sent.size.max(4),
            "{what}: message {id} has another length"
        );
        assert!(
            payload[4..].iter().all(|&b| b == fill(id)),
            "{what}: message {id} has other bytes"
        );
        id
    }

    /// The slots of `q` that `keep` takes, in delivery order: priority first in the priority
    /// queue, then arrival.
    fn in_delivery_order(&self, q: usize, keep: impl Fn(&Slot) -> bool) -> Vec<usize> {
        let mut slots: Vec<usize> = (0..self.queues[q].len())
            .filter(|&at| keep(&self.queues[q][at]))
            .collect();
        if q == PRIORITY_QUEUE {
            slots.sort_by_key(|&at| {
                let priority = self.sent[&self.queues[q][at].id].priority;
                (std::cmp::Reverse(priority), at)
            });
        }
        slots
    }

    /// How many messages of `q` are not settled.
    fn unsettled(&self, q: usize) -> usize {
        self.queues[q].iter().filter(|s| !s.state.settled()).count()
    }

    /// The slots of the ready messages of `q` in delivery order.
    fn ready(&self, q: usize) -> Vec<usize> {
        self.in_delivery_order(q, |s| s.state == State::Ready)
    }

    /// Whether a restart brings the message back (unless it was settled): persistent, and
    /// written by the store.
    fn recoverable(&self, s: &Slot) -> bool {
        let sent = &self.sent[&s.id];
        sent.persistent && !sent.unwritten
    }

    /// Whether the store refuses a persistent message now (it failed).
    fn refuses(&self, id: u32) -> bool {
        self.failed && self.sent[&id].persistent
    }

    /// The ids of the ready messages of `q` in delivery order.
    fn ready_ids(&self, q: usize) -> Vec<u32> {
        self.ready(q)
            .into_iter()
            .map(|at| self.queues[q][at].id)
            .collect()
    }

    /// The next message, of `size` bytes, with the model told of it.
    fn message(&mut self, size: usize, priority: u8, persistent: bool) -> (u32, Message) {
        let id = self.next_id;
        self.next_id += 1;
        let mut m = Message::new(body(id, size));
        m.properties.priority = Some(priority);
        if persistent {
            m.properties.delivery_mode = Some(2);
        }
        self.sent.insert(
            id,
            Sent {
                size,
                priority,
                persistent,
                unwritten: false,
            },
        );
        (id, m)
    }

    fn published(&mut self, q: usize, id: u32, outcome: AmqpResult<PublishOutcome>) {
        if self.refuses(id) {
            refused(outcome, &format!("publish of {id} to {}", QUEUES[q]));
            return;
        }
        let outcome = outcome.unwrap_or_else(|e| panic!("publish of {id} to {}: {e}", QUEUES[q]));
        assert_eq!(outcome.status, PublishStatus::Routed(1), "publish of {id}");
        self.queues[q].push(Slot {
            id,
            state: State::Ready,
            from: None,
        });
        self.enforce_max_length(q);
    }

    /// One persistent message published to the fanout exchange (so to two queues) and
    /// confirmed.
    async fn publish_fanout(&mut self, arg: u8) {
        let (id, m) = self.message(usize::from(arg & 0x7f) * 47, arg % 4, true);
        let outcome = self
            .ch()
            .basic_publish(FANOUT, "", PublishOptions::default(), m)
            .await;
        if self.refuses(id) {
            refused(outcome, &format!("publish of {id} to {FANOUT}"));
            return;
        }
        let outcome = outcome.unwrap_or_else(|e| panic!("publish of {id} to {FANOUT}: {e}"));
        assert_eq!(outcome.status, PublishStatus::Routed(2), "publish of {id}");
        for q in FANNED {
            self.queues[q].push(Slot {
                id,
                state: State::Ready,
                from: None,
            });
        }
    }

    /// Past its length limit the dead-lettering queue drops its head into the dead-letter
    /// queue (after a message joined it).
    fn enforce_max_length(&mut self, q: usize) {
        if q != DEAD_LETTERING {
            return;
        }
        let ready = self.ready(q);
        for &at in &ready[..ready.len().saturating_sub(MAX_LENGTH)] {
            self.dead_letter(at);
        }
    }

    /// Settles the message at slot `at` of `q`: `Gone` (acked, dropped, purged, its queue
    /// deleted) or `Moved` (dead-lettered or re-driven away). While the store has failed
    /// nothing is written, so a crash may bring the message back; that includes one moved
    /// away before the failure, whose removal `interval` mode held for a sync that never came,
    /// when its queue is deleted now.
    fn settle_slot(&mut self, q: usize, at: usize, state: State) {
        let slot = &mut self.queues[q][at];
        if self.failed && slot.state != State::Gone {
            self.unrecorded.insert((q, at));
        }
        slot.state = state;
    }

    /// The message at slot `at` of the dead-lettering queue goes to the dead-letter queue
    /// (unless the failed store refuses its copy: then it leaves its queue for now, and the
    /// store keeps it there).
    fn dead_letter(&mut self, at: usize) {
        self.settle_slot(DEAD_LETTERING, at, State::Moved);
        let id = self.queues[DEAD_LETTERING][at].id;
        if self.refuses(id) {
            self.kept_back.insert((DEAD_LETTERING, at));
        } else {
            self.queues[DLQ].push(Slot {
                id,
                state: State::Ready,
                from: Some(DEAD_LETTERING),
            });
        }
    }

    /// One message, its size and priority from `arg`, published and confirmed.
    async fn publish(&mut self, q: usize, arg: u8, persistent: bool) {
        let (id, m) = self.message(usize::from(arg) * 23, arg % 4, persistent);
        let outcome = self
            .ch()
            .basic_publish("", QUEUES[q], PublishOptions::default(), m)
            .await;
        self.published(q, id, outcome);
    }

    /// `16 + 2 × arg` small persistent messages published at once (fewer if the queue would
    /// pass [`BURST_UP_TO`]), then their confirms awaited: enough for a queue to pass the
    /// ready messages the engine keeps in memory whatever the paging threshold, so that the
    /// rest are paged.
    async fn publish_burst(&mut self, q: usize, arg: u8) {
        let held = self.unsettled(q);
        let count = (16 + 2 * usize::from(arg)).min(BURST_UP_TO.saturating_sub(held));
        let mut pending = Vec::new();
        for _ in 0..count {
            let n = self.next_id as usize;
            let (id, m) = self.message(n * 37 % 300, (n % 4) as u8, true);
            match self
                .ch()
                .try_basic_publish("", QUEUES[q], PublishOptions::default(), m)
            {
                TryPublish::Done(outcome) => self.published(q, id, outcome),
                TryPublish::Pending(confirm) => pending.push((id, confirm)),
                TryPublish::Blocked(_) => panic!("publish of {id}: blocked"),
            }
        }
        for (id, confirm) in pending {
            let outcome = confirm.wait().await;
            self.published(q, id, outcome);
        }
    }

    fn get(&mut self, q: usize) {
        let expected = self.ready(q).first().copied();
        let expected_id = expected.map(|at| self.queues[q][at].id);
        let got = self
            .ch()
            .basic_get(QUEUES[q], false)
            .unwrap_or_else(|e| panic!("get from {}: {e}", QUEUES[q]));
        let Some(got) = got else {
            assert_eq!(expected_id, None, "{} gave nothing", QUEUES[q]);
            return;
        };
        let what = format!("get from {}", QUEUES[q]);
        let id = self.id_of(&got.delivery.message().payload, &what);
        assert_eq!(Some(id), expected_id, "{what}");
        let at = expected.expect("a message was expected");
        self.queues[q][at].state = State::Held;
        self.held.push(Held {
            tag: got.delivery.delivery_tag,
            queue: q,
            at,
        });
    }

    /// Consumes `q` with a prefetch of `prefetch`: takes what the broker hands over (the
    /// first `prefetch` ready messages, read back from the store in one burst when paged),
    /// then cancels; the deliveries stay held by the channel.
    fn consume(&mut self, q: usize, prefetch: u16) {
        let what = format!("consume from {}", QUEUES[q]);
        self.ch()
            .basic_qos(prefetch, false)
            .unwrap_or_else(|e| panic!("{what}: qos: {e}"));
        let mut consumer = self
            .ch()
            .basic_consume(QUEUES[q], ConsumeOptions::default())
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let expected = self.ready(q);
        let mut taken = 0;
        while let Some(delivery) = consumer.try_recv() {
            let id = self.id_of(&delivery.message().payload, &what);
            let at = *expected
                .get(taken)
                .unwrap_or_else(|| panic!("{what}: {id} beyond the {taken} ready"));
            assert_eq!(id, self.queues[q][at].id, "{what}: delivery {taken}");
            assert!(taken < usize::from(prefetch), "{what}: beyond the prefetch");
            taken += 1;
            self.queues[q][at].state = State::Held;
            self.held.push(Held {
                tag: delivery.delivery_tag,
                queue: q,
                at,
            });
        }
        assert_eq!(
            taken,
            expected.len().min(usize::from(prefetch)),
            "{what}: deliveries"
        );
        consumer
            .cancel()
            .unwrap_or_else(|e| panic!("{what}: cancel: {e}"));
    }

    /// Settles held delivery `pick` (modulo their count): acked, requeued, or rejected (a
    /// message of the dead-lettering queue goes to the dead-letter queue).
    fn settle(&mut self, pick: u8, how: Settle) {
        if self.held.is_empty() {
            return;
        }
        let at = usize::from(pick) % self.held.len();
        let chosen = self.held[at];
        let settled: Vec<Held> = match how {
            Settle::AckMultiple => self.held.drain(..=at).collect(),
            _ => vec![self.held.remove(at)],
        };
        match how {
            Settle::Ack => self.ch().basic_ack(chosen.tag, false),
            Settle::AckMultiple => self.ch().basic_ack(chosen.tag, true),
            Settle::Requeue => self.ch().basic_nack(chosen.tag, false, true),
            Settle::Reject => self.ch().basic_reject(chosen.tag, false),
        }
        .unwrap_or_else(|e| panic!("{how:?} of delivery {}: {e}", chosen.tag));
        for h in settled {
            if how == Settle::Reject && h.queue == DEAD_LETTERING {
                self.dead_letter(h.at);
                continue;
            }
            match how {
                Settle::Requeue => {
                    self.queues[h.queue][h.at].state = State::Ready;
                    // Back at its place, past the limit: the queue drops its oldest.
                    self.enforce_max_length(h.queue);
                }
                _ => self.settle_slot(h.queue, h.at, State::Gone),
            }
        }
    }

    /// Closes the channel (its deliveries are requeued) and opens another.
    fn reopen_channel(&mut self) {
        let live = self.live.as_mut().expect("running");
        let ch = std::mem::replace(&mut live.ch, channel(&live.conn));
        ch.close();
        self.requeue_held();
        self.enforce_max_length(DEAD_LETTERING);
    }

    /// The channel's deliveries are back in their queues (it was closed).
    fn requeue_held(&mut self) {
        for h in std::mem::take(&mut self.held) {
            self.queues[h.queue][h.at].state = State::Ready;
        }
    }

    /// The ready messages of `q` as a peek lists them, bodies checked.
    fn peeked(&mut self, q: usize, what: &str) -> Vec<u32> {
        self.paged_peeked += self.broker().paged_messages(QUEUES[q]).unwrap_or(0) as u64;
        self.broker()
            .peek(QUEUES[q], usize::MAX)
            .unwrap_or_else(|e| panic!("{what}: peek of {}: {e}", QUEUES[q]))
            .iter()
            .map(|m| self.id_of(&m.record.message.payload, what))
            .collect()
    }

    /// The store fails: from now on every append fails (a full disk), while a burst of
    /// persistent messages goes to `w0`. The broker takes those it enqueues before it learns
    /// of the failure (a first part of the burst, paged beyond the messages it keeps in
    /// memory); their confirms fail in `sync` mode, while `interval` and `none` modes have
    /// confirmed them already; the rest are refused. Those taken are read back with their
    /// bodies, from the memory of the failed store when they are paged.
    async fn fail_store(&mut self, slow: bool) {
        self.may_fail = false;
        // What `interval` and `none` modes confirmed before is written first.
        self.live().store.stats().expect("the store answers");
        self.fs.fail_appends(true);
        if slow {
            self.fs.set_append_delay(SLOW_APPEND);
        }
        let q = 0;
        let held = self.unsettled(q);
        let count = FAILING_BURST.min(BURST_UP_TO.saturating_sub(held)).max(1);
        // Published at once, their confirms awaited after: the writer fails on a batch of
        // them, and handles those after it failed.
        let mut published = Vec::new();
        for _ in 0..count {
            let n = self.next_id as usize;
            let (id, m) = self.message(n * 37 % 300, 0, true);
            match self
                .ch()
                .try_basic_publish("", QUEUES[q], PublishOptions::default(), m)
            {
                TryPublish::Blocked(_) => panic!("publish of {id}: blocked"),
                outcome => published.push((id, outcome)),
            }
        }
        let mut outcomes = Vec::new();
        for (id, outcome) in published {
            let outcome = match outcome {
                TryPublish::Done(outcome) => outcome,
                TryPublish::Pending(confirm) => confirm.wait().await,
                TryPublish::Blocked(_) => unreachable!("a blocked publish panicked above"),
            };
            outcomes.push((id, outcome));
        }
        // Once the writer has handled the burst, it has failed.
        self.live().store.stats().expect("the store answers");
        self.fs.set_append_delay(std::time::Duration::ZERO);
        self.failed = true;
        let what = "peek after the store failed";
        let before = self.ready_ids(q);
        let peeked = self.peeked(q, what);
        assert_eq!(
            peeked[..before.len().min(peeked.len())],
            before[..],
            "{what}"
        );
        let taken = &peeked[before.len()..];
        let burst: Vec<u32> = outcomes.iter().map(|(id, _)| *id).collect();
        assert_eq!(
            taken,
            &burst[..taken.len()],
            "{what}: the first of the burst"
        );
        for (i, (id, outcome)) in outcomes.into_iter().enumerate() {
            let what = format!("publish of {id} while the store fails");
            if i >= taken.len() || self.config.mode == SyncMode::Sync {
                refused(outcome, &what);
            } else {
                let outcome = outcome.unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(outcome.status, PublishStatus::Routed(1), "{what}");
            }
        }
        self.failures += 1;
        self.paged_at_failures += self.broker().paged_messages(QUEUES[q]).unwrap_or(0) as u64;
        for &id in taken {
            self.sent.get_mut(&id).expect("sent").unwritten = true;
            self.queues[q].push(Slot {
                id,
                state: State::Ready,
                from: None,
            });
        }
    }

    fn peek(&mut self, q: usize) {
        let what = format!("peek of {}", QUEUES[q]);
        assert_eq!(self.peeked(q, &what), self.ready_ids(q), "{what}");
    }

    fn purge(&mut self, q: usize) {
        let count = self
            .ch()
            .queue_purge(QUEUES[q])
            .unwrap_or_else(|e| panic!("purge of {}: {e}", QUEUES[q]));
        let ready = self.ready(q).len();
        assert_eq!(count as usize, ready, "purge of {}", QUEUES[q]);
        for at in 0..self.queues[q].len() {
            if self.queues[q][at].state == State::Ready {
                self.settle_slot(q, at, State::Gone);
            }
        }
    }

    /// Deletes `q` and declares it again. Its deliveries held by the channel are not acked
    /// (their queue is gone; closing the channel later must not bring them back).
    fn delete_and_declare(&mut self, q: usize) {
        self.ch()
            .queue_delete(QUEUES[q], false, false)
            .unwrap_or_else(|e| panic!("delete of {}: {e}", QUEUES[q]));
        declare(self.ch(), q);
        self.held.retain(|h| h.queue != q);
        for at in 0..self.queues[q].len() {
            self.settle_slot(q, at, State::Gone);
        }
    }

    /// Moves the ready message of the dead-letter queue at `pick` (modulo their count) back
    /// to `to` through the default exchange.
    async fn redrive(&mut self, pick: u8, to: usize) {
        let peeked = self
            .broker()
            .peek(QUEUES[DLQ], usize::MAX)
            .expect("peek of the dead-letter queue");
        if peeked.is_empty() {
            return;
        }
        let ready = self.ready(DLQ);
        assert_eq!(peeked.len(), ready.len(), "peek of the dead-letter queue");
        let pick = usize::from(pick) % ready.len();
        let (m, at) = (&peeked[pick], ready[pick]);
        let id = self.id_of(&m.record.message.payload, "redrive");
        assert_eq!(id, self.queues[DLQ][at].id, "peek of the dead-letter queue");
        let outcome = self
            .broker()
            .redrive(QUEUES[DLQ], m.seq, "", QUEUES[to])
            .await;
        if self.refuses(id) {
            // The copy is refused; the message stays where it is.
            refused(outcome, &format!("redrive of {id}"));
            return;
        }
        let outcome = outcome.unwrap_or_else(|e| panic!("redrive of {id}: {e}"));
        assert_eq!(outcome, Redrive::Moved(1), "redrive of {id}");
        // Moved to the tail of `to` (the dead-letter queue's own, too). The copy was durable
        // (in `sync` mode synced, in `interval` mode handed to the writer) before the
        // re-drive returned: a crash cannot take it, but may leave the original.
        self.settle_slot(DLQ, at, State::Moved);
        self.queues[to].push(Slot {
            id,
            state: State::Ready,
            from: None,
        });
        self.enforce_max_length(to);
    }

    /// Stops the broker, cleanly (connection closed, so its deliveries are requeued, then
    /// the store closed, which writes the marker; with `scan` the marker is then removed) or
    /// by a crash, starts it again on what the files hold, and checks what it recovered.
    fn restart(&mut self, crash: bool, scan: bool) {
        // A failed store cannot close cleanly (it writes nothing more): the process ends.
        let crash = std::mem::take(&mut self.failed) || crash;
        let Live {
            store,
            broker,
            conn,
            ch,
        } = self.live.take().expect("running");
        self.pages_read += broker.pages_read().0;
        self.fs = if crash {
            // The old broker and store go after the crash: their writes fail.
            let after = if self.kills {
                // `interval` mode confirms a message when it is handed to the writer: a kill
                // before the writer took it loses it. Killed once the writer has handled
                // every command, the process has written everything but what it holds back.
                store.stats().expect("the store answers");
                self.fs.kill()
            } else {
                self.fs.crash()
            };
            drop((ch, conn, broker, store));
            after
        } else {
            ch.close();
            conn.close();
            drop(broker);
            store.close().expect("the store closes");
            let after = self.fs.crash();
            if scan {
                FileSystem::delete(&after, &Path::new(DIR).join(layout::CLEAN)).expect("in memory");
            }
            after
        };
        self.requeue_held();
        if !crash {
            // Closing the connection requeued its deliveries: the queue dropped its oldest
            // past the limit then, before the store closed.
            self.enforce_max_length(DEAD_LETTERING);
        }
        let live = Live::open(&self.fs, &self.config, &self.broker_config);
        assert_eq!(
            live.store.started_clean(),
            !crash && !scan,
            "started from the marker"
        );
        self.live = Some(live);
        let trimmed: Vec<Vec<u32>> = (0..QUEUES.len())
            .map(|q| self.peeked(q, &format!("recovery of {}", QUEUES[q])))
            .collect();
        // What each queue held before the dead-lettering queue, recovered past its
        // `x-max-length`, dropped its oldest to the dead-letter queue at the start.
        let recovered = if crash {
            self.untrimmed_after_crash(&trimmed)
        } else {
            let expected: Vec<Vec<u32>> = (0..QUEUES.len())
                .map(|q| {
                    self.in_delivery_order(q, |s| !s.state.settled() && self.recoverable(s))
                        .into_iter()
                        .map(|at| self.queues[q][at].id)
                        .collect()
                })
                .collect();
            // Closing requeued the deliveries and trimmed then: the start has nothing to trim.
            for (q, got) in trimmed.iter().enumerate() {
                assert_eq!(got, &expected[q], "after a clean restart, {}", QUEUES[q]);
            }
            expected
        };
        self.trimmed_at_start +=
            (recovered[DEAD_LETTERING].len() - trimmed[DEAD_LETTERING].len()) as u64;
        // The model becomes what was recovered: the slots matched, in arrival order.
        for (q, got) in recovered.iter().enumerate() {
            let mut places = self.matched(q, got, "recovery");
            places.sort_unstable();
            let slots: Vec<Slot> = places
                .into_iter()
                .map(|at| Slot {
                    id: self.queues[q][at].id,
                    state: State::Ready,
                    from: None,
                })
                .collect();
            self.queues[q] = slots;
        }
        self.unrecorded.clear();
        self.kept_back.clear();
        // The start's trim, as the broker made it.
        self.enforce_max_length(DEAD_LETTERING);
    }

    /// What the queues held after a crash, before the start trimmed the dead-lettering queue:
    /// the fewest of the dead-letter queue's last messages that, put back at the head of
    /// the dead-lettering queue, make a recovery the crash checks accept. The broker trims
    /// only a queue recovered past its limit, and leaves it at the limit.
    fn untrimmed_after_crash(&self, trimmed: &[Vec<u32>]) -> Vec<Vec<u32>> {
        let at_limit = trimmed[DEAD_LETTERING].len() == MAX_LENGTH;
        assert!(
            trimmed[DEAD_LETTERING].len() <= MAX_LENGTH,
            "after a crash, {} holds {} messages, past its limit",
            QUEUES[DEAD_LETTERING],
            trimmed[DEAD_LETTERING].len()
        );
        let most = if at_limit { trimmed[DLQ].len() } else { 0 };
        let mut first_problem = None;
        for k in 0..=most {
            let lists = untrim(trimmed, k).expect("at most the dead-letter queue's length");
            let problem = (0..QUEUES.len()).find_map(|q| self.crash_problem(q, &lists[q], &lists));
            match problem {
                None => return lists,
                Some(p) => {
                    first_problem.get_or_insert(p);
                }
            }
        }
        panic!("{}", first_problem.expect("k = 0 was tried"));
    }

    /// The slot of `q` (an index into its arrival order) each of `got` is, taking `got` as a
    /// queue lists its messages: a subsequence of the queue's persistent slots (settled ones
    /// included) in delivery order. A message the queue held twice (moved away and back, its
    /// old place's removal lost in a crash) has two slots.
    fn matched(&self, q: usize, got: &[u32], what: &str) -> Vec<usize> {
        self.matched_preferring(q, got, |_| false)
            .unwrap_or_else(|id| {
                panic!(
                    "{what}: {} holds {id} out of order, or never held it: {got:?}",
                    QUEUES[q]
                )
            })
    }

    /// As [`Run::matched`], each message taken for its first slot ahead that is not `gone`
    /// when there is one (a message moved away, then back into a queue that was deleted
    /// meanwhile, has a settled slot before its live one). The id that did not match if none
    /// fits.
    fn matched_preferring(
        &self,
        q: usize,
        got: &[u32],
        gone: impl Fn(State) -> bool,
    ) -> Result<Vec<usize>, u32> {
        let mut next = self
            .in_delivery_order(q, |s| self.recoverable(s))
            .into_iter();
        got.iter()
            .map(|&id| {
                let slot = |at: &usize| &self.queues[q][*at];
                let mut ahead = next.clone();
                if let Some(at) = ahead.find(|at| slot(at).id == id && !gone(slot(at).state)) {
                    next = ahead;
                    return Ok(at);
                }
                next.find(|at| slot(at).id == id).ok_or(id)
            })
            .collect()
    }

    /// What is wrong with `got` as what `q` recovered after a crash, if anything.
    fn crash_problem(&self, q: usize, got: &[u32], recovered: &[Vec<u32>]) -> Option<String> {
        let name = QUEUES[q];
        // In order, and nothing the queue never held (nor more copies than it held).
        let places = match self.matched_preferring(q, got, |_| false) {
            Ok(places) => places,
            Err(id) => {
                return Some(format!(
                    "after a crash: {name} holds {id} out of order, or never held it: {got:?}"
                ));
            }
        };
        if self.kills {
            // A killed process wrote every removal its writer took, but in `interval` mode
            // those of what moved away (held for the sync): only these may come back.
            let gone =
                |state: State| state == State::Gone || (state == State::Moved && !self.holds_moves);
            let places = self.matched_preferring(q, got, gone).unwrap_or(places);
            // Removals made while the store failed were not written.
            for at in places
                .into_iter()
                .filter(|&at| !self.unrecorded.contains(&(q, at)))
            {
                let s = &self.queues[q][at];
                if gone(s.state) {
                    return Some(format!(
                        "after a kill, {name} holds message {}, settled before the kill",
                        s.id
                    ));
                }
            }
        }
        // Every message it held is there, as often as it held it, unless it was moved here
        // since the last restart and is back where it came from; and every message the failed
        // store kept here when it refused its dead-letter copy.
        let mut needed: HashMap<u32, usize> = HashMap::new();
        for (at, s) in self.queues[q].iter().enumerate() {
            let back_where_it_was = s.from.is_some_and(|from| recovered[from].contains(&s.id));
            let held = !s.state.settled() && !back_where_it_was;
            if (held || self.kept_back.contains(&(q, at))) && self.recoverable(s) {
                *needed.entry(s.id).or_default() += 1;
            }
        }
        let mut needed: Vec<(u32, usize)> = needed.into_iter().collect();
        needed.sort_unstable();
        needed.into_iter().find_map(|(id, needed)| {
            let found = got.iter().filter(|&&g| g == id).count();
            (found < needed).then(|| {
                format!("after a crash, {name} lost message {id}: it holds {found} of {needed}")
            })
        })
    }
}

/// What the queues held before a start that found the dead-lettering queue `over` past its
/// limit dead-lettered its `over` oldest to the tail of the dead-letter queue: the
/// dead-letter queue's last `over` back at the head of the dead-lettering queue (none if it
/// holds fewer).
fn untrim(lists: &[Vec<u32>], over: usize) -> Option<Vec<Vec<u32>>> {
    let mut out = lists.to_vec();
    let from = out[DLQ].len().checked_sub(over)?;
    let back: Vec<u32> = out[DLQ].drain(from..).collect();
    out[DEAD_LETTERING].splice(..0, back);
    Some(out)
}

/// Checks that the failed store refused what `what` did: a 541 `INTERNAL_ERROR`.
fn refused<T: std::fmt::Debug>(outcome: AmqpResult<T>, what: &str) {
    match outcome {
        Err(e) => assert_eq!(e.code, ReplyCode::InternalError, "{what}: {e}"),
        Ok(taken) => panic!("{what}: taken by a failed store: {taken:?}"),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Settle {
    Ack,
    AckMultiple,
    Requeue,
    Reject,
}

/// Runs the workload an input describes, with its checks; panics when one fails. Call it
/// inside a Tokio runtime (a current-thread one with a paused clock, as the fuzz target
/// does: no time passes between the operations).
pub async fn run(input: &[u8]) -> Summary {
    let Some((&settings, mut ops)) = input.split_first() else {
        return Summary::default();
    };
    let trace = std::env::var_os("STREAM_STORE_WORKLOAD_TRACE").is_some();
    let mut run = Run::new(settings);
    for _ in 0..MAX_OPS {
        let Some((&op, rest)) = ops.split_first() else {
            break;
        };
        ops = rest;
        let q = usize::from(op >> 4) % QUEUES.len();
        let kind = op & 0x0f;
        // Operations 0–9 and 15 take an argument byte.
        let arg = if kind <= 9 || kind == 15 {
            let Some((&arg, rest)) = ops.split_first() else {
                break;
            };
            ops = rest;
            arg
        } else {
            0
        };
        if trace {
            eprintln!("op {kind} queue {} arg {arg}", QUEUES[q]);
        }
        match kind {
            0 | 1 => run.publish(q, arg, true).await,
            2 => run.publish_burst(q, arg).await,
            3 if arg & 0x80 != 0 => run.publish_fanout(arg).await,
            3 => run.publish(q, arg, false).await,
            // A consumer with a prefetch of 1–255, or gets of 1–4 messages.
            4 if arg & 0x80 != 0 => run.consume(q, u16::from(arg & 0x7f) * 2 + 1),
            4 => {
                for _ in 0..=arg % 4 {
                    run.get(q);
                }
            }
            5 => run.settle(arg, Settle::Ack),
            6 => run.settle(arg, Settle::AckMultiple),
            7 => run.settle(arg, Settle::Requeue),
            8 => run.settle(arg, Settle::Reject),
            9 => run.redrive(arg, usize::from(arg >> 4) % QUEUES.len()).await,
            10 if run.may_fail && q == 0 && run.unsettled(0) >= FAILS_FROM => {
                if trace {
                    eprintln!("the store fails (slow: {})", op & 0x40 != 0);
                }
                run.fail_store(op & 0x40 != 0).await;
            }
            10 => run.peek(q),
            11 => run.purge(q),
            12 => run.delete_and_declare(q),
            13 => run.reopen_channel(),
            14 => run.restart(true, false),
            _ => run.restart(false, arg & 1 != 0),
        }
    }
    // Whatever the input, it ends with a clean restart and a crash after it.
    run.restart(false, false);
    run.restart(true, false);
    Summary {
        pages_read: run.pages_read + run.broker().pages_read().0,
        paged_peeked: run.paged_peeked,
        failures: run.failures,
        paged_at_failures: run.paged_at_failures,
        trimmed_at_start: run.trimmed_at_start,
    }
}
