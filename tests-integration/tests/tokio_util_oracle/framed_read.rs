//! tokio-util's `tests/framed_read.rs`: `FramedRead` over a mock reader, as `Frames` over a pipe.
//!
//! Not expressible here:
//! - `read_eof_then_resume`: a mock reader returns the end (0 bytes) and then more data, and
//!   `FramedRead` goes on decoding after each end. A pipe's completion is final: no byte can follow
//!   it, so there is no second end to resume from. Where one pipe per stretch of data is the
//!   nearest equivalent, each behaves as that test's stretches do (a frame, then the end):
//!   `read_eof_then_resume_per_stretch`.
//!
//! Deliberate differences, pinned by the `deviation_*` tests: after a decoder error the stream
//! yields `None` until [`Frames::resume`](packetpipe::frame::Frames::resume) (`FramedRead` goes on
//! when polled again); a resumed stream decodes the bytes already in the pipe at once (`FramedRead`
//! first waits for its next read to return).
//!
//! `multi_frames_on_eof` pins one detail: at an end that brought no new byte, `Frames` calls only
//! `decode_eof`, as `FramedRead` does, not `decode` first (that test's decoder panics in
//! `decode`).

use packetpipe::frame::{DecodeBuf, Decoded, Decoder, FrameError};

use crate::wire::{each_feed, kind, U32Decoder, U64Decoder, Wire, FEEDS};

#[test]
fn read_multi_frame_in_packet() {
    each_feed(|feed| {
        Wire::new(feed, U32Decoder::default())
            .data(b"\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x02")
            .eof()
            .frame(0)
            .frame(1)
            .frame(2)
            .done();
    });
}

#[test]
fn read_multi_frame_across_packets() {
    each_feed(|feed| {
        Wire::new(feed, U32Decoder::default())
            .data(b"\x00\x00\x00\x00")
            .data(b"\x00\x00\x00\x01")
            .data(b"\x00\x00\x00\x02")
            .eof()
            .frame(0)
            .frame(1)
            .frame(2)
            .done();
    });
}

#[test]
fn read_multi_frame_in_packet_after_codec_changed() {
    each_feed(|feed| {
        let mut wire = Wire::new(feed, U32Decoder::default());
        wire.data(b"\x00\x00\x00\x04\x00\x00\x00\x00\x00\x00\x00\x08")
            .eof()
            .frame(0x04);
        wire.map_decoder(|_| U64Decoder::default())
            .frame(0x08)
            .done();
    });
}

#[test]
fn read_not_ready() {
    each_feed(|feed| {
        Wire::new(feed, U32Decoder::default())
            .pending()
            .data(b"\x00\x00\x00\x00")
            .data(b"\x00\x00\x00\x01")
            .eof()
            .frame(0)
            .frame(1)
            .done();
    });
}

#[test]
fn read_partial_then_not_ready() {
    each_feed(|feed| {
        Wire::new(feed, U32Decoder::default())
            .data(b"\x00\x00")
            .pending()
            .data(b"\x00\x00\x00\x00\x00\x01\x00\x00\x00\x02")
            .eof()
            .frame(0)
            .frame(1)
            .frame(2)
            .done();
    });
}

#[test]
fn read_err() {
    each_feed(|feed| {
        let e = Wire::new(feed, U32Decoder::default())
            .fail(std::io::Error::other(""))
            .err();
        assert_eq!(kind(e), std::io::ErrorKind::Other);
    });
}

#[test]
fn read_partial_then_err() {
    each_feed(|feed| {
        let e = Wire::new(feed, U32Decoder::default())
            .data(b"\x00\x00")
            .fail(std::io::Error::other(""))
            .err();
        assert!(
            matches!(e, FrameError::Pipe(_)),
            "the reader's error, not bytes remaining: {e:?}"
        );
        assert_eq!(kind(e), std::io::ErrorKind::Other);
    });
}

#[test]
fn read_partial_would_block_then_err() {
    each_feed(|feed| {
        let mut wire = Wire::new(feed, U32Decoder::default());
        wire.data(b"\x00\x00")
            .pending()
            .fail(std::io::Error::other(""));
        assert_eq!(kind(wire.err()), std::io::ErrorKind::Other);
    });
}

#[test]
fn huge_size() {
    /// A frame of 32 KiB.
    struct BigDecoder;

    impl Decoder for BigDecoder {
        type Item = u32;
        type Error = FrameError;

        fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Decoded<u32>, FrameError> {
            if buf.len() < 32 * 1024 {
                return Ok(Decoded::NeedAtLeast(32 * 1024));
            }
            buf.skip(32 * 1024)?;
            Ok(Decoded::Frame(0))
        }
    }

    each_feed(|feed| {
        Wire::new(feed, BigDecoder)
            .data(&[0; 32 * 1024])
            .eof()
            .frame(0)
            .done();
    });
}

#[test]
fn data_remaining_is_error() {
    each_feed(|feed| {
        let mut wire = Wire::new(feed, U32Decoder::default());
        wire.data(&[0; 5]).eof().frame(0);
        assert!(matches!(wire.err(), FrameError::BytesRemaining { len: 1 }));
    });
}

/// At an end that brings no byte, `decode_eof` is called, and `decode` is not.
#[test]
fn multi_frames_on_eof() {
    struct MyDecoder(Vec<u32>);

    impl Decoder for MyDecoder {
        type Item = u32;
        type Error = FrameError;

        fn decode(&mut self, _buf: &mut DecodeBuf<'_>) -> Result<Decoded<u32>, FrameError> {
            unreachable!();
        }

        fn decode_eof(&mut self, _buf: &mut DecodeBuf<'_>) -> Result<Option<u32>, FrameError> {
            if self.0.is_empty() {
                return Ok(None);
            }
            Ok(Some(self.0.remove(0)))
        }
    }

    each_feed(|feed| {
        Wire::new(feed, MyDecoder(vec![0, 1, 2, 3]))
            .eof()
            .frame(0)
            .frame(1)
            .frame(2)
            .frame(3)
            .done();
    });
}

/// The order of `decode` and `decode_eof` at the end, call by call, against `FramedRead` with the
/// same decoder: bytes that arrive with the end are decoded first; an end that brings nothing new
/// goes to `decode_eof` without another `decode`.
#[test]
fn decode_and_decode_eof_are_called_in_framed_reads_order() {
    use std::cell::RefCell;
    use std::rc::Rc;

    /// Needs 4 bytes a frame; logs each call with the bytes it saw.
    struct Logged(Rc<RefCell<Vec<String>>>);

    impl Decoder for Logged {
        type Item = u32;
        type Error = FrameError;

        fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Decoded<u32>, FrameError> {
            self.0.borrow_mut().push(format!("decode {}", buf.len()));
            if buf.len() < 4 {
                return Ok(Decoded::NeedAtLeast(4));
            }
            buf.skip(4)?;
            Ok(Decoded::Frame(4))
        }

        fn decode_eof(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<u32>, FrameError> {
            self.0
                .borrow_mut()
                .push(format!("decode_eof {}", buf.len()));
            let n = buf.len() as u32;
            buf.skip(buf.len())?;
            Ok((n > 0).then_some(n))
        }
    }

    impl tokio_util::codec::Decoder for Logged {
        type Item = u32;
        type Error = std::io::Error;

        fn decode(&mut self, buf: &mut bytes::BytesMut) -> std::io::Result<Option<u32>> {
            self.0.borrow_mut().push(format!("decode {}", buf.len()));
            if buf.len() < 4 {
                return Ok(None);
            }
            bytes::Buf::advance(buf, 4);
            Ok(Some(4))
        }

        fn decode_eof(&mut self, buf: &mut bytes::BytesMut) -> std::io::Result<Option<u32>> {
            self.0
                .borrow_mut()
                .push(format!("decode_eof {}", buf.len()));
            let n = buf.len() as u32;
            bytes::Buf::advance(buf, buf.len());
            Ok((n > 0).then_some(n))
        }
    }

    // Chunks, each followed by a poll that waits (`None`) or not; then the end.
    let cases: [&[(&[u8], bool)]; 4] = [
        &[],
        &[(b"abcdef", true)],
        &[(b"ab", true), (b"cdefgh", true)],
        &[(b"abcd", true), (b"ef", false)],
    ];
    for chunks in cases {
        for feed in FEEDS {
            let log = Rc::new(RefCell::new(Vec::new()));
            let mut wire = Wire::new(feed, Logged(log.clone()));
            let mut ours = Vec::new();
            for (chunk, wait) in chunks {
                wire.data(chunk);
                if *wait {
                    while let std::task::Poll::Ready(item) = wire.poll() {
                        ours.push(item.unwrap().unwrap());
                    }
                }
            }
            wire.eof();
            while let std::task::Poll::Ready(Some(item)) = wire.poll() {
                ours.push(item.unwrap());
            }

            let theirs_log = Rc::new(RefCell::new(Vec::new()));
            let mut reads: std::collections::VecDeque<Vec<u8>> = std::collections::VecDeque::new();
            let mut joined = Vec::new();
            for (chunk, wait) in chunks {
                joined.extend_from_slice(chunk);
                if *wait {
                    reads.push_back(std::mem::take(&mut joined));
                }
            }
            if !joined.is_empty() {
                reads.push_back(joined);
            }
            let reader = Script { reads };
            let mut framed = tokio_util::codec::FramedRead::new(reader, Logged(theirs_log.clone()));
            let theirs: Vec<u32> =
                futures::executor::block_on(futures::StreamExt::collect::<Vec<_>>(&mut framed))
                    .into_iter()
                    .map(Result::unwrap)
                    .collect();
            assert_eq!(ours, theirs, "{chunks:?}");
            assert_eq!(*log.borrow(), *theirs_log.borrow(), "{chunks:?} ({feed:?})");
        }
    }

    /// Hands out one prepared read at a time (a chunk, or what several chunks fed without a wait
    /// between them made), then the end.
    struct Script {
        reads: std::collections::VecDeque<Vec<u8>>,
    }

    impl tokio::io::AsyncRead for Script {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            if let Some(read) = self.reads.pop_front() {
                buf.put_slice(&read);
            }
            std::task::Poll::Ready(Ok(()))
        }
    }
}

/// `read_eof_then_resume` as far as a pipe goes (see the module's header): each stretch of data
/// before an end is a frame and then the end.
#[test]
fn read_eof_then_resume_per_stretch() {
    each_feed(|feed| {
        for (bytes, n) in [
            (b"\x00\x00\x00\x01", 1),
            (b"\x00\x00\x00\x02", 2),
            (b"\x00\x00\x00\x03", 3),
        ] {
            Wire::new(feed, U32Decoder::default())
                .data(bytes)
                .eof()
                .frame(n)
                .done()
                .done();
        }
    });
}

/// A tokio-util `AsyncRead` that returns its chunks, then `Pending` for ever.
struct ThenPending(std::collections::VecDeque<Vec<u8>>);

impl tokio::io::AsyncRead for ThenPending {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.0.pop_front() {
            Some(chunk) => {
                buf.put_slice(&chunk);
                std::task::Poll::Ready(Ok(()))
            }
            None => std::task::Poll::Pending,
        }
    }
}

/// One poll of a `FramedRead` with a waker that does nothing.
fn poll_framed<T: tokio::io::AsyncRead + Unpin, D: tokio_util::codec::Decoder>(
    framed: &mut tokio_util::codec::FramedRead<T, D>,
) -> std::task::Poll<Option<Result<D::Item, D::Error>>> {
    let mut cx = std::task::Context::from_waker(futures::task::noop_waker_ref());
    futures::StreamExt::poll_next_unpin(framed, &mut cx)
}

/// After a decoder error: `None` until `resume`, where `FramedRead` goes on when polled again.
#[test]
fn deviation_a_stream_ends_after_a_decoder_error_until_resumed() {
    use packetpipe::frame::Lines;
    each_feed(|feed| {
        let mut wire = Wire::new(feed, Lines::with_max_length(3));
        wire.data(b"toolong\nok\n");
        assert!(matches!(wire.err(), FrameError::DelimiterNotFound { .. }));
        wire.done().done(); // ended (a `FusedStream`), however often polled
        assert!(futures::stream::FusedStream::is_terminated(&wire.frames));
        assert!(wire.frames.resume());
        wire.frame("ok");
    });
    framed_read_errs_ends_then_waits_for_a_read();
}

/// A resumed stream decodes what is already in the pipe at once; `FramedRead` waits for its next
/// read first, so a complete frame already received waits for the peer's next bytes.
#[test]
fn deviation_a_resumed_stream_decodes_the_bytes_already_there() {
    use packetpipe::frame::Lines;
    each_feed(|feed| {
        let mut wire = Wire::new(feed, Lines::with_max_length(3));
        wire.data(b"toolong\nok\n");
        assert!(matches!(wire.err(), FrameError::DelimiterNotFound { .. }));
        wire.resume().frame("ok").pending();
    });
    framed_read_errs_ends_then_waits_for_a_read();
}

/// What `FramedRead` with `LinesCodec::new_with_max_length(3)` does with `toolong\nok\n` and
/// then nothing: the error, a bare `None`, then, polled again, a read (which waits) before it
/// decodes on; so `ok`, already received, waits for the peer's next bytes.
fn framed_read_errs_ends_then_waits_for_a_read() {
    let reader = ThenPending([b"toolong\nok\n".to_vec()].into());
    let mut framed = tokio_util::codec::FramedRead::new(
        reader,
        tokio_util::codec::LinesCodec::new_with_max_length(3),
    );
    assert!(matches!(
        poll_framed(&mut framed),
        std::task::Poll::Ready(Some(Err(_)))
    ));
    assert!(matches!(
        poll_framed(&mut framed),
        std::task::Poll::Ready(None)
    ));
    assert!(poll_framed(&mut framed).is_pending());
}
