//! The system allocator, counting for `switchyard fuzz`'s per-input heap peaks.

/// The system allocator, reporting to `switchyard::fuzz`'s heap counters (which count
/// only while `switchyard fuzz` runs: per-input heap peaks).
struct CountingAlloc;

// SAFETY: every call goes to the system allocator unchanged; only counters are kept
// beside it.
unsafe impl std::alloc::GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: the caller's contract, forwarded.
        let p = unsafe { std::alloc::System.alloc(layout) };
        if !p.is_null() {
            switchyard::fuzz::heap_grew(layout.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: the caller's contract, forwarded.
        let p = unsafe { std::alloc::System.alloc_zeroed(layout) };
        if !p.is_null() {
            switchyard::fuzz::heap_grew(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: the caller's contract, forwarded.
        unsafe { std::alloc::System.dealloc(ptr, layout) };
        switchyard::fuzz::heap_shrank(layout.size());
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new: usize) -> *mut u8 {
        // SAFETY: the caller's contract, forwarded.
        let p = unsafe { std::alloc::System.realloc(ptr, layout, new) };
        if !p.is_null() {
            if new >= layout.size() {
                switchyard::fuzz::heap_grew(new - layout.size());
            } else {
                switchyard::fuzz::heap_shrank(layout.size() - new);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;
