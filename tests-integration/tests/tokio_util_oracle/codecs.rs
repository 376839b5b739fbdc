//! tokio-util's `tests/codecs.rs`: `BytesCodec`, `LinesCodec` and `AnyDelimiterCodec` called
//! directly on a `BytesMut`, as `Passthrough`, `Lines` and `Delimited::any_of` through `Frames`.
//!
//! The codec-level calls map to the stream: each `put_slice` is one write and flush, a `decode`
//! that returns `None` is a poll that returns `Pending`, `decode_eof` is a poll after the writer
//! completed, a `decode` after an error is a poll after `Frames::resume`.
//!
//! Not expressible here:
//! - the steps of `lines_decoder`, `lines_decoder_invalid_utf8`, `lines_decoder_max_length`,
//!   `any_delimiters_decoder_any_character` and `any_delimiters_decoder_max_length` that put more
//!   bytes into the buffer after `decode_eof`: a pipe's end is final, nothing comes after it. Each
//!   such test is split where the bytes come after the end: the part after it runs on a new pipe
//!   fed what the codec still held (a lone `\r`, say) followed by the new bytes, which is what
//!   those steps check;
//! - `bytes_encoder`'s check that encoding grows a `BytesMut` past its inline and initial
//!   capacities: the encoder appends the payload to the pipe without copying, so there is no
//!   buffer to grow; what is checkable, the bytes out, is `bytes_encoder`.
//!
//! Differences found: `AnyDelimiterCodec`'s set of delimiters and separate sequence writer had no
//! counterpart (`Delimited` took one sequence for both), nor had `BytesCodec`; both added
//! (`Delimited::any_of`, `Passthrough`).

use packetpipe::frame::{Delimited, FrameError, FrameWriter, Lines, Passthrough};
use packetpipe::pipe::pipe;
use packetpipe::ByteSegments;

use crate::wire::{each_feed, Wire};

#[test]
fn bytes_decoder() {
    each_feed(|feed| {
        Wire::new(feed, Passthrough)
            .data(b"abc")
            .frame(&b"abc"[..])
            .pending()
            .pending()
            .data(b"a")
            .frame(&b"a"[..])
            .eof()
            .done();
    });
}

/// The bytes out of tokio-util's `bytes_encoder`: a payload past `BytesMut`'s inline capacity,
/// one past `FramedRead`'s initial capacity, then a `BytesMut`, appended without a copy.
#[test]
fn bytes_encoder() {
    let (writer, mut reader) = pipe();
    let mut out = FrameWriter::new(writer, Passthrough);
    out.feed(bytes::Bytes::from_static(&[0; 4 * 8])).unwrap();
    out.feed(bytes::Bytes::from_static(&[0; 8 * 1024 + 1]))
        .unwrap();
    out.feed(bytes::BytesMut::from(&b"hello"[..])).unwrap();
    out.into_inner().complete();
    let buffer = reader.read_blocking().unwrap().buffer;
    let mut expected = vec![0; 32 + 8 * 1024 + 1];
    expected.extend_from_slice(b"hello");
    assert_eq!(buffer.to_vec(), expected);
    assert_eq!(
        buffer.segments().count(),
        3,
        "each payload is its own segment"
    );
}

#[test]
fn lines_decoder() {
    each_feed(|feed| {
        let mut wire = Wire::new(feed, Lines::new());
        wire.data(b"line 1\nline 2\r\nline 3\n\r\n\r")
            .frame("line 1")
            .frame("line 2")
            .frame("line 3")
            .frame("")
            .pending()
            .eof()
            .done(); // a lone `\r` at the end is no line
        let mut reader = wire.frames.into_inner();
        assert_eq!(reader.read_blocking().unwrap().buffer.to_vec(), b"\r");
        // ... buf.put_slice(b"k"): after that `\r`, the last line is "\rk".
        Wire::new(feed, Lines::new())
            .data(b"\r")
            .pending()
            .data(b"k")
            .pending()
            .eof()
            .frame("\rk")
            .done();
    });
}

#[test]
fn lines_decoder_invalid_utf8() {
    each_feed(|feed| {
        let mut wire = Wire::new(feed, Lines::new());
        wire.data(b"line 1\xc3\x28").pending().eof();
        let e = wire.err();
        assert!(
            matches!(
                e,
                FrameError::InvalidUtf8 {
                    len: 8,
                    valid_up_to: 6
                }
            ),
            "{e:?}"
        );
        wire.done();
        // ... then a good line decodes.
        Wire::new(feed, Lines::new())
            .data(b"line 22222222222222\n")
            .frame("line 22222222222222");
    });
}

#[test]
fn lines_decoder_max_length() {
    const MAX_LENGTH: usize = 6;
    each_feed(|feed| {
        let mut wire = Wire::new(feed, Lines::with_max_length(MAX_LENGTH));
        wire.data(b"line 1 is too long\nline 2\nline 3\r\nline 4\n\r\n\r");
        assert!(matches!(
            wire.err(),
            FrameError::DelimiterNotFound { max: 6, .. }
        ));
        wire.resume().frame("line 2");
        // "line 3\r" is seven bytes: too long.
        assert!(matches!(wire.err(), FrameError::DelimiterNotFound { .. }));
        wire.resume()
            .frame("line 4")
            .frame("")
            .pending()
            .eof()
            .done();
        // ... put_slice(b"k") after the lone `\r`: "\rk", within the maximum.
        Wire::new(feed, Lines::with_max_length(MAX_LENGTH))
            .data(b"\r")
            .data(b"k")
            .eof()
            .frame("\rk")
            .done();
        // A line one byte too long ("aaabbbc", no newline yet) is an error at once.
        let mut wire = Wire::new(feed, Lines::with_max_length(MAX_LENGTH));
        wire.data(b"aaabbbc");
        assert!(matches!(wire.err(), FrameError::DelimiterNotFound { .. }));
    });
}

#[test]
fn lines_decoder_max_length_underrun() {
    each_feed(|feed| {
        let mut wire = Wire::new(feed, Lines::with_max_length(6));
        wire.data(b"line ").pending().data(b"too l");
        assert!(wire.err().to_string().contains("maximum frame length 6"));
        wire.resume().pending().data(b"ong\n").pending();
        wire.data(b"line 2").pending().data(b"\n").frame("line 2");
    });
}

#[test]
fn lines_decoder_max_length_bursts() {
    each_feed(|feed| {
        let mut wire = Wire::new(feed, Lines::with_max_length(10));
        wire.data(b"line ")
            .pending()
            .data(b"too l")
            .pending()
            .data(b"ong\n");
        assert!(matches!(wire.err(), FrameError::DelimiterNotFound { .. }));
    });
}

#[test]
fn lines_decoder_max_length_big_burst() {
    each_feed(|feed| {
        let mut wire = Wire::new(feed, Lines::with_max_length(10));
        wire.data(b"line ").pending().data(b"too long!\n");
        assert!(matches!(wire.err(), FrameError::DelimiterNotFound { .. }));
    });
}

#[test]
fn lines_decoder_max_length_newline_between_decodes() {
    each_feed(|feed| {
        Wire::new(feed, Lines::with_max_length(5))
            .data(b"hello")
            .pending()
            .data(b"\nworld")
            .frame("hello");
    });
}

/// tokio-rs/tokio#1483's regression test: discarding an over-long line does not loop.
#[test]
fn lines_decoder_discard_repeat() {
    each_feed(|feed| {
        let mut wire = Wire::new(feed, Lines::with_max_length(1));
        wire.data(b"aa");
        assert!(matches!(wire.err(), FrameError::DelimiterNotFound { .. }));
        wire.resume().data(b"a").pending();
    });
}

/// tokio-rs/tokio#3555's regression test: a second over-long stretch while discarding.
#[test]
fn lines_decoder_max_length_underrun_twice() {
    each_feed(|feed| {
        let mut wire = Wire::new(feed, Lines::with_max_length(11));
        wire.data(b"line ").pending().data(b"too very l");
        assert!(matches!(wire.err(), FrameError::DelimiterNotFound { .. }));
        wire.resume()
            .data(b"aaaaaaaaaaaaaaaaaaaaaaa")
            .pending()
            .data(b"ong\nshort\n")
            .frame("short");
    });
}

/// Two items sent, one flush each: the bytes after each (the encoder tests of `codecs.rs`).
fn encodes<E>(encoder: E, items: [&'static str; 2], after: [&[u8]; 2])
where
    E: packetpipe::frame::Encoder<&'static str, Error = FrameError>,
{
    let (writer, mut reader) = pipe();
    let mut out = FrameWriter::new(writer, encoder);
    for (item, expected) in items.into_iter().zip(after) {
        packetpipe::block_on(out.send(item)).unwrap();
        let buffer = reader.read_blocking().unwrap().buffer;
        assert_eq!(buffer.to_vec(), expected);
        let len = buffer.len();
        reader.advance_to(0, len).unwrap();
    }
}

#[test]
fn lines_encoder() {
    encodes(
        Lines::new(),
        ["line 1", "line 2"],
        [b"line 1\n", b"line 1\nline 2\n"],
    );
}

/// The seek set and sequence writer of tokio-util's tests.
fn any_delimiter(max_length: usize) -> Delimited {
    Delimited::any_of(b",;\n\r", b",", max_length)
}

#[test]
fn any_delimiters_decoder_any_character() {
    each_feed(|feed| {
        let mut wire = Wire::new(feed, any_delimiter(usize::MAX));
        wire.data(b"chunk 1,chunk 2;chunk 3\n\r")
            .frame(&b"chunk 1"[..])
            .frame(&b"chunk 2"[..])
            .frame(&b"chunk 3"[..])
            .frame(&b""[..])
            .pending()
            .eof()
            .done();
        // ... put_slice(b"k"): the bytes after the last delimiter are a last chunk at the end.
        Wire::new(feed, any_delimiter(usize::MAX))
            .data(b"k")
            .pending()
            .eof()
            .frame(&b"k"[..])
            .done();
    });
    // `Default` is `AnyDelimiterCodec::default()`: the same set, `,` written.
    let (mut writer, reader) = pipe();
    writer.write_slice(b"a,b;c\nd\re").unwrap();
    writer.complete();
    let chunks: Vec<_> = packetpipe::frame::Frames::new(reader, Delimited::default())
        .iter_blocking()
        .map(|c| c.unwrap().to_vec())
        .collect();
    assert_eq!(chunks, [b"a", b"b", b"c", b"d", b"e"]);
}

#[test]
fn any_delimiters_decoder_max_length() {
    const MAX_LENGTH: usize = 7;
    each_feed(|feed| {
        let mut wire = Wire::new(feed, any_delimiter(MAX_LENGTH));
        wire.data(b"chunk 1 is too long\nchunk 2\nchunk 3\r\nchunk 4\n\r\n");
        assert!(matches!(
            wire.err(),
            FrameError::DelimiterNotFound { max: 7, .. }
        ));
        wire.resume()
            .frame(&b"chunk 2"[..])
            .frame(&b"chunk 3"[..])
            .frame(&b""[..]) // "\r\n" is two delimiters: an empty chunk between them
            .frame(&b"chunk 4"[..])
            .frame(&b""[..])
            .frame(&b""[..])
            .pending()
            .eof()
            .done();
        // ... put_slice(b"k") after the end: a last chunk.
        Wire::new(feed, any_delimiter(MAX_LENGTH))
            .data(b"k")
            .pending()
            .eof()
            .frame(&b"k"[..])
            .done();
        // A chunk one byte too long ("aaabbbcc") is an error at once.
        let mut wire = Wire::new(feed, any_delimiter(MAX_LENGTH));
        wire.data(b"aaabbbcc");
        assert!(matches!(wire.err(), FrameError::DelimiterNotFound { .. }));
    });
}

#[test]
fn any_delimiter_decoder_max_length_underrun() {
    each_feed(|feed| {
        let mut wire = Wire::new(feed, any_delimiter(7));
        wire.data(b"chunk ").pending().data(b"too l");
        assert!(matches!(wire.err(), FrameError::DelimiterNotFound { .. }));
        wire.resume().data(b"ong\n").pending();
        wire.data(b"chunk 2")
            .pending()
            .data(b",")
            .frame(&b"chunk 2"[..]);
    });
}

#[test]
fn any_delimiter_decoder_max_length_underrun_twice() {
    each_feed(|feed| {
        let mut wire = Wire::new(feed, any_delimiter(11));
        wire.data(b"chunk ").pending().data(b"too very l");
        assert!(matches!(wire.err(), FrameError::DelimiterNotFound { .. }));
        wire.resume()
            .data(b"aaaaaaaaaaaaaaaaaaaaaaa")
            .pending()
            .data(b"ong\nshort\n")
            .frame(&b"short"[..]);
    });
}

#[test]
fn any_delimiter_decoder_max_length_bursts() {
    each_feed(|feed| {
        let mut wire = Wire::new(feed, any_delimiter(11));
        wire.data(b"chunk ")
            .pending()
            .data(b"too l")
            .pending()
            .data(b"ong\n");
        assert!(matches!(wire.err(), FrameError::DelimiterNotFound { .. }));
    });
}

#[test]
fn any_delimiter_decoder_max_length_big_burst() {
    each_feed(|feed| {
        let mut wire = Wire::new(feed, any_delimiter(11));
        wire.data(b"chunk ").pending().data(b"too long!\n");
        assert!(matches!(wire.err(), FrameError::DelimiterNotFound { .. }));
    });
}

#[test]
fn any_delimiter_decoder_max_length_delimiter_between_decodes() {
    each_feed(|feed| {
        Wire::new(feed, any_delimiter(5))
            .data(b"hello")
            .pending()
            .data(b",world")
            .frame(&b"hello"[..]);
    });
}

#[test]
fn any_delimiter_decoder_discard_repeat() {
    each_feed(|feed| {
        let mut wire = Wire::new(feed, any_delimiter(1));
        wire.data(b"aa");
        assert!(matches!(wire.err(), FrameError::DelimiterNotFound { .. }));
        wire.resume().data(b"a").pending();
    });
}

#[test]
fn any_delimiter_encoder() {
    encodes(
        Delimited::any_of(b",", b";--;", usize::MAX),
        ["chunk 1", "chunk 2"],
        [b"chunk 1;--;", b"chunk 1;--;chunk 2;--;"],
    );
}
