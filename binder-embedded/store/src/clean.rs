//! The clean-shutdown marker: a snapshot of the index written after the last sync of a
//! clean close, so the next start decodes only the live message records instead of every
//! record and ack (it still reads every file and checks its records' CRCs, to check the
//! snapshot against them). It is removed at start, so a crash afterwards means a full scan.

use crate::codec::{Decoded, In, Interner, Malformed, Out};
use crate::frame;
use crate::index::{Index, RefLoc, SegStat};
use crate::layout::{self, Key};

/// Marks the snapshot's format (a marker of another format is not used: the full scan runs).
/// `IDX3` added each queue incarnation's highest position.
const FORMAT: u32 = 0x4944_5833;

/// A live message in the snapshot.
#[derive(Debug)]
pub(crate) struct CleanMessage {
    pub id: u64,
    pub seg: u32,
    pub offset: u64,
    pub len: u32,
    /// Its live references.
    pub refs: u32,
}

/// The index as a clean close left it.
#[derive(Debug)]
pub(crate) struct CleanIndex {
    pub next_id: u64,
    pub segments: Vec<(u32, SegStat)>,
    pub messages: Vec<CleanMessage>,
    /// Queue by queue, in sequence order.
    pub refs: Vec<(Key, RefLoc)>,
    /// The highest position per queue incarnation (`Index::positions`).
    pub positions: Vec<(std::sync::Arc<str>, u64, u64)>,
}

/// The marker's bytes for `index`: the segments, the live messages, then each queue
/// incarnation's name once with its references (sequence number, message id, flags, and the
/// place of a reference record of its own), then each queue incarnation's highest position.
pub(crate) fn encode(index: &Index, next_id: u64) -> Vec<u8> {
    let mut out = Out::default();
    out.u32(FORMAT);
    out.u64(next_id);
    out.u64(index.segs.len() as u64);
    for (n, s) in &index.segs {
        out.u32(*n);
        out.u64(s.bytes);
        out.u64(s.seq);
        out.u64(s.ack_seq);
    }
    out.u64(index.message_count() as u64);
    for (id, m) in index.messages() {
        out.u64(id);
        out.u32(m.seg);
        out.u32(m.offset);
        out.u32(m.len);
        out.u32(m.refs);
    }
    let queues = index.queues();
    out.u64(queues.len() as u64);
    for (queue, incarnation, count) in queues {
        out.str(&queue);
        out.u64(incarnation);
        out.u64(count as u64);
        for (key, r) in index.refs_of(&queue, incarnation) {
            out.u64(key.seq);
            out.u64(r.id);
            out.u8(u8::from(r.delivered));
            match r.record {
                None => out.u8(0),
                Some((offset, len)) => {
                    out.u8(1);
                    out.u32(r.home);
                    out.u64(offset);
                    out.u32(len);
                }
            }
        }
    }
    let positions: Vec<_> = index.positions().collect();
    out.u64(positions.len() as u64);
    for (queue, incarnation, top) in positions {
        out.str(queue);
        out.u64(incarnation);
        out.u64(top);
    }
    let mut framed = Vec::with_capacity(out.0.len() + frame::HEADER);
    frame::push(&mut framed, 1, &out.0);
    framed
}

/// A count read from the marker, bounded by the bytes left (each item takes at least one).
fn count(inp: &mut In<'_>) -> Decoded<usize> {
    let n = inp.u64()?;
    usize::try_from(n)
        .ok()
        .filter(|&n| n <= inp.0.len())
        .ok_or(Malformed("a count larger than the marker"))
}

impl CleanIndex {
    /// Reads a marker; `None` if it is damaged or of another format (then the full scan
    /// runs).
    pub fn decode(data: &[u8], names: &mut Interner) -> Option<CleanIndex> {
        let f = frame::read_at(data, 0)?;
        if f.len as usize != data.len() {
            return None;
        }
        let mut inp = In(f.payload);
        let index = Self::parse(&mut inp, names).ok()?;
        inp.0.is_empty().then_some(index)
    }

    fn parse(inp: &mut In<'_>, names: &mut Interner) -> Decoded<CleanIndex> {
        if inp.u32()? != FORMAT {
            return Err(Malformed("another marker format"));
        }
        let next_id = inp.u64()?;
        if next_id > crate::index::MAX_ID + 1 {
            return Err(Malformed("a next message id beyond the index's range"));
        }
        let n = count(inp)?;
        let mut segments = Vec::with_capacity(n);
        for _ in 0..n {
            let seg = inp.u32()?;
            segments.push((
                seg,
                SegStat {
                    bytes: inp.u64()?,
                    seq: inp.u64()?,
                    ack_seq: inp.u64()?,
                    ..SegStat::default()
                },
            ));
        }
        let n = count(inp)?;
        let mut messages = Vec::with_capacity(n);
        for _ in 0..n {
            messages.push(CleanMessage {
                id: layout::get_id(inp)?,
                seg: inp.u32()?,
                offset: u64::from(inp.u32()?),
                len: inp.u32()?,
                refs: inp.u32()?,
            });
        }
        let queues = count(inp)?;
        let mut refs = Vec::new();
        for _ in 0..queues {
            let queue = inp.shared(names)?;
            let incarnation = inp.u64()?;
            let n = count(inp)?;
            refs.reserve(n);
            for _ in 0..n {
                let seq = layout::get_seq(inp)?;
                let id = layout::get_id(inp)?;
                let delivered = inp.u8()? == 1;
                let (home, record) = match inp.u8()? {
                    0 => (0, None),
                    _ => {
                        let home = inp.u32()?;
                        (home, Some((inp.u64()?, inp.u32()?)))
                    }
                };
                refs.push((
                    Key {
                        queue: queue.clone(),
                        incarnation,
                        seq,
                    },
                    RefLoc {
                        id,
                        home,
                        delivered,
                        record,
                    },
                ));
            }
        }
        let n = count(inp)?;
        let mut positions = Vec::with_capacity(n);
        for _ in 0..n {
            positions.push((inp.shared(names)?, inp.u64()?, layout::get_seq(inp)?));
        }
        Ok(CleanIndex {
            next_id,
            segments,
            messages,
            refs,
            positions,
        })
    }
}
