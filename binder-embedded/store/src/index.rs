//! The writer's picture of what is on disk: where each live message and reference is, and
//! how much of each segment is still live (for whole-segment deletion and compaction).

use std::collections::BTreeMap;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::sync::Arc;

use crate::layout::Key;

/// A live message record.
#[derive(Debug, Clone)]
pub(crate) struct MsgLoc {
    pub seg: u32,
    pub offset: u64,
    pub len: u32,
    /// The live references to it.
    pub keys: Vec<Key>,
}

/// A live reference: a queue holds message `id`.
#[derive(Debug, Clone)]
pub(crate) struct RefLoc {
    pub id: u64,
    /// The segment whose record names this reference (its acks go to that segment's ack
    /// file).
    pub home: u32,
    pub delivered: bool,
    /// Where its own reference record is, when it is not part of the message record.
    pub record: Option<(u64, u32)>,
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

/// The live contents of the segments.
#[derive(Debug, Default)]
pub(crate) struct Index {
    pub msgs: HashMap<u64, MsgLoc>,
    pub refs: HashMap<Key, RefLoc>,
    /// The live references of each queue (by name; only its current incarnation has any).
    pub by_queue: HashMap<Arc<str>, HashSet<Key>>,
    pub segs: BTreeMap<u32, SegStat>,
    /// Live message ids and reference records per segment (what a compaction moves).
    pub msgs_in: HashMap<u32, HashSet<u64>>,
    pub ref_records_in: HashMap<u32, HashSet<Key>>,
}

impl Index {
    /// Records a message record holding references `keys`.
    pub fn add_message(&mut self, id: u64, seg: u32, offset: u64, len: u32, keys: Vec<Key>) {
        let stat = self.segs.entry(seg).or_default();
        stat.live += 1;
        stat.live_bytes += u64::from(len);
        self.msgs_in.entry(seg).or_default().insert(id);
        self.msgs.insert(
            id,
            MsgLoc {
                seg,
                offset,
                len,
                keys,
            },
        );
    }

    /// Records a reference (its message must be known already).
    pub fn add_ref(&mut self, key: Key, loc: RefLoc) {
        if let Some((_, len)) = loc.record {
            let stat = self.segs.entry(loc.home).or_default();
            stat.live += 1;
            stat.live_bytes += u64::from(len);
            self.ref_records_in
                .entry(loc.home)
                .or_default()
                .insert(key.clone());
        }
        self.by_queue
            .entry(key.queue.clone())
            .or_default()
            .insert(key.clone());
        if let Some(old) = self.refs.insert(key.clone(), loc) {
            // Replaced (a compaction moved it): the old record is no longer live.
            self.drop_record(&key, &old);
        }
    }

    fn drop_record(&mut self, key: &Key, loc: &RefLoc) {
        if let Some((_, len)) = loc.record {
            if let Some(stat) = self.segs.get_mut(&loc.home) {
                stat.live -= 1;
                stat.live_bytes -= u64::from(len);
            }
            if let Some(set) = self.ref_records_in.get_mut(&loc.home) {
                set.remove(key);
            }
        }
    }

    /// Removes a reference; returns the segment it was homed in. The message goes with its
    /// last reference.
    pub fn remove_ref(&mut self, key: &Key) -> Option<u32> {
        let loc = self.refs.remove(key)?;
        self.drop_record(key, &loc);
        if let Some(set) = self.by_queue.get_mut(&key.queue) {
            set.remove(key);
            if set.is_empty() {
                self.by_queue.remove(&key.queue);
            }
        }
        let gone = match self.msgs.get_mut(&loc.id) {
            Some(m) => {
                m.keys.retain(|k| k != key);
                m.keys.is_empty()
            }
            None => false,
        };
        if gone {
            if let Some(m) = self.msgs.remove(&loc.id) {
                if let Some(stat) = self.segs.get_mut(&m.seg) {
                    stat.live -= 1;
                    stat.live_bytes -= u64::from(m.len);
                }
                if let Some(set) = self.msgs_in.get_mut(&m.seg) {
                    set.remove(&loc.id);
                }
            }
        }
        Some(loc.home)
    }

    /// A compaction rewrote message `id`, with every live reference to it, at `offset` of
    /// segment `seg`: its references are homed there now.
    pub fn move_message(&mut self, id: u64, seg: u32, offset: u64, len: u32) {
        let Some(old) = self.msgs.remove(&id) else {
            return;
        };
        if let Some(stat) = self.segs.get_mut(&old.seg) {
            stat.live -= 1;
            stat.live_bytes -= u64::from(old.len);
        }
        if let Some(set) = self.msgs_in.get_mut(&old.seg) {
            set.remove(&id);
        }
        for key in &old.keys {
            if let Some(loc) = self.refs.get(key).cloned() {
                self.drop_record(key, &loc);
                self.refs.insert(
                    key.clone(),
                    RefLoc {
                        home: seg,
                        record: None,
                        ..loc
                    },
                );
            }
        }
        self.add_message(id, seg, offset, len, old.keys);
    }

    /// Every live reference of a queue.
    pub fn queue_refs(&self, queue: &str) -> Vec<Key> {
        self.by_queue
            .get(queue)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Forgets a segment (deleted).
    pub fn forget_segment(&mut self, seg: u32) {
        self.segs.remove(&seg);
        self.msgs_in.remove(&seg);
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
