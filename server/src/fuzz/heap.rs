//! Heap accounting: the binary's allocator reports here while a fuzz run counts, so
//! each input's heap peak is known.

use super::*;

/// Heap counting for `switchyard fuzz`: the binary's global allocator reports every
/// allocation here (the `unsafe` allocator lives in `main.rs`, the library forbids
/// unsafe code), and counting is on only while fuzzing (elsewhere an allocation pays
/// one relaxed load). The resident high-water mark cannot say what an input cost once
/// the allocator keeps freed memory resident; this can.
pub(super) static COUNTING: AtomicBool = AtomicBool::new(false);

/// Bytes allocated minus bytes freed while counting (signed: memory allocated before
/// counting began may be freed during it).
pub(super) static LIVE: AtomicI64 = AtomicI64::new(0);

pub(super) static PEAK_LIVE: AtomicI64 = AtomicI64::new(0);

/// `by` bytes were allocated.
#[inline]
pub fn heap_grew(by: usize) {
    if COUNTING.load(Ordering::Relaxed) {
        let now = LIVE.fetch_add(by as i64, Ordering::Relaxed) + by as i64;
        PEAK_LIVE.fetch_max(now, Ordering::Relaxed);
    }
}

/// `by` bytes were freed.
#[inline]
pub fn heap_shrank(by: usize) {
    if COUNTING.load(Ordering::Relaxed) {
        LIVE.fetch_sub(by as i64, Ordering::Relaxed);
    }
}

/// Starts one input's heap measurement; the bytes live now.
pub(super) fn heap_mark() -> i64 {
    let now = LIVE.load(Ordering::Relaxed);
    PEAK_LIVE.store(now, Ordering::Relaxed);
    now
}

/// The most heap bytes live at once since `heap_mark` returned `base`, above it.
pub(super) fn heap_rise_mib(base: i64) -> f64 {
    (PEAK_LIVE.load(Ordering::Relaxed) - base).max(0) as f64 / (1024.0 * 1024.0)
}
