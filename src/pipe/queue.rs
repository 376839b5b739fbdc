//! The pipe's unsafe core: a single-producer/single-consumer queue of packets whose nodes are
//! recycled by the producer, so the steady state allocates nothing.
//!
//! The list follows Dmitry Vyukov's unbounded SPSC queue with a node cache:
//!
//! ```text
//!  first ... (cache) ... consumer.dummy -> [unconsumed, published] -> [staged] -> last
//! ```
//!
//! - The producer links a node as soon as it is pushed, but the consumer only ever reaches nodes
//!   whose bytes are counted in `published`, which the producer raises (Release) after linking.
//!   So "staged" nodes are linked yet invisible, and publication is a single atomic add.
//! - The consumer owns the nodes after `dummy` that `published` covers. It takes a node's packet
//!   out when it has consumed it, then moves `dummy` onto the node and stores it in `consumer_pos`
//!   (Release).
//! - The producer reuses nodes from `first` up to (not including) `consumer_pos` (loaded with
//!   Acquire, pairing with the store above): the consumer is done with them and their packets are
//!   empty.
//!
//! **Growing the last node.** Consecutive flushes of the pipe writer's buffer lie side by side in
//! one block. The producer pushes the first as a *growable* node; each later flush seals its bytes
//! in place in the block and adds their count to that node's `grown` word instead of pushing a
//! node; then it publishes as usual. The consumer, when a refresh shows more published bytes, grows
//! its last node's packet over the bytes `grown` names (up to what is published: the stream's
//! order is the last node's growth, then the nodes linked after it) and moves on to the nodes
//! linked since. So a parser sees bytes that lie side by side as one segment, and a run of small
//! flushes costs no node, no link and no reference count each. The producer grows only the node it
//! linked last, only while it holds the block's writer, and never after it has linked another
//! node; so once the consumer sees a node linked after its last one, or `GROWN_FINAL` in `grown`,
//! or takes the writer's parked block itself (the producer can no longer write the block), the
//! `grown` it loads next is final.
//!
//! Invariants the `SAFETY` comments rely on:
//!
//! 1. A node's `packet` is accessed by the producer only while the node is in the cache or
//!    staged, and by the consumer only while it is published and after `dummy`; the two regions
//!    never overlap, and every hand-over is ordered by `published` or `consumer_pos`. (`grown` is
//!    an atomic the producer writes and the consumer reads; it never touches `packet`.)
//! 2. Nodes are allocated by `Box` and freed only by `QueueShared::drop` (when both ends are gone)
//!    or by the producer for staged nodes it unlinks after the consumer has closed.
//! 3. No published node holds an empty packet (the producer never pushes one), except the
//!    consumer's last node once consumed: it stays, empty, while it may still grow, and is moved
//!    past as soon as it cannot (or a node is linked after it).
//! 4. The bytes a node's `grown` counts follow its packet in the same block and were sealed by the
//!    block's writer before the count was stored; the consumer grows the packet over them only
//!    once `published` covers them.

use std::ptr;

use crate::packet::{BufSlot, Packet, PacketBuf, ParkedBuf, ReleaseBatch};
use crate::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use crate::sync::{Arc, UnsafeCell};

/// Flag bits the pipe keeps in the high end of the published word, next to the byte count, so a
/// single load tells the consumer both how many bytes exist and whether more can come.
pub(crate) const FLAG_BITS: u32 = 2;
const COUNT_MASK: u64 = u64::MAX >> FLAG_BITS;

struct Node {
    packet: UnsafeCell<Packet>,
    next: AtomicPtr<Node>,
    /// Bytes sealed in place after the packet since it was pushed (invariant 4), with
    /// `GROWN_FINAL` once the producer will add none.
    grown: AtomicUsize,
}

/// The flag in a node's `grown` word: the producer will not grow the node again.
const GROWN_FINAL: usize = 1 << (usize::BITS - 1);

impl Node {
    fn alloc() -> *mut Node {
        Box::into_raw(Box::new(Node {
            packet: UnsafeCell::new(Packet::new()),
            next: AtomicPtr::new(ptr::null_mut()),
            grown: AtomicUsize::new(GROWN_FINAL),
        }))
    }
}

struct QueueShared {
    /// Bytes published, in the low bits; pipe flags in the top `FLAG_BITS` bits.
    published: AtomicU64,
    /// The consumer's dummy node: everything before it may be reused by the producer. (On a cache
    /// line of its own it measured no faster on the two-thread streaming bench, and it cost 336
    /// bytes per pipe, so it shares the line with `published`.)
    consumer_pos: AtomicPtr<Node>,
    /// The oldest node, recorded by the producer when it goes, for the final free.
    oldest: AtomicPtr<Node>,
    /// The producer's write buffer between publications (see `packet::BufSlot`): next to
    /// `published`, which the consumer loads anyway, since the producer writes both per flush.
    parked_tail: BufSlot,
}

impl Drop for QueueShared {
    fn drop(&mut self) {
        // Both ends are gone (they hold the Arc), so this thread owns every node (invariant 2).
        let mut node = self.oldest.load(Ordering::Acquire);
        while !node.is_null() {
            // SAFETY: the node came from `Box::into_raw` and is freed exactly once here; `next`
            // was set before it was freed, by the producer, which has finished.
            let boxed = unsafe { Box::from_raw(node) };
            node = boxed.next.load(Ordering::Relaxed);
        }
    }
}

/// Create a queue; the producer end goes to the writer, the consumer end to the reader.
pub(crate) fn queue() -> (Producer, Consumer) {
    let dummy = Node::alloc();
    // Two nodes cached from the start, besides the dummy: a stream that the consumer reads to
    // the end each time needs three (the consumer's dummy, the last node it keeps for growth,
    // invariant 3, and the one the producer pushes when its block fills meanwhile), and the third
    // is needed only when the threads' timing has it so. Allocated here, a steady stream never
    // allocates one later, at a moment that depends on that timing.
    let spare = Node::alloc();
    let second = Node::alloc();
    // SAFETY: the nodes are fresh, owned by this thread; the spares sit before the dummy, where
    // the producer's cache is (invariant 1).
    unsafe {
        (*spare).next.store(second, Ordering::Relaxed);
        (*second).next.store(dummy, Ordering::Relaxed);
    }
    let shared = Arc::new(QueueShared {
        published: AtomicU64::new(0),
        consumer_pos: AtomicPtr::new(dummy),
        oldest: AtomicPtr::new(spare),
        parked_tail: BufSlot::default(),
    });
    let producer = Producer {
        shared: shared.clone(),
        first: spare,
        consumer_copy: dummy,
        last: dummy,
        last_published: dummy,
        staged_bytes: 0,
        last_growable: false,
    };
    let consumer = Consumer {
        shared,
        dummy,
        consumed: 0,
        visible_end: 0,
        last: dummy,
        last_grown: 0,
        last_final: true,
        closed: false,
    };
    (producer, consumer)
}

// ------------------------------------------------------------------------------------------------

/// The producer end.
pub(crate) struct Producer {
    shared: Arc<QueueShared>,
    /// Oldest cached node (reusable when it differs from `consumer_copy`).
    first: *mut Node,
    /// Last seen value of `consumer_pos`.
    consumer_copy: *mut Node,
    /// The node most recently linked.
    last: *mut Node,
    /// The last node covered by `published`.
    last_published: *mut Node,
    staged_bytes: u64,
    /// `last` was pushed growable and may still grow ([`grow_last`](Producer::grow_last)).
    last_growable: bool,
}

// SAFETY: the producer's pointers refer to nodes it owns or to the shared list, whose cross-thread
// accesses follow invariant 1; moving the producer to another thread moves that ownership.
unsafe impl Send for Producer {}
// SAFETY: every method that touches nodes takes `&mut self`; `&Producer` only reads plain fields.
unsafe impl Sync for Producer {}

impl Producer {
    /// Bytes pushed but not yet published.
    #[inline]
    pub(crate) fn staged_bytes(&self) -> u64 {
        self.staged_bytes
    }

    /// Link `packet` at the end of the list, invisible to the consumer until [`publish`].
    /// Empty packets are dropped (invariant 3).
    ///
    /// [`publish`]: Producer::publish
    #[inline]
    pub(crate) fn push(&mut self, packet: Packet) {
        self.push_node(packet, false);
    }

    /// [`push`](Self::push) a packet just sealed from the pipe writer's buffer, which later
    /// flushes of that buffer grow in place ([`grow_last`](Self::grow_last)).
    #[inline]
    pub(crate) fn push_growable(&mut self, packet: Packet) {
        self.push_node(packet, true);
    }

    #[inline]
    fn push_node(&mut self, packet: Packet, growable: bool) {
        if packet.is_empty() {
            return;
        }
        self.staged_bytes += packet.len() as u64;
        let node = self.alloc_node();
        let grown = if growable { 0 } else { GROWN_FINAL };
        // SAFETY: `node` is a cached or fresh node, owned by the producer (invariant 1): nobody
        // else reads its packet, which is empty (so nothing is leaked by the overwrite).
        unsafe {
            (*node).packet.with_mut(|p| *p = packet);
            (*node).grown.store(grown, Ordering::Relaxed);
            (*node).next.store(ptr::null_mut(), Ordering::Relaxed);
            // `last` is staged or the last published node; the consumer loads its `next` only after
            // `published` covers the node linked here, which happens after this store.
            (*self.last).next.store(node, Ordering::Release);
        }
        self.last = node;
        self.last_growable = growable;
    }

    /// Whether the node linked last grows over the write buffer's next seal
    /// ([`grow_last`](Self::grow_last)).
    #[inline]
    pub(crate) fn last_growable(&self) -> bool {
        self.last_growable
    }

    /// Stage `n` bytes that the write buffer sealed in place right after the last node's bytes
    /// (invariant 4): the consumer grows that node over them once they are published.
    #[inline]
    pub(crate) fn grow_last(&mut self, n: usize) {
        assert!(self.last_growable, "growing a node that cannot grow");
        self.staged_bytes += n as u64;
        // SAFETY: `last` is linked and not reused while it is the last node (the producer reuses
        // only nodes before the consumer's dummy, and `last` is at or after it); only `grown` is
        // touched, an atomic (invariant 1).
        let grown = unsafe { &(*self.last).grown };
        // Release: the bytes sealed before this count are visible to a consumer that acquires it
        // through a node linked later (the count travels with `published` otherwise).
        grown.store(grown.load(Ordering::Relaxed) + n, Ordering::Release);
    }

    /// The write buffer goes (full, replaced, or the writer completes): the last node will not
    /// grow again. Say so in its `grown` word, so a consumer that has read all of it need not keep
    /// it (and its block) for growth that will never come.
    #[inline]
    pub(crate) fn end_growth(&mut self) {
        if std::mem::take(&mut self.last_growable) {
            // SAFETY: as in `grow_last`.
            let grown = unsafe { &(*self.last).grown };
            grown.fetch_or(GROWN_FINAL, Ordering::Release);
        }
    }

    /// The reader took the write buffer's parked block: the producer writes that block no more, so
    /// the last node cannot grow, and the reader knows it (it took the block). Nothing is stored:
    /// the reader may have moved past the node already.
    #[inline]
    pub(crate) fn forget_growth(&mut self) {
        self.last_growable = false;
    }

    #[inline]
    fn alloc_node(&mut self) -> *mut Node {
        if self.first == self.consumer_copy {
            self.consumer_copy = self.shared.consumer_pos.load(Ordering::Acquire);
        }
        if self.first != self.consumer_copy {
            let node = self.first;
            // SAFETY: `first` is before the consumer's dummy, so it is a cached node (invariant 1)
            // whose `next` was written by the producer itself when it was linked.
            self.first = unsafe { (*node).next.load(Ordering::Relaxed) };
            return node;
        }
        Node::alloc()
    }

    /// Make every staged byte visible, adding `flags` (pipe flag bits) in the same atomic step.
    /// Returns the published word as it was before. SeqCst: the pipe's wake protocol pairs this
    /// with the waiting side's SeqCst flag store (see `pipe::wait`).
    #[inline]
    pub(crate) fn publish(&mut self, flags: u64) -> u64 {
        debug_assert_eq!(flags & COUNT_MASK, 0, "flags must use only the flag bits");
        let add = self.staged_bytes | flags;
        self.staged_bytes = 0;
        self.last_published = self.last;
        if add == 0 {
            return self.shared.published.load(Ordering::SeqCst);
        }
        self.shared.published.fetch_add(add, PUBLISH_ORDERING)
    }

    /// Park the write buffer's reference (call before `publish`, so a consumer that sees the
    /// published bytes sees the parked buffer too).
    #[inline]
    pub(crate) fn park_tail(&mut self, buf: PacketBuf, credits: usize) -> ParkedBuf {
        self.shared.parked_tail.park(buf, credits)
    }

    /// Take the parked write buffer back, unless the consumer released it.
    #[inline]
    pub(crate) fn reclaim_tail(&mut self, parked: ParkedBuf) -> Option<(PacketBuf, usize)> {
        self.shared.parked_tail.reclaim(parked)
    }

    /// Drop every staged packet and free its node. Only valid once the consumer has closed (it
    /// never walks past published bytes, and a closed consumer walks nowhere).
    pub(crate) fn discard_staged(&mut self) {
        // SAFETY: nodes after `last_published` are staged: linked but never covered by
        // `published`, so the consumer has not reached and will not reach them (invariant 1).
        // They were allocated by `Box` and are unlinked here before being freed (invariant 2).
        unsafe {
            let mut node = (*self.last_published)
                .next
                .swap(ptr::null_mut(), Ordering::Relaxed);
            while !node.is_null() {
                let boxed = Box::from_raw(node);
                node = boxed.next.load(Ordering::Relaxed);
            }
        }
        self.last = self.last_published;
        self.staged_bytes = 0;
        self.last_growable = false;
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        // Hand the start of the list to the shared state for the final free (invariant 2).
        self.shared.oldest.store(self.first, Ordering::Release);
    }
}

/// Ordering of the publishing add: SeqCst (Release for the data, SeqCst for `pipe::wait`).
const PUBLISH_ORDERING: Ordering = Ordering::SeqCst;

/// A link the consumer follows because published bytes cover the node it leads to, so it is never
/// null. Checked in debug and loom builds: a model whose publication fails to order the link before
/// the count (the `relaxed_publish` mutant in loom-tests/mutants/) then fails with this panic, not a null dereference.
fn published_link(next: *mut Node) -> *mut Node {
    #[cfg(any(debug_assertions, packetpipe_loom))]
    assert!(
        !next.is_null(),
        "published bytes cover a node whose link is not visible"
    );
    next
}

/// Split the published word into (bytes, flags).
#[inline]
pub(crate) fn split_word(word: u64) -> (u64, u64) {
    (word & COUNT_MASK, word & !COUNT_MASK)
}

// ------------------------------------------------------------------------------------------------

/// The consumer end.
pub(crate) struct Consumer {
    shared: Arc<QueueShared>,
    /// The last consumed node; unconsumed data starts at its `next`.
    dummy: *mut Node,
    /// Bytes consumed since the start.
    consumed: u64,
    /// End of the bytes the consumer may access (from its last `refresh`).
    visible_end: u64,
    /// The node holding the last accessible byte (the dummy when none has come yet): the one a
    /// later publication may grow.
    last: *mut Node,
    /// Bytes of `last`'s `grown` count already added to its packet.
    last_grown: usize,
    /// `last` grows no more than its `grown` word says now (a node is linked after it, the word
    /// has `GROWN_FINAL`, or this side took the write buffer's parked block).
    last_final: bool,
    /// The consumer has let its packets go (`close`); bytes published later are dropped as they
    /// come.
    closed: bool,
}

// SAFETY: as for `Producer`: the consumer's pointers follow invariant 1, and moving the consumer
// moves its ownership of the published nodes.
unsafe impl Send for Consumer {}
// SAFETY: `&Consumer` only reads published packets, which only `&mut Consumer` changes.
unsafe impl Sync for Consumer {}

/// A look at a queue from outside its consumer, for a caller that would lock the consumer only to
/// call [`Consumer::release_parked_tail`] on an empty queue: whether that call would find
/// anything to let go.
#[derive(Clone)]
pub(crate) struct TailProbe(Arc<QueueShared>);

impl TailProbe {
    /// Nothing is parked and nothing was ever published (so no node is kept for growth either):
    /// `release_parked_tail` would release nothing. Relaxed loads: a hint, as the slot's own
    /// peek in `release` is.
    #[inline]
    pub(crate) fn holds_nothing(&self) -> bool {
        self.0.parked_tail.is_empty() && self.0.published.load(Ordering::Relaxed) & COUNT_MASK == 0
    }

    /// The producer's write buffer is parked (a Relaxed peek, a hint as in `holds_nothing`):
    /// the consumer's `release_parked_tail` would send a block home.
    #[cfg_attr(not(all(feature = "io-uring", target_os = "linux")), allow(dead_code))]
    #[inline]
    pub(crate) fn parked(&self) -> bool {
        !self.0.parked_tail.is_empty()
    }
}

impl Consumer {
    /// See [`TailProbe`].
    pub(crate) fn tail_probe(&self) -> TailProbe {
        TailProbe(self.shared.clone())
    }

    /// Load the published word, making newly published bytes accessible; returns the flags.
    #[inline]
    pub(crate) fn refresh(&mut self) -> u64 {
        crate::sync::loom_seq_cst_point();
        let (bytes, flags) = split_word(self.shared.published.load(Ordering::SeqCst));
        if bytes != self.visible_end {
            self.take_in(bytes - self.visible_end);
            self.visible_end = bytes;
        }
        flags
    }

    /// Account for `new` newly published bytes: first the growth of the last node, then the
    /// nodes linked after it, each maybe grown too (the stream's order, module docs).
    #[inline]
    fn take_in(&mut self, mut new: u64) {
        loop {
            let node = self.last;
            // Bytes the producer sealed onto the node and counted; those `published` covers are
            // visible: the count was stored before the publishing add this refresh loaded.
            // SAFETY: `last` is published or the dummy, so it is not reused (the producer reuses
            // only nodes before the dummy), and `grown` is an atomic.
            let grown = unsafe { (*node).grown.load(Ordering::Acquire) } & !GROWN_FINAL;
            let grow = ((grown - self.last_grown) as u64).min(new) as usize;
            if grow > 0 {
                self.last_grown += grow;
                new -= grow as u64;
                if node == self.dummy {
                    // Only after `close`, which moved past the last node: its later bytes are
                    // dropped as they come.
                    #[cfg(any(debug_assertions, packetpipe_loom))]
                    assert!(self.closed, "growth of a node consumed while it could grow");
                    self.consumed += grow as u64;
                } else {
                    // SAFETY: the node is published and after the dummy, so its packet is the
                    // consumer's (invariant 1); the bytes follow it in its block, sealed before
                    // their count, which a publication this thread loaded covers (invariant 4).
                    unsafe { (*node).packet.with_mut(|p| (*p).grow_sealed(grow)) };
                }
            }
            if new == 0 {
                return;
            }
            // More bytes than the growth: they are in nodes linked after this one.
            // SAFETY: as above; its `next` was stored (Release) before the publication that covers
            // the next node's bytes.
            let next = published_link(unsafe { (*node).next.load(Ordering::Acquire) });
            if node != self.dummy && self.front_is(node) && self.front_len() == 0 {
                // The last node, consumed and kept for growth, is done growing: move past it.
                drop(self.pop_front());
            }
            self.last = next;
            self.last_grown = 0;
            self.last_final = false;
            // SAFETY: `next` is published (the bytes counted in `new` cover it): the consumer's.
            let len = unsafe { (*next).packet.with(|p| (*p).byte_count()) } as u64;
            debug_assert!(len <= new, "a node of {len} bytes with {new} published");
            new -= len;
            if self.closed {
                // Dropped as it comes (see `close`).
                drop(self.pop_front());
                self.consumed += len;
            }
        }
    }

    /// Whether `node` is the first accessible one (the dummy's successor).
    #[inline]
    fn front_is(&self, node: *mut Node) -> bool {
        // SAFETY: the dummy is the consumer's (invariant 1).
        unsafe { (*self.dummy).next.load(Ordering::Acquire) == node }
    }

    /// Length of the first node's packet (0 for a last node kept for growth).
    #[inline]
    fn front_len(&self) -> usize {
        // SAFETY: called only when the dummy has a published successor (`front_is` held).
        unsafe {
            let node = (*self.dummy).next.load(Ordering::Acquire);
            (*node).packet.with(|p| (*p).byte_count())
        }
    }

    /// Whether the last node may still grow beyond what its packet holds: then it is kept, even
    /// when consumed, since the bytes of the next flush will be added to it.
    #[inline]
    fn last_may_grow(&mut self) -> bool {
        let node = self.last;
        // SAFETY: `last` is published or the dummy: not reused, and both fields are atomics.
        let (next, grown) = unsafe { (&(*node).next, &(*node).grown) };
        if !self.last_final {
            // The link first: a node linked after this one means its count is final, and the
            // Acquire load of the link makes that final count visible to the load below.
            let linked = !next.load(Ordering::Acquire).is_null();
            let count = grown.load(Ordering::Acquire);
            if !linked && count & GROWN_FINAL == 0 {
                return true;
            }
            self.last_final = true;
            return count & !GROWN_FINAL != self.last_grown;
        }
        // Final: whatever it still counts beyond what was added is on its way (published next).
        grown.load(Ordering::Acquire) & !GROWN_FINAL != self.last_grown
    }

    /// Whether a look would find nothing new, for a consumer whose last read found nothing and
    /// left its wake registered: nothing accessible, nothing published since (nor the end), no
    /// node kept for growth. One load. A hint: a publication it misses wakes the consumer.
    #[cfg_attr(not(all(feature = "io-uring", target_os = "linux")), allow(dead_code))]
    #[inline]
    pub(crate) fn is_quiet(&self) -> bool {
        self.available() == 0
            && self.last == self.dummy
            && self.shared.published.load(Ordering::Acquire) == self.visible_end
    }

    /// The producer's write buffer is parked (a Relaxed peek, as [`TailProbe::parked`]).
    #[cfg_attr(not(all(feature = "io-uring", target_os = "linux")), allow(dead_code))]
    #[inline]
    pub(crate) fn writer_parked(&self) -> bool {
        !self.shared.parked_tail.is_empty()
    }

    /// Bytes published so far, loaded now (without making them accessible).
    #[inline]
    pub(crate) fn published_bytes(&self) -> u64 {
        split_word(self.shared.published.load(Ordering::SeqCst)).0
    }

    /// Send the producer's parked write buffer home, if it is parked (the consumer goes idle),
    /// and with nothing left to read, the last node too once it cannot grow: an idle pipe then
    /// holds no block. Returns whether the last node can still grow (then its packet is the
    /// block's, and nothing may take its place: see `replace_available`).
    #[inline]
    pub(crate) fn release_parked_tail(&mut self) -> bool {
        if self.shared.parked_tail.release() {
            // The producer can no longer write the block, so the last node grows no more than
            // its count says (the swap acquired the count stored before the block was parked).
            self.last_final = true;
        }
        let may_grow = self.last_may_grow();
        if !may_grow && self.available() == 0 && self.last != self.dummy {
            // Consumed and kept for growth that will not come: its (empty) window goes.
            debug_assert!(self.front_is(self.last) && self.front_len() == 0);
            drop(self.pop_front());
        }
        may_grow
    }

    /// Let every packet go (the consumer completes or is dropped): what is accessible is consumed,
    /// the last node too even if it may grow, and bytes published later are dropped as they come.
    pub(crate) fn close(&mut self) {
        self.refresh();
        if self.closed {
            return;
        }
        let available = self.available();
        self.consume(available);
        self.closed = true;
        if self.last != self.dummy {
            // Consumed, kept for growth (`consume` moved past every other node).
            debug_assert!(self.front_is(self.last) && self.front_len() == 0);
            drop(self.pop_front());
        }
    }

    /// Bytes consumed since the start.
    #[inline]
    pub(crate) fn consumed(&self) -> u64 {
        self.consumed
    }

    /// Bytes accessible and not consumed.
    #[inline]
    pub(crate) fn available(&self) -> u64 {
        self.visible_end - self.consumed
    }

    /// The accessible packets, front to back (none empty).
    #[inline]
    pub(crate) fn packets(&self) -> Packets<'_> {
        // SAFETY: the dummy is the consumer's (invariant 1); its `next` was stored (Release) before
        // the `published` value that `refresh` loaded covered the next node.
        let next = unsafe { (*self.dummy).next.load(Ordering::Acquire) };
        let next = if self.available() > 0 {
            published_link(next)
        } else {
            next
        };
        Packets {
            node: next,
            remaining: self.available(),
            _consumer: self,
        }
    }

    /// The first accessible packet, mutably.
    #[inline]
    fn front_mut(&mut self) -> &mut Packet {
        assert!(self.available() > 0, "front_mut with nothing available");
        // SAFETY: available > 0, so the node after the dummy is published and the consumer's
        // (invariant 1); `&mut self` makes this the only access from this side.
        unsafe {
            let node = published_link((*self.dummy).next.load(Ordering::Acquire));
            (*node).packet.with_mut(|p| &mut *p)
        }
    }

    /// Move past the front node, whose packet has been consumed entirely, handing it back.
    #[inline]
    fn pop_front(&mut self) -> Packet {
        // SAFETY: as in `front_mut`; after taking the packet the node is released to the producer
        // by the Release store of `consumer_pos` (invariant 1).
        unsafe {
            let node = (*self.dummy).next.load(Ordering::Acquire);
            let packet = (*node).packet.with_mut(|p| std::mem::take(&mut *p));
            self.dummy = node;
            self.shared.consumer_pos.store(node, Ordering::Release);
            packet
        }
    }

    /// The first accessible packet, if it holds at least `n` bytes (`None` for `n == 0`): the
    /// fast path of taking a frame that lies in one segment.
    #[inline]
    pub(crate) fn front_holding(&self, n: usize) -> Option<&Packet> {
        if n == 0 || self.available() < n as u64 {
            return None;
        }
        // SAFETY: n > 0 bytes are available, so the node after the dummy is published and the
        // consumer's (invariant 1); the shared borrow of `self` keeps `consume` away meanwhile.
        let packet = unsafe {
            let node = published_link((*self.dummy).next.load(Ordering::Acquire));
            (*node).packet.with(|p| &*p)
        };
        (packet.len() >= n).then_some(packet)
    }

    /// Consume `n` bytes of the front packet when it holds more than `n` (a frame taken out of a
    /// larger segment, once per frame): inline, where [`consume`](Self::consume) is a loop over
    /// whole packets. Otherwise the same as `consume`.
    #[inline(always)]
    pub(crate) fn consume_in_front(&mut self, n: u64) {
        if n > 0 && n < self.available() {
            let front = self.front_mut();
            if front.len() as u64 > n {
                // Advance the front packet in place: no split, so no reference-count traffic.
                front.skip_front(n as usize);
                self.consumed += n;
                return;
            }
        }
        self.consume(n);
    }

    /// Whether the first node, consumed entirely, must stay (the last node, which may grow).
    #[inline]
    fn keep_front(&mut self, front_len: u64) -> bool {
        front_len == self.available() && self.last_may_grow()
    }

    /// Consume `n` accessible bytes (n <= available), dropping packets consumed entirely (except
    /// the last one while it may grow: it stays, empty).
    #[inline]
    pub(crate) fn consume(&mut self, mut n: u64) {
        assert!(
            n <= self.available(),
            "consume of {n} bytes with {} available",
            self.available()
        );
        // A run of the writer's flushes into one block is one reference-count decrement.
        let mut released = ReleaseBatch::default();
        while n > 0 {
            let front = self.front_mut();
            let len = front.len() as u64;
            if len <= n {
                if self.keep_front(len) {
                    self.front_mut().skip_front(len as usize);
                } else {
                    self.pop_front().release_into(&mut released);
                }
                self.consumed += len;
                n -= len;
            } else {
                // Advance the front packet in place: no split, so no reference-count traffic.
                front.skip_front(n as usize);
                self.consumed += n;
                n = 0;
            }
        }
    }

    /// Take the first `n` accessible bytes (n <= available) as packets, front to back, each
    /// moved out of the queue or split off its front packet, without copying.
    #[inline]
    pub(crate) fn take(&mut self, mut n: u64, mut sink: impl FnMut(Packet)) {
        assert!(
            n <= self.available(),
            "take of {n} bytes with {} available",
            self.available()
        );
        while n > 0 {
            let front = self.front_mut();
            let len = front.len() as u64;
            if len <= n {
                let packet = if self.keep_front(len) {
                    // The last node may grow: it keeps an empty window where its bytes end.
                    self.front_mut().split_to(len as usize)
                } else {
                    self.pop_front()
                };
                self.consumed += len;
                n -= len;
                sink(packet);
            } else {
                let head = front.split_to(n as usize);
                self.consumed += n;
                n = 0;
                sink(head);
            }
        }
    }
}

impl Consumer {
    /// Put `packet`, which holds a copy of every accessible byte (`packet.len() == available`),
    /// in place of the packets that held them, releasing those: a waiting reader's few bytes move
    /// out of the large blocks they pinned. Positions do not change (`consumed` stays, the bytes
    /// are the same), and only published nodes the consumer owns are touched (invariant 1): the
    /// ones before the last are moved past as `consume` does, the last keeps its place with the
    /// new packet (never empty: `available > 0`, invariant 3). Only when the last node cannot
    /// grow (`release_parked_tail` returned false): growth would extend the new packet over bytes
    /// of a block it is not in.
    pub(crate) fn replace_available(&mut self, packet: Packet) {
        assert!(!self.last_may_grow(), "replacing a node that may grow");
        assert!(
            packet.len() as u64 == self.available() && !packet.is_empty(),
            "replacement of {} accessible bytes by {}",
            self.available(),
            packet.len()
        );
        let mut released = ReleaseBatch::default();
        let mut left = self.available();
        loop {
            let front = self.front_mut();
            let len = front.len() as u64;
            if len == left {
                // The last accessible node: its packet ends where the accessible bytes do.
                std::mem::replace(front, packet).release_into(&mut released);
                return;
            }
            self.pop_front().release_into(&mut released);
            left -= len;
        }
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        // Release every published packet now, so blocks go home before the writer is done.
        self.close();
    }
}

/// Iterator over the consumer's accessible packets.
pub(crate) struct Packets<'a> {
    node: *mut Node,
    remaining: u64,
    _consumer: &'a Consumer,
}

// SAFETY: a `Packets` is a shared borrow of the consumer plus a pointer to one of the published
// nodes that borrow covers; it only reads those nodes' packets (never writes), which `&Consumer`
// (itself `Sync`) already allows from any thread. The node pointer is what a `&Consumer` would reach
// by following the same links, so moving or sharing the iterator gives no access `&Consumer`
// does not. This makes the read views (`ReadBuffer`, `SegmentIter`, `ReadCursor`) `Send + Sync`.
unsafe impl Send for Packets<'_> {}
// SAFETY: see `Send` above; `&Packets` only allows cloning the iterator (a pointer copy).
unsafe impl Sync for Packets<'_> {}

impl Clone for Packets<'_> {
    fn clone(&self) -> Self {
        Packets {
            node: self.node,
            remaining: self.remaining,
            _consumer: self._consumer,
        }
    }
}

impl<'a> Iterator for Packets<'a> {
    type Item = &'a Packet;

    #[inline]
    fn next(&mut self) -> Option<&'a Packet> {
        if self.remaining == 0 {
            return None;
        }
        // SAFETY: `remaining > 0` means this node is published (its bytes are within what the
        // consumer loaded), so it is the consumer's (invariant 1); the shared borrow of the
        // consumer for 'a prevents `consume` from changing it meanwhile.
        unsafe {
            let packet: &'a Packet = (*self.node).packet.with(|p| &*p);
            self.remaining -= packet.len() as u64;
            if self.remaining > 0 {
                self.node = published_link((*self.node).next.load(Ordering::Acquire));
            }
            Some(packet)
        }
    }
}
