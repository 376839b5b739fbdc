//! The RESP2 request parser: where each argument of each complete request lies, found in place
//! over the bytes as they arrived (a pipe's chain of segments, or one contiguous slice), never
//! joining them.
//!
//! [`parse`] reads one request: a complete one (its end and the [`Span`] of every argument),
//! "incomplete, need at least n bytes", a recoverable protocol error (where the offending line
//! ends, and the reply), or a fatal one (the connection is closed). [`parse_batch`] reads every
//! complete request at hand, which is what both servers' decoders do: the packetpipe one over a
//! [`ReadBuffer`](packetpipe::pipe::ReadBuffer)'s segments, the tokio-util one over its
//! `BytesMut`, so they agree on every input by construction (`tests-integration/tests/resp_parser.rs` checks both
//! against every split point of a corpus). Positions are byte offsets from the start of the
//! bytes at hand.
//!
//! The grammar, as Redis reads requests:
//! - multibulk: `*<count>\r\n` then `count` times `$<len>\r\n<len bytes>\r\n`; a count of 0 or less
//!   is an empty request (no reply);
//! - inline: any other first byte starts a line, split on spaces, tabs and `\r` (no quoting); an
//!   empty line is an empty request.
//!
//! Unlike Redis, which closes the connection on any protocol error, a malformed header is
//! recoverable: the bytes up to the end of the offending line are discarded (once that end has
//! arrived) and the client gets `-ERR Protocol error: ...`. Bulk data not followed by CRLF is such
//! an error here; Redis 7.0 does not check those two bytes (it skips them). A number that is not
//! a 64-bit integer is such a malformed header (Redis closes). The limits are Redis 7's, and
//! close the connection as Redis does:
//! - a bulk of up to `max_request` bytes (`proto-max-bulk-len`, 512 MiB) is accepted, a longer
//!   one refused ("invalid bulk length");
//! - an element count above `i32::MAX` is refused ("invalid multibulk length"); a smaller one is
//!   waited for (the bytes ahead asked for grow by doubling, so a huge count asks the pipe for no
//!   more than twice what arrived);
//! - a count of 0 or less, down to `i64::MIN`, is an empty request;
//! - an inline line may hold [`MAX_INLINE`] bytes before its line end (`PROTO_INLINE_MAX_SIZE`;
//!   Redis checks after each 16 KiB read, so the line it takes can be a little longer);
//! - a whole request may take up to twice `max_request` (1 GiB by default, Redis's
//!   `client-query-buffer-limit`).

use std::ops::Range;

/// Bytes an inline command may take before the request is refused (Redis's
/// `PROTO_INLINE_MAX_SIZE`).
pub const MAX_INLINE: usize = 64 * 1024;

/// Default largest request: Redis's `proto-max-bulk-len`, 512 MiB.
pub const DEFAULT_MAX_REQUEST: usize = 512 * 1024 * 1024;

/// Largest element count of a multibulk request (Redis refuses counts above `INT_MAX`).
pub const MAX_COUNT: i64 = i32::MAX as i64;

/// How far past the bytes at hand an incomplete request asks for more, at most (when it knows it
/// needs at least `wanted`, which a count can make huge): doubling what is there, at least 64 KiB,
/// so a request of many small elements arriving in pieces is parsed again a logarithmic number
/// of times, and an unproven count never lifts the pipe's backpressure far. `floor` is a need
/// known for sure (a bulk's announced data).
fn need_ahead(floor: usize, wanted: usize, available: usize) -> usize {
    let ahead = available.saturating_mul(2).max(available + 64 * 1024);
    wanted.min(ahead).max(floor).max(available + 1)
}

/// Requests answered per batch at most (then the replies are flushed and parsing goes on).
pub const MAX_BATCH: usize = 1024;

/// Where one argument lies: byte offsets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

impl Span {
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    pub fn range(&self) -> Range<usize> {
        self.start..self.end
    }
}

/// What the bytes from a request's start hold.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A complete request ending at `end`; the spans of its arguments were pushed (none: an empty
    /// request, to be skipped without a reply).
    Request { end: usize },
    /// Not complete: at least `need` bytes are needed first.
    Incomplete { need: usize },
    /// Malformed: discard the bytes up to `end`, answer `-<message>` (it starts with `ERR`), go
    /// on.
    Invalid { end: usize, message: String },
    /// Larger than the maximum: answer `-<message>` and close the connection.
    Fatal { message: String },
}

/// Parse the request starting at `start`. `chunks` are the bytes from `start` on, `available`
/// the position where they end. Pushes the span of each argument to `spans` (only for a
/// complete request). A request may not exceed `max_request` bytes.
pub fn parse<'a, I>(
    chunks: I,
    start: usize,
    available: usize,
    max_request: usize,
    spans: &mut Vec<Span>,
) -> Parsed
where
    I: Iterator<Item = &'a [u8]> + Clone,
{
    let mark = spans.len();
    let mut scan = Scanner::new(chunks.clone(), start);
    let parsed = match scan.next() {
        None => Parsed::Incomplete { need: start + 1 },
        Some(b'*') => multibulk(scan, start, available, max_request, spans),
        Some(_) => inline(Scanner::new(chunks, start), max_request, spans),
    };
    if !matches!(parsed, Parsed::Request { .. }) {
        spans.truncate(mark);
    }
    parsed
}

/// One request of a batch: its arguments (a range of the batch's spans), or the protocol error
/// to answer instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub args: Range<usize>,
    pub error: Option<String>,
}

/// The requests of a batch and the one its `Args` methods read: what both servers' batches share.
#[derive(Debug, Default)]
pub struct Requests {
    pub entries: Vec<Entry>,
    selected: usize,
}

impl Requests {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn select(&mut self, request: usize) {
        self.selected = request;
    }

    /// Arguments of the selected request.
    pub fn argc(&self) -> usize {
        self.entries[self.selected].args.len()
    }

    /// Where argument `i` of the selected request is among the batch's arguments.
    pub fn arg_index(&self, i: usize) -> usize {
        self.entries[self.selected].args.start + i
    }

    /// The selected request's protocol error, if it was malformed.
    pub fn error(&self) -> Option<&str> {
        self.entries[self.selected].error.as_deref()
    }

    pub fn clear(&mut self) {
        self.entries.clear();
        self.selected = 0;
    }
}

/// The bytes of a request in multibulk form, as clients send it (for tests and tools).
pub fn encode_request(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Why a batch ended before the bytes at hand did.
#[derive(Debug, PartialEq, Eq)]
pub enum Stop {
    /// A request is incomplete: at least `need` bytes are needed (from the start).
    Incomplete { need: usize },
    /// A request is too large: answer and close (after the batch before it is answered).
    Fatal { message: String },
    /// [`MAX_BATCH`] requests: the rest is for the next batch.
    Full,
}

/// Parse every complete request from the start of the bytes at hand (`available` of them):
/// `chunks_from(pos)` gives the bytes from `pos` on. Pushes each request to `entries` (empty
/// requests have none) and its arguments' spans to `spans` (both cleared first). Returns where
/// the complete requests end and why parsing stopped there.
pub fn parse_batch<'a, I, F>(
    chunks_from: F,
    available: usize,
    max_request: usize,
    spans: &mut Vec<Span>,
    entries: &mut Vec<Entry>,
) -> (usize, Stop)
where
    I: Iterator<Item = &'a [u8]> + Clone,
    F: Fn(usize) -> I,
{
    spans.clear();
    entries.clear();
    let mut pos = 0;
    loop {
        if entries.len() == MAX_BATCH {
            return (pos, Stop::Full);
        }
        let mark = spans.len();
        match parse(chunks_from(pos), pos, available, max_request, spans) {
            Parsed::Request { end } => {
                if spans.len() > mark {
                    entries.push(Entry {
                        args: mark..spans.len(),
                        error: None,
                    });
                }
                pos = end;
            }
            Parsed::Invalid { end, message } => {
                entries.push(Entry {
                    args: mark..mark,
                    error: Some(message),
                });
                pos = end;
            }
            Parsed::Incomplete { need } => return (pos, Stop::Incomplete { need }),
            Parsed::Fatal { message } => return (pos, Stop::Fatal { message }),
        }
    }
}

fn multibulk<'a, I>(
    mut scan: Scanner<'a, I>,
    start: usize,
    available: usize,
    max_request: usize,
    spans: &mut Vec<Span>,
) -> Parsed
where
    I: Iterator<Item = &'a [u8]>,
{
    let more = Parsed::Incomplete {
        need: available + 1,
    };
    let count = match scan.int_line() {
        Line::Int(n) => n,
        Line::Incomplete => return more,
        Line::Invalid { ended } => {
            return scan.invalid("ERR Protocol error: invalid multibulk length", ended, start)
        }
    };
    if count <= 0 {
        return Parsed::Request { end: scan.pos() };
    }
    if count > MAX_COUNT {
        return fatal("ERR Protocol error: invalid multibulk length");
    }
    let max_total = max_request.saturating_mul(2);
    for i in 0..count as usize {
        // An incomplete request asks for at least 6 bytes (`$0\r\n\r\n`) per element still to
        // come (within `need_ahead`): a request of many small elements arriving in pieces is
        // then parsed again a logarithmic number of times, not once per piece (which made its
        // parse quadratic).
        let at_least = scan.pos().saturating_add(6 * (count as usize - i));
        let more = Parsed::Incomplete {
            need: need_ahead(0, at_least, available),
        };
        match scan.next() {
            None => return more,
            Some(b'$') => {}
            Some(other) => {
                let message = format!(
                    "ERR Protocol error: expected '$', got '{}'",
                    printable(other) as char
                );
                return scan.invalid(&message, other == b'\n', start);
            }
        }
        let len = match scan.int_line() {
            Line::Int(n) => n,
            Line::Incomplete => return more,
            Line::Invalid { ended } => {
                return scan.invalid("ERR Protocol error: invalid bulk length", ended, start)
            }
        };
        if len < 0 || len as u64 > max_request as u64 {
            return fatal("ERR Protocol error: invalid bulk length");
        }
        let data = scan.pos();
        let end = data + len as usize;
        if end + 2 - start > max_total {
            return fatal(&format!(
                "ERR Protocol error: request larger than {max_total} bytes"
            ));
        }
        // This element's data and CRLF, and 6 bytes for each element after it.
        let rest = Parsed::Incomplete {
            need: need_ahead(
                end + 2,
                (end + 2).saturating_add(6 * (count as usize - i - 1)),
                available,
            ),
        };
        if !scan.skip(len as usize) {
            return rest;
        }
        match (scan.next(), scan.next()) {
            (Some(b'\r'), Some(b'\n')) => {}
            (None, _) | (Some(b'\r'), None) => return rest,
            (_, last) => {
                return scan.invalid(
                    "ERR Protocol error: expected CRLF after bulk data",
                    last == Some(b'\n'),
                    start,
                )
            }
        }
        spans.push(Span { start: data, end });
    }
    Parsed::Request { end: scan.pos() }
}

fn inline<'a, I>(mut scan: Scanner<'a, I>, max_request: usize, spans: &mut Vec<Span>) -> Parsed
where
    I: Iterator<Item = &'a [u8]>,
{
    // The line's bytes before its end: at most this many; then `\r\n` or `\n`.
    let limit = scan.pos() + MAX_INLINE.min(max_request);
    let mut arg_start = None;
    loop {
        let pos = scan.pos();
        let Some(byte) = scan.next() else {
            return Parsed::Incomplete { need: pos + 1 };
        };
        let line_end = byte == b'\n' || (byte == b'\r' && pos == limit);
        if pos >= limit && !line_end {
            return fatal("ERR Protocol error: too big inline request");
        }
        let separator = matches!(byte, b' ' | b'\t' | b'\r' | b'\n');
        match (arg_start, separator) {
            (None, false) => arg_start = Some(pos),
            (Some(start), true) => {
                spans.push(Span { start, end: pos });
                arg_start = None;
            }
            _ => {}
        }
        if byte == b'\n' {
            return Parsed::Request { end: pos + 1 };
        }
    }
}

fn fatal(message: &str) -> Parsed {
    Parsed::Fatal {
        message: message.to_string(),
    }
}

/// A byte for an error message: control bytes and non-ASCII shown as `?`.
fn printable(byte: u8) -> u8 {
    if byte.is_ascii_graphic() || byte == b' ' {
        byte
    } else {
        b'?'
    }
}

enum Line {
    Int(i64),
    Incomplete,
    /// Not a number; `ended`: the offending byte was the line's `\n`.
    Invalid {
        ended: bool,
    },
}

/// Reads bytes across the segments: an index into the current one, which only changes at a
/// segment boundary.
struct Scanner<'a, I> {
    chunk: &'a [u8],
    at: usize,
    /// Position of `chunk[0]`.
    base: usize,
    rest: I,
}

impl<'a, I: Iterator<Item = &'a [u8]>> Scanner<'a, I> {
    fn new(mut chunks: I, start: usize) -> Self {
        Scanner {
            chunk: chunks.next().unwrap_or(&[]),
            at: 0,
            base: start,
            rest: chunks,
        }
    }

    #[inline]
    fn pos(&self) -> usize {
        self.base + self.at
    }

    #[inline(always)]
    fn next(&mut self) -> Option<u8> {
        match self.chunk.get(self.at) {
            Some(&byte) => {
                self.at += 1;
                Some(byte)
            }
            None => self.next_chunk(),
        }
    }

    #[cold]
    fn next_chunk(&mut self) -> Option<u8> {
        loop {
            let chunk = self.rest.next()?;
            self.base += self.chunk.len();
            self.chunk = chunk;
            self.at = 0;
            if let Some(&byte) = chunk.first() {
                self.at = 1;
                return Some(byte);
            }
        }
    }

    /// Skip `n` bytes; false if fewer are there.
    #[inline]
    fn skip(&mut self, mut n: usize) -> bool {
        loop {
            let left = self.chunk.len() - self.at;
            if n <= left {
                self.at += n;
                return true;
            }
            n -= left;
            self.at = self.chunk.len();
            let Some(chunk) = self.rest.next() else {
                return false;
            };
            self.base += self.chunk.len();
            self.chunk = chunk;
            self.at = 0;
        }
    }

    /// A decimal 64-bit integer (optionally negative) ended by `\r\n`; one out of the `i64`
    /// range is not a number.
    #[inline]
    fn int_line(&mut self) -> Line {
        // Accumulated as a negative number, so that `i64::MIN` fits.
        let (mut value, mut digits, mut negative) = (0i64, 0, false);
        loop {
            let Some(byte) = self.next() else {
                return Line::Incomplete;
            };
            match byte {
                b'0'..=b'9' => {
                    let Some(next) = value
                        .checked_mul(10)
                        .and_then(|v| v.checked_sub(i64::from(byte - b'0')))
                    else {
                        return Line::Invalid { ended: false };
                    };
                    value = next;
                    digits += 1;
                }
                b'-' if digits == 0 && !negative => negative = true,
                b'\r' if digits > 0 => {
                    let value = if negative {
                        Some(value)
                    } else {
                        value.checked_neg()
                    };
                    return match (self.next(), value) {
                        (None, _) => Line::Incomplete,
                        (Some(b'\n'), Some(value)) => Line::Int(value),
                        (Some(b'\n'), None) => Line::Invalid { ended: true },
                        (Some(_), _) => Line::Invalid { ended: false },
                    };
                }
                _ => {
                    return Line::Invalid {
                        ended: byte == b'\n',
                    }
                }
            }
        }
    }

    /// A recoverable error: discard through the end of the current line (`ended`: the last byte
    /// read ended it). A line whose end has not arrived yet is waited for (so the outcome does
    /// not depend on where the bytes were split), up to [`MAX_INLINE`] bytes.
    fn invalid(mut self, message: &str, ended: bool, start: usize) -> Parsed {
        if !ended {
            loop {
                match self.next() {
                    Some(b'\n') => break,
                    Some(_) => {}
                    None if self.pos() - start > MAX_INLINE => {
                        return fatal("ERR Protocol error: too big inline request")
                    }
                    None => {
                        return Parsed::Incomplete {
                            need: self.pos() + 1,
                        }
                    }
                }
            }
        }
        Parsed::Invalid {
            end: self.pos(),
            message: message.to_string(),
        }
    }
}
