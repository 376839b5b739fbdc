//! The buffer pool (re-exported at the crate root; the guide to size classes and caches is on
//! [`Pool`]): `class.rs` the size classes, `thread_cache.rs` a thread's magazines, `shared.rs` the
//! depot they exchange with, `stats.rs` the counters, `leaks.rs` the optional record of where blocks
//! went. Each file names only those before it in the order class, stats, leaks, shared,
//! thread_cache (`tests/layers.rs` checks that no files of a module name each other in a circle).

mod class;
#[cfg(all(test, not(packetpipe_loom)))]
mod eviction_tests;
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
use class::{Config, MIN_CLASS_SIZE};
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
/// let pool = Pool::new();
/// let mut buf = pool.rent(1500).unwrap();
/// assert_eq!(buf.capacity(), 1536); // rounded up to the class size: 1.5 KiB
/// buf.extend_from_slice(b"hello").unwrap();
/// let packet = buf.seal(); // a Packet sharing the block; the buffer's tail stays writable
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
/// [`PoolOptions::track_leaks`] records where each block was rented and last sealed, sliced or
/// taken, and [`Pool::leak_report`] lists the blocks out with those sites and their age.
///
/// # Idle eviction
///
/// Blocks returned by the threads gather in the shared depot, up to
/// [`PoolOptions::max_retained_bytes`] (64 MiB by default), so that the next burst rents them
/// again instead of allocating. A pool frees the depot blocks that have waited unused for
/// [`PoolOptions::idle_eviction`] (5 s by default) by itself, on its slow paths: each magazine
/// that goes into the depot frees the idle blocks of its own size class. So the classes a server
/// keeps using hold no more than their recent peak for long, with no timer and no cost on the
/// fast paths.
///
/// What nothing frees by itself is the depot of a class no thread returns blocks of any more (the
/// large blocks of a burst of large requests that ended), and every class once the load **stops**:
/// no return runs, so those blocks stay (within `max_retained_bytes`, plus what each thread
/// caches, [`PoolOptions::max_thread_cache_bytes`]) until the pool is used again or closes.
/// Freeing them needs a clock, and the pool starts no thread of its own. So:
///
/// - a server that must give that memory back while its load is gone (long quiet periods between
///   bursts, an attack that ended, a container with a memory limit) calls [`Pool::evict_idle`]
///   from a timer of its own, about once a second, for each pool it uses (the RESP example does,
///   on the global pool); a call takes each size class's depot lock briefly and frees only what
///   has been idle for the idle time;
/// - a server that can afford to keep up to `max_retained_bytes` resident after a burst (or
///   lowers that bound instead) needs no timer; nor does one that calls [`Pool::trim`] at a
///   moment it knows is quiet.
///
/// # Closing
///
/// Dropping the last handle closes the pool: it frees the shared depot and the calling thread's
/// cache at once, and stops caching. Every other thread that cached blocks of the pool frees them
/// (and lets go of the pool's shared state) at its next return on any pool or its next rent that
/// refills a magazine (a thread that only rents does so at least once per magazine), or when it
/// exits. Blocks still referenced by packets stay valid and are freed when their last packet
/// drops.
///
/// ```
/// use packetpipe::Pool;
///
/// let pool = Pool::new();
/// let packet = pool.copy_from_slice(b"outlives the pool").unwrap();
/// drop(pool); // the last handle: the pool closes
/// assert_eq!(&packet[..], b"outlives the pool");
/// drop(packet); // freed, not cached
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
    /// A new pool with the default settings (see [`PoolOptions`]).
    pub fn new() -> Pool {
        Pool::with_options(PoolOptions::default()).expect("default pool settings are valid")
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
    /// [`track_leaks`](PoolOptions::track_leaks) (empty otherwise: see
    /// [`LeakReport::tracking`]).
    ///
    /// ```
    /// use packetpipe::BlockUse;
    ///
    /// use packetpipe::{Pool, PoolOptions};
    ///
    /// let pool = Pool::with_options(PoolOptions { track_leaks: true, ..PoolOptions::default() })?;
    /// let mut buf = pool.rent(100)?;
    /// buf.extend_from_slice(b"header:body")?;
    /// let sealed_line = line!() + 1;
    /// let packet = buf.seal();
    /// drop(buf);
    /// std::mem::forget(packet); // leaked: the block never goes home
    ///
    /// let report = pool.leak_report();
    /// let block = &report.blocks[0];
    /// let (use_, at) = block.last_use.unwrap();
    /// assert_eq!((use_, at.line()), (BlockUse::Sealed, sealed_line));
    /// assert_eq!(pool.stats().outstanding, 1);
    /// println!("{report}"); // "1 block of the pool outstanding (112 bytes):\n  112 bytes, rented 1.2ms ago at src/main.rs:4:20, last sealed at src/main.rs:7:18"
    /// # Ok::<(), packetpipe::Error>(())
    /// ```
    pub fn leak_report(&self) -> LeakReport {
        self.shared.leak_report()
    }

    /// Free the blocks held in the shared depot and in the calling thread's cache; returns the
    /// payload bytes freed. Other threads' caches (bounded by the cache settings) are untouched:
    /// they are flushed to the depot when those threads exit.
    pub fn trim(&self) -> usize {
        self.shared.drain_depots() + thread_cache::trim(&self.shared)
    }

    /// Free the depot's blocks that have waited unused for at least the pool's idle time
    /// ([`PoolOptions::idle_eviction`]); returns the payload bytes freed. Threads' own caches are
    /// not touched (each is bounded by [`PoolOptions::max_thread_cache_bytes`]; [`trim`](Self::trim)
    /// frees the calling thread's). [`PoolStats::evictions`] and [`PoolStats::evicted_bytes`]
    /// count what went back. See [idle eviction](Pool#idle-eviction) for whether to call it.
    pub fn evict_idle(&self) -> usize {
        self.shared.evict_idle(std::time::Instant::now())
    }

    /// The capacity a request of `size` bytes gets, or `None` if it is not pooled (the pipe
    /// writer's choice of block size).
    pub(crate) fn class_size_for(&self, size: usize) -> Option<usize> {
        let config = &self.shared.config;
        config
            .class_of(size.max(1))
            .map(|class| config.class_size(class))
    }

    /// [`evict_idle`](Self::evict_idle) as if the time were `now`: the crate's tests move the
    /// clock instead of sleeping.
    #[cfg(all(test, not(packetpipe_loom)))]
    pub(crate) fn evict_idle_at(&self, now: std::time::Instant) -> usize {
        self.shared.evict_idle(now)
    }
}

/// Reads a pool's statistics before and after it closes, without keeping it open: a probe for the
/// close protocol's tests and loom model, which must see what a pool still holds once its last
/// [`Pool`] handle is gone. Not part of the API (hidden; no inherent method: [`PoolProbe`]).
#[doc(hidden)]
#[derive(Clone)]
pub struct PoolMonitor {
    shared: Arc<PoolShared>,
}

impl std::fmt::Debug for PoolMonitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolMonitor")
            .field("stats", &self.shared.stats())
            .finish()
    }
}

/// The close protocol's probes ([`PoolMonitor`]), for the crate's tests and loom models: not
/// part of the API (hidden).
#[doc(hidden)]
pub trait PoolProbe {
    /// A handle that reads the pool's statistics without keeping it open.
    fn monitor(&self) -> PoolMonitor;
    /// A snapshot of the pool's counters, also once it closed.
    fn stats(&self) -> PoolStats;
    /// The blocks the pool has out, also once it closed.
    fn leak_report(&self) -> LeakReport;
    /// Live threads holding a cache for the pool.
    fn thread_caches(&self) -> usize;
}

impl PoolProbe for Pool {
    fn monitor(&self) -> PoolMonitor {
        PoolMonitor {
            shared: self.shared.clone(),
        }
    }
    fn stats(&self) -> PoolStats {
        self.shared.stats()
    }
    fn leak_report(&self) -> LeakReport {
        self.shared.leak_report()
    }
    fn thread_caches(&self) -> usize {
        self.shared.thread_caches()
    }
}

impl PoolProbe for PoolMonitor {
    fn monitor(&self) -> PoolMonitor {
        self.clone()
    }
    fn stats(&self) -> PoolStats {
        self.shared.stats()
    }
    fn leak_report(&self) -> LeakReport {
        self.shared.leak_report()
    }
    fn thread_caches(&self) -> usize {
        self.shared.thread_caches()
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

/// Settings for a [`Pool`] ([`Pool::with_options`]): plain data with a [`Default`], so a
/// configuration names only what it changes.
///
/// ```
/// use packetpipe::{Pool, PoolOptions};
///
/// let pool = Pool::with_options(PoolOptions {
///     min_class_size: 256,
///     max_class_size: 256 * 1024,
///     max_retained_bytes: 8 << 20,
///     max_thread_cache_bytes: 2 << 20,
///     clear_on_return: true,
///     ..PoolOptions::default()
/// })?;
/// assert_eq!(pool.rent(10)?.capacity(), 256); // the smallest class
/// assert_eq!(pool.rent(300 * 1024)?.capacity(), 300 * 1024); // above the largest: not pooled
/// # Ok::<(), packetpipe::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolOptions {
    /// Smallest block size (default 64 B); smaller requests get a block of this size. Rounded up
    /// to a power of two, at least 16 B.
    pub min_class_size: usize,
    /// Largest pooled block size (default 1 MiB); larger requests are plain allocations, freed on
    /// return. Rounded up to a power of two, at most 1 GiB. The classes in between are the powers
    /// of two and three sizes between each two (see [size classes](Pool#size-classes)).
    pub max_class_size: usize,
    /// Bound on the bytes held by the shared depot (default 64 MiB); magazines beyond it are
    /// freed.
    pub max_retained_bytes: usize,
    /// Bound on the payload bytes one thread caches for this pool (default 4 MiB).
    ///
    /// A thread's cache holds up to two magazines (256 KiB of blocks, at most 32 of them) per size
    /// class: with the default settings and all 57 classes in use, that would be about 22 MiB per
    /// thread. The cap is kept by the cache's slow paths, so the fast rent and return cost nothing
    /// more: a class gets a loaded magazine only once its full magazine's bytes fit under the cap,
    /// evicting (to the shared depot) the magazines of other classes, oldest grant first, when
    /// needed; a full magazine is kept as the class's spare only when its bytes fit too. So one
    /// thread never caches more than this many bytes of the pool's blocks, exactly
    /// ([`PoolStats::retained_bytes`] counts them). A class whose single magazine is larger than
    /// the cap is not cached by threads at all: its blocks go through the depot (a lock per rent
    /// and return). 0 turns thread caching off.
    ///
    /// ```
    /// use packetpipe::{Pool, PoolOptions};
    ///
    /// let pool = Pool::with_options(PoolOptions {
    ///     max_thread_cache_bytes: 64 * 1024,
    ///     max_retained_bytes: 0, // no depot: what is retained is what this thread caches
    ///     ..PoolOptions::default()
    /// })?;
    /// let held: Vec<_> = (0..100).map(|_| pool.rent(4096).unwrap()).collect();
    /// drop(held);
    /// assert!(pool.stats().retained_bytes <= 64 * 1024);
    /// # Ok::<(), packetpipe::Error>(())
    /// ```
    pub max_thread_cache_bytes: usize,
    /// Zero every block when it is returned, so no data outlives its packets in memory (default
    /// off).
    pub clear_on_return: bool,
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
    /// use packetpipe::{Pool, PoolOptions};
    ///
    /// let pool = Pool::with_options(PoolOptions { track_leaks: true, ..PoolOptions::default() })?;
    /// let (mut writer, mut reader) =
    ///     packetpipe::pipe_with(packetpipe::PipeOptions { pool: Some(pool.clone()), ..Default::default() });
    /// writer.write_slice(&[1; 64])?;
    /// writer.flush_blocking()?;
    /// reader.read_blocking()?;
    /// let take_line = line!() + 1;
    /// let frame = reader.take_frame(48)?; // copied into a block of its own (too long to be inline)
    /// std::mem::forget(frame);
    /// drop((writer, reader));
    ///
    /// let report = pool.leak_report();
    /// assert_eq!(report.blocks.len(), 1);
    /// assert_eq!(report.blocks[0].rented_at.line(), take_line);
    /// # Ok::<(), packetpipe::Error>(())
    /// ```
    pub track_leaks: bool,
    /// Free blocks that have waited in the shared depot unused for this long (default 5 s;
    /// `None` keeps them until [`Pool::trim`] or the pool closes), as ASP.NET Core's memory pool
    /// evicts idle blocks: once the load is gone, retained memory decays to what the threads'
    /// caches hold ([`max_thread_cache_bytes`](Self::max_thread_cache_bytes) each). See
    /// [idle eviction](Pool#idle-eviction) for when it runs.
    pub idle_eviction: Option<std::time::Duration>,
    /// Map blocks of 128 KiB and more on their own (`mmap`, default on; Unix, not under Miri),
    /// so that freeing one gives its pages back to the system at once and a fresh one costs no
    /// page until its bytes are written. Off: every block comes from the global allocator (a
    /// `#[global_allocator]` that must see every allocation, say); glibc's then serves later
    /// large blocks from its heap, whose freed pages stay resident (BENCHMARKS.md, "Memory under
    /// attack").
    pub map_large_blocks: bool,
    /// Blocks per thread-cache magazine for small classes (default 32): internal geometry, for
    /// the crate's tests and models (a magazine of one block keeps a loom model small).
    #[doc(hidden)]
    pub thread_cache_depth: usize,
    /// Bytes per thread-cache magazine (default 256 KiB; large classes get fewer blocks per
    /// magazine, at least one): internal geometry, as `thread_cache_depth`.
    #[doc(hidden)]
    pub thread_cache_bytes: usize,
}

impl Default for PoolOptions {
    fn default() -> PoolOptions {
        PoolOptions {
            min_class_size: DEFAULT_MIN_CLASS,
            max_class_size: 1 << 20,
            max_retained_bytes: 64 << 20,
            max_thread_cache_bytes: DEFAULT_MAX_THREAD_CACHE_BYTES,
            clear_on_return: false,
            track_leaks: false,
            idle_eviction: Some(DEFAULT_IDLE_EVICTION),
            map_large_blocks: true,
            thread_cache_depth: 32,
            thread_cache_bytes: 256 * 1024,
        }
    }
}

/// Default idle time after which depot blocks are freed: long enough that a server's bursts a
/// few seconds apart reuse their blocks, short enough that memory goes back within seconds of an
/// attack's end (when the application calls `Pool::evict_idle` from a timer, see `Pool`'s idle
/// eviction).
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
/// 22 MiB (`PoolOptions::max_thread_cache_bytes`); still 16 magazines of 256 KiB, so a thread
/// working with a handful of sizes never evicts.
const DEFAULT_MAX_THREAD_CACHE_BYTES: usize = 4 << 20;

/// Largest class the builder accepts (1 GiB).
const MAX_CLASS_LIMIT: usize = 1 << 30;

impl Pool {
    /// A new pool with `options`. Fails with [`Error::InvalidPoolConfig`] if the smallest class is
    /// larger than the largest (after rounding).
    pub fn with_options(options: PoolOptions) -> Result<Pool, Error> {
        let round = |n: usize| n.clamp(MIN_CLASS_SIZE, MAX_CLASS_LIMIT).next_power_of_two();
        let (min_class, max_class) = (round(options.min_class_size), round(options.max_class_size));
        if min_class > max_class {
            return Err(Error::InvalidPoolConfig {
                min_class,
                max_class,
            });
        }
        let mut config = Config::new(
            min_class.trailing_zeros(),
            max_class.trailing_zeros(),
            options.thread_cache_depth,
            options.thread_cache_bytes,
            options.max_retained_bytes,
            options.max_thread_cache_bytes,
            options.clear_on_return,
        );
        if options.map_large_blocks {
            config.map_from = crate::block::MAPPED_FROM;
        }
        let shared = Arc::new(PoolShared::new(
            config,
            options.track_leaks,
            options.idle_eviction,
        ));
        Ok(Pool {
            shared: shared.clone(),
            _handle: Arc::new(Handle { shared }),
        })
    }
}
