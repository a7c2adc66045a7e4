//! A value on cache lines of its own. Values written from different threads (a binding's
//! consumer side and an output's sender) must not share a line, nor share one with whatever
//! the allocator puts beside them, often a message block another thread is writing: every
//! update would then fight that thread for the line.

/// Two cache lines (the spatial prefetcher pulls lines in pairs), so nothing else lives
/// beside the value.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Padded<T>(pub(crate) T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;

    use super::*;

    #[test]
    fn each_value_has_its_cache_lines_to_itself() {
        assert_eq!(std::mem::align_of::<Padded<AtomicU64>>(), 128);
        assert_eq!(std::mem::size_of::<Padded<AtomicU64>>(), 128);
        assert_eq!(std::mem::size_of::<Padded<[AtomicU64; 17]>>(), 256);
    }
}
