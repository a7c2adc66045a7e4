//! The clean-shutdown marker: a snapshot of the index written after the last sync of a
//! clean close, so the next start reads only the live message records instead of scanning
//! every record and ack file. It is removed at start, so a crash afterwards means a full
//! scan.

use crate::codec::{Decoded, In, Interner, Out};
use crate::frame;
use crate::index::{Index, RefLoc, SegStat};
use crate::layout::{Key, get_key};

/// A live message in the snapshot.
#[derive(Debug)]
pub(crate) struct CleanMessage {
    pub id: u64,
    pub seg: u32,
    pub offset: u64,
    pub len: u32,
    pub keys: Vec<Key>,
}

/// The index as a clean close left it.
#[derive(Debug)]
pub(crate) struct CleanIndex {
    pub next_id: u64,
    pub segments: Vec<(u32, SegStat)>,
    pub messages: Vec<CleanMessage>,
    pub refs: Vec<(Key, RefLoc)>,
}

fn put_key(out: &mut Out, k: &Key) {
    out.str(&k.queue);
    out.u64(k.incarnation);
    out.u64(k.seq);
}

fn len32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The marker's bytes for `index`.
pub(crate) fn encode(index: &Index, next_id: u64) -> Vec<u8> {
    let mut out = Out::default();
    out.u64(next_id);
    out.u32(len32(index.segs.len()));
    for (n, s) in &index.segs {
        out.u32(*n);
        out.u64(s.bytes);
        out.u64(s.seq);
        out.u64(s.ack_seq);
    }
    out.u32(len32(index.msgs.len()));
    let keys = index.keys_by_message();
    for (id, m) in &index.msgs {
        out.u64(*id);
        out.u32(m.seg);
        out.u64(m.offset);
        out.u32(m.len);
        let of = keys.get(id).map_or(&[][..], Vec::as_slice);
        out.u32(len32(of.len()));
        for k in of {
            put_key(&mut out, k);
        }
    }
    out.u32(len32(index.refs.len()));
    for (k, r) in &index.refs {
        put_key(&mut out, k);
        out.u64(r.id);
        out.u32(r.home);
        out.u8(u8::from(r.delivered));
        match r.record {
            None => out.u8(0),
            Some((offset, len)) => {
                out.u8(1);
                out.u64(offset);
                out.u32(len);
            }
        }
    }
    let mut framed = Vec::with_capacity(out.0.len() + frame::HEADER);
    frame::push(&mut framed, 1, &out.0);
    framed
}

impl CleanIndex {
    /// Reads a marker; `None` if it is damaged (then the full scan runs).
    pub fn decode(data: &[u8], names: &mut Interner) -> Option<CleanIndex> {
        let f = frame::read_at(data, 0)?;
        if f.len as usize != data.len() {
            return None;
        }
        Self::parse(&mut In(f.payload), names).ok()
    }

    fn parse(inp: &mut In<'_>, names: &mut Interner) -> Decoded<CleanIndex> {
        let next_id = inp.u64()?;
        let n = inp.u32()? as usize;
        let mut segments = Vec::with_capacity(n.min(inp.0.len()));
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
        let n = inp.u32()? as usize;
        let mut messages = Vec::with_capacity(n.min(inp.0.len()));
        for _ in 0..n {
            let id = inp.u64()?;
            let seg = inp.u32()?;
            let offset = inp.u64()?;
            let len = inp.u32()?;
            let k = inp.u32()? as usize;
            let mut keys = Vec::with_capacity(k.min(inp.0.len()));
            for _ in 0..k {
                keys.push(get_key(inp, names)?);
            }
            messages.push(CleanMessage {
                id,
                seg,
                offset,
                len,
                keys,
            });
        }
        let n = inp.u32()? as usize;
        let mut refs = Vec::with_capacity(n.min(inp.0.len()));
        for _ in 0..n {
            let key = get_key(inp, names)?;
            let id = inp.u64()?;
            let home = inp.u32()?;
            let delivered = inp.u8()? == 1;
            let record = match inp.u8()? {
                0 => None,
                _ => Some((inp.u64()?, inp.u32()?)),
            };
            refs.push((
                key,
                RefLoc {
                    id,
                    home,
                    delivered,
                    record,
                },
            ));
        }
        Ok(CleanIndex {
            next_id,
            segments,
            messages,
            refs,
        })
    }
}
