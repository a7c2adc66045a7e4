//! Rebuilding the store at start from the metadata log, the segments and their ack files:
//! torn tails are cut at the first damaged record, acknowledgements of unknown records are
//! ignored, and a clean-shutdown marker (a snapshot of the index), once checked against the
//! files, spares decoding every record.

use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::path::Path;
use std::sync::Arc;

use stream_engine::{Recovered, RecoveredMessage, StoreError};

use crate::clean::{CleanIndex, CleanMessage};
use crate::codec::{self, In, Interner};
use crate::frame;
use crate::fs::FileSystem;
use crate::index::{Index, RefLoc, SegStat};
use crate::layout::{self, AckKind, Key, SegRecord};
use crate::meta::{Meta, MetaOp};

/// What recovery hands the writer.
#[derive(Debug)]
pub(crate) struct Rebuilt {
    pub recovered: Recovered,
    pub meta: Meta,
    pub meta_seq: u64,
    pub meta_records: usize,
    pub index: Index,
    pub next_id: u64,
    /// The first segment number free for the writer.
    pub next_segment: u32,
    /// Whether the clean-shutdown marker was used.
    pub clean: bool,
    /// Bytes cut off damaged tails.
    pub truncated: u64,
    /// What the full scan decided about references from evidence that may go before the
    /// records naming them (a later copy of their message, an acknowledgement in another
    /// segment's ack file, which compaction or deletion may remove while the record stays):
    /// the writer writes each as an acknowledgement in the ack file of the segment whose
    /// record names the reference, at start, so the decision outlives its evidence.
    pub acks: Vec<(u32, AckKind, Key)>,
    /// Segments holding records that later ones supersede (a compaction cut short by a crash
    /// left the old copies): the writer compacts them at start, since an old copy would
    /// come back once the segment of its successor is deleted, and acknowledgements only
    /// ever go to the successor's ack file.
    pub stale: BTreeSet<u32>,
    /// One above every queue incarnation the segments and ack files name (0 from the
    /// marker: a clean shutdown leaves the metadata log synced). A crash may lose the tail of
    /// the log that declared a queue while an acknowledgement naming it reached the disk;
    /// the writer raises the log's next incarnation to this (writing it down) so that a
    /// queue declared again does not get that incarnation, whose acknowledgement would
    /// remove its new message at the same position.
    pub incarnation_floor: u64,
}

fn corrupt(detail: impl Into<String>) -> StoreError {
    StoreError::Corrupt {
        detail: detail.into(),
    }
}

/// Cuts `path` to `len` bytes (its valid prefix) and syncs it.
fn cut(fs: &dyn FileSystem, path: &Path, len: u64) -> Result<(), StoreError> {
    let mut file = fs.open(path)?;
    file.truncate(len)?;
    file.sync()?;
    Ok(())
}

/// Reads the metadata log, cutting a torn tail.
fn read_meta(fs: &dyn FileSystem, dir: &Path) -> Result<(Meta, u64, usize, u64), StoreError> {
    let path = dir.join(layout::META);
    let mut meta = Meta::default();
    let Some(data) = fs.read(&path)? else {
        return Ok((meta, 0, 0, 0));
    };
    let scan = frame::scan(&data);
    let mut records = 0;
    for f in &scan.frames {
        let op =
            MetaOp::decode(f.payload).map_err(|e| corrupt(format!("{}: {e}", path.display())))?;
        meta.apply(&op);
        records += 1;
    }
    let mut truncated = 0;
    if scan.valid_len < data.len() as u64 {
        truncated = data.len() as u64 - scan.valid_len;
        cut(fs, &path, scan.valid_len)?;
    }
    Ok((meta, scan.last_seq, records, truncated))
}

/// Rebuilds everything from `dir`.
pub(crate) fn recover(fs: &dyn FileSystem, dir: &Path) -> Result<Rebuilt, StoreError> {
    fs.create_dir_all(&dir.join(layout::SEGMENTS))?;
    let (meta, meta_seq, meta_records, meta_cut) = read_meta(fs, dir)?;
    let clean_path = dir.join(layout::CLEAN);
    let marker = fs.read(&clean_path)?;
    // The marker is only good for one start: remove it before anything is written again.
    fs.delete(&clean_path)?;
    fs.sync_dir(dir)?;
    let mut names: BTreeMap<u32, (bool, bool)> = BTreeMap::new();
    for name in fs.list(&dir.join(layout::SEGMENTS))? {
        if let Some((n, ack)) = layout::parse_name(&name) {
            let e = names.entry(n).or_default();
            if ack {
                e.1 = true;
            } else {
                e.0 = true;
            }
        }
    }
    // Ack files whose segment is gone are left over from a deletion cut short.
    for (n, (seg, ack)) in &names {
        if *ack && !*seg {
            fs.delete(&layout::ack_path(dir, *n))?;
        }
    }
    let segments: Vec<u32> = names.iter().filter(|(_, e)| e.0).map(|(n, _)| *n).collect();
    let next_segment = segments.last().map_or(1, |n| n + 1);
    let names = &mut Interner::default();
    if let Some(clean) = marker.as_deref().and_then(|m| CleanIndex::decode(m, names)) {
        if let Some(rebuilt) = from_clean(fs, dir, &meta, &segments, clean, names)? {
            return Ok(Rebuilt {
                meta,
                meta_seq,
                meta_records,
                next_segment,
                truncated: meta_cut,
                ..rebuilt
            });
        }
    }
    let mut full = full_scan(fs, dir, &meta, &segments, names)?;
    full.meta = meta;
    full.meta_seq = meta_seq;
    full.meta_records = meta_records;
    full.next_segment = next_segment;
    full.truncated += meta_cut;
    Ok(full)
}

/// A reference as the segments list it, before acks are applied.
struct Candidate {
    id: u64,
    home: u32,
    delivered: bool,
    record: Option<(u64, u32)>,
}

fn full_scan(
    fs: &dyn FileSystem,
    dir: &Path,
    meta: &Meta,
    segments: &[u32],
    names: &mut Interner,
) -> Result<Rebuilt, StoreError> {
    let mut truncated = 0u64;
    let mut bodies: HashMap<u64, (u32, u64, u32)> = HashMap::default();
    let mut candidates: HashMap<Key, Candidate> = HashMap::default();
    let mut acks = Vec::new();
    // References a later copy of their message dropped, with the segment naming them.
    let mut superseded = Vec::new();
    // Segments holding a record a later one supersedes (a compaction's copy, cut short by a
    // crash before the segment was deleted).
    let mut stale = BTreeSet::new();
    // Per message, the references named since its latest record (that record's list, then
    // reference records of their own).
    let mut named: HashMap<u64, Vec<Key>> = HashMap::default();
    // Every key the files name, live or not, by its highest position per queue incarnation:
    // a new message under one of them would be taken for the old one by the next full scan.
    let mut tops: HashMap<(Arc<str>, u64), Key> = HashMap::default();
    let mut note = |key: &Key| {
        let top = tops
            .entry((key.queue.clone(), key.incarnation))
            .or_insert_with(|| key.clone());
        if key.seq > top.seq {
            top.seq = key.seq;
        }
    };
    // Acknowledged references, with the segment whose ack file says so.
    let mut removed: HashMap<Key, u32> = HashMap::default();
    let mut delivered: HashMap<Key, u32> = HashMap::default();
    let mut data: HashMap<u32, Vec<u8>> = HashMap::default();
    let mut stats: BTreeMap<u32, SegStat> = BTreeMap::new();
    let mut max_id = 0u64;
    for &n in segments {
        let path = layout::segment_path(dir, n);
        let bytes = fs.read(&path)?.unwrap_or_default();
        too_large(&path, bytes.len())?;
        let scan = frame::scan(&bytes);
        for f in &scan.frames {
            let record = layout::decode_segment(f.payload, names)
                .map_err(|e| corrupt(format!("{}@{}: {e}", path.display(), f.offset)))?;
            match record {
                SegRecord::Message { id, refs, .. } => {
                    max_id = max_id.max(id);
                    if let Some((earlier, _, _)) = bodies.insert(id, (n, f.offset, f.len))
                        && earlier != n
                    {
                        stale.insert(earlier);
                    }
                    // A later record of the same message is a compaction's copy, which lists
                    // every reference live when it was made (those with records of their own
                    // too): one named only before it had gone by then, though its record or
                    // its acknowledgement may still be in the files (the index, like
                    // compaction, goes by the latest copy).
                    let keys: Vec<Key> = refs.iter().map(|r| r.key.clone()).collect();
                    if let Some(earlier) = named.insert(id, keys) {
                        for key in earlier {
                            let gone = !refs.iter().any(|r| r.key == key)
                                && candidates.get(&key).is_some_and(|c| c.id == id);
                            if gone && let Some(c) = candidates.remove(&key) {
                                if c.home != n {
                                    stale.insert(c.home);
                                }
                                superseded.push((c.home, key));
                            }
                        }
                    }
                    for r in refs {
                        note(&r.key);
                        let earlier = candidates.insert(
                            r.key,
                            Candidate {
                                id,
                                home: n,
                                delivered: r.delivered,
                                record: None,
                            },
                        );
                        if let Some(e) = earlier.filter(|e| e.home != n) {
                            stale.insert(e.home);
                        }
                    }
                }
                SegRecord::Ref { id, entry } => {
                    // A new message must not take the id a reference record still names.
                    max_id = max_id.max(id);
                    note(&entry.key);
                    named.entry(id).or_default().push(entry.key.clone());
                    let earlier = candidates.insert(
                        entry.key,
                        Candidate {
                            id,
                            home: n,
                            delivered: entry.delivered,
                            record: Some((f.offset, f.len)),
                        },
                    );
                    if let Some(e) = earlier.filter(|e| e.home != n) {
                        stale.insert(e.home);
                    }
                }
            }
        }
        let valid = scan.valid_len;
        let last_seq = scan.last_seq;
        if valid < bytes.len() as u64 {
            truncated += bytes.len() as u64 - valid;
            cut(fs, &path, valid)?;
        }
        let ack_path = layout::ack_path(dir, n);
        let mut ack_seq = 0;
        if let Some(acks) = fs.read(&ack_path)? {
            let scan = frame::scan(&acks);
            for f in &scan.frames {
                let (kind, key) = layout::decode_ack(f.payload, names)
                    .map_err(|e| corrupt(format!("{}: {e}", ack_path.display())))?;
                note(&key);
                match kind {
                    AckKind::Delivered => delivered.insert(key, n),
                    AckKind::Removed => removed.insert(key, n),
                };
            }
            ack_seq = scan.last_seq;
            if scan.valid_len < acks.len() as u64 {
                truncated += acks.len() as u64 - scan.valid_len;
                cut(fs, &ack_path, scan.valid_len)?;
            }
        }
        stats.insert(
            n,
            SegStat {
                bytes: valid,
                seq: last_seq,
                ack_seq,
                ..SegStat::default()
            },
        );
        let mut bytes = bytes;
        bytes.truncate(valid as usize);
        data.insert(n, bytes);
    }
    // Written down unless a later record named them again.
    for (home, key) in superseded {
        if !candidates.contains_key(&key) && meta.incarnation(&key.queue) == Some(key.incarnation) {
            acks.push((home, AckKind::Removed, key));
        }
    }
    let mut index = Index::with_segments(stats);
    for key in tops.values() {
        if meta.incarnation(&key.queue) == Some(key.incarnation) {
            index.note_position(key);
        }
    }
    let mut live: Vec<(Key, Candidate)> = Vec::with_capacity(candidates.len());
    for (key, c) in candidates {
        if meta.incarnation(&key.queue) != Some(key.incarnation) {
            continue;
        }
        if let Some(&acked_in) = removed.get(&key) {
            if acked_in != c.home {
                acks.push((c.home, AckKind::Removed, key));
            }
            continue;
        }
        if bodies.contains_key(&c.id) {
            live.push((key, c));
        }
    }
    live.sort_by(|a, b| (&a.0.queue, a.0.seq).cmp(&(&b.0.queue, b.0.seq)));
    let mut keys_of: HashMap<u64, Vec<Key>> = HashMap::default();
    for (key, c) in &live {
        keys_of.entry(c.id).or_default().push(key.clone());
    }
    for (id, keys) in keys_of {
        let (seg, offset, len) = bodies[&id];
        index.add_message(id, seg, offset, len, keys.len() as u32);
    }
    let mut decoded = HashMap::default();
    let mut messages = Vec::with_capacity(live.len());
    for (key, c) in live {
        let acked_in = delivered.get(&key).copied();
        if !c.delivered && acked_in.is_some_and(|n| n != c.home) {
            acks.push((c.home, AckKind::Delivered, key.clone()));
        }
        let was_delivered = c.delivered || acked_in.is_some();
        let published = match decoded.get(&c.id) {
            Some(p) => Clone::clone(p),
            None => {
                let (seg, offset, _) = bodies[&c.id];
                let p = decode_body(&data[&seg], offset, names)?;
                decoded.insert(c.id, p.clone());
                p
            }
        };
        messages.push(RecoveredMessage {
            queue: key.queue.to_string(),
            seq: key.seq,
            redelivered: was_delivered,
            published,
        });
        index.add_ref(
            key,
            RefLoc {
                id: c.id,
                home: c.home,
                delivered: was_delivered,
                record: c.record,
            },
        );
    }
    Ok(Rebuilt {
        recovered: recovered(meta, messages, &index),
        meta: Meta::default(),
        meta_seq: 0,
        meta_records: 0,
        index,
        next_id: max_id + 1,
        next_segment: 0,
        clean: false,
        truncated,
        acks,
        stale,
        incarnation_floor: tops.keys().map(|(_, i)| i + 1).max().unwrap_or(0),
    })
}

fn recovered(meta: &Meta, messages: Vec<RecoveredMessage>, index: &Index) -> Recovered {
    let positions = index
        .positions()
        .filter(|(queue, incarnation, _)| meta.incarnation(queue) == Some(*incarnation))
        .map(|(queue, _, top)| (queue.to_string(), top))
        .collect();
    Recovered {
        positions,
        exchanges: meta.exchanges.values().cloned().collect(),
        queues: meta.queues.values().map(|(_, q)| q.clone()).collect(),
        bindings: meta.bindings.clone(),
        policies: meta.policies.values().cloned().collect(),
        operator_policies: meta.operator_policies.values().cloned().collect(),
        messages,
    }
}

/// The message encoded in the record at `offset` of a segment's contents.
fn decode_body(
    data: &[u8],
    offset: u64,
    names: &mut Interner,
) -> Result<stream_engine::Published, StoreError> {
    let frame = usize::try_from(offset)
        .ok()
        .and_then(|at| frame::read_at(data, at))
        .ok_or_else(|| corrupt(format!("no valid record at offset {offset}")))?;
    match layout::decode_segment(frame.payload, names).map_err(|e| corrupt(e.to_string()))? {
        SegRecord::Message { body, .. } => {
            codec::get_stored(&mut In(body), names).map_err(|e| corrupt(e.to_string()))
        }
        SegRecord::Ref { .. } => Err(corrupt(format!(
            "record at offset {offset} is not a message"
        ))),
    }
}

/// The message the marker places at `m`'s segment and offset, if a record of its length and
/// id starts there; the references the record lists go into `listed` (see [`listing`]).
fn message_at(
    data: &HashMap<u32, Segment>,
    m: &CleanMessage,
    listed: &mut HashSet<u64>,
    names: &mut Interner,
) -> Option<stream_engine::Published> {
    let frame = data.get(&m.seg)?.record_at(m.offset)?;
    match layout::decode_segment(frame.payload, names).ok()? {
        SegRecord::Message { id, refs, body } if id == m.id && frame.len == m.len => {
            listed.extend(refs.iter().map(|r| listing(id, &r.key)));
            codec::get_stored(&mut In(body), names).ok()
        }
        _ => None,
    }
}

/// The message id and key of the reference record of its own at `offset` of segment
/// `home`, if one of `len` bytes starts there.
fn own_record_at(
    data: &HashMap<u32, Segment>,
    home: u32,
    offset: u64,
    len: u32,
    names: &mut Interner,
) -> Option<(u64, Key)> {
    let frame = data.get(&home)?.record_at(offset)?;
    match layout::decode_segment(frame.payload, names) {
        Ok(SegRecord::Ref { id, entry }) if frame.len == len => Some((id, entry.key)),
        _ => None,
    }
}

/// Refuses a segment whose offsets do not fit the index's 32 bits (written with segments over
/// 4 GiB, which `StoreConfig::validate` no longer allows).
fn too_large(path: &Path, len: usize) -> Result<(), StoreError> {
    if u32::try_from(len).is_err() {
        return Err(corrupt(format!(
            "{} holds {len} bytes: segments of more than 4 GiB are not supported",
            path.display()
        )));
    }
    Ok(())
}

/// Rebuilds from the clean-shutdown snapshot, decoding only the live message records; `None`
/// when the snapshot does not match the files (then the full scan runs).
///
/// The snapshot is the store's own, written after the last sync, but it is checked against
/// the files before it is believed, since the writer goes on from it: every segment and ack
/// file is read and must be whole (each record's CRC) and end where the snapshot says, with
/// the sequence number it says (a record appended after a wrong one would end the next full
/// scan early); every message must start at a record boundary where it says, with its
/// length and id, under an id below the next one handed out, with as many references as
/// name it; a reference in its message's record must be listed there, one with a record of
/// its own must have it where it says. Which references are live, and the highest
/// positions, are believed: the acknowledgements in the ack files are not decoded.
fn from_clean(
    fs: &dyn FileSystem,
    dir: &Path,
    meta: &Meta,
    segments: &[u32],
    clean: CleanIndex,
    names: &mut Interner,
) -> Result<Option<Rebuilt>, StoreError> {
    let listed: Vec<u32> = clean.segments.iter().map(|(n, _)| *n).collect();
    if listed != segments {
        return Ok(None);
    }
    let mut data = HashMap::default();
    for (n, stat) in &clean.segments {
        let bytes = fs.read(&layout::segment_path(dir, *n))?.unwrap_or_default();
        too_large(&layout::segment_path(dir, *n), bytes.len())?;
        let scan = frame::scan(&bytes);
        if bytes.len() as u64 != stat.bytes
            || scan.valid_len != stat.bytes
            || scan.last_seq != stat.seq
        {
            return Ok(None);
        }
        // Where its records start, in order: a place inside a record may hold bytes that
        // read as one.
        let starts: Vec<u64> = scan.frames.iter().map(|f| f.offset).collect();
        let acks = fs.read(&layout::ack_path(dir, *n))?.unwrap_or_default();
        let scan = frame::scan(&acks);
        if scan.valid_len != acks.len() as u64 || scan.last_seq != stat.ack_seq {
            return Ok(None);
        }
        data.insert(*n, Segment { bytes, starts });
    }
    let mut index = Index::with_segments(clean.segments.iter().cloned().collect());
    for s in index.segs.values_mut() {
        s.live = 0;
        s.live_bytes = 0;
    }
    // The live messages in id order (the marker lists them so), and what their records list.
    let mut live: Vec<LiveMessage> = Vec::with_capacity(clean.messages.len());
    let mut listed_keys: HashSet<u64> = HashSet::default();
    for m in &clean.messages {
        if m.id >= clean.next_id || live.last().is_some_and(|l| l.id >= m.id) {
            return Ok(None);
        }
        let Some(published) = message_at(&data, m, &mut listed_keys, names) else {
            return Ok(None);
        };
        live.push(LiveMessage {
            id: m.id,
            published,
            refs: m.refs,
            named: 0,
        });
        index.add_message(m.id, m.seg, m.offset, m.len, m.refs);
    }
    for (queue, incarnation, top) in clean.positions {
        if meta.incarnation(&queue) == Some(incarnation) {
            index.note_position(&Key {
                queue,
                incarnation,
                seq: top,
            });
        }
    }
    let mut refs = clean.refs;
    // Sorted here, while the entries are small: the broker then finds the messages in order.
    refs.sort_unstable_by(|a, b| (&a.0.queue, a.0.seq).cmp(&(&b.0.queue, b.0.seq)));
    if refs.windows(2).any(|w| w[0].0 == w[1].0) {
        return Ok(None);
    }
    let mut messages = Vec::with_capacity(refs.len());
    for (key, loc) in refs {
        let Ok(at) = live.binary_search_by_key(&loc.id, |l| l.id) else {
            return Ok(None);
        };
        if meta.incarnation(&key.queue) != Some(key.incarnation) {
            return Ok(None);
        }
        let placed = match loc.record {
            // Listed in its message's record (the marker keeps no place for it).
            None => listed_keys.contains(&listing(loc.id, &key)),
            Some((offset, len)) => own_record_at(&data, loc.home, offset, len, names)
                .is_some_and(|(id, k)| id == loc.id && k == key),
        };
        if !placed {
            return Ok(None);
        }
        live[at].named += 1;
        messages.push(RecoveredMessage {
            queue: key.queue.to_string(),
            seq: key.seq,
            redelivered: loc.delivered,
            published: live[at].published.clone(),
        });
        index.add_ref(key, loc);
    }
    if live.iter().any(|l| l.refs == 0 || l.named != l.refs) {
        return Ok(None);
    }
    Ok(Some(Rebuilt {
        recovered: recovered(meta, messages, &index),
        meta: Meta::default(),
        meta_seq: 0,
        meta_records: 0,
        index,
        next_id: clean.next_id,
        next_segment: 0,
        clean: true,
        truncated: 0,
        acks: Vec::new(),
        stale: BTreeSet::new(),
        incarnation_floor: 0,
    }))
}

/// A segment's contents and where its records start, in order.
struct Segment {
    bytes: Vec<u8>,
    starts: Vec<u64>,
}

impl Segment {
    /// The record starting at `offset`, if one does.
    fn record_at(&self, offset: u64) -> Option<frame::Frame<'_>> {
        self.starts.binary_search(&offset).ok()?;
        frame::read_at(&self.bytes, usize::try_from(offset).ok()?)
    }
}

/// A live message of the marker, and how many of its references the marker names.
struct LiveMessage {
    id: u64,
    published: stream_engine::Published,
    refs: u32,
    named: u32,
}

/// A reference listed in message `id`'s record, as a hash (the check that the marker's
/// inline references are listed there keeps no key per message).
fn listing(id: u64, key: &Key) -> u64 {
    use std::hash::{BuildHasher, Hash, Hasher};
    let mut h = rustc_hash::FxBuildHasher.build_hasher();
    id.hash(&mut h);
    key.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {

    use stream_engine::{Broker, BrokerConfig, FieldTable, Message, PublishOptions, QueueOptions};

    use super::*;
    use crate::{DiskStore, FaultFs, StoreConfig};

    const DIR: &str = "/clean";

    /// A cleanly closed store: queue `q` with three persistent messages, the first acked.
    async fn closed() -> FaultFs {
        let fs = FaultFs::new();
        let store =
            DiskStore::open_with(Arc::new(fs.clone()), DIR, StoreConfig::default()).unwrap();
        let broker: Broker = Broker::with_store(BrokerConfig::default(), store.clone()).unwrap();
        let conn = broker.connect();
        let ch = conn.open_channel().unwrap();
        ch.confirm_select().unwrap();
        let durable = QueueOptions {
            durable: true,
            ..Default::default()
        };
        ch.queue_declare("q", durable, FieldTable::new()).unwrap();
        for body in ["one", "two", "three"] {
            let mut m = Message::new(body);
            m.properties.delivery_mode = Some(2);
            ch.basic_publish("", "q", PublishOptions::default(), m)
                .await
                .unwrap();
        }
        let got = ch.basic_get("q", false).unwrap().unwrap();
        ch.basic_ack(got.delivery.delivery_tag, false).unwrap();
        drop((ch, conn, broker));
        store.close().unwrap();
        fs.crash()
    }

    /// The store on `fs`: whether it started from the marker, and the bodies in `q`.
    fn start(fs: &FaultFs) -> (bool, Vec<String>) {
        let store =
            DiskStore::open_with(Arc::new(fs.clone()), DIR, StoreConfig::default()).unwrap();
        let broker: Broker = Broker::with_store(BrokerConfig::default(), store.clone()).unwrap();
        let bodies = broker
            .peek("q", 10)
            .unwrap()
            .iter()
            .map(|m| String::from_utf8(m.record.message.payload.to_vec()).unwrap())
            .collect();
        (store.started_clean(), bodies)
    }

    /// Rewrites the marker's payload (its CRC stays valid): the marker then lies about the
    /// files, as a bug could make it.
    fn tamper(fs: &FaultFs, change: impl FnOnce(&mut Vec<u8>)) -> FaultFs {
        let path = Path::new(DIR).join(layout::CLEAN);
        let marker = fs.contents(&path).unwrap();
        let mut payload = frame::read_at(&marker, 0).unwrap().payload.to_vec();
        change(&mut payload);
        let mut framed = Vec::new();
        frame::push(&mut framed, 1, &payload);
        let tampered = fs.crash();
        tampered.set_contents(&path, framed);
        tampered
    }

    fn put_u64(payload: &mut [u8], at: usize, v: u64) {
        payload[at..at + 8].copy_from_slice(&v.to_le_bytes());
    }

    // The marker's layout with one segment: format (4), next id (8), segment count (8), the
    // segment (number 4, bytes 8, last seq 8, last ack seq 8), message count (8), then per
    // message id (8), segment (4), offset (4), length (4), references (4); then the queues.
    const NEXT_ID: usize = 4;
    const SEG_SEQ: usize = 4 + 8 + 8 + 4 + 8;
    const ACK_SEQ: usize = SEG_SEQ + 8;
    const FIRST_ID: usize = ACK_SEQ + 8 + 8;
    const FIRST_REFS: usize = FIRST_ID + 20;
    // After the two messages: queue count (8), the queue's name (length 4, "q"), incarnation
    // (8), reference count (8), then per reference position (8), message id (8), flags (2).
    const FIRST_REF_ID: usize = FIRST_ID + 2 * 24 + 8 + 5 + 8 + 8 + 8;
    const SECOND_REF_ID: usize = FIRST_REF_ID + 8 + 2 + 8;

    fn swap_u64(payload: &mut [u8], a: usize, b: usize) {
        let (x, y) = (payload[a..a + 8].to_vec(), payload[b..b + 8].to_vec());
        payload[a..a + 8].copy_from_slice(&y);
        payload[b..b + 8].copy_from_slice(&x);
    }

    /// What a tampered marker says wrongly, and how its payload is changed to say it.
    type Lie = (&'static str, fn(&mut Vec<u8>));

    #[tokio::test]
    async fn a_marker_that_disagrees_with_the_files_is_not_believed() {
        let fs = closed().await;
        let whole = vec!["two".to_owned(), "three".to_owned()];
        assert_eq!(start(&fs.crash()), (true, whole.clone()));
        let lies: [Lie; 6] = [
            // New messages would take ids the files already hold.
            ("next id", |p| put_u64(p, NEXT_ID, 1)),
            // Records appended after it would end the next full scan.
            ("segment's last sequence number", |p| put_u64(p, SEG_SEQ, 2)),
            ("ack file's last sequence number", |p| {
                put_u64(p, ACK_SEQ, 7)
            }),
            // The record there is another message's (renamed with its reference).
            ("a message's id", |p| {
                put_u64(p, FIRST_ID + 24, 0);
                put_u64(p, SECOND_REF_ID, 0);
            }),
            // Each reference named by the other message's record.
            ("the messages of two references", |p| {
                swap_u64(p, FIRST_REF_ID, SECOND_REF_ID)
            }),
            // The message would never be freed (or freed while still queued).
            ("a message's reference count", |p| p[FIRST_REFS] = 2),
        ];
        for (what, lie) in lies {
            let tampered = tamper(&fs, lie);
            assert_eq!(start(&tampered), (false, whole.clone()), "{what}");
        }
    }

    /// The metadata log declaring durable queues `a` (incarnation 1) and `b` (2).
    fn two_queues(fs: &FaultFs) {
        let mut meta = Vec::new();
        for (seq, (name, incarnation)) in [("a", 1), ("b", 2)].into_iter().enumerate() {
            let q = stream_engine::QueueDef {
                name: name.to_owned(),
                options: QueueOptions {
                    durable: true,
                    ..Default::default()
                },
                arguments: FieldTable::new(),
            };
            frame::push(
                &mut meta,
                seq as u64 + 1,
                &MetaOp::QueueDeclared(incarnation, q).encode(),
            );
        }
        fs.set_contents(&Path::new(DIR).join(layout::META), meta);
    }

    /// Position 1 of queue `a` or `b` (in the incarnations of [`two_queues`]).
    fn first_of(queue: &str) -> layout::RefEntry {
        layout::RefEntry {
            key: Key {
                queue: Arc::from(queue),
                incarnation: if queue == "a" { 1 } else { 2 },
                seq: 1,
            },
            delivered: false,
        }
    }

    /// Message `id`'s record (a persistent message), listing `refs`.
    fn message_record(id: u64, refs: &[layout::RefEntry]) -> Vec<u8> {
        let mut m = Message::new("body");
        m.properties.delivery_mode = Some(2);
        let p = stream_engine::Published::new(Arc::<str>::from(""), Arc::<str>::from("a"), m);
        let mut body = codec::out_for(&p);
        codec::put_published(&mut body, &p);
        layout::encode_message(id, refs, &body.0)
    }

    /// Segment `n` holding `records`.
    fn segment(fs: &FaultFs, n: u32, records: &[Vec<u8>]) {
        let mut data = Vec::new();
        for (seq, r) in records.iter().enumerate() {
            frame::push(&mut data, seq as u64 + 1, r);
        }
        fs.set_contents(&layout::segment_path(Path::new(DIR), n), data);
    }

    /// How many messages queues `a` and `b` recover with.
    fn recovered_counts(fs: &FaultFs) -> (usize, usize) {
        let store =
            DiskStore::open_with(Arc::new(fs.clone()), DIR, StoreConfig::default()).unwrap();
        let broker: Broker = Broker::with_store(BrokerConfig::default(), store.clone()).unwrap();
        let count = |q| broker.peek(q, 10).unwrap().len();
        (count("a"), count("b"))
    }

    /// A later record of a message is a compaction's copy, listing every reference live when
    /// it was made: one only an earlier copy lists, or only a reference record before it
    /// names, had gone.
    #[tokio::test]
    async fn a_reference_the_latest_copy_of_its_message_does_not_list_is_not_live() {
        let (a, b) = (first_of("a"), first_of("b"));
        // An earlier copy listing `a`, the latest listing `b`.
        let fs = FaultFs::new();
        two_queues(&fs);
        let earlier = message_record(7, std::slice::from_ref(&a));
        segment(
            &fs,
            1,
            &[earlier, message_record(7, std::slice::from_ref(&b))],
        );
        assert_eq!(recovered_counts(&fs), (0, 1));
        // `b` in a reference record of its own, then a copy listing only `a` (made after
        // `b` was acknowledged, the acknowledgement gone with the segment compacted).
        let fs = FaultFs::new();
        two_queues(&fs);
        segment(&fs, 1, &[message_record(7, std::slice::from_ref(&a))]);
        segment(&fs, 2, &[layout::encode_ref(7, &b)]);
        segment(&fs, 3, &[message_record(7, std::slice::from_ref(&a))]);
        assert_eq!(recovered_counts(&fs), (1, 0));
        // The decision outlives the copy: `a` is acknowledged as removed at start, so when the
        // copy's segment goes (as compaction deletes it) while the earlier one stays, `a` does
        // not come back.
        // (Message 8 keeps the first segment live.)
        let fs = FaultFs::new();
        two_queues(&fs);
        let mut other = first_of("b");
        other.key.seq = 2;
        let earlier = message_record(7, std::slice::from_ref(&a));
        let kept = message_record(8, &[other]);
        segment(&fs, 1, &[earlier, kept]);
        segment(&fs, 2, &[message_record(7, std::slice::from_ref(&b))]);
        let store =
            DiskStore::open_with(Arc::new(fs.clone()), DIR, StoreConfig::default()).unwrap();
        let after = fs.crash();
        drop(store);
        FileSystem::delete(&after, &layout::segment_path(Path::new(DIR), 2)).unwrap();
        assert_eq!(recovered_counts(&after), (0, 1));
        // A reference record after the message's only record is live.
        let fs = FaultFs::new();
        two_queues(&fs);
        segment(&fs, 1, &[message_record(7, std::slice::from_ref(&a))]);
        segment(&fs, 2, &[layout::encode_ref(7, &b)]);
        assert_eq!(recovered_counts(&fs), (1, 1));
    }

    /// A compaction cut short by a crash leaves the old copy of a message it had copied in a
    /// segment another message keeps: that segment is compacted at start, so the old copy
    /// does not come back once the new copy's segment is deleted (the acknowledgement went
    /// to the new copy's ack file).
    #[tokio::test]
    async fn an_old_copy_left_by_a_compaction_cut_short_does_not_come_back() {
        let fs = FaultFs::new();
        two_queues(&fs);
        let mut kept = first_of("b");
        kept.key.seq = 2;
        let copied = message_record(7, &[first_of("a")]);
        segment(&fs, 1, &[copied.clone(), message_record(8, &[kept])]);
        segment(&fs, 2, &[copied]);
        let store =
            DiskStore::open_with(Arc::new(fs.clone()), DIR, StoreConfig::default()).unwrap();
        let broker: Broker = Broker::with_store(BrokerConfig::default(), store.clone()).unwrap();
        let conn = broker.connect();
        let ch = conn.open_channel().unwrap();
        let got = ch.basic_get("a", false).unwrap().unwrap();
        ch.basic_ack(got.delivery.delivery_tag, false).unwrap();
        store.stats().unwrap();
        let after = fs.crash();
        drop((ch, conn, broker, store));
        assert_eq!(recovered_counts(&after), (0, 1));
    }

    /// New messages take ids after every id the files name, a reference record's too (its
    /// message's record may be gone, the reference record not yet).
    #[test]
    fn new_ids_follow_those_reference_records_name() {
        let fs = FaultFs::new();
        two_queues(&fs);
        segment(&fs, 1, &[message_record(3, &[first_of("a")])]);
        segment(&fs, 2, &[layout::encode_ref(9, &first_of("b"))]);
        let rebuilt = recover(&fs, Path::new(DIR)).unwrap();
        assert_eq!(rebuilt.next_id, 10);
    }
}
