//! Spring Cloud Stream's naming conventions for exchanges, queues and routing keys.

use crate::properties::RabbitCommonProperties;

/// The dead-letter exchange: `deadLetterExchange`, else `<prefix>DLX`.
pub fn dlx_name(common: &RabbitCommonProperties) -> String {
    common
        .dead_letter_exchange
        .clone()
        .unwrap_or_else(|| format!("{}DLX", common.prefix))
}

/// A partitioned producer's routing key: `<destination>-<partition>`.
pub fn routing_key_for_partition(destination: &str, partition: u32) -> String {
    format!("{destination}-{partition}")
}

/// A fresh unique suffix for an anonymous queue: a random 128-bit id in unpadded URL-safe
/// base64 (22 characters), as Spring AMQP's `Base64UrlNamingStrategy` writes it.
pub fn anonymous_suffix() -> String {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{SystemTime, UNIX_EPOCH};

    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut bytes = [0u8; 16];
    for (i, chunk) in bytes.chunks_mut(8).enumerate() {
        // RandomState is seeded from the OS per instance; mixing in time and a counter keeps
        // ids unique even if two states were to collide.
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
    base64_url(&bytes)
}

fn base64_url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, b)| acc | (u32::from(*b) << (16 - 8 * i)));
        let chars = chunk.len() + 1;
        for i in 0..chars {
            out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_url_matches_known_vectors() {
        assert_eq!(base64_url(b""), "");
        assert_eq!(base64_url(b"f"), "Zg");
        assert_eq!(base64_url(b"fo"), "Zm8");
        assert_eq!(base64_url(b"foo"), "Zm9v");
        assert_eq!(base64_url(&[0xfb, 0xff]), "-_8");
    }

    #[test]
    fn anonymous_suffixes_are_22_chars_and_distinct() {
        let a = anonymous_suffix();
        let b = anonymous_suffix();
        assert_eq!(a.len(), 22);
        assert_ne!(a, b);
        assert!(
            a.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        );
    }
}
