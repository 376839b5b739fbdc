//! The `Decoder` trait, its answer, and the view of the pipe a decoder works on.

use super::FrameError;
use crate::packet::{Packet, PacketChain};
use crate::pipe::{PipeReader, ReadBuffer};

/// A decoder's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded<T> {
    /// A frame, already taken out of the [`DecodeBuf`] (its bytes are consumed).
    Frame(T),
    /// No complete frame yet: the buffer must hold at least this many bytes (counted from its
    /// start, after whatever this call consumed) before decoding is worth trying again.
    /// [`Frames`](super::Frames) then waits with
    /// [`read_at_least`](PipeReader::read_at_least): the writer's backpressure is lifted until
    /// they are there, and the reader wakes once, not once per segment. A value not above the
    /// buffer's length means "at least one more byte".
    NeedAtLeast(usize),
}

/// Splits frames out of a byte stream that arrives as a chain of segments.
///
/// [`decode`](Self::decode) sees every unconsumed byte as a [`DecodeBuf`]: a
/// [`ReadBuffer`] (never forced contiguous: parse with its [`cursor`](ReadBuffer::cursor), `get`,
/// `find`) plus the ways to take bytes out. It either takes a frame out and returns it, or says how
/// many bytes it needs, or fails. A frame is usually taken with [`DecodeBuf::take`] (copied up to
/// the pipe's copy threshold, as `PipeReader::take_frame` describes, shared zero-copy above it); a decoder may
/// also build its own item from the view and then [`skip`](DecodeBuf::skip) the bytes.
///
/// The decoder takes the bytes itself (as tokio-util's `Decoder` splits its `BytesMut`) rather than
/// answering "a frame of n bytes at offset k": a header and its payload then come out in one
/// `take` (see [`LengthDelimited`](super::LengthDelimited)), and a decoder that builds its own
/// item needs no second pass.
///
/// ```
/// use packetpipe::frame::{DecodeBuf, Decoded, Decoder, FrameError, Frames};
///
/// /// Frames of a fixed size.
/// struct Fixed(usize);
///
/// impl Decoder for Fixed {
///     type Item = packetpipe::Packet;
///     type Error = FrameError;
///
///     fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Decoded<Self::Item>, FrameError> {
///         if buf.len() < self.0 {
///             return Ok(Decoded::NeedAtLeast(self.0));
///         }
///         Ok(Decoded::Frame(buf.take(self.0)?))
///     }
/// }
///
/// let (mut writer, reader) = packetpipe::pipe::pipe();
/// writer.write_slice(b"abcdefg")?;
/// writer.complete();
/// let mut frames = Frames::new(reader, Fixed(3));
/// assert_eq!(frames.next_blocking().unwrap()?, &b"abc"[..]);
/// assert_eq!(frames.next_blocking().unwrap()?, &b"def"[..]);
/// // One byte of an incomplete frame remains when the writer completes.
/// assert!(matches!(frames.next_blocking(), Some(Err(FrameError::BytesRemaining { len: 1 }))));
/// assert!(frames.next_blocking().is_none());
/// # Ok::<(), FrameError>(())
/// ```
pub trait Decoder {
    /// What a frame decodes to.
    type Item;
    /// The error; pipe errors and the frame module's own errors convert into it.
    type Error: From<FrameError>;

    /// Take the next frame out of `buf`, or say how many bytes are needed first.
    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Decoded<Self::Item>, Self::Error>;

    /// Called when the writer has completed and [`decode`](Self::decode) needs more bytes than
    /// will ever come: return a last frame, `None` to end the stream, or an error. Called again
    /// after each frame it returns.
    ///
    /// [`Frames`](super::Frames) calls it in tokio-util's order: bytes that arrived with the end
    /// go through `decode` first; an end that brings no new byte (`decode` has already asked for
    /// more of these) comes straight here, so `decode` is not asked again about the same bytes.
    ///
    /// The default (tokio-util's `decode_eof`) decodes once more, ends cleanly when the buffer is
    /// empty, and fails with [`FrameError::BytesRemaining`] when bytes of an incomplete frame are
    /// left.
    fn decode_eof(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<Self::Item>, Self::Error> {
        match self.decode(buf)? {
            Decoded::Frame(item) => Ok(Some(item)),
            Decoded::NeedAtLeast(_) if buf.is_empty() => Ok(None),
            Decoded::NeedAtLeast(_) => Err(FrameError::BytesRemaining { len: buf.len() }.into()),
        }
    }
}

impl<D: Decoder + ?Sized> Decoder for &mut D {
    type Item = D::Item;
    type Error = D::Error;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Decoded<Self::Item>, Self::Error> {
        (**self).decode(buf)
    }

    fn decode_eof(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<Self::Item>, Self::Error> {
        (**self).decode_eof(buf)
    }
}

/// The unconsumed bytes of a pipe as a decoder sees them: a view to parse, and the ways to take
/// bytes out of it. Taking shrinks the view from the front.
pub struct DecodeBuf<'a> {
    reader: &'a mut PipeReader,
    completed: bool,
}

impl<'a> DecodeBuf<'a> {
    /// `reader` must hold a read result ([`PipeReader::last_read`] is `Some`).
    pub(crate) fn new(reader: &'a mut PipeReader, completed: bool) -> DecodeBuf<'a> {
        debug_assert!(reader.last_read().is_some());
        DecodeBuf { reader, completed }
    }

    /// Every unconsumed byte read so far, as segments.
    #[inline]
    pub fn buffer(&self) -> ReadBuffer<'_> {
        self.reader
            .last_buffer()
            .expect("a DecodeBuf always holds a read")
    }

    /// Number of bytes in the view.
    #[inline]
    pub fn len(&self) -> usize {
        self.buffer().len()
    }

    /// Whether the view is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The stream position of the view's first byte (bytes consumed from the pipe before it), for
    /// decoders that remember how far they searched.
    #[inline]
    pub fn position(&self) -> u64 {
        self.reader.position()
    }

    /// The pipe's copy threshold: [`take`](Self::take) copies a frame of at most this many bytes
    /// (see `PipeReader::take_frame`), and shares a larger one lying in one segment. A decoder that chooses
    /// between `take` and [`take_chain`](Self::take_chain) by size decides as `take` does with it.
    #[inline]
    pub fn copy_threshold(&self) -> usize {
        self.reader.copy_threshold()
    }

    /// The writer has completed: no byte beyond this view will arrive.
    #[inline]
    pub fn is_completed(&self) -> bool {
        self.completed
    }

    /// Take the first `n` bytes out as a packet: copied (as `PipeReader::take_frame` does) when `n` is at
    /// most the pipe's copy threshold (so a small frame does not keep its receive block alive),
    /// shared without copying above it when they lie in one segment
    /// ([`PipeReader::take_frame`]). A pool that tracks leaks records the caller (the decoder) as
    /// the site of the take.
    #[inline]
    #[track_caller]
    pub fn take(&mut self, n: usize) -> Result<Packet, FrameError> {
        Ok(self.reader.take_frame(n)?)
    }

    /// Drop the first `skip` bytes (a header), then take the next `n` out as
    /// [`take`](Self::take) does, in one step (the pipe reader's fused take): a copied frame's
    /// buffer holds the `n` bytes only.
    #[inline]
    #[track_caller]
    pub fn take_after(&mut self, skip: usize, n: usize) -> Result<Packet, FrameError> {
        Ok(self.reader.take_frame_after(skip, n)?)
    }

    /// Take the first `n` bytes out as a chain of the segments' packets, never copying
    /// ([`PipeReader::take_frame_chain`]).
    #[track_caller]
    pub fn take_chain(&mut self, n: usize) -> Result<PacketChain, FrameError> {
        Ok(self.reader.take_frame_chain(n)?)
    }

    /// Consume the first `n` bytes without copying them: the view's start moves on, as a take
    /// of `n` bytes would move it, and no packet is made.
    #[inline]
    pub fn skip(&mut self, n: usize) -> Result<(), FrameError> {
        if n > 0 {
            self.reader.skip_frame(n)?;
        }
        Ok(())
    }
}

impl std::fmt::Debug for DecodeBuf<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecodeBuf")
            .field("len", &self.len())
            .field("is_completed", &self.completed)
            .finish()
    }
}
