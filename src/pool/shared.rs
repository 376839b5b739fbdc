//! State shared by every thread using one pool: its configuration, the depot of full magazines, the
//! registry of per-thread statistics.

use super::class::Config;
use super::leaks::LeakTable;
use super::stats::{bump_shared, PoolStats, Slot, StatsSlot, ThreadSlot};
use super::{FreeBlock, FreeStack};
use std::time::{Duration, Instant};

use crate::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use crate::sync::{lock, Arc, CachePadded, Mutex};

/// Full (or, from exiting threads, partial) magazines waiting to be picked up by a renting thread,
/// oldest first, each with the time it came in: a renting thread takes the newest, so the ones at
/// the front are those no one has needed for longest (idle eviction frees them).
struct Depot {
    magazines: Vec<(FreeStack, Instant)>,
}

impl Depot {
    /// Free the magazines that came in before `cutoff`; returns (blocks, bytes) freed.
    fn evict_before(&mut self, cutoff: Instant) -> (usize, usize) {
        let idle = self
            .magazines
            .iter()
            .take_while(|(_, since)| *since < cutoff)
            .count();
        let (mut blocks, mut bytes) = (0, 0);
        for (magazine, _) in self.magazines.drain(..idle) {
            blocks += magazine.len();
            bytes += magazine.bytes();
        }
        (blocks, bytes)
    }
}

/// Idle eviction's counters and settings.
pub(crate) struct Eviction {
    /// Free depot magazines unused for this long (`None`: never).
    pub(crate) idle_after: Option<Duration>,
    /// Blocks and payload bytes freed by idle eviction so far.
    pub(crate) evicted_blocks: AtomicU64,
    pub(crate) evicted_bytes: AtomicU64,
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
    /// Where each outstanding block was rented and last used, for a pool built with
    /// `track_leaks`: `None` otherwise, which is the "tracking on?" test of every path that
    /// records (`pool::leaks`).
    pub(crate) leaks: Option<Box<LeakTable>>,
    pub(crate) eviction: Eviction,
}

impl PoolShared {
    pub(crate) fn new(
        config: Config,
        track_leaks: bool,
        idle_after: Option<Duration>,
    ) -> PoolShared {
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
            leaks: track_leaks.then(|| Box::new(LeakTable::new())),
            eviction: Eviction {
                idle_after,
                evicted_blocks: AtomicU64::new(0),
                evicted_bytes: AtomicU64::new(0),
            },
        }
    }

    /// Free every depot magazine that has waited unused for at least the idle time at `now`;
    /// returns the payload bytes freed (0 when idle eviction is off).
    pub(crate) fn evict_idle(&self, now: Instant) -> usize {
        let Some(cutoff) = self.eviction_cutoff(now) else {
            return 0;
        };
        let (mut blocks, mut bytes) = (0, 0);
        for depot in self.depots.iter() {
            let (b, n) = lock(depot).evict_before(cutoff);
            (blocks, bytes) = (blocks + b, bytes + n);
        }
        self.note_evicted(blocks, bytes);
        bytes
    }

    /// Account for `blocks` blocks of `bytes` payload bytes freed from the depots (already
    /// dropped).
    fn note_evicted(&self, blocks: usize, bytes: usize) {
        if blocks == 0 {
            return;
        }
        self.depot_bytes.fetch_sub(bytes, Ordering::Relaxed);
        bump_shared(&self.shared_counts.frees, blocks as u64);
        let e = &self.eviction;
        e.evicted_blocks.fetch_add(blocks as u64, Ordering::Relaxed);
        e.evicted_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Magazines that came into a depot before this time are idle at `now` (`None`: eviction is
    /// off, or `now` is too early for any to be).
    fn eviction_cutoff(&self, now: Instant) -> Option<Instant> {
        now.checked_sub(self.eviction.idle_after?)
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
        let (magazine, _) = depot.magazines.pop()?;
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
        let mut depot = lock(&self.depots[class]);
        // Checked under the lock so `close`, which drains under the same lock, cannot miss it.
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
        // A magazine coming in also frees the idle ones of its class (under the lock held
        // anyway), so a pool in use gives back the classes it stopped using without a timer. (A
        // pool nobody uses runs no slow path: an application whose load can stop calls
        // `Pool::evict_idle` from a timer.)
        let now = Instant::now();
        let evicted = match self.eviction_cutoff(now) {
            Some(cutoff) => depot.evict_before(cutoff),
            None => (0, 0),
        };
        depot.magazines.push((magazine, now));
        drop(depot);
        self.note_evicted(evicted.0, evicted.1);
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
            for (magazine, _) in magazines {
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
    /// is their point): each such thread gets its close notice set and frees them at its next
    /// return, or rent off the fast path, on any pool (`thread_cache`). `closed` is set under the
    /// slots lock, which `claim_slot` also holds while it checks it: a thread registering a cache
    /// at the same time is either notified here or sees the pool closed there.
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
        let slot = Arc::new(CachePadded(ThreadSlot::default()));
        slot.in_use.store(true, Ordering::Relaxed);
        slots.push(SlotEntry {
            slot: slot.clone(),
            owner: owner.clone(),
        });
        slot
    }

    /// Live threads holding a cache for this pool (the close protocol's probe).
    pub(crate) fn thread_caches(&self) -> usize {
        lock(&self.slots)
            .iter()
            .filter(|entry| entry.slot.in_use.load(Ordering::Relaxed))
            .count()
    }

    pub(crate) fn leak_report(&self) -> super::LeakReport {
        match &self.leaks {
            Some(table) => table.report(),
            None => super::leaks::untracked(),
        }
    }

    pub(crate) fn stats(&self) -> PoolStats {
        let mut stats = PoolStats::default();
        for entry in lock(&self.slots).iter() {
            stats.add_thread_slot(&entry.slot, &self.config);
        }
        stats.add_counts(&self.shared_counts);
        stats.retained_bytes = stats
            .retained_bytes
            .saturating_add(self.depot_bytes.load(Ordering::Relaxed) as u64);
        stats.closed = self.is_closed();
        stats.evictions = self.eviction.evicted_blocks.load(Ordering::Relaxed);
        stats.evicted_bytes = self.eviction.evicted_bytes.load(Ordering::Relaxed);
        stats.outstanding = stats.rents.saturating_sub(stats.returns);
        // Every existing block is either free (retained) or rented (outstanding).
        let allocated = self.allocated_bytes.load(Ordering::Relaxed) as u64;
        stats.outstanding_bytes = allocated.saturating_sub(stats.retained_bytes);
        stats
    }
}
