//! A counting global allocator: the live heap bytes of the process, counted only while
//! [`Counting::start`] has switched counting on (so that the other scenarios pay one relaxed
//! load per allocation, not a contended counter).

#[cfg(not(feature = "mimalloc"))]
use std::alloc::System;
use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};

/// The allocator underneath: the system's, or mimalloc with `--features mimalloc`.
#[cfg(not(feature = "mimalloc"))]
const INNER: System = System;
#[cfg(feature = "mimalloc")]
const INNER: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The allocator underneath, as the benchmark's header names it.
pub const NAME: &str = if cfg!(feature = "mimalloc") {
    "mimalloc"
} else {
    "the system allocator"
};

/// The allocator the binary runs on: [`INNER`], plus the counter.
#[derive(Debug)]
pub struct CountingAlloc;

static ON: AtomicBool = AtomicBool::new(false);
static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded unchanged to `INNER`; the counter only adds bookkeeping.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if ON.load(Ordering::Relaxed) {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract is `GlobalAlloc::alloc`'s.
        unsafe { INNER.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if ON.load(Ordering::Relaxed) {
            LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract is `GlobalAlloc::dealloc`'s.
        unsafe { INNER.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if ON.load(Ordering::Relaxed) {
            LIVE.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            );
        }
        // SAFETY: the caller's contract is `GlobalAlloc::realloc`'s.
        unsafe { INNER.realloc(ptr, layout, new_size) }
    }
}

/// One counting window: bytes allocated and not freed since [`Counting::start`]. Frees of
/// blocks allocated before the window count negative, so a measurement keeps the freeing of
/// older blocks out of it (or accounts for it on purpose). One window at a time.
#[derive(Debug)]
pub struct Counting(());

impl Counting {
    /// Zeroes the counter and switches counting on.
    pub fn start() -> Counting {
        LIVE.store(0, Ordering::SeqCst);
        ON.store(true, Ordering::SeqCst);
        Counting(())
    }

    /// The net bytes allocated since the start.
    pub fn live(&self) -> isize {
        LIVE.load(Ordering::SeqCst)
    }
}

impl Drop for Counting {
    fn drop(&mut self) {
        ON.store(false, Ordering::SeqCst);
    }
}
