//! A counting global allocator for tests and benches: allocations and bytes per thread (exact, so
//! tests of one binary can run in parallel), live heap bytes for the whole process, and refusals
//! on request (to test allocation-failure paths).
//!
//! Part of the test kit (`mod kit;` then `kit::counting_alloc`); a bench or an example includes it
//! by path (`#[path = "../tests/kit/counting_alloc.rs"] mod counting_alloc;`). The allocator
//! counts only once a binary installs it:
//!
//! ```ignore
//! mod kit;
//! use kit::counting_alloc;
//! #[global_allocator]
//! static GLOBAL: counting_alloc::CountingAlloc = counting_alloc::CountingAlloc;
//! ```
#![allow(dead_code)] // each test binary uses part of it

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, Ordering};

pub struct CountingAlloc;

thread_local! {
    /// Allocations (and reallocations) made by this thread.
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
    /// Bytes those asked for (a reallocation counts its new size).
    static ALLOCATED_BYTES: Cell<u64> = const { Cell::new(0) };
    /// Bytes this thread allocated minus bytes it freed (exact for single-thread tests).
    static NET_BYTES: Cell<isize> = const { Cell::new(0) };
    /// Requests of at least this many bytes fail on this thread.
    static REFUSE_FROM: Cell<usize> = const { Cell::new(usize::MAX) };
}

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

/// Count an allocation of `size` bytes; `false` if it must be refused. `try_with` throughout: the
/// allocator may run while this thread's locals are being torn down.
fn count(size: usize) -> bool {
    if !REFUSE_FROM.try_with(|r| size < r.get()).unwrap_or(true) {
        return false;
    }
    let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
    let _ = ALLOCATED_BYTES.try_with(|c| c.set(c.get() + size as u64));
    true
}

fn add_live(n: isize) {
    LIVE_BYTES.fetch_add(n, Ordering::Relaxed);
    let _ = NET_BYTES.try_with(|c| c.set(c.get() + n));
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged (or returns null,
// which `GlobalAlloc` allows, for a refused request); counting only touches thread-local `Cell`s and
// an atomic, none of which allocates.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !count(layout.size()) {
            return std::ptr::null_mut();
        }
        add_live(layout.size() as isize);
        // SAFETY: forwarded from the caller, who upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !count(layout.size()) {
            return std::ptr::null_mut();
        }
        add_live(layout.size() as isize);
        // SAFETY: as `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !count(new_size) {
            return std::ptr::null_mut();
        }
        add_live(new_size as isize - layout.size() as isize);
        // SAFETY: as `alloc`; `ptr` was allocated by `System` through this allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        add_live(-(layout.size() as isize));
        // SAFETY: as `realloc`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Allocations (including reallocations) made by this thread so far.
pub fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

/// Bytes this thread's allocations asked for so far.
pub fn allocated_bytes() -> u64 {
    ALLOCATED_BYTES.with(Cell::get)
}

/// The allocations `f` makes on this thread, and its result.
pub fn allocations_in<R>(f: impl FnOnce() -> R) -> (u64, R) {
    let before = allocations();
    let result = f();
    (allocations() - before, result)
}

/// Heap bytes allocated and not yet freed, by every thread of the process.
pub fn live_bytes() -> isize {
    LIVE_BYTES.load(Ordering::Relaxed)
}

/// Heap bytes this thread allocated and freed again, net (exact when one thread does the work).
pub fn net_bytes_here() -> isize {
    NET_BYTES.with(Cell::get)
}

/// From now on, this thread's requests of at least `bytes` bytes fail (`usize::MAX`: none fail).
pub fn refuse_allocations_from(bytes: usize) {
    REFUSE_FROM.with(|r| r.set(bytes));
}

/// Allocations made by this thread in `frames` runs of `frame`, after `warm_up` unmeasured runs.
pub fn allocations_per_batch(warm_up: usize, frames: usize, mut frame: impl FnMut()) -> u64 {
    for _ in 0..warm_up {
        frame();
    }
    let before = allocations();
    for _ in 0..frames {
        frame();
    }
    allocations() - before
}
