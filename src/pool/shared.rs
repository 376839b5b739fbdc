//! State shared by every thread using one pool: configuration, the depot of full magazines, the
//! registry of per-thread statistics.

use super::stats::{bump_shared, PoolStats, Slot, StatsSlot};
use crate::block::{FreeBlock, FreeStack};
use crate::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use crate::sync::{lock, Arc, CachePadded, Mutex};

/// Settled configuration of a pool (see `PoolBuilder` for the meaning of each field).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Config {
    pub(crate) min_shift: u32,
    pub(crate) max_shift: u32,
    pub(crate) cache_depth: usize,
    pub(crate) magazine_bytes: usize,
    pub(crate) max_retained_bytes: usize,
    pub(crate) clear_on_return: bool,
}

impl Config {
    pub(crate) fn classes(&self) -> usize {
        (self.max_shift - self.min_shift + 1) as usize
    }

    /// The class serving a request of `n` bytes (n >= 1), or `None` above the largest class.
    #[inline]
    pub(crate) fn class_of(&self, n: usize) -> Option<usize> {
        if n > 1usize << self.max_shift {
            return None;
        }
        let shift = usize::BITS - (n.max(1) - 1).leading_zeros();
        Some(shift.saturating_sub(self.min_shift) as usize)
    }

    #[inline]
    pub(crate) fn class_size(&self, class: usize) -> usize {
        1usize << (class as u32 + self.min_shift)
    }

    /// Blocks per thread-cache magazine for a class: as many as fit in `magazine_bytes`, at least
    /// one, at most `cache_depth`.
    pub(crate) fn magazine_len(&self, class: usize) -> usize {
        (self.magazine_bytes / self.class_size(class)).clamp(1, self.cache_depth.max(1))
    }
}

/// Full (or, from exiting threads, partial) magazines waiting to be picked up by a renting thread.
struct Depot {
    magazines: Vec<FreeStack>,
}

/// A thread's flag telling it to drop its caches of closed pools (see `thread_cache`).
pub(crate) type CloseNotice = Arc<AtomicBool>;

struct SlotEntry {
    slot: Arc<Slot>,
    owner: CloseNotice,
}

pub(crate) struct PoolShared {
    pub(crate) config: Config,
    depots: Box<[CachePadded<Mutex<Depot>>]>,
    /// Payload bytes in all depots; updated under a depot lock, read without one.
    depot_bytes: AtomicUsize,
    /// Payload bytes of every block of this pool that exists (allocated and not yet freed):
    /// changed only when a block is allocated from or freed to the system, never on a rent or
    /// return, so it costs the hot path nothing.
    allocated_bytes: AtomicUsize,
    /// Set when the last `Pool` handle drops: returns are freed from then on, nothing is cached.
    closed: AtomicBool,
    /// Statistics slots, each with the close notice of the thread that owns (or last owned) it.
    slots: Mutex<Vec<SlotEntry>>,
    /// Counters for events with no thread slot at hand (unpooled blocks, thread-local teardown).
    pub(crate) shared_counts: StatsSlot,
}

impl PoolShared {
    pub(crate) fn new(config: Config) -> PoolShared {
        let depots = (0..config.classes())
            .map(|_| {
                CachePadded(Mutex::new(Depot {
                    magazines: Vec::new(),
                }))
            })
            .collect();
        PoolShared {
            config,
            depots,
            depot_bytes: AtomicUsize::new(0),
            allocated_bytes: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            slots: Mutex::new(Vec::new()),
            shared_counts: StatsSlot::default(),
        }
    }

    /// A block of `bytes` payload bytes was allocated from the system for this pool.
    pub(crate) fn note_allocated(&self, bytes: usize) {
        self.allocated_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// A block of `bytes` payload bytes of this pool was freed to the system.
    pub(crate) fn note_freed(&self, bytes: usize) {
        self.allocated_bytes.fetch_sub(bytes, Ordering::Relaxed);
    }

    #[inline]
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Take a magazine of free blocks of `class`, if the depot has one.
    pub(crate) fn take_magazine(&self, class: usize) -> Option<FreeStack> {
        let mut depot = lock(&self.depots[class]);
        let magazine = depot.magazines.pop()?;
        self.depot_bytes
            .fetch_sub(magazine.bytes(), Ordering::Relaxed);
        Some(magazine)
    }

    /// Give a magazine to the depot, or free its blocks when the pool is closed or the depot would
    /// exceed its byte bound. Returns how many blocks were freed.
    pub(crate) fn put_magazine(&self, class: usize, magazine: FreeStack) -> usize {
        if magazine.is_empty() {
            return 0;
        }
        // MUTANT close_check_unlocked (test-only, `--cfg packetpipe_mutant="close_check_unlocked"`):
        // "closed" is read before the lock is taken, so `close` can set it and drain the depot in
        // between, and the magazine is stranded in a closed pool's depot: its blocks are never
        // freed (they keep the shared state alive, a leak). loom-tests/tests/pool_close.rs
        // catches it.
        #[cfg(packetpipe_mutant = "close_check_unlocked")]
        let closed = self.is_closed();
        let mut depot = lock(&self.depots[class]);
        // Checked under the lock so `close`, which drains under the same lock, cannot miss it.
        #[cfg(not(packetpipe_mutant = "close_check_unlocked"))]
        let closed = self.is_closed();
        // The bound is checked and the bytes reserved in one atomic step: each class has its own
        // lock, so a separate load and add would let two classes pass the check together and
        // overrun the bound.
        let bound = self.config.max_retained_bytes;
        let reserved = !closed
            && self
                .depot_bytes
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                    held.checked_add(magazine.bytes())
                        .filter(|&total| total <= bound)
                })
                .is_ok();
        if !reserved {
            drop(depot);
            let freed = magazine.len();
            bump_shared(&self.shared_counts.frees, freed as u64);
            drop(magazine);
            return freed;
        }
        depot.magazines.push(magazine);
        0
    }

    /// Return one block without a thread cache (thread-local storage torn down or in use).
    pub(crate) fn put_block(&self, block: FreeBlock) {
        let class = block.class() as usize;
        let mut magazine = FreeStack::new();
        magazine.push(block);
        self.put_magazine(class, magazine);
    }

    /// Free every block in the depots; returns the payload bytes freed.
    pub(crate) fn drain_depots(&self) -> usize {
        let mut freed_bytes = 0;
        for depot in self.depots.iter() {
            let magazines = std::mem::take(&mut lock(depot).magazines);
            for magazine in magazines {
                self.depot_bytes
                    .fetch_sub(magazine.bytes(), Ordering::Relaxed);
                freed_bytes += magazine.bytes();
                bump_shared(&self.shared_counts.frees, magazine.len() as u64);
            }
        }
        freed_bytes
    }

    /// Mark the pool closed (the last `Pool` handle is gone), tell every thread that caches its
    /// blocks, and free the depot.
    ///
    /// Blocks cached by other threads cannot be freed from here (thread caches take no lock, that
    /// is their point): each such thread gets its close notice set and frees them at its next rent
    /// or return on any pool (`thread_cache`). `closed` is set under the slots lock, which
    /// `claim_slot` also holds while it checks it: a thread registering a cache at the same time
    /// is either notified here or sees the pool closed there.
    pub(crate) fn close(&self) {
        {
            let slots = lock(&self.slots);
            self.closed.store(true, Ordering::Release);
            for entry in slots.iter() {
                // A dead owner's notice is set too: harmless, its thread is gone.
                entry.owner.store(true, Ordering::Release);
            }
        }
        self.drain_depots();
    }

    /// A statistics slot for a new thread cache: a dead thread's slot if there is one, else a new
    /// one. `owner` is the thread's close notice, set if the pool is (or gets) closed.
    pub(crate) fn claim_slot(&self, owner: &CloseNotice) -> Arc<Slot> {
        let mut slots = lock(&self.slots);
        if self.is_closed() {
            owner.store(true, Ordering::Release);
        }
        for entry in slots.iter_mut() {
            if entry
                .slot
                .in_use
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                entry.owner = owner.clone();
                return entry.slot.clone();
            }
        }
        let slot = Arc::new(CachePadded(StatsSlot::default()));
        slot.in_use.store(true, Ordering::Relaxed);
        slots.push(SlotEntry {
            slot: slot.clone(),
            owner: owner.clone(),
        });
        slot
    }

    /// Live threads holding a cache for this pool.
    pub(crate) fn thread_caches(&self) -> usize {
        lock(&self.slots)
            .iter()
            .filter(|entry| entry.slot.in_use.load(Ordering::Relaxed))
            .count()
    }

    pub(crate) fn stats(&self) -> PoolStats {
        let mut stats = PoolStats::default();
        for entry in lock(&self.slots).iter() {
            stats.add_slot(&entry.slot);
        }
        stats.add_slot(&self.shared_counts);
        stats.retained_bytes += self.depot_bytes.load(Ordering::Relaxed) as u64;
        stats.closed = self.is_closed();
        stats.outstanding = stats.rents.saturating_sub(stats.returns);
        // Every existing block is either free (retained) or rented (outstanding).
        let allocated = self.allocated_bytes.load(Ordering::Relaxed) as u64;
        stats.outstanding_bytes = allocated.saturating_sub(stats.retained_bytes);
        stats
    }
}
