//! `LengthDelimited`: frames behind a length field, decoded and encoded as tokio-util's
//! `LengthDelimitedCodec` does.

use bytes::{Buf, Bytes};

use super::encoder::put_copied;
use super::{DecodeBuf, Decoded, Decoder, Encoder, FrameError};
use crate::pipe::PipeWriter;
use crate::{Packet, PacketChain};

/// Frames behind a length field: decoder and encoder.
///
/// Built with [`LengthDelimited::builder`], whose settings are tokio-util's
/// `length_delimited::Builder`'s, with the same defaults (a 4-byte big-endian length at offset 0,
/// header stripped, 8 MiB maximum) and the same meaning, so a configuration ports as it is. On the
/// same input the decoder yields the same frames and fails with the same error at the same point
/// (tested differentially against tokio-util, `tests-integration/tests/frame_differential.rs`), with one deliberate
/// difference: a stream that ends right after a length header, before any byte of its non-empty
/// payload, ends here with [`FrameError::BytesRemaining`] (the header bytes remain), while
/// tokio-util, which has already consumed the header, ends it silently.
///
/// Decoding never joins segments: the header is parsed through the buffer's cursor, and the payload
/// is taken out as [`DecodeBuf::take_frame`] takes a frame (copied up to the pipe's copy
/// threshold, shared zero-copy above it when it lies in one segment); a small payload is taken
/// together with its header, which is then stripped in place. A frame's bytes are not consumed until all of them are there, so
/// [`Frames::into_inner`](super::Frames::into_inner) gives back a partial frame whole.
///
/// Encoding writes the length field (and only it, as tokio-util does: bytes before it, when
/// `length_field_offset` is set, are the caller's) then the payload: a small payload (up to 1 KiB)
/// is copied in behind the header, a larger [`Packet`] is appended zero-copy, and a unique pooled
/// [`Packet`] with headroom gets the header written in front of it, in place.
///
/// ```
/// use packetpipe::frame::{FrameWriter, Frames, LengthDelimited};
///
/// let codec = LengthDelimited::builder().length_field_type::<u16>().new_codec();
/// let (writer, reader) = packetpipe::pipe();
/// let mut out = FrameWriter::new(writer, codec.clone());
/// out.feed(&b"hello"[..])?;
/// out.feed(packetpipe::Packet::from_static(b"world"))?;
/// out.into_inner().complete();
///
/// let frames: Vec<_> = Frames::new(reader, codec).iter_blocking().collect::<Result<_, _>>()?;
/// assert_eq!(frames, [&b"hello"[..], &b"world"[..]]);
/// # Ok::<(), packetpipe::frame::FrameError>(())
/// ```
#[derive(Debug, Clone)]
pub struct LengthDelimited {
    builder: Builder,
    /// Bytes needed before the header can be parsed: `max(offset + field length, num_skip)`.
    head_len: usize,
    /// Bytes of the header dropped in front of the payload.
    num_skip: usize,
    /// The frame in flight, by the stream position of its first byte ([`DecodeBuf::position`]):
    /// its header was decoded (and passed the maximum in force then) but its payload was not all
    /// there. Its header holds until the frame is taken out, whatever
    /// [`set_max_frame_length`](Self::set_max_frame_length) says meanwhile, as tokio-util's decode
    /// state does (the header itself stays in the pipe until the whole frame is there, so it is
    /// decoded again, to the same length).
    in_flight: Option<u64>,
}

/// Settings of a [`LengthDelimited`], as tokio-util's `length_delimited::Builder`: the same
/// `&mut self` setters with the same names, defaults and checks, so a configuration copied from
/// tokio-util compiles unchanged. Made with [`LengthDelimited::builder`] (or `Default`).
///
/// ```
/// use packetpipe::frame::LengthDelimited;
///
/// // A 3-byte little-endian length after a 2-byte tag, counting the whole 5-byte header; the
/// // frames keep their header.
/// let codec = LengthDelimited::builder()
///     .length_field_offset(2)
///     .length_field_length(3)
///     .little_endian()
///     .length_adjustment(-5)
///     .num_skip(0)
///     .max_frame_length(64 * 1024)
///     .new_codec();
/// # drop(codec);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Builder {
    max_frame_len: usize,
    length_field_len: usize,
    length_field_offset: usize,
    length_adjustment: isize,
    num_skip: Option<usize>,
    big_endian: bool,
}

/// Length field types for [`Builder::length_field_type`]: `u8`, `u16`, `u32`, `u64`, `usize`.
pub trait LengthFieldType: sealed::Sealed {}

mod sealed {
    pub trait Sealed {}
}

macro_rules! length_field_types {
    ($($ty:ty),*) => {
        $(
            impl sealed::Sealed for $ty {}
            impl LengthFieldType for $ty {}
        )*
    };
}
length_field_types!(u8, u16, u32, u64, usize);

/// Encoding: payloads up to this many bytes are copied in behind their header rather than
/// appended as packets of their own: one contiguous segment instead of two, and no queue entry
/// per payload (`benches/frames.rs`).
const COPY_PAYLOAD_UP_TO: usize = 1024;

impl Default for Builder {
    /// tokio-util's defaults: a 4-byte big-endian length field at offset 0, no adjustment, the
    /// header stripped, frames of at most 8 MiB.
    fn default() -> Builder {
        Builder {
            max_frame_len: 8 * 1024 * 1024,
            length_field_len: 4,
            length_field_offset: 0,
            length_adjustment: 0,
            num_skip: None,
            big_endian: true,
        }
    }
}

impl Builder {
    /// The length field is big-endian (network order; the default).
    pub fn big_endian(&mut self) -> &mut Self {
        self.big_endian = true;
        self
    }

    /// The length field is little-endian.
    pub fn little_endian(&mut self) -> &mut Self {
        self.big_endian = false;
        self
    }

    /// The length field is in this machine's byte order.
    pub fn native_endian(&mut self) -> &mut Self {
        self.big_endian = cfg!(target_endian = "big");
        self
    }

    /// Frames whose length field exceeds this fail with [`FrameError::FrameTooLong`] (the field's
    /// value is compared, before the adjustment, as tokio-util does). Capped at what the length
    /// field can express plus the adjustment.
    pub fn max_frame_length(&mut self, max: usize) -> &mut Self {
        self.max_frame_len = max;
        self
    }

    /// The length field's size as a type: `u8`, `u16`, `u32`, `u64` or `usize`.
    pub fn length_field_type<T: LengthFieldType>(&mut self) -> &mut Self {
        self.length_field_length(std::mem::size_of::<T>())
    }

    /// The length field's size in bytes, 1 to 8.
    ///
    /// # Panics
    /// If `len` is 0 or above 8 (as tokio-util does).
    pub fn length_field_length(&mut self, len: usize) -> &mut Self {
        assert!(
            (1..=8).contains(&len),
            "invalid length field length {len}: it must be 1 to 8 bytes"
        );
        self.length_field_len = len;
        self
    }

    /// Bytes before the length field.
    ///
    /// # Panics
    /// If `offset` is above `usize::MAX - 8`: the header's end (offset + field length) would not
    /// fit a `usize`.
    pub fn length_field_offset(&mut self, offset: usize) -> &mut Self {
        assert!(
            offset <= usize::MAX - 8,
            "invalid length field offset {offset}: the header's end would overflow (at most {})",
            usize::MAX - 8
        );
        self.length_field_offset = offset;
        self
    }

    /// Added to the length field's value to get the payload length (negative when the field counts
    /// header bytes too).
    pub fn length_adjustment(&mut self, adjustment: isize) -> &mut Self {
        self.length_adjustment = adjustment;
        self
    }

    /// Bytes dropped from the front of each frame (default: offset + field length, the whole
    /// header; 0 keeps the header in the frame, usually with a positive
    /// [`length_adjustment`](Self::length_adjustment) of the header's length). As with tokio-util,
    /// a frame of 0 bytes with nothing skipped consumes nothing and is yielded again and again.
    pub fn num_skip(&mut self, num_skip: usize) -> &mut Self {
        self.num_skip = Some(num_skip);
        self
    }

    /// The decoder and encoder with these settings.
    pub fn new_codec(&self) -> LengthDelimited {
        let mut builder = *self;
        builder.max_frame_len = builder.max_frame_len.min(builder.max_allowed_frame_len());
        let num_skip = builder
            .num_skip
            .unwrap_or(builder.length_field_offset + builder.length_field_len);
        let head_len = (builder.length_field_offset + builder.length_field_len).max(num_skip);
        LengthDelimited {
            builder,
            head_len,
            num_skip,
            in_flight: None,
        }
    }

    /// The largest value the length field can hold.
    fn max_field_value(&self) -> u64 {
        match 1u64.checked_shl(8 * self.length_field_len as u32) {
            Some(shl) => shl - 1,
            None => u64::MAX,
        }
    }

    /// tokio-util's cap on the maximum frame length: the largest field value plus the adjustment.
    fn max_allowed_frame_len(&self) -> usize {
        let max = self
            .max_field_value()
            .saturating_add_signed(self.length_adjustment as i64);
        usize::try_from(max).unwrap_or(usize::MAX)
    }
}

impl Default for LengthDelimited {
    fn default() -> LengthDelimited {
        LengthDelimited::new()
    }
}

impl LengthDelimited {
    /// tokio-util's default codec: a 4-byte big-endian length, header stripped, frames of at most
    /// 8 MiB.
    pub fn new() -> LengthDelimited {
        Builder::default().new_codec()
    }

    /// Settings to build a codec from (tokio-util's `LengthDelimitedCodec::builder`).
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// The maximum frame length in force.
    pub fn max_frame_length(&self) -> usize {
        self.builder.max_frame_len
    }

    /// Change the maximum frame length (capped as in [`Builder::max_frame_length`]).
    ///
    /// As with tokio-util, the change applies from the next header on: a frame whose header was
    /// already decoded while its payload was still arriving is let through whole, even if it is
    /// longer than the new maximum.
    ///
    /// ```
    /// use futures::StreamExt;
    /// use packetpipe::frame::{Frames, LengthDelimited};
    ///
    /// let (mut writer, reader) = packetpipe::pipe();
    /// let mut frames = Frames::new(reader, LengthDelimited::new());
    /// writer.write_slice(b"\0\0\0\x09abcd")?; // a 9-byte frame, 4 bytes of it so far
    /// writer.flush_blocking()?;
    /// let mut cx = std::task::Context::from_waker(futures::task::noop_waker_ref());
    /// assert!(frames.poll_next_unpin(&mut cx).is_pending()); // its header is decoded
    /// frames.decoder_mut().set_max_frame_length(5);
    /// writer.write_slice(b"efghi\0\0\0\x09abcdefghi")?;
    /// writer.complete();
    /// let mut frames = frames.iter_blocking();
    /// assert_eq!(frames.next().unwrap()?, &b"abcdefghi"[..]); // in flight: let through
    /// assert!(frames.next().unwrap().is_err()); // the next header: too long now
    /// # Ok::<(), packetpipe::frame::FrameError>(())
    /// ```
    pub fn set_max_frame_length(&mut self, max: usize) {
        self.builder.max_frame_len = max.min(self.builder.max_allowed_frame_len());
    }

    /// The payload length the header at the front of `buf` announces (it holds `head_len` bytes).
    #[inline(always)]
    fn payload_len(&self, buf: &DecodeBuf<'_>) -> Result<usize, FrameError> {
        let b = &self.builder;
        let (offset, n) = (b.length_field_offset, b.length_field_len);
        let buffer = buf.buffer();
        let first = buffer.first_chunk();
        // (A wrapped end, for an absurd offset, is below the start: `get` says `None`.)
        let field = if let Some(word) = first.get(offset..offset.wrapping_add(8)) {
            // The common case, eight bytes in place in the first segment (not near its end): one
            // load whatever the width, no branch on it; the field is the word's first n bytes.
            let word: [u8; 8] = word.try_into().expect("eight bytes");
            let shift = 64 - 8 * n as u32; // n is 1..=8 (the builder checks)
            if b.big_endian {
                u64::from_be_bytes(word) >> shift
            } else {
                (u64::from_le_bytes(word) << shift) >> shift
            }
        } else if let Some(bytes) = first.get(offset..offset + n) {
            // Near the segment's end: the usual widths as one load each; others with a byte loop
            // (a copy of a variable length into an array would call `memcpy`).
            read_field(bytes, b.big_endian)
        } else {
            // Across segments: through the cursor (never joining the segments).
            let mut cursor = buffer.cursor();
            cursor.advance(offset);
            if b.big_endian {
                cursor.get_uint(n)
            } else {
                cursor.get_uint_le(n)
            }
        };
        // Above the maximum, unless it is the header of the frame in flight, which passed the
        // maximum in force when it was first decoded (a lower one set since does not undo that).
        // Tested only for a header above the maximum, inline: as a call, even one never made,
        // it cost every frame 15 instructions (`scripts/instructions.sh`). A frame taken out
        // leaves its record behind, harmlessly: the front of the stream never comes back to a
        // position it has left.
        if field > b.max_frame_len as u64 && self.in_flight != Some(buf.position()) {
            return Err(FrameError::FrameTooLong {
                length: field,
                max: b.max_frame_len,
            });
        }
        // Within the maximum (or the one in force when this frame's header was first decoded), so
        // within usize.
        let n = field as usize;
        let adjustment = b.length_adjustment;
        let adjusted = if adjustment < 0 {
            n.checked_sub(adjustment.unsigned_abs())
        } else {
            n.checked_add(adjustment as usize)
        };
        adjusted.ok_or(FrameError::LengthOverflow {
            length: field,
            adjustment,
        })
    }

    /// The length field for a payload of `len` bytes, big- or little-endian, in the first
    /// `length_field_len` bytes of the array; nothing is written when it fails.
    #[inline]
    fn header(&self, len: usize) -> Result<([u8; 8], usize), FrameError> {
        let b = &self.builder;
        if len > b.max_frame_len {
            return Err(FrameError::ItemTooLong {
                length: len,
                max: b.max_frame_len,
            });
        }
        let adjustment = b.length_adjustment;
        let overflow = FrameError::LengthOverflow {
            length: len as u64,
            adjustment,
        };
        let field = if adjustment < 0 {
            len.checked_add(adjustment.unsigned_abs())
        } else {
            len.checked_sub(adjustment as usize)
        }
        .ok_or(overflow)? as u64;
        if field > b.max_field_value() {
            return Err(FrameError::LengthOverflow {
                length: len as u64,
                adjustment,
            });
        }
        let n = b.length_field_len;
        let mut out = [0u8; 8];
        if b.big_endian {
            out[..n].copy_from_slice(&field.to_be_bytes()[8 - n..]);
        } else {
            out[..n].copy_from_slice(&field.to_le_bytes()[..n]);
        }
        Ok((out, n))
    }

    /// Stage the header copied and the payload appended without copying.
    #[inline]
    fn put_appended(
        &self,
        header: &[u8],
        payload: Packet,
        dst: &mut PipeWriter,
    ) -> Result<(), FrameError> {
        let space = dst.spare_mut(header.len())?;
        space[..header.len()].copy_from_slice(header);
        dst.commit(header.len())?;
        dst.append(payload)?;
        Ok(())
    }
}

/// The value of a length field of 1 to 8 bytes.
#[inline]
fn read_field(bytes: &[u8], big_endian: bool) -> u64 {
    macro_rules! load {
        ($ty:ty) => {{
            let array = bytes.try_into().expect("the field's width");
            u64::from(if big_endian {
                <$ty>::from_be_bytes(array)
            } else {
                <$ty>::from_le_bytes(array)
            })
        }};
    }
    match bytes.len() {
        1 => u64::from(bytes[0]),
        2 => load!(u16),
        4 => load!(u32),
        8 => load!(u64),
        _ if big_endian => bytes.iter().fold(0u64, |v, &byte| v << 8 | u64::from(byte)),
        _ => bytes
            .iter()
            .rev()
            .fold(0u64, |v, &byte| v << 8 | u64::from(byte)),
    }
}

impl LengthDelimited {
    /// The next frame's payload length, once the whole frame is in `buf`.
    #[inline(always)]
    fn next_frame(&mut self, buf: &DecodeBuf<'_>) -> Result<Decoded<usize>, FrameError> {
        let len = buf.len();
        if len < self.head_len {
            return Ok(Decoded::NeedAtLeast(self.head_len));
        }
        let n = self.payload_len(buf)?;
        let total = self.num_skip.saturating_add(n);
        if len < total {
            self.in_flight = Some(buf.position());
            return Ok(Decoded::NeedAtLeast(total));
        }
        Ok(Decoded::Frame(n))
    }

    /// Yield each frame as a [`PacketChain`], so that a large frame spanning segments is shared
    /// segment by segment rather than copied into one buffer.
    pub fn into_chains(self) -> LengthDelimitedChains {
        LengthDelimitedChains(self)
    }
}

impl Decoder for LengthDelimited {
    type Item = Packet;
    type Error = FrameError;

    // Always inlined into `Frames`' step, with `take_frame_after`: one function per frame, not a
    // chain of calls each returning its result through memory (BENCHMARKS.md, "frames").
    #[inline(always)]
    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Decoded<Packet>, FrameError> {
        let n = match self.next_frame(buf)? {
            Decoded::Frame(n) => n,
            Decoded::NeedAtLeast(need) => return Ok(Decoded::NeedAtLeast(need)),
        };
        // The header skipped and the payload taken in one step: a copied payload's buffer holds
        // the payload only (a 1 MiB payload fits the pooled 1 MiB class, with its header it would
        // not), and a shared one costs one reference.
        Ok(Decoded::Frame(buf.take_frame_after(self.num_skip, n)?))
    }
}

/// [`LengthDelimited`] yielding [`PacketChain`]s ([`LengthDelimited::into_chains`]).
///
/// A frame up to the pipe's copy threshold (see [`PipeOptions`](crate::PipeOptions)) or lying in
/// one segment is taken as with [`LengthDelimited`] (copied when small, shared
/// when large) and is a chain of one packet; a larger frame spanning segments is a chain of the
/// segments' packets, shared, never copied (a chain holds 4 packets inline and allocates beyond).
/// Parse it with [`bytes::Buf`] or [`ByteSegments`](crate::ByteSegments) without joining it.
///
/// ```
/// use packetpipe::frame::{Frames, LengthDelimited};
///
/// let (mut writer, reader) = packetpipe::pipe();
/// writer.write_slice(&8192u32.to_be_bytes())?;
/// writer.append(vec![1u8; 4096])?;
/// writer.append(vec![2u8; 4096])?;
/// writer.complete();
/// let mut frames = Frames::new(reader, LengthDelimited::new().into_chains());
/// let frame = frames.iter_blocking().next().unwrap()?;
/// assert_eq!((frame.len(), frame.iter().len()), (8192, 2)); // the two packets, shared
/// # Ok::<(), packetpipe::frame::FrameError>(())
/// ```
#[derive(Debug, Clone)]
pub struct LengthDelimitedChains(LengthDelimited);

impl Decoder for LengthDelimitedChains {
    type Item = PacketChain;
    type Error = FrameError;

    #[inline]
    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Decoded<PacketChain>, FrameError> {
        let codec = &mut self.0;
        let n = match codec.next_frame(buf)? {
            Decoded::Frame(n) => n,
            Decoded::NeedAtLeast(need) => return Ok(Decoded::NeedAtLeast(need)),
        };
        let skip = codec.num_skip;
        let first = buf.buffer().first_chunk().len();
        // In the first segment, or small enough to copy: one packet (copied or shared as
        // `LengthDelimited` takes it); otherwise the segments' packets, shared.
        let frame = if first >= skip + n || n <= buf.copy_threshold() {
            PacketChain::from(buf.take_frame_after(skip, n)?)
        } else {
            buf.skip(skip)?;
            buf.take_frame_chain(n)?
        };
        Ok(Decoded::Frame(frame))
    }
}

impl Encoder<Packet> for LengthDelimited {
    type Error = FrameError;

    /// Small payloads (up to 1 KiB) are copied in behind the header; larger ones are appended
    /// zero-copy. A larger payload that is the only handle to its pooled block and has
    /// [`headroom`](Packet::headroom) for the header gets the header written in front of it, in
    /// place ([`Packet::prepend`]): one segment, nothing copied.
    #[inline]
    fn encode(&mut self, mut payload: Packet, dst: &mut PipeWriter) -> Result<(), FrameError> {
        let (header, n) = self.header(payload.len())?;
        if payload.len() <= COPY_PAYLOAD_UP_TO {
            put_copied(dst, &header[..n], &*payload)
        } else if payload.can_prepend(n) && payload.prepend(&header[..n]).is_ok() {
            Ok(dst.append(payload)?)
        } else {
            self.put_appended(&header[..n], payload, dst)
        }
    }
}

impl Encoder<Bytes> for LengthDelimited {
    type Error = FrameError;

    /// As for [`Packet`] (a `Bytes` becomes a packet without copying).
    fn encode(&mut self, payload: Bytes, dst: &mut PipeWriter) -> Result<(), FrameError> {
        Encoder::<Packet>::encode(self, payload.into(), dst)
    }
}

impl Encoder<&[u8]> for LengthDelimited {
    type Error = FrameError;

    /// Header and payload copied into the writer's pooled block, contiguous.
    fn encode(&mut self, payload: &[u8], dst: &mut PipeWriter) -> Result<(), FrameError> {
        let (header, n) = self.header(payload.len())?;
        put_copied(dst, &header[..n], payload)
    }
}

impl Encoder<PacketChain> for LengthDelimited {
    type Error = FrameError;

    /// The header, then each packet of the chain appended zero-copy (a small chain is copied in
    /// behind the header).
    fn encode(&mut self, mut payload: PacketChain, dst: &mut PipeWriter) -> Result<(), FrameError> {
        let (header, n) = self.header(payload.len())?;
        if payload.len() <= COPY_PAYLOAD_UP_TO {
            return put_copied(dst, &header[..n], &payload);
        }
        let space = dst.spare_mut(n)?;
        space[..n].copy_from_slice(&header[..n]);
        dst.commit(n)?;
        while let Some(packet) = payload.pop_front() {
            dst.append(packet)?;
        }
        Ok(())
    }
}
