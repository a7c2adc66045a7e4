//! The writer's picture of what is on disk: where each live message and reference is, and
//! how much of each segment is still live (for whole-segment deletion and compaction).
//!
//! Kept lean, since it holds an entry per live message and per live reference even when the
//! broker has paged the message out: a message knows how many references it has, not which
//! (a compaction or a queue deletion finds them by scanning the references, rare operations),
//! and there is no per-queue or per-segment set of entries.

use std::collections::BTreeMap;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use crate::layout::Key;

/// A live message record.
#[derive(Debug, Clone)]
pub(crate) struct MsgLoc {
    pub seg: u32,
    pub offset: u64,
    pub len: u32,
    /// How many live references it has.
    pub refs: u32,
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
    pub segs: BTreeMap<u32, SegStat>,
    /// Live reference records (those written apart from their message) per segment, what a
    /// compaction moves besides messages; few, since only a fanout writes them.
    pub ref_records_in: HashMap<u32, HashSet<Key>>,
}

impl Index {
    /// Records a message record with `refs` live references.
    pub fn add_message(&mut self, id: u64, seg: u32, offset: u64, len: u32, refs: u32) {
        let stat = self.segs.entry(seg).or_default();
        stat.live += 1;
        stat.live_bytes += u64::from(len);
        self.msgs.insert(
            id,
            MsgLoc {
                seg,
                offset,
                len,
                refs,
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
        let gone = match self.msgs.get_mut(&loc.id) {
            Some(m) => {
                m.refs = m.refs.saturating_sub(1);
                m.refs == 0
            }
            None => false,
        };
        if gone {
            if let Some(m) = self.msgs.remove(&loc.id) {
                if let Some(stat) = self.segs.get_mut(&m.seg) {
                    stat.live -= 1;
                    stat.live_bytes -= u64::from(m.len);
                }
            }
        }
        Some(loc.home)
    }

    /// A compaction rewrote message `id`, with its live references `keys`, at `offset` of
    /// segment `seg`: its references are homed there now.
    pub fn move_message(&mut self, id: u64, keys: &[Key], seg: u32, offset: u64, len: u32) {
        let Some(old) = self.msgs.remove(&id) else {
            return;
        };
        if let Some(stat) = self.segs.get_mut(&old.seg) {
            stat.live -= 1;
            stat.live_bytes -= u64::from(old.len);
        }
        for key in keys {
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
        self.add_message(id, seg, offset, len, old.refs);
    }

    /// Every live reference of a queue (a scan of all references: queue deletion is rare).
    pub fn queue_refs(&self, queue: &str) -> Vec<Key> {
        self.refs
            .keys()
            .filter(|k| &*k.queue == queue)
            .cloned()
            .collect()
    }

    /// The live messages whose record is in segment `seg`, by id, with their live
    /// references (one scan of the messages and one of the references: for a compaction).
    pub fn messages_in(&self, seg: u32) -> Vec<(u64, Vec<Key>)> {
        let mut of: HashMap<u64, Vec<Key>> = self
            .msgs
            .iter()
            .filter(|(_, m)| m.seg == seg)
            .map(|(id, _)| (*id, Vec::new()))
            .collect();
        if of.is_empty() {
            return Vec::new();
        }
        for (key, r) in &self.refs {
            if let Some(keys) = of.get_mut(&r.id) {
                keys.push(key.clone());
            }
        }
        let mut out: Vec<(u64, Vec<Key>)> = of.into_iter().collect();
        out.sort_unstable_by_key(|(id, _)| *id);
        for (_, keys) in &mut out {
            keys.sort_by(|a, b| (&a.queue, a.seq).cmp(&(&b.queue, b.seq)));
        }
        out
    }

    /// Every live message's references, by message id (for the clean-shutdown snapshot).
    pub fn keys_by_message(&self) -> HashMap<u64, Vec<Key>> {
        let mut of: HashMap<u64, Vec<Key>> = HashMap::default();
        of.reserve(self.msgs.len());
        for (key, r) in &self.refs {
            of.entry(r.id).or_default().push(key.clone());
        }
        of
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
