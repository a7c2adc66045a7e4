//! Record framing, the same in every file the store writes: a 4-byte little-endian length of
//! what follows the header, a CRC32C of the sequence number and payload, an 8-byte sequence
//! number (1, 2, 3… within the file), then the payload.

/// Bytes before a record's payload.
pub(crate) const HEADER: usize = 16;
/// The largest payload a record may have: a longer length is damage.
pub(crate) const MAX_PAYLOAD: usize = 512 << 20;

/// Appends one framed record to `out`.
pub(crate) fn push(out: &mut Vec<u8>, seq: u64, payload: &[u8]) {
    let seq_bytes = seq.to_le_bytes();
    let crc = crc32c::crc32c_append(crc32c::crc32c(&seq_bytes), payload);
    // A payload over MAX_PAYLOAD is refused before it gets here (see `encode_message`).
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&seq_bytes);
    out.extend_from_slice(payload);
}

/// One record read back.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Frame<'a> {
    /// Where the record starts in the file.
    pub offset: u64,
    /// Its whole length, header included.
    pub len: u32,
    pub payload: &'a [u8],
}

/// The records of a file, up to the first damaged one.
#[derive(Debug)]
pub(crate) struct Scan<'a> {
    pub frames: Vec<Frame<'a>>,
    /// The length of the valid prefix: a file longer than this has a torn or damaged tail.
    pub valid_len: u64,
    /// The sequence number of the last valid record (0 if none).
    pub last_seq: u64,
}

/// Reads every record of `data` whose length, CRC and sequence number are right, stopping
/// at the first that is not.
pub(crate) fn scan(data: &[u8]) -> Scan<'_> {
    let mut frames = Vec::new();
    let mut at = 0usize;
    let mut last_seq = 0u64;
    while let Some(frame) = read_at(data, at) {
        let seq = seq_of(data, at);
        if seq != last_seq + 1 {
            break;
        }
        last_seq = seq;
        at += frame.len as usize;
        frames.push(frame);
    }
    Scan {
        frames,
        valid_len: at as u64,
        last_seq,
    }
}

fn seq_of(data: &[u8], at: usize) -> u64 {
    let mut seq = [0u8; 8];
    seq.copy_from_slice(&data[at + 8..at + 16]);
    u64::from_le_bytes(seq)
}

/// The record at `at`, if its header and CRC are right.
pub(crate) fn read_at(data: &[u8], at: usize) -> Option<Frame<'_>> {
    let header = data.get(at..at.checked_add(HEADER)?)?;
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    if len > MAX_PAYLOAD {
        return None;
    }
    let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    let payload = data.get(at + HEADER..at + HEADER + len)?;
    let computed = crc32c::crc32c_append(crc32c::crc32c(&header[8..16]), payload);
    (computed == crc).then_some(Frame {
        offset: at as u64,
        len: (HEADER + len) as u32,
        payload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_damaged_record_ends_the_scan() {
        let mut data = Vec::new();
        for (seq, body) in [(1, &b"one"[..]), (2, b"two"), (3, b"three")] {
            push(&mut data, seq, body);
        }
        let whole = scan(&data);
        assert_eq!(whole.frames.len(), 3);
        assert_eq!(whole.valid_len, data.len() as u64);
        let second = whole.frames[1].offset as usize;
        let mut flipped = data.clone();
        flipped[second + HEADER] ^= 1;
        let cut = scan(&flipped);
        assert_eq!(cut.frames.len(), 1);
        assert_eq!(cut.valid_len, second as u64);
        let torn = scan(&data[..data.len() - 1]);
        assert_eq!(torn.frames.len(), 2);
        let mut out_of_order = Vec::new();
        push(&mut out_of_order, 1, b"a");
        push(&mut out_of_order, 3, b"b");
        assert_eq!(scan(&out_of_order).frames.len(), 1);
    }
}
