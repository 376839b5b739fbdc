//! Differential tests of the frame module against tokio-util 0.7: the same byte
//! stream, cut at random segment boundaries (1 byte to 64 KiB), through `Frames<LengthDelimited>`
//! and `FramedRead<_, LengthDelimitedCodec>` with random builder settings, `Frames<Lines>` and
//! `FramedRead<_, LinesCodec>`, `Frames<Delimited>` (one delimiter, and `any_of` a set of them with
//! a sequence writer) and `FramedRead<_, AnyDelimiterCodec>`, `Frames<Passthrough>` and
//! `FramedRead<_, BytesCodec>`: the same frames, and the same errors (class and `io::ErrorKind`) at
//! the same point. The encoders are compared too: the same bytes out, or the same error.
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

#[path = "../../fuzz/src/frame_decoders.rs"]
mod frame_decoders;

use bytes::BytesMut;
use frame_decoders::*;
use packetpipe::frame::{Delimited, FrameWriter, Lines};
use packetpipe::pipe::{pipe_with, PipeOptions};
use packetpipe::ByteSegments;
use proptest::prelude::*;
use tokio_util::codec::{Decoder as _, Encoder as _, LinesCodec};

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
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
        check_length_delimited(&config, &bytes, &sizes);
    }

    #[test]
    fn length_delimited_encoder_matches_tokio_util(
        config in config(),
        lens in prop::collection::vec(prop_oneof![0usize..300, 1000usize..3000], 1..6),
    ) {
        let mut tokio_codec = config.tokio();
        let (writer, mut reader) = pipe_with(PipeOptions { pause_threshold: 0, ..Default::default() });
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
                prop_assert_eq!(self::ours(ours), tokio_io(&theirs));
            }
        }
        out.into_inner().complete();
        let got = reader.read_blocking().unwrap().buffer.to_vec();
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
            1 => Just(b";".to_vec()),
        ],
        0..120,
    )
    .prop_map(|pieces| pieces.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn lines_match_tokio_util(
        text in text(),
        max in prop::option::weighted(0.6, 0usize..24),
        sizes in segment_sizes(),
    ) {
        check_lines(&text, max, &sizes);
    }

    #[test]
    fn delimited_matches_tokio_util_any_delimiter(
        text in text(),
        max in prop::option::weighted(0.6, 0usize..24),
        sizes in segment_sizes(),
    ) {
        check_delimited(&text, max, &sizes);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn delimited_any_of_matches_tokio_util_any_delimiter(
        text in text(),
        seek in 0..SEEK_SETS.len(),
        writer in 0..SEQUENCE_WRITERS.len(),
        max in prop::option::weighted(0.6, 0usize..24),
        sizes in segment_sizes(),
    ) {
        check_delimited_any(&text, SEEK_SETS[seek], SEQUENCE_WRITERS[writer], max, &sizes);
    }

    #[test]
    fn passthrough_matches_tokio_util_bytes_codec(
        bytes in prop::collection::vec(any::<u8>(), 0..1500),
        sizes in segment_sizes(),
    ) {
        check_passthrough(&bytes, &sizes);
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
