//! The `Decoder` trait, its answer, and the view of the pipe a decoder works on.

use super::FrameError;
use crate::packet::{Packet, PacketChain};
use crate::pipe::{PipeReader, ReadBuffer};
use crate::ByteSegments;

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
/// `find`, or ask for one slice with [`DecodeBuf::contiguous`]) plus the ways to take bytes out.
/// It either takes a frame out and returns it, or says how many bytes it needs, or fails. A frame
/// is usually taken with [`DecodeBuf::take_frame`] (copied up to the pipe's copy threshold, as
/// `PipeReader::take_frame` describes, shared zero-copy above it); a decoder may also build its
/// own item from the view and then [`skip`](DecodeBuf::skip) the bytes. A decoder whose frame ends
/// the conversation calls [`DecodeBuf::end_stream`].
///
/// The decoder takes the bytes itself (as tokio-util's `Decoder` splits its `BytesMut`) rather than
/// answering "a frame of n bytes at offset k": a decoder that builds its own item needs no second
/// pass.
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
///         Ok(Decoded::Frame(buf.take_frame(self.0)?))
///     }
/// }
///
/// let (mut writer, reader) = packetpipe::pipe();
/// writer.write_slice(b"abcdefg")?;
/// writer.complete();
/// let mut frames = Frames::new(reader, Fixed(3));
/// let mut frames = frames.iter_blocking();
/// assert_eq!(frames.next().unwrap()?, &b"abc"[..]);
/// assert_eq!(frames.next().unwrap()?, &b"def"[..]);
/// // One byte of an incomplete frame remains when the writer completes.
/// assert!(matches!(frames.next(), Some(Err(FrameError::BytesRemaining { len: 1 }))));
/// assert!(frames.next().is_none());
/// # Ok::<(), FrameError>(())
/// ```
pub trait Decoder {
    /// What a frame decodes to.
    type Item;
    /// The error. Both the frame module's errors ([`FrameError`], what [`DecodeBuf`]'s methods
    /// return) and the pipe's ([`crate::Error`], what [`ReadBuffer`]'s return) convert into it,
    /// so `?` works on every call inside `decode` whatever the error type.
    type Error: From<FrameError> + From<crate::Error>;

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
    /// Where [`contiguous`](DecodeBuf::contiguous) copies bytes that span segments: the
    /// [`Frames`](super::Frames)' own, reused from call to call.
    scratch: &'a mut Vec<u8>,
    /// [`end_stream`](DecodeBuf::end_stream) was called.
    pub(crate) end: bool,
}

impl<'a> DecodeBuf<'a> {
    /// `reader` must hold a read result ([`PipeReader::last_read`] is `Some`).
    #[inline]
    pub(crate) fn new(reader: &'a mut PipeReader, scratch: &'a mut Vec<u8>) -> DecodeBuf<'a> {
        debug_assert!(reader.last_read().is_some());
        DecodeBuf {
            reader,
            scratch,
            end: false,
        }
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

    /// The pipe's copy threshold: [`take_frame`](Self::take_frame) copies a frame of at most
    /// this many bytes, and shares a larger one lying in one segment.
    #[inline]
    pub(crate) fn copy_threshold(&self) -> usize {
        self.reader.copy_threshold()
    }

    /// The first `n` bytes as one slice, for a parser that needs one (`httparse`, say), without
    /// consuming them.
    ///
    /// The common case costs nothing: when the `n` bytes lie in the first segment (a request
    /// head that arrived with one read, say) the slice is borrowed from the pipe's block. When
    /// they span segments they are copied into a scratch buffer that the [`Frames`](super::Frames)
    /// owns and reuses, so a steady stream allocates nothing once the scratch has grown to the
    /// longest prefix asked for.
    ///
    /// Fails with the numbers ([`crate::Error::FrameBeyondBuffer`]) if the view holds fewer than
    /// `n` bytes.
    ///
    /// ```
    /// use packetpipe::frame::{DecodeBuf, Decoded, Decoder, FrameError, Frames};
    ///
    /// /// Frames ended by a blank line, parsed as one slice.
    /// struct Heads;
    ///
    /// impl Decoder for Heads {
    ///     type Item = usize;
    ///     type Error = FrameError;
    ///
    ///     fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Decoded<usize>, FrameError> {
    ///         let len = buf.len();
    ///         let head = buf.contiguous(len)?; // borrowed, or copied once if it spans segments
    ///         match head.windows(2).position(|w| w == b"\n\n") {
    ///             Some(at) => {
    ///                 buf.skip(at + 2)?;
    ///                 Ok(Decoded::Frame(at))
    ///             }
    ///             None => Ok(Decoded::NeedAtLeast(len + 1)),
    ///         }
    ///     }
    /// }
    ///
    /// let (mut writer, reader) = packetpipe::pipe();
    /// writer.write_slice(b"a: 1\n")?;
    /// writer.append(packetpipe::Packet::from_static(b"b: 2\n\n"))?; // a second segment
    /// writer.complete();
    /// let mut frames = Frames::new(reader, Heads);
    /// assert_eq!(frames.iter_blocking().next().unwrap()?, 9);
    /// # Ok::<(), FrameError>(())
    /// ```
    #[inline]
    pub fn contiguous(&mut self, n: usize) -> Result<&[u8], FrameError> {
        let buffer = self
            .reader
            .last_buffer()
            .expect("a DecodeBuf always holds a read");
        let first = buffer.first_chunk();
        if n <= first.len() {
            return Ok(&first[..n]);
        }
        let len = buffer.len();
        if n > len {
            return Err(crate::Error::FrameBeyondBuffer {
                skip: 0,
                requested: n,
                len,
            }
            .into());
        }
        self.scratch.clear();
        self.scratch.resize(n, 0);
        buffer.copy_prefix_to(&mut self.scratch[..])?;
        Ok(&self.scratch[..])
    }

    /// Take the first `n` bytes out as a packet: copied (as
    /// [`PipeReader::take_frame`] does) when `n` is at most the pipe's copy threshold (so a
    /// small frame does not keep its receive block alive), shared without copying above it when
    /// they lie in one segment. A pool that tracks leaks records the caller (the decoder) as the
    /// site of the take.
    #[inline]
    #[track_caller]
    pub fn take_frame(&mut self, n: usize) -> Result<Packet, FrameError> {
        Ok(self.reader.take_frame(n)?)
    }

    /// Drop the first `skip` bytes (a header), then take the next `n` out as
    /// [`take_frame`](Self::take_frame) does, in one step: a copied frame's buffer holds the `n`
    /// bytes only.
    #[inline]
    #[track_caller]
    pub(crate) fn take_frame_after(&mut self, skip: usize, n: usize) -> Result<Packet, FrameError> {
        Ok(self.reader.take_frame_after(skip, n)?)
    }

    /// Take the first `n` bytes out as a chain of the segments' packets, never copying
    /// ([`PipeReader::take_frame_chain`]).
    #[track_caller]
    pub fn take_frame_chain(&mut self, n: usize) -> Result<PacketChain, FrameError> {
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

    /// End the stream after this call: the frame the decoder returns now (if any) is the last
    /// the [`Frames`](super::Frames) yields, then it yields `None` (and a
    /// [`forward`](super::FrameWriter::forward) over it flushes and ends) without reading the
    /// pipe again. The bytes after the frame stay in the pipe:
    /// [`into_inner`](super::Frames::into_inner) hands them back.
    ///
    /// For a protocol whose frame says the conversation is over (an HTTP/1.1 request with
    /// `Connection: close`, a `QUIT` command): its answer goes out and the connection closes,
    /// without waiting for the peer to send more or to close first. Works from
    /// [`Decoder::decode`] and [`Decoder::decode_eof`] alike.
    ///
    /// ```
    /// use packetpipe::frame::{DecodeBuf, Decoded, Decoder, FrameError, Frames, Lines};
    /// use packetpipe::ByteSegments;
    ///
    /// /// Lines, up to and including "QUIT".
    /// struct UntilQuit(Lines);
    ///
    /// impl Decoder for UntilQuit {
    ///     type Item = packetpipe::frame::Line;
    ///     type Error = FrameError;
    ///
    ///     fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Decoded<Self::Item>, FrameError> {
    ///         let decoded = self.0.decode(buf)?;
    ///         if matches!(&decoded, Decoded::Frame(line) if line == "QUIT") {
    ///             buf.end_stream();
    ///         }
    ///         Ok(decoded)
    ///     }
    /// }
    ///
    /// let (mut writer, reader) = packetpipe::pipe();
    /// writer.write_slice(b"PING\nQUIT\nPING\n")?; // the writer stays open
    /// writer.flush_blocking()?;
    /// let mut lines = Frames::new(reader, UntilQuit(Lines::new()));
    /// let got: Vec<_> = lines.iter_blocking().collect::<Result<_, _>>()?;
    /// assert_eq!(got, ["PING", "QUIT"]);
    /// let mut reader = lines.into_inner(); // the rest is still there
    /// assert_eq!(reader.read_blocking()?.buffer.to_vec(), b"PING\n");
    /// # Ok::<(), FrameError>(())
    /// ```
    #[inline]
    pub fn end_stream(&mut self) {
        self.end = true;
    }
}

impl std::fmt::Debug for DecodeBuf<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecodeBuf")
            .field("len", &self.len())
            .field("end", &self.end)
            .finish()
    }
}
