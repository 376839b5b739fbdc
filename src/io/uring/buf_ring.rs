//! A provided-buffer ring whose buffers are pooled blocks.
//!
//! The kernel picks receive buffers from this ring for each multishot receive completion, so
//! the bytes land straight in pooled blocks. Each slot (buffer id) owns the [`PacketBuf`] it
//! offers: the kernel writes into that buffer's free tail from the moment the slot is published
//! at the ring's tail until the completion that gives the slot back. Then [`BufRing::take`]
//! commits the received bytes, seals them into a [`Packet`] (a reference on the block,
//! which outlives the slot), and the slot is offered again: the rest of the same block when
//! enough of it is left (several small receives share one block), a fresh block otherwise.
//!
//! The kernel consumes the ring in the order of its entries, from its head, whatever receive
//! takes the buffers. A completion names the first buffer its bytes went to; with receive
//! bundles (`IORING_RECVSEND_BUNDLE`) the bytes may go on into the buffers of the entries after
//! it, each filled to its end before the next. [`BufRing::take`] walks them the way the kernel
//! commits them (`io_kbuf_commit`): with incremental consumption (`IOU_PBUF_RING_INC`) a buffer
//! filled to its end is given back and the walk goes on to the next entry, and the last one, if
//! bytes are left in it, stays in the ring (the kernel writes the next receive after these
//! bytes); without it, every buffer the bytes reached is given back, the last one partly filled.
//! The completion's `IORING_CQE_F_BUF_MORE` (the kernel keeps the buffer) decides only for a
//! completion within one buffer, where it is exact (a receive the kernel runs outside the ring's
//! lock commits the whole buffer when it picks it, and leaves the flag off, bytes left or not);
//! for one that spans several buffers the walk decides, since on kernels that append a second
//! receive to a bundle's completion the flag describes the first receive.
//!
//! Ownership, which every `unsafe` block below relies on:
//! 1. The ring's memory (one mmap of `entries` 16-byte entries) is registered with the kernel
//!    from [`BufRing::register`] until [`BufRing::unregister`]; it is unmapped only after that
//!    (or, if unregistering failed, never).
//! 2. A slot whose buffer is offered (`offered[bid]`) belongs to the kernel: this side never
//!    forms a reference into its free tail, and its `PacketBuf` is neither dropped nor moved out
//!    until the completion that gives it back (one whose bytes fill it to its end, one within it
//!    without `IORING_CQE_F_BUF_MORE`, or without incremental consumption any completion whose
//!    bytes reach it), or until the ring is unregistered. Moving the `PacketBuf` value itself is fine: the block it points to does not
//!    move.
//! 3. Bytes a completion reports as received are initialized and no longer written by the
//!    kernel once this side has read the completion (the completion queue's acquire load orders
//!    them before).
//! 4. A buffer id is in at most one ring entry at a time: it is published once per offer, and
//!    offered again only after the completion that gives it back (rule 2). The ring never holds
//!    more entries than ids, so publishing at the tail never overwrites an entry the kernel has
//!    not consumed (the partly used buffer an incremental ring keeps at its head included).
//!    A completion's later buffers are found by their entries, each checked to hold a buffer
//!    still offered there (an entry published again since names another position).
//!
//! Why a completion can never name bytes another packet holds: a packet holds only sealed bytes
//! of its block, all in front of the slot's write position; the kernel writes only at and after
//! that position, which it tracks as this side does. It starts where the slot was offered, and
//! each completion whose bytes go to the buffer moves both by the bytes that went there: this
//! side takes the completions in the order the completion queue gives them, which is the order
//! the kernel consumed the ring in (one thread issues and runs every receive, the kernel posts a
//! request's completions in order and flushes the completions it deferred before it posts
//! another multishot one, and the queue keeps its order through overflow). Once the kernel gives
//! the slot back, the rest of the block is offered again (the same argument holds for it) or the
//! slot's reference is dropped, and the block goes back to the pool only with the last packet's
//! reference (the block's count): the pool never lends a block a packet still holds, so the
//! kernel never writes one either. Which connection the bytes belong to is the completion's user
//! data (the connection's slot and generation): a receive's descriptor stays open until its last
//! completion, so no receive of a closed connection can read another connection's socket (the
//! driver's `Conn::recvs`).

use std::io;
use std::sync::atomic::{AtomicU16, Ordering};

use io_uring::types::BufRingEntry;
use io_uring::IoUring;

use crate::packet::{Packet, PacketBuf};
use crate::pool::Pool;

/// `IOU_PBUF_RING_INC`: the kernel consumes a provided buffer a receive at a time.
const IOU_PBUF_RING_INC: u16 = 2;

/// The provided-buffer ring of one driver: `entries` slots of blocks of `buffer_size` bytes.
pub(super) struct BufRing {
    /// Start of the mmap'd entries (page-aligned, as the kernel requires).
    entries: *mut BufRingEntry,
    count: u16,
    mask: u16,
    /// Our copy of the tail: the next entry to publish at.
    tail: u16,
    group: u16,
    buffer_size: usize,
    /// A block with fewer free bytes than this after a receive is not offered again.
    min_offer: usize,
    incremental: bool,
    pool: Pool,
    /// `offered[bid]`: the buffer the kernel may write into (rule 2).
    offered: Vec<Option<PacketBuf>>,
    /// `left[bid]`: the bytes the kernel may still write into offered buffer `bid` (its entry's
    /// length, less what completions have reported in it).
    left: Vec<u32>,
    /// `position[bid]`: where offered buffer `bid` was published (the tail before it).
    position: Vec<u16>,
    /// `published[entry]`: the buffer id last written to that entry (this side's copy: the
    /// kernel writes the entries' addresses and lengths as it consumes them).
    published: Vec<u16>,
    /// Buffer ids without a buffer (the pool refused one): offered again by `refill`.
    missing: Vec<u16>,
    registered: bool,
}

impl BufRing {
    /// Map the entries and rent a block for each; [`register`](Self::register) hands them over.
    pub(super) fn new(
        count: u16,
        group: u16,
        buffer_size: usize,
        incremental: bool,
        pool: Pool,
    ) -> io::Result<BufRing> {
        if !count.is_power_of_two() || count > 32768 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a buffer ring needs a power of two of 1 to 32768 entries, not {count}"),
            ));
        }
        let bytes = usize::from(count) * std::mem::size_of::<BufRingEntry>();
        // SAFETY: an anonymous private mapping of `bytes` bytes; no file, no address hint. The
        // result is checked for MAP_FAILED before use.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let mut ring = BufRing {
            entries: map.cast(),
            count,
            mask: count - 1,
            tail: 0,
            group,
            buffer_size,
            min_offer: (buffer_size / 8).max(512).min(buffer_size),
            incremental,
            pool,
            offered: (0..count).map(|_| None).collect(),
            left: vec![0; usize::from(count)],
            position: vec![0; usize::from(count)],
            published: vec![0; usize::from(count)],
            missing: (0..count).collect(),
            registered: false,
        };
        ring.refill();
        Ok(ring)
    }

    /// Register the ring as buffer group `group` of `uring`. A kernel without incremental
    /// consumption (before Linux 6.12) refuses the flag with `EINVAL`: the ring is then
    /// registered without it, and [`is_incremental`](Self::is_incremental) says so.
    pub(super) fn register(&mut self, uring: &IoUring) -> io::Result<()> {
        loop {
            let flags = if self.incremental {
                IOU_PBUF_RING_INC
            } else {
                0
            };
            // SAFETY: `entries` is a page-aligned mapping of `count` entries that stays mapped
            // until `unregister` has succeeded (rule 1; `Drop` unmaps only then).
            let registered = unsafe {
                uring.submitter().register_buf_ring_with_flags(
                    self.entries as u64,
                    self.count,
                    self.group,
                    flags,
                )
            };
            match registered {
                Ok(()) => break,
                Err(e) if self.incremental && e.raw_os_error() == Some(libc::EINVAL) => {
                    self.incremental = false;
                }
                Err(e) => return Err(e),
            }
        }
        self.registered = true;
        Ok(())
    }

    /// Whether the kernel consumes the buffers incrementally.
    pub(super) fn is_incremental(&self) -> bool {
        self.incremental
    }

    /// Take the ring back from the kernel: once this returns, the kernel writes into no offered
    /// buffer, and dropping the ring returns every block to the pool. Callers make sure no
    /// receive is in flight (each was cancelled and its last completion read).
    pub(super) fn unregister(&mut self, uring: &IoUring) -> io::Result<()> {
        if self.registered {
            uring.submitter().unregister_buf_ring(self.group)?;
            self.registered = false;
        }
        Ok(())
    }

    /// The buffer group id receives name.
    pub(super) fn group(&self) -> u16 {
        self.group
    }

    /// Whether any buffer is offered (a receive re-armed now would not fail at once).
    pub(super) fn has_buffers(&self) -> bool {
        self.missing.len() < usize::from(self.count)
    }

    /// The `n` bytes a completion received from buffer `bid` on, sealed into one packet per
    /// buffer they went to, in order, pushed to `packets`; how many buffers that was (more than
    /// one only with bundles). `more` is the completion's `IORING_CQE_F_BUF_MORE`. Offers the
    /// buffers the kernel gave back again.
    ///
    /// An error if the bytes do not fit the buffers offered from `bid` on (a completion this
    /// ring cannot account for): the buffers walked until then are taken as above, the one the
    /// walk found wrong and those after it are left as they are.
    pub(super) fn take(
        &mut self,
        bid: u16,
        n: usize,
        more: bool,
        packets: &mut Vec<Packet>,
    ) -> io::Result<usize> {
        let mut bid = bid;
        let mut rest = n;
        let mut buffers = 0;
        loop {
            let Some(buf) = self
                .offered
                .get_mut(usize::from(bid))
                .and_then(Option::as_mut)
            else {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("the kernel named buffer {bid}, which this ring does not offer"),
                ));
            };
            let left = self.left[usize::from(bid)] as usize;
            let here = rest.min(left);
            // Rule 3: the kernel wrote these bytes at the start of the buffer's free tail (where
            // this ring offered it, or, incrementally, right after its last receive, which `seal`
            // moved the tail past). `commit` checks them against the free bytes.
            buf.commit(here).map_err(io::Error::other)?;
            packets.push(buf.seal());
            buffers += 1;
            rest -= here;
            // The entry after this buffer's: where the kernel went on, if bytes are left.
            let next = self.position[usize::from(bid)].wrapping_add(1);
            // Bytes left in the buffer: it is the completion's last. Within one buffer the flag
            // says whether the kernel kept it; across several, the kernel's commit did.
            if self.incremental && here < left && (more || buffers > 1) {
                // The kernel keeps the buffer at its head for the next receive (rule 2 holds).
                self.left[usize::from(bid)] = (left - here) as u32;
            } else {
                // The kernel gave the slot back (rule 2 ends): offer the rest, or a new block.
                let buf = self.offered[usize::from(bid)].take();
                match buf {
                    Some(buf) if bytes::BufMut::remaining_mut(&buf) >= self.min_offer => {
                        self.offer(bid, buf)
                    }
                    _ => self.missing.push(bid),
                }
            }
            if rest == 0 {
                return Ok(buffers);
            }
            // The bytes went on into the buffer of the next entry, which must be one the kernel
            // still has (published there, not given back).
            let candidate = self.published[usize::from(next & self.mask)];
            let offered_there = self.offered[usize::from(candidate)].is_some()
                && self.position[usize::from(candidate)] == next;
            if !offered_there {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "a receive of {n} bytes runs past the buffers offered after buffer {bid}"
                    ),
                ));
            }
            bid = candidate;
        }
    }

    /// Offer a fresh block in every slot without one, as far as the pool gives them.
    pub(super) fn refill(&mut self) {
        while let Some(&bid) = self.missing.last() {
            match self.pool.rent(self.buffer_size) {
                Ok(buf) => {
                    self.missing.pop();
                    self.offer(bid, buf);
                }
                Err(_) => break,
            }
        }
    }

    /// Publish `buf`'s free tail as buffer `bid` at the ring's tail.
    fn offer(&mut self, bid: u16, mut buf: PacketBuf) {
        let spare = buf.spare_mut();
        let (addr, len) = (
            spare.as_mut_ptr() as u64,
            spare.len().min(u32::MAX as usize),
        );
        let index = usize::from(self.tail & self.mask);
        // SAFETY: `index < count`, inside the mapping (rule 1). Entry `index` is free for us to
        // write: the kernel has consumed every entry before the published tail that we reuse (a
        // ring never holds more offered buffers than entries, one per buffer id).
        unsafe {
            let entry = &mut *self.entries.add(index);
            entry.set_addr(addr);
            entry.set_len(len as u32);
            entry.set_bid(bid);
        }
        // From here until the completion that gives `bid` back, the kernel may write the `len`
        // bytes at `addr`: `buf` (and its block) stays in `offered[bid]` until then (rule 2).
        self.offered[usize::from(bid)] = Some(buf);
        self.left[usize::from(bid)] = len as u32;
        self.position[usize::from(bid)] = self.tail;
        self.published[index] = bid;
        self.tail = self.tail.wrapping_add(1);
        // SAFETY: the tail field lies inside the first entry of the mapping (rule 1), 2-aligned;
        // the kernel reads it with an acquire load, so this release store publishes the entry
        // written above. Nothing else writes it.
        unsafe {
            let tail = BufRingEntry::tail(self.entries) as *const AtomicU16;
            (*tail).store(self.tail, Ordering::Release);
        }
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        if self.registered {
            // The kernel may still write into the offered blocks: keep them and the mapping
            // (a leak, never a write into freed memory; rule 1 and 2).
            std::mem::forget(std::mem::take(&mut self.offered));
            return;
        }
        let bytes = usize::from(self.count) * std::mem::size_of::<BufRingEntry>();
        // SAFETY: the mapping made in `new`, no longer registered with the kernel, unmapped once.
        unsafe {
            libc::munmap(self.entries.cast(), bytes);
        }
    }
}

/// The ring's accounting against a model of the kernel's side (`io_ring_buffers_peek` and
/// `io_kbuf_commit`), without a kernel: receives of random sizes, one buffer or a bundle of
/// several, incremental or not, across the ring's wrap; the packets must hold exactly the bytes
/// "received", in order, and every block must go back to the pool.
#[cfg(test)]
mod tests {
    use super::*;

    /// How the kernel runs a receive, as far as the ring can tell.
    #[derive(Clone, Copy)]
    enum Receive {
        /// One buffer, committed after the receive.
        Single,
        /// One buffer, committed whole when picked (a receive run outside the ring's lock).
        Unlocked,
        /// Buffers from the head on, as many as the bytes fill; the completion's flag is that of
        /// its first receive of one buffer (a kernel appending a second receive to a bundle).
        Bundle,
    }

    /// The kernel's view of one buffer ring: its head, and the entries this side published.
    struct Kernel {
        head: u16,
        incremental: bool,
    }

    impl Kernel {
        /// Receive `data` (or as much of it as the ring's buffers from the head on take, one
        /// buffer only unless a bundle) as the kernel does: fill the buffers in entry order, then
        /// commit. The completion's (first buffer id, bytes, `IORING_CQE_F_BUF_MORE`).
        fn receive(
            &mut self,
            ring: &BufRing,
            data: &[u8],
            how: Receive,
        ) -> Option<(u16, usize, bool)> {
            let bundle = matches!(how, Receive::Bundle);
            // SAFETY: the tail field of the test's own mapping, written by this thread only.
            let tail = unsafe { *BufRingEntry::tail(ring.entries) };
            if tail == self.head {
                return None; // ENOBUFS
            }
            let entry = |at: u16| {
                // SAFETY: an entry inside the mapping, published by `offer` (this thread).
                unsafe { &mut *ring.entries.add(usize::from(at & ring.mask)) }
            };
            let first = entry(self.head).bid();
            let (mut at, mut done, mut touched) = (self.head, 0, 0);
            while done < data.len() && at != tail {
                let e = entry(at);
                let here = (data.len() - done).min(e.len() as usize);
                // SAFETY: the entry's `len` bytes at `addr` are the free tail of the block its
                // buffer id offers, which the ring lends to "the kernel" (rule 2).
                unsafe {
                    std::ptr::copy_nonoverlapping(data[done..].as_ptr(), e.addr() as *mut u8, here)
                };
                done += here;
                touched += 1;
                at = at.wrapping_add(1);
                if !bundle {
                    break;
                }
            }
            // Commit, as `io_kbuf_commit` does.
            let mut rest = done;
            let mut kept = false;
            if matches!(how, Receive::Unlocked) {
                // The whole buffer, when it was picked.
                let e = entry(self.head);
                e.set_len(0);
                self.head = self.head.wrapping_add(1);
            } else if self.incremental {
                while rest > 0 {
                    let e = entry(self.head);
                    let here = rest.min(e.len() as usize);
                    e.set_len(e.len() - here as u32);
                    if e.len() > 0 {
                        e.set_addr(e.addr() + here as u64);
                        kept = true;
                        break;
                    }
                    self.head = self.head.wrapping_add(1);
                    rest -= here;
                }
            } else {
                self.head = at;
            }
            // A bundle's second receive (any buffer after its first) keeps the first's flag: the
            // first receive filled its one buffer, so the flag is off.
            let spanned = touched > 1;
            Some((first, done, kept && !spanned))
        }
    }

    impl Kernel {
        /// The ring's entries from the kernel's head to the tail are exactly the buffers this
        /// side counts as offered, each with the bytes it counts as left in it.
        fn agrees_with(&self, ring: &BufRing) {
            // SAFETY: the tail field of the test's own mapping, written by this thread only.
            let tail = unsafe { *BufRingEntry::tail(ring.entries) };
            let offered = ring.offered.iter().filter(|b| b.is_some()).count();
            assert_eq!(usize::from(tail.wrapping_sub(self.head)), offered);
            let mut at = self.head;
            while at != tail {
                // SAFETY: an entry inside the mapping, published by `offer` (this thread).
                let entry = unsafe { &*ring.entries.add(usize::from(at & ring.mask)) };
                let bid = usize::from(entry.bid());
                assert!(
                    ring.offered[bid].is_some(),
                    "entry {at}: buffer {bid} offered"
                );
                assert_eq!(ring.position[bid], at, "buffer {bid}'s entry");
                assert_eq!(ring.left[bid], entry.len(), "buffer {bid}'s bytes left");
                at = at.wrapping_add(1);
            }
        }
    }

    fn model_run(incremental: bool, bundles: bool, seed: u64) {
        let pool = Pool::new();
        let mut ring = BufRing::new(8, 0, 1024, incremental, pool.clone()).unwrap();
        let mut kernel = Kernel {
            head: 0,
            incremental,
        };
        let mut rng = seed;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut received = Vec::new();
        let mut sent = Vec::new();
        let mut packets = Vec::new();
        let mut held = Vec::new();
        let (mut multi, mut enobufs) = (0, 0);
        for i in 0..4000u32 {
            let len = match next() % 4 {
                0 => 1 + next() as usize % 100,
                1 => 1 + next() as usize % 1500,
                _ => 1 + next() as usize % 6000,
            };
            let data: Vec<u8> = (0..len).map(|j| (i as usize * 7 + j) as u8).collect();
            let how = match (bundles, next() % 8) {
                (true, _) => Receive::Bundle,
                (false, 0) => Receive::Unlocked,
                (false, _) => Receive::Single,
            };
            match kernel.receive(&ring, &data, how) {
                Some((bid, n, more)) => {
                    sent.extend_from_slice(&data[..n]);
                    let buffers = ring.take(bid, n, more, &mut packets).unwrap();
                    assert_eq!(buffers, packets.len());
                    multi += usize::from(buffers > 1);
                    for packet in packets.drain(..) {
                        received.extend_from_slice(&packet);
                        // Some packets are held a while (an application reading late), so the
                        // pool runs short now and then.
                        if next() % 4 == 0 {
                            held.push(packet);
                        }
                    }
                }
                None => enobufs += 1,
            }
            if held.len() > 12 || next() % 16 == 0 {
                held.clear();
            }
            ring.refill();
            kernel.agrees_with(&ring);
        }
        assert!(received == sent, "every byte once, in order");
        if bundles {
            assert!(multi > 0, "some receives spanned several buffers");
        } else {
            assert_eq!(multi, 0);
        }
        let _ = enobufs;
        drop(held);
        drop(ring);
        assert_eq!(pool.stats().outstanding, 0, "every block back in the pool");
    }

    #[test]
    fn the_accounting_matches_the_kernels_commits() {
        for incremental in [true, false] {
            for bundles in [true, false] {
                for seed in 1..4 {
                    model_run(incremental, bundles, seed * 0x9e37_79b9);
                }
            }
        }
    }

    /// A completion that names a buffer this ring does not offer, or whose bytes run past the
    /// buffers it offers, is an error, not a guess.
    #[test]
    fn a_completion_the_ring_cannot_account_for_is_an_error() {
        let pool = Pool::new();
        let mut ring = BufRing::new(4, 0, 1024, true, pool.clone()).unwrap();
        let mut packets = Vec::new();
        assert!(ring.take(9, 10, false, &mut packets).is_err());
        // Four buffers of 1024 bytes from buffer 0 on: 5000 bytes do not fit.
        assert!(ring.take(0, 5000, false, &mut packets).is_err());
        drop(packets);
        drop(ring);
        assert_eq!(pool.stats().outstanding, 0);
    }
}
