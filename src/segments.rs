//! Helpers for data held in several segments: copy out, hex dump, lossy UTF-8, pattern search,
//! integers read in place.
//!
//! One trait, [`ByteSegments`], gives every segmented type in the crate (packets, chains, the
//! pipe's read buffers and their cursors) the same helpers, all of which stream over the segments
//! without joining them into one allocation first.

use std::fmt;

use crate::error::Error;

/// Data held as a sequence of byte segments, with helpers that work across segment boundaries.
///
/// ```
/// use packetpipe::{ByteSegments, Packet, PacketChain};
///
/// let chain: PacketChain = [&b"caf\xc3"[..], &b"\xa9 ok"[..]].into_iter().map(Packet::from).collect();
/// assert_eq!(chain.display_lossy().to_string(), "café ok"); // 'é' is split across segments
/// assert_eq!(chain.find(b"\xa9 o"), Some(4));
/// assert_eq!(chain.hex_dump(4).to_string(), "00000000  63 61 66 c3                                       |caf.|\n... 4 more bytes\n");
/// let mut first = [0u8; 5];
/// chain.copy_prefix_to(&mut first).unwrap();
/// assert_eq!(&first, b"caf\xc3\xa9");
/// ```
pub trait ByteSegments {
    /// The segments, front to back.
    fn segments(&self) -> impl Iterator<Item = &[u8]> + Clone;

    /// Total bytes in all segments.
    fn byte_len(&self) -> usize {
        self.segments().map(<[u8]>::len).sum()
    }

    /// All bytes, copied into one vector.
    fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.byte_len());
        for segment in self.segments() {
            out.extend_from_slice(segment);
        }
        out
    }

    /// Copy the first `dst.len()` bytes into `dst` without consuming anything.
    /// [`Error::OutOfRange`] (copying nothing) if there are fewer bytes than that.
    fn copy_prefix_to(&self, dst: &mut [u8]) -> Result<(), Error> {
        let len = self.byte_len();
        if dst.len() > len {
            return Err(Error::OutOfRange {
                operation: "copy_prefix_to",
                start: 0,
                end: dst.len(),
                len,
            });
        }
        let mut filled = 0;
        for segment in self.segments() {
            if filled == dst.len() {
                break;
            }
            let n = segment.len().min(dst.len() - filled);
            dst[filled..filled + n].copy_from_slice(&segment[..n]);
            filled += n;
        }
        Ok(())
    }

    /// A `Display` of the first `limit` bytes as a classic hex dump (16 bytes a line, offset, hex,
    /// ASCII), followed by a count of the bytes left out.
    fn hex_dump(&self, limit: usize) -> HexDump<'_, Self> {
        HexDump {
            source: self,
            limit,
        }
    }

    /// A `Display` of the bytes as UTF-8, with invalid sequences shown as U+FFFD, decoded segment by
    /// segment (a character split across segments is decoded whole) without building a `String`.
    fn display_lossy(&self) -> Utf8Lossy<'_, Self> {
        Utf8Lossy { source: self }
    }

    /// Offset of the first occurrence of `pattern`, which may span segment boundaries. An empty
    /// pattern is found at 0.
    fn find(&self, pattern: &[u8]) -> Option<usize> {
        find_in(self.segments(), pattern)
    }

    /// Offset (from the start, not from `offset`) of the first occurrence of `pattern` that starts
    /// at `offset` or later, which may span segment boundaries: a search that goes on where an
    /// earlier one stopped, without looking at the bytes before `offset` again. `None` when
    /// `offset` is past the end; an empty pattern is found at `offset`.
    ///
    /// ```
    /// use packetpipe::{ByteSegments, Packet, PacketChain};
    ///
    /// let chain: PacketChain = [&b"a: 1\r"[..], &b"\nb: 2\r\n"[..]].into_iter().map(Packet::from).collect();
    /// let first = chain.find(b"\r\n").unwrap(); // across the segment boundary
    /// assert_eq!(first, 4);
    /// assert_eq!(chain.find_from(first + 2, b"\r\n"), Some(10));
    /// assert_eq!(chain.find_from(11, b"\r\n"), None);
    /// ```
    fn find_from(&self, offset: usize, pattern: &[u8]) -> Option<usize> {
        let mut segments = self.segments();
        let mut base = 0;
        for segment in segments.by_ref() {
            if offset - base < segment.len() {
                let skip = offset - base;
                let rest = std::iter::once(&segment[skip..]).chain(segments);
                return find_in(rest, pattern).map(|at| offset + at);
            }
            base += segment.len();
        }
        // At the end exactly: only the empty pattern is there.
        (offset == base && pattern.is_empty()).then_some(offset)
    }

    /// The big-endian integer of type `T` (`u8` to `u64`, `i8` to `i64`) at `offset`, read in
    /// place across segment boundaries; `None` when fewer than its bytes are there. Nothing is
    /// consumed: a parser peeks at a header before it knows the frame is complete.
    ///
    /// ```
    /// use packetpipe::{ByteSegments, Packet, PacketChain};
    ///
    /// let chain: PacketChain = [&[0x01, 0x02][..], &[0x03, 0x04, 0x05][..]].into_iter().map(Packet::from).collect();
    /// assert_eq!(chain.peek_be::<u32>(0), Some(0x0102_0304)); // across the two segments
    /// assert_eq!(chain.peek_be::<u16>(3), Some(0x0405));
    /// assert_eq!(chain.peek_be::<u8>(4), Some(5));
    /// assert_eq!(chain.peek_be::<u32>(2), None); // only 3 bytes from there
    /// assert_eq!(chain.peek_be::<i16>(0), Some(0x0102));
    /// ```
    fn peek_be<T: PeekInt>(&self, offset: usize) -> Option<T> {
        let mut bytes = T::Bytes::default();
        copy_at(self.segments(), offset, bytes.as_mut()).then(|| T::from_be(bytes))
    }

    /// The little-endian integer of type `T` at `offset`, as [`peek_be`](Self::peek_be).
    ///
    /// ```
    /// use packetpipe::ByteSegments;
    ///
    /// let bytes: &[u8] = &[0x04, 0x03, 0x02, 0x01, 0xff];
    /// assert_eq!(bytes.peek_le::<u32>(0), Some(0x0102_0304));
    /// assert_eq!(bytes.peek_le::<u64>(0), None);
    /// assert_eq!(bytes.peek_le::<i8>(4), Some(-1));
    /// ```
    fn peek_le<T: PeekInt>(&self, offset: usize) -> Option<T> {
        let mut bytes = T::Bytes::default();
        copy_at(self.segments(), offset, bytes.as_mut()).then(|| T::from_le(bytes))
    }
}

/// The integers [`ByteSegments::peek_be`] and [`ByteSegments::peek_le`] read: `u8`, `u16`, `u32`,
/// `u64` and their signed twins. Sealed: the methods it needs are the crate's.
pub trait PeekInt: sealed::Sealed + Sized {
    #[doc(hidden)]
    type Bytes: Default + AsMut<[u8]>;
    #[doc(hidden)]
    fn from_be(bytes: Self::Bytes) -> Self;
    #[doc(hidden)]
    fn from_le(bytes: Self::Bytes) -> Self;
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! peek_ints {
    ($($ty:ty),*) => {
        $(
            impl sealed::Sealed for $ty {}
            impl PeekInt for $ty {
                type Bytes = [u8; std::mem::size_of::<$ty>()];
                #[inline]
                fn from_be(bytes: Self::Bytes) -> Self {
                    <$ty>::from_be_bytes(bytes)
                }
                #[inline]
                fn from_le(bytes: Self::Bytes) -> Self {
                    <$ty>::from_le_bytes(bytes)
                }
            }
        )*
    };
}
peek_ints!(u8, u16, u32, u64, i8, i16, i32, i64);

/// Fill `dst` with the bytes at `offset` of `segments`; whether there were enough.
#[inline]
fn copy_at<'a>(
    segments: impl Iterator<Item = &'a [u8]>,
    mut offset: usize,
    dst: &mut [u8],
) -> bool {
    let mut filled = 0;
    for segment in segments {
        if offset >= segment.len() {
            offset -= segment.len();
            continue;
        }
        let segment = &segment[offset..];
        offset = 0;
        let n = segment.len().min(dst.len() - filled);
        dst[filled..filled + n].copy_from_slice(&segment[..n]);
        filled += n;
        if filled == dst.len() {
            return true;
        }
    }
    filled == dst.len()
}

fn find_in<'a>(segments: impl Iterator<Item = &'a [u8]> + Clone, pattern: &[u8]) -> Option<usize> {
    let Some((&first, rest)) = pattern.split_first() else {
        return Some(0);
    };
    let mut base = 0;
    let mut segments = segments;
    while let Some(segment) = segments.next() {
        let mut from = 0;
        while let Some(pos) = find_byte(first, &segment[from..]) {
            let at = from + pos;
            if starts_with(&segment[at + 1..], segments.clone(), rest) {
                return Some(base + at);
            }
            from = at + 1;
        }
        base += segment.len();
    }
    None
}

/// Index of the first `byte` in `haystack`, eight bytes at a time: a delimiter search scans whole
/// segments, where a byte-by-byte loop costs 40% of a 64-byte line's decode (`Lines`, callgrind).
/// Safe code; a crate like `memchr` would be faster still on long lines, for a dependency.
#[inline]
pub(crate) fn find_byte(byte: u8, haystack: &[u8]) -> Option<usize> {
    const LOW_BITS: u64 = u64::from_le_bytes([0x01; 8]);
    const HIGH_BITS: u64 = u64::from_le_bytes([0x80; 8]);
    let pattern = LOW_BITS * u64::from(byte);
    let mut words = haystack.chunks_exact(8);
    let mut offset = 0;
    for word in &mut words {
        // Bytes equal to `byte` become zero; the lowest flagged byte of `x - 0x01.. & !x & 0x80..`
        // is the first zero byte (flags above it may be borrows, so only the lowest is used).
        let x = u64::from_le_bytes(word.try_into().expect("8-byte chunk")) ^ pattern;
        let zeros = x.wrapping_sub(LOW_BITS) & !x & HIGH_BITS;
        if zeros != 0 {
            return Some(offset + (zeros.trailing_zeros() / 8) as usize);
        }
        offset += 8;
    }
    words
        .remainder()
        .iter()
        .position(|&b| b == byte)
        .map(|i| offset + i)
}

/// Whether the bytes `head` followed by the `tail` segments start with `pattern`.
fn starts_with<'a>(
    head: &'a [u8],
    tail: impl Iterator<Item = &'a [u8]>,
    mut pattern: &[u8],
) -> bool {
    for segment in std::iter::once(head).chain(tail) {
        if pattern.is_empty() {
            return true;
        }
        let n = segment.len().min(pattern.len());
        if segment[..n] != pattern[..n] {
            return false;
        }
        pattern = &pattern[n..];
    }
    pattern.is_empty()
}

/// Hex dump of the first bytes of segmented data; see [`ByteSegments::hex_dump`].
pub struct HexDump<'a, S: ?Sized> {
    source: &'a S,
    limit: usize,
}

/// The dump itself, as `{:?}` of a string shows the string.
impl<S: ByteSegments + ?Sized> fmt::Debug for HexDump<'_, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl<S: ByteSegments + ?Sized> fmt::Display for HexDump<'_, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const WIDTH: usize = 16;
        let mut line = [0u8; WIDTH];
        let mut filled = 0;
        let mut offset = 0;
        let bytes = self
            .source
            .segments()
            .flat_map(|s| s.iter().copied())
            .take(self.limit);
        for byte in bytes {
            line[filled] = byte;
            filled += 1;
            if filled == WIDTH {
                write_hex_line(f, offset, &line)?;
                offset += WIDTH;
                filled = 0;
            }
        }
        if filled > 0 {
            write_hex_line(f, offset, &line[..filled])?;
        }
        let shown = offset + filled;
        let total = self.source.byte_len();
        if total > shown {
            writeln!(f, "... {} more bytes", total - shown)?;
        }
        Ok(())
    }
}

fn write_hex_line(f: &mut fmt::Formatter<'_>, offset: usize, line: &[u8]) -> fmt::Result {
    // The line is built in a stack buffer and written once: per-byte `write!` calls cost ~28 ns
    // a byte (BENCHMARKS.md, `packet`).
    const HEX: &[u8; 16] = b"0123456789abcdef";
    // 16 x " xx", one extra space, "  |", 16 characters, "|\n".
    let mut out = [b' '; 16 * 3 + 1 + 3 + 16 + 2];
    let mut at = 0;
    for i in 0..16 {
        if i == 8 {
            at += 1;
        }
        if let Some(&b) = line.get(i) {
            out[at + 1] = HEX[usize::from(b >> 4)];
            out[at + 2] = HEX[usize::from(b & 0x0f)];
        }
        at += 3;
    }
    out[at..at + 3].copy_from_slice(b"  |");
    at += 3;
    for &b in line {
        out[at] = if b.is_ascii_graphic() || b == b' ' {
            b
        } else {
            b'.'
        };
        at += 1;
    }
    out[at..at + 2].copy_from_slice(b"|\n");
    at += 2;
    write!(f, "{offset:08x} ")?;
    f.write_str(std::str::from_utf8(&out[..at]).expect("hex dump lines are ASCII"))
}

/// Lossy UTF-8 view of segmented data; see [`ByteSegments::display_lossy`].
pub struct Utf8Lossy<'a, S: ?Sized> {
    source: &'a S,
}

/// The text quoted and escaped, as `{:?}` of a `str`.
impl<S: ByteSegments + ?Sized> fmt::Debug for Utf8Lossy<'_, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.to_string(), f)
    }
}

impl<S: ByteSegments + ?Sized> fmt::Display for Utf8Lossy<'_, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut decoder = LossyDecoder::default();
        for segment in self.source.segments() {
            decoder.feed(f, segment)?;
        }
        decoder.finish(f)
    }
}

/// Streaming lossy UTF-8 decoder: carries an incomplete character from one segment to the next.
#[derive(Default)]
struct LossyDecoder {
    carry: [u8; 4],
    carried: usize,
}

const REPLACEMENT: &str = "\u{FFFD}";

impl LossyDecoder {
    fn feed(&mut self, f: &mut fmt::Formatter<'_>, mut input: &[u8]) -> fmt::Result {
        if self.carried > 0 {
            input = self.complete_carry(f, input)?;
            if self.carried > 0 {
                return Ok(()); // still incomplete: the segment was too short
            }
        }
        loop {
            match std::str::from_utf8(input) {
                Ok(text) => return f.write_str(text),
                Err(e) => {
                    let (valid, rest) = input.split_at(e.valid_up_to());
                    f.write_str(std::str::from_utf8(valid).expect("valid prefix"))?;
                    match e.error_len() {
                        Some(bad) => {
                            f.write_str(REPLACEMENT)?;
                            input = &rest[bad..];
                        }
                        None => {
                            // An incomplete character at the end: keep it for the next segment.
                            self.carry[..rest.len()].copy_from_slice(rest);
                            self.carried = rest.len();
                            return Ok(());
                        }
                    }
                }
            }
        }
    }

    /// Add bytes from `input` to the carried prefix until it decodes or proves invalid; returns the
    /// unused part of `input`.
    fn complete_carry<'a>(
        &mut self,
        f: &mut fmt::Formatter<'_>,
        input: &'a [u8],
    ) -> Result<&'a [u8], fmt::Error> {
        let before = self.carried;
        let take = input.len().min(self.carry.len() - before);
        self.carry[before..before + take].copy_from_slice(&input[..take]);
        let candidate = &self.carry[..before + take];
        let used = match std::str::from_utf8(candidate) {
            Ok(text) => {
                f.write_str(text)?;
                before + take
            }
            Err(e) if e.valid_up_to() > 0 => {
                // The carried character completed; what follows is decoded with the segment.
                let end = e.valid_up_to();
                f.write_str(std::str::from_utf8(&candidate[..end]).expect("valid prefix"))?;
                end
            }
            Err(e) => match e.error_len() {
                Some(bad) => {
                    f.write_str(REPLACEMENT)?;
                    bad
                }
                None => {
                    self.carried = before + take; // still incomplete; `input` is used up
                    return Ok(&[]);
                }
            },
        };
        self.carried = 0;
        // `used` counts carried bytes first; anything beyond them came from `input`.
        Ok(&input[used.saturating_sub(before)..])
    }

    fn finish(&mut self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.carried > 0 {
            self.carried = 0;
            f.write_str(REPLACEMENT)?;
        }
        Ok(())
    }
}

impl ByteSegments for [u8] {
    fn segments(&self) -> impl Iterator<Item = &[u8]> + Clone {
        std::iter::once(self)
    }
}

#[cfg(test)]
mod tests {
    use super::find_byte;

    /// `find_byte` against the byte-by-byte search it replaces: every length up to three words,
    /// the byte at every position or absent, over fillers that make the word trick borrow
    /// (`byte + 1`, `byte ^ 0x80`, zero, 0xff).
    #[test]
    fn find_byte_agrees_with_a_byte_loop() {
        let mut checked = 0;
        for byte in [0x00u8, 0x01, b'\n', 0x7f, 0x80, 0xfe, 0xff] {
            for filler in [byte.wrapping_add(1), byte ^ 0x80, 0x00, 0xff] {
                if filler == byte {
                    continue;
                }
                for len in 0..=24 {
                    for at in (0..len).map(Some).chain([None]) {
                        let mut haystack = vec![filler; len];
                        if let Some(at) = at {
                            haystack[at] = byte;
                            // A second occurrence after the first must not be reported.
                            if at + 3 < len {
                                haystack[at + 3] = byte;
                            }
                        }
                        let expected = haystack.iter().position(|&b| b == byte);
                        assert_eq!(expected, at);
                        assert_eq!(find_byte(byte, &haystack), expected, "{haystack:?} {byte}");
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 2_000, "{checked}");
    }
}
