//! The writer's picture of what is on disk: where each live message and reference is, and
//! how much of each segment is still live (for whole-segment deletion and compaction).
//!
//! Kept lean, since it holds an entry per live message and per live reference even when the
//! broker has paged the message out, and without a hash-map entry per message:
//!
//! * message ids are handed out one after the other (`DiskStore::enqueued`), so message
//!   locations live in a [`Dense`] table indexed by id: chunks of [`CHUNK`] slots of 16 bytes
//!   (segment, offset, length, reference count), a chunk dropped once none of its slots is
//!   live;
//! * a queue's sequence numbers are handed out one after the other too (the engine's arrival
//!   order), so each queue incarnation's references live in a [`Dense`] table indexed by
//!   sequence number: 8 bytes per slot (the message id and two flags, delivered and "has a
//!   record of its own");
//! * a reference written apart from its message (a fanout's further queues: rare) also has
//!   an entry in a hash map with its record's place;
//! * compaction finds a segment's live messages by reading the segment (which it copies
//!   anyway) and asking the table whether each record is the live copy; a message's inline
//!   references are the ones its record lists that are still live.

use std::collections::BTreeMap;
use std::sync::Arc;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use crate::layout::Key;

/// Slots per chunk of a [`Dense`] table: a chunk kept alive by one straggler costs this many
/// slots (4 KiB of messages, 2 KiB of references).
pub(crate) const CHUNK: u64 = 256;

/// A slot of a [`Dense`] table: a vacant value and a test for it.
pub(crate) trait Slot: Copy {
    const VACANT: Self;
    fn live(&self) -> bool;
}

#[derive(Debug)]
struct Chunk<T> {
    live: u32,
    slots: Vec<T>,
}

/// A table indexed by a number that is handed out in order: chunks of [`CHUNK`] slots,
/// created when a slot of theirs is filled and dropped when their last live slot is vacated.
#[derive(Debug)]
pub(crate) struct Dense<T> {
    chunks: BTreeMap<u64, Chunk<T>>,
    live: usize,
}

impl<T> Default for Dense<T> {
    fn default() -> Self {
        Dense {
            chunks: BTreeMap::new(),
            live: 0,
        }
    }
}

impl<T: Slot> Dense<T> {
    fn split(n: u64) -> (u64, usize) {
        (n / CHUNK, (n % CHUNK) as usize)
    }

    pub fn get(&self, n: u64) -> Option<&T> {
        let (c, i) = Self::split(n);
        self.chunks.get(&c)?.slots.get(i).filter(|s| s.live())
    }

    /// The live slot `n`, to change in place (the change must leave it live: vacate with
    /// [`Dense::remove`]).
    fn get_mut(&mut self, n: u64) -> Option<&mut T> {
        let (c, i) = Self::split(n);
        self.chunks
            .get_mut(&c)?
            .slots
            .get_mut(i)
            .filter(|s| s.live())
    }

    /// Fills slot `n` (with a live value); returns what it held if it was live.
    pub fn insert(&mut self, n: u64, value: T) -> Option<T> {
        debug_assert!(value.live());
        let (c, i) = Self::split(n);
        let chunk = self.chunks.entry(c).or_insert_with(|| Chunk {
            live: 0,
            slots: Vec::new(),
        });
        if chunk.slots.len() <= i {
            if chunk.slots.is_empty() {
                chunk.slots.reserve_exact(CHUNK as usize);
            }
            chunk.slots.resize(i + 1, T::VACANT);
        }
        let old = std::mem::replace(&mut chunk.slots[i], value);
        if old.live() {
            Some(old)
        } else {
            chunk.live += 1;
            self.live += 1;
            None
        }
    }

    /// Vacates slot `n`; returns what it held if it was live.
    pub fn remove(&mut self, n: u64) -> Option<T> {
        let (c, i) = Self::split(n);
        let chunk = self.chunks.get_mut(&c)?;
        let slot = chunk.slots.get_mut(i)?;
        if !slot.live() {
            return None;
        }
        let old = std::mem::replace(slot, T::VACANT);
        chunk.live -= 1;
        self.live -= 1;
        if chunk.live == 0 {
            self.chunks.remove(&c);
        }
        Some(old)
    }

    /// Live slots, by number.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &T)> + '_ {
        self.chunks.iter().flat_map(|(c, chunk)| {
            chunk
                .slots
                .iter()
                .enumerate()
                .filter(|(_, s)| s.live())
                .map(move |(i, s)| (c * CHUNK + i as u64, s))
        })
    }

    /// Live slots.
    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }
}

/// A live message record: 16 bytes (segments are at most 2 GiB plus a record, so an offset
/// fits 32 bits; see `StoreConfig::validate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MsgLoc {
    pub seg: u32,
    pub offset: u32,
    pub len: u32,
    /// How many live references it has (0: a vacant slot).
    pub refs: u32,
}

impl Slot for MsgLoc {
    const VACANT: Self = MsgLoc {
        seg: 0,
        offset: 0,
        len: 0,
        refs: 0,
    };

    fn live(&self) -> bool {
        self.refs > 0
    }
}

/// A reference's slot: the message id in the low bits, then flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RefSlot(u64);

const LIVE: u64 = 1 << 63;
const DELIVERED: u64 = 1 << 62;
/// The reference has a record of its own (not listed in its message's record).
const OWN: u64 = 1 << 61;
const ID: u64 = OWN - 1;

/// The largest message id the index keeps (61 bits): a store refuses a larger one from disk.
pub(crate) const MAX_ID: u64 = ID;

impl RefSlot {
    fn new(id: u64, delivered: bool, own: bool) -> RefSlot {
        debug_assert!(id <= ID);
        let mut bits = LIVE | (id & ID);
        if delivered {
            bits |= DELIVERED;
        }
        if own {
            bits |= OWN;
        }
        RefSlot(bits)
    }

    fn id(self) -> u64 {
        self.0 & ID
    }

    fn delivered(self) -> bool {
        self.0 & DELIVERED != 0
    }

    fn own(self) -> bool {
        self.0 & OWN != 0
    }
}

impl Slot for RefSlot {
    const VACANT: Self = RefSlot(0);

    fn live(&self) -> bool {
        self.0 & LIVE != 0
    }
}

/// A live reference as the index describes it: a queue holds message `id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RefLoc {
    pub id: u64,
    /// The segment whose record names this reference (its acks go to that segment's ack
    /// file): its own record's, or its message's.
    pub home: u32,
    pub delivered: bool,
    /// Where its own reference record is, when it is not part of the message record.
    pub record: Option<(u64, u32)>,
}

/// Where a reference record of its own is.
#[derive(Debug, Clone, Copy)]
struct OwnRecord {
    home: u32,
    offset: u64,
    len: u32,
}

/// A segment's size and live share.
#[derive(Debug, Clone, Default)]
pub(crate) struct SegStat {
    pub bytes: u64,
    pub live_bytes: u64,
    /// Live records (messages and reference records).
    pub live: u64,
    /// The last record's sequence number in the segment file.
    pub seq: u64,
    /// The last record's sequence number in the segment's ack file.
    pub ack_seq: u64,
}

/// A queue incarnation.
type QueueId = (Arc<str>, u64);

/// The live contents of the segments.
#[derive(Debug, Default)]
pub(crate) struct Index {
    msgs: Dense<MsgLoc>,
    queues: HashMap<QueueId, Dense<RefSlot>>,
    refs: usize,
    /// References with a record of their own (few, since only a fanout writes them).
    records: HashMap<Key, OwnRecord>,
    pub segs: BTreeMap<u32, SegStat>,
    /// Live reference records per segment, what a compaction moves besides messages.
    pub ref_records_in: HashMap<u32, HashSet<Key>>,
    /// Per queue incarnation, the highest position the segments and ack files may hold
    /// anything under, live or not (`Recovered::positions`): kept until the queue is deleted.
    tops: HashMap<QueueId, u64>,
}

impl Index {
    /// An index of these segments, with nothing live yet.
    pub fn with_segments(segs: BTreeMap<u32, SegStat>) -> Index {
        Index {
            segs,
            ..Index::default()
        }
    }

    /// Records a message record with `refs` live references (none: nothing to record).
    pub fn add_message(&mut self, id: u64, seg: u32, offset: u64, len: u32, refs: u32) {
        if refs == 0 {
            return;
        }
        let offset = u32::try_from(offset).expect("segments are under 4 GiB (StoreConfig)");
        if let Some(old) = self.msgs.insert(
            id,
            MsgLoc {
                seg,
                offset,
                len,
                refs,
            },
        ) {
            self.unlive(old.seg, old.len);
        }
        let stat = self.segs.entry(seg).or_default();
        stat.live += 1;
        stat.live_bytes += u64::from(len);
    }

    fn unlive(&mut self, seg: u32, len: u32) {
        if let Some(stat) = self.segs.get_mut(&seg) {
            stat.live -= 1;
            stat.live_bytes -= u64::from(len);
        }
    }

    /// Where live message `id`'s record is.
    pub fn message(&self, id: u64) -> Option<MsgLoc> {
        self.msgs.get(id).copied()
    }

    /// Live messages.
    pub fn message_count(&self) -> usize {
        self.msgs.len()
    }

    /// Live references.
    pub fn ref_count(&self) -> usize {
        self.refs
    }

    /// Every live message, by id.
    pub fn messages(&self) -> impl Iterator<Item = (u64, MsgLoc)> + '_ {
        self.msgs.iter().map(|(id, m)| (id, *m))
    }

    /// Records a reference (its message must be known already: it counts this reference
    /// among its `refs`, or is told with [`Index::add_message_ref`]). A reference already
    /// there is replaced (a compaction moved its record).
    pub fn add_ref(&mut self, key: Key, loc: RefLoc) {
        self.note_position(&key);
        let slot = RefSlot::new(loc.id, loc.delivered, loc.record.is_some());
        let old = self
            .queues
            .entry((key.queue.clone(), key.incarnation))
            .or_default()
            .insert(key.seq, slot);
        match old {
            Some(old) if old.own() => {
                self.drop_record(&key);
            }
            Some(_) => {}
            None => self.refs += 1,
        }
        if let Some((offset, len)) = loc.record {
            let stat = self.segs.entry(loc.home).or_default();
            stat.live += 1;
            stat.live_bytes += u64::from(len);
            self.ref_records_in
                .entry(loc.home)
                .or_default()
                .insert(key.clone());
            self.records.insert(
                key,
                OwnRecord {
                    home: loc.home,
                    offset,
                    len,
                },
            );
        }
    }

    /// One more live reference to message `id` (a reference record was written for it).
    pub fn add_message_ref(&mut self, id: u64) {
        if let Some(m) = self.msgs.get_mut(id) {
            m.refs += 1;
        }
    }

    /// A reference's record of its own is no longer live; returns its segment.
    fn drop_record(&mut self, key: &Key) -> Option<u32> {
        let rec = self.records.remove(key)?;
        self.unlive(rec.home, rec.len);
        if let Some(set) = self.ref_records_in.get_mut(&rec.home) {
            set.remove(key);
            if set.is_empty() {
                self.ref_records_in.remove(&rec.home);
            }
        }
        Some(rec.home)
    }

    fn describe(&self, key: &Key, slot: RefSlot) -> RefLoc {
        let (home, record) = match self.records.get(key).filter(|_| slot.own()) {
            Some(rec) => (rec.home, Some((rec.offset, rec.len))),
            None => (self.msgs.get(slot.id()).map_or(0, |m| m.seg), None),
        };
        RefLoc {
            id: slot.id(),
            home,
            delivered: slot.delivered(),
            record,
        }
    }

    fn slot(&self, key: &Key) -> Option<RefSlot> {
        self.queues
            .get(&(key.queue.clone(), key.incarnation))?
            .get(key.seq)
            .copied()
    }

    /// A live reference.
    pub fn get_ref(&self, key: &Key) -> Option<RefLoc> {
        let slot = self.slot(key)?;
        Some(self.describe(key, slot))
    }

    /// The record of the message a live reference names.
    pub fn locate(&self, key: &Key) -> Option<MsgLoc> {
        self.message(self.slot(key)?.id())
    }

    /// Marks a reference delivered; returns its home segment if it was not already.
    pub fn set_delivered(&mut self, key: &Key) -> Option<u32> {
        let slot = self
            .queues
            .get_mut(&(key.queue.clone(), key.incarnation))?
            .get_mut(key.seq)?;
        if slot.delivered() {
            return None;
        }
        slot.0 |= DELIVERED;
        let slot = *slot;
        Some(self.describe(key, slot).home)
    }

    /// Removes a reference; returns the segment it was homed in. The message goes with its
    /// last reference.
    pub fn remove_ref(&mut self, key: &Key) -> Option<u32> {
        let id = (key.queue.clone(), key.incarnation);
        let refs = self.queues.get_mut(&id)?;
        let slot = refs.remove(key.seq)?;
        if refs.is_empty() {
            self.queues.remove(&id);
        }
        Some(self.release(key, slot))
    }

    /// A reference left its queue's table: drops its own record and its message's count.
    fn release(&mut self, key: &Key, slot: RefSlot) -> u32 {
        self.refs -= 1;
        let own = if slot.own() {
            self.drop_record(key)
        } else {
            None
        };
        let id = slot.id();
        let gone = match self.msgs.get_mut(id) {
            Some(m) if m.refs > 1 => {
                m.refs -= 1;
                None
            }
            Some(_) => self.msgs.remove(id),
            None => None,
        };
        let seg = match gone {
            Some(m) => {
                self.unlive(m.seg, m.len);
                Some(m.seg)
            }
            None => self.msgs.get(id).map(|m| m.seg),
        };
        own.or(seg).unwrap_or(0)
    }

    /// Notes that the files hold something under `key`'s position (a reference, or an
    /// acknowledgement of one): its queue's new messages must be numbered after it.
    pub fn note_position(&mut self, key: &Key) {
        let top = self
            .tops
            .entry((key.queue.clone(), key.incarnation))
            .or_default();
        *top = (*top).max(key.seq);
    }

    /// The highest position noted per queue incarnation (queue, incarnation, position).
    pub fn positions(&self) -> impl Iterator<Item = (&Arc<str>, u64, u64)> + '_ {
        self.tops.iter().map(|((q, i), top)| (q, *i, *top))
    }

    /// Removes every reference of `queue` (any incarnation: the queue was deleted).
    pub fn remove_queue(&mut self, queue: &str) {
        self.tops.retain(|(name, _), _| &**name != queue);
        let ids: Vec<QueueId> = self
            .queues
            .keys()
            .filter(|(name, _)| &**name == queue)
            .cloned()
            .collect();
        for qid in ids {
            let Some(refs) = self.queues.remove(&qid) else {
                continue;
            };
            for (seq, slot) in refs.iter() {
                let key = Key {
                    queue: qid.0.clone(),
                    incarnation: qid.1,
                    seq,
                };
                self.release(&key, *slot);
            }
        }
    }

    /// A compaction rewrote message `id`, with its live references `keys`, at `offset` of
    /// segment `seg`: its references are listed in that record now (none has a record of
    /// its own any more).
    pub fn move_message(&mut self, id: u64, keys: &[Key], seg: u32, offset: u64, len: u32) {
        let Some(old) = self.msgs.remove(id) else {
            return;
        };
        self.unlive(old.seg, old.len);
        for key in keys {
            let Some(slot) = self.slot(key).filter(|s| s.id() == id) else {
                continue;
            };
            if slot.own() {
                self.drop_record(key);
                if let Some(s) = self
                    .queues
                    .get_mut(&(key.queue.clone(), key.incarnation))
                    .and_then(|q| q.get_mut(key.seq))
                {
                    s.0 &= !OWN;
                }
            }
        }
        self.add_message(id, seg, offset, len, old.refs);
    }

    /// Whether `key` is a live reference listed in message `id`'s record (not one with a
    /// record of its own).
    pub fn is_inline_ref(&self, key: &Key, id: u64) -> bool {
        self.slot(key).is_some_and(|s| s.id() == id && !s.own())
    }

    /// The live references of the messages `ids` that have records of their own (a scan of
    /// those few references).
    pub fn own_refs_of(&self, ids: &HashSet<u64>) -> HashMap<u64, Vec<Key>> {
        let mut of: HashMap<u64, Vec<Key>> = HashMap::default();
        for key in self.records.keys() {
            if let Some(slot) = self.slot(key).filter(|s| ids.contains(&s.id())) {
                of.entry(slot.id()).or_default().push(key.clone());
            }
        }
        of
    }

    /// The queue incarnations with live references, and how many each has.
    pub fn queues(&self) -> Vec<(Arc<str>, u64, usize)> {
        self.queues
            .iter()
            .map(|((q, i), refs)| (q.clone(), *i, refs.len()))
            .collect()
    }

    /// The live references of one queue incarnation, in sequence order.
    pub fn refs_of<'a>(
        &'a self,
        queue: &Arc<str>,
        incarnation: u64,
    ) -> impl Iterator<Item = (Key, RefLoc)> + 'a {
        let queue = queue.clone();
        self.queues
            .get(&(queue.clone(), incarnation))
            .into_iter()
            .flat_map(|refs| refs.iter())
            .map(move |(seq, slot)| {
                let key = Key {
                    queue: queue.clone(),
                    incarnation,
                    seq,
                };
                let loc = self.describe(&key, *slot);
                (key, loc)
            })
    }

    /// Every live reference, queue by queue in sequence order.
    #[cfg(test)]
    pub fn refs(&self) -> impl Iterator<Item = (Key, RefLoc)> + '_ {
        self.queues
            .iter()
            .flat_map(move |((queue, incarnation), refs)| {
                refs.iter().map(move |(seq, slot)| {
                    let key = Key {
                        queue: queue.clone(),
                        incarnation: *incarnation,
                        seq,
                    };
                    let loc = self.describe(&key, *slot);
                    (key, loc)
                })
            })
    }

    /// Forgets a segment (deleted).
    pub fn forget_segment(&mut self, seg: u32) {
        self.segs.remove(&seg);
        self.ref_records_in.remove(&seg);
    }

    /// Segments other than `active` with nothing live.
    pub fn dead_segments(&self, active: u32) -> Vec<u32> {
        self.segs
            .iter()
            .filter(|(n, s)| **n != active && s.live == 0)
            .map(|(n, _)| *n)
            .collect()
    }

    /// A segment other than `active` whose live share is under half.
    pub fn sparse_segment(&self, active: u32) -> Option<u32> {
        self.segs
            .iter()
            .find(|(n, s)| **n != active && s.live > 0 && s.live_bytes * 2 < s.bytes)
            .map(|(n, _)| *n)
    }

    /// Bytes in segments, live or not.
    pub fn segment_bytes(&self) -> u64 {
        self.segs.values().map(|s| s.bytes).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clean::{self, CleanIndex};
    use crate::codec::Interner;

    /// The index the simple way: hash maps of messages and references.
    #[derive(Default)]
    struct Model {
        msgs: std::collections::HashMap<u64, MsgLoc>,
        refs: std::collections::HashMap<Key, RefLoc>,
    }

    impl Model {
        fn home(&self, r: &RefLoc) -> u32 {
            match r.record {
                Some(_) => r.home,
                None => self.msgs[&r.id].seg,
            }
        }

        fn remove(&mut self, key: &Key) -> Option<u32> {
            let r = self.refs.remove(key)?;
            let home = self.home(&r);
            let m = self.msgs.get_mut(&r.id).unwrap();
            m.refs -= 1;
            if m.refs == 0 {
                self.msgs.remove(&r.id);
            }
            Some(home)
        }

        /// Live records and bytes per segment.
        fn live(&self) -> BTreeMap<u32, (u64, u64)> {
            let mut live: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
            for m in self.msgs.values() {
                let e = live.entry(m.seg).or_default();
                e.0 += 1;
                e.1 += u64::from(m.len);
            }
            for r in self.refs.values() {
                if let Some((_, len)) = r.record {
                    let e = live.entry(r.home).or_default();
                    e.0 += 1;
                    e.1 += u64::from(len);
                }
            }
            live
        }

        fn check(&self, index: &Index, step: usize) {
            assert_eq!(index.message_count(), self.msgs.len(), "step {step}");
            assert_eq!(index.ref_count(), self.refs.len(), "step {step}");
            for (id, m) in &self.msgs {
                assert_eq!(index.message(*id), Some(*m), "step {step}: message {id}");
            }
            let mut listed: Vec<(u64, MsgLoc)> = index.messages().collect();
            listed.sort_by_key(|(id, _)| *id);
            let mut expected: Vec<(u64, MsgLoc)> =
                self.msgs.iter().map(|(id, m)| (*id, *m)).collect();
            expected.sort_by_key(|(id, _)| *id);
            assert_eq!(listed, expected, "step {step}");
            for (key, r) in &self.refs {
                let want = RefLoc {
                    home: self.home(r),
                    ..r.clone()
                };
                assert_eq!(index.get_ref(key), Some(want), "step {step}: {key:?}");
                assert_eq!(
                    index.locate(key),
                    self.msgs.get(&r.id).copied(),
                    "step {step}"
                );
                assert_eq!(index.is_inline_ref(key, r.id), r.record.is_none());
            }
            let refs: Vec<Key> = index.refs().map(|(k, _)| k).collect();
            for pair in refs.windows(2) {
                if pair[0].queue == pair[1].queue {
                    assert!(pair[0].seq < pair[1].seq, "step {step}: in sequence order");
                }
            }
            assert_eq!(refs.len(), self.refs.len(), "step {step}");
            let live = self.live();
            for (seg, stat) in &index.segs {
                let (n, bytes) = live.get(seg).copied().unwrap_or_default();
                assert_eq!(
                    (stat.live, stat.live_bytes),
                    (n, bytes),
                    "step {step}: segment {seg}"
                );
            }
            let own: usize = index.ref_records_in.values().map(HashSet::len).sum();
            assert_eq!(
                own,
                self.refs.values().filter(|r| r.record.is_some()).count(),
                "step {step}"
            );
        }
    }

    /// Rebuilds an index from a clean-shutdown snapshot of `index`, as recovery does.
    fn through_snapshot(index: &Index) -> Index {
        let marker = clean::encode(index, 1);
        let clean = CleanIndex::decode(&marker, &mut Interner::default()).expect("decodes");
        let mut again = Index::with_segments(clean.segments.into_iter().collect());
        for m in &clean.messages {
            again.add_message(m.id, m.seg, m.offset, m.len, m.refs);
        }
        for (key, loc) in clean.refs {
            again.add_ref(key, loc);
        }
        again
    }

    #[test]
    fn the_index_follows_every_change_of_a_random_walk() {
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let names: Vec<Arc<str>> = ["a", "b", "c"].iter().map(|n| Arc::from(*n)).collect();
        let mut incarnation = [1u64, 2, 3];
        let mut next_seq = [0u64; 3];
        let mut index = Index::default();
        let mut model = Model::default();
        let (mut active, mut next_id, mut most) = (1u32, 1u64, 0);
        index.segs.insert(active, SegStat::default());
        let write = |index: &mut Index, active: u32, len: u32| {
            let stat = index.segs.get_mut(&active).unwrap();
            let at = stat.bytes;
            stat.bytes += u64::from(len);
            at
        };
        let pick = |model: &Model, n: u64| -> Option<Key> {
            let mut keys: Vec<&Key> = model.refs.keys().collect();
            keys.sort_by(|a, b| (&a.queue, a.seq).cmp(&(&b.queue, b.seq)));
            (!keys.is_empty()).then(|| keys[n as usize % keys.len()].clone())
        };
        for step in 0..3000 {
            let q = next(3) as usize;
            match next(20) {
                // A message, in one queue (sometimes after transient ones took seqs).
                0..=7 => {
                    next_seq[q] += 1 + next(4) / 3 * next(600);
                    let key = Key {
                        queue: names[q].clone(),
                        incarnation: incarnation[q],
                        seq: next_seq[q],
                    };
                    let len = 50 + next(100) as u32;
                    let at = write(&mut index, active, len);
                    let id = next_id;
                    next_id += 1 + next(5) / 4;
                    index.add_message(id, active, at, len, 1);
                    let loc = RefLoc {
                        id,
                        home: active,
                        delivered: false,
                        record: None,
                    };
                    index.add_ref(key.clone(), loc.clone());
                    let m = MsgLoc {
                        seg: active,
                        offset: at as u32,
                        len,
                        refs: 1,
                    };
                    model.msgs.insert(id, m);
                    model.refs.insert(key, loc);
                }
                // Another queue of a live message (a reference record).
                8 | 9 => {
                    let ids: Vec<u64> = {
                        let mut v: Vec<u64> = model.msgs.keys().copied().collect();
                        v.sort_unstable();
                        v
                    };
                    if ids.is_empty() {
                        continue;
                    }
                    let id = ids[next(ids.len() as u64) as usize];
                    next_seq[q] += 1;
                    let key = Key {
                        queue: names[q].clone(),
                        incarnation: incarnation[q],
                        seq: next_seq[q],
                    };
                    let at = write(&mut index, active, 40);
                    index.add_message_ref(id);
                    let loc = RefLoc {
                        id,
                        home: active,
                        delivered: false,
                        record: Some((at, 40)),
                    };
                    index.add_ref(key.clone(), loc.clone());
                    model.msgs.get_mut(&id).unwrap().refs += 1;
                    model.refs.insert(key, loc);
                }
                10 | 11 => {
                    let Some(key) = pick(&model, next(1 << 20)) else {
                        continue;
                    };
                    let r = model.refs.get_mut(&key).unwrap();
                    let was = r.delivered;
                    r.delivered = true;
                    let r = r.clone();
                    let home = model.home(&r);
                    assert_eq!(
                        index.set_delivered(&key),
                        (!was).then_some(home),
                        "step {step}"
                    );
                }
                12..=15 => {
                    let Some(key) = pick(&model, next(1 << 20)) else {
                        continue;
                    };
                    let home = model.remove(&key);
                    assert_eq!(index.remove_ref(&key), home, "step {step}");
                    assert_eq!(index.remove_ref(&key), None, "gone");
                }
                // A compaction moves a message with its references.
                16 => {
                    let Some(key) = pick(&model, next(1 << 20)) else {
                        continue;
                    };
                    let id = model.refs[&key].id;
                    let mut keys: Vec<Key> = model
                        .refs
                        .iter()
                        .filter(|(_, r)| r.id == id)
                        .map(|(k, _)| k.clone())
                        .collect();
                    keys.sort_by(|a, b| (&a.queue, a.seq).cmp(&(&b.queue, b.seq)));
                    let len = model.msgs[&id].len;
                    let at = write(&mut index, active, len);
                    index.move_message(id, &keys, active, at, len);
                    let m = model.msgs.get_mut(&id).unwrap();
                    m.seg = active;
                    m.offset = at as u32;
                    for k in &keys {
                        let r = model.refs.get_mut(k).unwrap();
                        r.record = None;
                        r.home = active;
                    }
                }
                // A compaction moves a reference record.
                17 => {
                    let own: Vec<Key> = {
                        let mut v: Vec<Key> = model
                            .refs
                            .iter()
                            .filter(|(_, r)| r.record.is_some())
                            .map(|(k, _)| k.clone())
                            .collect();
                        v.sort_by(|a, b| (&a.queue, a.seq).cmp(&(&b.queue, b.seq)));
                        v
                    };
                    if own.is_empty() {
                        continue;
                    }
                    let key = own[next(own.len() as u64) as usize].clone();
                    let at = write(&mut index, active, 40);
                    let r = model.refs.get_mut(&key).unwrap();
                    r.home = active;
                    r.record = Some((at, 40));
                    index.add_ref(key, r.clone());
                }
                // The queue is deleted (and declared again: a new incarnation).
                18 => {
                    if next(12) != 0 {
                        continue;
                    }
                    index.remove_queue(&names[q]);
                    let keys: Vec<Key> = model
                        .refs
                        .keys()
                        .filter(|k| k.queue == names[q])
                        .cloned()
                        .collect();
                    for k in keys {
                        model.remove(&k);
                    }
                    incarnation[q] += 3;
                }
                // The active segment is full.
                _ => {
                    active += 1;
                    index.segs.insert(active, SegStat::default());
                }
            }
            model.check(&index, step);
            most = most.max(model.msgs.len());
            if step % 250 == 0 {
                model.check(&through_snapshot(&index), step);
            }
        }
        assert!(most > 100, "the walk built a backlog: {most}");
        for q in &names {
            index.remove_queue(q);
        }
        assert_eq!((index.message_count(), index.ref_count()), (0, 0));
        assert!(
            index.msgs.chunks.is_empty(),
            "every chunk went with its last slot"
        );
        assert!(index.queues.is_empty() && index.records.is_empty());
        assert!(
            index
                .segs
                .values()
                .all(|s| s.live == 0 && s.live_bytes == 0)
        );
    }

    #[test]
    fn a_dense_table_keeps_a_chunk_while_one_slot_is_live() {
        let mut t: Dense<MsgLoc> = Dense::default();
        let m = |refs| MsgLoc {
            seg: 1,
            offset: 0,
            len: 1,
            refs,
        };
        for n in 0..10 * CHUNK {
            assert_eq!(t.insert(n, m(1)), None);
        }
        assert_eq!(t.insert(3, m(2)), Some(m(1)), "replaced");
        assert_eq!(t.len(), 10 * CHUNK as usize);
        for n in 0..10 * CHUNK {
            if n != CHUNK + 7 {
                assert!(t.remove(n).is_some());
            }
        }
        assert_eq!(t.chunks.len(), 1, "only the straggler's chunk");
        assert_eq!(t.get(CHUNK + 7), Some(&m(1)));
        assert_eq!(t.get(CHUNK + 8), None, "vacant");
        assert_eq!(
            t.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            vec![CHUNK + 7]
        );
        assert_eq!(t.remove(CHUNK + 7), Some(m(1)));
        assert!(t.chunks.is_empty() && t.is_empty());
        assert_eq!(t.remove(CHUNK + 7), None);
    }
}
