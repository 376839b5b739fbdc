//! Synchronisation primitives, routed through one place so loom can replace them.
//!
//! Normal builds use `std`. Builds with `RUSTFLAGS="--cfg packetpipe_loom"` use `loom`'s
//! model-checked versions, so every atomic, lock and cell that crosses threads in this crate is
//! visible to the loom models in `loom-tests/`. The cfg name is crate-specific on purpose: a plain
//! `--cfg loom` reaches every crate in the build (tokio, bytes, ...) and would switch them too.

#[cfg(not(packetpipe_loom))]
mod imp {
    pub(crate) use std::sync::atomic;
    pub(crate) use std::sync::{Arc, Mutex, MutexGuard};
    pub(crate) use std::thread;
    pub(crate) use std::thread_local;

    /// Lock a mutex, ignoring poisoning: the data under our locks stays consistent across a panic
    /// (every critical section is a few pointer moves that cannot panic half-way).
    pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
        m.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(packetpipe_loom)]
mod imp {
    pub(crate) use loom::sync::atomic;
    pub(crate) use loom::sync::{Arc, Mutex, MutexGuard};
    pub(crate) use loom::thread;
    pub(crate) use loom::thread_local;

    pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
        m.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub(crate) use imp::*;

/// A point in the single total order of SeqCst operations, for loom builds only.
///
/// The wait protocol (`pipe::wait`) is a Dekker handshake on SeqCst accesses: the C++ memory model
/// orders all of them in one total order, so a waiter's flag store and a notifier's state change
/// cannot both miss each other. Loom 0.7 models SeqCst *accesses* as only AcqRel (its `seq_cst()`
/// hook is a no-op, see loom's `rt/thread.rs`) and so reports lost wakeups that cannot happen,
/// while it models `fence(SeqCst)` exactly. Under `--cfg packetpipe_loom` this is that fence; in
/// normal builds it is nothing, since the SeqCst accesses around each call already give the order.
///
/// Placement: right before each SeqCst *load* of the handshake (the notifier's load of the waiting
/// flag, the waiter's first re-check load), never after a store, so a Relaxed load that the real
/// ordering does not cover stays unordered in the models too.
#[inline(always)]
pub(crate) fn loom_seq_cst_point() {
    #[cfg(packetpipe_loom)]
    atomic::fence(atomic::Ordering::SeqCst);
}

/// Pads and aligns a value to a cache line so two hot counters written by different threads never
/// share one (false sharing costs tens of nanoseconds per write on the machines we target).
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct CachePadded<T>(pub(crate) T);

impl<T> std::ops::Deref for CachePadded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// `UnsafeCell` with loom's closure API, so loom can check every access in model builds.
#[cfg(not(packetpipe_loom))]
#[derive(Debug, Default)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(packetpipe_loom))]
impl<T> UnsafeCell<T> {
    pub(crate) fn new(value: T) -> UnsafeCell<T> {
        UnsafeCell(std::cell::UnsafeCell::new(value))
    }

    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

#[cfg(packetpipe_loom)]
pub(crate) use loom::cell::UnsafeCell;
