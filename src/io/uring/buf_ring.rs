//! A provided-buffer ring whose buffers are pooled blocks.
//!
//! The kernel picks a receive buffer from this ring for each multishot receive completion, so
//! the bytes land straight in a pooled block. Each slot (buffer id) owns the [`PacketBuf`] it
//! offers: the kernel writes into that buffer's free tail from the moment the slot is published
//! at the ring's tail until the completion that names the slot's id. Then [`BufRing::take`]
//! commits the received bytes, seals them into a [`Packet`] (a reference on the block,
//! which outlives the slot), and the slot is offered again: the rest of the same block when
//! enough of it is left (several small receives share one block), a fresh block otherwise.
//!
//! With incremental consumption (`IOU_PBUF_RING_INC`) the kernel itself keeps a partly used
//! buffer in the ring and writes the next receive after the last one; a completion without
//! `IORING_CQE_F_BUF_MORE` says it gave the buffer back. Without it, every completion gives the
//! buffer back and this ring offers the rest of the block again itself.
//!
//! Ownership, which every `unsafe` block below relies on:
//! 1. The ring's memory (one mmap of `entries` 16-byte entries) is registered with the kernel
//!    from [`BufRing::register`] until [`BufRing::unregister`]; it is unmapped only after that
//!    (or, if unregistering failed, never).
//! 2. A slot whose buffer is offered (`offered[bid]`) belongs to the kernel: this side never
//!    forms a reference into its free tail, and its `PacketBuf` is neither dropped nor moved out
//!    until the completion naming `bid` without `BUF_MORE` (or until the ring is unregistered).
//!    Moving the `PacketBuf` value itself is fine: the block it points to does not move.
//! 3. Bytes a completion reports as received are initialized and no longer written by the
//!    kernel once this side has read the completion (the completion queue's acquire load orders
//!    them before).
//! 4. A buffer id is in at most one ring entry at a time: it is published once per offer, and
//!    offered again only after the completion that gives it back (rule 2). The ring never holds
//!    more entries than ids, so publishing at the tail never overwrites an entry the kernel has
//!    not consumed (the partly used buffer an incremental ring keeps at its head included).
//!
//! Why a completion can never name bytes another packet holds: a packet holds only sealed bytes
//! of its block, all in front of the slot's write position; the kernel writes only at and after
//! that position, which it tracks as this side does. It starts where the slot was offered, and
//! each completion naming the id moves both by the completion's byte count: this side takes the
//! completions in the order the completion queue gives them, which is the order the kernel filled
//! the buffer in (one thread issues and runs every receive, and the queue keeps its order through
//! overflow). Once the kernel gives the slot back, the rest of the block is offered again (the
//! same argument holds for it) or the slot's reference is dropped, and the block goes back to the
//! pool only with the last packet's reference (the block's count): the pool never lends a block
//! a packet still holds, so the kernel never writes one either. Which connection the bytes belong
//! to is the completion's user data (the connection's slot and generation): a receive's
//! descriptor stays open until its last completion, so no receive of a closed connection can
//! read another connection's socket (the driver's `Conn::recvs`).

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

    /// The `n` bytes a completion received into buffer `bid`, sealed into a packet; `more` is the
    /// completion's `IORING_CQE_F_BUF_MORE` (the kernel keeps the buffer for the next receive).
    /// Offers the slot again when the kernel gave it back.
    pub(super) fn take(&mut self, bid: u16, n: usize, more: bool) -> io::Result<Packet> {
        let slot = self.offered.get_mut(usize::from(bid));
        let Some(buf) = slot.and_then(|slot| slot.as_mut()) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the kernel named buffer {bid}, which this ring does not offer"),
            ));
        };
        // Rule 3: the kernel wrote these `n` bytes at the start of the buffer's free tail (where
        // this ring offered it, or, incrementally, right after its last receive, which `seal`
        // moved the tail past). `commit` checks `n` against the free bytes.
        buf.commit(n).map_err(io::Error::other)?;
        let packet = buf.seal();
        if !(self.incremental && more) {
            // The kernel gave the slot back (rule 2 ends): offer the rest, or a new block.
            let buf = self.offered[usize::from(bid)].take();
            match buf {
                Some(buf) if bytes::BufMut::remaining_mut(&buf) >= self.min_offer => {
                    self.offer(bid, buf)
                }
                _ => self.missing.push(bid),
            }
        }
        Ok(packet)
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
        self.offered[usize::from(bid)] = Some(buf);
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
