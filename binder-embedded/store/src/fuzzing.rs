//! What the fuzz targets in `fuzz/` drive, with the checks that make a run fail. Hidden and
//! not a stable API; it has no behaviour of its own beyond the checks.
//!
//! * `recovery` ([`check`]): a data directory built from arbitrary bytes, opened by the store
//!   and recovered by a broker.
//! * `workload` ([`workload::run`]): broker operations on a store, checked against a model.
//!
//! A `recovery` input is a flags byte, then files: a kind byte (taken modulo 5: `meta.log`,
//! `meta.tmp`, `clean`, a segment, a segment's ack file; the last two followed by the
//! segment's number, a byte), a little-endian `u16` length, then that many bytes (fewer if
//! the input ends first). With flag bit 0 set, a file's bytes are a list of record payloads
//! (each a `u16` length and its bytes) that the harness frames as the store does, with
//! sequence numbers 1, 2, 3… and valid CRCs, so that mutations reach the record decoders
//! rather than stop at a CRC.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use stream_engine::{Broker, BrokerConfig, Message, PublishOptions};

use crate::fs::FileSystem;
use crate::{DiskStore, FaultFs, StoreConfig, frame, layout};

pub mod workload;

/// The data directory the inputs describe.
pub const DIR: &str = "/store";

/// Flag bit: the files' bytes are record payloads to frame.
pub const FRAMED: u8 = 1;

const KINDS: u8 = 5;

/// How many queues the check publishes to and takes from after the recovery.
const EXERCISED_QUEUES: usize = 4;

fn file_path(kind: u8, segment: u8) -> PathBuf {
    let dir = Path::new(DIR);
    match kind % KINDS {
        0 => dir.join(layout::META),
        1 => dir.join(layout::META_TMP),
        2 => dir.join(layout::CLEAN),
        3 => layout::segment_path(dir, u32::from(segment)),
        _ => layout::ack_path(dir, u32::from(segment)),
    }
}

fn has_segment_number(kind: u8) -> bool {
    kind % KINDS >= 3
}

/// Frames a list of payloads (`u16` length, bytes; a short last one is taken as it is).
fn framed(mut list: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut seq = 0;
    while list.len() >= 2 {
        let len = usize::from(u16::from_le_bytes([list[0], list[1]]));
        let payload = &list[2..(2 + len).min(list.len())];
        seq += 1;
        frame::push(&mut out, seq, payload);
        list = &list[2 + payload.len()..];
    }
    out
}

/// The files an input describes, in a fresh in-memory file system (a later file of the same
/// name replaces an earlier one).
pub fn files(input: &[u8]) -> FaultFs {
    let fs = FaultFs::new();
    let Some((&flags, mut rest)) = input.split_first() else {
        return fs;
    };
    while let Some((&kind, after)) = rest.split_first() {
        rest = after;
        let mut segment = 0;
        if has_segment_number(kind) {
            let Some((&n, after)) = rest.split_first() else {
                break;
            };
            segment = n;
            rest = after;
        }
        if rest.len() < 2 {
            break;
        }
        let len = usize::from(u16::from_le_bytes([rest[0], rest[1]]));
        let bytes = &rest[2..(2 + len).min(rest.len())];
        rest = &rest[2 + bytes.len()..];
        let data = if flags & FRAMED != 0 {
            framed(bytes)
        } else {
            bytes.to_vec()
        };
        fs.set_contents(&file_path(kind, segment), data);
    }
    fs
}

/// The input that describes the store files in `fs` under [`DIR`] (the inverse of
/// [`files`]), to make seeds from a store a workload wrote; `framed` writes each file as its
/// records' payloads. Files of more than 64 KiB, or records in them beyond it, are cut.
pub fn input(fs: &FaultFs, framed: bool) -> Vec<u8> {
    let dir = Path::new(DIR);
    let mut out = vec![if framed { FRAMED } else { 0 }];
    let mut add = |kind: u8, segment: u8, path: &Path| {
        let Some(data) = fs.contents(path) else {
            return;
        };
        let bytes = if framed { payloads(&data) } else { data };
        let len = bytes.len().min(usize::from(u16::MAX));
        out.push(kind);
        if has_segment_number(kind) {
            out.push(segment);
        }
        out.extend_from_slice(&(len as u16).to_le_bytes());
        out.extend_from_slice(&bytes[..len]);
    };
    add(0, 0, &dir.join(layout::META));
    add(1, 0, &dir.join(layout::META_TMP));
    add(2, 0, &dir.join(layout::CLEAN));
    let mut segments: Vec<(u32, bool)> = fs
        .list_paths(&dir.join(layout::SEGMENTS))
        .iter()
        .filter_map(|p| layout::parse_name(p.file_name()?.to_str()?))
        .collect();
    segments.sort_unstable();
    for (n, ack) in segments {
        let Ok(segment) = u8::try_from(n) else {
            continue;
        };
        let path = if ack {
            layout::ack_path(dir, n)
        } else {
            layout::segment_path(dir, n)
        };
        add(if ack { 4 } else { 3 }, segment, &path);
    }
    out
}

/// The payloads of a file's valid records, as a list [`files`] frames again.
fn payloads(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for f in frame::scan(data).frames {
        let Ok(len) = u16::try_from(f.payload.len()) else {
            break;
        };
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(f.payload);
    }
    out
}

/// What a recovered broker holds, in an order that does not depend on how it was rebuilt.
///
/// Values are compared as they print: a float field may be NaN, which equals nothing.
#[derive(Debug, PartialEq)]
struct Snapshot {
    /// Exchanges: name, type, durable, auto-delete, internal, alternate exchange.
    exchanges: Vec<String>,
    /// Queues: name, durable, auto-delete, exclusive, ready count and bytes, arguments.
    queues: Vec<String>,
    /// Bindings: source, destination, its kind, routing key, arguments.
    bindings: Vec<String>,
    /// Policies, then operator policies, as set.
    policies: Vec<String>,
    /// Each queue's messages in delivery order: queue, arrival position, redelivered,
    /// payload size, record.
    messages: Vec<(String, u64, bool, usize, String)>,
}

impl Snapshot {
    /// What differs from `other`, briefly (messages as queue, position, redelivered, size).
    fn differences(&self, other: &Snapshot) -> String {
        let brief = |s: &Snapshot| -> Vec<String> {
            s.messages
                .iter()
                .map(|(q, seq, r, size, _)| {
                    format!("{q}#{seq}{} {size}B", if *r { "r" } else { "" })
                })
                .collect()
        };
        let mut out = Vec::new();
        if self.exchanges != other.exchanges {
            out.push(format!(
                "exchanges {:?} / {:?}",
                self.exchanges, other.exchanges
            ));
        }
        if self.queues != other.queues {
            out.push(format!("queues {:?} / {:?}", self.queues, other.queues));
        }
        if self.bindings != other.bindings {
            out.push(format!(
                "bindings {:?} / {:?}",
                self.bindings, other.bindings
            ));
        }
        if self.policies != other.policies {
            out.push(format!(
                "policies {:?} / {:?}",
                self.policies, other.policies
            ));
        }
        if self.messages != other.messages {
            out.push(format!("messages {:?} / {:?}", brief(self), brief(other)));
        }
        out.join("; ")
    }
}

/// Panics, saying `what` and how they differ, unless the snapshots are equal.
fn same(first: &Snapshot, then: &Snapshot, what: &str) {
    if first != then {
        panic!("{what}: {}", first.differences(then));
    }
}

fn snapshot(broker: &Broker) -> Snapshot {
    let mut exchanges: Vec<String> = broker
        .exchanges()
        .into_iter()
        .map(|x| {
            format!(
                "{:?} {:?} durable={} auto_delete={} internal={} arguments={:?} policy={:?}",
                x.name, x.kind, x.durable, x.auto_delete, x.internal, x.arguments, x.policy
            )
        })
        .collect();
    exchanges.sort();
    let queues = broker.queues();
    let mut messages = Vec::new();
    for q in &queues {
        // Nothing is paged at the default watermark, so a peek reads nothing back.
        let peeked = broker.peek(&q.name, usize::MAX).unwrap_or_default();
        messages.extend(peeked.into_iter().map(|m| {
            let size = m.record.message.payload.len();
            (
                q.name.clone(),
                m.seq,
                m.redelivered,
                size,
                format!("{:?}", m.record),
            )
        }));
    }
    let mut queues: Vec<String> = queues
        .into_iter()
        .map(|q| {
            format!(
                "{:?} durable={} auto_delete={} exclusive={} ready={} bytes={} {:?} policy={:?}",
                q.name,
                q.durable,
                q.auto_delete,
                q.exclusive,
                q.messages_ready,
                q.message_bytes_ready,
                q.arguments,
                (&q.policy, &q.operator_policy)
            )
        })
        .collect();
    queues.sort();
    let mut bindings: Vec<String> = broker
        .bindings()
        .into_iter()
        .map(|b| {
            format!(
                "{:?} -> {:?} exchange={} key={:?} {:?}",
                b.source, b.destination, b.destination_is_exchange, b.routing_key, b.arguments
            )
        })
        .collect();
    bindings.sort();
    let operator = broker.operator_policies();
    let policies = (broker.policies().iter())
        .map(|p| format!("{p:?}"))
        .chain(operator.iter().map(|p| format!("operator {p:?}")))
        .collect();
    Snapshot {
        exchanges,
        queues,
        bindings,
        policies,
        messages,
    }
}

/// One start of a store on `fs`: what it recovered, what it held after `work` (the same
/// without), and whether it started from the clean-shutdown marker; `Err` when the store or
/// the broker refused to start. The store is closed (marker written) before it returns.
fn start(fs: &FaultFs, work: bool) -> Result<(Snapshot, Snapshot, bool), String> {
    let store = DiskStore::open_with(Arc::new(fs.clone()), DIR, StoreConfig::default())
        .map_err(|e| format!("store: {e}"))?;
    let clean = store.started_clean();
    let broker = match Broker::with_store(BrokerConfig::default(), store.clone()) {
        Ok(b) => b,
        Err(e) => {
            let _ = store.close();
            return Err(format!("broker: {e}"));
        }
    };
    let recovered = snapshot(&broker);
    if work {
        exercise(&broker);
    }
    let held = snapshot(&broker);
    drop(broker);
    store.close().expect("a store that started closes");
    Ok((recovered, held, clean))
}

/// How many deliveries the check takes from a queue looking for the message it published.
const TAKEN: usize = 256;

/// After a recovery, in each of the first durable queues: two persistent messages published;
/// then messages taken until the second of them comes, which is acknowledged with the first
/// one taken (the queue's head, and its highest position), the rest left to be requeued when
/// the channel closes. What the store writes for these must be read back as it was.
fn exercise(broker: &Broker) {
    let queues: Vec<String> = broker
        .queues()
        .into_iter()
        .filter(|q| q.durable)
        .map(|q| q.name)
        .take(EXERCISED_QUEUES)
        .collect();
    let conn = broker.connect();
    let Ok(ch) = conn.open_channel() else {
        return;
    };
    for q in &queues {
        for body in ["after recovery", "last"] {
            let mut m = Message::new(body);
            m.properties.delivery_mode = Some(2);
            // Refusals (an exclusive queue of no connection, a full queue) are part of the
            // state.
            let _ = ch.try_basic_publish("", q, PublishOptions::default(), m);
        }
        for taken in 0..TAKEN {
            let Ok(Some(got)) = ch.basic_get(q, false) else {
                break;
            };
            let last = &got.delivery.message().payload[..] == b"last";
            if taken == 0 || last {
                let _ = ch.basic_ack(got.delivery.delivery_tag, false);
            }
            if last {
                break;
            }
        }
    }
    ch.close();
    conn.close();
}

/// The check of one input; panics when it fails. Call it inside a Tokio runtime whose clock
/// is paused (a queue with a TTL starts the broker's timer task, and no time may pass
/// between the starts compared).
///
/// * The store and the broker on it start, or refuse with an error; nothing panics.
/// * A start that succeeded is written to (publishing, taking and acking in its queues) and
///   closed; the next start takes the clean-shutdown marker the close wrote and recovers
///   the same exchanges, queues, bindings and messages. It is written to and closed too.
/// * Without the marker, the full scan of those files recovers what the second start held
///   (so the positions the marker carried were right: a new message under an old position
///   would be missing). Skipped when the input itself carried a marker the first start
///   used: a marker that agrees with the files is believed, and the references it leaves
///   out are not checked against the segments.
pub fn check(input: &[u8]) {
    let fs = files(input);
    let Ok((_, first, first_clean)) = start(&fs, true) else {
        return;
    };
    let after_close = fs.crash();
    let (again, held, clean) = start(&after_close, true)
        .unwrap_or_else(|e| panic!("a store that started and closed does not start again: {e}"));
    assert!(clean, "the marker written by a clean close was not taken");
    same(&first, &again, "the clean start recovered something else");
    if first_clean {
        return;
    }
    let scanned = after_close.crash();
    FileSystem::delete(&scanned, &Path::new(DIR).join(layout::CLEAN)).expect("in memory");
    let (full, _, clean) = start(&scanned, false)
        .unwrap_or_else(|e| panic!("the full scan of a cleanly closed store fails: {e}"));
    assert!(!clean, "no marker, yet a clean start");
    same(&held, &full, "the full scan recovered something else");
}
