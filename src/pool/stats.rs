//! Pool statistics: sharded counters, one cache line per thread, summed when read.

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
    /// Payload bytes of free blocks held by the pool (shared depot plus thread caches). After the
    /// pool closed: bytes still cached by threads that have not rented or returned on any pool
    /// since (they free them at their next pool operation or when they exit).
    pub retained_bytes: u64,
    /// Whether the last [`Pool`](crate::Pool) handle was dropped (seen through a
    /// [`PoolMonitor`](crate::pool::PoolMonitor)).
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

pub(crate) type Slot = CachePadded<StatsSlot>;

impl PoolStats {
    pub(crate) fn add_slot(&mut self, slot: &StatsSlot) {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        self.rents += get(&slot.rents);
        self.returns += get(&slot.returns);
        self.fresh_allocations += get(&slot.fresh);
        self.unpooled_allocations += get(&slot.unpooled);
        self.frees += get(&slot.frees);
        self.retained_bytes += get(&slot.cached_bytes);
    }
}
