//! The frame decoders' differential harness against tokio-util 0.7, shared by three drivers: the
//! proptests (`tests-integration/tests/frame_differential.rs`), the `frame_decoders` fuzz target
//! (`fuzz/fuzz_targets/frame_decoders.rs`) and the replay test of the committed fuzz inputs
//! (`tests-integration/tests/fuzz_replay.rs`). Each includes this file with `#[path]`, so it is not part of the
//! library's API.
//!
//! The same byte stream, cut into segments, goes through `Frames<D>` over a pipe (each segment
//! appended and flushed, the stream polled until it waits, then the writer completed) and through
//! `FramedRead<_, Codec>` over an `AsyncRead` that hands out one segment per read; the outcomes
//! (frames, and errors by class) must be the same, at the same point, and every error must convert
//! to the `io::ErrorKind` tokio-util gives for it (one documented exception: the end of the stream
//! inside a frame). Codecs: `LengthDelimited` (packets and chains) against `LengthDelimitedCodec`,
//! `Lines` against `LinesCodec`, `Delimited` (one delimiter, and `any_of` a set with a sequence
//! writer) against `AnyDelimiterCodec`, `Passthrough` against `BytesCodec`; the encoders of the
//! last two are compared on the same input too.
#![allow(dead_code)] // each driver uses part of it

use packetpipe::ByteSegments;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use std::io::ErrorKind;

use bytes::BytesMut;
use futures::StreamExt;
use packetpipe::frame::{
    Delimited, FrameError, FrameWriter, Frames, LengthDelimited, Lines, Passthrough,
};
use packetpipe::pipe::{pipe_with, PipeOptions};
use tokio::io::{AsyncRead, ReadBuf};
use tokio_util::codec::{
    AnyDelimiterCodec, AnyDelimiterCodecError, BytesCodec, Encoder as _, FramedRead,
    LengthDelimitedCodec, LinesCodec, LinesCodecError,
};

/// One thing a stream yielded (or an encoder answered).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Frame(Vec<u8>),
    /// A length field above the maximum (`InvalidData`).
    TooBig,
    /// An item to encode above the maximum (`InvalidInput`).
    ItemTooBig,
    /// A length field that overflows with the adjustment (`InvalidInput`, decoding and encoding).
    Overflow,
    /// The stream ended inside a frame.
    Remaining,
    /// No delimiter within the maximum length.
    TooLong,
    /// A line that is not UTF-8 (`InvalidData`).
    Utf8,
}

/// Our error's class, after checking that it converts to the `io::ErrorKind` tokio-util gives for
/// the same failure (for `Remaining`, the documented `UnexpectedEof` where tokio-util says
/// `Other`).
pub fn ours(err: FrameError) -> Outcome {
    let (outcome, kind) = match &err {
        FrameError::FrameTooLong { .. } => (Outcome::TooBig, ErrorKind::InvalidData),
        FrameError::ItemTooLong { .. } => (Outcome::ItemTooBig, ErrorKind::InvalidInput),
        FrameError::LengthOverflow { .. } => (Outcome::Overflow, ErrorKind::InvalidInput),
        FrameError::BytesRemaining { .. } => (Outcome::Remaining, ErrorKind::UnexpectedEof),
        FrameError::DelimiterNotFound { .. } => (Outcome::TooLong, ErrorKind::InvalidData),
        FrameError::InvalidUtf8 { .. } => (Outcome::Utf8, ErrorKind::InvalidData),
        other => panic!("unexpected error {other:?}"),
    };
    let io = std::io::Error::from(err);
    assert_eq!(io.kind(), kind, "the io::ErrorKind of {io}");
    outcome
}

/// tokio-util's error's class, by its message and its kind (so a kind that differs from ours is a
/// different outcome).
pub fn tokio_io(err: &std::io::Error) -> Outcome {
    let message = err.to_string();
    match (message.as_str(), err.kind()) {
        ("frame size too big", ErrorKind::InvalidData) => Outcome::TooBig,
        ("frame size too big", ErrorKind::InvalidInput) => Outcome::ItemTooBig,
        ("provided length would overflow after adjustment", ErrorKind::InvalidInput) => {
            Outcome::Overflow
        }
        ("bytes remaining on stream", ErrorKind::Other) => Outcome::Remaining,
        ("Unable to decode input as UTF8", ErrorKind::InvalidData) => Outcome::Utf8,
        _ => panic!(
            "unexpected tokio-util error {err:?} (kind {:?})",
            err.kind()
        ),
    }
}

/// An `AsyncRead` that hands out the segments one read at a time, then EOF.
pub struct Segmented {
    pub segments: Vec<Vec<u8>>,
    pub next: usize,
    pub offset: usize,
}

impl AsyncRead for Segmented {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        if let Some(segment) = this.segments.get(this.next) {
            let n = buf.remaining().min(segment.len() - this.offset);
            buf.put_slice(&segment[this.offset..this.offset + n]);
            this.offset += n;
            if this.offset == segment.len() {
                this.next += 1;
                this.offset = 0;
            }
        }
        Poll::Ready(Ok(()))
    }
}

pub struct Noop;
impl Wake for Noop {
    fn wake(self: Arc<Self>) {}
}

/// Cut `bytes` into segments of the given sizes (cycled), each at least 1 byte.
pub fn segments(bytes: &[u8], sizes: &[usize]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut rest = bytes;
    let mut i = 0;
    while !rest.is_empty() {
        let n = sizes[i % sizes.len()].clamp(1, rest.len());
        out.push(rest[..n].to_vec());
        rest = &rest[n..];
        i += 1;
    }
    out
}

/// A decoded frame's bytes.
pub trait FrameBytes {
    fn bytes(&self) -> Vec<u8>;
}

impl FrameBytes for packetpipe::Packet {
    fn bytes(&self) -> Vec<u8> {
        self.to_vec()
    }
}

impl FrameBytes for packetpipe::PacketChain {
    fn bytes(&self) -> Vec<u8> {
        packetpipe::ByteSegments::to_vec(self)
    }
}

impl FrameBytes for packetpipe::frame::Line {
    fn bytes(&self) -> Vec<u8> {
        self.as_bytes().to_vec()
    }
}

/// Up to this many errors are followed by a resumption.
pub const MAX_RESUMES: usize = 64;

/// Outcomes compared at most: with `num_skip(0)` a frame of length 0 consumes nothing, and both
/// implementations yield it forever (tokio-util's behaviour, kept); the prefixes are compared.
pub const MAX_OUTCOMES: usize = 2000;

/// tokio-util's outcomes: poll until `None`; after an error's `None`, poll on if `resume`.
pub fn run_tokio<D>(
    segments: Vec<Vec<u8>>,
    codec: D,
    resume: bool,
    map: impl Fn(D::Error) -> Outcome,
) -> Vec<Outcome>
where
    D: tokio_util::codec::Decoder,
    D::Item: AsRef<[u8]>,
{
    let reader = Segmented {
        segments,
        next: 0,
        offset: 0,
    };
    let mut framed = FramedRead::new(reader, codec);
    let mut out = Vec::new();
    let mut errors = 0;
    futures::executor::block_on(async {
        while out.len() < MAX_OUTCOMES {
            match framed.next().await {
                Some(Ok(frame)) => out.push(Outcome::Frame(frame.as_ref().to_vec())),
                Some(Err(e)) => {
                    out.push(map(e));
                    errors += 1;
                }
                None => {
                    let after_error =
                        matches!(out.last(), Some(o) if !matches!(o, Outcome::Frame(_)));
                    if !(resume && after_error && errors <= MAX_RESUMES) {
                        break;
                    }
                    // A bare `None` right after an error: FramedRead goes on when polled again.
                    if let Some(item) = framed.next().await {
                        match item {
                            Ok(frame) => out.push(Outcome::Frame(frame.as_ref().to_vec())),
                            Err(e) => {
                                out.push(map(e));
                                errors += 1;
                            }
                        }
                    } else {
                        break;
                    }
                }
            }
        }
    });
    out
}

/// Our outcomes: each segment appended and flushed, then the stream polled until it waits; then
/// the writer completes and the stream is polled to its end. After an error's `None`, `resume`, as
/// `FramedRead` does when polled again: it reads first (the next segment, or the end) and then
/// decodes, so the next segment is fed (or the writer completed) before resuming.
pub fn run_ours<D>(segments: Vec<Vec<u8>>, decoder: D, resume: bool) -> Vec<Outcome>
where
    D: packetpipe::frame::Decoder<Error = FrameError>,
    D::Item: FrameBytes,
{
    let (mut writer, reader) = pipe_with(PipeOptions {
        pause_threshold: 0,
        ..Default::default()
    });
    let mut frames = Frames::new(reader, decoder);
    let waker = Waker::from(Arc::new(Noop));
    let mut cx = Context::from_waker(&waker);
    let mut out = Vec::new();
    let mut errors = 0;
    let mut segments = segments.into_iter();
    let mut completed = false;
    let mut resuming = false;
    loop {
        match segments.next() {
            Some(segment) => {
                writer.append(segment).unwrap();
                writer.flush_blocking().unwrap();
            }
            None if !completed => {
                writer.complete();
                completed = true;
            }
            None => {}
        }
        if std::mem::take(&mut resuming) && !frames.resume() {
            break;
        }
        loop {
            if out.len() >= MAX_OUTCOMES {
                return out;
            }
            match frames.poll_next_unpin(&mut cx) {
                Poll::Pending => {
                    assert!(!completed, "waiting after the writer completed");
                    break;
                }
                Poll::Ready(Some(Ok(frame))) => out.push(Outcome::Frame(frame.bytes())),
                Poll::Ready(Some(Err(e))) => {
                    out.push(ours(e));
                    errors += 1;
                }
                Poll::Ready(None) => {
                    let after_error =
                        matches!(out.last(), Some(o) if !matches!(o, Outcome::Frame(_)));
                    if !(resume && after_error && errors <= MAX_RESUMES) {
                        return out;
                    }
                    resuming = true;
                    break;
                }
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// LengthDelimited

#[derive(Debug, Clone)]
pub struct Config {
    pub field_len: usize,
    pub offset: usize,
    pub adjustment: isize,
    pub num_skip: Option<usize>,
    pub big_endian: bool,
    pub max: Option<usize>,
}

/// Apply a `Config` to a builder of either crate (their builder methods have the same names).
macro_rules! configure {
    ($config:expr, $builder:expr) => {{
        let config = $config;
        let mut b = $builder;
        b.length_field_length(config.field_len)
            .length_field_offset(config.offset)
            .length_adjustment(config.adjustment);
        if let Some(n) = config.num_skip {
            b.num_skip(n);
        }
        if !config.big_endian {
            b.little_endian();
        }
        if let Some(max) = config.max {
            b.max_frame_length(max);
        }
        b.new_codec()
    }};
}

impl Config {
    pub fn tokio(&self) -> LengthDelimitedCodec {
        configure!(self, LengthDelimitedCodec::builder())
    }

    pub fn ours(&self) -> LengthDelimited {
        configure!(self, LengthDelimited::builder())
    }

    pub fn head_len(&self) -> usize {
        (self.offset + self.field_len).max(self.num_skip.unwrap_or(0))
    }

    pub fn num_skip(&self) -> usize {
        self.num_skip.unwrap_or(self.offset + self.field_len)
    }

    pub fn field(&self, value: u64) -> Vec<u8> {
        let n = self.field_len;
        if self.big_endian {
            value.to_be_bytes()[8 - n..].to_vec()
        } else {
            value.to_le_bytes()[..n].to_vec()
        }
    }
}

/// tokio-util ends silently where the stream stops right after a complete header of a non-empty
/// frame (it has consumed the header); ours reports the header bytes as remaining. The one
/// deliberate difference (documented on `LengthDelimited`).
pub fn normalize_header_only_end(
    config: &Config,
    ours: &mut Vec<Outcome>,
    bytes_left: Option<usize>,
) {
    if ours.last() == Some(&Outcome::Remaining)
        && bytes_left == Some(config.num_skip())
        && config.num_skip() == config.head_len()
    {
        ours.pop();
    }
}

pub fn lines_error(e: LinesCodecError) -> Outcome {
    match e {
        LinesCodecError::MaxLineLengthExceeded => Outcome::TooLong,
        LinesCodecError::Io(e) => tokio_io(&e),
    }
}

pub fn any_delimiter_error(e: AnyDelimiterCodecError) -> Outcome {
    match e {
        AnyDelimiterCodecError::MaxChunkLengthExceeded => Outcome::TooLong,
        AnyDelimiterCodecError::Io(e) => tokio_io(&e),
    }
}

/// Compare `Frames<LengthDelimited>` (packets and chains) with `LengthDelimitedCodec` on `bytes`
/// cut by `sizes`; panics with the difference.
pub fn check_length_delimited(config: &Config, bytes: &[u8], sizes: &[usize]) {
    let expected = run_tokio(segments(bytes, sizes), config.tokio(), false, |e| {
        tokio_io(&e)
    });
    let mut got = run_ours(segments(bytes, sizes), config.ours(), false);
    // Bytes left for the header-only case: what the frames before did not consume.
    let consumed: usize = got
        .iter()
        .map(|o| match o {
            Outcome::Frame(f) => f.len() + config.num_skip(),
            _ => 0,
        })
        .sum();
    normalize_header_only_end(config, &mut got, bytes.len().checked_sub(consumed));
    assert_eq!(got, expected, "config {config:?}, {} bytes", bytes.len());
    // The same frames as chains.
    let mut chains = run_ours(segments(bytes, sizes), config.ours().into_chains(), false);
    normalize_header_only_end(config, &mut chains, bytes.len().checked_sub(consumed));
    assert_eq!(chains, expected, "chains, config {config:?}");
}

/// Compare `Frames<Lines>` with `LinesCodec` (resuming after errors, as `FramedRead` does).
pub fn check_lines(text: &[u8], max: Option<usize>, sizes: &[usize]) {
    let (codec, lines) = match max {
        Some(max) => (
            LinesCodec::new_with_max_length(max),
            Lines::with_max_length(max),
        ),
        None => (LinesCodec::new(), Lines::new()),
    };
    let expected = run_tokio(segments(text, sizes), codec, true, lines_error);
    let got = run_ours(segments(text, sizes), lines, true);
    assert_eq!(got, expected, "max {max:?}");
}

/// Compare `Frames<Delimited>` with `AnyDelimiterCodec` on one delimiter, `,`.
pub fn check_delimited(text: &[u8], max: Option<usize>, sizes: &[usize]) {
    let max = max.unwrap_or(usize::MAX);
    let codec = AnyDelimiterCodec::new_with_max_length(b",".to_vec(), b",".to_vec(), max);
    let expected = run_tokio(segments(text, sizes), codec, true, any_delimiter_error);
    let got = run_ours(segments(text, sizes), Delimited::new(b",", max), true);
    assert_eq!(got, expected, "max {max:?}");
}

/// Seek sets and sequence writers for `Delimited::any_of` (by index in the fuzz input).
pub const SEEK_SETS: [&[u8]; 4] = [b",;\n\r", b",", b"\n\r", b";x"];
pub const SEQUENCE_WRITERS: [&[u8]; 4] = [b",", b";--;", b"", b"\r\n"];

/// Compare `Frames<Delimited::any_of>` with `AnyDelimiterCodec` on a set of delimiters and a
/// sequence writer (resuming after errors); then encode the decoded frames that are text with both
/// (`AnyDelimiterCodec` encodes `&str`) and compare the bytes.
pub fn check_delimited_any(
    text: &[u8],
    seek: &[u8],
    writer: &[u8],
    max: Option<usize>,
    sizes: &[usize],
) {
    let max = max.unwrap_or(usize::MAX);
    let codec = AnyDelimiterCodec::new_with_max_length(seek.to_vec(), writer.to_vec(), max);
    let expected = run_tokio(
        segments(text, sizes),
        codec.clone(),
        true,
        any_delimiter_error,
    );
    let ours = Delimited::any_of(seek, writer, max);
    let got = run_ours(segments(text, sizes), ours.clone(), true);
    assert_eq!(
        got, expected,
        "seek {seek:?}, writer {writer:?}, max {max:?}"
    );

    let chunks: Vec<&str> = expected
        .iter()
        .filter_map(|o| match o {
            Outcome::Frame(f) => std::str::from_utf8(f).ok(),
            _ => None,
        })
        .collect();
    let mut codec = codec;
    let mut theirs = BytesMut::new();
    for chunk in &chunks {
        codec
            .encode(*chunk, &mut theirs)
            .expect("AnyDelimiterCodec encodes any text");
    }
    let (pipe_writer, mut reader) = pipe_with(PipeOptions {
        pause_threshold: 0,
        ..Default::default()
    });
    let mut out = FrameWriter::new(pipe_writer, ours);
    for (i, chunk) in chunks.iter().enumerate() {
        // The copying path (`&str`, `&[u8]`) and the zero-copy one (`Packet`) in turn.
        match i % 3 {
            0 => out.feed(*chunk).unwrap(),
            1 => out.feed(chunk.as_bytes()).unwrap(),
            _ => out
                .feed(packetpipe::Packet::from(chunk.as_bytes().to_vec()))
                .unwrap(),
        }
    }
    out.into_inner().complete();
    let encoded = reader.read_blocking().unwrap().buffer.to_vec();
    assert_eq!(encoded, theirs.to_vec(), "encoding, writer {writer:?}");
}

/// Compare `Frames<Passthrough>` with `FramedRead<_, BytesCodec>`: the same bytes, ending without
/// an error; ours yields exactly the pipe's segments (tokio-util's cuts follow its reads). Then
/// encode the segments with both and compare the bytes.
pub fn check_passthrough(bytes: &[u8], sizes: &[usize]) {
    let cut = segments(bytes, sizes);
    // Within the outcomes compared (one frame per segment, or more for tokio-util's reads).
    assert!(bytes.len() < MAX_OUTCOMES, "{} bytes", bytes.len());
    let theirs = run_tokio(cut.clone(), BytesCodec::new(), false, |e| tokio_io(&e));
    let got = run_ours(cut.clone(), Passthrough, false);
    let frames = |outcomes: &[Outcome]| -> Vec<u8> {
        outcomes
            .iter()
            .flat_map(|o| match o {
                Outcome::Frame(f) => {
                    assert!(!f.is_empty(), "an empty frame");
                    f.clone()
                }
                other => panic!("passthrough yielded {other:?}"),
            })
            .collect()
    };
    assert_eq!(frames(&got), frames(&theirs));
    assert_eq!(frames(&got), bytes);
    let expected: Vec<Outcome> = cut.iter().cloned().map(Outcome::Frame).collect();
    assert_eq!(got, expected, "one frame per segment");

    let mut codec = BytesCodec::new();
    let mut encoded = BytesMut::new();
    let (pipe_writer, mut reader) = pipe_with(PipeOptions {
        pause_threshold: 0,
        ..Default::default()
    });
    let mut out = FrameWriter::new(pipe_writer, Passthrough);
    for (i, segment) in cut.iter().enumerate() {
        codec
            .encode(bytes::Bytes::from(segment.clone()), &mut encoded)
            .unwrap();
        match i % 3 {
            0 => out.feed(&segment[..]).unwrap(),
            1 => out.feed(bytes::Bytes::from(segment.clone())).unwrap(),
            _ => out.feed(packetpipe::Packet::from(segment.clone())).unwrap(),
        }
    }
    out.into_inner().complete();
    let result = reader.read_blocking().unwrap();
    assert_eq!(result.buffer.to_vec(), encoded.to_vec());
}

/// The fuzz target's input decoder (stable, so committed inputs keep their meaning):
///
/// - byte 0: the decoder: `% 5` = 0 LengthDelimited (packets and chains), 1 Lines, 2 Delimited,
///   3 Delimited::any_of, 4 Passthrough;
/// - LengthDelimited, bytes 1-5: field length (1, 2, 3, 4, 8 by `% 5`), offset (`% 3`),
///   adjustment (`i8 % 7`), `num_skip` (`Some(b >> 1 % 12)` if bit 0, little endian if bit 7),
///   maximum frame length (0: none, 255: 70,000, else `2 b`); Lines and Delimited, byte 1: the
///   maximum length (0: none, else `b % 24`); Delimited::any_of, bytes 1-3: the maximum length
///   (as Delimited), the seek set ([`SEEK_SETS`], `% 4`), the sequence writer
///   ([`SEQUENCE_WRITERS`], `% 4`); Passthrough: none;
/// - then a count byte (`1 + b % 7` segment sizes) and that many sizes (`1 + b`), cycled;
/// - the rest: the stream.
pub fn run(data: &[u8]) {
    let mut input = data.iter().copied();
    let mut next = || input.next().unwrap_or(0);
    let mode = next() % 5;
    let settings: Vec<u8> = match mode {
        0 => (0..5).map(|_| next()).collect(),
        3 => (0..3).map(|_| next()).collect(),
        4 => Vec::new(),
        _ => vec![next()],
    };
    let count = 1 + next() as usize % 7;
    let sizes: Vec<usize> = (0..count).map(|_| 1 + next() as usize).collect();
    let header = 1 + settings.len() + 1 + count;
    let stream = data.get(header..).unwrap_or(&[]);
    let max_length = |b: u8| match b {
        0 => None,
        m => Some(m as usize % 24),
    };
    match mode {
        0 => {
            let b = &settings;
            let config = Config {
                field_len: [1, 2, 3, 4, 8][b[0] as usize % 5],
                offset: b[1] as usize % 3,
                adjustment: (b[2] as i8 % 7) as isize,
                num_skip: (b[3] & 1 == 1).then(|| (b[3] >> 1) as usize % 12),
                big_endian: b[3] & 0x80 == 0,
                max: match b[4] {
                    0 => None,
                    255 => Some(70_000),
                    m => Some(2 * m as usize),
                },
            };
            check_length_delimited(&config, stream, &sizes);
        }
        1 => check_lines(stream, max_length(settings[0]), &sizes),
        2 => check_delimited(stream, max_length(settings[0]), &sizes),
        3 => check_delimited_any(
            stream,
            SEEK_SETS[settings[1] as usize % 4],
            SEQUENCE_WRITERS[settings[2] as usize % 4],
            max_length(settings[0]),
            &sizes,
        ),
        _ => check_passthrough(stream, &sizes),
    }
}
