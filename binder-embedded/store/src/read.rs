//! Reading paged messages back: the broker keeps only a stub of a paged message and asks for
//! its body when it delivers it ([`MessageStore::read`](stream_engine::MessageStore::read)).
//!
//! The location comes from the writer's index, borrowed between batches
//! ([`Picture`](crate::writer::Picture)): the writer lends it back only once every record it
//! refers to is in the files (or, once the writer has failed, in the unwritten tail it lends
//! along, [`Unwritten`]), and takes it away while it changes it (appends, compaction, segment
//! deletion), so a location found under the lock points at bytes that are there and are the
//! message's. The bytes are read while the lock is held (one `pread` per run of nearby
//! records), so a segment cannot be deleted between finding and reading. Each record's CRC
//! is checked before its message is decoded.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use stream_engine::{Published, StoreError};

use crate::codec::{In, Interner, get_stored};
use crate::frame;
use crate::fs::FileSystem;
use crate::index::Index;
use crate::layout::{self, Key, SegRecord};
use crate::meta::Meta;
use crate::writer::{Shared, Unwritten};

/// Records closer than this are read with one `pread`.
const GAP: u64 = 64 * 1024;
/// At most this much is read with one `pread`.
const SPAN: u64 = 4 * 1024 * 1024;

fn corrupt(detail: String) -> StoreError {
    StoreError::Corrupt { detail }
}

/// Where each asked message's record is, or the first one the index does not have.
fn locate(
    index: &Index,
    meta: &Meta,
    queue: &str,
    seqs: &[u64],
) -> Result<Vec<(u32, u64, u32)>, u64> {
    let Some(incarnation) = meta.incarnation(queue) else {
        return Err(seqs.first().copied().unwrap_or(0));
    };
    let name: Arc<str> = Arc::from(queue);
    seqs.iter()
        .map(|&seq| {
            let key = Key {
                queue: name.clone(),
                incarnation,
                seq,
            };
            let m = index.locate(&key).ok_or(seq)?;
            Ok((m.seg, u64::from(m.offset), m.len))
        })
        .collect()
}

/// Reads back messages `seqs` of `queue`, in that order.
pub(crate) fn read(
    fs: &dyn FileSystem,
    dir: &Path,
    shared: &Shared,
    queue: &str,
    seqs: &[u64],
) -> Result<Vec<Published>, StoreError> {
    // Every command sent before this read (the message's own among them) must have been
    // handled by the writer before a missing location means a missing message, and the
    // latest queue deletion before any location is believed (see `Shared::deleted_at`).
    let deleted = shared.deleted_at.load(Ordering::Acquire);
    let target = shared.sent.load(Ordering::Acquire);
    let mut picture = shared.picture.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        if let (Some(index), Some(meta), true) =
            (&picture.index, &picture.meta, picture.handled >= deleted)
        {
            match locate(index, meta, queue, seqs) {
                Ok(locs) => {
                    return read_records(fs, dir, queue, &locs, picture.unwritten.as_ref());
                }
                Err(seq) if picture.handled >= target => {
                    return Err(StoreError::Failed {
                        detail: format!("message {seq} of queue '{queue}' is not in the store"),
                    });
                }
                Err(_) => {}
            }
        }
        picture = shared
            .picture_back
            .wait(picture)
            .unwrap_or_else(|p| p.into_inner());
    }
}

fn read_records(
    fs: &dyn FileSystem,
    dir: &Path,
    queue: &str,
    locs: &[(u32, u64, u32)],
    unwritten: Option<&Unwritten>,
) -> Result<Vec<Published>, StoreError> {
    let in_memory = |seg: u32, offset: u64| unwritten.is_some_and(|u| u.holds(seg, offset));
    let mut order: Vec<usize> = (0..locs.len()).collect();
    order.sort_by_key(|&i| (locs[i].0, locs[i].1));
    let mut out: Vec<Option<Published>> = vec![None; locs.len()];
    let names = &mut Interner::default();
    let mut at = 0;
    while at < order.len() {
        // A run of records of one segment, near each other.
        let (seg, start, first_len) = locs[order[at]];
        let mut end = start + u64::from(first_len);
        let mut run_end = at + 1;
        while run_end < order.len() {
            let (s, off, len) = locs[order[run_end]];
            let next_end = (off + u64::from(len)).max(end);
            if s != seg
                || off > end + GAP
                || next_end - start > SPAN
                || in_memory(s, off) != in_memory(seg, start)
            {
                break;
            }
            end = next_end;
            run_end += 1;
        }
        let data = match unwritten.filter(|u| u.holds(seg, start)) {
            Some(u) => {
                let at = (start - u.from) as usize;
                u.bytes
                    .get(at..at + (end - start) as usize)
                    .ok_or_else(|| {
                        corrupt(format!(
                            "the record at offset {start} of segment {seg} (queue '{queue}') is past what the failed store kept in memory"
                        ))
                    })?
                    .to_vec()
            }
            None => fs.read_at(
                &layout::segment_path(dir, seg),
                start,
                (end - start) as usize,
            )?,
        };
        for &i in &order[at..run_end] {
            let (_, off, _) = locs[i];
            let frame = frame::read_at(&data, (off - start) as usize).ok_or_else(|| {
                corrupt(format!(
                    "the record at offset {off} of segment {seg} (queue '{queue}') has a wrong length or checksum"
                ))
            })?;
            let body = match layout::decode_segment(frame.payload, names) {
                Ok(SegRecord::Message { body, .. }) => body,
                Ok(SegRecord::Ref { .. }) => {
                    return Err(corrupt(format!(
                        "the record at offset {off} of segment {seg} is not a message"
                    )));
                }
                Err(e) => return Err(corrupt(format!("segment {seg} offset {off}: {e}"))),
            };
            let published = get_stored(&mut In(body), names)
                .map_err(|e| corrupt(format!("segment {seg} offset {off}: {e}")))?;
            out[i] = Some(published);
        }
        at = run_end;
    }
    out.into_iter()
        .map(|p| p.ok_or_else(|| corrupt("a record was not read".into())))
        .collect()
}
