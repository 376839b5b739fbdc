//! The harness: a pipe fed chunk by chunk as a tokio-util mock reader hands them out, a `Frames`
//! polled by hand, and (feature `tokio`) a mock writer in tokio-util's style behind a drain pump.
#![allow(dead_code)] // each module uses part of it

use std::fmt::Debug;
use std::task::{Context, Poll};

use futures::StreamExt;
use packetpipe::frame::{DecodeBuf, Decoded, Decoder, FrameError, Frames};
use packetpipe::pipe::{pipe, PipeWriter};

/// How a mock's chunk goes into the pipe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feed {
    /// `write_slice` + flush: consecutive chunks may share a segment.
    Write,
    /// `append` + flush: one segment per chunk.
    Append,
}

/// Both ways of feeding: every read test runs with each.
pub const FEEDS: [Feed; 2] = [Feed::Write, Feed::Append];

/// Run `test` with each way of feeding.
pub fn each_feed(test: impl Fn(Feed)) {
    for feed in FEEDS {
        test(feed);
    }
}

/// The common shape of a read test: `chunks` fed one by one, the end, then exactly `frames`.
pub fn reads<D: Decoder<Item = packetpipe::Packet>>(
    decoder: impl Fn() -> D,
    chunks: &[&[u8]],
    frames: &[&[u8]],
) where
    D::Error: Debug,
{
    each_feed(|feed| {
        let mut wire = Wire::new(feed, decoder());
        for chunk in chunks {
            wire.data(chunk);
        }
        wire.eof();
        for frame in frames {
            wire.frame(*frame);
        }
        wire.done();
    });
}

/// A pipe whose writer plays a tokio-util mock reader, and the `Frames` over its reader.
pub struct Wire<D> {
    feed: Feed,
    writer: Option<PipeWriter>,
    pub frames: Frames<D>,
}

impl<D: Decoder> Wire<D>
where
    D::Item: Debug,
    D::Error: Debug,
{
    pub fn new(feed: Feed, decoder: D) -> Wire<D> {
        let (writer, reader) = pipe();
        Wire {
            feed,
            writer: Some(writer),
            frames: Frames::new(reader, decoder),
        }
    }

    /// Go on with another decoder ([`Frames::map_decoder`]), the pipe's writer kept.
    pub fn map_decoder<C: Decoder>(self, map: impl FnOnce(D) -> C) -> Wire<C> {
        Wire {
            feed: self.feed,
            writer: self.writer,
            frames: self.frames.map_decoder(map),
        }
    }

    /// A mock's `Ok(chunk)`: one write and one flush.
    pub fn data(&mut self, chunk: &[u8]) -> &mut Self {
        let writer = self.writer.as_mut().expect("data after the end");
        match self.feed {
            Feed::Write => writer.write_slice(chunk).unwrap(),
            Feed::Append => writer.append(chunk.to_vec()).unwrap(),
        }
        writer.flush_blocking().unwrap();
        self
    }

    /// The end of a mock's calls (a read of 0 bytes): the writer completes.
    pub fn eof(&mut self) -> &mut Self {
        self.writer.take().expect("one end").complete();
        self
    }

    /// A mock's `Err(e)`: the writer completes with `e`.
    pub fn fail(&mut self, error: std::io::Error) -> &mut Self {
        self.writer
            .take()
            .expect("one end")
            .complete_with_error(error);
        self
    }

    /// One poll of the stream, with a waker that does nothing (tokio-test's `task::spawn`).
    pub fn poll(&mut self) -> Poll<Option<Result<D::Item, D::Error>>> {
        let mut cx = Context::from_waker(futures::task::noop_waker_ref());
        self.frames.poll_next_unpin(&mut cx)
    }

    /// tokio-util's `assert_next_eq!` / `assert_read!`: a frame, equal to `expected`.
    #[track_caller]
    pub fn frame<T>(&mut self, expected: T) -> &mut Self
    where
        D::Item: PartialEq<T>,
        T: Debug,
    {
        match self.poll() {
            Poll::Ready(Some(Ok(frame))) => {
                assert_eq!(frame, expected, "feed {:?}", self.feed)
            }
            other => panic!(
                "expected the frame {expected:?}, got {other:?} (feed {:?})",
                self.feed
            ),
        }
        self
    }

    /// tokio-util's `assert_next_pending!`.
    #[track_caller]
    pub fn pending(&mut self) -> &mut Self {
        match self.poll() {
            Poll::Pending => {}
            other => panic!("expected Pending, got {other:?} (feed {:?})", self.feed),
        }
        self
    }

    /// tokio-util's `assert_next_err!`: an error, returned for the caller to look at.
    #[track_caller]
    pub fn err(&mut self) -> D::Error {
        match self.poll() {
            Poll::Ready(Some(Err(e))) => e,
            other => panic!("expected an error, got {other:?} (feed {:?})", self.feed),
        }
    }

    /// tokio-util's `assert_done!`: the end of the stream.
    #[track_caller]
    pub fn done(&mut self) -> &mut Self {
        match self.poll() {
            Poll::Ready(None) => {}
            other => panic!("expected the end, got {other:?} (feed {:?})", self.feed),
        }
        self
    }

    /// After a decoder error: the stream's `None`, then [`Frames::resume`] (what a codec-level
    /// test's next `decode` on the same buffer, or `FramedRead` polled on, does).
    #[track_caller]
    pub fn resume(&mut self) -> &mut Self {
        self.done();
        assert!(
            self.frames.resume(),
            "there was a decoder error to resume from"
        );
        self
    }
}

/// The io kind a frame error converts to.
pub fn kind(error: FrameError) -> std::io::ErrorKind {
    std::io::Error::from(error).kind()
}

/// tokio-util's tests' `U32Decoder` (`framed_read.rs`), and `U32Codec` (`framed.rs`): a big-endian
/// `u32` per 4 bytes; counts the bytes it decoded and how often it was asked.
#[derive(Debug, Default)]
pub struct U32Decoder {
    pub read_bytes: usize,
    pub decode_count: usize,
}

impl Decoder for U32Decoder {
    type Item = u32;
    type Error = FrameError;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Decoded<u32>, FrameError> {
        self.decode_count += 1;
        if buf.len() < 4 {
            return Ok(Decoded::NeedAtLeast(4));
        }
        let n = bytes::Buf::get_u32(&mut buf.buffer().cursor());
        buf.skip(4)?;
        self.read_bytes += 4;
        Ok(Decoded::Frame(n))
    }
}

/// tokio-util's tests' `U64Decoder` / `U64Codec`.
#[derive(Debug, Default)]
pub struct U64Decoder {
    pub read_bytes: usize,
}

impl Decoder for U64Decoder {
    type Item = u64;
    type Error = FrameError;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Decoded<u64>, FrameError> {
        if buf.len() < 8 {
            return Ok(Decoded::NeedAtLeast(8));
        }
        let n = bytes::Buf::get_u64(&mut buf.buffer().cursor());
        buf.skip(8)?;
        self.read_bytes += 8;
        Ok(Decoded::Frame(n))
    }
}

/// A tokio-util mock writer (`length_delimited.rs`, `framed_write.rs`): each call is the
/// expected next operation, `data(bytes)` (a write must start with these bytes; it takes exactly
/// them), `flush()`, or `Pending`. With its calls used up, a write takes 0 bytes and a flush
/// succeeds, as there.
#[cfg(feature = "tokio")]
pub mod mock {
    use std::collections::VecDeque;
    use std::io;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    pub enum Op {
        Data(Vec<u8>),
        Flush,
    }

    pub struct Mock {
        pub calls: VecDeque<Poll<io::Result<Op>>>,
    }

    pub fn data(bytes: &[u8]) -> Poll<io::Result<Op>> {
        Poll::Ready(Ok(Op::Data(bytes.to_vec())))
    }

    pub fn flush() -> Poll<io::Result<Op>> {
        Poll::Ready(Ok(Op::Flush))
    }

    pub fn mock(calls: impl IntoIterator<Item = Poll<io::Result<Op>>>) -> Mock {
        Mock {
            calls: calls.into_iter().collect(),
        }
    }

    impl tokio::io::AsyncWrite for Mock {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            src: &[u8],
        ) -> Poll<io::Result<usize>> {
            match self.calls.pop_front() {
                Some(Poll::Ready(Ok(Op::Data(data)))) => {
                    let len = data.len();
                    assert!(src.len() >= len, "expect={data:?}; actual={src:?}");
                    assert_eq!(&data[..], &src[..len]);
                    Poll::Ready(Ok(len))
                }
                Some(Poll::Ready(Ok(Op::Flush))) => panic!("a write where a flush was expected"),
                Some(Poll::Ready(Err(e))) => Poll::Ready(Err(e)),
                Some(Poll::Pending) => Poll::Pending,
                None => Poll::Ready(Ok(0)),
            }
        }

        fn poll_flush(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            match self.calls.pop_front() {
                Some(Poll::Ready(Ok(Op::Flush))) => Poll::Ready(Ok(())),
                Some(Poll::Ready(Ok(Op::Data(data)))) => {
                    panic!("a flush where a write of {data:?} was expected")
                }
                Some(Poll::Ready(Err(e))) => Poll::Ready(Err(e)),
                Some(Poll::Pending) => Poll::Pending,
                None => Poll::Ready(Ok(())),
            }
        }

        fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// Empty `reader` into `sink` as a socket writer does (tokio-util's `FramedWrite`, or the
    /// pumped connection's drain): write the first unconsumed segment, consume what the sink
    /// took, repeat; flush the sink before waiting on the pipe and at the end. Returns the bytes
    /// written. A sink that takes 0 bytes completes the reader with `WriteZero` (the writer's
    /// next flush sees it) and returns that error.
    pub fn drain<'a>(
        reader: &'a mut packetpipe::PipeReader,
        sink: &'a mut Mock,
    ) -> impl std::future::Future<Output = io::Result<u64>> + 'a {
        use tokio::io::{AsyncBufRead, AsyncWrite};
        let (mut total, mut unflushed) = (0u64, false);
        std::future::poll_fn(move |cx| loop {
            let buf = match Pin::new(&mut *reader).poll_fill_buf(cx) {
                Poll::Pending => {
                    if unflushed {
                        std::task::ready!(Pin::new(&mut *sink).poll_flush(cx))?;
                        unflushed = false;
                    }
                    return Poll::Pending;
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(buf)) => buf,
            };
            if buf.is_empty() {
                std::task::ready!(Pin::new(&mut *sink).poll_flush(cx))?;
                return Poll::Ready(Ok(total));
            }
            let n = std::task::ready!(Pin::new(&mut *sink).poll_write(cx, buf))?;
            if n == 0 {
                let e = || io::Error::new(io::ErrorKind::WriteZero, "the sink accepted 0 bytes");
                reader.complete_with_error(e());
                return Poll::Ready(Err(e()));
            }
            Pin::new(&mut *reader).consume(n);
            total += n as u64;
            unflushed = true;
        })
    }
}
