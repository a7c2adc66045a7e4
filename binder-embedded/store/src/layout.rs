//! Where things are on disk, and the records of message segments and acknowledgement files.
//!
//! ```text
//! <dir>/meta.log                 durable exchanges, queues, bindings (crate::meta)
//! <dir>/clean                    written by a clean shutdown, removed at start
//! <dir>/segments/0000000001.seg  message records, append-only
//! <dir>/segments/0000000001.ack  deliveries and removals of the references homed there
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::codec::{Decoded, In, Interner, Malformed, Out};

pub(crate) const META: &str = "meta.log";
pub(crate) const META_TMP: &str = "meta.tmp";
pub(crate) const CLEAN: &str = "clean";
pub(crate) const SEGMENTS: &str = "segments";

pub(crate) fn segment_path(dir: &Path, n: u32) -> PathBuf {
    dir.join(SEGMENTS).join(format!("{n:010}.seg"))
}

pub(crate) fn ack_path(dir: &Path, n: u32) -> PathBuf {
    dir.join(SEGMENTS).join(format!("{n:010}.ack"))
}

/// The segment number and whether it is an ack file, from a file name.
pub(crate) fn parse_name(name: &str) -> Option<(u32, bool)> {
    let (stem, ext) = name.split_once('.')?;
    if stem.len() != 10 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n = stem.parse().ok()?;
    match ext {
        "seg" => Some((n, false)),
        "ack" => Some((n, true)),
        _ => None,
    }
}

/// A message's place in one durable queue: the queue, its incarnation and the message's
/// sequence number there.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    pub queue: Arc<str>,
    pub incarnation: u64,
    pub seq: u64,
}

fn put_key(out: &mut Out, k: &Key) {
    out.str(&k.queue);
    out.u64(k.incarnation);
    out.u64(k.seq);
}

pub(crate) fn get_key(inp: &mut In<'_>, names: &mut Interner) -> Decoded<Key> {
    let queue = inp.shared(names)?;
    let incarnation = inp.u64()?;
    // Recovery writes down the next incarnation above every one the files name.
    if incarnation >= crate::meta::MAX_INCARNATION {
        return Err(Malformed("a queue incarnation beyond the range"));
    }
    Ok(Key {
        queue,
        incarnation,
        seq: get_seq(inp)?,
    })
}

/// A message id: at most [`MAX_ID`](crate::index::MAX_ID), the largest the index keeps.
pub(crate) fn get_id(inp: &mut In<'_>) -> Decoded<u64> {
    let id = inp.u64()?;
    if id > crate::index::MAX_ID {
        return Err(Malformed("a message id beyond the index's range"));
    }
    Ok(id)
}

/// A queue position: below [`MAX_SEQ`](stream_engine::MAX_SEQ), the largest the engine
/// keeps (a larger one would be another message's position in the engine, and the queue's
/// next message takes the position after it).
pub(crate) fn get_seq(inp: &mut In<'_>) -> Decoded<u64> {
    let seq = inp.u64()?;
    if seq >= stream_engine::MAX_SEQ {
        return Err(Malformed("a queue position beyond the engine's range"));
    }
    Ok(seq)
}

/// A reference with its delivered flag, as a message record lists it.
#[derive(Debug, Clone)]
pub(crate) struct RefEntry {
    pub key: Key,
    pub delivered: bool,
}

/// A record of a segment.
#[derive(Debug)]
pub(crate) enum SegRecord<'a> {
    /// A message, written once, with the queues that hold it so far; `body` is the encoded
    /// `Published`.
    Message {
        id: u64,
        refs: Vec<RefEntry>,
        body: &'a [u8],
    },
    /// One more queue holds message `id` (written in a record or segment of its own).
    Ref { id: u64, entry: RefEntry },
}

pub(crate) fn encode_message(id: u64, refs: &[RefEntry], body: &[u8]) -> Vec<u8> {
    let mut out = Out(Vec::with_capacity(body.len() + 64));
    out.u8(1);
    out.u64(id);
    out.u32(u32::try_from(refs.len()).unwrap_or(u32::MAX));
    for r in refs {
        put_key(&mut out, &r.key);
        out.u8(u8::from(r.delivered));
    }
    out.0.extend_from_slice(body);
    out.0
}

pub(crate) fn encode_ref(id: u64, entry: &RefEntry) -> Vec<u8> {
    let mut out = Out::default();
    out.u8(2);
    out.u64(id);
    put_key(&mut out, &entry.key);
    out.u8(u8::from(entry.delivered));
    out.0
}

fn get_entry(inp: &mut In<'_>, names: &mut Interner) -> Decoded<RefEntry> {
    let key = get_key(inp, names)?;
    let delivered = match inp.u8()? {
        0 => false,
        1 => true,
        _ => return Err(Malformed("bad delivered flag")),
    };
    Ok(RefEntry { key, delivered })
}

pub(crate) fn decode_segment<'a>(
    payload: &'a [u8],
    names: &mut Interner,
) -> Decoded<SegRecord<'a>> {
    let mut inp = In(payload);
    match inp.u8()? {
        1 => {
            let id = get_id(&mut inp)?;
            let n = inp.u32()? as usize;
            let mut refs = Vec::with_capacity(n.min(1024));
            for _ in 0..n {
                refs.push(get_entry(&mut inp, names)?);
            }
            Ok(SegRecord::Message {
                id,
                refs,
                body: inp.0,
            })
        }
        2 => {
            let id = get_id(&mut inp)?;
            Ok(SegRecord::Ref {
                id,
                entry: get_entry(&mut inp, names)?,
            })
        }
        _ => Err(Malformed("unknown segment record")),
    }
}

/// A record of an acknowledgement file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AckKind {
    Delivered,
    Removed,
}

pub(crate) fn encode_ack(kind: AckKind, key: &Key) -> Vec<u8> {
    let mut out = Out::default();
    out.u8(match kind {
        AckKind::Delivered => 1,
        AckKind::Removed => 2,
    });
    put_key(&mut out, key);
    out.0
}

pub(crate) fn decode_ack(payload: &[u8], names: &mut Interner) -> Decoded<(AckKind, Key)> {
    let mut inp = In(payload);
    let kind = match inp.u8()? {
        1 => AckKind::Delivered,
        2 => AckKind::Removed,
        _ => return Err(Malformed("unknown ack record")),
    };
    Ok((kind, get_key(&mut inp, names)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_id_beyond_the_index_range_is_malformed() {
        let names = &mut Interner::default();
        for (id, ok) in [
            (crate::index::MAX_ID, true),
            (crate::index::MAX_ID + 1, false),
        ] {
            let message = encode_message(id, &[], b"body");
            assert_eq!(decode_segment(&message, names).is_ok(), ok, "{id}");
            let entry = RefEntry {
                key: Key {
                    queue: Arc::from("q"),
                    incarnation: 1,
                    seq: 1,
                },
                delivered: false,
            };
            let reference = encode_ref(id, &entry);
            assert_eq!(decode_segment(&reference, names).is_ok(), ok, "{id}");
        }
    }

    #[test]
    fn a_queue_position_beyond_the_engines_range_is_malformed() {
        let key = |seq: u64| Key {
            queue: Arc::from("q"),
            incarnation: 1,
            seq,
        };
        let names = &mut Interner::default();
        for (seq, ok) in [
            (stream_engine::MAX_SEQ - 1, true),
            (stream_engine::MAX_SEQ, false),
        ] {
            let mut out = Out::default();
            put_key(&mut out, &key(seq));
            let got = get_key(&mut In(&out.0), names);
            assert_eq!(got.is_ok(), ok, "{seq}");
        }
    }
}
