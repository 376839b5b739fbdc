//! The frame module allocates nothing per frame in steady state: decoding with
//! `Frames<LengthDelimited>` / `Frames<Lines>` and encoding with `FrameWriter<LengthDelimited>`, at
//! 64 B and 4 KiB (copied and shared frames, copied and appended payloads), async and blocking.
//!
//! Counted with a counting global allocator, per thread (a `const` thread-local `Cell`, which never
//! allocates itself), as in `tests/pipe_alloc.rs`. Each measurement runs the loop unmeasured first
//! (warm-up: pool thread caches, recycled segment nodes, the blocking forms' thread waker), then
//! counts a batch of frames and asserts exactly zero.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use futures::StreamExt;
use packetpipe::frame::{FrameWriter, Frames, LengthDelimited, Lines};
use packetpipe::pipe::{pipe_with, PipeOptions, PipeReader};
use packetpipe::{Packet, Pool};

mod kit;

use kit::counting_alloc;
use kit::pipes::unpaused_pipe as test_pipe;
use kit::wake::NoopWake;

#[global_allocator]
static GLOBAL: counting_alloc::CountingAlloc = counting_alloc::CountingAlloc;

const WARM_UP: usize = 256;
const FRAMES: usize = 2000;
const SIZES: [usize; 2] = [64, 4096];

/// Allocations made by this thread in `FRAMES` runs of `frame`, after `WARM_UP` unmeasured runs.
fn allocations_per_batch(frame: impl FnMut()) -> u64 {
    counting_alloc::allocations_per_batch(WARM_UP, FRAMES, frame)
}

/// Poll a future that must be ready at once.
fn ready<F: Future>(future: F, cx: &mut Context<'_>) -> F::Output {
    match pin!(future).poll(cx) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("expected to be ready at once"),
    }
}

/// A frame's wire bytes: a 4-byte big-endian length, then `size` bytes.
fn wire(pool: &Pool, size: usize) -> Packet {
    let mut bytes = (size as u32).to_be_bytes().to_vec();
    bytes.resize(4 + size, 0x42);
    pool.copy_from_slice(&bytes).unwrap()
}

#[test]
fn decoding_length_delimited_frames_allocates_nothing_per_frame() {
    let waker = Waker::from(Arc::new(NoopWake));
    let mut cx = Context::from_waker(&waker);
    let pool = Pool::new();
    for size in SIZES {
        let (mut writer, reader) = test_pipe(&pool);
        let mut frames = Frames::new(reader, LengthDelimited::new());
        let frame = wire(&pool, size);

        // Async: one frame per flush; a poll that finds the next frame absent registers and waits.
        let n = allocations_per_batch(|| {
            writer.append(frame.clone()).unwrap();
            ready(writer.flush_pipe(), &mut cx).unwrap();
            let got = ready(frames.next(), &mut cx).unwrap().unwrap();
            assert_eq!(got.len(), size);
            assert!(frames.poll_next_unpin(&mut cx).is_pending());
        });
        assert_eq!(
            n, 0,
            "Frames<LengthDelimited> async, {size} B: {n} allocations in {FRAMES} frames"
        );

        // Blocking, several frames per read, header and payload split across segments.
        let (head, body) = (frame.slice(..2), frame.slice(2..));
        let n = allocations_per_batch(|| {
            for _ in 0..4 {
                writer.append(head.clone()).unwrap();
                writer.append(body.clone()).unwrap();
            }
            writer.flush_blocking().unwrap();
            for _ in 0..4 {
                assert_eq!(frames.iter_blocking().next().unwrap().unwrap().len(), size);
            }
        });
        assert_eq!(
            n, 0,
            "Frames<LengthDelimited> blocking, {size} B: {n} allocations in {FRAMES} x 4 frames"
        );
    }
}

#[test]
fn decoding_lines_allocates_nothing_per_line() {
    let waker = Waker::from(Arc::new(NoopWake));
    let mut cx = Context::from_waker(&waker);
    let pool = Pool::new();
    for size in SIZES {
        let (mut writer, reader) = test_pipe(&pool);
        let mut lines = Frames::new(reader, Lines::with_max_length(8192));
        let mut text = vec![b'a'; size - 2];
        text.extend(b"\r\n");
        let line = pool.copy_from_slice(&text).unwrap();
        let n = allocations_per_batch(|| {
            writer.append(line.clone()).unwrap();
            ready(writer.flush_pipe(), &mut cx).unwrap();
            let got = ready(lines.next(), &mut cx).unwrap().unwrap();
            assert_eq!(got.len(), size - 2);
        });
        assert_eq!(
            n, 0,
            "Frames<Lines>, {size} B: {n} allocations in {FRAMES} lines"
        );
    }
}

#[test]
fn encoding_length_delimited_frames_allocates_nothing_per_frame() {
    let waker = Waker::from(Arc::new(NoopWake));
    let mut cx = Context::from_waker(&waker);
    let pool = Pool::new();
    for size in SIZES {
        let (writer, mut reader) = test_pipe(&pool);
        let mut out = FrameWriter::new(writer, LengthDelimited::new());
        let payload = pool.copy_from_slice(&vec![7u8; size]).unwrap();
        let slice = vec![8u8; size];
        let consume = |reader: &mut PipeReader, expected: usize| {
            let len = reader.try_read().unwrap().unwrap().buffer.len();
            assert_eq!(len, expected);
            reader.advance_to(len, len).unwrap();
        };

        // send(Packet): copied behind the header (64 B) or appended zero-copy (4 KiB).
        let n = allocations_per_batch(|| {
            ready(out.send(payload.clone()), &mut cx).unwrap();
            consume(&mut reader, 4 + size);
        });
        assert_eq!(
            n, 0,
            "send(Packet), {size} B: {n} allocations in {FRAMES} frames"
        );

        // feed of four &[u8] payloads, then one flush.
        let n = allocations_per_batch(|| {
            for _ in 0..4 {
                out.feed(&slice[..]).unwrap();
            }
            ready(out.flush(), &mut cx).unwrap();
            consume(&mut reader, 4 * (4 + size));
        });
        assert_eq!(
            n, 0,
            "feed(&[u8]) x 4 + flush, {size} B: {n} allocations in {FRAMES} batches"
        );

        // Blocking: feed + block_on(send).
        let n = allocations_per_batch(|| {
            out.feed(payload.clone()).unwrap();
            packetpipe::block_on(out.send(&slice[..])).unwrap();
            consume(&mut reader, 2 * (4 + size));
        });
        assert_eq!(
            n, 0,
            "feed + block_on(send), {size} B: {n} allocations in {FRAMES} frames"
        );
    }
}

#[test]
fn forwarding_frames_from_one_pipe_to_another_allocates_nothing_per_frame() {
    let waker = Waker::from(Arc::new(NoopWake));
    let mut cx = Context::from_waker(&waker);
    let pool = Pool::new();
    for size in SIZES {
        let (mut inbound, reader) = test_pipe(&pool);
        let (writer, mut outbound) = test_pipe(&pool);
        let mut frames = Frames::new(reader, LengthDelimited::new());
        let mut out = FrameWriter::new(writer, LengthDelimited::new());
        let frame = wire(&pool, size);
        let n = allocations_per_batch(|| {
            for _ in 0..4 {
                inbound.append(frame.clone()).unwrap();
            }
            ready(inbound.flush_pipe(), &mut cx).unwrap();
            // The stream has nothing more ready after the burst: forward flushes and waits.
            assert!(pin!(out.forward(&mut frames)).poll(&mut cx).is_pending());
            let len = outbound.try_read().unwrap().unwrap().buffer.len();
            assert_eq!(len, 4 * (4 + size));
            outbound.advance_to(len, len).unwrap();
        });
        assert_eq!(
            n, 0,
            "forward, {size} B: {n} allocations in {FRAMES} bursts of 4 frames"
        );
    }
}

#[test]
fn decoding_1_mib_frames_as_chains_of_64_kib_segments_allocates_nothing_per_frame() {
    // 17 segments per frame (its header and 1 MiB behind it, in 64 KiB reads): past the chain's 4
    // inline segments, so each chain spills to a deque; dropped, the deque is reused.
    let waker = Waker::from(Arc::new(NoopWake));
    let mut cx = Context::from_waker(&waker);
    let pool = Pool::new();
    let (mut writer, reader) = pipe_with(PipeOptions {
        pool: Some(pool.clone()),
        pause_threshold: 4 << 20,
        resume_threshold: 2 << 20,
        ..Default::default()
    });
    let mut frames = Frames::new(reader, LengthDelimited::new().into_chains());
    let size = 1 << 20;
    let stream = wire(&pool, size);
    let pieces: Vec<Packet> = (0..stream.len())
        .step_by(64 << 10)
        .map(|at| stream.slice(at..(at + (64 << 10)).min(stream.len())))
        .collect();
    let mut one_frame = || {
        for piece in &pieces {
            writer.append(piece.clone()).unwrap();
        }
        ready(writer.flush_pipe(), &mut cx).unwrap();
        let chain = ready(frames.next(), &mut cx).unwrap().unwrap();
        assert_eq!(chain.len(), size);
        assert!(chain.iter().len() > 4, "{} segments", chain.iter().len());
    };
    assert_eq!(allocations_per_batch(&mut one_frame), 0);
}
