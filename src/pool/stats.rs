//! Pool statistics: sharded counters, one slot per thread, summed when read.
//!
//! The fast rent and return count themselves with one increment each: a counter per size class
//! (`ThreadSlot::class_rents`, `class_returns`). Readers derive from those both the rent and
//! return totals and the thread's cached bytes (`class size x (returns - rents)` per class, plus
//! the level the slow paths keep in `cached_bytes` for whole magazines), so the hot paths need no
//! second counter for the bytes.

use std::ops::Deref;

use super::class::{Config, CLASS_SLOTS};
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::sync::CachePadded;

/// A snapshot of a pool's counters.
///
/// Counters are kept per thread and summed when read, so taking a snapshot while other threads
/// rent and return is cheap but may be a few operations stale; once the threads are quiet it is
/// exact. A leak shows up as `outstanding` staying above zero after every packet should be gone.
///
/// ```
/// let pool = packetpipe::Pool::new();
/// let buf = pool.rent(1000).unwrap();
/// assert_eq!((pool.stats().outstanding, pool.stats().outstanding_bytes), (1, 1024));
/// drop(buf);
/// let stats = pool.stats();
/// assert_eq!((stats.rents, stats.returns, stats.outstanding), (1, 1, 0));
/// assert_eq!(stats.retained_bytes, 1024); // the block waits in this thread's cache
/// assert_eq!(stats.outstanding_bytes, 0);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolStats {
    /// Blocks handed out (pooled and unpooled).
    pub rents: u64,
    /// Blocks whose last reference was dropped.
    pub returns: u64,
    /// Pooled blocks allocated from the system because no cached block was free.
    pub fresh_allocations: u64,
    /// Requests above the largest class, served by a plain allocation and freed on return.
    pub unpooled_allocations: u64,
    /// Blocks given back to the system allocator (unpooled returns, overflow, trims).
    pub frees: u64,
    /// Blocks rented and not yet returned: `rents - returns`.
    pub outstanding: u64,
    /// Payload bytes (block capacities, not bytes written) of the blocks rented and not yet
    /// returned, pooled and unpooled: the memory live packets and buffers hold. Compare it with
    /// the bytes they carry to see how well blocks are filled.
    pub outstanding_bytes: u64,
    /// Payload bytes of free blocks held by the pool (shared depot plus thread caches).
    pub retained_bytes: u64,
    /// Blocks freed by idle eviction (depot magazines unused for the pool's idle time, see
    /// [`PoolOptions::idle_eviction`](crate::PoolOptions::idle_eviction)); counted in
    /// `frees` too.
    pub evictions: u64,
    /// Payload bytes of the blocks freed by idle eviction: memory given back once the load went.
    pub evicted_bytes: u64,
    /// Whether the last [`Pool`](crate::Pool) handle was dropped: always `false` in a snapshot
    /// taken through a `Pool` (a handle keeps the pool open), so not part of the API (hidden); the
    /// close protocol's probe reads it.
    #[doc(hidden)]
    pub closed: bool,
}

/// One thread's counters. Only the owning thread writes them (a load and a store, no
/// read-modify-write), readers sum all slots.
#[derive(Default)]
pub(crate) struct StatsSlot {
    pub(crate) rents: AtomicU64,
    pub(crate) returns: AtomicU64,
    pub(crate) fresh: AtomicU64,
    pub(crate) unpooled: AtomicU64,
    pub(crate) frees: AtomicU64,
    /// Bytes in this thread's cache (a level, not a count).
    pub(crate) cached_bytes: AtomicU64,
    /// Whether a live thread owns this slot; a dead thread's slot is adopted by the next one.
    pub(crate) in_use: AtomicBool,
}

/// Add to a counter that only this thread writes: a plain load and store, no locked instruction.
#[inline]
pub(crate) fn bump(counter: &AtomicU64, n: u64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(n),
        Ordering::Relaxed,
    );
}

/// Subtract from a level that only this thread writes (as [`bump`]).
#[inline]
pub(crate) fn unbump(counter: &AtomicU64, n: u64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_sub(n),
        Ordering::Relaxed,
    );
}

/// Add to a counter that several threads may write.
pub(crate) fn bump_shared(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

/// A per-class counter of the fast paths. Loom builds too use std's atomic: these are relaxed
/// statistics that only their thread writes, and 256 modelled atomics per slot would only slow
/// the models down.
pub(crate) type ClassCounter = std::sync::atomic::AtomicU64;

/// [`bump`] for a [`ClassCounter`].
#[inline(always)]
pub(crate) fn bump_class(counter: &ClassCounter) {
    counter.store(
        counter
            .load(std::sync::atomic::Ordering::Relaxed)
            .wrapping_add(1),
        std::sync::atomic::Ordering::Relaxed,
    );
}

/// A thread cache's slot: the common counters, plus the rents and returns of the cache's loaded
/// magazines by class (indexed by `class_slot`), which also stand for the bytes those moved (see
/// the module docs). Only the owning thread writes it.
pub(crate) struct ThreadSlot {
    counts: StatsSlot,
    pub(crate) class_rents: [ClassCounter; CLASS_SLOTS],
    pub(crate) class_returns: [ClassCounter; CLASS_SLOTS],
}

impl Default for ThreadSlot {
    fn default() -> ThreadSlot {
        ThreadSlot {
            counts: StatsSlot::default(),
            class_rents: std::array::from_fn(|_| ClassCounter::new(0)),
            class_returns: std::array::from_fn(|_| ClassCounter::new(0)),
        }
    }
}

/// The common counters are reached as the slot's own fields (`slot.rents`).
impl Deref for ThreadSlot {
    type Target = StatsSlot;

    fn deref(&self) -> &StatsSlot {
        &self.counts
    }
}

impl ThreadSlot {
    /// Rents and returns counted by class, and the bytes the class counts moved into the cache.
    fn class_totals(&self, config: &Config) -> (u64, u64, u64) {
        let get = |c: &ClassCounter| c.load(std::sync::atomic::Ordering::Relaxed);
        let (mut rents, mut returns, mut bytes) = (0u64, 0u64, 0u64);
        for class in 0..config.classes() {
            let (out, back) = (
                get(&self.class_rents[class]),
                get(&self.class_returns[class]),
            );
            rents = rents.wrapping_add(out);
            returns = returns.wrapping_add(back);
            let size = config.class_size(class) as u64;
            bytes = bytes.wrapping_add(back.wrapping_sub(out).wrapping_mul(size));
        }
        (rents, returns, bytes)
    }

    /// Set the thread's cached-bytes level (the slow paths' part plus the class counts' part) to
    /// `level`: only the owning thread calls this, when it empties its cache.
    pub(crate) fn set_cached_bytes(&self, level: u64, config: &Config) {
        let (_, _, class_bytes) = self.class_totals(config);
        self.cached_bytes
            .store(level.wrapping_sub(class_bytes), Ordering::Relaxed);
    }
}

pub(crate) type Slot = CachePadded<ThreadSlot>;

/// A thread cache's level as another thread reads it. The owner updates the level and the class
/// counts one after the other with relaxed stores, so a reader on another thread may see one
/// without the other: the wrapped sum then stands for a "negative" level, which counts as
/// empty. Once the owner is quiet (or has exited) the level is exact.
fn cache_level(level: u64) -> u64 {
    if level > i64::MAX as u64 {
        0
    } else {
        level
    }
}

impl PoolStats {
    /// Add the counters with no class part (the pool's shared counts).
    pub(crate) fn add_counts(&mut self, slot: &StatsSlot) {
        self.add_events(slot);
        self.retained_bytes = self
            .retained_bytes
            .saturating_add(cache_level(slot.cached_bytes.load(Ordering::Relaxed)));
    }

    /// Add a thread's slot, its class counts included.
    pub(crate) fn add_thread_slot(&mut self, slot: &ThreadSlot, config: &Config) {
        let (rents, returns, class_bytes) = slot.class_totals(config);
        self.add_events(slot);
        self.rents += rents;
        self.returns += returns;
        // The slow paths' level plus the class counts' bytes (either may be "negative" alone,
        // hence wrapping; their sum is what the cache holds).
        let level = slot
            .cached_bytes
            .load(Ordering::Relaxed)
            .wrapping_add(class_bytes);
        self.retained_bytes = self.retained_bytes.saturating_add(cache_level(level));
    }

    /// The event counters of a slot: everything but the cached bytes.
    fn add_events(&mut self, slot: &StatsSlot) {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        self.rents += get(&slot.rents);
        self.returns += get(&slot.returns);
        self.fresh_allocations += get(&slot.fresh);
        self.unpooled_allocations += get(&slot.unpooled);
        self.frees += get(&slot.frees);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A snapshot taken while a thread moves a magazine can see the class counts of the move
    /// without its level (or the other way round); that reads as empty, never as an overflow.
    #[test]
    fn a_slot_read_mid_update_counts_as_empty() {
        let config = Config::new(4, 12, 32, 256 * 1024, 0, 4 << 20, false);
        let slot = ThreadSlot::default();
        // Two blocks of the smallest class rented from the cache, the level not yet raised.
        bump_class(&slot.class_rents[0]);
        bump_class(&slot.class_rents[0]);
        let mut stats = PoolStats::default();
        stats.add_thread_slot(&slot, &config);
        stats.add_thread_slot(&slot, &config);
        assert_eq!(stats.retained_bytes, 0);
        assert_eq!(stats.rents, 4);
        // The owner raises the level: the slot holds nothing, exactly.
        slot.set_cached_bytes(0, &config);
        let mut stats = PoolStats::default();
        stats.add_thread_slot(&slot, &config);
        assert_eq!(stats.retained_bytes, 0);
        slot.set_cached_bytes(3 * 16, &config);
        let mut stats = PoolStats::default();
        stats.add_thread_slot(&slot, &config);
        assert_eq!(stats.retained_bytes, 48);
    }
}
