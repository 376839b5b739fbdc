//! Per-thread caches: two magazines per size class, refilled from and spilled to the shared depot
//! a whole magazine at a time, so the common rent and return take no lock and no atomic RMW.
//!
//! This is the magazine scheme of Bonwick's slab allocator: a thread rents from its `loaded`
//! magazine and returns into it; when `loaded` runs empty (or full) it swaps with `spare` before
//! touching the depot, so a thread bouncing around a boundary does not hit the lock every time.
//!
//! The byte cap (`PoolOptions::max_thread_cache_bytes`) is kept by the slow paths alone: a class
//! fills a loaded magazine only once it holds a grant of its full magazine's bytes, and a spare is
//! kept only if its bytes fit as well; making room evicts other classes' magazines to the depot
//! (`ThreadCache::grant`, `reserve`, `evict`). The fast paths never see the cap: a class without a
//! grant has an empty loaded magazine and no room (`fast_capacity` 0), so its rents and returns
//! take the slow path, which grants.
//!
//! Closing. When the last `Pool` handle drops, the closing thread frees the depot and its own
//! cache, but it cannot reach other threads' caches (they take no lock, that is the point of
//! them). Instead it sets the *close notice* of every thread registered with the pool (one flag
//! per thread, kept with the thread's statistics slot). Every return on any pool, and every rent
//! that leaves the fast path, loads this thread's own notice (`sweep_if_needed`: one load of a
//! line no other thread writes until a pool closes) and, when it is set, drops this thread's
//! caches of closed pools: their blocks are freed and their hold on the pool's shared state and
//! statistics slot released. The fast rent skips the notice: it rents from an open pool (through
//! a handle), so the notice can only concern other pools' caches, and a thread that only rents
//! leaves the fast path at least once per magazine (when it runs empty). A thread that never
//! touches a pool again keeps its cache until it exits; `PoolStats::retained_bytes` and
//! the close protocol's probe (`PoolProbe::thread_caches`) show it. Blocks of a closed pool returned later are freed at once,
//! without registering a cache.
//!
//! Why a flag per thread and not one global "close epoch" word: the hot path then reads only
//! memory its own thread owns (no line shared with every thread of the process), and a close
//! disturbs only the threads that cached the closing pool.
//!
//! The hot path. A rent or return that the last-used pool's cache can serve
//! runs inline, with no call (rent) or one call (return, `pool::recycle`), in 20-30 instructions
//! each: the thread-local's address (a `const` thread-local with no destructor, so no
//! lazy-initialization check), one compare of the pool with the key of the hot cache's shelf
//! (`Shelf`: the hot cache sits there, outside the `RefCell` the other caches are in, so
//! this compare is also the borrow check), the close notice on a return (through the hot cache's
//! own clone of it), the class's magazine (a fixed table of `CLASS_SLOTS` entries indexed with a
//! mask, no bounds check), the pop or push, and one counter on the thread's statistics slot (the
//! class's rents or returns, which also stands for the cached bytes, exactly: see `pool::stats`).
//! Everything else (spare swap, depot, fresh allocation, spill, clearing on return, unpooled
//! blocks, registering a cache, sweeping) is `#[cold]` and out of line, and takes the hot cache
//! off the shelf while it runs (`with_caches`).

use std::cell::RefCell;

use super::class::{class_slot, CLASS_SLOTS};
use super::shared::{CloseNotice, PoolShared};
use super::stats::{bump, bump_class, bump_shared, unbump, Slot};
use super::{FreeBlock, FreeStack};
use crate::block::UNPOOLED;
use crate::error::Error;
use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::{thread_local, Arc};

/// The magazine a class rents from and returns into (its spare is in `ThreadCache::spares`: the
/// fast paths touch only this, and 32 bytes index with one shift).
struct Magazines {
    loaded: FreeStack,
    capacity: usize,
    /// Blocks the fast return path may put in `loaded`: `capacity`, or 0 for a pool that clears
    /// returned blocks (its returns all take the slow path, which clears them), so the fast path
    /// tests one number for both.
    fast_capacity: usize,
}

/// One thread's cache for one pool. The fields the fast paths read are `pub(crate)` for
/// `Shelf`, which runs them.
pub(crate) struct ThreadCache {
    pool: Arc<PoolShared>,
    slot: Arc<Slot>,
    /// Indexed by [`class_slot`]; the entries past the pool's classes stay empty with no room.
    classes: Box<[Magazines; CLASS_SLOTS]>,
    /// Each class's second magazine, swapped with `loaded` when that runs empty or full.
    spares: Box<[FreeStack]>,
    /// This thread's close notice (a clone of `ThreadCaches::notice`), checked by the fast return.
    notice: CloseNotice,
    /// The byte cap (`PoolOptions::max_thread_cache_bytes`), kept by the slow paths alone: a class
    /// may fill a loaded magazine only once it holds a *grant* of its full magazine's bytes, and a
    /// spare is kept only when its bytes fit too. `reserved` is the granted bytes plus the spares'
    /// bytes and never exceeds the cap; what the cache holds never exceeds `reserved`.
    granted: Box<[bool]>,
    reserved: usize,
    /// Where the next eviction looks first (a clock over the classes).
    hand: usize,
}

impl ThreadCache {
    fn new(pool: Arc<PoolShared>, notice: &CloseNotice) -> ThreadCache {
        let config = pool.config;
        // The fast return path sends an unpooled block (`UNPOOLED`, the table's last entry) to the
        // slow path by that entry's capacity of 0.
        assert!(config.classes() < CLASS_SLOTS - 1, "too many size classes");
        let classes: Box<[Magazines]> = (0..CLASS_SLOTS)
            .map(|class| Magazines {
                loaded: FreeStack::new(),
                capacity: if class < config.classes() {
                    config.magazine_len(class)
                } else {
                    0
                },
                // No grant yet: the first return of the class takes the slow path, which grants
                // it (`grant`).
                fast_capacity: 0,
            })
            .collect();
        let classes = classes
            .try_into()
            .unwrap_or_else(|_| unreachable!("CLASS_SLOTS entries"));
        let spares = (0..config.classes()).map(|_| FreeStack::new()).collect();
        let slot = pool.claim_slot(notice);
        ThreadCache {
            pool,
            slot,
            classes,
            spares,
            notice: CloseNotice::clone(notice),
            granted: vec![false; config.classes()].into_boxed_slice(),
            reserved: 0,
            hand: 0,
        }
    }

    /// Bytes of a full loaded magazine of `class`: what a grant reserves.
    fn magazine_bytes(&self, class: usize) -> usize {
        self.classes[class].capacity * self.pool.config.class_size(class)
    }

    /// Whether `class` may fill a loaded magazine: granted before, or granted now, evicting other
    /// classes if the cap needs it. `false` when the class's magazine alone is over the cap.
    fn grant(&mut self, class: usize) -> bool {
        if self.granted[class] {
            return true;
        }
        if !self.reserve(self.magazine_bytes(class), class) {
            return false;
        }
        self.granted[class] = true;
        let mags = &mut self.classes[class];
        mags.fast_capacity = if self.pool.config.clear_on_return {
            0 // every return takes the slow path, which clears the block
        } else {
            mags.capacity
        };
        true
    }

    /// Reserve `bytes` under the cap, evicting classes other than `keep` (oldest grant first, in
    /// clock order) until they fit; `false` (nothing reserved) if they cannot.
    fn reserve(&mut self, bytes: usize, keep: usize) -> bool {
        let cap = self.pool.config.max_thread_cache_bytes;
        let classes = self.pool.config.classes();
        let mut looked = 0;
        // Checked: with "unlimited" settings (a cap of usize::MAX) the sum may not fit.
        let fits = |reserved: usize| reserved.checked_add(bytes).is_some_and(|sum| sum <= cap);
        while !fits(self.reserved) && looked < classes {
            let victim = self.hand;
            self.hand = (self.hand + 1) % classes;
            looked += 1;
            if victim != keep {
                self.evict(victim);
            }
        }
        if !fits(self.reserved) {
            return false;
        }
        self.reserved += bytes;
        true
    }

    /// Give `class`'s cached blocks to the depot and take its grant back.
    fn evict(&mut self, class: usize) {
        let spare = std::mem::replace(&mut self.spares[class], FreeStack::new());
        self.reserved -= spare.bytes();
        self.spill(class, spare);
        if std::mem::take(&mut self.granted[class]) {
            self.reserved -= self.magazine_bytes(class);
            let mags = &mut self.classes[class];
            mags.fast_capacity = 0;
            let loaded = std::mem::replace(&mut mags.loaded, FreeStack::new());
            self.spill(class, loaded);
        }
    }

    /// A magazine leaves this cache for the depot (which frees it if the pool is closed or the
    /// depot is full).
    fn spill(&mut self, class: usize, magazine: FreeStack) {
        unbump(&self.slot.cached_bytes, magazine.bytes() as u64);
        self.pool.put_magazine(class, magazine);
    }

    /// Payload bytes held in this cache.
    fn cached_bytes(&self) -> usize {
        let loaded: usize = self.classes.iter().map(|mags| mags.loaded.bytes()).sum();
        loaded + self.spares.iter().map(FreeStack::bytes).sum::<usize>()
    }

    /// A block from the loaded magazine, or `None` when it is empty (the slow rent's pop; the
    /// fast one is `Shelf::pop`). Counted here: one rent, and the block's bytes leave the cache.
    fn pop(&mut self, class: usize) -> Option<FreeBlock> {
        let slot = class_slot(class);
        let block = self.classes[slot].loaded.pop()?;
        // As the fast rent: the class count stands for the rent and the bytes.
        bump_class(&self.slot.class_rents[slot]);
        Some(block)
    }

    /// A rent that the loaded magazine cannot serve: the spare magazine, a magazine from the
    /// depot, or a fresh allocation.
    #[cold]
    #[inline(never)]
    fn rent(&mut self, class: usize) -> Result<FreeBlock, Error> {
        if !self.grant(class) {
            // The class's magazine alone is over the cap: rent past the cache.
            if let Some(mut magazine) = self.pool.take_magazine(class) {
                let block = magazine.pop().expect("depot magazines are never empty");
                self.pool.put_magazine(class, magazine);
                bump(&self.slot.rents, 1);
                return Ok(block);
            }
        } else if self.classes[class].loaded.is_empty() {
            let spare = std::mem::replace(&mut self.spares[class], FreeStack::new());
            if !spare.is_empty() {
                // Inside the class's grant now, no longer a spare.
                self.reserved -= spare.bytes();
                self.classes[class].loaded = spare;
            } else if let Some(magazine) = self.pool.take_magazine(class) {
                // At most a full magazine: inside the grant.
                bump(&self.slot.cached_bytes, magazine.bytes() as u64);
                self.classes[class].loaded = magazine;
            }
        }
        if let Some(block) = self.pop(class) {
            return Ok(block);
        }
        let size = self.pool.config.class_size(class);
        let block = FreeBlock::allocate(size, class as u8, self.pool.clone())?;
        bump(&self.slot.fresh, 1);
        bump(&self.slot.rents, 1);
        Ok(block)
    }

    /// A return the fast path left: clear the block if the pool says so, then into the loaded
    /// magazine (granting the class one if it has none), moving a full one to the spare (if its
    /// bytes fit under the cap) or spilling a full magazine to the depot.
    #[cold]
    #[inline(never)]
    fn recycle(&mut self, mut block: FreeBlock) {
        if self.pool.config.clear_on_return {
            block.zero_payload();
        }
        let class = block.class() as usize;
        if !self.grant(class) {
            // The class's magazine alone is over the cap: past the cache, to the depot.
            bump(&self.slot.returns, 1);
            self.pool.put_block(block);
            return;
        }
        if self.classes[class].loaded.len() >= self.classes[class].capacity {
            // The full magazine becomes the spare if its bytes fit under the cap; a spare already
            // there (the older blocks) goes to the depot first.
            let full = std::mem::replace(&mut self.classes[class].loaded, FreeStack::new());
            let old = std::mem::replace(&mut self.spares[class], FreeStack::new());
            self.reserved -= old.bytes();
            self.spill(class, old);
            if self.reserve(full.bytes(), class) {
                self.spares[class] = full;
            } else {
                self.spill(class, full);
            }
        }
        // As the fast return: the class count stands for the return and the bytes.
        bump_class(&self.slot.class_returns[class_slot(class)]);
        self.classes[class].loaded.push(block);
    }

    /// Move every cached block of this thread to the depot (or free them if the pool is closed).
    fn flush(&mut self) {
        for class in 0..self.pool.config.classes() {
            let loaded = std::mem::replace(&mut self.classes[class].loaded, FreeStack::new());
            let spare = std::mem::replace(&mut self.spares[class], FreeStack::new());
            self.pool.put_magazine(class, loaded);
            self.pool.put_magazine(class, spare);
        }
        self.slot.set_cached_bytes(0, &self.pool.config);
    }

    /// Free every cached block of this thread; returns the payload bytes freed.
    fn trim(&mut self) -> usize {
        let freed_bytes = self.cached_bytes();
        let mut freed = 0;
        for mags in self.classes.iter_mut() {
            freed += mags.loaded.len();
            mags.loaded = FreeStack::new();
        }
        for spare in self.spares.iter_mut() {
            freed += spare.len();
            *spare = FreeStack::new();
        }
        bump(&self.slot.frees, freed as u64);
        self.slot.set_cached_bytes(0, &self.pool.config);
        // The spares are gone; the grants stay.
        self.reserved = (0..self.pool.config.classes())
            .filter(|&class| self.granted[class])
            .map(|class| self.magazine_bytes(class))
            .sum();
        freed_bytes
    }
}

impl Drop for ThreadCache {
    fn drop(&mut self) {
        if self.pool.is_closed() {
            // The depot would free them anyway (taking its lock once per magazine): free here.
            self.trim();
        } else {
            self.flush();
        }
        // Hand the slot to the next thread; its counts stay in the totals.
        self.slot.in_use.store(false, Ordering::Release);
    }
}

/// This thread's caches, one per pool it has used. The one used last is the hot one: on the shelf
/// between slow paths (the fast paths find it there with one compare; most threads use one pool),
/// in `hot` while a slow path runs; the others are scanned linearly and a hit moves to the front.
struct ThreadCaches {
    hot: Option<ThreadCache>,
    others: Vec<ThreadCache>,
    /// Set by a pool closing while this thread has a cache for it; made with the first cache.
    notice: Option<NoticeField>,
}

#[cfg(not(packetpipe_loom))]
type NoticeField = CloseNotice;

/// Loom builds leak the notice of a thread unwinding from a failed model (see `Drop` below).
#[cfg(packetpipe_loom)]
type NoticeField = std::mem::ManuallyDrop<CloseNotice>;

impl ThreadCaches {
    /// No cache and no notice yet: a constant, so the thread-local needs no lazy initialization.
    const fn new() -> ThreadCaches {
        ThreadCaches {
            hot: None,
            others: Vec::new(),
            notice: None,
        }
    }

    /// Take the hot cache off the shelf into `hot` (unless `hot` holds it already: a slow path
    /// that unwound left it there).
    fn unshelve(&mut self, shelf: &Shelf) {
        if self.hot.is_none() {
            self.hot = shelf.take();
        }
    }

    /// Drop the caches of pools closed since the last sweep, if a closing pool said so.
    #[inline(always)]
    fn sweep_if_needed(&mut self) {
        // Relaxed: a stale `false` only delays the sweep to a later operation; the swap in
        // `sweep` is what synchronizes with the closer.
        if let Some(notice) = &self.notice {
            if notice.load(Ordering::Relaxed) {
                self.sweep();
            }
        }
    }

    #[cold]
    #[inline(never)]
    fn sweep(&mut self) {
        let Some(notice) = &self.notice else { return };
        // Acquire pairs with the closer's Release store, made after it set `closed`: every pool
        // that set the notice is seen closed below. A pool closing after this swap sets it again.
        if notice.swap(false, Ordering::Acquire) {
            // Dropping a closed pool's cache frees its blocks, its slot and its shared state.
            if self.hot.as_ref().is_some_and(|c| c.pool.is_closed()) {
                self.hot = None;
            }
            self.others.retain(|c| !c.pool.is_closed());
        }
    }

    /// The hot cache, if it is `pool`'s.
    #[inline(always)]
    fn hot(&mut self, pool: &PoolShared) -> Option<&mut ThreadCache> {
        self.hot
            .as_mut()
            .filter(|c| std::ptr::eq(Arc::as_ptr(&c.pool), pool))
    }

    /// This thread's cache for `pool`, moved to the front, or `None`.
    fn find(&mut self, pool: &Arc<PoolShared>) -> Option<&mut ThreadCache> {
        if self.hot(pool).is_none() {
            let index = self
                .others
                .iter()
                .position(|c| Arc::ptr_eq(&c.pool, pool))?;
            let cache = self.others.swap_remove(index);
            if let Some(previous) = self.hot.replace(cache) {
                self.others.push(previous);
            }
        }
        self.hot.as_mut()
    }

    /// This thread's cache for `pool`, registered if there is none (the slow path: the pool must
    /// be open, or the cache would only hold blocks nobody can rent); `None` if this thread is
    /// exiting and has dropped its caches already (see [`may_register`]).
    fn get_or_register(&mut self, pool: &Arc<PoolShared>) -> Option<&mut ThreadCache> {
        if self.find(pool).is_none() {
            if !may_register() {
                return None;
            }
            let notice = self.notice.get_or_insert_with(|| {
                let notice = Arc::new(AtomicBool::new(false));
                #[cfg(packetpipe_loom)]
                let notice = std::mem::ManuallyDrop::new(notice);
                notice
            });
            let cache = ThreadCache::new(pool.clone(), notice);
            if let Some(previous) = self.hot.replace(cache) {
                self.others.push(previous);
            }
        }
        self.hot.as_mut()
    }
}

/// Loom builds only: when a model fails, loom drops its threads' locals while unwinding, outside
/// the model, where touching a loom atomic panics again and aborts the whole test process (so a
/// failing model, or a mutant's `should_panic` test, would abort instead of failing). Leak the
/// caches and the close notice in that case; a normal thread exit drops them inside the model as
/// usual.
#[cfg(packetpipe_loom)]
impl Drop for ThreadCaches {
    fn drop(&mut self) {
        if std::thread::panicking() {
            std::mem::forget(self.hot.take());
            std::mem::forget(std::mem::take(&mut self.others));
        } else {
            // Caches first: each one's slot entry holds its own clone of the notice.
            self.hot = None;
            self.others.clear();
            // Out of its `ManuallyDrop` and dropped here, inside the model (no unsafe needed).
            drop(self.notice.take().map(std::mem::ManuallyDrop::into_inner));
        }
    }
}

/// This thread's caches: the hot one on the shelf (`Shelf`, where the fast paths reach it
/// without a borrow flag), the others, and the hot one while a slow path has it out, in the
/// `RefCell` (`with_caches`).
struct Store {
    shelf: Shelf,
    caches: RefCell<Stored>,
}

/// Normal builds: the caches live in a `const` thread-local whose value needs no destructor (the
/// caches are wrapped in `ManuallyDrop`, the shelf has no drop glue), so reaching it is a plain
/// thread-local address, with no check of a "not yet initialized / already destroyed" state on
/// every rent and return. A second thread-local, [`Teardown`], made when the thread registers its
/// first cache, drops the caches when the thread exits.
#[cfg(not(packetpipe_loom))]
type Stored = std::mem::ManuallyDrop<ThreadCaches>;

/// Loom builds: loom takes all of a thread's locals out before dropping any, so `Teardown` could
/// not reach the caches there; their own destructors run instead (`Drop for Store`, then `Drop for
/// ThreadCaches`).
#[cfg(packetpipe_loom)]
type Stored = ThreadCaches;

#[cfg(not(packetpipe_loom))]
thread_local! {
    static CACHES: Store = const {
        Store {
            shelf: Shelf::new(),
            caches: RefCell::new(std::mem::ManuallyDrop::new(ThreadCaches::new())),
        }
    };
    static TEARDOWN: Teardown = const { Teardown };
}

// Loom's `thread_local!` takes no `const` initializer.
#[cfg(packetpipe_loom)]
thread_local! {
    static CACHES: Store = Store {
        shelf: Shelf::new(),
        caches: RefCell::new(ThreadCaches::new()),
    };
}

/// Loom builds: the hot cache goes back with the others before they are dropped (or leaked, when
/// the thread unwinds from a failed model: see `Drop for ThreadCaches`).
#[cfg(packetpipe_loom)]
impl Drop for Store {
    fn drop(&mut self) {
        let hot = self.shelf.take();
        if std::thread::panicking() {
            std::mem::forget(hot);
        } else if let Ok(mut caches) = self.caches.try_borrow_mut() {
            if caches.hot.is_none() {
                caches.hot = hot;
            } else {
                caches.others.extend(hot);
            }
        }
    }
}

/// Drops this thread's caches when the thread exits (normal builds; see [`Stored`]).
#[cfg(not(packetpipe_loom))]
struct Teardown;

#[cfg(not(packetpipe_loom))]
impl Drop for Teardown {
    fn drop(&mut self) {
        // Taken out first and dropped after the borrow ends. `CACHES` has no destructor, so it is
        // reachable for as long as the thread runs; from here on `may_register` says no and later
        // returns (another thread-local's destructor dropping a packet) go to the depot.
        let caches = CACHES
            .try_with(|store| {
                let mut caches = store.caches.try_borrow_mut().ok()?;
                let mut caches = std::mem::replace(&mut **caches, ThreadCaches::new());
                caches.unshelve(&store.shelf);
                Some(caches)
            })
            .ok()
            .flatten();
        drop(caches);
    }
}

/// Whether this thread may register a cache: not once it is dropping its caches at exit (a cache
/// made then would never be dropped). The first call registers [`Teardown`].
#[inline]
fn may_register() -> bool {
    #[cfg(not(packetpipe_loom))]
    return TEARDOWN.try_with(|_| ()).is_ok();
    #[cfg(packetpipe_loom)]
    return true;
}

/// Run `f` on this thread's caches after a sweep; `None` if thread-local storage is being torn
/// down or already borrowed (a drop running inside the cache code).
#[inline(always)]
fn with_caches<R>(f: impl FnOnce(&mut ThreadCaches) -> Option<R>) -> Option<R> {
    let mut f = Some(f);
    CACHES
        .try_with(|store| {
            let mut caches = store.caches.try_borrow_mut().ok()?;
            let f = f.take()?;
            // The hot cache off the shelf, so the slow path sees all caches in one place (and a
            // fast path reentering meanwhile misses, then finds the `RefCell` borrowed).
            caches.unshelve(&store.shelf);
            caches.sweep_if_needed();
            let result = f(&mut caches);
            // Back on the shelf (whichever cache is hot now). Not on unwinding: then the hot
            // cache stays in the `RefCell` and the next slow path puts it back.
            if let Some(hot) = caches.hot.take() {
                caches.others.extend(store.shelf.put(hot));
            }
            result
        })
        .ok()
        .flatten()
}

/// Rent a free block of `class` from this thread's cache, the depot, or the system.
///
/// The hot path (this thread's cache of `pool` is the hot one and its loaded magazine has a
/// block) is inlined into the caller; everything else is [`rent_slow`].
#[inline(always)]
#[track_caller]
pub(crate) fn rent(pool: &Arc<PoolShared>, class: usize) -> Result<FreeBlock, Error> {
    match CACHES.try_with(|store| store.shelf.pop(pool, class)) {
        Ok(Some(block)) => Ok(block),
        // The caller's location goes to the slow path only (a constant once inlined): where a
        // pool that tracks leaks records it.
        _ => rent_slow(pool, class, std::panic::Location::caller()),
    }
}

#[cold]
#[inline(never)]
fn rent_slow(
    pool: &Arc<PoolShared>,
    class: usize,
    site: &'static std::panic::Location<'static>,
) -> Result<FreeBlock, Error> {
    if let Some(leaks) = &pool.leaks {
        // A tracked pool has no thread caches (their fast paths would not record): every rent
        // comes here.
        let block = rent_uncached(pool, class)?;
        leaks.rented(block.addr(), block.capacity(), site);
        return Ok(block);
    }
    if let Some(result) = with_caches(|caches| Some(caches.get_or_register(pool)?.rent(class))) {
        return result;
    }
    rent_uncached(pool, class)
}

/// A rent without a thread cache: from the depot directly, or a fresh block.
fn rent_uncached(pool: &Arc<PoolShared>, class: usize) -> Result<FreeBlock, Error> {
    if let Some(mut magazine) = pool.take_magazine(class) {
        let block = magazine.pop().expect("depot magazines are never empty");
        pool.put_magazine(class, magazine);
        bump_shared(&pool.shared_counts.rents, 1);
        return Ok(block);
    }
    let block = FreeBlock::allocate(pool.config.class_size(class), class as u8, pool.clone())?;
    // Counted only once the block exists, as in `ThreadCache::rent`: a refused allocation is not
    // a rent, and counting it would leave `outstanding` above zero for good.
    bump_shared(&pool.shared_counts.rents, 1);
    bump_shared(&pool.shared_counts.fresh, 1);
    Ok(block)
}

/// Take back a pooled block whose last reference was dropped.
///
/// The hot path (the block's pool is this thread's hot cache and the loaded magazine has room)
/// takes no branch out of this function; everything else is [`recycle_slow`].
#[inline(always)]
pub(crate) fn recycle(block: FreeBlock) {
    let mut pending = Some(block);
    let _ = CACHES.try_with(|store| {
        if let Some(block) = pending.take() {
            pending = store.shelf.push(block).err();
        }
    });
    if let Some(block) = pending {
        recycle_slow(block);
    }
}

#[cold]
#[inline(never)]
fn recycle_slow(block: FreeBlock) {
    if let Some(leaks) = &block.pool().leaks {
        // A tracked pool has no thread caches (see `rent_slow`): every return comes here.
        leaks.returned(block.addr());
        if block.class() == UNPOOLED {
            return free_uncached(block);
        }
        return return_uncached(block);
    }
    if block.class() == UNPOOLED {
        return free_uncached(block);
    }
    let mut pending = Some(block);
    with_caches(|caches| {
        let block = pending.take()?;
        // Looked up by the block's own reference: no clone (a shared atomic) on the hot path.
        let pool = block.pool();
        if pool.is_closed() && caches.find(pool).is_none() {
            // A closed pool caches nothing: free the block without registering a cache.
            free_uncached(block);
        } else if caches.get_or_register(pool).is_some() {
            caches.find(pool).expect("registered").recycle(block);
        } else {
            pending = Some(block); // exiting: to the depot
        }
        Some(())
    });
    if let Some(block) = pending {
        return_uncached(block);
    }
}

/// A return without a thread cache: to the depot (which frees it if the pool is closed).
fn return_uncached(mut block: FreeBlock) {
    // Keep the pool alive independently of the block, which may be freed.
    let pool = block.pool().clone();
    bump_shared(&pool.shared_counts.returns, 1);
    // The depot hands this block to the next renter as is: clear it here, as the cached path
    // does in `ThreadCache::recycle`.
    if pool.config.clear_on_return {
        block.zero_payload();
    }
    pool.put_block(block);
}

/// Free a block that no cache takes: one allocated outside the size classes, or one of a closed
/// pool that this thread has no cache for. Counted as a return and a free.
#[cold]
fn free_uncached(block: FreeBlock) {
    let pool = block.pool();
    bump_shared(&pool.shared_counts.returns, 1);
    bump_shared(&pool.shared_counts.frees, 1);
    drop(block); // frees it
}

/// Free this thread's cached blocks of `pool` (registering no cache); returns the bytes freed.
pub(crate) fn trim(pool: &Arc<PoolShared>) -> usize {
    with_caches(|caches| Some(caches.find(pool).map_or(0, ThreadCache::trim))).unwrap_or(0)
}

/// Drop this thread's caches of closed pools now (the closing thread calls this so its own cache
/// goes at once, without waiting for its next pool operation). Registers nothing.
pub(crate) fn sweep_closed() {
    with_caches(|caches| {
        caches.sweep();
        Some(())
    });
}

// ------------------------------------------------------------------------------------------------

/// Where a thread keeps the cache of the pool it used last (its *hot* cache), reachable by the
/// pool's fast rent and return without a borrow flag.
///
/// A `RefCell` around the thread's caches costs every rent and every return a flag test, a store
/// and a restore; and the pool pointer compare that finds the hot cache comes on top. Here the
/// compare is the borrow: `key` holds the hot cache's pool key ([`pool_key`]) while the cache is on
/// the shelf, [`EMPTY`] while it is not (no hot cache, or a slow path has it out). [`pop`](Self::pop) and
/// [`push`](Self::push) touch the cache only when the caller's pool key equals `key`, and they run
/// no code that could reach the shelf again: field reads and writes, a [`FreeStack`] pop or push
/// (no drop, no panic) and the owner-only statistics stores ([`bump`], [`unbump`]: one Relaxed load
/// and store each). Everything else ([`take`](Self::take), [`put`](Self::put)) moves the cache out
/// or in by value, dropping nothing, so no destructor runs while the cell is accessed.
///
/// The shelf invariant: `cache` is accessed only inside this type's methods, each of which holds its
/// reference only for its own duration and calls nothing that can reach the same shelf; `key` is
/// [`EMPTY`] when `cache` is `None`, else the key of the cache's pool. The shelf is `!Sync` (it is
/// a thread-local), so no other thread sees it.
///
/// No drop glue (the cache is in a `ManuallyDrop`): a thread-local holding it needs no destructor
/// and so no "initialized yet?" check on each access. Whoever owns the thread-local takes the
/// cache out at thread exit (`pool::thread_cache`).
struct Shelf {
    key: std::cell::Cell<usize>,
    cache: std::cell::UnsafeCell<std::mem::ManuallyDrop<Option<ThreadCache>>>,
}

/// The key of an empty shelf: no pool has it. A pool's `Arc` pointer is aligned to 8 at least (the
/// pool holds `usize`s), so its key, that address less 16, is a multiple of 8 and never this.
const EMPTY: usize = usize::MAX;

/// The key the shelf compares: the pool's address, less 16 (the `Arc` counts in front of the
/// value in std's layout), so that comparing a pool's `Arc` with a key folds into one compare of
/// the `Arc`'s own pointer. Any constant would be correct (keys are compared with keys), only this
/// one saves the add; no address is dereferenced.
#[inline(always)]
fn pool_key(pool: &Arc<PoolShared>) -> usize {
    (Arc::as_ptr(pool) as usize).wrapping_sub(16)
}

impl Shelf {
    const fn new() -> Shelf {
        Shelf {
            key: std::cell::Cell::new(EMPTY),
            cache: std::cell::UnsafeCell::new(std::mem::ManuallyDrop::new(None)),
        }
    }

    /// Take the cache off the shelf (the slow paths work on it as part of all the thread's
    /// caches); the fast paths miss until it is put back.
    #[inline]
    fn take(&self) -> Option<ThreadCache> {
        self.key.set(EMPTY);
        // SAFETY: the shelf invariant: no other reference to `cache` exists while this method runs; the
        // cache is moved out, nothing is dropped.
        unsafe { (*self.cache.get()).take() }
    }

    /// Put `cache` on the shelf as the hot cache; returns what was there (nothing, when the slow
    /// paths take before they put), for the caller to drop.
    #[inline]
    fn put(&self, cache: ThreadCache) -> Option<ThreadCache> {
        let key = pool_key(&cache.pool);
        // SAFETY: the shelf invariant, as in `take`; the previous cache is moved out, not dropped.
        let previous = unsafe { (*self.cache.get()).replace(cache) };
        self.key.set(key);
        previous
    }

    /// The hot cache, if it is the one of the pool with key `key`.
    ///
    /// # Safety
    ///
    /// `key` comes from [`pool_key`]. The caller (`pop`, `push`) holds the returned reference only
    /// for the rest of its own body and calls nothing that can reach this shelf meanwhile
    /// (the shelf invariant).
    // A `&mut` from `&self` is what a cell hands out; exclusivity is the caller's side of the
    // contract above (the shelf invariant), which is why this is an `unsafe fn`.
    #[allow(clippy::mut_from_ref)]
    #[inline(always)]
    unsafe fn hot(&self, key: usize) -> Option<&mut ThreadCache> {
        if self.key.get() != key {
            return None;
        }
        // SAFETY: `key` is a pool's key, never `EMPTY`, and it matched, so `cache` is `Some`
        // (the shelf invariant); the caller keeps the reference to itself (see above). Unchecked: the key
        // compare is the only test the fast paths make.
        Some(unsafe { (*self.cache.get()).as_mut().unwrap_unchecked() })
    }

    /// The fast rent: a block of `class` from the loaded magazine of `pool`'s cache, if `pool`'s
    /// cache is on the shelf and the magazine is not empty. Counts one rent; the block's bytes
    /// leave the cache.
    ///
    /// No close-notice check here (the fast return makes it): `pool` is open (the caller rents
    /// through a handle), so the notice can only be about other pools' caches, and a thread that
    /// only rents reaches the slow path, which sweeps, at least once per magazine.
    #[inline(always)]
    fn pop(&self, pool: &Arc<PoolShared>, class: usize) -> Option<FreeBlock> {
        // SAFETY: `cache` is used only in this method, which calls only field accesses, a
        // `FreeStack` pop and the statistics stores (the shelf invariant).
        let cache = unsafe { self.hot(pool_key(pool)) }?;
        let slot = class_slot(class);
        let block = cache.classes[slot].loaded.pop()?;
        // One count for the rent and the bytes that left the cache (see `pool::stats`).
        bump_class(&cache.slot.class_rents[slot]);
        Some(block)
    }

    /// The fast return: into the loaded magazine of the block's pool's cache if that cache is on
    /// the shelf, no pool closed since the last sweep, and the magazine has room (a pool that
    /// clears returned blocks has none: `fast_capacity` 0). Else the block comes back. An unpooled
    /// block comes back too: its class, `UNPOOLED`, indexes the table's last entry, which has no
    /// room.
    #[inline(always)]
    fn push(&self, block: FreeBlock) -> Result<(), FreeBlock> {
        // SAFETY: as in `pop`: field accesses, a `FreeStack` push, the statistics stores.
        let Some(cache) = (unsafe { self.hot(pool_key(block.pool())) }) else {
            return Err(block);
        };
        if cache.notice.load(Ordering::Relaxed) {
            return Err(block);
        }
        let slot = class_slot(usize::from(block.class()));
        let mags = &mut cache.classes[slot];
        if mags.loaded.len() >= mags.fast_capacity {
            return Err(block);
        }
        // One count for the return and the bytes that entered the cache (see `pool::stats`).
        bump_class(&cache.slot.class_returns[slot]);
        mags.loaded.push(block);
        Ok(())
    }
}
