//! `PacketBuf`: the unique, writable handle to a pooled block.

use std::fmt;
use std::ops::{Deref, DerefMut};

use bytes::buf::UninitSlice;
use bytes::BufMut;

use std::panic::Location;

use super::{OwnedPacket, Packet};
use crate::error::Error;
use crate::pool::{note_use, BlockUse, ParkedWriter, ParkingSlot, Pool, Writer};

/// The largest capacity a buffer (and so a packet) can have: `Layout`'s bound less the header.
pub(crate) const MAX_CAPACITY: usize = crate::block::MAX_CAPACITY;

/// A writable pooled buffer that seals its written bytes into [`Packet`]s.
///
/// The block is laid out as `[sealed | headroom | written | free]`. [`seal`](Self::seal) turns the
/// written bytes into an immutable packet that shares the block, and the buffer goes on writing into
/// the free tail of the same block: sealed bytes are never written again, so packets and buffer never
/// overlap. The buffer does not grow; rent another when [`remaining_mut`](BufMut::remaining_mut) runs
/// out.
///
/// Writes that do not fit return [`Error::NoSpace`] (or panic, for the [`BufMut`] methods, following
/// that trait's convention). The free tail is always initialized memory (blocks are zeroed when first
/// allocated), so [`spare_mut`](Self::spare_mut) is a plain `&mut [u8]`.
///
/// ```
/// use bytes::BufMut;
///
/// let pool = packetpipe::Pool::new();
/// let mut buf = pool.rent(64).unwrap();
/// buf.put_u16(5);
/// buf.put_slice(b"hello");
/// let first = buf.seal();
/// buf.extend_from_slice(b"next").unwrap();
/// let second = buf.seal();
/// assert_eq!(&first[..], b"\0\x05hello");
/// assert_eq!(&second[..], b"next");
/// assert_eq!(buf.remaining_mut(), 64 - 11);
/// ```
pub struct PacketBuf {
    writer: Writer,
}

impl PacketBuf {
    #[inline]
    pub(crate) fn from_writer(writer: Writer) -> PacketBuf {
        PacketBuf { writer }
    }

    #[inline]
    pub(crate) fn into_writer(self) -> Writer {
        self.writer
    }

    /// Payload bytes of the whole block.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.writer.capacity()
    }

    /// The free tail, to write into before [`commit`](Self::commit). It holds whatever the block
    /// held before (zeros, or old data of an earlier renter), never uninitialized memory.
    #[inline]
    pub fn spare_mut(&mut self) -> &mut [u8] {
        self.writer.spare_mut()
    }

    /// Length of the free tail ([`spare_mut`](Self::spare_mut)'s length, without borrowing it).
    #[inline]
    pub(crate) fn spare_len(&self) -> usize {
        self.writer.remaining()
    }

    /// How many packets sealed from this buffer are alive now, given the `credits` counted in
    /// advance and not yet used (`seal_with_credits`): an estimate, as other threads may be
    /// dropping them meanwhile.
    #[inline]
    pub(crate) fn sealed_alive(&self, credits: usize) -> usize {
        self.writer.refs_now().saturating_sub(1 + credits)
    }

    /// Mark the first `n` bytes of [`spare_mut`](Self::spare_mut) as written.
    ///
    /// ```
    /// let mut buf = packetpipe::Pool::new().rent(64).unwrap();
    /// buf.spare_mut()[..3].copy_from_slice(b"abc");
    /// buf.commit(3).unwrap();
    /// assert_eq!(&buf[..], b"abc");
    /// let err = buf.commit(100).unwrap_err();
    /// assert_eq!(err.to_string(), "cannot write 100 bytes: only 61 bytes of space remain in the buffer");
    /// ```
    #[inline]
    pub fn commit(&mut self, n: usize) -> Result<(), Error> {
        let available = self.writer.remaining();
        if n > available {
            return Err(Error::NoSpace {
                needed: n,
                available,
            });
        }
        self.writer.commit(n);
        Ok(())
    }

    /// Copy `data` after the written bytes, or return [`Error::NoSpace`] (writing nothing).
    #[inline]
    pub fn extend_from_slice(&mut self, data: &[u8]) -> Result<(), Error> {
        let available = self.writer.remaining();
        if data.len() > available {
            return Err(Error::NoSpace {
                needed: data.len(),
                available,
            });
        }
        self.writer.spare_mut()[..data.len()].copy_from_slice(data);
        self.writer.commit(data.len());
        Ok(())
    }

    /// Free bytes in front of the written ones, usable by [`prepend`](Self::prepend).
    pub fn headroom(&self) -> usize {
        self.writer.headroom()
    }

    /// Copy `header` in front of the written bytes, in place; [`Error::NoHeadroom`] if it does not
    /// fit (nothing is written then).
    pub fn prepend(&mut self, header: &[u8]) -> Result<(), Error> {
        self.writer.prepend(header)
    }

    /// Keep the first `len` written bytes (no effect if fewer are written); `truncate(0)` forgets
    /// every unsealed byte.
    pub fn truncate(&mut self, len: usize) {
        self.writer.truncate(len);
    }

    /// Forget the first `n` written bytes, which went out unsealed (a flush wrote them to the
    /// socket straight from this buffer). Panics if fewer are written.
    #[inline]
    pub(crate) fn discard_front(&mut self, n: usize) {
        self.writer.discard_front(n);
    }

    /// With nothing written and no packet of this block alive (`credits`: references counted in
    /// advance and unused, [`seal_with_credits`](Self::seal_with_credits)), start over at the
    /// block's start; whether it did (`block::Writer::rewind`).
    #[inline]
    pub(crate) fn rewind(&mut self, credits: usize) -> bool {
        self.writer.rewind(credits)
    }

    /// Seal the written bytes into a packet sharing this block; the buffer keeps the free tail.
    /// With nothing written, the packet is empty. (A pool that tracks leaks records this call as
    /// the block's last use: [`PoolOptions::track_leaks`](crate::PoolOptions::track_leaks).)
    #[inline]
    #[track_caller]
    #[must_use = "the sealed bytes are dropped with the result"]
    pub fn seal(&mut self) -> Packet {
        let window = self.writer.seal();
        note_use(&window, BlockUse::Sealed, Location::caller());
        OwnedPacket::from_window(window).into()
    }

    /// [`seal`](Self::seal) with the packet's reference taken from references counted in advance
    /// (`block::Writer::seal_with_credits`): the pipe's writer seals after every flush.
    #[inline]
    pub(crate) fn seal_with_credits(&mut self, credits: &mut usize) -> OwnedPacket {
        OwnedPacket::from_window(self.writer.seal_with_credits(credits))
    }

    /// Seal the written bytes onto the packet sealed last from this buffer, which the caller
    /// grows over them (`Packet::grow_sealed`); how many bytes were sealed.
    #[inline]
    pub(crate) fn seal_in_place(&mut self) -> usize {
        self.writer.seal_in_place()
    }

    /// Give back references counted in advance by [`seal_with_credits`](Self::seal_with_credits).
    #[inline]
    pub(crate) fn give_back_credits(&self, credits: usize) {
        self.writer.give_back_credits(credits);
    }

    /// Seal the written bytes and give the buffer up (no atomic operation: the buffer's reference
    /// passes to the packet). (Recorded as the block's last use by a pool that tracks leaks, as
    /// [`seal`](Self::seal).)
    #[inline]
    #[track_caller]
    #[must_use = "the written bytes are dropped with the result"]
    pub fn freeze(self) -> Packet {
        let window = self.writer.into_window();
        note_use(&window, BlockUse::Sealed, Location::caller());
        OwnedPacket::from_window(window).into()
    }

    /// [`freeze`](Self::freeze) recording no use: where the rent site just recorded says it all
    /// (`Pool::copy_from_slice`, a frame copied out of a pipe).
    #[inline]
    pub(crate) fn freeze_untracked(self) -> OwnedPacket {
        OwnedPacket::from_window(self.writer.into_window())
    }
}

impl Deref for PacketBuf {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        self.writer.written()
    }
}

impl DerefMut for PacketBuf {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        self.writer.written_mut()
    }
}

impl AsRef<[u8]> for PacketBuf {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl fmt::Debug for PacketBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        super::debug_bytes(f, "PacketBuf", self)
    }
}

// SAFETY: `remaining_mut` is the length of the free tail, `chunk_mut` returns exactly that tail (a
// valid, initialized, exclusively borrowed region), and `advance_mut` moves the tail forward only
// within it, panicking otherwise; so bytes reported written were handed out by `chunk_mut`.
unsafe impl BufMut for PacketBuf {
    #[inline]
    fn remaining_mut(&self) -> usize {
        self.writer.remaining()
    }

    #[inline]
    unsafe fn advance_mut(&mut self, cnt: usize) {
        let available = self.writer.remaining();
        assert!(
            cnt <= available,
            "cannot advance_mut {cnt} bytes: only {available} remain"
        );
        self.writer.commit(cnt);
    }

    #[inline]
    fn chunk_mut(&mut self) -> &mut UninitSlice {
        UninitSlice::new(self.writer.spare_mut())
    }
}

/// Where a pipe keeps its write buffer's block reference between writes, so the reader can give the
/// block back when the pipe goes idle (the slot's protocol is `block::ParkingSlot`'s).
#[derive(Default)]
pub(crate) struct BufSlot(ParkingSlot);

/// What the writer keeps while its buffer is in a [`BufSlot`]: the buffer's positions, not a
/// reference.
pub(crate) struct ParkedBuf(ParkedWriter);

impl BufSlot {
    /// Park `buf` (nothing unsealed in it) with the `credits` it counted in advance.
    #[inline]
    pub(crate) fn park(&self, buf: PacketBuf, credits: usize) -> ParkedBuf {
        ParkedBuf(self.0.park(buf.into_writer(), credits))
    }

    /// The parked buffer again with its credits, or `None` if the other side released it.
    #[inline]
    pub(crate) fn reclaim(&self, parked: ParkedBuf) -> Option<(PacketBuf, usize)> {
        let (writer, credits) = self.0.reclaim(parked.0)?;
        Some((PacketBuf::from_writer(writer), credits))
    }

    /// Whether nothing is parked (a Relaxed peek, see `ParkingSlot::is_empty`).
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Release the parked reference, if there is one (the reader side); whether there was.
    #[inline]
    pub(crate) fn release(&self) -> bool {
        self.0.release()
    }
}

/// Renting: the pool hands out blocks, and a rented block is a packet buffer.
impl Pool {
    /// Rent a writable buffer of at least `size` bytes (the class size, for pooled sizes).
    ///
    /// Errors: `size == 0`, a size no allocation can have, or the allocator refusing the memory.
    ///
    /// ```
    /// let pool = packetpipe::Pool::new();
    /// assert!(pool.rent(0).is_err());
    /// assert!(pool.rent(usize::MAX).is_err());
    /// assert_eq!(pool.rent(100).unwrap().capacity(), 112); // the class of 1.75 x 64 B
    /// ```
    #[inline(always)]
    #[track_caller]
    pub fn rent(&self, size: usize) -> Result<PacketBuf, Error> {
        self.rent_with_headroom(0, size)
    }

    /// Rent a buffer with `headroom` bytes reserved in front for [`PacketBuf::prepend`], and at
    /// least `size` bytes after it.
    ///
    /// ```
    /// let pool = packetpipe::Pool::new();
    /// let mut buf = pool.rent_with_headroom(4, 60).unwrap();
    /// buf.extend_from_slice(b"body").unwrap();
    /// buf.prepend(&4u32.to_be_bytes()).unwrap();
    /// assert_eq!(&buf[..], b"\0\0\0\x04body");
    /// ```
    #[inline(always)]
    #[track_caller]
    pub fn rent_with_headroom(&self, headroom: usize, size: usize) -> Result<PacketBuf, Error> {
        Ok(PacketBuf::from_writer(self.rent_writer(headroom, size)?))
    }

    /// Copy `data` into a fitted pooled buffer of this pool and seal it (the [global
    /// pool](Pool::global)'s form, which also keeps small copies inline, is
    /// [`Packet::copy_from_slice`]).
    ///
    /// ```
    /// let pool = packetpipe::Pool::new();
    /// let packet = pool.copy_from_slice(b"frame").unwrap();
    /// assert_eq!(&packet[..], b"frame");
    /// ```
    #[inline(always)]
    #[track_caller]
    pub fn copy_from_slice(&self, data: &[u8]) -> Result<Packet, Error> {
        let mut buf = self.rent(data.len().max(1))?;
        buf.extend_from_slice(data)?;
        // Not a use of its own for leak tracking: the rent site is this call.
        Ok(buf.freeze_untracked().into())
    }

    /// [`copy_from_slice`](Self::copy_from_slice) as the pooled packet itself.
    #[inline(always)]
    #[track_caller]
    pub(crate) fn copy_owned(&self, data: &[u8]) -> Result<OwnedPacket, Error> {
        let mut buf = self.rent(data.len().max(1))?;
        buf.extend_from_slice(data)?;
        // Not a use of its own for leak tracking: the rent site is this call.
        Ok(buf.freeze_untracked())
    }
}
