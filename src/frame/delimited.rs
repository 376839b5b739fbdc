//! `Delimited` and `Lines`: frames ended by a delimiter, decoded as tokio-util's
//! `AnyDelimiterCodec` and `LinesCodec` do.

use super::encoder::put_copied;
use super::{DecodeBuf, Decoded, Decoder, Encoder, FrameError};
use crate::pipe::{PipeWriter, ReadBuffer};
use crate::segments::find_byte;
use crate::ByteSegments;
use crate::Packet;

/// How a [`Search`] finds delimiters: generic, so that [`Lines`] searches for its constant `\n`
/// with no branch on the kind of delimiter, and [`Delimited`] for whichever it was given.
trait Seek {
    /// Bytes in a delimiter (consumed with the frame it ends).
    fn width(&self) -> usize;

    /// Offset of the first delimiter that lies wholly in `window`.
    fn find(&self, window: ReadBuffer<'_>) -> Option<usize>;
}

/// Offset of the first byte of `window` that `is_delimiter` accepts, segment by segment.
#[inline(always)]
fn find_in_chunks(
    window: ReadBuffer<'_>,
    mut find: impl FnMut(&[u8]) -> Option<usize>,
) -> Option<usize> {
    let mut base = 0;
    for chunk in window.segments() {
        if let Some(at) = find(chunk) {
            return Some(base + at);
        }
        base += chunk.len();
    }
    None
}

/// `\n`, for [`Lines`].
#[derive(Debug, Clone, Copy)]
struct Newline;

impl Seek for Newline {
    #[inline(always)]
    fn width(&self) -> usize {
        1
    }

    #[inline(always)]
    fn find(&self, window: ReadBuffer<'_>) -> Option<usize> {
        find_in_chunks(window, |chunk| find_byte(b'\n', chunk))
    }
}

/// A [`Delimited`]'s delimiters.
#[derive(Debug, Clone)]
enum Delimiter {
    /// One byte (either constructor): searched eight bytes at a time.
    Byte(u8),
    /// A sequence of bytes, which may straddle segments.
    Sequence(Box<[u8]>),
    /// Any one byte of a set ([`Delimited::any_of`] with two or more bytes): a 256-bit table.
    AnyOf(Box<[u64; 4]>),
}

impl Delimiter {
    fn any_of(set: &[u8]) -> Delimiter {
        match set {
            [] => panic!("the set of delimiters must not be empty"),
            [byte] => Delimiter::Byte(*byte),
            _ => {
                let mut table = [0u64; 4];
                for &byte in set {
                    table[usize::from(byte >> 6)] |= 1 << (byte & 63);
                }
                Delimiter::AnyOf(Box::new(table))
            }
        }
    }
}

impl Seek for Delimiter {
    #[inline]
    fn width(&self) -> usize {
        match self {
            Delimiter::Sequence(sequence) => sequence.len(),
            Delimiter::Byte(_) | Delimiter::AnyOf(_) => 1,
        }
    }

    #[inline]
    fn find(&self, window: ReadBuffer<'_>) -> Option<usize> {
        match self {
            Delimiter::Byte(byte) => find_in_chunks(window, |chunk| find_byte(*byte, chunk)),
            Delimiter::Sequence(sequence) => window.find(sequence),
            Delimiter::AnyOf(table) => find_in_chunks(window, |chunk| {
                chunk
                    .iter()
                    .position(|&b| table[usize::from(b >> 6)] >> (b & 63) & 1 != 0)
            }),
        }
    }
}

/// The search shared by [`Delimited`] and [`Lines`]: tokio-util's delimiter state machine (a
/// resume index so no byte is searched twice, a maximum length, discarding after an over-long
/// frame), generalized to a delimiter of several bytes that may straddle segments.
#[derive(Debug, Clone)]
struct Search<S> {
    seek: S,
    max_length: usize,
    /// Bytes from the front already searched without finding the delimiter's start.
    next_index: usize,
    /// The stream position of the front when `next_index` was set: if the front has moved since
    /// (the reader was taken back with `Frames::into_inner` and read from), the index is stale.
    searched_at: u64,
    /// Skipping the rest of an over-long frame, up to the next delimiter.
    discarding: bool,
}

impl<S: Seek> Search<S> {
    fn new(seek: S, max_length: usize) -> Search<S> {
        Search {
            seek,
            max_length,
            next_index: 0,
            searched_at: 0,
            discarding: false,
        }
    }

    /// The next frame's length (without the delimiter), after consuming what is discarded.
    #[inline(always)]
    fn next_frame(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Decoded<usize>, FrameError> {
        let k = self.seek.width();
        if self.next_index > 0 && buf.position() != self.searched_at {
            self.next_index = 0; // searched bytes that are gone (or not these): search again
        }
        loop {
            let len = buf.len();
            // A frame of max_length bytes may still end with its delimiter inside the window.
            let read_to = self.max_length.saturating_add(k).min(len);
            let found = if self.next_index + k <= read_to {
                let window = buf.buffer().slice(self.next_index..read_to);
                self.seek.find(window).map(|at| at + self.next_index)
            } else {
                None
            };
            match (self.discarding, found) {
                (true, Some(at)) => {
                    buf.skip(at + k)?;
                    self.discarding = false;
                    self.next_index = 0;
                }
                (true, None) => {
                    // Keep the last k - 1 bytes: they may begin a delimiter.
                    let drop = read_to.saturating_sub(k - 1);
                    buf.skip(drop)?;
                    self.next_index = 0;
                    if drop == 0 || buf.is_empty() {
                        return Ok(Decoded::NeedAtLeast(buf.len() + 1));
                    }
                }
                (false, Some(at)) => {
                    self.next_index = 0;
                    return Ok(Decoded::Frame(at));
                }
                (false, None) if len > self.max_length.saturating_add(k - 1) => {
                    self.discarding = true;
                    return Err(FrameError::DelimiterNotFound {
                        max: self.max_length,
                        examined: read_to,
                    });
                }
                (false, None) => {
                    self.next_index = read_to.saturating_sub(k - 1);
                    self.searched_at = buf.position();
                    return Ok(Decoded::NeedAtLeast(len + 1));
                }
            }
        }
    }

    /// At the writer's end: drop what is left of an over-long frame being discarded (no
    /// delimiter can complete it now); whether there was one.
    fn end_discarded(&mut self, buf: &mut DecodeBuf<'_>) -> Result<bool, FrameError> {
        if !self.discarding {
            return Ok(false);
        }
        buf.skip(buf.len())?;
        self.discarding = false;
        self.next_index = 0;
        Ok(true)
    }

    /// The frame at the front, with its delimiter consumed.
    #[inline(always)]
    fn take(&self, buf: &mut DecodeBuf<'_>, len: usize) -> Result<Packet, FrameError> {
        let mut frame = buf.take_frame(len + self.seek.width())?;
        frame.truncate(len);
        Ok(frame)
    }
}

/// Frames ended by a delimiter, as tokio-util's `AnyDelimiterCodec`: frames are yielded without
/// their delimiter; a frame longer than the maximum fails with [`FrameError::DelimiterNotFound`]
/// and, if the stream is [resumed](super::Frames::resume), is skipped up to the next delimiter; at
/// the writer's completion the bytes after the last delimiter are a last frame.
///
/// Two kinds of delimiter:
/// - [`Delimited::new`]: one sequence of bytes (one byte or several, found across segment
///   boundaries), which the encoder also writes after each frame;
/// - [`Delimited::any_of`]: any one byte of a set ends a frame, and the encoder writes a sequence
///   of its own after each frame: `AnyDelimiterCodec::new_with_max_length(seek_delimiters,
///   sequence_writer, max_length)` ([`Default`] is `AnyDelimiterCodec::default()`: any of
///   `,;\n\r`, `,` written, no maximum).
///
/// Memory stays bounded by the maximum length: no more than `max_length` + the delimiter's length
/// bytes are held waiting for a delimiter.
///
/// ```
/// use packetpipe::frame::{Delimited, FrameWriter, Frames};
///
/// let (writer, reader) = packetpipe::pipe();
/// let mut out = FrameWriter::new(writer, Delimited::new(b"\r\n\r\n", 1024));
/// out.feed(&b"first"[..])?;
/// out.feed(&b"second"[..])?;
/// out.into_inner().complete();
/// let frames: Vec<_> = Frames::new(reader, Delimited::new(b"\r\n\r\n", 1024))
///     .iter_blocking()
///     .collect::<Result<_, _>>()?;
/// assert_eq!(frames, [&b"first"[..], &b"second"[..]]);
/// # Ok::<(), packetpipe::frame::FrameError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Delimited {
    search: Search<Delimiter>,
    /// Written after each frame by the encoders.
    sequence_writer: Box<[u8]>,
}

impl Default for Delimited {
    /// tokio-util's `AnyDelimiterCodec::default()`: a frame ends at any of `,`, `;`, `\n`, `\r`;
    /// the encoder writes `,`; no maximum length.
    fn default() -> Delimited {
        Delimited::any_of(b",;\n\r", b",", usize::MAX)
    }
}

impl Delimited {
    /// Frames ended by `delimiter`, of at most `max_length` bytes each (without the delimiter;
    /// `usize::MAX` for no limit). The encoders write `delimiter` after each frame.
    ///
    /// # Panics
    /// If `delimiter` is empty.
    pub fn new(delimiter: &[u8], max_length: usize) -> Delimited {
        let seek = match delimiter {
            [] => panic!("the delimiter must not be empty"),
            [byte] => Delimiter::Byte(*byte),
            _ => Delimiter::Sequence(delimiter.into()),
        };
        Delimited {
            search: Search::new(seek, max_length),
            sequence_writer: delimiter.into(),
        }
    }

    /// Frames ended by any one byte of `seek_delimiters`, of at most `max_length` bytes each
    /// (without the delimiter; `usize::MAX` for no limit); the encoders write `sequence_writer`
    /// after each frame (it may be empty, or longer than one byte). tokio-util's
    /// `AnyDelimiterCodec::new_with_max_length(seek_delimiters, sequence_writer, max_length)`;
    /// its `new(seek_delimiters, sequence_writer)` is this with `usize::MAX`.
    ///
    /// ```
    /// # use packetpipe::ByteSegments;
    /// use packetpipe::frame::{Delimited, FrameWriter, Frames};
    ///
    /// let (mut writer, reader) = packetpipe::pipe();
    /// writer.write_slice(b"chunk 1,chunk 2;chunk 3\n")?;
    /// writer.complete();
    /// let codec = Delimited::any_of(b",;\n\r", b";--;", 64);
    /// let chunks: Vec<_> = Frames::new(reader, codec.clone()).iter_blocking().collect::<Result<_, _>>()?;
    /// assert_eq!(chunks, [&b"chunk 1"[..], &b"chunk 2"[..], &b"chunk 3"[..]]);
    ///
    /// let (writer, mut reader) = packetpipe::pipe();
    /// let mut out = FrameWriter::new(writer, codec);
    /// out.feed("chunk 1")?;
    /// packetpipe::block_on(out.send("chunk 2"))?;
    /// assert_eq!(reader.read_blocking()?.buffer.to_vec(), b"chunk 1;--;chunk 2;--;");
    /// # Ok::<(), packetpipe::frame::FrameError>(())
    /// ```
    ///
    /// # Panics
    /// If `seek_delimiters` is empty.
    pub fn any_of(seek_delimiters: &[u8], sequence_writer: &[u8], max_length: usize) -> Delimited {
        Delimited {
            search: Search::new(Delimiter::any_of(seek_delimiters), max_length),
            sequence_writer: sequence_writer.into(),
        }
    }
}

impl Decoder for Delimited {
    type Item = Packet;
    type Error = FrameError;

    #[inline(always)]
    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Decoded<Packet>, FrameError> {
        Ok(match self.search.next_frame(buf)? {
            Decoded::Frame(len) => Decoded::Frame(self.search.take(buf, len)?),
            Decoded::NeedAtLeast(n) => Decoded::NeedAtLeast(n),
        })
    }

    fn decode_eof(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<Packet>, FrameError> {
        if let Decoded::Frame(frame) = self.decode(buf)? {
            return Ok(Some(frame));
        }
        // The bytes after the last delimiter are a last frame, unless they end an over-long frame
        // being discarded (a delimiter's first bytes kept in case it continued).
        if self.search.end_discarded(buf)? || buf.is_empty() {
            return Ok(None);
        }
        self.search.next_index = 0;
        let len = buf.len();
        Ok(Some(buf.take_frame(len)?))
    }
}

/// Writes the payload, then the delimiter (the sequence writer, for [`Delimited::any_of`]).
impl Encoder<&[u8]> for Delimited {
    type Error = FrameError;

    fn encode(&mut self, payload: &[u8], dst: &mut PipeWriter) -> Result<(), FrameError> {
        put_copied(dst, payload, &*self.sequence_writer)
    }
}

/// Writes the text, then the delimiter (as tokio-util's `AnyDelimiterCodec` encodes a `&str`).
impl Encoder<&str> for Delimited {
    type Error = FrameError;

    fn encode(&mut self, payload: &str, dst: &mut PipeWriter) -> Result<(), FrameError> {
        put_copied(dst, payload.as_bytes(), &*self.sequence_writer)
    }
}

/// Appends the payload zero-copy, then writes the delimiter.
impl Encoder<Packet> for Delimited {
    type Error = FrameError;

    fn encode(&mut self, payload: Packet, dst: &mut PipeWriter) -> Result<(), FrameError> {
        dst.append(payload)?;
        dst.write_slice(&self.sequence_writer)?;
        Ok(())
    }
}

/// Lines of UTF-8 text, as tokio-util's `LinesCodec`: a line ends at `\n`, a `\r` before it is
/// dropped, a line that is not valid UTF-8 fails with [`FrameError::InvalidUtf8`] (and is
/// consumed), a line longer than the maximum fails with [`FrameError::DelimiterNotFound`] (and is
/// skipped if the stream is [resumed](super::Frames::resume)); at the writer's completion the
/// text after the last `\n` is a last line (unless it is a lone `\r`).
///
/// Lines are [`Line`]s: a packet checked to be UTF-8, so no `String` is allocated per line.
///
/// ```
/// use packetpipe::frame::{Frames, Lines};
///
/// let (mut writer, reader) = packetpipe::pipe();
/// writer.write_slice("one\r\ntwo\nthree".as_bytes())?;
/// writer.complete();
/// let lines: Vec<String> = Frames::new(reader, Lines::new())
///     .iter_blocking()
///     .map(|line| line.map(|line| line.to_string()))
///     .collect::<Result<_, _>>()?;
/// assert_eq!(lines, ["one", "two", "three"]);
/// # Ok::<(), packetpipe::frame::FrameError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Lines {
    search: Search<Newline>,
}

impl Default for Lines {
    fn default() -> Lines {
        Lines::new()
    }
}

impl Lines {
    /// Lines of any length.
    pub fn new() -> Lines {
        Lines::with_max_length(usize::MAX)
    }

    /// Lines of at most `max_length` bytes (without the line ending's `\n`).
    pub fn with_max_length(max_length: usize) -> Lines {
        Lines {
            search: Search::new(Newline, max_length),
        }
    }
}

/// `packet` without a trailing `\r`, checked to be UTF-8.
#[inline(always)]
fn line(mut packet: Packet) -> Result<Line, FrameError> {
    if packet.last() == Some(&b'\r') {
        packet.truncate(packet.len() - 1);
    }
    match std::str::from_utf8(&packet) {
        Ok(_) => Ok(Line(packet)),
        Err(e) => Err(FrameError::InvalidUtf8 {
            len: packet.len(),
            valid_up_to: e.valid_up_to(),
        }),
    }
}

impl Decoder for Lines {
    type Item = Line;
    type Error = FrameError;

    #[inline(always)]
    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Decoded<Line>, FrameError> {
        Ok(match self.search.next_frame(buf)? {
            Decoded::Frame(len) => Decoded::Frame(line(self.search.take(buf, len)?)?),
            Decoded::NeedAtLeast(n) => Decoded::NeedAtLeast(n),
        })
    }

    fn decode_eof(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<Line>, FrameError> {
        if let Decoded::Frame(line) = self.decode(buf)? {
            return Ok(Some(line));
        }
        if self.search.end_discarded(buf)? {
            return Ok(None);
        }
        self.search.next_index = 0;
        // The text after the last `\n` is a last line, unless nothing or a lone `\r` is left
        // (which stays in the pipe, as tokio-util leaves it in its buffer).
        let len = buf.len();
        if len == 0 || (len == 1 && buf.buffer().get(0) == Some(b'\r')) {
            return Ok(None);
        }
        Ok(Some(line(buf.take_frame(len)?)?))
    }
}

/// Writes the line, then `\n`.
impl<T: AsRef<str>> Encoder<T> for Lines {
    type Error = FrameError;

    fn encode(&mut self, line: T, dst: &mut PipeWriter) -> Result<(), FrameError> {
        put_copied(dst, line.as_ref().as_bytes(), &b"\n"[..])
    }
}

/// A line of text from [`Lines`]: a [`Packet`] checked to be UTF-8 (without its line ending).
/// Dereferences to `str` (`&*line` is the text; `str`'s methods apply to the line directly);
/// [`into_packet`](Line::into_packet) gives its bytes back as the packet.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Line(Packet);

impl Line {
    /// The text (what `Deref` gives: `&*line`, or `str`'s methods called on the line).
    #[inline]
    fn as_str(&self) -> &str {
        // SAFETY: a `Line` is only made by `line()` from a packet that `str::from_utf8` accepted,
        // or empty (`Default`), and its packet's bytes never change: a packet's bytes change only
        // through `&mut` of the packet (`Packet::get_mut`, `prepend`), and `Line` hands out no
        // mutable access to its packet.
        unsafe { std::str::from_utf8_unchecked(self.0.as_slice()) }
    }

    /// The bytes, as a packet.
    pub fn into_packet(self) -> Packet {
        self.0
    }
}

impl std::ops::Deref for Line {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Line {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<[u8]> for Line {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl std::fmt::Display for Line {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Debug for Line {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl PartialEq<str> for Line {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Line {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl From<Line> for String {
    fn from(line: Line) -> String {
        line.as_str().to_owned()
    }
}
