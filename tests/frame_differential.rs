//! Differential tests of the frame module against tokio-util 0.7 (issue 8, item 2): the same byte
//! stream, cut at random segment boundaries (1 byte to 64 KiB), through `Frames<LengthDelimited>`
//! and `FramedRead<_, LengthDelimitedCodec>` with random builder settings, `Frames<Lines>` and
//! `FramedRead<_, LinesCodec>`, `Frames<Delimited>` and `FramedRead<_, AnyDelimiterCodec>`: the same
//! frames, and the same errors (kind) at the same point. The encoders are compared too: the same
//! bytes out, or the same error.
//!
//! tokio-util reads each segment through an `AsyncRead` that hands out one segment (or as much of
//! it as fits its buffer) per read. Our side gets each segment appended to the pipe and flushed,
//! and the stream is polled until it waits after each one, so frames are decoded from partial data,
//! across segment boundaries, and after `NeedAtLeast` waits, as in a real connection.
//!
//! After a decoder error tokio-util's `FramedRead` yields `None` and, polled again, goes on; ours
//! yields `None` and goes on after `Frames::resume`. Lines and Delimited are compared across such
//! resumptions (their decoders skip the over-long line); LengthDelimited, whose decoder reports the
//! same header again, up to the first error.
//!
//! Cases per property: `PROPTEST_CASES`, or 1000.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use bytes::BytesMut;
use futures::StreamExt;
use packetpipe::frame::{Delimited, FrameError, FrameWriter, Frames, LengthDelimited, Lines};
use packetpipe::pipe::{pipe_with, PipeOptions};
use proptest::prelude::*;
use tokio::io::{AsyncRead, ReadBuf};
use tokio_util::codec::{
    AnyDelimiterCodec, AnyDelimiterCodecError, Decoder as _, Encoder as _, FramedRead,
    LengthDelimitedCodec, LinesCodec, LinesCodecError,
};

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

/// One thing a stream yielded.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Frame(Vec<u8>),
    /// A length field above the maximum.
    TooBig,
    /// A length field that overflows with the adjustment.
    Overflow,
    /// The stream ended inside a frame.
    Remaining,
    /// No delimiter within the maximum length.
    TooLong,
    /// A line that is not UTF-8.
    Utf8,
}

fn ours(err: &FrameError) -> Outcome {
    match err {
        FrameError::FrameTooLong { .. } => Outcome::TooBig,
        FrameError::LengthOverflow { .. } => Outcome::Overflow,
        FrameError::BytesRemaining { .. } => Outcome::Remaining,
        FrameError::DelimiterNotFound { .. } => Outcome::TooLong,
        FrameError::InvalidUtf8 { .. } => Outcome::Utf8,
        other => panic!("unexpected error {other:?}"),
    }
}

fn tokio_io(err: &std::io::Error) -> Outcome {
    if err
        .get_ref()
        .is_some_and(|e| e.to_string() == "frame size too big")
    {
        Outcome::TooBig
    } else if err.to_string() == "provided length would overflow after adjustment" {
        Outcome::Overflow
    } else if err.to_string() == "bytes remaining on stream" {
        Outcome::Remaining
    } else if err.to_string() == "Unable to decode input as UTF8" {
        Outcome::Utf8
    } else {
        panic!("unexpected tokio-util error {err:?}")
    }
}

/// An `AsyncRead` that hands out the segments one read at a time, then EOF.
struct Segmented {
    segments: Vec<Vec<u8>>,
    next: usize,
    offset: usize,
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

struct Noop;
impl Wake for Noop {
    fn wake(self: Arc<Self>) {}
}

/// Cut `bytes` into segments of the given sizes (cycled), each at least 1 byte.
fn segments(bytes: &[u8], sizes: &[usize]) -> Vec<Vec<u8>> {
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
trait FrameBytes {
    fn bytes(&self) -> Vec<u8>;
}

impl FrameBytes for packetpipe::Packet {
    fn bytes(&self) -> Vec<u8> {
        self.to_vec()
    }
}

impl FrameBytes for packetpipe::PacketChain {
    fn bytes(&self) -> Vec<u8> {
        self.to_vec()
    }
}

impl FrameBytes for packetpipe::frame::Line {
    fn bytes(&self) -> Vec<u8> {
        self.as_bytes().to_vec()
    }
}

/// Up to this many errors are followed by a resumption.
const MAX_RESUMES: usize = 64;

/// Outcomes compared at most: with `num_skip(0)` a frame of length 0 consumes nothing, and both
/// implementations yield it forever (tokio-util's behaviour, kept); the prefixes are compared.
const MAX_OUTCOMES: usize = 2000;

/// tokio-util's outcomes: poll until `None`; after an error's `None`, poll on if `resume`.
fn run_tokio<D>(
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
fn run_ours<D>(segments: Vec<Vec<u8>>, decoder: D, resume: bool) -> Vec<Outcome>
where
    D: packetpipe::frame::Decoder<Error = FrameError>,
    D::Item: FrameBytes,
{
    let (mut writer, reader) = pipe_with(PipeOptions::new().pause_threshold(0));
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
                    out.push(ours(&e));
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
struct Config {
    field_len: usize,
    offset: usize,
    adjustment: isize,
    num_skip: Option<usize>,
    big_endian: bool,
    max: Option<usize>,
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
    fn tokio(&self) -> LengthDelimitedCodec {
        configure!(self, LengthDelimitedCodec::builder())
    }

    fn ours(&self) -> LengthDelimited {
        configure!(self, LengthDelimited::builder())
    }

    fn head_len(&self) -> usize {
        (self.offset + self.field_len).max(self.num_skip.unwrap_or(0))
    }

    fn num_skip(&self) -> usize {
        self.num_skip.unwrap_or(self.offset + self.field_len)
    }

    fn field(&self, value: u64) -> Vec<u8> {
        let n = self.field_len;
        if self.big_endian {
            value.to_be_bytes()[8 - n..].to_vec()
        } else {
            value.to_le_bytes()[..n].to_vec()
        }
    }
}

fn config() -> impl Strategy<Value = Config> {
    (
        prop::sample::select(vec![1usize, 2, 3, 4, 8]),
        0usize..3,
        prop_oneof![3 => Just(0isize), 2 => -6isize..6],
        prop::option::weighted(0.3, 0usize..12),
        any::<bool>(),
        prop::option::weighted(0.5, prop_oneof![0usize..300, Just(70_000usize)]),
    )
        .prop_map(
            |(field_len, offset, adjustment, num_skip, big_endian, max)| Config {
                field_len,
                offset,
                adjustment,
                num_skip,
                big_endian,
                max,
            },
        )
}

/// A piece of the stream.
#[derive(Debug, Clone)]
enum Piece {
    /// A frame as the configuration reads it, with a payload of this length (may be big).
    Frame(usize, u8),
    /// A raw length field value, for values past the maximum or that overflow.
    Field(u64),
    /// Garbage.
    Raw(Vec<u8>),
}

fn piece() -> impl Strategy<Value = Piece> {
    prop_oneof![
        8 => (prop_oneof![6 => 0usize..200, 1 => 1000usize..5000, 1 => 60_000usize..70_000], any::<u8>())
            .prop_map(|(n, b)| Piece::Frame(n, b)),
        1 => prop_oneof![any::<u64>(), 0u64..8].prop_map(Piece::Field),
        1 => prop::collection::vec(any::<u8>(), 0..12).prop_map(Piece::Raw),
    ]
}

/// Bytes of the pieces under `config`; frames are written so that the decoder consumes exactly
/// them (`num_skip` + payload, with the field at its offset).
fn stream(config: &Config, pieces: &[Piece], truncate: Option<usize>) -> Vec<u8> {
    let mut out = Vec::new();
    for piece in pieces {
        match piece {
            Piece::Frame(n, fill) => {
                let field = *n as i64 - config.adjustment as i64;
                let field = if field < 0 { 0 } else { field as u64 };
                let mut frame = vec![0xa5u8; config.offset];
                frame.extend(config.field(field));
                let total = config.num_skip() + n;
                frame.resize(total.max(config.head_len()), *fill);
                out.extend(frame);
            }
            Piece::Field(value) => {
                out.extend(vec![0x5au8; config.offset]);
                out.extend(config.field(*value));
            }
            Piece::Raw(bytes) => out.extend(bytes),
        }
    }
    if let Some(cut) = truncate {
        out.truncate(cut % (out.len() + 1));
    }
    out
}

fn segment_sizes() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(
        prop_oneof![4 => 1usize..16, 3 => 16usize..4096, 1 => 4096usize..=65536],
        1..8,
    )
}

/// tokio-util ends silently where the stream stops right after a complete header of a non-empty
/// frame (it has consumed the header); ours reports the header bytes as remaining. The one
/// deliberate difference (documented on `LengthDelimited`).
fn normalize_header_only_end(config: &Config, ours: &mut Vec<Outcome>, bytes_left: Option<usize>) {
    if ours.last() == Some(&Outcome::Remaining)
        && bytes_left == Some(config.num_skip())
        && config.num_skip() == config.head_len()
    {
        ours.pop();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn length_delimited_matches_tokio_util(
        config in config(),
        pieces in prop::collection::vec(piece(), 0..8),
        truncate in prop::option::weighted(0.4, any::<usize>()),
        sizes in segment_sizes(),
    ) {
        let bytes = stream(&config, &pieces, truncate);
        let expected = run_tokio(segments(&bytes, &sizes), config.tokio(), false, |e| tokio_io(&e));
        let mut got = run_ours(segments(&bytes, &sizes), config.ours(), false);
        // Bytes left for the header-only case: what the frames before did not consume.
        let consumed: usize = got.iter().map(|o| match o {
            Outcome::Frame(f) => f.len() + config.num_skip(),
            _ => 0,
        }).sum();
        normalize_header_only_end(&config, &mut got, bytes.len().checked_sub(consumed));
        prop_assert_eq!(&got, &expected, "config {:?}, {} bytes", config, bytes.len());
        // The same frames as chains.
        let mut chains = run_ours(segments(&bytes, &sizes), config.ours().into_chains(), false);
        normalize_header_only_end(&config, &mut chains, bytes.len().checked_sub(consumed));
        prop_assert_eq!(chains, expected, "chains, config {:?}", config);
    }

    #[test]
    fn length_delimited_encoder_matches_tokio_util(
        config in config(),
        lens in prop::collection::vec(prop_oneof![0usize..300, 1000usize..3000], 1..6),
    ) {
        let mut tokio_codec = config.tokio();
        let (writer, mut reader) = pipe_with(PipeOptions::new().pause_threshold(0));
        let mut out = FrameWriter::new(writer, config.ours());
        let mut expected = BytesMut::new();
        for (i, len) in lens.iter().enumerate() {
            let payload = vec![i as u8; *len];
            let theirs = tokio_codec.encode(bytes::Bytes::from(payload.clone()), &mut expected);
            // Alternate between the copying and the zero-copy paths.
            let ours = if i % 2 == 0 {
                out.feed(&payload[..])
            } else {
                out.feed(packetpipe::Packet::from(payload))
            };
            prop_assert_eq!(ours.is_ok(), theirs.is_ok(), "frame {} of {} bytes: {:?} vs {:?}", i, len, ours, theirs);
            if let (Err(ours), Err(theirs)) = (ours, theirs) {
                prop_assert_eq!(self::ours(&ours), tokio_io(&theirs));
            }
        }
        out.into_inner().complete();
        let got = reader.read_blocking().unwrap().buffer().to_vec();
        prop_assert_eq!(got, expected.to_vec());
    }
}

// ---------------------------------------------------------------------------------------------
// Lines and Delimited

fn text() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![
            10 => prop::sample::select(b"abcxyz ".to_vec()).prop_map(|b| vec![b]),
            3 => Just(b"\n".to_vec()),
            2 => Just(b"\r\n".to_vec()),
            1 => Just(b"\r".to_vec()),
            1 => Just("\u{e9}".as_bytes().to_vec()),
            1 => Just("\u{1f980}".as_bytes().to_vec()),
            1 => Just(vec![0xff]),
            1 => Just(b",".to_vec()),
        ],
        0..120,
    )
    .prop_map(|pieces| pieces.concat())
}

fn lines_error(e: LinesCodecError) -> Outcome {
    match e {
        LinesCodecError::MaxLineLengthExceeded => Outcome::TooLong,
        LinesCodecError::Io(e) => tokio_io(&e),
    }
}

fn any_delimiter_error(e: AnyDelimiterCodecError) -> Outcome {
    match e {
        AnyDelimiterCodecError::MaxChunkLengthExceeded => Outcome::TooLong,
        AnyDelimiterCodecError::Io(e) => tokio_io(&e),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn lines_match_tokio_util(
        text in text(),
        max in prop::option::weighted(0.6, 0usize..24),
        sizes in segment_sizes(),
    ) {
        let (codec, lines) = match max {
            Some(max) => (LinesCodec::new_with_max_length(max), Lines::with_max_length(max)),
            None => (LinesCodec::new(), Lines::new()),
        };
        let expected = run_tokio(segments(&text, &sizes), codec, true, lines_error);
        let got = run_ours(segments(&text, &sizes), lines, true);
        prop_assert_eq!(got, expected, "max {:?}", max);
    }

    #[test]
    fn delimited_matches_tokio_util_any_delimiter(
        text in text(),
        max in prop::option::weighted(0.6, 0usize..24),
        sizes in segment_sizes(),
    ) {
        let max = max.unwrap_or(usize::MAX);
        let codec = AnyDelimiterCodec::new_with_max_length(b",".to_vec(), b",".to_vec(), max);
        let expected = run_tokio(segments(&text, &sizes), codec, true, any_delimiter_error);
        let got = run_ours(segments(&text, &sizes), Delimited::new(b",", max), true);
        prop_assert_eq!(got, expected, "max {:?}", max);
    }
}

/// A multi-byte delimiter that straddles segments is found; the maximum counts the frame without
/// its delimiter, as for one byte. The reference is a plain split of the whole stream.
#[test]
fn multi_byte_delimiter_across_segments() {
    let text = b"alpha\r\n\r\nbe\r\nta\r\n\r\n\r\n\r\ngamma-is-long\r\n\r\nend".to_vec();
    for size in 1..8 {
        let got = run_ours(
            segments(&text, &[size]),
            Delimited::new(b"\r\n\r\n", 9),
            true,
        );
        assert_eq!(
            got,
            [
                Outcome::Frame(b"alpha".to_vec()),
                Outcome::Frame(b"be\r\nta".to_vec()),
                Outcome::Frame(b"".to_vec()),
                Outcome::TooLong,
                Outcome::Frame(b"end".to_vec()),
            ],
            "segments of {size} bytes"
        );
    }
}

/// The tokio-util decoders used above run on a plain buffer too (a sanity check of the harness).
#[test]
fn harness_sanity() {
    let mut codec = LinesCodec::new();
    let mut buf = BytesMut::from(&b"a\nb"[..]);
    assert_eq!(codec.decode(&mut buf).unwrap().as_deref(), Some("a"));
    let got = run_ours(segments(b"a\nb", &[1]), Lines::new(), false);
    assert_eq!(
        got,
        [Outcome::Frame(b"a".to_vec()), Outcome::Frame(b"b".to_vec())]
    );
}
