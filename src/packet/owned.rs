//! `OwnedPacket`: an immutable, reference-counted window into a pooled block.

use std::ops::RangeBounds;

use bytes::{Buf, Bytes};

use std::panic::Location;

use super::check_at;
use crate::error::{check_range, Error};
use crate::pool::Window;
use crate::pool::{note_use, BlockUse};

/// An immutable window of bytes in a pooled block.
///
/// Moving it is a plain move; [`clone`](Clone::clone), [`slice`](OwnedPacket::slice) and
/// [`split_to`](OwnedPacket::split_to) share the block with one atomic increment and no allocation.
/// When the last packet of a block drops, the block goes back to its pool.
///
/// Range arguments follow std's slice conventions: `slice`, `split_to`, `split_off` and
/// [`Buf::advance`] panic with a message naming the numbers when out of bounds; the `try_` forms
/// return [`Error::OutOfRange`] instead.
///
/// ```
/// use packetpipe::Pool;
///
/// let pool = Pool::new();
/// let mut packet = pool.copy_from_slice(b"header:body").unwrap();
/// let header = packet.split_to(7); // shares the block, copies nothing
/// assert_eq!(&header[..], b"header:");
/// assert_eq!(&packet[..], b"body");
/// let bytes: bytes::Bytes = packet.into(); // zero-copy into the `bytes` ecosystem
/// assert_eq!(bytes, "body");
/// ```
#[derive(Clone)]
pub struct OwnedPacket {
    window: Window,
}

impl OwnedPacket {
    #[inline]
    pub(crate) fn from_window(window: Window) -> OwnedPacket {
        OwnedPacket { window }
    }

    /// The window, with its counted reference.
    #[inline]
    pub(crate) fn into_window(self) -> Window {
        self.window
    }

    /// Number of bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.window.len()
    }

    /// Whether the packet holds no bytes.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        self.window.as_slice()
    }

    /// A packet sharing `range` of this one. Panics if the range is out of bounds. (A pool that
    /// tracks leaks records the slices and splits of its packets as their block's last use:
    /// [`PoolBuilder::track_leaks`](crate::PoolBuilder::track_leaks).)
    #[inline]
    #[track_caller]
    pub fn slice(&self, range: impl RangeBounds<usize>) -> OwnedPacket {
        self.try_slice(range).unwrap_or_else(|e| panic!("{e}"))
    }

    /// A packet sharing `range` of this one, or [`Error::OutOfRange`].
    #[inline]
    #[track_caller]
    pub fn try_slice(&self, range: impl RangeBounds<usize>) -> Result<OwnedPacket, Error> {
        let range = check_range("slice", range, self.len())?;
        let mut window = self.window.clone();
        window.narrow(range.start, range.end);
        note_use(&window, BlockUse::Sliced, Location::caller());
        Ok(OwnedPacket { window })
    }

    /// Split off and return the first `at` bytes; `self` keeps the rest. Panics if `at > len`.
    #[inline]
    #[track_caller]
    #[must_use = "the bytes split off are dropped with the result"]
    pub fn split_to(&mut self, at: usize) -> OwnedPacket {
        self.try_split_to(at).unwrap_or_else(|e| panic!("{e}"))
    }

    /// As [`split_to`](Self::split_to), or [`Error::OutOfRange`] if `at > len`.
    #[inline]
    #[track_caller]
    pub fn try_split_to(&mut self, at: usize) -> Result<OwnedPacket, Error> {
        let head = self.try_slice_for("split_to", at)?;
        self.window.narrow(at, self.len());
        Ok(head)
    }

    /// Split off and return the bytes from `at` on; `self` keeps the first `at`. Panics if
    /// `at > len`.
    #[track_caller]
    #[must_use = "the bytes split off are dropped with the result"]
    pub fn split_off(&mut self, at: usize) -> OwnedPacket {
        self.try_split_off(at).unwrap_or_else(|e| panic!("{e}"))
    }

    /// As [`split_off`](Self::split_off), or [`Error::OutOfRange`] if `at > len`.
    #[track_caller]
    pub fn try_split_off(&mut self, at: usize) -> Result<OwnedPacket, Error> {
        check_at("split_off", at, self.len())?;
        let mut tail = self.window.clone();
        tail.narrow(at, self.len());
        self.window.narrow(0, at);
        note_use(&tail, BlockUse::Sliced, Location::caller());
        Ok(OwnedPacket { window: tail })
    }

    #[inline]
    #[track_caller]
    fn try_slice_for(&self, operation: &'static str, at: usize) -> Result<OwnedPacket, Error> {
        check_at(operation, at, self.len())?;
        let mut window = self.window.clone();
        window.narrow(0, at);
        note_use(&window, BlockUse::Sliced, Location::caller());
        Ok(OwnedPacket { window })
    }

    /// The window, for leak tracking's record of a take (`pool::note_use`).
    #[inline]
    pub(crate) fn window(&self) -> &Window {
        &self.window
    }

    /// Grow over the `n` bytes of the block that follow this packet.
    ///
    /// # Safety
    ///
    /// As [`Window::grow`]: the block's writer sealed those bytes in place, and the caller has
    /// synchronized with that seal.
    #[inline]
    pub(crate) unsafe fn grow(&mut self, n: usize) {
        // SAFETY: the caller's contract is the window's.
        unsafe { self.window.grow(n) }
    }

    /// Drop the first `n` bytes in place (`n <= len`; the window asserts it).
    #[inline]
    pub(crate) fn skip_front(&mut self, n: usize) {
        self.window.narrow(n, self.len());
    }

    /// Append `next` to this packet without copying when it starts where this one ends in the same
    /// block (two packets sealed one after the other from one buffer, or split from one packet):
    /// the inverse of [`split_to`](Self::split_to). Otherwise `next` comes back unchanged in
    /// `Err`, and this packet is unchanged too.
    ///
    /// ```
    /// let pool = packetpipe::Pool::new();
    /// let mut head = pool.copy_from_slice(b"header:body").unwrap();
    /// let tail = head.split_off(7);
    /// head.try_join(tail).unwrap();
    /// assert_eq!(&head[..], b"header:body");
    /// // Packets of different blocks do not join.
    /// let other = pool.copy_from_slice(b"!").unwrap();
    /// assert!(head.try_join(other).is_err());
    /// ```
    pub fn try_join(&mut self, next: OwnedPacket) -> Result<(), OwnedPacket> {
        if self.window.try_join(&next.window) {
            Ok(()) // `next` drops here: the joined window holds this packet's reference
        } else {
            Err(next)
        }
    }

    /// Whether [`try_join`](Self::try_join) would join `next` onto this packet.
    #[inline]
    pub fn is_followed_by(&self, next: &OwnedPacket) -> bool {
        self.window.is_followed_by(&next.window)
    }

    /// Keep the first `len` bytes (no effect if the packet is shorter).
    #[inline]
    pub fn truncate(&mut self, len: usize) {
        if len < self.len() {
            self.window.narrow(0, len);
        }
    }

    /// Whether this is the only handle to its block (no other packet or writer shares it).
    pub fn is_unique(&self) -> bool {
        self.window.is_unique()
    }

    /// Bytes of the block in front of this packet. They can be used by [`prepend`](Self::prepend)
    /// only while the packet [`is_unique`](Self::is_unique).
    pub fn headroom(&self) -> usize {
        self.window.offset()
    }

    /// Write `header` in front of the bytes, in place, growing the packet (the .NET
    /// `ExpandHeader`). Needs sole ownership of the block and enough headroom; otherwise returns
    /// [`Error::SharedBlock`] or [`Error::NoHeadroom`] and leaves the packet unchanged.
    ///
    /// ```
    /// let pool = packetpipe::Pool::new();
    /// let mut buf = pool.rent_with_headroom(2, 16).unwrap();
    /// buf.extend_from_slice(b"payload").unwrap();
    /// let mut packet = buf.freeze();
    /// packet.prepend(&[0, 7]).unwrap();
    /// assert_eq!(&packet[..], b"\0\x07payload");
    /// let copy = packet.clone();
    /// assert!(packet.prepend(b"x").is_err()); // shared now
    /// # drop(copy);
    /// ```
    pub fn prepend(&mut self, header: &[u8]) -> Result<(), Error> {
        self.window.prepend(header)
    }

    /// The bytes, mutably, if this is the only handle to its block (as `Arc::get_mut`).
    pub fn get_mut(&mut self) -> Option<&mut [u8]> {
        self.window.get_mut()
    }

    /// Convert into [`Bytes`] without copying the payload. Costs one small allocation (the owner
    /// box of `Bytes::from_owner`); the block returns to the pool when the `Bytes` drops.
    pub fn into_bytes(self) -> Bytes {
        if self.is_empty() {
            return Bytes::new();
        }
        Bytes::from_owner(self)
    }
}

byte_view_impls!(OwnedPacket);

impl From<OwnedPacket> for Bytes {
    fn from(packet: OwnedPacket) -> Bytes {
        packet.into_bytes()
    }
}

impl Buf for OwnedPacket {
    #[inline]
    fn remaining(&self) -> usize {
        self.len()
    }

    #[inline]
    fn chunk(&self) -> &[u8] {
        self.as_slice()
    }

    #[inline]
    fn advance(&mut self, cnt: usize) {
        assert!(
            cnt <= self.len(),
            "cannot advance past `remaining`: {cnt} <= {}",
            self.len()
        );
        self.window.narrow(cnt, self.len());
    }

    fn copy_to_bytes(&mut self, len: usize) -> Bytes {
        self.split_to(len).into_bytes()
    }
}
