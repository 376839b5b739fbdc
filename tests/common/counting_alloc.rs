//! A counting global allocator for tests: allocations per thread (exact, so tests of one binary
//! can run in parallel) and live heap bytes for the whole process.
//!
//! Use it from a test file with:
//!
//! ```ignore
//! #[path = "common/counting_alloc.rs"]
//! mod counting_alloc;
//! #[global_allocator]
//! static GLOBAL: counting_alloc::CountingAlloc = counting_alloc::CountingAlloc;
//! ```
#![allow(dead_code)] // each test binary uses part of it

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, Ordering};

pub struct CountingAlloc;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
    /// Bytes this thread allocated minus bytes it freed (exact for single-thread tests).
    static NET_BYTES: Cell<isize> = const { Cell::new(0) };
}

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

fn count_one() {
    // `try_with`: the allocator may run while this thread's locals are being torn down.
    let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
}

fn add_bytes(n: isize) {
    LIVE_BYTES.fetch_add(n, Ordering::Relaxed);
    let _ = NET_BYTES.try_with(|c| c.set(c.get() + n));
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged; counting only
// touches a thread-local `Cell` and an atomic, neither of which allocates.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        add_bytes(layout.size() as isize);
        // SAFETY: forwarded from the caller, who upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_one();
        add_bytes(layout.size() as isize);
        // SAFETY: as `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
        LIVE_BYTES.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: as `alloc`; `ptr` was allocated by `System` through this allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        add_bytes(-(layout.size() as isize));
        // SAFETY: as `realloc`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Allocations (including reallocations) made by this thread so far.
pub fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

/// Heap bytes allocated and not yet freed, by every thread of the process.
pub fn live_bytes() -> isize {
    LIVE_BYTES.load(Ordering::Relaxed)
}

/// Heap bytes this thread allocated and freed again, net (exact when one thread does the work).
pub fn net_bytes_here() -> isize {
    NET_BYTES.with(Cell::get)
}
