//! Arbitrary bytes into the server's frame decoder and payload decoders, with small
//! `frame_max` values. The first input byte picks the `frame_max` and the chunk size the
//! bytes arrive in.
//!
//! Checked: no panic; a frame error is 501 and a payload error one of the codes the
//! connection closes with for it (502, 503); every frame taken respects `frame_max` and
//! consumes exactly its octets; the bytes decode to the same frames and the same error
//! whether they arrive at once or in chunks (the decoder is cancel-safe).

#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use stream_broker::fuzzing::{
    COMMAND_INVALID, FRAME_BODY, FRAME_ERROR, FRAME_HEADER, FRAME_HEARTBEAT, FRAME_METHOD,
    FRAME_OVERHEAD, FrameError, RawFrame, SYNTAX_ERROR, decode, decode_payload,
};

/// `frame_max` values: AMQP's minimum, off-by-one around it, tiny ones and the default.
const FRAME_MAX: [usize; 6] = [4096, 4095, 4104, 16, 0, 131_072];

/// What a sequence of bytes decodes to.
#[derive(Debug, PartialEq)]
struct Outcome {
    frames: Vec<RawFrame>,
    payload_codes: Vec<Result<(), u16>>,
    error: Option<FrameError>,
}

/// Takes every whole frame off `buf`; `Err` ends decoding as it ends the connection.
fn drain(buf: &mut BytesMut, frame_max: usize, out: &mut Outcome) -> bool {
    loop {
        let before = buf.len();
        match decode(buf, frame_max) {
            Ok(Some(frame)) => {
                assert!(matches!(
                    frame.kind,
                    FRAME_METHOD | FRAME_HEADER | FRAME_BODY | FRAME_HEARTBEAT
                ));
                assert!(frame.payload.len() <= frame_max, "payload over frame_max");
                assert_eq!(before - buf.len(), frame.payload.len() + FRAME_OVERHEAD);
                let code = decode_payload(&frame);
                if let Err(code) = code {
                    assert!(
                        code == SYNTAX_ERROR || code == COMMAND_INVALID,
                        "unexpected close code {code} for a payload"
                    );
                }
                out.frames.push(frame);
                out.payload_codes.push(code);
            }
            Ok(None) => {
                assert_eq!(buf.len(), before, "an incomplete frame consumed input");
                if buf.len() >= 7 {
                    let size = u32::from_be_bytes([buf[3], buf[4], buf[5], buf[6]]) as usize;
                    assert!(buf.len() < size + FRAME_OVERHEAD, "a whole frame was left");
                }
                return true;
            }
            Err(e) => {
                // Every framing error is a 501 connection close (see `Conn::run`).
                let code = FRAME_ERROR;
                assert_eq!(code, 501);
                match &e {
                    FrameError::TooLarge { size, max } => assert!(size - FRAME_OVERHEAD > *max),
                    FrameError::BadEnd(end) => assert_ne!(*end, 0xCE),
                    FrameError::BadType(kind) => assert!(!matches!(*kind, 1 | 2 | 3 | 8)),
                }
                out.error = Some(e);
                return false;
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&select, bytes)) = data.split_first() else {
        return;
    };
    let frame_max = FRAME_MAX[usize::from(select) % FRAME_MAX.len()];
    let chunk = usize::from(select / 8) + 1;

    let mut whole = Outcome {
        frames: Vec::new(),
        payload_codes: Vec::new(),
        error: None,
    };
    drain(&mut BytesMut::from(bytes), frame_max, &mut whole);

    let mut chunked = Outcome {
        frames: Vec::new(),
        payload_codes: Vec::new(),
        error: None,
    };
    let mut buf = BytesMut::new();
    for part in bytes.chunks(chunk) {
        buf.extend_from_slice(part);
        if !drain(&mut buf, frame_max, &mut chunked) {
            break;
        }
    }
    assert_eq!(whole, chunked, "chunked input decoded differently");
});
