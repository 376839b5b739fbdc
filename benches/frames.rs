//! `Frames<LengthDelimited>` over a pipe against tokio-util's `FramedRead<_, LengthDelimitedCodec>`
//! over tokio's `duplex` and over a `&[u8]`, measured in the same run (issue 8, item 3).
//!
//! Every row decodes the same byte stream: frames of 64 B / 4 KiB / 64 KiB / 1 MiB behind a 4-byte
//! big-endian length (tokio-util's default codec on both sides), delivered in 64 KiB pieces, as
//! socket reads would deliver them. Time is per frame (criterion `iter_custom`: each iteration is
//! one frame; a batch of frames is produced and decoded per timing), CPU time of the benchmarking
//! thread (`common/cpu_time.rs`); every frame is checked for its length and dropped.
//!
//! - `tokio_slice`: `FramedRead::new(&bytes[..], codec)`, polled directly (a slice never waits).
//!   Each read copies up to the buffer's spare capacity into its `BytesMut`; frames are split off.
//! - `tokio_duplex`: a current-thread runtime; a task writes the stream into
//!   `tokio::io::duplex(64 KiB)` with `write_all` per 64 KiB piece; the bench's task reads frames
//!   from `FramedRead` over the other end.
//! - `pipe_sync`: one thread, no runtime: `write_slice` of each 64 KiB piece (a copy into a pooled
//!   block, as a pump's socket read) + flush, then `Frames` yields every frame that is complete.
//!   The pipe's backpressure is off (pause 0), as a slice has none.
//! - `pipe_async`: the `tokio_duplex` setup with a pipe: a task `write_slice`s each piece and
//!   `flush_pipe().await`s (default options: pause at 64 KiB), the bench's task awaits
//!   `frames.next()`.
//! - `pipe_sync_chain`, `pipe_async_chain`: the same with `LengthDelimited::into_chains()`, whose
//!   frames are `PacketChain`s: a large frame spanning the 64 KiB pieces is shared, not copied.
//!
//! - `pipe_append`, `pipe_append_chain`: `pipe_sync` (and its chains) with the stream's 64 KiB
//!   pieces appended as `Bytes` (views of one buffer: a reference count each) instead of copied
//!   in: the bytes are in memory already, as they are for `tokio_slice`, and the pipe takes them
//!   without a copy where `FramedRead` must read them into its buffer. A frame inside a piece is
//!   shared (the copy threshold as above), one spanning pieces is copied (`pipe_append`) or
//!   shared piece by piece (`pipe_append_chain`).
//! - `memcpy`: the stream copied once, piece by piece, into a reused 64 KiB buffer, nothing
//!   decoded: the floor of any row that receives its bytes by copying them (`tokio_slice` copies
//!   each byte into its `BytesMut`, the pipe rows into pooled blocks). Time per frame is the copy
//!   of the stream over its frames.
//!
//! - `lines/64B`: 64-byte lines (63 characters and `\n`), `Frames<Lines>` in the `pipe_sync` shape
//!   against `FramedRead<&[u8], LinesCodec>` (`tokio_slice`); no target, a reference.
//!
//! `Frames<LengthDelimited>` yields contiguous `Packet`s: a frame up to the copy threshold (2 KiB)
//! is copied into a fitted pooled buffer, a larger one lying in one piece is shared, a larger one
//! spanning pieces (most 64 KiB and every 1 MiB frame here) is copied once more into one buffer.
//!
//! Before the criterion groups, the binary prints the allocations and bytes allocated per frame of
//! each row in steady state (a counting global allocator; what a batch of 2N frames allocates
//! beyond a batch of N, so per-batch setup cancels out; `FRAMES_NO_ALLOC_TABLE=1` skips it).
//!
//! ```text
//! GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=2000000 \
//!     cargo bench -p packetpipe-perf --bench frames -- --warm-up-time 1 --measurement-time 3
//! ```

#[path = "common/cpu_time.rs"]
mod cpu_time;

use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use cpu_time::{thread_cpu_time, ThreadCpuTime};
use criterion::{criterion_group, criterion_main, Criterion};
use futures::StreamExt;
use packetpipe::frame::{Decoder, FrameError, Frames, LengthDelimited, Lines};
use packetpipe::pipe::{pipe, pipe_with, PipeOptions, PipeWriter};
use packetpipe::{Packet, PacketChain};
use tokio::io::AsyncWriteExt;
use tokio_util::codec::{FramedRead, LengthDelimitedCodec, LinesCodec};

// ------------------------------------------------------------------------------------------------
// Bytes and allocations per frame.

#[path = "../tests-integration/tests/kit/counting_alloc.rs"]
mod counting_alloc;

#[global_allocator]
static GLOBAL: counting_alloc::CountingAlloc = counting_alloc::CountingAlloc;

/// (allocations, bytes) made by this thread so far.
fn counts() -> (u64, u64) {
    (
        counting_alloc::allocations(),
        counting_alloc::allocated_bytes(),
    )
}

// ------------------------------------------------------------------------------------------------

const SIZES: [(usize, &str); 4] = [
    (64, "64B"),
    (4 << 10, "4KiB"),
    (64 << 10, "64KiB"),
    (1 << 20, "1MiB"),
];

/// Bytes a socket read delivers.
const PIECE: usize = 64 << 10;

/// The encoded stream of one batch: enough frames for about 1 MiB (at least 8).
struct Stream {
    size: usize,
    frames: usize,
    bytes: Vec<u8>,
    /// The same bytes as `PIECE`-sized `Bytes`, views of one buffer (the `pipe_append` rows).
    pieces: Vec<bytes::Bytes>,
}

impl Stream {
    fn new(size: usize) -> Stream {
        Stream::with_frames(size, ((1 << 20) / (size + 4)).max(8))
    }

    /// Lines of `line` bytes with their `\n` (items of `line - 1` bytes), 1 MiB of them.
    fn lines(line: usize) -> Stream {
        let frames = (1 << 20) / line;
        let mut bytes = Vec::with_capacity(frames * line);
        for i in 0..frames {
            bytes.extend(std::iter::repeat(b'a' + (i % 26) as u8).take(line - 1));
            bytes.push(b'\n');
        }
        Stream {
            size: line - 1,
            frames,
            pieces: pieces_of(&bytes),
            bytes,
        }
    }

    fn with_frames(size: usize, frames: usize) -> Stream {
        let mut bytes = Vec::with_capacity(frames * (size + 4));
        for i in 0..frames {
            bytes.extend((size as u32).to_be_bytes());
            bytes.extend(std::iter::repeat(i as u8).take(size));
        }
        Stream {
            size,
            frames,
            pieces: pieces_of(&bytes),
            bytes,
        }
    }
}

/// `bytes` as `PIECE`-sized views of one shared `Bytes` (a clone is a reference count).
fn pieces_of(bytes: &[u8]) -> Vec<bytes::Bytes> {
    let all = bytes::Bytes::copy_from_slice(bytes);
    (0..bytes.len())
        .step_by(PIECE)
        .map(|start| all.slice(start..(start + PIECE).min(bytes.len())))
        .collect()
}

/// A frame's length, whatever its type.
trait Len {
    fn len(&self) -> usize;
}

impl Len for Packet {
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }
}

impl Len for packetpipe::frame::Line {
    fn len(&self) -> usize {
        str::len(self)
    }
}

impl Len for bytes::BytesMut {
    fn len(&self) -> usize {
        bytes::BytesMut::len(self)
    }
}

impl Len for String {
    fn len(&self) -> usize {
        String::len(self)
    }
}

impl Len for PacketChain {
    fn len(&self) -> usize {
        PacketChain::len(self)
    }
}

struct NoopWake;
impl Wake for NoopWake {
    fn wake(self: Arc<Self>) {}
}

fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .max_frame_length(8 << 20)
        .new_codec()
}

fn decoder() -> LengthDelimited {
    LengthDelimited::builder()
        .max_frame_length(8 << 20)
        .new_codec()
}

/// One batch through `FramedRead` over a slice, with `codec` (`codec()` or `LinesCodec`).
fn tokio_slice<C>(stream: &Stream, codec: C)
where
    C: tokio_util::codec::Decoder,
    C::Item: Len + std::fmt::Debug,
    C::Error: std::fmt::Debug,
{
    let waker = Waker::from(Arc::new(NoopWake));
    let mut cx = Context::from_waker(&waker);
    let mut framed = FramedRead::new(&stream.bytes[..], codec);
    for _ in 0..stream.frames {
        match framed.poll_next_unpin(&mut cx) {
            Poll::Ready(Some(Ok(frame))) => assert_eq!(black_box(frame).len(), stream.size),
            other => panic!("expected a frame, got {other:?}"),
        }
    }
}

/// The floor of every row that receives the stream by copying it: the stream copied once, in its
/// 64 KiB pieces, into a reused 64 KiB buffer (`black_box` keeps each copy). No frame is decoded;
/// time per frame is the stream's copy over its frames.
fn memcpy_floor(stream: &Stream, buffer: &mut [u8]) {
    for piece in stream.bytes.chunks(PIECE) {
        buffer[..piece.len()].copy_from_slice(black_box(piece));
        black_box(&mut *buffer);
    }
}

/// A batch of frames produced, then decoded, on one thread with the pipe (no runtime).
struct PipeSync<D> {
    writer: PipeWriter,
    frames: Frames<D>,
    waker: Waker,
}

impl<D: Decoder<Error = FrameError>> PipeSync<D>
where
    D::Item: Len,
{
    fn new(decoder: D) -> PipeSync<D> {
        let (writer, reader) = pipe_with(PipeOptions {
            pause_threshold: 0,
            ..Default::default()
        });
        PipeSync {
            writer,
            frames: Frames::new(reader, decoder),
            waker: Waker::from(Arc::new(NoopWake)),
        }
    }

    /// Each 64 KiB piece copied in (`write_slice`, as a pump's socket read) and flushed, then
    /// every complete frame taken out.
    fn batch(&mut self, stream: &Stream) {
        let got: usize = stream
            .bytes
            .chunks(PIECE)
            .map(|piece| self.feed(stream, |w| w.write_slice(piece).expect("write")))
            .sum();
        assert_eq!(got, stream.frames);
    }

    /// `batch` with the pieces appended (a reference each), not copied: the bytes are in memory
    /// already, as for `tokio_slice`.
    fn batch_appended(&mut self, stream: &Stream) {
        let got: usize = stream
            .pieces
            .iter()
            .map(|piece| self.feed(stream, |w| w.append(piece.clone()).expect("append")))
            .sum();
        assert_eq!(got, stream.frames);
    }

    /// Stage a piece with `stage`, flush, take every complete frame; returns how many.
    #[inline(always)]
    fn feed(&mut self, stream: &Stream, stage: impl FnOnce(&mut PipeWriter)) -> usize {
        let mut cx = Context::from_waker(&self.waker);
        stage(&mut self.writer);
        match pin!(self.writer.flush_pipe()).poll(&mut cx) {
            Poll::Ready(result) => drop(result.expect("flush")),
            Poll::Pending => panic!("no backpressure here"),
        }
        let mut got = 0;
        while let Poll::Ready(item) = self.frames.poll_next_unpin(&mut cx) {
            let frame = item.expect("not ended").expect("a frame");
            assert_eq!(black_box(frame).len(), stream.size);
            got += 1;
        }
        got
    }
}

/// A current-thread runtime with a producer task and the bench's consumer: tokio's duplex.
fn tokio_duplex(runtime: &tokio::runtime::Runtime, stream: &Arc<Stream>) {
    runtime.block_on(async {
        let (mut tx, rx) = tokio::io::duplex(PIECE);
        let source = stream.clone();
        let producer = tokio::spawn(async move {
            for piece in source.bytes.chunks(PIECE) {
                tx.write_all(piece).await.expect("write");
            }
        });
        let mut framed = FramedRead::new(rx, codec());
        for _ in 0..stream.frames {
            let frame = framed.next().await.expect("a frame").expect("no error");
            assert_eq!(black_box(frame).len(), stream.size);
        }
        producer.await.expect("producer");
    });
}

/// The same with a pipe.
fn pipe_async<D>(runtime: &tokio::runtime::Runtime, stream: &Arc<Stream>, decoder: D)
where
    D: Decoder<Error = FrameError>,
    D::Item: Len,
{
    runtime.block_on(async {
        let (mut writer, reader) = pipe();
        let source = stream.clone();
        let producer = tokio::spawn(async move {
            for piece in source.bytes.chunks(PIECE) {
                writer.write_slice(piece).expect("write");
                writer.flush_pipe().await.expect("flush");
            }
        });
        let mut frames = Frames::new(reader, decoder);
        for _ in 0..stream.frames {
            let frame = frames.next().await.expect("a frame").expect("no error");
            assert_eq!(black_box(frame).len(), stream.size);
        }
        producer.await.expect("producer");
    });
}

/// Allocations and bytes per frame in steady state: what a batch of 2N frames allocates beyond
/// a batch of N (each warmed up first), over N. Per-batch setup (a duplex, a pipe, a spawned task,
/// a `FramedRead`) cancels out; what is left grows with the frames.
fn per_frame(size: usize, mut batch: impl FnMut(&Arc<Stream>)) -> (f64, f64) {
    let frames = ((1 << 20) / (size + 4)).max(8);
    let small = Arc::new(Stream::with_frames(size, frames));
    let large = Arc::new(Stream::with_frames(size, 2 * frames));
    let mut measure = |stream: &Arc<Stream>| {
        batch(stream);
        let (n0, b0) = counts();
        batch(stream);
        let (n1, b1) = counts();
        ((n1 - n0) as f64, (b1 - b0) as f64)
    };
    let (n_small, b_small) = measure(&small);
    let (n_large, b_large) = measure(&large);
    let frames = frames as f64;
    ((n_large - n_small) / frames, (b_large - b_small) / frames)
}

const ROWS: [&str; 8] = [
    "tokio_slice",
    "tokio_duplex",
    "pipe_sync",
    "pipe_async",
    "pipe_sync_chain",
    "pipe_async_chain",
    "pipe_append",
    "pipe_append_chain",
];

fn print_allocations() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    println!(
        "allocations and bytes allocated per frame in steady state (marginal, see per_frame):"
    );
    for (size, label) in SIZES {
        let mut sync = PipeSync::new(decoder());
        let mut sync_chain = PipeSync::new(decoder().into_chains());
        let mut append = PipeSync::new(decoder());
        let mut append_chain = PipeSync::new(decoder().into_chains());
        let rows = [
            per_frame(size, |s| tokio_slice(s, codec())),
            per_frame(size, |s| tokio_duplex(&runtime, s)),
            per_frame(size, |s| sync.batch(s)),
            per_frame(size, |s| pipe_async(&runtime, s, decoder())),
            per_frame(size, |s| sync_chain.batch(s)),
            per_frame(size, |s| pipe_async(&runtime, s, decoder().into_chains())),
            per_frame(size, |s| append.batch_appended(s)),
            per_frame(size, |s| append_chain.batch_appended(s)),
        ];
        for (name, (n, b)) in ROWS.iter().zip(rows) {
            println!("alloc {label:>6} {name:<17} {n:>8.3} allocs {b:>12.1} B");
        }
    }
}

/// Time `iters` frames in whole batches (CPU time of this thread).
fn timed(stream: &Stream, iters: u64, mut batch: impl FnMut()) -> Duration {
    let batches = iters.div_ceil(stream.frames as u64).max(1);
    let start = thread_cpu_time().expect("thread CPU clock");
    for _ in 0..batches {
        batch();
    }
    let elapsed = thread_cpu_time().expect("thread CPU clock") - start;
    // Per frame, scaled to the iterations criterion asked for.
    elapsed.mul_f64(iters as f64 / (batches * stream.frames as u64) as f64)
}

fn frames(c: &mut Criterion<ThreadCpuTime>) {
    // Skipped when profiling one row (`FRAMES_NO_ALLOC_TABLE=1`, e.g. under callgrind).
    if std::env::var_os("FRAMES_NO_ALLOC_TABLE").is_none() {
        print_allocations();
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    for (size, label) in SIZES {
        let stream = Arc::new(Stream::new(size));
        let mut group = c.benchmark_group(format!("frames/{label}"));
        let mut buffer = vec![0u8; PIECE];
        group.bench_function("memcpy", |b| {
            b.iter_custom(|iters| timed(&stream, iters, || memcpy_floor(&stream, &mut buffer)))
        });
        group.bench_function("tokio_slice", |b| {
            b.iter_custom(|iters| timed(&stream, iters, || tokio_slice(&stream, codec())))
        });
        group.bench_function("tokio_duplex", |b| {
            b.iter_custom(|iters| timed(&stream, iters, || tokio_duplex(&runtime, &stream)))
        });
        let mut sync = PipeSync::new(decoder());
        group.bench_function("pipe_sync", |b| {
            b.iter_custom(|iters| timed(&stream, iters, || sync.batch(&stream)))
        });
        group.bench_function("pipe_async", |b| {
            b.iter_custom(|iters| {
                timed(&stream, iters, || pipe_async(&runtime, &stream, decoder()))
            })
        });
        let mut sync_chain = PipeSync::new(decoder().into_chains());
        group.bench_function("pipe_sync_chain", |b| {
            b.iter_custom(|iters| timed(&stream, iters, || sync_chain.batch(&stream)))
        });
        let mut append = PipeSync::new(decoder());
        group.bench_function("pipe_append", |b| {
            b.iter_custom(|iters| timed(&stream, iters, || append.batch_appended(&stream)))
        });
        let mut append_chain = PipeSync::new(decoder().into_chains());
        group.bench_function("pipe_append_chain", |b| {
            b.iter_custom(|iters| timed(&stream, iters, || append_chain.batch_appended(&stream)))
        });
        group.bench_function("pipe_async_chain", |b| {
            b.iter_custom(|iters| {
                timed(&stream, iters, || {
                    pipe_async(&runtime, &stream, decoder().into_chains())
                })
            })
        });
        group.finish();
    }
    // Lines of 64 bytes (63 characters and `\n`): `Lines` against tokio-util's `LinesCodec`, which
    // allocates a `String` per line. No target in issue 8; a reference for the delimiter search.
    let stream = Stream::lines(64);
    let mut group = c.benchmark_group("lines/64B");
    group.bench_function("tokio_slice", |b| {
        b.iter_custom(|iters| timed(&stream, iters, || tokio_slice(&stream, LinesCodec::new())))
    });
    let mut sync = PipeSync::new(Lines::new());
    group.bench_function("pipe_sync", |b| {
        b.iter_custom(|iters| timed(&stream, iters, || sync.batch(&stream)))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(ThreadCpuTime::default());
    targets = frames
}
criterion_main!(benches);
