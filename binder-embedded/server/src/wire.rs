//! Frames on the socket: decoding with the negotiated size limit (and the checks RabbitMQ
//! makes: frame type, frame-end octet), encoding methods and content with bodies split on
//! `frame_max`.

use amq_protocol::frame::{AMQPContentHeader, AMQPFrame, WriteContext, gen_frame};
use amq_protocol::protocol::{AMQPClass, BasicProperties};
use bytes::{Buf, BufMut, Bytes, BytesMut};

/// The protocol header we speak (and send back to a client that offers another).
pub const PROTOCOL_HEADER: &[u8; 8] = b"AMQP\x00\x00\x09\x01";

/// Frame type octets.
pub const FRAME_METHOD: u8 = 1;
/// Content header frame.
pub const FRAME_HEADER: u8 = 2;
/// Content body frame.
pub const FRAME_BODY: u8 = 3;
/// Heartbeat frame.
pub const FRAME_HEARTBEAT: u8 = 8;
/// The frame-end octet.
pub const FRAME_END: u8 = 0xCE;
/// Frame header (type, channel, size) plus frame end.
pub const FRAME_OVERHEAD: usize = 8;

/// A frame as read: its type, channel and payload, not yet decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawFrame {
    /// The frame type octet.
    pub kind: u8,
    /// The channel.
    pub channel: u16,
    /// The payload.
    pub payload: Bytes,
}

/// A frame that breaks the framing rules: 501 FRAME_ERROR, a connection error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Larger than the negotiated `frame_max`.
    #[error("frame of {size} octets is too large for the negotiated frame_max {max}")]
    TooLarge {
        /// The payload size plus overhead.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// The frame-end octet is not 0xCE.
    #[error("frame end octet 0x{0:02x} is not 0xce")]
    BadEnd(u8),
    /// An unknown frame type.
    #[error("unknown frame type {0}")]
    BadType(u8),
}

/// Takes one frame off the front of `buf`, if a whole one is there. `frame_max` counts the
/// whole frame (header, payload and frame end), as AMQP does; like RabbitMQ the decoder
/// forgives clients that count only the payload (a typical off-by-8): it refuses a payload
/// larger than `frame_max` itself.
pub fn decode(buf: &mut BytesMut, frame_max: usize) -> Result<Option<RawFrame>, FrameError> {
    if buf.len() < 7 {
        return Ok(None);
    }
    let kind = buf[0];
    if !matches!(
        kind,
        FRAME_METHOD | FRAME_HEADER | FRAME_BODY | FRAME_HEARTBEAT
    ) {
        return Err(FrameError::BadType(kind));
    }
    let channel = u16::from_be_bytes([buf[1], buf[2]]);
    let size = u32::from_be_bytes([buf[3], buf[4], buf[5], buf[6]]) as usize;
    let total = size.saturating_add(FRAME_OVERHEAD);
    if size > frame_max {
        return Err(FrameError::TooLarge {
            size: total,
            max: frame_max,
        });
    }
    if buf.len() < total {
        buf.reserve(total - buf.len());
        return Ok(None);
    }
    let end = buf[7 + size];
    if end != FRAME_END {
        return Err(FrameError::BadEnd(end));
    }
    buf.advance(7);
    let payload = buf.split_to(size).freeze();
    buf.advance(1);
    Ok(Some(RawFrame {
        kind,
        channel,
        payload,
    }))
}

/// Appends encoded frames to an output buffer.
#[derive(Debug, Default)]
pub struct Encoder {
    buf: Vec<u8>,
}

impl Encoder {
    /// An empty buffer.
    pub fn new() -> Self {
        Encoder { buf: Vec::new() }
    }

    /// Bytes encoded so far.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether nothing is encoded.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Takes what is encoded.
    pub fn take(&mut self) -> Bytes {
        Bytes::from(std::mem::take(&mut self.buf))
    }

    fn frame(&mut self, frame: &AMQPFrame) {
        let buf = std::mem::take(&mut self.buf);
        let mark = buf.len();
        match gen_frame(frame)(WriteContext::from(buf)) {
            Ok(ctx) => self.buf = ctx.into_inner().0,
            Err(_) => {
                // A Vec grows as needed: generation fails only on a value the codec cannot
                // represent, which the server never builds. Nothing half-written stays.
                tracing::error!("could not encode {frame}");
                self.buf.truncate(mark);
            }
        }
    }

    /// A method frame.
    pub fn method(&mut self, channel: u16, method: AMQPClass) {
        self.frame(&AMQPFrame::Method(channel, method));
    }

    /// A heartbeat frame.
    pub fn heartbeat(&mut self) {
        self.buf
            .extend_from_slice(&[FRAME_HEARTBEAT, 0, 0, 0, 0, 0, 0, FRAME_END]);
    }

    /// A content header and the body frames, each body frame at most `frame_max` bytes.
    pub fn content(
        &mut self,
        channel: u16,
        properties: BasicProperties,
        body: &[u8],
        frame_max: usize,
    ) {
        self.frame(&AMQPFrame::Header(
            channel,
            AMQPContentHeader {
                class_id: 60,
                body_size: body.len() as u64,
                properties,
            },
        ));
        let chunk = frame_max.saturating_sub(FRAME_OVERHEAD).max(1);
        for part in body.chunks(chunk) {
            self.buf.reserve(part.len() + FRAME_OVERHEAD);
            self.buf.put_u8(FRAME_BODY);
            self.buf.put_u16(channel);
            self.buf.put_u32(part.len() as u32);
            self.buf.extend_from_slice(part);
            self.buf.put_u8(FRAME_END);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use amq_protocol::protocol::channel;

    fn encoded(frame: &AMQPFrame) -> BytesMut {
        let ctx = gen_frame(frame)(WriteContext::from(Vec::new())).unwrap();
        BytesMut::from(&ctx.into_inner().0[..])
    }

    #[test]
    fn decodes_whole_frames_and_waits_for_partial_ones() {
        let frame = AMQPFrame::Method(
            3,
            AMQPClass::Channel(channel::AMQPMethod::Open(channel::Open {})),
        );
        let full = encoded(&frame);
        let mut partial = BytesMut::from(&full[..full.len() - 1]);
        assert_eq!(decode(&mut partial, 4096), Ok(None));
        let mut buf = full.clone();
        buf.extend_from_slice(&full);
        let one = decode(&mut buf, 4096).unwrap().unwrap();
        assert_eq!((one.kind, one.channel), (FRAME_METHOD, 3));
        assert!(decode(&mut buf, 4096).unwrap().is_some());
        assert!(buf.is_empty());
    }

    #[test]
    fn refuses_oversized_bad_end_and_bad_type() {
        let mut big = BytesMut::from(&[1u8, 0, 1, 0, 0, 0x10, 1][..]);
        assert_eq!(
            decode(&mut big, 4096),
            Err(FrameError::TooLarge {
                size: 4097 + 8,
                max: 4096
            })
        );
        // A payload of exactly frame_max is forgiven, as RabbitMQ forgives it.
        let mut fudge = BytesMut::from(&[3u8, 0, 1, 0, 0, 0x10, 0][..]);
        assert_eq!(decode(&mut fudge, 4096), Ok(None));
        let mut bad_end = BytesMut::from(&[8u8, 0, 0, 0, 0, 0, 0, 0xCD][..]);
        assert_eq!(decode(&mut bad_end, 4096), Err(FrameError::BadEnd(0xCD)));
        let mut bad_type = BytesMut::from(&[9u8, 0, 0, 0, 0, 0, 0, 0xCE][..]);
        assert_eq!(decode(&mut bad_type, 4096), Err(FrameError::BadType(9)));
    }

    #[test]
    fn bodies_split_on_frame_max() {
        let mut e = Encoder::new();
        let body = vec![7u8; 10_000];
        e.content(1, BasicProperties::default(), &body, 4096);
        let mut buf = BytesMut::from(&e.take()[..]);
        let header = decode(&mut buf, 4096).unwrap().unwrap();
        assert_eq!(header.kind, FRAME_HEADER);
        let mut sizes = vec![];
        while let Some(f) = decode(&mut buf, 4096).unwrap() {
            assert_eq!(f.kind, FRAME_BODY);
            sizes.push(f.payload.len());
        }
        assert_eq!(sizes, vec![4088, 4088, 1824]);
    }
}
