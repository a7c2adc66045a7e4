//! Names the broker makes up: server-named queues (`amq.gen-…`) and consumer tags
//! (`amq.ctag-…`).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// `prefix` followed by a fresh random 128-bit id in unpadded URL-safe base64 (22
/// characters), as RabbitMQ names server-named queues.
pub(crate) fn server_name(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut bytes = [0u8; 16];
    for (i, chunk) in bytes.chunks_mut(8).enumerate() {
        // RandomState is seeded from the OS per instance; the counter and the clock keep ids
        // unique even if two states were to collide.
        let mut h = RandomState::new().build_hasher();
        h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        h.write_u128(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default(),
        );
        h.write_usize(i);
        chunk.copy_from_slice(&h.finish().to_be_bytes());
    }
    let mut out = String::with_capacity(prefix.len() + 22);
    out.push_str(prefix);
    base64_url(&bytes, &mut out);
    out
}

fn base64_url(bytes: &[u8], out: &mut String) {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        let chars = chunk.len() + 1;
        for i in 0..chars {
            out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_prefixed_unique_url_safe_and_22_characters_long() {
        let a = server_name("amq.gen-");
        let b = server_name("amq.gen-");
        assert_ne!(a, b);
        let id = a.strip_prefix("amq.gen-").unwrap();
        assert_eq!(id.len(), 22);
        assert!(
            id.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
        );
    }

    #[test]
    fn base64_matches_the_rfc_4648_url_alphabet() {
        let mut s = String::new();
        base64_url(b"\xfb\xff\x00", &mut s);
        assert_eq!(s, "-_8A");
        s.clear();
        base64_url(b"f", &mut s);
        assert_eq!(s, "Zg");
    }
}
