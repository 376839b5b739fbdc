//! Packet ownership types (re-exported at the crate root, where their guide is).
//!
//! `owned.rs` is the pooled window, `buf.rs` the writable handle that seals into windows,
//! `chain.rs` several packets read as one, `shared_copy.rs` the blocks that small copies share;
//! this file holds `Packet`, the one type over every owner.

/// The trait impls every immutable byte type here shares, all through `as_slice`: `Deref`,
/// `AsRef`, `Borrow`, equality with itself and with byte slices, `Hash`, and a `Debug` that shows
/// the first bytes.
macro_rules! byte_view_impls {
    ($ty:ident) => {
        impl std::ops::Deref for $ty {
            type Target = [u8];
            #[inline(always)]
            fn deref(&self) -> &[u8] {
                self.as_slice()
            }
        }

        impl AsRef<[u8]> for $ty {
            #[inline]
            fn as_ref(&self) -> &[u8] {
                self.as_slice()
            }
        }

        impl std::borrow::Borrow<[u8]> for $ty {
            fn borrow(&self) -> &[u8] {
                self.as_slice()
            }
        }

        impl PartialEq for $ty {
            fn eq(&self, other: &$ty) -> bool {
                self.as_slice() == other.as_slice()
            }
        }

        impl Eq for $ty {}

        impl PartialEq<[u8]> for $ty {
            fn eq(&self, other: &[u8]) -> bool {
                self.as_slice() == other
            }
        }

        impl PartialEq<&[u8]> for $ty {
            fn eq(&self, other: &&[u8]) -> bool {
                self.as_slice() == *other
            }
        }

        impl std::hash::Hash for $ty {
            fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
                self.as_slice().hash(state)
            }
        }

        impl std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                crate::packet::debug_bytes(f, stringify!($ty), self.as_slice())
            }
        }
    };
}

mod buf;
mod chain;
#[cfg(all(test, not(packetpipe_loom)))]
mod join_tests;
mod owned;
mod shared_copy;

pub use buf::PacketBuf;
pub(crate) use buf::{BufSlot, ParkedBuf, MAX_CAPACITY};
pub use chain::{ChainIter, PacketChain};
pub(crate) use owned::OwnedPacket;
pub(crate) use shared_copy::{SharedCopies, SHARED_COPY_MAX};

use std::fmt;
use std::ops::RangeBounds;

use bytes::{Buf, Bytes};

use crate::error::{check_range, Error, Operation};
/// The pipe drops consumed packets in runs, one decrement per run of one block
/// ([`Packet::release_into`]).
pub(crate) use crate::pool::ReleaseBatch;

/// A packet of bytes with a cheap owner: pooled, [`Bytes`], static, or inline.
///
/// Cloning and slicing never allocate and never copy a shared payload: a pooled packet takes one
/// atomic increment, a `Bytes` one atomic increment, a static slice nothing. Converting a
/// `Vec<u8>` or a `Bytes` into a `Packet` may allocate once (the shared header of `bytes`), so that
/// every later clone or slice does not.
///
/// An *inline* packet holds up to [`INLINE_CAPACITY`](Self::INLINE_CAPACITY) bytes inside the
/// value itself: no block, no allocation, no reference count. [`Packet::copy_from_slice`] and the
/// pipe reader's frame taking ([`take_frame`](crate::pipe::PipeReader::take_frame), and so the
/// frame codecs) make one for a copied frame that fits, so a small frame that is kept costs its
/// `Packet` and nothing else. Its clones and slices copy those few bytes; every method behaves as
/// for the other kinds.
///
/// A `Packet` is 40 bytes, 8 more than a `Bytes`: a `Bytes` uses all of its 32 (pointer, length,
/// data word, vtable) with no spare pattern for a fourth kind of owner, so the tag takes a word of
/// its own, and that word is what makes room for 37 inline bytes (a kept 16-byte frame costs 40
/// bytes here against 64 for `Bytes::copy_from_slice`, which allocates).
///
/// ```
/// use packetpipe::Packet;
///
/// let packets = [
///     Packet::from(vec![1u8, 2, 3, 4]),
///     Packet::from(bytes::Bytes::from_static(&[1, 2, 3, 4])),
///     Packet::from(&[1u8, 2, 3, 4][..]),
///     Packet::from(packetpipe::Pool::global().copy_from_slice(&[1, 2, 3, 4]).unwrap()),
/// ];
/// for packet in &packets {
///     assert_eq!(&packet.slice(1..3)[..], &[2, 3]);
/// }
/// ```
#[derive(Clone)]
pub struct Packet {
    repr: Repr,
}

#[derive(Clone)]
enum Repr {
    Owned(OwnedPacket),
    Bytes(Bytes),
    Static(&'static [u8]),
    Inline(Inline),
}

/// Bytes held in the packet value: `data[start..start + len]`. Byte-sized fields only, so the
/// variant packs right after the enum's tag, in the room the largest variant (a `Bytes`) leaves.
#[derive(Clone, Copy)]
struct Inline {
    start: u8,
    len: u8,
    data: [u8; Packet::INLINE_CAPACITY],
}

impl Inline {
    /// `bytes.len() <= INLINE_CAPACITY`, checked by the caller.
    #[inline(always)]
    fn new(bytes: &[u8]) -> Inline {
        let mut data = [0; Packet::INLINE_CAPACITY];
        data[..bytes.len()].copy_from_slice(bytes);
        Inline {
            start: 0,
            len: bytes.len() as u8,
            data,
        }
    }

    /// The concatenation of `chunks` (their total at most `INLINE_CAPACITY`, checked by the
    /// caller).
    fn from_chunks<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> Inline {
        let mut data = [0; Packet::INLINE_CAPACITY];
        let mut len = 0;
        for chunk in chunks {
            data[len..len + chunk.len()].copy_from_slice(chunk);
            len += chunk.len();
        }
        Inline {
            start: 0,
            len: len as u8,
            data,
        }
    }

    #[inline(always)]
    fn as_slice(&self) -> &[u8] {
        debug_assert!(usize::from(self.start) + usize::from(self.len) <= Packet::INLINE_CAPACITY);
        // SAFETY: `start + len <= INLINE_CAPACITY` always holds: `new` and `from_chunks` start at
        // 0 with at most the capacity, and `narrowed` only ever shrinks the range within itself.
        unsafe {
            self.data.get_unchecked(
                usize::from(self.start)..usize::from(self.start) + usize::from(self.len),
            )
        }
    }

    #[inline(always)]
    fn as_mut_slice(&mut self) -> &mut [u8] {
        let (start, len) = (usize::from(self.start), usize::from(self.len));
        &mut self.data[start..start + len]
    }

    /// Narrow to `[start, end)` of the current bytes (`start <= end <= len`, checked by the
    /// caller): a copy of the value, not of the bytes' place.
    #[inline(always)]
    fn narrowed(mut self, start: usize, end: usize) -> Inline {
        debug_assert!(start <= end && end <= usize::from(self.len));
        self.start += start as u8;
        self.len = (end - start) as u8;
        self
    }
}

/// What an inline packet can hold: the largest variant's size (a `Bytes`), plus the room up to
/// the enum's 8-byte alignment after its one-byte tag, less the tag and the two position bytes.
const INLINE_BYTES: usize = std::mem::size_of::<Bytes>() + 8 - 3;

impl Default for Packet {
    fn default() -> Packet {
        Packet::new()
    }
}

impl Packet {
    /// The most bytes an inline packet holds in the value itself (see [`Packet`]): frames up to
    /// this size are kept without any allocation.
    ///
    /// ```
    /// use packetpipe::Packet;
    ///
    /// // An inline packet owns its bytes alone, even with a clone alive: the clone is a copy.
    /// let small = Packet::copy_from_slice(&[7; Packet::INLINE_CAPACITY]);
    /// assert!(small.clone().get_mut().is_some());
    /// // A pooled one shares its block with its clones.
    /// let large = Packet::copy_from_slice(&[7; Packet::INLINE_CAPACITY + 1]);
    /// assert!(large.clone().get_mut().is_none());
    /// ```
    pub const INLINE_CAPACITY: usize = INLINE_BYTES;

    /// A packet holding a copy of `data`, as `Bytes::copy_from_slice`: inline (in the value, no
    /// allocation) when it fits [`INLINE_CAPACITY`](Self::INLINE_CAPACITY), else in a block of the
    /// [global pool](crate::Pool::global) (or, should the pool fail to rent, a `Bytes`).
    ///
    /// ```
    /// use packetpipe::Packet;
    ///
    /// let mut packet = Packet::copy_from_slice(b"hello, world");
    /// let hello = packet.split_to(5);
    /// assert_eq!(hello, &b"hello"[..]);
    /// assert_eq!(packet.slice(2..), &b"world"[..]);
    /// let long = Packet::copy_from_slice(&[1; 100]); // a pooled block of the global pool
    /// assert_eq!(long.len(), 100);
    /// ```
    #[inline]
    #[track_caller]
    #[must_use = "copying makes a new packet"]
    pub fn copy_from_slice(data: &[u8]) -> Packet {
        if data.len() <= Self::INLINE_CAPACITY {
            return Packet::inline(data);
        }
        // Loom builds have no global pool (each model makes its own): a `Bytes` there.
        #[cfg(not(packetpipe_loom))]
        if let Ok(packet) = crate::Pool::global().copy_owned(data) {
            return packet.into();
        }
        Bytes::copy_from_slice(data).into()
    }

    /// An inline packet of `data` (`data.len() <= INLINE_CAPACITY`, checked by the caller).
    #[inline]
    pub(crate) fn inline(data: &[u8]) -> Packet {
        debug_assert!(data.len() <= Self::INLINE_CAPACITY);
        Packet {
            repr: Repr::Inline(Inline::new(data)),
        }
    }

    /// An inline packet of `bytes[start..start + len]` (`len <= INLINE_CAPACITY` and the range
    /// within `bytes`, checked by the caller). When `bytes` holds a full capacity from `start`,
    /// that is copied whole (a fixed-size copy, no length-dependent `memcpy`) and the packet
    /// covers the first `len`; the rest is never read.
    // Out of line: `take_frame_after` is inlined into each decoder, and this copy there made the
    // decode of a 64-byte (pooled) frame slower; a call is little next to a pooled copy.
    #[inline(never)]
    pub(crate) fn inline_from(bytes: &[u8], start: usize, len: usize) -> Packet {
        debug_assert!(len <= Self::INLINE_CAPACITY && start + len <= bytes.len());
        let inline = match bytes.get(start..start + Self::INLINE_CAPACITY) {
            Some(full) => {
                let mut data = [0; Packet::INLINE_CAPACITY];
                data.copy_from_slice(full);
                Inline {
                    start: 0,
                    len: len as u8,
                    data,
                }
            }
            None => Inline::new(&bytes[start..start + len]),
        };
        Packet {
            repr: Repr::Inline(inline),
        }
    }

    /// An inline packet of the concatenated `chunks` (their total at most `INLINE_CAPACITY`,
    /// checked by the caller).
    pub(crate) fn inline_from_chunks<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> Packet {
        Packet {
            repr: Repr::Inline(Inline::from_chunks(chunks)),
        }
    }

    /// An empty packet.
    pub const fn new() -> Packet {
        Packet {
            repr: Repr::Static(&[]),
        }
    }

    /// A packet over static bytes (no allocation, no reference count).
    pub const fn from_static(bytes: &'static [u8]) -> Packet {
        Packet {
            repr: Repr::Static(bytes),
        }
    }

    /// Number of bytes, for the crate's hot paths (users get `len` through `Deref`): the length
    /// without forming the slice.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.byte_count()
    }

    /// Whether the packet holds no bytes (as `len`, for the crate).
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.byte_count() == 0
    }

    /// Number of bytes (what `Deref` gives, without forming the slice).
    #[inline]
    pub(crate) fn byte_count(&self) -> usize {
        match &self.repr {
            Repr::Owned(p) => p.len(),
            Repr::Bytes(b) => b.len(),
            Repr::Static(s) => s.len(),
            Repr::Inline(i) => usize::from(i.len),
        }
    }

    /// The bytes (what `Deref` gives).
    #[inline(always)]
    pub(crate) fn as_slice(&self) -> &[u8] {
        match &self.repr {
            Repr::Owned(p) => p.as_slice(),
            Repr::Bytes(b) => b,
            Repr::Static(s) => s,
            Repr::Inline(i) => i.as_slice(),
        }
    }

    /// Whether the bytes are held inline, in the value itself (see [`Packet`]).
    #[cfg(test)]
    pub(crate) fn is_inline(&self) -> bool {
        matches!(self.repr, Repr::Inline(_))
    }

    /// The pooled packet behind this one, if it is pooled.
    #[inline]
    pub(crate) fn as_owned(&self) -> Option<&OwnedPacket> {
        match &self.repr {
            Repr::Owned(p) => Some(p),
            _ => None,
        }
    }

    /// Whether [`prepend`](Self::prepend) of `n` bytes would succeed: pooled, the only handle to
    /// its block, and `n` bytes of headroom. Cheaper than a failed `prepend` (no error is made):
    /// an encoder asks before it tries.
    #[inline]
    pub(crate) fn can_prepend(&self, n: usize) -> bool {
        match &self.repr {
            Repr::Owned(p) => p.headroom() >= n && p.is_unique(),
            _ => n == 0,
        }
    }

    /// Bytes of the packet's pooled block in front of it, which [`prepend`](Self::prepend) can
    /// fill; 0 for a packet that is not pooled.
    ///
    /// ```
    /// let pool = packetpipe::Pool::new();
    /// let mut buf = pool.rent_with_headroom(4, 60)?;
    /// buf.extend_from_slice(b"body")?;
    /// let packet = buf.freeze();
    /// assert_eq!(packet.headroom(), 4);
    /// assert_eq!(packetpipe::Packet::from_static(b"body").headroom(), 0);
    /// # Ok::<(), packetpipe::Error>(())
    /// ```
    pub fn headroom(&self) -> usize {
        match &self.repr {
            Repr::Owned(p) => p.headroom(),
            _ => 0,
        }
    }

    /// Write `header` in front of the bytes, in place, growing the packet (the .NET
    /// `ExpandHeader`). Needs a pooled packet that is the only handle to its block, with
    /// [`headroom`](Self::headroom) for the header; otherwise returns [`Error::SharedBlock`]
    /// (with the block's reference count) or [`Error::NoHeadroom`] (with the sizes; a packet that
    /// is not pooled has no headroom) and leaves the packet unchanged.
    ///
    /// ```
    /// use packetpipe::{Error, Packet};
    ///
    /// let pool = packetpipe::Pool::new();
    /// let mut buf = pool.rent_with_headroom(2, 16)?;
    /// buf.extend_from_slice(b"payload")?;
    /// let mut packet = buf.freeze();
    /// packet.prepend(&[0, 7])?;
    /// assert_eq!(&packet[..], b"\0\x07payload");
    /// let copy = packet.clone();
    /// assert!(matches!(packet.prepend(b"x"), Err(Error::SharedBlock { references: 2 })));
    /// drop(copy);
    /// assert!(matches!(packet.prepend(b"x"), Err(Error::NoHeadroom { needed: 1, available: 0 })));
    /// let mut other = Packet::from_static(b"payload");
    /// assert!(matches!(other.prepend(b"ab"), Err(Error::NoHeadroom { needed: 2, available: 0 })));
    /// # Ok::<(), packetpipe::Error>(())
    /// ```
    pub fn prepend(&mut self, header: &[u8]) -> Result<(), Error> {
        match &mut self.repr {
            Repr::Owned(p) => p.prepend(header),
            _ if header.is_empty() => Ok(()),
            _ => Err(Error::NoHeadroom {
                needed: header.len(),
                available: 0,
            }),
        }
    }

    /// The bytes, mutably, when this packet is the only handle to them (as `Arc::get_mut`): a
    /// pooled packet no other packet, buffer or `Bytes` shares the block of, or a few bytes held
    /// in the value itself. `None` for a shared block, a [`Bytes`] and static bytes.
    ///
    /// ```
    /// let mut packet = packetpipe::Pool::new().copy_from_slice(b"hello")?;
    /// packet.get_mut().unwrap()[0] = b'j';
    /// assert_eq!(&packet[..], b"jello");
    /// let copy = packet.clone();
    /// assert!(packet.get_mut().is_none()); // shared now
    /// # drop(copy);
    /// assert!(packetpipe::Packet::from_static(b"static").get_mut().is_none());
    /// # Ok::<(), packetpipe::Error>(())
    /// ```
    pub fn get_mut(&mut self) -> Option<&mut [u8]> {
        match &mut self.repr {
            Repr::Owned(p) => p.get_mut(),
            Repr::Inline(i) => Some(i.as_mut_slice()),
            Repr::Bytes(_) | Repr::Static(_) => None,
        }
    }

    /// Record `use_` at `site` as the last use of this packet's block, if it is pooled and its
    /// pool tracks leaks (`pool::leaks`).
    #[inline]
    pub(crate) fn note_use(
        &self,
        use_: crate::pool::BlockUse,
        site: &'static std::panic::Location<'static>,
    ) {
        if let Repr::Owned(p) = &self.repr {
            crate::pool::note_use(p.window(), use_, site);
        }
    }

    /// A packet sharing `range` of this one, as `Bytes::slice`. (For a pooled packet of a pool
    /// that tracks leaks, the slices and splits are recorded as its block's last use.)
    ///
    /// # Panics
    ///
    /// If the range is out of bounds, with a message naming the range and the length.
    #[inline]
    #[track_caller]
    #[must_use = "slicing makes a new packet and leaves this one as it is"]
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Packet {
        let range = check_range(Operation::Slice, range, self.byte_count())
            .unwrap_or_else(|e| panic!("{e}"));
        let repr = match &self.repr {
            Repr::Owned(p) => Repr::Owned(p.slice(range)),
            Repr::Bytes(b) => Repr::Bytes(b.slice(range)),
            Repr::Static(s) => Repr::Static(&s[range]),
            Repr::Inline(i) => Repr::Inline(i.narrowed(range.start, range.end)),
        };
        Packet { repr }
    }

    /// Split off and return the first `at` bytes; `self` keeps the rest.
    ///
    /// # Panics
    ///
    /// If `at > len`, with a message naming both.
    #[inline]
    #[track_caller]
    #[must_use = "consider Buf::advance to drop the first bytes"]
    pub fn split_to(&mut self, at: usize) -> Packet {
        check_at(Operation::SplitTo, at, self.byte_count()).unwrap_or_else(|e| panic!("{e}"));
        let repr = match &mut self.repr {
            Repr::Owned(p) => Repr::Owned(p.split_to(at)),
            Repr::Bytes(b) => Repr::Bytes(b.split_to(at)),
            Repr::Static(s) => {
                let (head, tail) = s.split_at(at);
                *s = tail;
                Repr::Static(head)
            }
            Repr::Inline(i) => {
                let len = usize::from(i.len);
                let head = i.narrowed(0, at);
                *i = i.narrowed(at, len);
                Repr::Inline(head)
            }
        };
        Packet { repr }
    }

    /// Split off and return the bytes from `at` on; `self` keeps the first `at`.
    ///
    /// # Panics
    ///
    /// If `at > len`, with a message naming both.
    #[track_caller]
    #[must_use = "consider truncate to drop the last bytes"]
    pub fn split_off(&mut self, at: usize) -> Packet {
        check_at(Operation::SplitOff, at, self.byte_count()).unwrap_or_else(|e| panic!("{e}"));
        let repr = match &mut self.repr {
            Repr::Owned(p) => Repr::Owned(p.split_off(at)),
            Repr::Bytes(b) => Repr::Bytes(b.split_off(at)),
            Repr::Static(s) => {
                let (head, tail) = s.split_at(at);
                *s = head;
                Repr::Static(tail)
            }
            Repr::Inline(i) => {
                let len = usize::from(i.len);
                let tail = i.narrowed(at, len);
                *i = i.narrowed(0, at);
                Repr::Inline(tail)
            }
        };
        Packet { repr }
    }

    /// Drop this packet into `batch`: a pooled packet's reference joins the batch (one decrement
    /// for a run of packets of one block), any other kind is dropped at once.
    #[inline]
    pub(crate) fn release_into(self, batch: &mut ReleaseBatch) {
        if let Repr::Owned(packet) = self.repr {
            batch.add(packet.into_window());
        }
    }

    /// Grow a pooled packet over the `n` bytes of its block that follow it: the pipe's last
    /// segment taking in the bytes of a later flush into the same block. Any other packet (only
    /// an empty one reaches here otherwise) panics.
    ///
    /// # Safety
    ///
    /// As [`Window::grow`](crate::block::Window): the block's writer sealed those bytes in place,
    /// and the caller has synchronized with that seal.
    #[inline]
    pub(crate) unsafe fn grow_sealed(&mut self, n: usize) {
        match &mut self.repr {
            // SAFETY: the caller's contract is the window's.
            Repr::Owned(p) => unsafe { p.grow(n) },
            _ => panic!("growing a packet that is not pooled by {n} bytes"),
        }
    }

    /// Drop the first `n` bytes in place (`n <= len`, checked by the caller): `Buf::advance`
    /// without its bounds message, for the pipe's per-frame consume.
    #[inline]
    pub(crate) fn skip_front(&mut self, n: usize) {
        debug_assert!(
            n <= self.len(),
            "skip_front of {n} bytes from {}",
            self.len()
        );
        match &mut self.repr {
            Repr::Owned(p) => p.skip_front(n),
            Repr::Bytes(b) => b.advance(n),
            Repr::Static(s) => *s = &s[n..],
            Repr::Inline(i) => *i = i.narrowed(n, usize::from(i.len)),
        }
    }

    /// Append `next` without copying when both are pooled and `next` starts where this packet
    /// ends in the same block (`OwnedPacket::try_join`); an empty side joins anything. Otherwise
    /// `next` comes back in `Err` and this packet is unchanged. (Bytes and static slices never
    /// join: memory that merely lies next to theirs may belong to something else.)
    pub(crate) fn try_join(&mut self, next: Packet) -> Result<(), Packet> {
        if next.is_empty() {
            return Ok(());
        }
        if self.is_empty() {
            *self = next;
            return Ok(());
        }
        match (&mut self.repr, next.repr) {
            (Repr::Owned(head), Repr::Owned(tail)) => head.try_join(tail).map_err(Packet::from),
            (_, repr) => Err(Packet { repr }),
        }
    }

    /// Keep the first `len` bytes (no effect if the packet is shorter).
    pub fn truncate(&mut self, len: usize) {
        match &mut self.repr {
            Repr::Owned(p) => p.truncate(len),
            Repr::Bytes(b) => b.truncate(len),
            Repr::Static(s) => *s = &s[..len.min(s.len())],
            Repr::Inline(i) => *i = i.narrowed(0, len.min(usize::from(i.len))),
        }
    }

    /// Convert into [`Bytes`] without copying a shared payload (a pooled packet costs one small
    /// allocation, the owner box of `Bytes::from_owner`, and its block returns to the pool when
    /// the `Bytes` drops; a few bytes held in the value are copied into the `Bytes`, as
    /// `Bytes::copy_from_slice`).
    #[must_use = "converting drops the packet"]
    pub fn into_bytes(self) -> Bytes {
        match self.repr {
            Repr::Owned(p) => p.into_bytes(),
            Repr::Bytes(b) => b,
            Repr::Static(s) => Bytes::from_static(s),
            Repr::Inline(i) => Bytes::copy_from_slice(i.as_slice()),
        }
    }
}

/// `at` must not be past `len` (a split point).
#[inline]
pub(crate) fn check_at(operation: Operation, at: usize, len: usize) -> Result<(), Error> {
    if at > len {
        return Err(Error::OutOfRange {
            operation,
            start: 0,
            end: at,
            len,
        });
    }
    Ok(())
}

/// Make a `Bytes` share its buffer through a reference count now, so later clones and slices
/// never allocate (`bytes` promotes a `Vec`-backed `Bytes` lazily, on its first clone).
fn promote(bytes: Bytes) -> Bytes {
    drop(bytes.clone());
    bytes
}

impl From<OwnedPacket> for Packet {
    #[inline]
    fn from(packet: OwnedPacket) -> Packet {
        Packet {
            repr: Repr::Owned(packet),
        }
    }
}

impl From<PacketBuf> for Packet {
    /// Seals the buffer's written bytes.
    #[inline]
    #[track_caller]
    fn from(buf: PacketBuf) -> Packet {
        buf.freeze()
    }
}

impl From<Bytes> for Packet {
    #[inline]
    fn from(bytes: Bytes) -> Packet {
        Packet {
            repr: Repr::Bytes(promote(bytes)),
        }
    }
}

impl From<bytes::BytesMut> for Packet {
    #[inline]
    fn from(bytes: bytes::BytesMut) -> Packet {
        bytes.freeze().into()
    }
}

impl From<Vec<u8>> for Packet {
    #[inline]
    fn from(vec: Vec<u8>) -> Packet {
        Bytes::from(vec).into()
    }
}

impl From<&'static [u8]> for Packet {
    #[inline]
    fn from(bytes: &'static [u8]) -> Packet {
        Packet::from_static(bytes)
    }
}

impl From<&'static str> for Packet {
    #[inline]
    fn from(s: &'static str) -> Packet {
        Packet::from_static(s.as_bytes())
    }
}

impl From<Packet> for Bytes {
    #[inline]
    fn from(packet: Packet) -> Bytes {
        packet.into_bytes()
    }
}

byte_view_impls!(Packet);

/// Byte order, as `Bytes` and `[u8]`.
impl PartialOrd for Packet {
    fn partial_cmp(&self, other: &Packet) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Byte order, as `Bytes` and `[u8]`.
impl Ord for Packet {
    fn cmp(&self, other: &Packet) -> std::cmp::Ordering {
        self.as_slice().cmp(other.as_slice())
    }
}

impl Buf for Packet {
    #[inline]
    fn remaining(&self) -> usize {
        self.byte_count()
    }

    #[inline]
    fn chunk(&self) -> &[u8] {
        self.as_slice()
    }

    #[inline]
    fn advance(&mut self, cnt: usize) {
        let len = self.byte_count();
        assert!(
            cnt <= len,
            "cannot advance past `remaining`: {cnt} <= {len}"
        );
        match &mut self.repr {
            Repr::Owned(p) => p.advance(cnt),
            Repr::Bytes(b) => b.advance(cnt),
            Repr::Static(s) => *s = &s[cnt..],
            Repr::Inline(i) => *i = i.narrowed(cnt, len),
        }
    }

    fn copy_to_bytes(&mut self, len: usize) -> Bytes {
        self.split_to(len).into_bytes()
    }
}

/// `Name { len: N, data: "..." }` with the first 32 bytes escaped, for `Debug` impls.
pub(crate) fn debug_bytes(f: &mut fmt::Formatter<'_>, name: &str, bytes: &[u8]) -> fmt::Result {
    const SHOWN: usize = 32;
    write!(f, "{name} {{ len: {}, data: b\"", bytes.len())?;
    for &b in bytes.iter().take(SHOWN) {
        write!(f, "{}", std::ascii::escape_default(b))?;
    }
    let more = if bytes.len() > SHOWN { "\"..." } else { "\"" };
    write!(f, "{more} }}")
}

// The packet types are byte segments: one slice each, a chain one per packet.
impl crate::ByteSegments for Packet {
    fn segments(&self) -> impl Iterator<Item = &[u8]> + Clone {
        std::iter::once(self.as_slice())
    }

    #[inline]
    fn len(&self) -> usize {
        self.byte_count()
    }
}

impl crate::ByteSegments for PacketBuf {
    fn segments(&self) -> impl Iterator<Item = &[u8]> + Clone {
        std::iter::once(&self[..])
    }

    #[inline]
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }
}

impl crate::ByteSegments for PacketChain {
    fn segments(&self) -> impl Iterator<Item = &[u8]> + Clone {
        self.iter().map(Packet::as_slice)
    }

    fn len(&self) -> usize {
        PacketChain::len(self)
    }

    // Compiled here, called out of line: the trait's default, generic, would be inlined into each
    // caller's code, a copy loop most callers reach only on a cold path (measured: the RESP
    // example's argument lookup grew by 26 instructions a message).
    fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len());
        for segment in self.segments() {
            out.extend_from_slice(segment);
        }
        out
    }
}

#[cfg(test)]
mod size_tests {
    /// A `Packet` is smaller than an `Error` (see `error::size::Hold`): the take path's
    /// `Result<Packet, Error>` keeps a discriminant of its own instead of the packet's niche.
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn a_packet_is_smaller_than_an_error() {
        assert_eq!(std::mem::size_of::<super::Packet>(), 40);
        assert!(std::mem::size_of::<super::Packet>() < std::mem::size_of::<crate::Error>());
    }
}
