//! Well-framed garbage: random method, header and body frames (payloads starting with real
//! class and method ids, so the decoder and the channel state machine are reached) on many
//! connections. The server answers or closes each, never panics, and keeps serving.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;

/// A small deterministic generator (xorshift), so a failure replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Class and method ids a client may send, and a few it may not.
const METHODS: &[(u16, u16)] = &[
    (10, 50),
    (10, 51),
    (10, 70),
    (10, 10),
    (20, 10),
    (20, 20),
    (20, 40),
    (20, 41),
    (30, 10),
    (40, 10),
    (40, 20),
    (40, 30),
    (40, 40),
    (50, 10),
    (50, 20),
    (50, 30),
    (50, 40),
    (50, 50),
    (60, 10),
    (60, 20),
    (60, 30),
    (60, 40),
    (60, 70),
    (60, 80),
    (60, 90),
    (60, 100),
    (60, 110),
    (60, 120),
    (85, 10),
    (90, 10),
    (90, 20),
    (90, 30),
    (99, 1),
];

fn frame(rng: &mut Rng) -> Vec<u8> {
    let kind = [1u8, 1, 1, 2, 3, 8][rng.below(6) as usize];
    let channel = rng.below(3) as u16;
    let mut payload = Vec::new();
    match kind {
        1 => {
            let (c, m) = METHODS[rng.below(METHODS.len() as u64) as usize];
            payload.extend_from_slice(&c.to_be_bytes());
            payload.extend_from_slice(&m.to_be_bytes());
        }
        2 => payload.extend_from_slice(&[0, 60, 0, 0]),
        _ => {}
    }
    for _ in 0..rng.below(40) {
        // Mostly small values: lengths and flags that parse some of the way.
        payload.push(if rng.below(3) == 0 {
            rng.next() as u8
        } else {
            rng.below(4) as u8
        });
    }
    let mut out = vec![kind];
    out.extend_from_slice(&channel.to_be_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(&payload);
    out.push(0xCE);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_frames_never_panic_the_server() {
    let panics = Arc::new(AtomicUsize::new(0));
    let seen = panics.clone();
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        seen.fetch_add(1, Ordering::SeqCst);
        previous(info);
    }));
    let server = server(config()).await;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for _ in 0..120 {
        let mut raw = Raw::connect(&server).await;
        raw.handshake(4096, 8, 0).await;
        if rng.below(2) == 0 {
            raw.open_channel(1).await;
        }
        let mut bytes = Vec::new();
        for _ in 0..1 + rng.below(12) {
            bytes.extend(frame(&mut rng));
        }
        // The server may close before reading it all.
        let _ = tokio::io::AsyncWriteExt::write_all(&mut raw.socket, &bytes).await;
        // Whatever it answers, it answers with well-formed frames (Raw::next checks) and
        // either goes on or closes.
        while let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(40), raw.next()).await {}
    }
    still_serving(&server).await;
    server.shutdown().await;
    assert_eq!(panics.load(Ordering::SeqCst), 0, "the server panicked");
}
