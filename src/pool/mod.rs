//! The buffer pool (re-exported at the crate root; the guide to size classes and caches is on
//! [`Pool`]): `thread_cache.rs` holds a thread's magazines, `shared.rs` the depot they exchange
//! with, `stats.rs` the counters, `leaks.rs` the optional record of where blocks went.

mod leaks;
mod shared;
mod stats;
mod thread_cache;

pub use leaks::{BlockUse, LeakReport, OutstandingBlock};
pub use stats::PoolStats;

pub(crate) use leaks::note_use;

pub(crate) use shared::PoolShared;

use crate::block::{self, Recycle, MAX_CAPACITY, UNPOOLED};
use crate::error::Error;
use crate::sync::Arc;
use shared::{Config, MIN_CLASS_SIZE};
use stats::bump_shared;

/// A handle to a buffer pool: size classes, per-thread caches, a shared depot. Cloning shares
/// the pool.
///
/// # Size classes
///
/// Every power of two from the smallest class to the largest, and three sizes evenly between each
/// two (1.25, 1.5 and 1.75 times the power of two below): 64, 80, 96, 112,
/// 128, 160, ... A request gets the smallest class that holds it, so a block is at most 25% larger
/// than asked for (at most 20% of it unused; a power-of-two class leaves up to half).
///
/// ```
/// use packetpipe::Pool;
///
/// let pool = Pool::builder().max_class_size(64 * 1024).build().unwrap();
/// let mut buf = pool.rent(1500).unwrap();
/// assert_eq!(buf.capacity(), 1536); // rounded up to the class size: 1.5 KiB
/// buf.extend_from_slice(b"hello").unwrap();
/// let packet = buf.seal(); // an OwnedPacket; the buffer's tail stays writable
/// assert_eq!(&packet[..], b"hello");
/// drop((buf, packet));
/// assert_eq!(pool.stats().outstanding, 0);
/// ```
///
/// # Caches
///
/// A pool hands out [`PacketBuf`](crate::PacketBuf)s backed by pooled blocks. When the last
/// packet referring to a block drops, the block goes back to the dropping thread's cache; caches
/// exchange whole magazines of blocks with a shared depot, so one thread that rents and another
/// that returns (the pipe's pattern) reach a steady state with no fresh allocations and no lock on the common path.
///
/// Requests above the largest class are plain allocations, freed on return and never retained.
///
/// # Leaks
///
/// Leaks show in [`PoolStats::outstanding`]; to find them, a pool built with
/// [`PoolBuilder::track_leaks`] records where each block was rented and last sealed, sliced or
/// taken, and [`Pool::leak_report`] lists the blocks out with those sites and their age.
///
/// # Closing
///
/// Dropping the last handle closes the pool: it frees the shared depot and the calling thread's
/// cache at once, and stops caching. Every other thread that cached blocks of the pool frees them
/// (and lets go of the pool's shared state) at its next return on any pool or its next rent that
/// refills a magazine (a thread that only rents does so at least once per magazine), or when it
/// exits; a [`PoolMonitor`] shows what is still held meanwhile. Blocks still referenced by
/// packets stay valid and are freed when their last packet drops.
///
/// ```
/// use packetpipe::Pool;
///
/// let pool = Pool::new();
/// let monitor = pool.monitor();
/// let packet = pool.copy_from_slice(b"outlives the pool").unwrap();
/// std::thread::spawn({
///     let pool = pool.clone();
///     move || drop(pool.copy_from_slice(b"cached by this thread, freed when it exits"))
/// })
/// .join()
/// .unwrap();
/// drop(pool); // the last handle: the pool closes
/// let stats = monitor.stats();
/// assert!(stats.closed);
/// assert_eq!((stats.outstanding, stats.retained_bytes), (1, 0)); // only the live packet
/// drop(packet); // freed, not cached
/// let stats = monitor.stats();
/// assert_eq!(stats.outstanding, 0);
/// assert_eq!(stats.frees, stats.fresh_allocations);
/// ```
#[derive(Clone)]
pub struct Pool {
    /// The shared state, held directly (as well as through `handle`) so that a rent reaches it
    /// with one load instead of two: a clone costs a second reference count, a rent one
    /// instruction less.
    shared: Arc<PoolShared>,
    /// Held for its `Drop`: the last `Pool` to go closes the pool.
    _handle: Arc<Handle>,
}

/// Closes the shared state when the last `Pool` handle goes, breaking the cycle between the depot
/// (which owns free blocks) and the blocks (which hold the shared state alive).
struct Handle {
    shared: Arc<PoolShared>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.shared.close();
        // This thread's cache goes now; other threads drop theirs at their next return, or rent
        // off the fast path, on any pool (their close notice is set, see `thread_cache`), or when
        // they exit.
        thread_cache::sweep_closed();
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = &self.shared.config;
        f.debug_struct("Pool")
            .field("min_class_size", &(1usize << c.min_shift))
            .field("max_class_size", &(1usize << c.max_shift))
            .field("stats", &self.stats())
            .finish()
    }
}

impl Default for Pool {
    fn default() -> Pool {
        Pool::new()
    }
}

impl Pool {
    /// A new pool with the default settings (see [`PoolBuilder`]).
    pub fn new() -> Pool {
        PoolBuilder::default()
            .build()
            .expect("default pool settings are valid")
    }

    /// Start configuring a pool.
    pub fn builder() -> PoolBuilder {
        PoolBuilder::default()
    }

    /// The process-wide pool used when no other is given.
    #[cfg(not(packetpipe_loom))]
    pub fn global() -> &'static Pool {
        static GLOBAL: std::sync::OnceLock<Pool> = std::sync::OnceLock::new();
        GLOBAL.get_or_init(Pool::new)
    }

    /// Rent a writer of a block with `headroom` bytes free in front and at least `size` bytes after
    /// it (what `Pool::rent_with_headroom`, in `packet`, wraps into a `PacketBuf`).
    #[inline(always)]
    #[track_caller]
    pub(crate) fn rent_writer(&self, headroom: usize, size: usize) -> Result<Writer, Error> {
        if size == 0 {
            return Err(Error::ZeroSizeRequest);
        }
        if headroom > 0 && size > MAX_CAPACITY.saturating_sub(headroom) {
            // Named as asked (the sum may not even fit a usize).
            return Err(Error::RequestTooLarge {
                requested: size,
                headroom,
                limit: MAX_CAPACITY,
            });
        }
        let block = self.rent_block(headroom + size)?;
        Ok(block.into_writer(headroom))
    }

    // `track_caller` down to the slow paths, which record the rent site for a pool that tracks
    // leaks: inlined, the caller's location is a constant that only the slow calls take.
    #[inline(always)]
    #[track_caller]
    fn rent_block(&self, size: usize) -> Result<FreeBlock, Error> {
        let shared = &self.shared;
        match shared.config.class_of(size) {
            Some(class) => thread_cache::rent(shared, class),
            None => self.rent_unpooled(size),
        }
    }

    #[cold]
    #[inline(never)]
    #[track_caller]
    fn rent_unpooled(&self, size: usize) -> Result<FreeBlock, Error> {
        let shared = &self.shared;
        let block = FreeBlock::allocate(size, UNPOOLED, shared.clone())?;
        bump_shared(&shared.shared_counts.rents, 1);
        bump_shared(&shared.shared_counts.unpooled, 1);
        if let Some(leaks) = &shared.leaks {
            leaks.rented(block.addr(), size, std::panic::Location::caller());
        }
        Ok(block)
    }

    /// A snapshot of the pool's counters.
    pub fn stats(&self) -> PoolStats {
        self.shared.stats()
    }

    /// The blocks this pool has out, oldest first, each with where it was rented, where it was
    /// last sealed, sliced or taken, and its age; for a pool built with
    /// [`track_leaks`](PoolBuilder::track_leaks) (empty otherwise: see
    /// [`LeakReport::is_tracking`]). [`PoolMonitor::leak_report`] gives the same after the pool
    /// closed.
    ///
    /// ```
    /// use packetpipe::BlockUse;
    ///
    /// let pool = packetpipe::Pool::builder().track_leaks(true).build()?;
    /// let mut buf = pool.rent(100)?;
    /// buf.extend_from_slice(b"header:body")?;
    /// let sealed_line = line!() + 1;
    /// let packet = buf.seal();
    /// drop(buf);
    /// std::mem::forget(packet); // leaked: the block never goes home
    ///
    /// let report = pool.leak_report();
    /// let block = &report.blocks()[0];
    /// let (use_, at) = block.last_use.unwrap();
    /// assert_eq!((use_, at.line()), (BlockUse::Sealed, sealed_line));
    /// assert_eq!(pool.stats().outstanding, 1);
    /// println!("{report}"); // "1 block of the pool outstanding (112 bytes):\n  112 bytes, rented 1.2ms ago at src/main.rs:4:20, last sealed at src/main.rs:7:18"
    /// # Ok::<(), packetpipe::Error>(())
    /// ```
    pub fn leak_report(&self) -> LeakReport {
        self.shared.leak_report()
    }

    /// A handle that reads this pool's statistics without keeping the pool open (see
    /// [`PoolMonitor`]).
    pub fn monitor(&self) -> PoolMonitor {
        PoolMonitor {
            shared: self.shared.clone(),
        }
    }

    /// Free the blocks held in the shared depot and in the calling thread's cache; returns the
    /// payload bytes freed. Other threads' caches (bounded by the cache settings) are untouched:
    /// they are flushed to the depot when those threads exit.
    pub fn trim(&self) -> usize {
        self.shared.drain_depots() + thread_cache::trim(&self.shared)
    }

    /// Idle eviction: free the depot's blocks that have waited unused for at least the pool's
    /// idle time ([`PoolBuilder::idle_eviction`]); returns the payload bytes freed. A pool in use
    /// does this by itself on its slow paths; one whose load stopped runs none, so an
    /// application that wants memory back after a burst calls this from a timer (every second,
    /// say). Threads' own caches are not touched (each is bounded by
    /// [`PoolBuilder::max_thread_cache_bytes`]; [`trim`](Self::trim) frees the calling thread's).
    /// [`PoolStats::evictions`] and [`PoolStats::evicted_bytes`] count what went back.
    pub fn evict_idle(&self) -> usize {
        self.evict_idle_at(std::time::Instant::now())
    }

    /// [`evict_idle`](Self::evict_idle) as if the time were `now`: tests and simulations move
    /// the clock instead of sleeping.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    ///
    /// let pool = packetpipe::Pool::builder()
    ///     .max_thread_cache_bytes(0) // every return goes to the depot
    ///     .idle_eviction(Some(Duration::from_secs(5)))
    ///     .build()?;
    /// drop(pool.rent(64 * 1024)?);
    /// let start = Instant::now();
    /// assert_eq!(pool.evict_idle_at(start), 0); // just returned: kept for reuse
    /// assert_eq!(pool.evict_idle_at(start + Duration::from_secs(6)), 64 * 1024);
    /// let stats = pool.stats();
    /// assert_eq!((stats.evictions, stats.evicted_bytes, stats.retained_bytes), (1, 64 * 1024, 0));
    /// # Ok::<(), packetpipe::Error>(())
    /// ```
    pub fn evict_idle_at(&self, now: std::time::Instant) -> usize {
        self.shared.evict_idle(now)
    }

    /// The size of the smallest pooled block.
    pub fn min_class_size(&self) -> usize {
        1 << self.shared.config.min_shift
    }

    /// The size of the largest pooled block; larger requests are plain allocations.
    pub fn max_class_size(&self) -> usize {
        1 << self.shared.config.max_shift
    }

    /// The capacity a request of `size` bytes gets, or `None` if it is not pooled.
    pub fn class_size_for(&self, size: usize) -> Option<usize> {
        let config = &self.shared.config;
        config
            .class_of(size.max(1))
            .map(|class| config.class_size(class))
    }
}

/// Reads a pool's statistics, before and after the pool closes, without keeping it open.
///
/// A metrics exporter or a test holds one to see what a pool still holds once its last [`Pool`]
/// handle is gone: blocks in live packets (`outstanding`), blocks cached by threads that have not
/// touched any pool since the close (`retained_bytes`, [`thread_caches`](Self::thread_caches)).
/// It keeps only the pool's small shared bookkeeping alive, no block.
///
/// ```
/// use packetpipe::Pool;
///
/// let pool = Pool::new();
/// let monitor = pool.monitor();
/// drop(pool.copy_from_slice(b"abc").unwrap());
/// assert_eq!(monitor.stats().retained_bytes, 64); // cached by this thread
/// drop(pool);
/// let stats = monitor.stats();
/// assert!(stats.closed);
/// assert_eq!(stats.retained_bytes, 0); // this thread's cache was freed by the close
/// assert_eq!(monitor.thread_caches(), 0);
/// ```
#[derive(Clone)]
pub struct PoolMonitor {
    shared: Arc<PoolShared>,
}

impl PoolMonitor {
    /// A snapshot of the pool's counters (as [`Pool::stats`]).
    pub fn stats(&self) -> PoolStats {
        self.shared.stats()
    }

    /// The blocks the pool has out (as [`Pool::leak_report`]), also once it closed: what is left
    /// then is what was never dropped.
    ///
    /// ```
    /// let pool = packetpipe::Pool::builder().track_leaks(true).build()?;
    /// let monitor = pool.monitor();
    /// let kept = pool.copy_from_slice(b"kept")?;
    /// let rent_line = line!() + 1;
    /// std::mem::forget(pool.copy_from_slice(b"forgotten")?);
    /// drop((pool, kept)); // the pool closes; `kept`'s block is freed
    /// let report = monitor.leak_report();
    /// assert_eq!(report.blocks().len(), 1); // the forgotten one, with its rent site
    /// assert_eq!(report.blocks()[0].rented_at.line(), rent_line);
    /// # Ok::<(), packetpipe::Error>(())
    /// ```
    pub fn leak_report(&self) -> LeakReport {
        self.shared.leak_report()
    }

    /// Live threads holding a cache for this pool. Each caches up to two magazines per class,
    /// within [`PoolBuilder::max_thread_cache_bytes`] (counted in `retained_bytes`), and keeps the
    /// pool's shared state alive; after the pool
    /// closed, a thread drops its cache at its next return on any pool or its next rent that
    /// refills a magazine, or when it exits.
    ///
    /// ```
    /// let pool = packetpipe::Pool::new();
    /// let monitor = pool.monitor();
    /// assert_eq!(monitor.thread_caches(), 0);
    /// drop(pool.rent(10).unwrap());
    /// assert_eq!(monitor.thread_caches(), 1); // this thread's
    /// ```
    pub fn thread_caches(&self) -> usize {
        self.shared.thread_caches()
    }
}

impl std::fmt::Debug for PoolMonitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolMonitor")
            .field("stats", &self.stats())
            .finish()
    }
}

/// The block types as the crate uses them: a block's home is its pool's shared state.
pub(crate) type FreeBlock = block::FreeBlock<PoolShared>;
/// A stack of a pool's free blocks (a magazine).
pub(crate) type FreeStack = block::FreeStack<PoolShared>;
/// The writable handle to a pooled block (behind `PacketBuf`).
pub(crate) type Writer = block::Writer<PoolShared>;
/// A counted view of a pooled block (behind `OwnedPacket`).
pub(crate) type Window = block::Window<PoolShared>;
/// Drops a run of windows of one pooled block with one decrement.
pub(crate) type ReleaseBatch = block::ReleaseBatch<PoolShared>;
/// Where a writer parks its pooled block's reference between writes.
pub(crate) type ParkingSlot = block::ParkingSlot<PoolShared>;
/// What a writer keeps while its block's reference is parked.
pub(crate) type ParkedWriter = block::ParkedWriter<PoolShared>;

/// A block goes home to its pool: the return path's one call is [`recycle`], static.
impl Recycle for PoolShared {
    #[inline(always)]
    fn recycle(block: FreeBlock) {
        recycle(block);
    }

    #[inline]
    fn map_from(&self) -> usize {
        self.config.map_from
    }

    #[inline]
    fn note_allocated(&self, capacity: usize) {
        PoolShared::note_allocated(self, capacity);
    }

    #[inline]
    fn note_freed(&self, capacity: usize) {
        PoolShared::note_freed(self, capacity);
    }
}

/// Send a block whose last reference dropped back to where it belongs: the one call a drop makes.
/// Its hot path (into this thread's cache) is inlined here; unpooled blocks (freed) are told
/// apart on the slow path, by their class being out of every cache's range.
#[inline(never)]
pub(crate) fn recycle(block: FreeBlock) {
    thread_cache::recycle(block);
}

/// Settings for a [`Pool`].
///
/// ```
/// let pool = packetpipe::Pool::builder()
///     .min_class_size(256)
///     .max_class_size(256 * 1024)
///     .thread_cache_depth(16)
///     .max_retained_bytes(8 << 20)
///     .max_thread_cache_bytes(2 << 20)
///     .clear_on_return(true)
///     .build()
///     .unwrap();
/// assert_eq!(pool.class_size_for(10), Some(256));
/// assert_eq!(pool.class_size_for(300 * 1024), None);
/// ```
#[derive(Debug, Clone)]
pub struct PoolBuilder {
    min_class: usize,
    max_class: usize,
    cache_depth: usize,
    magazine_bytes: usize,
    max_retained_bytes: usize,
    max_thread_cache_bytes: usize,
    clear_on_return: bool,
    track_leaks: bool,
    idle_after: Option<std::time::Duration>,
    map_large_blocks: bool,
}

impl Default for PoolBuilder {
    fn default() -> PoolBuilder {
        PoolBuilder {
            min_class: DEFAULT_MIN_CLASS,
            max_class: 1 << 20,
            cache_depth: 32,
            magazine_bytes: 256 * 1024,
            max_retained_bytes: 64 << 20,
            max_thread_cache_bytes: DEFAULT_MAX_THREAD_CACHE_BYTES,
            clear_on_return: false,
            track_leaks: false,
            idle_after: Some(DEFAULT_IDLE_EVICTION),
            map_large_blocks: true,
        }
    }
}

/// Default idle time after which depot blocks are freed: long enough that a server's bursts a
/// few seconds apart reuse their blocks, short enough that memory goes back within seconds of an
/// attack's end (when the application calls `Pool::evict_idle` from a timer).
const DEFAULT_IDLE_EVICTION: std::time::Duration = std::time::Duration::from_secs(5);

/// Smallest pooled class. BENCHMARKS.md (`buffer_cost`, `packet`) measures both sides of this:
/// in a warm single-thread loop, rent + return takes 3-4 ns at every size (about half
/// of `Vec::with_capacity(64)` + drop at 64 B, so even there the pool is no slower than glibc's
/// `malloc` + `free`); made on one thread and dropped on another (the pipe's pattern) a pooled
/// packet costs a fraction of a `Vec`, with no page faults and no allocation per operation. The
/// pool serves tiny sizes too.
const DEFAULT_MIN_CLASS: usize = 64;

/// Default bound on the bytes one thread caches for a pool: below the 6.5 MiB a thread could
/// cache at most with power-of-two classes, where four classes per doubling would allow about
/// 22 MiB (`PoolBuilder::max_thread_cache_bytes`); still 16 magazines of 256 KiB, so a thread
/// working with a handful of sizes never evicts.
const DEFAULT_MAX_THREAD_CACHE_BYTES: usize = 4 << 20;

/// Largest class the builder accepts (1 GiB).
const MAX_CLASS_LIMIT: usize = 1 << 30;

impl PoolBuilder {
    /// Smallest block size (default 64 B); smaller requests get a block of this size. Rounded up
    /// to a power of two, at least 16 B.
    pub fn min_class_size(mut self, bytes: usize) -> Self {
        self.min_class = bytes;
        self
    }

    /// Largest pooled block size (default 1 MiB); larger requests are plain allocations, freed on
    /// return. Rounded up to a power of two, at most 1 GiB. The classes in between are the powers
    /// of two and three sizes between each two (see [size classes](Pool#size-classes)).
    pub fn max_class_size(mut self, bytes: usize) -> Self {
        self.max_class = bytes;
        self
    }

    /// Blocks per thread-cache magazine for small classes (default 32). Each thread caches up to
    /// two magazines per class, within [`max_thread_cache_bytes`](Self::max_thread_cache_bytes).
    pub fn thread_cache_depth(mut self, blocks: usize) -> Self {
        self.cache_depth = blocks;
        self
    }

    /// Bytes per thread-cache magazine (default 256 KiB): large classes get fewer blocks per
    /// magazine, at least one.
    pub fn thread_cache_bytes(mut self, bytes: usize) -> Self {
        self.magazine_bytes = bytes;
        self
    }

    /// Bound on the bytes held by the shared depot (default 64 MiB); magazines beyond it are freed.
    pub fn max_retained_bytes(mut self, bytes: usize) -> Self {
        self.max_retained_bytes = bytes;
        self
    }

    /// Bound on the payload bytes one thread caches for this pool (default 4 MiB).
    ///
    /// A thread's cache holds up to two magazines per size class (see
    /// [`thread_cache_bytes`](Self::thread_cache_bytes)): with the default settings and all 57
    /// classes in use, that would be about 22 MiB per thread. The cap is kept by the cache's slow
    /// paths, so the fast rent and return cost nothing more: a class gets a loaded magazine only
    /// once its full magazine's bytes fit under the cap, evicting (to the shared depot) the
    /// magazines of other classes, oldest grant first, when needed; a full magazine is kept as the
    /// class's spare only when its bytes fit too. So one thread never caches more than this many
    /// bytes of the pool's blocks, exactly (`PoolStats::retained_bytes` counts them). A class
    /// whose single magazine is larger than the cap is not cached by threads at all: its blocks
    /// go through the depot (a lock per rent and return). 0 turns thread caching off.
    ///
    /// ```
    /// let pool = packetpipe::Pool::builder()
    ///     .max_thread_cache_bytes(64 * 1024)
    ///     .max_retained_bytes(0) // no depot: what is retained is what this thread caches
    ///     .build()
    ///     .unwrap();
    /// let held: Vec<_> = (0..100).map(|_| pool.rent(4096).unwrap()).collect();
    /// drop(held);
    /// assert!(pool.stats().retained_bytes <= 64 * 1024);
    /// ```
    pub fn max_thread_cache_bytes(mut self, bytes: usize) -> Self {
        self.max_thread_cache_bytes = bytes;
        self
    }

    /// Zero every block when it is returned, so no data outlives its packets in memory.
    pub fn clear_on_return(mut self, clear: bool) -> Self {
        self.clear_on_return = clear;
        self
    }

    /// Track every block this pool rents (default off): where it was rented (the caller of
    /// `rent`, `copy_from_slice`, `take_frame`, a pipe writer's write), where it was last sealed,
    /// sliced or taken, and when, until it comes back; [`Pool::leak_report`] lists the blocks out.
    /// For finding the packet that leaks (a `mem::forget`, a cycle, a packet kept in a
    /// long-lived map) once [`PoolStats::outstanding`] says one does.
    ///
    /// Costs when on: the pool's rents and returns skip the per-thread caches and take two locks
    /// (the shared depot's and the table's), and each seal, slice or take of its packets takes
    /// the table's lock. Costs when off: nothing on the rent and return paths (the tracking runs
    /// on their slow paths, which a tracked pool always takes), a load and a branch on the public
    /// seal, slice and take calls (`scripts/instructions.sh` measures the hot paths).
    ///
    /// ```
    /// let pool = packetpipe::Pool::builder().track_leaks(true).build()?;
    /// let (mut writer, mut reader) =
    ///     packetpipe::pipe::pipe_with(packetpipe::pipe::PipeOptions { pool: Some(pool.clone()), ..Default::default() });
    /// writer.write_slice(&[1; 64])?;
    /// writer.flush_blocking()?;
    /// reader.read_blocking()?;
    /// let take_line = line!() + 1;
    /// let frame = reader.take_frame(48)?; // copied into a block of its own (too long to be inline)
    /// std::mem::forget(frame);
    /// drop((writer, reader));
    ///
    /// let report = pool.leak_report();
    /// assert_eq!(report.blocks().len(), 1);
    /// assert_eq!(report.blocks()[0].rented_at.line(), take_line);
    /// # Ok::<(), packetpipe::Error>(())
    /// ```
    pub fn track_leaks(mut self, track: bool) -> Self {
        self.track_leaks = track;
        self
    }

    /// Free blocks that have waited in the shared depot unused for this long (default 5 s;
    /// `None` keeps them until [`Pool::trim`] or the pool closes), as ASP.NET Core's memory pool
    /// evicts idle blocks: once the load is gone, retained memory decays to what the threads'
    /// caches hold ([`max_thread_cache_bytes`](Self::max_thread_cache_bytes) each). A magazine
    /// going into the depot frees the idle ones of its class; [`Pool::evict_idle`] frees those
    /// of every class.
    pub fn idle_eviction(mut self, idle: Option<std::time::Duration>) -> Self {
        self.idle_after = idle;
        self
    }

    /// Map blocks of 128 KiB and more on their own (`mmap`, default on; Unix, not under Miri),
    /// so that freeing one gives its pages back to the system at once and a fresh one costs no
    /// page until its bytes are written. Off: every block comes from the global allocator (a
    /// `#[global_allocator]` that must see every allocation, say); glibc's then serves later
    /// large blocks from its heap, whose freed pages stay resident (BENCHMARKS.md, "Memory under
    /// attack").
    pub fn map_large_blocks(mut self, map: bool) -> Self {
        self.map_large_blocks = map;
        self
    }

    /// Build the pool. Fails if the smallest class is larger than the largest.
    pub fn build(self) -> Result<Pool, Error> {
        let round = |n: usize| n.clamp(MIN_CLASS_SIZE, MAX_CLASS_LIMIT).next_power_of_two();
        let (min_class, max_class) = (round(self.min_class), round(self.max_class));
        if min_class > max_class {
            return Err(Error::InvalidPoolConfig {
                min_class,
                max_class,
            });
        }
        let mut config = Config::new(
            min_class.trailing_zeros(),
            max_class.trailing_zeros(),
            self.cache_depth,
            self.magazine_bytes,
            self.max_retained_bytes,
            self.max_thread_cache_bytes,
            self.clear_on_return,
        );
        if self.map_large_blocks {
            config.map_from = crate::block::MAPPED_FROM;
        }
        let shared = Arc::new(PoolShared::new(config, self.track_leaks, self.idle_after));
        Ok(Pool {
            shared: shared.clone(),
            _handle: Arc::new(Handle { shared }),
        })
    }
}
