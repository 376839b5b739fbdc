//! The reader's own bytes: an inline connection's input, read and parsed by one owner.
//!
//! When the reader reads its source itself (an inline connection), nothing crosses threads
//! between the socket and the parser: the reader owns the receive block and the segments it
//! has not consumed. So instead of the shared queue's protocol (publication, parking, growth
//! words), the bytes live here in plain fields: a read fills the receive block's free tail
//! ([`Fill`]), the bytes are sealed into the back segment at once (grown in place while the
//! reads follow each other in the block), and the reader consumes and takes from the front.
//! The segments keep the queue's meaning: a frame spanning the block's end is a chain of two
//! segments, a large one is shared out of the block, a small one copied.
//!
//! Blocks are returned by their owner: the receive block goes when it is full or when the
//! reader waits with nothing unconsumed (an idle connection holds no block), and a block whose
//! bytes were all consumed, with no taken frame holding it, is read into again from its start.

use std::collections::VecDeque;

use super::state::{PipeState, DONE, FAILED};
use crate::error::{Error, SharedError};
use crate::packet::{Packet, PacketBuf, ReleaseBatch};
use crate::pool::Pool;

/// A reader's own segments and receive block.
pub(crate) struct Local {
    /// The unconsumed bytes, front to back, none empty (the front may be partly consumed: its
    /// packet is advanced in place).
    packets: VecDeque<Packet>,
    consumed: u64,
    /// Bytes in `packets`.
    available: u64,
    /// The receive block: reads fill its free tail.
    buf: Option<PacketBuf>,
    /// References to `buf`'s block counted in advance for its seals
    /// (`PacketBuf::seal_with_credits`); given back when `buf` goes.
    credits: usize,
    /// The back packet was sealed from `buf` and ends where its next bytes go: they grow it.
    back_grows: bool,
    /// Bytes of `buf`'s free tail, after `gap`, that the source read and has not made readable
    /// yet (the front of a TLS record still arriving): `buf` stays while there are any.
    pending: usize,
    /// Free bytes at the front of `buf`'s free tail before the pending ones: what records opened
    /// in place leave behind (their headers and tags) while a record after them is pending. The
    /// next record's plaintext is written over them, back to back with the readable bytes.
    /// 0 whenever `pending` is.
    gap: usize,
    /// `DONE` (and `FAILED`) once the source has ended.
    flags: u64,
    pool: Pool,
    min_segment_size: usize,
    /// The receive block stays while the reader waits (`ConnectionOptions::keep_blocks_idle`).
    keep_idle: bool,
}

impl Local {
    pub(crate) fn new(pool: Pool, min_segment_size: usize, keep_idle: bool) -> Local {
        Local {
            packets: VecDeque::new(),
            consumed: 0,
            available: 0,
            buf: None,
            credits: 0,
            back_grows: false,
            pending: 0,
            gap: 0,
            flags: 0,
            pool,
            min_segment_size,
            keep_idle,
        }
    }

    /// The source's end, as the shared queue's published flags.
    #[inline]
    pub(crate) fn flags(&self) -> u64 {
        self.flags
    }

    /// Bytes consumed since the start.
    #[inline]
    pub(crate) fn consumed(&self) -> u64 {
        self.consumed
    }

    /// Bytes readable and not consumed.
    #[inline]
    pub(crate) fn available(&self) -> u64 {
        self.available
    }

    /// The readable packets, front to back (none empty).
    #[inline]
    pub(crate) fn packets(&self) -> std::collections::vec_deque::Iter<'_, Packet> {
        self.packets.iter()
    }

    /// The first packet, if it holds at least `n > 0` bytes.
    #[inline]
    pub(crate) fn front_holding(&self, n: usize) -> Option<&Packet> {
        match self.packets.front() {
            Some(front) if n > 0 && front.len() >= n => Some(front),
            _ => None,
        }
    }

    /// Consume `n <= available` bytes: packets consumed entirely go (a run of one block's packets
    /// with one reference-count decrement), a partly consumed front is advanced in place.
    #[inline]
    pub(crate) fn consume(&mut self, mut n: u64) {
        assert!(
            n <= self.available,
            "consume of {n} bytes with {} available",
            self.available
        );
        self.available -= n;
        self.consumed += n;
        let mut released = ReleaseBatch::default();
        while n > 0 {
            let front = self.packets.front_mut().expect("bytes are available");
            let len = front.len() as u64;
            if len <= n {
                n -= len;
                let packet = self.packets.pop_front().expect("just looked at");
                packet.release_into(&mut released);
            } else {
                front.skip_front(n as usize);
                n = 0;
            }
        }
        if self.packets.is_empty() {
            self.back_grows = false;
        }
    }

    /// [`consume`](Self::consume) of a frame taken out of the front packet (the common case, kept
    /// small enough to inline).
    #[inline]
    pub(crate) fn consume_in_front(&mut self, n: u64) {
        match self.packets.front_mut() {
            Some(front) if (front.len() as u64) > n => {
                front.skip_front(n as usize);
                self.available -= n;
                self.consumed += n;
            }
            // The whole front packet (a read that brought one frame): it goes, no batch.
            Some(front) if front.len() as u64 == n => {
                self.available -= n;
                self.consumed += n;
                drop(self.packets.pop_front());
                if self.packets.is_empty() {
                    self.back_grows = false;
                }
            }
            _ => self.consume(n),
        }
    }

    /// Take the first `n <= available` bytes as packets, front to back, moved out or split off
    /// the front packet, without copying.
    #[inline]
    pub(crate) fn take(&mut self, mut n: u64, mut sink: impl FnMut(Packet)) {
        assert!(
            n <= self.available,
            "take of {n} bytes with {} available",
            self.available
        );
        self.available -= n;
        self.consumed += n;
        while n > 0 {
            let front = self.packets.front_mut().expect("bytes are available");
            let len = front.len() as u64;
            if len <= n {
                n -= len;
                sink(self.packets.pop_front().expect("just looked at"));
            } else {
                sink(front.split_to(n as usize));
                n = 0;
            }
        }
        if self.packets.is_empty() {
            self.back_grows = false;
        }
    }

    /// Put `packet`, a copy of every readable byte, in place of the packets that held them (a
    /// waiting reader's few bytes moving out of a large block); the receive block goes too.
    pub(crate) fn replace_available(&mut self, packet: Packet) {
        assert!(
            packet.len() as u64 == self.available && !packet.is_empty(),
            "replacement of {} readable bytes by {}",
            self.available,
            packet.len()
        );
        let mut released = ReleaseBatch::default();
        for old in self.packets.drain(..) {
            old.release_into(&mut released);
        }
        self.packets.push_back(packet);
        if self.pending == 0 {
            self.drop_buf();
        } else {
            self.back_grows = false;
        }
    }

    /// The reader is about to wait: the receive block goes home (unless the reader keeps
    /// unconsumed bytes in it, which `replace_available` may move out first). Returns whether
    /// the back packet may still grow, as the shared queue's does: never, once the block is gone;
    /// while a kept block stays, it may (so the bytes are not moved out of it either).
    #[inline]
    pub(crate) fn release_parked_tail(&mut self) -> bool {
        if self.keep_idle || self.pending > 0 {
            return self.buf.is_some();
        }
        self.drop_buf();
        false
    }

    /// Let every packet go (the reader completes): what is readable is consumed.
    pub(crate) fn close(&mut self) {
        let available = self.available;
        self.consume(available);
        self.drop_buf();
    }

    /// Give the receive block up, with the references counted in advance for it.
    #[inline]
    fn drop_buf(&mut self) {
        if let Some(buf) = self.buf.take() {
            buf.give_back_credits(std::mem::take(&mut self.credits));
        }
        self.back_grows = false;
        self.pending = 0;
        self.gap = 0;
    }

    /// The fill side, for the reader's source; `state` takes the source's error.
    #[inline]
    pub(crate) fn fill<'a>(&'a mut self, state: &'a PipeState) -> Fill<'a> {
        Fill { local: self, state }
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        self.drop_buf();
    }
}

/// Where a reader's source puts what it reads: the receive block of a [`Local`] (see
/// `transport::Refill`).
pub(crate) struct Fill<'a> {
    local: &'a mut Local,
    state: &'a PipeState,
}

impl Fill<'_> {
    /// Whether the reader keeps its receive block while it waits
    /// (`ConnectionOptions::keep_blocks_idle`): then the connection keeps its send block too.
    #[inline]
    pub(crate) fn keeps_blocks_idle(&self) -> bool {
        self.local.keep_idle
    }

    /// The size of the blocks a read rents.
    #[inline]
    pub(crate) fn min_segment_size(&self) -> usize {
        self.local.min_segment_size
    }

    /// Whether the reader holds a receive block.
    #[inline]
    pub(crate) fn has_block(&self) -> bool {
        self.local.buf.is_some()
    }

    /// Free space of at least `hint` bytes (and at least one) in the receive block, renting a
    /// block (at least a segment) when it has less. A block whose bytes were all consumed and
    /// are held by no taken frame is read into again from its start.
    #[inline]
    pub(crate) fn buffer_mut(&mut self, hint: usize) -> Result<&mut [u8], Error> {
        let need = hint.max(1);
        if !self.fits(need) {
            let local = &mut *self.local;
            let rented = local.pool.rent(need.max(local.min_segment_size))?;
            local.drop_buf();
            local.buf = Some(rented);
        }
        Ok(self.local.buf.as_mut().expect("just provided").spare_mut())
    }

    /// Whether the receive block has at least `hint` bytes (and at least one) of free space, so
    /// that [`buffer_mut`](Self::buffer_mut) rents nothing. A block whose bytes were all consumed
    /// and are held by no taken frame starts over at its start.
    #[inline]
    pub(crate) fn fits(&mut self, hint: usize) -> bool {
        let local = &mut *self.local;
        match &mut local.buf {
            Some(buf) => {
                if local.available == 0 && local.pending == 0 && buf.rewind(local.credits) {
                    local.back_grows = false;
                }
                bytes::BufMut::remaining_mut(buf) >= hint.max(1)
            }
            None => false,
        }
    }

    /// `n` bytes were read into the space [`buffer_mut`](Self::buffer_mut) gave: they are
    /// readable at once, as growth of the back packet when they follow it in the block.
    #[inline]
    pub(crate) fn advance(&mut self, n: usize) -> Result<(), Error> {
        let local = &mut *self.local;
        let Some(buf) = local.buf.as_mut() else {
            return Err(Error::CommitPastSpare {
                requested: n,
                available: 0,
            });
        };
        buf.commit(n)?;
        if n == 0 {
            return Ok(());
        }
        if local.back_grows {
            let grown = buf.seal_in_place();
            let back = local.packets.back_mut().expect("a growing back packet");
            // SAFETY: the back packet was sealed from this buffer and ends where these bytes
            // start (`back_grows`, cleared whenever either changes), and `seal_in_place` just
            // sealed them: no handle writes them again (block invariant 3). One thread owns both.
            unsafe { back.grow_sealed(grown) };
        } else {
            let packet = buf.seal_with_credits(&mut local.credits);
            local.packets.push_back(packet.into());
            local.back_grows = true;
        }
        local.available += n as u64;
        if bytes::BufMut::remaining_mut(buf) == 0 {
            local.drop_buf();
        }
        Ok(())
    }

    /// Bytes read into the receive block's free tail and not readable yet (see
    /// [`tail_mut`](Self::tail_mut)).
    #[inline]
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    pub(crate) fn pending(&self) -> usize {
        self.local.pending
    }

    /// Free space of at least `need` (and one) bytes after the pending ones, for the next read: a
    /// block too small is replaced by one of at least a segment, the pending bytes copied to its
    /// start (the one copy a record split across reads costs).
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    pub(crate) fn read_space(&mut self, need: usize) -> Result<&mut [u8], Error> {
        let pending = self.local.pending;
        if pending == 0 {
            return self.buffer_mut(need);
        }
        let local = &mut *self.local;
        let gap = local.gap;
        let room = local.buf.as_ref().map_or(0, |buf| buf.spare_len());
        if room < gap + pending + need.max(1) {
            let mut rented = local
                .pool
                .rent((pending + need.max(1)).max(local.min_segment_size))?;
            let old = local
                .buf
                .as_mut()
                .expect("pending bytes are in the receive block");
            rented.spare_mut()[..pending].copy_from_slice(&old.spare_mut()[gap..gap + pending]);
            local.drop_buf();
            local.buf = Some(rented);
            local.pending = pending;
        }
        let skip = local.gap + pending;
        Ok(&mut local.buf.as_mut().expect("just provided").spare_mut()[skip..])
    }

    /// `n` more bytes were read into the space [`read_space`](Self::read_space) gave.
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    pub(crate) fn add_pending(&mut self, n: usize) -> Result<(), Error> {
        let local = &mut *self.local;
        let room = local.buf.as_ref().map_or(0, |buf| buf.spare_len());
        if local.gap + local.pending + n > room {
            return Err(Error::CommitPastSpare {
                requested: local.gap + local.pending + n,
                available: room,
            });
        }
        local.pending += n;
        Ok(())
    }

    /// The free tail up to the end of the pending bytes, and where they start in it: a record
    /// among them is opened within it, its plaintext written to the front
    /// ([`front_readable`](Self::front_readable)).
    #[inline]
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    pub(crate) fn pending_mut(&mut self) -> (&mut [u8], usize) {
        let (gap, pending) = (self.local.gap, self.local.pending);
        match self.local.buf.as_mut() {
            Some(buf) => (&mut buf.spare_mut()[..gap + pending], gap),
            None => (&mut [], 0),
        }
    }

    /// The first `used` pending bytes are done with (a record opened), and the first `n` bytes
    /// of the free tail (its plaintext, written there) become readable: as growth of the back
    /// packet when they follow it.
    #[inline]
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    pub(crate) fn front_readable(&mut self, n: usize, used: usize) -> Result<(), Error> {
        let local = &mut *self.local;
        if used > local.pending || n > local.gap + used {
            return Err(Error::CommitPastSpare {
                requested: used.max(n),
                available: local.pending,
            });
        }
        local.pending -= used;
        local.gap = if local.pending == 0 {
            0
        } else {
            local.gap + used - n
        };
        self.advance(n)
    }

    /// The first `n` pending bytes are done with and nothing of them is readable (a message the
    /// reader need not see, bytes after the peer's end).
    #[inline]
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    pub(crate) fn pending_skip(&mut self, n: usize) -> Result<(), Error> {
        self.front_readable(0, n)
    }

    /// Make `packets` (`bytes` bytes, none empty), received into blocks of their own (an
    /// io_uring completion's buffers), readable after the others, no copy; `packets` is left
    /// empty. With nothing unconsumed the two queues trade places: no packet moves.
    #[inline]
    #[cfg_attr(not(all(feature = "io-uring", target_os = "linux")), allow(dead_code))]
    pub(crate) fn append(&mut self, packets: &mut VecDeque<Packet>, bytes: u64) {
        let local = &mut *self.local;
        if local.packets.is_empty() {
            std::mem::swap(&mut local.packets, packets);
        } else {
            local.packets.append(packets);
        }
        local.available += bytes;
        local.back_grows = false;
    }

    /// Copy `data` into the receive block and make it readable.
    pub(crate) fn write_slice(&mut self, data: &[u8]) -> Result<(), Error> {
        let space = self.buffer_mut(data.len())?;
        let n = data.len().min(space.len());
        space[..n].copy_from_slice(&data[..n]);
        self.advance(n)?;
        if n < data.len() {
            return self.write_slice(&data[n..]);
        }
        Ok(())
    }

    /// The source ended: the reader sees the end after the bytes before it.
    pub(crate) fn complete(&mut self) {
        self.local.flags |= DONE;
        self.local.drop_buf();
    }

    /// The source failed: the reader gets `error` after the bytes before it.
    pub(crate) fn complete_with_shared(&mut self, error: SharedError) {
        if self.local.flags & DONE == 0 {
            self.state.set_writer_error(error);
            self.local.flags |= DONE | FAILED;
        }
        self.local.drop_buf();
    }

    /// Nothing unconsumed: the receive block goes home (the reader waits for its source),
    /// unless the reader keeps it while idle.
    #[inline]
    pub(crate) fn release_unused_buffer(&mut self) {
        if self.local.available == 0 && self.local.pending == 0 && !self.local.keep_idle {
            self.local.drop_buf();
        }
    }
}
