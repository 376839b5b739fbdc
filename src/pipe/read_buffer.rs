//! `ReadBuffer`: a view of the reader's flushed, unconsumed bytes.

use std::io::IoSlice;
use std::ops::RangeBounds;

use bytes::Buf;

use super::input::{Input, Packets};
use crate::error::check_range;
use crate::segments::ByteSegments;

/// A view of flushed bytes as a chain of segments (never a zero-length one).
///
/// It borrows the [`PipeReader`](super::PipeReader), so nothing can be consumed while the view is
/// alive; it is `Copy` and cheap to pass around. [`ByteSegments`] adds `to_vec`, `copy_prefix_to`,
/// hex dump, lossy UTF-8 display, pattern search across segments (from the start or from an
/// offset: [`find_from`](ByteSegments::find_from)) and integers peeked in place without a panic
/// ([`peek_be`](ByteSegments::peek_be), [`peek_le`](ByteSegments::peek_le): `None` when the bytes
/// are not there yet), and its segments ([`segments`](ByteSegments::segments), front to back,
/// none of them empty); [`cursor`](Self::cursor) gives a [`bytes::Buf`] for parsing (its
/// [`chunk`](Buf::chunk) is the first segment, its [`chunks_vectored`](Buf::chunks_vectored) fills
/// `IoSlice`s for a vectored write).
///
/// ```
/// use bytes::Buf;
/// use packetpipe::ByteSegments;
///
/// let (mut writer, mut reader) = packetpipe::pipe::pipe();
/// writer.append(bytes::Bytes::from_static(b"\x00\x05he"))?;
/// writer.append(bytes::Bytes::from_static(b"llo!"))?;
/// writer.flush_blocking()?;
/// let result = reader.read_blocking()?;
/// let buffer = result.buffer;
/// assert_eq!(buffer.segments().count(), 2);
/// assert_eq!(buffer.cursor().chunk(), b"\x00\x05he"); // the first segment
/// let mut cursor = buffer.cursor();
/// let len = cursor.get_u16() as usize;
/// assert_eq!(buffer.slice(2..2 + len).to_vec(), b"hello");
/// assert_eq!(buffer.find(b"lo"), Some(5));
/// assert_eq!(buffer.peek_be::<u16>(0), Some(5)); // the header, without a cursor
/// assert_eq!(buffer.peek_be::<u64>(1), None); // 7 bytes from there: not enough
/// # Ok::<(), packetpipe::Error>(())
/// ```
#[derive(Clone, Copy)]
pub struct ReadBuffer<'a> {
    queue: &'a Input,
    start: usize,
    len: usize,
}

impl<'a> ReadBuffer<'a> {
    #[inline]
    pub(crate) fn new(queue: &'a Input, len: usize) -> ReadBuffer<'a> {
        ReadBuffer {
            queue,
            start: 0,
            len,
        }
    }

    /// Number of bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view holds no bytes.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The segments, front to back, none of them empty: what [`ByteSegments::segments`] returns,
    /// with the lifetime of the bytes rather than of this view, so the iterator of a view made
    /// on the spot (`buffer.slice(pos..).segments()`) can be returned. The same name as the
    /// trait's: `buffer.segments()` calls this one, with or without the trait in scope.
    #[inline]
    #[must_use]
    pub fn segments(&self) -> SegmentIter<'a> {
        SegmentIter {
            packets: self.queue.packets(),
            skip: self.start,
            left: self.len,
        }
    }

    /// The first segment (empty when the view is): what `cursor().chunk()` returns, without the
    /// walk when the view starts at the front (the decoders' header fast path).
    #[inline]
    pub(crate) fn first_chunk(&self) -> &'a [u8] {
        if self.start == 0 {
            // The common case, a view from the front: one packet, no walk.
            match self.queue.front_holding(1) {
                Some(packet) => &packet[..packet.len().min(self.len)],
                None => &[],
            }
        } else {
            self.segments().next().unwrap_or(&[])
        }
    }

    /// The byte at `index`, if within the view (`ByteSegments::peek_be::<u8>` outside the
    /// crate).
    pub(crate) fn get(&self, index: usize) -> Option<u8> {
        if index >= self.len {
            return None;
        }
        let mut index = index;
        for chunk in self.segments() {
            if index < chunk.len() {
                return Some(chunk[index]);
            }
            index -= chunk.len();
        }
        None
    }

    /// A view of `range` of this one.
    ///
    /// Panics if the range is out of bounds, with a message naming the range and the length (as
    /// slicing a `[u8]` does).
    #[must_use]
    #[track_caller]
    pub fn slice(&self, range: impl RangeBounds<usize>) -> ReadBuffer<'a> {
        let range = check_range(crate::error::Operation::Slice, range, self.len)
            .unwrap_or_else(|e| panic!("{e}"));
        ReadBuffer {
            queue: self.queue,
            start: self.start + range.start,
            len: range.len(),
        }
    }

    /// A [`Buf`] over the view; consuming from it does not consume from the pipe.
    #[inline]
    #[must_use]
    pub fn cursor(&self) -> ReadCursor<'a> {
        let mut chunks = self.segments();
        let current = chunks.next().unwrap_or(&[]);
        ReadCursor {
            current,
            rest: chunks,
            remaining: self.len,
        }
    }

    /// Fill `dst` with the segments for a vectored write; returns how many slots were filled.
    pub(crate) fn io_slices(&self, dst: &mut [IoSlice<'a>]) -> usize {
        let mut n = 0;
        for (slot, chunk) in dst.iter_mut().zip(self.segments()) {
            *slot = IoSlice::new(chunk);
            n += 1;
        }
        n
    }
}

impl ByteSegments for ReadBuffer<'_> {
    fn segments(&self) -> impl Iterator<Item = &[u8]> + Clone {
        self.segments()
    }

    fn len(&self) -> usize {
        self.len
    }
}

impl std::fmt::Debug for ReadBuffer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadBuffer")
            .field("len", &self.len)
            .field("segments", &self.segments().count())
            .finish()
    }
}

/// Iterator over a [`ReadBuffer`]'s segments.
#[derive(Clone)]
pub struct SegmentIter<'a> {
    packets: Packets<'a>,
    skip: usize,
    left: usize,
}

impl<'a> Iterator for SegmentIter<'a> {
    type Item = &'a [u8];

    #[inline]
    fn next(&mut self) -> Option<&'a [u8]> {
        while self.left > 0 {
            // One look at the packet's representation, not one per use.
            let bytes: &'a [u8] = self.packets.next()?;
            if self.skip >= bytes.len() {
                self.skip -= bytes.len();
                continue;
            }
            let start = std::mem::take(&mut self.skip);
            let end = bytes.len().min(start + self.left);
            self.left -= end - start;
            return Some(&bytes[start..end]);
        }
        None
    }
}

impl std::fmt::Debug for SegmentIter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegmentIter")
            .field("left", &self.left)
            .finish()
    }
}

/// A [`Buf`] over a [`ReadBuffer`], for parsing with `get_u32` and friends.
///
/// Besides `Buf`'s `get_*` (which panic when the bytes are not there) and `try_get_*` (which
/// return an error), it is [`ByteSegments`] over its remaining bytes: [`peek_be`] /
/// [`peek_le`] look at an integer ahead without consuming it, and return `None` when the bytes
/// are not all there yet.
///
/// ```
/// use bytes::Buf;
/// use packetpipe::ByteSegments;
///
/// let (mut writer, mut reader) = packetpipe::pipe::pipe();
/// writer.append(&b"\x01\x00"[..])?; // a tag, then the first byte of a length
/// writer.flush_blocking()?;
/// let result = reader.read_blocking()?;
/// let mut cursor = result.buffer.cursor();
/// assert_eq!(cursor.get_u8(), 1);
/// assert_eq!(cursor.peek_be::<u16>(0), None); // the length is not all there: wait for more
/// assert_eq!(cursor.remaining(), 1); // nothing consumed
/// # Ok::<(), packetpipe::Error>(())
/// ```
///
/// [`peek_be`]: ByteSegments::peek_be
/// [`peek_le`]: ByteSegments::peek_le
#[derive(Clone)]
pub struct ReadCursor<'a> {
    current: &'a [u8],
    rest: SegmentIter<'a>,
    remaining: usize,
}

impl Buf for ReadCursor<'_> {
    #[inline]
    fn remaining(&self) -> usize {
        self.remaining
    }

    #[inline]
    fn chunk(&self) -> &[u8] {
        self.current
    }

    #[inline]
    fn advance(&mut self, cnt: usize) {
        // Within the current segment (most `get_*` calls and payload skips): a slice and a
        // subtraction, inlined into the parser. `cnt < current.len() <= remaining`, so no check.
        if cnt < self.current.len() {
            self.current = &self.current[cnt..];
            self.remaining -= cnt;
            return;
        }
        self.advance_across(cnt);
    }

    fn chunks_vectored<'b>(&'b self, dst: &mut [IoSlice<'b>]) -> usize {
        let mut n = 0;
        for (slot, chunk) in dst.iter_mut().zip(
            std::iter::once(self.current)
                .filter(|c| !c.is_empty())
                .chain(self.rest.clone()),
        ) {
            *slot = IoSlice::new(chunk);
            n += 1;
        }
        n
    }
}

impl ByteSegments for ReadCursor<'_> {
    fn segments(&self) -> impl Iterator<Item = &[u8]> + Clone {
        std::iter::once(self.current)
            .filter(|chunk| !chunk.is_empty())
            .chain(self.rest.clone())
    }

    fn len(&self) -> usize {
        self.remaining
    }
}

impl ReadCursor<'_> {
    /// `advance` to the end of the current segment or beyond: on to the next non-empty segment.
    fn advance_across(&mut self, mut cnt: usize) {
        assert!(
            cnt <= self.remaining,
            "cannot advance past `remaining`: {cnt} <= {}",
            self.remaining
        );
        self.remaining -= cnt;
        while cnt > 0 {
            if cnt < self.current.len() {
                self.current = &self.current[cnt..];
                return;
            }
            cnt -= self.current.len();
            self.current = self.rest.next().unwrap_or(&[]);
        }
        if self.current.is_empty() {
            self.current = self.rest.next().unwrap_or(&[]);
        }
    }
}

impl std::fmt::Debug for ReadCursor<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadCursor")
            .field("remaining", &self.remaining)
            .finish()
    }
}
