//! What a request/response protocol needs from the frame module, from outside the crate:
//! a decoder that ends the stream after a frame (`DecodeBuf::end_stream`), one contiguous slice
//! of the first bytes for a parser (`DecodeBuf::contiguous`), a `Framed` whose one codec decodes
//! and encodes (no `Clone`), and a codec error type of the user's own that `?` converts into from
//! the pipe's writer calls and from the frame module's.
//!
//! tokio-util is the oracle for the end: a stream a decoder ends after a frame yields what
//! `FramedRead` yields over the same input cut right after that frame.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use bytes::Buf;
use futures::StreamExt;
use packetpipe::frame::{
    DecodeBuf, Decoded, Decoder, Encoder, FrameError, FrameWriter, Framed, Frames, LengthDelimited,
    Line, Lines,
};
use packetpipe::pipe::PipeWriter;
use packetpipe::ByteSegments;
use packetpipe::{pipe, Packet};

/// `LengthDelimited` frames, the stream ended after the first frame that equals `last`.
struct EndAt {
    codec: LengthDelimited,
    last: &'static [u8],
}

impl Decoder for EndAt {
    type Item = Packet;
    type Error = FrameError;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Decoded<Packet>, FrameError> {
        let decoded = self.codec.decode(buf)?;
        if matches!(&decoded, Decoded::Frame(frame) if &frame[..] == self.last) {
            buf.end_stream();
        }
        Ok(decoded)
    }
}

fn length_delimited(frames: &[&[u8]]) -> Vec<u8> {
    let mut wire = Vec::new();
    for frame in frames {
        wire.extend_from_slice(&(frame.len() as u32).to_be_bytes());
        wire.extend_from_slice(frame);
    }
    wire
}

/// tokio-util's frames of `wire`, read to its end.
fn tokio_util_frames(wire: &[u8]) -> Vec<Vec<u8>> {
    let read =
        tokio_util::codec::FramedRead::new(wire, tokio_util::codec::LengthDelimitedCodec::new());
    futures::executor::block_on(read.map(|frame| frame.unwrap().to_vec()).collect())
}

#[test]
fn a_stream_ended_after_a_frame_yields_what_framed_read_yields_of_the_input_cut_there() {
    let frames: [&[u8]; 5] = [b"one", b"two", b"last", b"after", b"more"];
    for cut in [1usize, 2, 3, 7, 64] {
        let wire = length_delimited(&frames);
        let (mut writer, reader) = pipe();
        // The bytes arrive in pieces of `cut` bytes, each flushed; the writer stays open.
        for piece in wire.chunks(cut) {
            writer.write_slice(piece).unwrap();
            writer.flush_blocking().unwrap();
        }
        let mut ours = Frames::new(
            reader,
            EndAt {
                codec: LengthDelimited::new(),
                last: b"last",
            },
        );
        let got: Vec<Vec<u8>> = ours
            .iter_blocking()
            .map(|frame| frame.unwrap().to_vec())
            .collect();
        let through_last = length_delimited(&frames[..3]);
        assert_eq!(got, tokio_util_frames(&through_last), "pieces of {cut}");
        assert!(futures::stream::FusedStream::is_terminated(&ours));
        assert!(!ours.resume(), "an ended stream has nothing to resume");
        // The bytes after the last frame are still in the pipe, whole.
        let mut reader = ours.into_inner();
        let rest = reader.read_blocking().unwrap().buffer.to_vec();
        assert_eq!(rest, wire[through_last.len()..], "pieces of {cut}");
    }
}

#[test]
fn a_stream_ended_without_a_frame_yields_none_at_once() {
    /// Ends the stream on the first call, returning no frame.
    struct Nothing;
    impl Decoder for Nothing {
        type Item = Packet;
        type Error = FrameError;
        fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Decoded<Packet>, FrameError> {
            buf.end_stream();
            Ok(Decoded::NeedAtLeast(buf.len() + 1))
        }
    }
    let (mut writer, reader) = pipe();
    writer.write_slice(b"xyz").unwrap();
    writer.flush_blocking().unwrap();
    let mut frames = Frames::new(reader, Nothing);
    assert!(frames.iter_blocking().next().is_none());
    assert_eq!(
        frames.into_inner().read_blocking().unwrap().buffer.to_vec(),
        b"xyz"
    );
}

#[test]
fn end_stream_from_decode_eof_ends_the_stream_after_that_frame() {
    // The writer completes with two frames in the pipe; the first ends the stream: the second is
    // never yielded (the default `decode_eof` calls `decode`).
    let wire = length_delimited(&[b"last", b"after"]);
    let (mut writer, reader) = pipe();
    writer.write_slice(&wire).unwrap();
    writer.complete();
    let mut frames = Frames::new(
        reader,
        EndAt {
            codec: LengthDelimited::new(),
            last: b"last",
        },
    );
    let got: Vec<Packet> = frames.iter_blocking().collect::<Result<_, _>>().unwrap();
    assert_eq!(got, [&b"last"[..]]);
}

#[test]
fn forward_ends_after_the_last_frame_without_reading_again() {
    // An echo of lines that ends after "QUIT": the peer's writer stays open, and forward returns
    // with the reply flushed.
    struct UntilQuit(Lines);
    impl Decoder for UntilQuit {
        type Item = Line;
        type Error = FrameError;
        fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Decoded<Line>, FrameError> {
            let decoded = self.0.decode(buf)?;
            if matches!(&decoded, Decoded::Frame(line) if line == "QUIT") {
                buf.end_stream();
            }
            Ok(decoded)
        }
    }
    let (mut inbound, reader) = pipe();
    let (writer, mut outbound) = pipe();
    inbound.write_slice(b"hello\nQUIT\nignored\n").unwrap();
    inbound.flush_blocking().unwrap();
    let mut lines = Frames::new(reader, UntilQuit(Lines::new()));
    let mut out = FrameWriter::new(writer, Lines::new());
    let mut forward = pin!(out.forward(&mut lines));
    let mut cx = Context::from_waker(Waker::noop());
    assert!(matches!(
        forward.as_mut().poll(&mut cx),
        Poll::Ready(Ok(()))
    ));
    assert_eq!(
        outbound.read_blocking().unwrap().buffer.to_vec(),
        b"hello\nQUIT\n"
    );
    drop(inbound);
}

/// A header of a 2-byte big-endian count of lines, then that many `\n`-ended lines, parsed from
/// one slice.
struct Counted;

impl Decoder for Counted {
    type Item = usize;
    type Error = FrameError;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Decoded<usize>, FrameError> {
        let len = buf.len();
        if len < 2 {
            return Ok(Decoded::NeedAtLeast(2));
        }
        let head = buf.contiguous(len)?;
        let lines = usize::from((&head[..2]).get_u16());
        let mut end = 2;
        for _ in 0..lines {
            match head[end..].iter().position(|&b| b == b'\n') {
                Some(at) => end += at + 1,
                None => return Ok(Decoded::NeedAtLeast(len + 1)),
            }
        }
        buf.skip(end)?;
        Ok(Decoded::Frame(end))
    }
}

#[test]
fn contiguous_borrows_one_segment_and_copies_across_segments() {
    // In one segment: the slice is the segment's own bytes.
    let (mut writer, reader) = pipe();
    writer.write_slice(b"\0\x02a\nbc\n").unwrap();
    writer.flush_blocking().unwrap();
    let mut frames = Frames::new(reader, Counted);
    assert_eq!(frames.iter_blocking().next().unwrap().unwrap(), 7);

    // Across segments, one byte each: copied, the same answer.
    let (mut writer, reader) = pipe();
    for byte in b"\0\x02a\nbc\n\0\x01xyz\n" {
        writer.append(vec![*byte]).unwrap();
    }
    writer.complete();
    let got: Vec<usize> = Frames::new(reader, Counted)
        .iter_blocking()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(got, [7, 6]);
}

#[test]
fn contiguous_borrows_in_place_when_the_bytes_lie_in_one_segment() {
    /// Answers whether the slice lies inside the first segment's memory.
    struct Where;
    impl Decoder for Where {
        type Item = (bool, bool);
        type Error = FrameError;
        fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Decoded<(bool, bool)>, FrameError> {
            if buf.len() < 8 {
                return Ok(Decoded::NeedAtLeast(8));
            }
            let first = buf.buffer().segments().next().unwrap().as_ptr_range();
            let one = buf.contiguous(2)?.as_ptr();
            let in_first = first.contains(&one);
            let both = buf.contiguous(8)?.as_ptr();
            let spanning_in_first = first.contains(&both);
            buf.skip(8)?;
            Ok(Decoded::Frame((in_first, spanning_in_first)))
        }
    }
    let (mut writer, reader) = pipe();
    writer.append(Packet::from(vec![1u8; 4])).unwrap();
    writer.append(Packet::from(vec![2u8; 4])).unwrap();
    writer.complete();
    let mut frames = Frames::new(reader, Where);
    assert_eq!(
        frames.iter_blocking().next().unwrap().unwrap(),
        (true, false)
    );
}

#[test]
fn contiguous_beyond_the_view_fails_with_the_numbers() {
    struct TooFar;
    impl Decoder for TooFar {
        type Item = ();
        type Error = FrameError;
        fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Decoded<()>, FrameError> {
            let len = buf.len();
            buf.contiguous(len + 1)?;
            Ok(Decoded::Frame(()))
        }
    }
    let (mut writer, reader) = pipe();
    writer.write_slice(b"abc").unwrap();
    writer.flush_blocking().unwrap();
    let err = Frames::new(reader, TooFar)
        .iter_blocking()
        .next()
        .unwrap()
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains('4') && text.contains('3'), "{text}");
}

/// A codec error of the user's own: `?` converts both the pipe's and the frame module's errors.
#[derive(Debug)]
#[allow(dead_code)] // what each variant holds is for its `Debug`
enum AppError {
    Frame(FrameError),
    Pipe(packetpipe::Error),
}

impl From<FrameError> for AppError {
    fn from(e: FrameError) -> AppError {
        AppError::Frame(e)
    }
}

impl From<packetpipe::Error> for AppError {
    fn from(e: packetpipe::Error) -> AppError {
        AppError::Pipe(e)
    }
}

/// Counts the frames it decodes, and encodes each reply with the count so far: the encoder sees
/// what decoding saw. Not `Clone`.
struct Numbered {
    lines: Lines,
    decoded: usize,
}

impl Decoder for Numbered {
    type Item = Line;
    type Error = AppError;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Decoded<Line>, AppError> {
        let decoded = self.lines.decode(buf)?;
        if let Decoded::Frame(_) = decoded {
            self.decoded += 1;
        }
        Ok(decoded)
    }
}

impl Encoder<Line> for Numbered {
    type Error = AppError;

    fn encode(&mut self, line: Line, dst: &mut PipeWriter) -> Result<(), AppError> {
        // Writer calls (the pipe's errors) and the frame module's encoder, each with `?`.
        dst.write_slice(format!("{}: ", self.decoded).as_bytes())?;
        Encoder::<&str>::encode(&mut self.lines, &*line, dst)?;
        Ok(())
    }
}

#[cfg(feature = "tokio")]
#[test]
fn framed_encodes_with_the_codec_it_decodes_with() {
    use futures::SinkExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (client, server) = tokio::io::duplex(1024);
        let serve = tokio::spawn(async move {
            let mut framed = Framed::new(
                server,
                Numbered {
                    lines: Lines::new(),
                    decoded: 0,
                },
            );
            while let Some(line) = framed.next().await {
                framed.send(line.unwrap()).await.unwrap();
            }
            framed.close().await.unwrap();
        });
        let (mut read, mut write) = tokio::io::split(client);
        write.write_all(b"a\nb\nc\n").await.unwrap();
        write.shutdown().await.unwrap();
        let mut echo = String::new();
        read.read_to_string(&mut echo).await.unwrap();
        assert_eq!(echo, "1: a\n2: b\n3: c\n");
        serve.await.unwrap();
    });
}

#[cfg(feature = "tokio")]
#[test]
fn split_halves_close_the_connection_after_the_last_frame() {
    // The client keeps its side open: the server's forward ends after "QUIT" and closes.
    struct UntilQuit(Lines);
    impl Decoder for UntilQuit {
        type Item = Line;
        type Error = FrameError;
        fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Decoded<Line>, FrameError> {
            let decoded = self.0.decode(buf)?;
            if matches!(&decoded, Decoded::Frame(line) if line == "QUIT") {
                buf.end_stream();
            }
            Ok(decoded)
        }
    }
    impl Encoder<Line> for UntilQuit {
        type Error = FrameError;
        fn encode(&mut self, line: Line, dst: &mut PipeWriter) -> Result<(), FrameError> {
            self.0.encode(line, dst)
        }
    }
    impl Clone for UntilQuit {
        fn clone(&self) -> UntilQuit {
            UntilQuit(self.0.clone())
        }
    }
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (mut client, server) = tokio::io::duplex(1024);
        let serve = tokio::spawn(async move {
            let (mut out, mut lines) = Framed::new(server, UntilQuit(Lines::new())).split();
            out.forward(&mut lines).await.unwrap();
            out.close().await.unwrap();
        });
        client.write_all(b"hello\nQUIT\nignored\n").await.unwrap();
        let mut echo = String::new();
        // Ends: the server closed its side while ours is still open.
        client.read_to_string(&mut echo).await.unwrap();
        assert_eq!(echo, "hello\nQUIT\n");
        serve.await.unwrap();
    });
}
