//! `OwnedPacket`: an immutable, reference-counted window into a pooled block.

use std::ops::Range;

use bytes::{Buf, Bytes};

use std::panic::Location;

use crate::error::Error;
use crate::pool::Window;
use crate::pool::{note_use, BlockUse};

/// An immutable window of bytes in a pooled block: what a pooled [`Packet`](super::Packet)
/// holds.
///
/// Moving it is a plain move; `clone`, `slice` and `split_to` share the block with one atomic
/// increment and no allocation. When the last packet of a block drops, the block goes back to its
/// pool. Ranges are checked by the caller (`Packet`), which panics with the numbers.
#[derive(Clone)]
pub(crate) struct OwnedPacket {
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
    pub(crate) fn len(&self) -> usize {
        self.window.len()
    }

    /// Whether the packet holds no bytes.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes.
    #[inline]
    pub(crate) fn as_slice(&self) -> &[u8] {
        self.window.as_slice()
    }

    /// A packet sharing `range` of this one (`range` within the packet, checked by the caller).
    /// (A pool that tracks leaks records the slices and splits of its packets as their block's
    /// last use.)
    #[inline]
    #[track_caller]
    pub(crate) fn slice(&self, range: Range<usize>) -> OwnedPacket {
        let mut window = self.window.clone();
        window.narrow(range.start, range.end);
        note_use(&window, BlockUse::Sliced, Location::caller());
        OwnedPacket { window }
    }

    /// Split off and return the first `at` bytes; `self` keeps the rest (`at <= len`, checked by
    /// the caller).
    #[inline]
    #[track_caller]
    pub(crate) fn split_to(&mut self, at: usize) -> OwnedPacket {
        let head = self.slice(0..at);
        self.window.narrow(at, self.len());
        head
    }

    /// Split off and return the bytes from `at` on; `self` keeps the first `at` (`at <= len`,
    /// checked by the caller).
    #[track_caller]
    pub(crate) fn split_off(&mut self, at: usize) -> OwnedPacket {
        let tail = self.slice(at..self.len());
        self.window.narrow(0, at);
        tail
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
    /// the inverse of `split_to`. Otherwise `next` comes back unchanged in `Err`, and this packet
    /// is unchanged too.
    pub(crate) fn try_join(&mut self, next: OwnedPacket) -> Result<(), OwnedPacket> {
        if self.window.try_join(&next.window) {
            Ok(()) // `next` drops here: the joined window holds this packet's reference
        } else {
            Err(next)
        }
    }

    /// Whether [`try_join`](Self::try_join) would join `next` onto this packet.
    #[inline]
    pub(crate) fn is_followed_by(&self, next: &OwnedPacket) -> bool {
        self.window.is_followed_by(&next.window)
    }

    /// Keep the first `len` bytes (no effect if the packet is shorter).
    #[inline]
    pub(crate) fn truncate(&mut self, len: usize) {
        if len < self.len() {
            self.window.narrow(0, len);
        }
    }

    /// Whether this is the only handle to its block (no other packet or writer shares it).
    #[inline]
    pub(crate) fn is_unique(&self) -> bool {
        self.window.is_unique()
    }

    /// Bytes of the block in front of this packet. They can be used by `prepend` only while the
    /// packet is the only handle to its block.
    pub(crate) fn headroom(&self) -> usize {
        self.window.offset()
    }

    /// Write `header` in front of the bytes, in place, growing the packet: needs sole ownership
    /// of the block and enough headroom; otherwise returns [`Error::SharedBlock`] or
    /// [`Error::NoHeadroom`] and leaves the packet unchanged.
    pub(crate) fn prepend(&mut self, header: &[u8]) -> Result<(), Error> {
        self.window.prepend(header)
    }

    /// The bytes, mutably, if this is the only handle to its block (as `Arc::get_mut`).
    pub(crate) fn get_mut(&mut self) -> Option<&mut [u8]> {
        self.window.get_mut()
    }

    /// Convert into [`Bytes`] without copying the payload. Costs one small allocation (the owner
    /// box of `Bytes::from_owner`); the block returns to the pool when the `Bytes` drops.
    pub(crate) fn into_bytes(self) -> Bytes {
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
