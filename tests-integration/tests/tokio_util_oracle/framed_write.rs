//! tokio-util's `tests/framed_write.rs`: `FramedWrite` into a mock writer, as a `FrameWriter`
//! into a pipe drained (by `wire::mock::drain`) into the same mock.
//!
//! `FramedWrite`'s `Sink::poll_ready` flushes its buffer once it holds the backpressure boundary
//! (`set_backpressure_boundary`); a `FrameWriter` stages with `feed` and never waits there: a
//! batch of items (`forward`) is flushed whenever the batch size
//! (`FrameWriter::set_batch_bytes`) is staged, and that flush waits while the pipe's reader lags
//! by the pause threshold. So `write_hits_backpressure` is said with `forward`, a batch size and
//! a pause threshold of the boundary's 16 KiB, and the pipe's reader as the blocking writer.
//!
//! Every test of the file is mirrored. The difference in how a batch is bounded is deliberate
//! (`FrameWriter`'s rustdoc says why) and pinned by `deviation_feed_never_flushes_or_waits`.

use packetpipe::ByteSegments;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll};

use bytes::BufMut;
use packetpipe::frame::{Encoder, FrameError, FrameWriter};
use packetpipe::pipe::{pipe, pipe_with, PipeOptions, PipeWriter};

use crate::wire::mock::{data, mock};

fn poll<F: Future>(future: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    future.poll(&mut Context::from_waker(futures::task::noop_waker_ref()))
}

struct U32Encoder;

impl Encoder<u32> for U32Encoder {
    type Error = FrameError;

    fn encode(&mut self, item: u32, dst: &mut PipeWriter) -> Result<(), FrameError> {
        dst.put_u32(item);
        Ok(())
    }
}

struct U64Encoder;

impl Encoder<u64> for U64Encoder {
    type Error = FrameError;

    fn encode(&mut self, item: u64, dst: &mut PipeWriter) -> Result<(), FrameError> {
        dst.put_u64(item);
        Ok(())
    }
}

#[test]
fn write_multi_frame_in_packet() {
    let (writer, mut reader) = pipe();
    let mut out = FrameWriter::new(writer, U32Encoder);
    for i in 0..3 {
        out.feed(i).unwrap();
    }
    // Nothing written yet.
    assert!(reader.try_read().unwrap().is_none());
    packetpipe::block_on(out.flush()).unwrap();
    out.into_inner().complete();
    // One write takes all three frames (then the drain's flush, which the mock lets pass).
    let mut mock = mock([data(b"\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x02")]);
    assert!(matches!(
        poll(pin!(crate::wire::mock::drain(&mut reader, &mut mock))),
        Poll::Ready(Ok(12))
    ));
    assert!(mock.calls.is_empty());
}

#[test]
fn write_multi_frame_after_codec_changed() {
    let (writer, mut reader) = pipe();
    let mut out = FrameWriter::new(writer, U32Encoder);
    out.feed(0x04).unwrap();
    let mut out = out.map_encoder(|_| U64Encoder);
    out.feed(0x08).unwrap();
    assert!(reader.try_read().unwrap().is_none());
    packetpipe::block_on(out.flush()).unwrap();
    out.into_inner().complete();
    let mut mock = mock([data(b"\x00\x00\x00\x04\x00\x00\x00\x00\x00\x00\x00\x08")]);
    assert!(matches!(
        poll(pin!(crate::wire::mock::drain(&mut reader, &mut mock))),
        Poll::Ready(Ok(12))
    ));
    assert!(mock.calls.is_empty());
}

#[test]
fn write_hits_backpressure() {
    const ITER: usize = 2 * 1024;
    const BOUNDARY: usize = ITER * 8; // 16 KiB: 4096 items

    let (writer, mut reader) = pipe_with(PipeOptions {
        pause_threshold: BOUNDARY,
        resume_threshold: BOUNDARY / 2,
        ..Default::default()
    });
    let mut out = FrameWriter::new(writer, U32Encoder);
    out.set_batch_bytes(BOUNDARY);
    {
        let items = futures::stream::iter((0..=(ITER * 2) as u32).map(Ok::<_, FrameError>));
        let mut send = pin!(out.forward(items));
        // The first 16 KiB fill the batch; its flush waits: the reader has not examined them.
        assert!(poll(send.as_mut()).is_pending());
        let read = reader.try_read().unwrap().expect("the batch was published");
        let buffer = read.buffer;
        assert_eq!(buffer.len(), BOUNDARY);
        let mut cursor = buffer.cursor();
        for i in 0..(ITER * 2) as u32 {
            assert_eq!(bytes::Buf::get_u32(&mut cursor), i);
        }
        reader.advance_to(BOUNDARY, BOUNDARY).unwrap();
        // The reader took them: the flush completes, the last item follows with its own flush.
        assert!(matches!(poll(send.as_mut()), Poll::Ready(Ok(_))));
    }
    let read = reader.try_read().unwrap().expect("the last item");
    assert_eq!(read.buffer.to_vec(), ((ITER * 2) as u32).to_be_bytes());
}

/// `feed` stages and returns, however much is staged: no flush, no wait at a boundary (where
/// `FramedWrite::poll_ready` would flush at 8 KiB); the reader sees nothing until a flush.
#[test]
fn deviation_feed_never_flushes_or_waits() {
    let (writer, mut reader) = pipe_with(PipeOptions {
        pause_threshold: 16 * 1024,
        ..Default::default()
    });
    let mut out = FrameWriter::new(writer, U32Encoder);
    for i in 0..16 * 1024u32 {
        out.feed(i).unwrap(); // 64 KiB staged, four times the pause threshold
    }
    assert_eq!(out.get_ref().unflushed_len(), 64 * 1024);
    assert!(reader.try_read().unwrap().is_none(), "nothing published");
    // The flush publishes it all; it would now wait for the reader (the pause threshold).
    let mut cx = Context::from_waker(futures::task::noop_waker_ref());
    assert!(out.get_mut().poll_flush_pipe(&mut cx).is_pending());
    assert_eq!(reader.try_read().unwrap().unwrap().buffer.len(), 64 * 1024);
}
