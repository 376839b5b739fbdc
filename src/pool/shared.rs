//! State shared by every thread using one pool: configuration, the depot of full magazines, the
//! registry of per-thread statistics.

use super::leaks::LeakTable;
use super::stats::{bump_shared, PoolStats, Slot, StatsSlot, ThreadSlot};
use super::{FreeBlock, FreeStack};
use std::time::{Duration, Instant};

use crate::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use crate::sync::{lock, Arc, CachePadded, Mutex};

/// Settled configuration of a pool (see `PoolOptions` for the meaning of each field).
///
/// Classes: the powers of two from `1 << min_shift` to `1 << max_shift` and, between each two,
/// `(1 << SUB_CLASS_BITS) - 1` evenly spaced sizes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Config {
    pub(crate) min_shift: u32,
    pub(crate) max_shift: u32,
    /// `1 << min_shift`, `1 << max_shift` and `(63 - min_shift) * 4 - 3`: worked out once
    /// (`Config::new`) so `class_of` on the rent path does not.
    min_size: usize,
    max_size: usize,
    index_top: usize,
    /// The class of every request up to `table_max` bytes, one entry per `1 << TABLE_SHIFT`
    /// bytes: `class_of` reads it instead of computing (see there).
    table: [u8; CLASS_TABLE_LEN],
    table_max: usize,
    pub(crate) cache_depth: usize,
    pub(crate) magazine_bytes: usize,
    pub(crate) max_retained_bytes: usize,
    pub(crate) max_thread_cache_bytes: usize,
    pub(crate) clear_on_return: bool,
    /// Blocks of at least this many bytes (header included) are mapped on their own
    /// (`block::system`); `usize::MAX`: none.
    pub(crate) map_from: usize,
}

/// Size classes per doubling, as a power of two: 2 bits, four classes between one power of two and
/// the next (1, 1.25, 1.5 and 1.75 times it). A request gets a block at most 25% larger than
/// itself, so at most 20% of a block is left unused (a power-of-two class wastes up to half).
pub(crate) const SUB_CLASS_BITS: u32 = 2;

/// The smallest class size the pool accepts: the class arithmetic needs `SUB_CLASS_BITS` bits
/// below the top one, and smaller blocks are not worth a header (16 B is also the payload
/// alignment).
pub(crate) const MIN_CLASS_SIZE: usize = 16;

/// The class lookup table has one entry per 4 bytes of request size, up to 4 KiB (1 KiB per pool):
/// every class size is a multiple of a quarter of the smallest class, `(4 + j) << (k - 2)` with
/// k >= min_shift >= 4, so all requests in one 4-byte step share a class whatever the settings. A
/// fixed step (not one per pool) lets the compiler fold the index of a constant size.
const TABLE_SHIFT: u32 = 2;
const CLASS_TABLE_LEN: usize = 1024;

impl Config {
    pub(crate) fn new(
        min_shift: u32,
        max_shift: u32,
        cache_depth: usize,
        magazine_bytes: usize,
        max_retained_bytes: usize,
        max_thread_cache_bytes: usize,
        clear_on_return: bool,
    ) -> Config {
        // The builder clamps the shifts to 4..=30: at most 105 classes, whose numbers fit the
        // block header's u8 below `UNPOOLED`.
        assert!(
            (MIN_CLASS_SIZE.trailing_zeros()..usize::BITS).contains(&min_shift)
                && (min_shift..usize::BITS).contains(&max_shift)
                && ((max_shift - min_shift) << SUB_CLASS_BITS) < u32::from(crate::block::UNPOOLED),
            "class shifts {min_shift}..={max_shift}"
        );
        let mut config = Config {
            min_shift,
            max_shift,
            min_size: 1 << min_shift,
            max_size: 1 << max_shift,
            index_top: (((usize::BITS - 1 - min_shift) << SUB_CLASS_BITS) + 1
                - (1 << SUB_CLASS_BITS)) as usize,
            table: [0; CLASS_TABLE_LEN],
            table_max: 0,
            cache_depth,
            magazine_bytes,
            max_retained_bytes,
            max_thread_cache_bytes,
            clear_on_return,
            map_from: usize::MAX,
        };
        let table_max = (CLASS_TABLE_LEN << TABLE_SHIFT).min(config.max_size);
        for index in 0..CLASS_TABLE_LEN {
            // The last request of this step; all of the step's requests have its class.
            let n = ((index + 1) << TABLE_SHIFT).min(table_max);
            let class = config.compute_class(n).expect("at most the largest class");
            config.table[index] = u8::try_from(class).expect("class numbers fit a u8");
        }
        config.table_max = table_max;
        config
    }

    pub(crate) fn classes(&self) -> usize {
        (((self.max_shift - self.min_shift) << SUB_CLASS_BITS) + 1) as usize
    }

    /// The class serving a request of `n` bytes (n >= 1), or `None` above the largest class.
    ///
    /// Up to `table_max` (4 KiB, or the largest class if smaller) a table lookup: a compare, a
    /// shift and a byte load (just the compare and the load for a constant size), where the
    /// arithmetic below takes about 17 instructions on the rent path. Larger requests are
    /// computed.
    #[inline]
    pub(crate) fn class_of(&self, n: usize) -> Option<usize> {
        debug_assert!(n >= 1, "class_of(0)");
        if n <= self.table_max {
            // n - 1 < CLASS_TABLE_LEN << TABLE_SHIFT, so the index is in range; the mask only
            // tells the compiler so (no bounds check).
            let index = (n.wrapping_sub(1) >> TABLE_SHIFT) & (CLASS_TABLE_LEN - 1);
            return Some(usize::from(self.table[index]));
        }
        self.compute_class(n)
    }

    /// `class_of` by arithmetic, for any size.
    ///
    /// Class sizes are `(4 + j) << (k - 2)` for `j` in 0..4, numbered `4k + j` from 0 (then less
    /// the smallest class's number). With `m = n - 1` and `e` its top bit, `m >> (e - 2)` is in
    /// 4..8 and says which quarter of `[2^e, 2^(e+1))` `m` lies in; the class just above is number
    /// `4e + (m >> (e - 2)) - 3`. A power of two `2^k` maps to `4k`, one byte more to `4k + 1`.
    /// No loop, no table: a leading-zero count and a few shifts and adds.
    #[inline]
    fn compute_class(&self, n: usize) -> Option<usize> {
        if n > self.max_size {
            return None;
        }
        // Requests up to the smallest class get it; min_shift >= 4, so m >= 15 here.
        let m = n.max(self.min_size) - 1;
        // `| 1` changes neither the top bit nor the two below it (m >= 15), and tells the
        // compiler m != 0, so the count needs no zero check.
        let zeros = (m | 1).leading_zeros();
        // m shifted up to bit 63: its top three bits, 0b1qq, are 4 + the quarter.
        let quarter = (m << zeros) >> (usize::BITS - 1 - SUB_CLASS_BITS);
        // The class number 4e + quarter - 3 with e = 63 - zeros, less the smallest class's.
        Some(quarter + self.index_top - ((zeros as usize) << SUB_CLASS_BITS))
    }

    #[inline]
    pub(crate) fn class_size(&self, class: usize) -> usize {
        let index = class + ((self.min_shift as usize) << SUB_CLASS_BITS);
        let (shift, step) = (index >> SUB_CLASS_BITS, index & ((1 << SUB_CLASS_BITS) - 1));
        ((1 << SUB_CLASS_BITS) + step) << (shift - SUB_CLASS_BITS as usize)
    }

    /// Blocks per thread-cache magazine for a class: as many as fit in `magazine_bytes`, at least
    /// one, at most `cache_depth`.
    pub(crate) fn magazine_len(&self, class: usize) -> usize {
        (self.magazine_bytes / self.class_size(class)).clamp(1, self.cache_depth.max(1))
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn config(min_shift: u32, max_shift: u32) -> Config {
        Config::new(min_shift, max_shift, 32, 256 * 1024, 0, 4 << 20, false)
    }

    /// `class_of` against the definition: the smallest class size at least `n`, by a scan.
    #[test]
    fn class_of_is_the_smallest_class_that_fits() {
        for (min_shift, max_shift) in [(4, 4), (4, 12), (6, 20), (10, 11)] {
            let c = config(min_shift, max_shift);
            let sizes: Vec<usize> = (0..c.classes()).map(|k| c.class_size(k)).collect();
            assert_eq!(sizes[0], 1 << min_shift);
            assert_eq!(*sizes.last().unwrap(), 1 << max_shift);
            assert!(sizes.windows(2).all(|w| w[0] < w[1]), "{sizes:?}");
            let mut probes: Vec<usize> = (1..5000).collect();
            for &s in &sizes {
                probes.extend([s - 1, s, s + 1]);
            }
            for n in probes {
                let expected = sizes.iter().position(|&s| s >= n);
                assert_eq!(
                    c.class_of(n),
                    expected,
                    "n = {n}, classes {min_shift}..={max_shift}"
                );
                if let Some(class) = expected {
                    // At most 25% more than asked once above the smallest class.
                    assert!(
                        n <= 1 << min_shift || sizes[class] * 4 <= n * 5 + 3,
                        "n = {n}"
                    );
                }
            }
        }
        let c = config(6, 20);
        assert_eq!(c.classes(), 57);
        let first: Vec<usize> = (0..6).map(|k| c.class_size(k)).collect();
        assert_eq!(first, [64, 80, 96, 112, 128, 160]);
        assert_eq!(c.class_of(usize::MAX), None);
        assert_eq!(c.class_of((1 << 20) + 1), None);
    }
}
