//! The unsafe core: a pooled block is one heap allocation, a [`Header`] followed by the payload.
//!
//! Everything that touches raw memory in blocks lives here, behind six small owning types (and
//! the handle a parked writer keeps):
//!
//! - [`Writer`]: the one writable handle to a block (behind `PacketBuf`). It writes only at or after
//!   its `sealed` mark, and every [`Window`] it hands out lies below that mark.
//! - [`Window`]: a counted, immutable view `[data, data+len)` of a block (behind `OwnedPacket`).
//! - [`FreeBlock`]: a block nobody references, owned by the pool (or about to be freed).
//! - [`FreeStack`]: an intrusive LIFO of free blocks, linked through their headers.
//! - [`ReleaseBatch`]: drops a run of windows of one block with one decrement.
//! - [`ParkingSlot`]: where a writer parks its block's reference between writes, so the other side
//!   can give the block back when it goes idle ([`ParkedWriter`] is what the writer keeps).
//!
//! Every type is generic over the block's *home* ([`Recycle`]): where a block goes when its last
//! reference drops. The pool implements it; this module names nothing of the pool, and since the
//! crate has one home type every call to it is static.
//!
//! Invariants the `SAFETY` comments rely on:
//!
//! 1. A block's payload is zeroed when it is allocated, so every payload byte is initialized for its
//!    whole life; handing out `&[u8]` or `&mut [u8]` never exposes uninitialized memory.
//! 2. `refs` counts the `Writer` and `Window`s of a block, plus the writer's *credits*: references
//!    it counted in advance for windows it will seal (so a run of seals costs one read-modify-write,
//!    not one each); the writer gives back the unused ones when it goes. A free block (refcount
//!    dropped to zero, or the last holder took the fast path) is stored with `refs == 1`, ready to
//!    be rented again.
//! 3. Bytes covered by a `Window` are never written while another handle to the block exists: the
//!    `Writer` writes at or after `sealed`, windows lie below it, and in-place changes through a
//!    `Window` require `refs == 1` (no other window, no writer).
//! 4. `next` is read or written only while a `FreeStack` owns the block.
//! 5. A non-null `ParkingSlot` owns a parked writer's counted reference and its credits (the
//!    pointer's low bits); exactly one of `reclaim` and `release` takes them out, decided by an
//!    atomic swap.

use std::alloc::Layout;
use std::ptr::{self, NonNull};

use crate::error::Error;
use crate::sync::atomic::{fence, AtomicPtr, AtomicUsize, Ordering};
use crate::sync::Arc;

/// A block's home: it takes the block back when the last reference drops, and is told of the
/// block's allocation and freeing (the pool's shared state, `pool::PoolShared`). Each block holds
/// an `Arc` of its home for its whole life, so the home outlives every block of it.
pub(crate) trait Recycle: Sized + Send + Sync + 'static {
    /// Take back `block`, whose last reference was just dropped (it is stored with `refs == 1`,
    /// invariant 2). The one call a drop makes.
    fn recycle(block: FreeBlock<Self>);
    /// Blocks whose layout (header included) is at least this many bytes are mapped on their own
    /// (`system`).
    fn map_from(&self) -> usize;
    /// A block of `capacity` payload bytes was allocated for this home.
    fn note_allocated(&self, capacity: usize);
    /// A block of `capacity` payload bytes of this home goes back to the system.
    fn note_freed(&self, capacity: usize);
}

/// Class number of blocks allocated outside the size classes: freed on last drop, never pooled.
pub(crate) const UNPOOLED: u8 = u8::MAX;

/// Alignment of the payload (and of the allocation).
const ALIGN: usize = 16;

struct Header<H> {
    refs: AtomicUsize,
    /// The home (pool) the block returns to. The block holds this strong reference for its whole
    /// life, so the pool's shared state outlives every block, even after the last `Pool` handle
    /// drops.
    /// Every block has one (unpooled blocks too), so the return path compares it with its hot
    /// cache's pool without a null test.
    pool: Arc<H>,
    /// Link to the next block of a `FreeStack` (invariant 4).
    next: *mut Header<H>,
    /// Payload bytes. 32 bits, so that the capacity, the class and the debug flag share one word
    /// and the header is 32 bytes, not 48: every pooled block carries it (a kept 1,000-byte frame
    /// pays it on its own). It caps a block at 4 GiB (`MAX_CAPACITY`).
    capacity: u32,
    class: u8,
    /// Debug and loom builds: the block is free (returned and not rented since). A second return
    /// of a free block (a reference counted twice) panics instead of corrupting a free list.
    #[cfg(any(debug_assertions, packetpipe_loom))]
    free: crate::sync::atomic::AtomicBool,
}

/// Header size rounded up so the payload starts aligned. The same for every home: the header holds
/// the home behind an `Arc`, one pointer whatever it points to.
const HEADER_SIZE: usize = (std::mem::size_of::<Header<()>>() + ALIGN - 1) & !(ALIGN - 1);

/// The largest payload a block can have: what its 32-bit capacity holds, and no more than
/// `Layout` allows (an allocation of at most `isize::MAX` bytes).
pub(crate) const MAX_CAPACITY: usize = {
    let layout_max = isize::MAX as usize - HEADER_SIZE - (ALIGN - 1);
    if (u32::MAX as usize) < layout_max {
        u32::MAX as usize
    } else {
        layout_max
    }
};

// The header fits two 16-byte units: the payload starts 32 bytes into the block.
#[cfg(all(target_pointer_width = "64", not(packetpipe_loom)))]
const _: () = assert!(HEADER_SIZE == 32);

fn layout(capacity: usize) -> Layout {
    // Cannot fail for capacity <= MAX_CAPACITY, which `FreeBlock::allocate` checks first.
    Layout::from_size_align(HEADER_SIZE + capacity, ALIGN).expect("block layout")
}

/// Payload start of a block.
#[inline]
fn payload<H: Recycle>(block: NonNull<Header<H>>) -> *mut u8 {
    // SAFETY: the allocation is HEADER_SIZE + capacity bytes, so HEADER_SIZE is in bounds.
    unsafe { block.as_ptr().cast::<u8>().add(HEADER_SIZE) }
}

#[inline]
fn header<'a, H>(block: NonNull<Header<H>>) -> &'a Header<H> {
    // SAFETY: callers hold a counted reference or own the block, so the header is live; the only
    // field ever mutated through a raw pointer (`next`) is not touched while such a handle exists.
    unsafe { block.as_ref() }
}

/// Drop one counted reference; the last one hands the block back to its pool. Inlined into each
/// drop site, so the only call left is the one to the home's [`Recycle::recycle`] (the pool's is
/// out of line).
#[inline(always)]
fn release<H: Recycle>(block: NonNull<Header<H>>) {
    release_n(block, 1);
}

/// Drop `n` counted references held together (a writer's own and its credits); the last hands
/// the block back to its pool.
#[inline(always)]
fn release_n<H: Recycle>(block: NonNull<Header<H>>, n: usize) {
    let refs = &header(block).refs;
    // Fast path for the sole holder: when every reference is the caller's there is no one to race,
    // so skip the read-modify-write and leave `refs == 1` for the next renter (invariant 2). The
    // Acquire load pairs with the Release decrements of earlier holders, ordering their reads
    // before reuse.
    if refs.load(Ordering::Acquire) != n {
        if refs.fetch_sub(n, Ordering::Release) != n {
            return;
        }
        fence(Ordering::Acquire);
        refs.store(1, Ordering::Relaxed);
    } else if n != 1 {
        refs.store(1, Ordering::Relaxed);
    }
    #[cfg(any(debug_assertions, packetpipe_loom))]
    assert!(
        !header(block).free.swap(true, Ordering::Relaxed),
        "block {:p} returned to its pool twice: a reference was released more often than taken",
        block.as_ptr()
    );
    H::recycle(FreeBlock(block));
}

#[inline]
fn retain<H: Recycle>(block: NonNull<Header<H>>) {
    retain_n(block, 1);
}

/// Count `n` more references.
#[inline]
fn retain_n<H: Recycle>(block: NonNull<Header<H>>, n: usize) {
    let old = header(block).refs.fetch_add(n, Ordering::Relaxed);
    // As `Arc` does: a count this high means references are being leaked in a loop; abort before
    // the counter can wrap and free a block that is still in use.
    if old > isize::MAX as usize {
        std::process::abort();
    }
}

// ------------------------------------------------------------------------------------------------

/// A block that nobody references, owned by the pool or about to be freed.
pub(crate) struct FreeBlock<H: Recycle>(NonNull<Header<H>>);

// SAFETY: a FreeBlock is the unique owner of its allocation; moving it between threads moves
// ownership like a `Box`.
unsafe impl<H: Recycle> Send for FreeBlock<H> {}

impl<H: Recycle> FreeBlock<H> {
    /// Allocate a zeroed block (invariant 1) of `capacity` payload bytes.
    pub(crate) fn allocate(
        capacity: usize,
        class: u8,
        pool: Arc<H>,
    ) -> Result<FreeBlock<H>, Error> {
        if capacity > MAX_CAPACITY {
            return Err(Error::RequestTooLarge {
                requested: capacity,
                headroom: 0,
                limit: MAX_CAPACITY,
            });
        }
        let layout = layout(capacity);
        let mapped = layout.size() >= pool.map_from();
        let raw = system::alloc_zeroed(layout, mapped).cast::<Header<H>>();
        let Some(block) = NonNull::new(raw) else {
            return Err(Error::AllocationFailed {
                size: layout.size(),
            });
        };
        let header = Header {
            refs: AtomicUsize::new(1),
            pool,
            // Lossless: `capacity <= MAX_CAPACITY <= u32::MAX`, checked above.
            capacity: capacity as u32,
            class,
            next: ptr::null_mut(),
            #[cfg(any(debug_assertions, packetpipe_loom))]
            free: crate::sync::atomic::AtomicBool::new(false),
        };
        header.pool.note_allocated(capacity);
        // SAFETY: `raw` is a fresh allocation, aligned for Header (ALIGN >= align_of::<Header<()>>(),
        // checked by the const assertion below) and large enough for it.
        unsafe { block.as_ptr().write(header) };
        Ok(FreeBlock(block))
    }

    #[inline]
    pub(crate) fn class(&self) -> u8 {
        header(self.0).class
    }

    #[inline]
    pub(crate) fn capacity(&self) -> usize {
        header(self.0).capacity as usize
    }

    /// The pool this block belongs to, borrowed for as long as the block is owned.
    #[inline]
    pub(crate) fn pool(&self) -> &Arc<H> {
        &header(self.0).pool
    }

    /// The block's address: what leak tracking files it under (`pool::leaks`).
    #[inline]
    pub(crate) fn addr(&self) -> usize {
        self.0.as_ptr() as usize
    }

    /// Zero the payload (pools built with `clear_on_return`).
    pub(crate) fn zero_payload(&mut self) {
        // SAFETY: the block is uniquely owned, so no one reads the payload; it is `capacity` bytes.
        unsafe { ptr::write_bytes(payload(self.0), 0, self.capacity()) };
    }

    /// Turn the block into its writer; `headroom` bytes are left free in front for prepending.
    #[inline]
    pub(crate) fn into_writer(self, headroom: usize) -> Writer<H> {
        assert!(
            headroom <= self.capacity(),
            "headroom {headroom} exceeds capacity {}",
            self.capacity()
        );
        let block = self.0;
        std::mem::forget(self);
        #[cfg(any(debug_assertions, packetpipe_loom))]
        header(block).free.store(false, Ordering::Relaxed);
        // The free block already carries refs == 1 (invariant 2): that count is the writer's.
        Writer {
            block,
            sealed: 0,
            head: headroom,
            tail: headroom,
        }
    }
}

impl<H: Recycle> Drop for FreeBlock<H> {
    /// Return the memory to the system allocator.
    fn drop(&mut self) {
        let capacity = self.capacity();
        self.pool().note_freed(capacity);
        // Read before the header (and its pool reference) goes: `allocate` decided the same way.
        let mapped = layout(capacity).size() >= self.pool().map_from();
        // SAFETY: the block is uniquely owned and never used again; the header was written by
        // `allocate` and is dropped once here (releasing its pool reference), then the allocation
        // is freed with the layout it was made with.
        unsafe {
            ptr::drop_in_place(self.0.as_ptr());
            system::dealloc(self.0.as_ptr().cast(), layout(capacity), mapped);
        }
    }
}

/// Where block memory comes from.
///
/// Blocks of at least 128 KiB ([`MAPPED_FROM`](system::MAPPED_FROM), header included) are mapped
/// from the kernel on their own (`mmap`, Unix; not under Miri or loom, where every block comes
/// from the global allocator; a pool built with `PoolOptions::map_large_blocks: false` neither)
/// and unmapped when freed, so a freed large block gives its pages back at once:
/// a heap allocator keeps them (glibc's mmap threshold rises after the first large frees, and
/// later large blocks come from the heap, whose pages stay resident). A fresh mapping is zero
/// without being written, so a large block costs no page until its bytes are used: zeroing it
/// (invariant 1) is free. Smaller blocks come from the global allocator, zeroed
/// (`alloc_zeroed`).
mod system {
    // Where nothing is mapped, `mapped` is always false (`MAPPED_FROM` is `usize::MAX`).
    #![cfg_attr(
        not(all(unix, not(miri), not(packetpipe_loom))),
        allow(unused_variables)
    )]
    use std::alloc::{self, Layout};

    /// Blocks from this size up (header included) are mapped on their own, by default: glibc's
    /// starting mmap threshold (128 KiB). `usize::MAX` (never) where there is no mapping here.
    #[cfg(all(unix, not(miri), not(packetpipe_loom)))]
    pub(crate) const MAPPED_FROM: usize = 128 * 1024;
    #[cfg(not(all(unix, not(miri), not(packetpipe_loom))))]
    pub(crate) const MAPPED_FROM: usize = usize::MAX;

    /// Zeroed memory for `layout` (non-zero size), mapped on its own if `mapped` (and mapping
    /// exists here), or null when the system has none.
    pub(super) fn alloc_zeroed(layout: Layout, mapped: bool) -> *mut u8 {
        #[cfg(all(unix, not(miri), not(packetpipe_loom)))]
        if mapped {
            // SAFETY: an anonymous private mapping of `size` bytes at an address of the kernel's
            // choosing touches no existing memory; it is page-aligned (more than `ALIGN`) and
            // zero-filled.
            let addr = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    layout.size(),
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            return if addr == libc::MAP_FAILED {
                std::ptr::null_mut()
            } else {
                addr.cast()
            };
        }
        // SAFETY: `layout` has a non-zero size (the block header's at least).
        unsafe { alloc::alloc_zeroed(layout) }
    }

    /// Free memory from [`alloc_zeroed`].
    ///
    /// # Safety
    /// `ptr` came from `alloc_zeroed(layout, mapped)` with these arguments and is not used
    /// again.
    pub(super) unsafe fn dealloc(ptr: *mut u8, layout: Layout, mapped: bool) {
        #[cfg(all(unix, not(miri), not(packetpipe_loom)))]
        if mapped {
            // SAFETY: (the caller's contract) `ptr` is a mapping of `layout.size()` bytes made by
            // `alloc_zeroed`, unmapped once here. munmap fails only for arguments that are not a
            // mapping, which the contract rules out.
            let result = unsafe { libc::munmap(ptr.cast(), layout.size()) };
            debug_assert_eq!(result, 0, "munmap of a block's mapping");
            return;
        }
        // SAFETY: (the caller's contract) allocated by the global allocator with `layout`.
        unsafe { alloc::dealloc(ptr, layout) }
    }
}

const _: () = assert!(ALIGN >= std::mem::align_of::<Header<()>>());

pub(crate) use system::MAPPED_FROM;

// ------------------------------------------------------------------------------------------------

/// An intrusive LIFO of free blocks, linked through their headers (no allocation to push or pop).
/// All blocks of one stack have the same capacity (one size class): its byte count is computed,
/// not kept, so a push or pop touches only the link and the length.
pub(crate) struct FreeStack<H: Recycle> {
    head: Option<NonNull<Header<H>>>,
    len: usize,
}

// SAFETY: the stack uniquely owns every block on it, like a `Vec<Box<_>>`.
unsafe impl<H: Recycle> Send for FreeStack<H> {}

impl<H: Recycle> FreeStack<H> {
    pub(crate) const fn new() -> FreeStack<H> {
        FreeStack { head: None, len: 0 }
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Payload bytes held: every block has the capacity of the top one.
    pub(crate) fn bytes(&self) -> usize {
        self.head
            .map_or(0, |head| self.len * header(head).capacity as usize)
    }

    #[inline]
    pub(crate) fn push(&mut self, block: FreeBlock<H>) {
        let raw = block.0;
        debug_assert!(
            self.head.map_or(true, |head| header(head).capacity as usize
                == block.capacity()),
            "a free stack holds blocks of one capacity"
        );
        std::mem::forget(block);
        let next = self.head.map_or(ptr::null_mut(), NonNull::as_ptr);
        // SAFETY: the stack now owns the block (invariant 4), so writing its `next` races nothing.
        unsafe { ptr::addr_of_mut!((*raw.as_ptr()).next).write(next) };
        self.head = Some(raw);
        self.len += 1;
    }

    #[inline]
    pub(crate) fn pop(&mut self) -> Option<FreeBlock<H>> {
        let raw = self.head?;
        // SAFETY: the stack owns the block (invariant 4).
        let next = unsafe { ptr::addr_of!((*raw.as_ptr()).next).read() };
        self.head = NonNull::new(next);
        self.len -= 1;
        Some(FreeBlock(raw))
    }
}

impl<H: Recycle> Drop for FreeStack<H> {
    fn drop(&mut self) {
        while self.pop().is_some() {}
    }
}

// ------------------------------------------------------------------------------------------------

/// The unique writable handle to a block.
///
/// Layout of the payload: `[0, sealed)` may be covered by windows and is never written again;
/// `[sealed, head)` is headroom for prepending; `[head, tail)` is written but not yet sealed;
/// `[tail, capacity)` is free to write.
pub(crate) struct Writer<H: Recycle> {
    block: NonNull<Header<H>>,
    sealed: usize,
    head: usize,
    tail: usize,
}

/// How many references [`Writer::seal_with_credits`] counts in advance once a block is sealed a
/// second time: a writer that seals often (the pipe's writer flushes after every small frame) pays
/// one read-modify-write per this many seals. It fits the low bits of a block's address (the
/// payload alignment), where a parked writer keeps its credits (`ParkingSlot`). Loom builds use 2,
/// so the models run out and refill.
#[cfg(not(packetpipe_loom))]
const SEAL_CREDITS: usize = ALIGN - 1;
#[cfg(packetpipe_loom)]
const SEAL_CREDITS: usize = 2;
const _: () = assert!(SEAL_CREDITS < ALIGN && ALIGN.is_power_of_two());

// SAFETY: the writer is the only handle that writes the block, and it writes only bytes no window
// covers (invariant 3); the refcount is atomic. Sharing `&Writer` only allows reads of its own
// unsealed bytes.
unsafe impl<H: Recycle> Send for Writer<H> {}
// SAFETY: see above; `&Writer` exposes no mutation.
unsafe impl<H: Recycle> Sync for Writer<H> {}

impl<H: Recycle> Writer<H> {
    #[inline]
    pub(crate) fn capacity(&self) -> usize {
        header(self.block).capacity as usize
    }

    /// Written, unsealed bytes.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.tail - self.head
    }

    /// Bytes that can still be written after the tail.
    #[inline]
    pub(crate) fn remaining(&self) -> usize {
        self.capacity() - self.tail
    }

    /// Free space in front of the written bytes.
    pub(crate) fn headroom(&self) -> usize {
        self.head - self.sealed
    }

    /// The block's reference count as of now (a relaxed load: other holders may be dropping
    /// theirs meanwhile), for a caller that estimates how many of its sealed windows are alive.
    #[inline]
    pub(crate) fn refs_now(&self) -> usize {
        header(self.block).refs.load(Ordering::Relaxed)
    }

    #[inline]
    pub(crate) fn written(&self) -> &[u8] {
        // SAFETY: [head, tail) is inside the payload, initialized (invariant 1) and written only
        // through `&mut self`, so no write races this borrow.
        unsafe { std::slice::from_raw_parts(payload(self.block).add(self.head), self.len()) }
    }

    pub(crate) fn written_mut(&mut self) -> &mut [u8] {
        // SAFETY: as `written`; the bytes are at or after `sealed`, so no window covers them
        // (invariant 3), and `&mut self` makes this the only borrow.
        unsafe { std::slice::from_raw_parts_mut(payload(self.block).add(self.head), self.len()) }
    }

    /// The writable tail `[tail, capacity)`.
    #[inline]
    pub(crate) fn spare_mut(&mut self) -> &mut [u8] {
        let len = self.remaining();
        // SAFETY: [tail, capacity) is inside the payload, initialized (invariant 1), after `sealed`
        // (no window covers it) and borrowed mutably only here.
        unsafe { std::slice::from_raw_parts_mut(payload(self.block).add(self.tail), len) }
    }

    /// Mark `n` more bytes of the tail as written.
    #[inline]
    pub(crate) fn commit(&mut self, n: usize) {
        assert!(
            n <= self.remaining(),
            "commit of {n} bytes exceeds the {} writable bytes",
            self.remaining()
        );
        self.tail += n;
    }

    /// Forget the first `n` written bytes, which went elsewhere unsealed (written to a socket
    /// straight from the block): they become free space in front of the rest. Panics if fewer are
    /// written.
    #[inline]
    pub(crate) fn discard_front(&mut self, n: usize) {
        assert!(
            n <= self.len(),
            "discarding {n} bytes of {} written",
            self.len()
        );
        self.head += n;
    }

    /// With nothing written and no window of the block alive (its count is this writer's own
    /// reference plus the `credits` it counted in advance), start over at the payload's start:
    /// the whole block is free to write again. Whether it did.
    ///
    /// Sound by invariant 3: with no window, no handle but this one reads the block. The Acquire
    /// load pairs with the Release decrement of a window dropped on another thread (as
    /// [`Window::is_unique`]): that thread's reads of the bytes happen before they are written
    /// again. A window cannot appear meanwhile: only this writer seals, and clones need a window.
    #[inline]
    pub(crate) fn rewind(&mut self, credits: usize) -> bool {
        if self.head != self.tail || header(self.block).refs.load(Ordering::Acquire) != 1 + credits
        {
            return false;
        }
        self.sealed = 0;
        self.head = 0;
        self.tail = 0;
        true
    }

    /// Forget written bytes after the first `n` (no effect if fewer are written).
    pub(crate) fn truncate(&mut self, n: usize) {
        if n < self.len() {
            self.tail = self.head + n;
        }
    }

    /// Copy `bytes` into the headroom just in front of the written bytes.
    pub(crate) fn prepend(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let available = self.headroom();
        if bytes.len() > available {
            return Err(Error::NoHeadroom {
                needed: bytes.len(),
                available,
            });
        }
        let new_head = self.head - bytes.len();
        // SAFETY: [new_head, head) lies in [sealed, head): inside the payload, covered by no window
        // (invariant 3); `bytes` cannot alias it because `&mut self` is exclusive.
        unsafe {
            ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                payload(self.block).add(new_head),
                bytes.len(),
            )
        };
        self.head = new_head;
        Ok(())
    }

    /// Seal the written bytes into a window; the writer keeps the tail of the same block.
    #[inline]
    pub(crate) fn seal(&mut self) -> Window<H> {
        retain(self.block);
        self.seal_counted()
    }

    /// [`seal`](Self::seal), with the window's reference taken from `credits`: references the
    /// caller counted in advance with earlier calls (invariant 2), refilled here when none is
    /// left. The caller keeps them with this writer and gives back what is unused
    /// ([`give_back_credits`](Self::give_back_credits)) before the writer goes, or parks them with
    /// it ([`ParkingSlot::park`]).
    #[inline]
    pub(crate) fn seal_with_credits(&mut self, credits: &mut usize) -> Window<H> {
        if *credits == 0 {
            // A block's first seal counts just its window: a block written once and sealed once
            // (a large write) has nothing to give back later. From the second seal on, a batch.
            let batch = if self.sealed == 0 { 1 } else { SEAL_CREDITS };
            retain_n(self.block, batch);
            *credits = batch;
        }
        *credits -= 1;
        self.seal_counted()
    }

    /// Give back references counted in advance by [`seal_with_credits`](Self::seal_with_credits).
    /// Never the last references (this writer holds its own), so nothing is recycled here.
    #[inline]
    pub(crate) fn give_back_credits(&self, credits: usize) {
        if credits != 0 {
            // Release, as any decrement that does not recycle.
            header(self.block)
                .refs
                .fetch_sub(credits, Ordering::Release);
        }
    }

    /// Seal the written bytes into a window whose reference the caller has counted.
    #[inline]
    fn seal_counted(&mut self) -> Window<H> {
        let window = self.window_of_written();
        self.sealed = self.tail;
        self.head = self.tail;
        window
    }

    /// Seal the written bytes without a window of their own, for a caller that grows the window
    /// sealed last over them ([`Window::grow`]): they must start where that window ends, so there
    /// is no headroom in front of them (`head == sealed`). Returns how many bytes were sealed.
    #[inline]
    pub(crate) fn seal_in_place(&mut self) -> usize {
        assert_eq!(
            self.head,
            self.sealed,
            "sealing in place with {} bytes of headroom",
            self.head - self.sealed
        );
        let n = self.len();
        self.sealed = self.tail;
        self.head = self.tail;
        n
    }

    /// Seal the written bytes and give up the writer, passing its reference to the window.
    #[inline]
    pub(crate) fn into_window(self) -> Window<H> {
        let window = self.window_of_written();
        std::mem::forget(self);
        window
    }

    /// A window over [head, tail), which must be given a counted reference by the caller.
    #[inline]
    fn window_of_written(&self) -> Window<H> {
        // SAFETY: payload + head is in bounds and non-null.
        let data = unsafe { NonNull::new_unchecked(payload(self.block).add(self.head)) };
        Window {
            block: self.block,
            data,
            len: self.len(),
        }
    }
}

impl<H: Recycle> Drop for Writer<H> {
    #[inline]
    fn drop(&mut self) {
        release(self.block);
    }
}

// ------------------------------------------------------------------------------------------------

/// A counted reference to an immutable window of a block.
pub(crate) struct Window<H: Recycle> {
    block: NonNull<Header<H>>,
    data: NonNull<u8>,
    len: usize,
}

// SAFETY: the window's bytes are immutable while shared (invariant 3) and the refcount is atomic,
// so windows may move between and be shared across threads, like `Arc<[u8]>`.
unsafe impl<H: Recycle> Send for Window<H> {}
// SAFETY: see above.
unsafe impl<H: Recycle> Sync for Window<H> {}

impl<H: Recycle> Window<H> {
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: [data, data+len) is inside the payload, initialized (invariant 1) and not written
        // while this window exists (invariant 3).
        unsafe { std::slice::from_raw_parts(self.data.as_ptr(), self.len) }
    }

    /// The pool of the window's block.
    #[inline]
    pub(crate) fn pool(&self) -> &Arc<H> {
        &header(self.block).pool
    }

    /// The block's address, as [`FreeBlock::addr`].
    #[inline]
    pub(crate) fn block_addr(&self) -> usize {
        self.block.as_ptr() as usize
    }

    /// Payload bytes of the whole block: the memory this window keeps alive.
    #[inline]
    pub(crate) fn block_capacity(&self) -> usize {
        header(self.block).capacity as usize
    }

    /// Bytes between the payload start and this window.
    #[inline]
    pub(crate) fn offset(&self) -> usize {
        self.data.as_ptr() as usize - payload(self.block) as usize
    }

    /// Number of handles (windows and writer) sharing the block.
    pub(crate) fn references(&self) -> usize {
        header(self.block).refs.load(Ordering::Acquire)
    }

    /// Whether this window is the only handle to its block. The Acquire load pairs with the
    /// Release decrement of any handle dropped on another thread, as in `Arc::get_mut`.
    pub(crate) fn is_unique(&self) -> bool {
        self.references() == 1
    }

    /// Narrow to `[start, end)` of the current window.
    #[inline]
    pub(crate) fn narrow(&mut self, start: usize, end: usize) {
        assert!(
            start <= end && end <= self.len,
            "window range {start}..{end} out of bounds for length {}",
            self.len
        );
        // SAFETY: start <= len, so the result stays inside the window and is non-null.
        self.data = unsafe { NonNull::new_unchecked(self.data.as_ptr().add(start)) };
        self.len = end - start;
    }

    /// Grow this window over `next` when `next` starts where this one ends, in the same block:
    /// both are sealed bytes of that block (invariant 3 holds for their union as for each), so the
    /// joined window needs no copy and no new reference; the caller drops `next`'s. No unsafe code:
    /// a comparison of addresses.
    #[inline]
    pub(crate) fn try_join(&mut self, next: &Window<H>) -> bool {
        let adjacent = self.is_followed_by(next);
        if adjacent {
            self.len += next.len;
        }
        adjacent
    }

    /// Grow this window over the `n` bytes of its block that follow it.
    ///
    /// # Safety
    ///
    /// Those bytes were sealed by the block's writer ([`Writer::seal_in_place`]), so no handle
    /// writes them again (invariant 3), and the caller's thread has synchronized with that seal
    /// (the pipe: the publication that counted them). The bounds are checked here.
    #[inline]
    pub(crate) unsafe fn grow(&mut self, n: usize) {
        let end = self.offset() + self.len;
        assert!(
            n <= self.block_capacity() - end,
            "growing a window ending at {end} by {n} bytes overruns its block of {}",
            self.block_capacity()
        );
        self.len += n;
    }

    /// Whether [`try_join`](Self::try_join) would join `next` onto this window.
    #[inline]
    pub(crate) fn is_followed_by(&self, next: &Window<H>) -> bool {
        self.block == next.block && self.data.as_ptr().wrapping_add(self.len) == next.data.as_ptr()
    }

    /// The bytes, mutably, when this is the only handle to the block.
    pub(crate) fn get_mut(&mut self) -> Option<&mut [u8]> {
        if !self.is_unique() {
            return None;
        }
        // SAFETY: no other window or writer exists (refs == 1, observed with Acquire), so nothing
        // else reads or writes these bytes; they are in bounds and initialized.
        Some(unsafe { std::slice::from_raw_parts_mut(self.data.as_ptr(), self.len) })
    }

    /// Copy `bytes` in front of the window, growing it, when this is the only handle to the block.
    pub(crate) fn prepend(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let references = self.references();
        if references != 1 {
            return Err(Error::SharedBlock { references });
        }
        let available = self.offset();
        if bytes.len() > available {
            return Err(Error::NoHeadroom {
                needed: bytes.len(),
                available,
            });
        }
        // SAFETY: the bytes in front of the window are inside the payload (offset >= len) and, as
        // the only handle, nothing else reads or writes them; `bytes` cannot alias the block's
        // headroom because no other handle exists to have produced a slice of it.
        unsafe {
            let start = self.data.as_ptr().sub(bytes.len());
            ptr::copy_nonoverlapping(bytes.as_ptr(), start, bytes.len());
            self.data = NonNull::new_unchecked(start);
        }
        self.len += bytes.len();
        Ok(())
    }
}

impl<H: Recycle> Clone for Window<H> {
    #[inline]
    fn clone(&self) -> Window<H> {
        retain(self.block);
        Window {
            block: self.block,
            data: self.data,
            len: self.len,
        }
    }
}

impl<H: Recycle> Drop for Window<H> {
    #[inline]
    fn drop(&mut self) {
        release(self.block);
    }
}

// ------------------------------------------------------------------------------------------------

/// Drops windows with one reference-count decrement per run of consecutive windows of one block:
/// the pipe's reader consumes a writer's flushes of one block (a window each) many at a time.
///
/// A batch with a block owns `count` counted references to it (those of the windows it took).
pub(crate) struct ReleaseBatch<H: Recycle> {
    block: Option<NonNull<Header<H>>>,
    count: usize,
}

impl<H: Recycle> Default for ReleaseBatch<H> {
    fn default() -> ReleaseBatch<H> {
        ReleaseBatch {
            block: None,
            count: 0,
        }
    }
}

impl<H: Recycle> ReleaseBatch<H> {
    /// Take `window`'s reference into the batch; a window of another block first releases the
    /// batch so far.
    #[inline]
    pub(crate) fn add(&mut self, window: Window<H>) {
        let block = window.block;
        // The window's reference passes to the batch.
        std::mem::forget(window);
        if self.block != Some(block) {
            self.release();
            self.block = Some(block);
        }
        self.count += 1;
    }

    /// Drop the references held, in one decrement.
    #[inline]
    pub(crate) fn release(&mut self) {
        if let Some(block) = self.block.take() {
            release_n(block, std::mem::take(&mut self.count));
        }
    }
}

impl<H: Recycle> Drop for ReleaseBatch<H> {
    #[inline]
    fn drop(&mut self) {
        self.release();
    }
}

/// Where a [`Writer`] parks its counted reference between writes.
///
/// The pipe's writer keeps writing into the tail of one block across flushes. Once the reader has
/// consumed everything, that tail is the only thing keeping the block out of the pool, and an idle
/// connection would hold a block for as long as it stays idle. So at each flush the writer parks its
/// reference here and keeps only its positions (a [`ParkedWriter`]); at its next write it takes the
/// reference back with [`reclaim`](Self::reclaim), unless the reader, about to wait for more bytes,
/// has [`release`](Self::release)d it first (then the writer rents a fresh block). Parking is a
/// plain store into the empty slot; one atomic swap on each side (`reclaim`, `release`) decides who
/// takes the reference out; the loser does nothing. The writer's seal credits (references counted
/// in advance, [`Writer::seal_with_credits`]) are parked with it, in the address's low bits.
///
/// Invariant 5: a non-null slot owns the counted reference of the block it points to, plus as many
/// credits as its low bits say.
pub(crate) struct ParkingSlot<H: Recycle> {
    block: AtomicPtr<Header<H>>,
}

/// A writer's positions while its reference is parked. It owns no reference (dropping it does
/// nothing); only [`ParkingSlot::reclaim`] can turn it back into a [`Writer`].
pub(crate) struct ParkedWriter<H: Recycle> {
    block: NonNull<Header<H>>,
    sealed: usize,
    head: usize,
    tail: usize,
    credits: usize,
}

// SAFETY: a `ParkedWriter` is plain positions plus an address it never dereferences by itself;
// `reclaim` dereferences it only after winning the reference back.
unsafe impl<H: Recycle> Send for ParkedWriter<H> {}
// SAFETY: see above; `&ParkedWriter` exposes nothing.
unsafe impl<H: Recycle> Sync for ParkedWriter<H> {}

impl<H: Recycle> ParkedWriter<H> {
    /// Written, unsealed bytes: always 0, since only a writer with nothing unsealed is parked.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.tail - self.head
    }
}

impl<H: Recycle> Default for ParkingSlot<H> {
    fn default() -> ParkingSlot<H> {
        ParkingSlot {
            block: AtomicPtr::new(ptr::null_mut()),
        }
    }
}

impl<H: Recycle> ParkingSlot<H> {
    /// Park `writer`'s reference here with its `credits` (references counted in advance by
    /// [`Writer::seal_with_credits`]; the slot must be empty); the writer keeps its positions.
    /// Call before publishing the bytes the writer sealed: a reader that sees them then sees this.
    #[inline]
    pub(crate) fn park(&self, writer: Writer<H>, credits: usize) -> ParkedWriter<H> {
        let parked = ParkedWriter {
            block: writer.block,
            sealed: writer.sealed,
            head: writer.head,
            tail: writer.tail,
            credits,
        };
        // The credits ride in the address's low bits (zero: the block is ALIGN-aligned), so the
        // slot's one word says which references it owns.
        debug_assert!(
            credits <= SEAL_CREDITS,
            "{credits} credits do not fit the address's low bits"
        );
        let tagged = writer.block.as_ptr().wrapping_byte_add(credits);
        debug_assert_eq!(
            parked.len(),
            0,
            "only a writer with nothing unsealed is parked"
        );
        // The writer's reference passes to the slot (invariant 5). Release: the writer's writes to
        // the block happen before whoever swaps the reference out and releases it. The slot is
        // empty here (only this writer fills it, and it parks only a buffer it holds), so a plain
        // store does: the reader only ever empties the slot, and the writer's next `reclaim` swap
        // comes after this store in the slot's modification order, so it reads this store or the
        // reader's emptying swap. One read-modify-write less per flush (about 4 ns of a 55 ns
        // frame on tokio tasks, BENCHMARKS "Cheaper flush").
        #[cfg(not(packetpipe_loom))]
        {
            debug_assert!(
                self.block.load(Ordering::Relaxed).is_null(),
                "a parking slot holds one writer at a time"
            );
            self.block.store(tagged, Ordering::Release);
        }
        // Loom 0.7 does not keep a thread's store before its own later swap in the modification
        // order (tokio-rs/loom#282, #389): with the store it lets `reclaim` read an older value
        // and reports a lost block. The models use a swap, which has the same effect here.
        #[cfg(packetpipe_loom)]
        {
            let previous = self.block.swap(tagged, Ordering::AcqRel);
            assert!(
                previous.is_null(),
                "a parking slot holds one writer at a time"
            );
        }
        std::mem::forget(writer);
        parked
    }

    /// Take the parked reference back: the writer again with its credits, or `None` if the other
    /// side released them (the block may already be someone else's: the positions are forgotten,
    /// never used).
    #[inline]
    pub(crate) fn reclaim(&self, parked: ParkedWriter<H>) -> Option<(Writer<H>, usize)> {
        let taken = self.block.swap(ptr::null_mut(), Ordering::AcqRel);
        if taken.is_null() {
            return None;
        }
        assert_eq!(
            taken,
            parked.block.as_ptr().wrapping_byte_add(parked.credits),
            "only its own writer reclaims a slot"
        );
        // The reference the slot owned (invariant 5) is the writer's again; its positions are the
        // ones it was parked with, and nobody wrote the block's tail meanwhile (windows lie below
        // `sealed`, invariant 3).
        let writer = Writer {
            block: parked.block,
            sealed: parked.sealed,
            head: parked.head,
            tail: parked.tail,
        };
        Some((writer, parked.credits))
    }

    /// Whether the slot holds no parked reference, as a Relaxed peek (a hint: a writer on another
    /// thread may park right after).
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.block.load(Ordering::Relaxed).is_null()
    }

    /// Release the parked reference, if any (the reader going idle); whether this call took it
    /// (then the writer can write the block no more). A Relaxed peek first skips the swap when
    /// the slot is empty: a park this misses is followed by a publish, which the caller will see
    /// before it waits again, and then it releases.
    #[inline]
    pub(crate) fn release(&self) -> bool {
        if self.is_empty() {
            return false;
        }
        let taken = self.block.swap(ptr::null_mut(), Ordering::AcqRel);
        if let Some(tagged) = NonNull::new(taken) {
            let credits = tagged.as_ptr() as usize & (ALIGN - 1);
            let block = NonNull::new(taken.wrapping_byte_sub(credits))
                .expect("a parked block's address is not null");
            // The slot's references (invariant 5): the writer's own and its credits, dropped
            // together here. AcqRel on the swap orders the parking writer's writes before the
            // block can go back to the pool.
            release_n(block, 1 + credits);
            return true;
        }
        false
    }
}

impl<H: Recycle> Drop for ParkingSlot<H> {
    fn drop(&mut self) {
        let _ = self.release();
    }
}
