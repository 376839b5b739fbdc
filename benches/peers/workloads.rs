//! The peers workload, shared by `benches/peers.rs` and `examples/peers_stream.rs` (both include
//! this file with `#[path = ...] mod workloads;`).
//!
//! A producer streams length-prefixed frames (a 4-byte big-endian length, then a payload of the
//! frame size) to a consumer, which parses every frame and checksums what it parsed; every row
//! runs the same frames through another transport. [`run`] returns the time of the whole stream
//! and panics when the consumer's digest differs from the producer's, so a wrong row fails loudly
//! instead of reporting a time.
//!
//! The frames: [`DISTINCT_FRAMES`] prebuilt frames (header and payload contiguous, payload bytes a
//! deterministic counter pattern that differs from frame to frame), sent round-robin. The
//! consumer's [`Digest`] counts frames and bytes and folds each frame's length and byte sum into an
//! order-sensitive hash, so a lost, repeated, reordered or torn frame changes it. The byte sum is
//! split-invariant (a frame parsed in several pieces sums the same) and cheap (a SWAR loop that
//! adds 8 bytes per step), so it does not swamp the copy it checks.

use std::sync::Barrier;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use futures::StreamExt;
use packetpipe::pipe::{PipeReader, PipeWriter, ReadBuffer};
use tokio::io::AsyncWriteExt;
use tokio::runtime::Runtime;
use tokio_util::codec::{FramedRead, LengthDelimitedCodec};
use tokio_util::compat::{FuturesAsyncReadCompatExt, FuturesAsyncWriteCompatExt};

/// How many distinct frames the producer sends round-robin.
pub const DISTINCT_FRAMES: usize = 7;

/// Bytes of buffering every bounded peer gets: `duplex` and `piper` capacity, the `rtrb` ring,
/// and `max(1, BUFFERED / size)` slots of the `mpsc` channel. packetpipe's default pause
/// threshold is the same 64 KiB.
pub const BUFFERED: usize = 64 * 1024;

/// The frame (payload) sizes of the bench.
pub const SIZES: [usize; 3] = [64, 4096, 65536];

/// Two OS threads with blocking APIs, or two tokio tasks on a 2-worker multi-thread runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Two OS threads, blocking APIs.
    Threads,
    /// Two tokio tasks on a 2-worker multi-thread runtime.
    Tasks,
}

impl Mode {
    /// Both modes.
    pub const ALL: [Mode; 2] = [Mode::Threads, Mode::Tasks];

    /// The name used in criterion ids and on the example's command line.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Threads => "threads",
            Mode::Tasks => "tasks",
        }
    }

    /// Parse a [`name`](Self::name).
    pub fn parse(s: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == s)
    }
}

/// Every row, in bench order (see [`rows`] for which run in which mode).
pub const ROWS: [&str; 8] = [
    "packetpipe_write",
    "packetpipe_buffer_mut",
    "packetpipe_frames",
    "duplex",
    "piper",
    "mpsc_bytes",
    "rtrb",
    "memcpy",
];

/// The rows of `mode`: all of [`ROWS`] on threads; on tasks all but `rtrb`, a busy-spinning ring
/// that has no async wait (a task polling it with `yield_now` measured 5-70 us per 4 KiB frame,
/// which says nothing about the ring). `memcpy` is the same one-thread loop in both modes.
pub fn rows(mode: Mode) -> impl Iterator<Item = &'static str> {
    ROWS.into_iter()
        .filter(move |row| mode == Mode::Threads || *row != "rtrb")
}

/// `64B`, `4KiB`, `64KiB`.
pub fn size_label(size: usize) -> String {
    if size >= 1024 && size % 1024 == 0 {
        format!("{}KiB", size / 1024)
    } else {
        format!("{size}B")
    }
}

/// A size in bytes, or a [`size_label`].
pub fn parse_size(s: &str) -> Option<usize> {
    if let Some(k) = s.strip_suffix("KiB") {
        k.parse::<usize>().ok().map(|k| k * 1024)
    } else {
        s.strip_suffix('B').unwrap_or(s).parse().ok()
    }
}

/// Frames per criterion iteration: about 1-10 ms of streaming on the 2-core VM (4 MiB of payload,
/// at least 256 and at most 20,000 frames).
pub fn frames_per_iteration(size: usize) -> u64 {
    ((4 << 20) / size).clamp(256, 20_000) as u64
}

/// A 2-worker multi-thread runtime for [`Mode::Tasks`]; build it once, outside the timing.
pub fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("tokio runtime")
}

/// What the consumer parsed: frames, payload bytes and an order-sensitive hash of each frame's
/// length and byte sum.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Digest {
    /// Frames parsed.
    pub frames: u64,
    /// Payload bytes parsed.
    pub bytes: u64,
    /// FNV-style fold of (length, byte sum) per frame, in order.
    pub hash: u64,
}

impl Digest {
    #[inline]
    fn add_frame(&mut self, len: usize, byte_sum: u64) {
        self.frames += 1;
        self.bytes += len as u64;
        self.hash = (self.hash ^ byte_sum ^ ((len as u64) << 40)).wrapping_mul(0x100_0000_01b3);
    }
}

/// The sum of the bytes of `data` (split-invariant: the sums of the pieces add up to it). SWAR:
/// each 8-byte word adds its bytes pairwise into four 16-bit lanes; a 1 KiB block (128 words,
/// at most 128 * 510 < 2^16 per lane) is summed before the lanes are folded. About 1.3 us per
/// 64 KiB on the 2-core VM, 1.5x the copy of the same bytes with the glibc tunable.
#[inline]
pub fn byte_sum(data: &[u8]) -> u64 {
    const LOW: u64 = 0x00ff_00ff_00ff_00ff;
    #[inline(always)]
    fn lanes(words: &[u8]) -> u64 {
        let mut lanes = 0u64;
        for word in words.chunks_exact(8) {
            let w = u64::from_le_bytes(word.try_into().expect("8 bytes"));
            lanes += (w & LOW) + ((w >> 8) & LOW);
        }
        // Each lane < 2^16; their sum may not fit 16 bits.
        (lanes & 0xffff) + ((lanes >> 16) & 0xffff) + ((lanes >> 32) & 0xffff) + (lanes >> 48)
    }
    let mut blocks = data.chunks_exact(1024);
    let mut total: u64 = blocks.by_ref().map(lanes).sum();
    let rest = blocks.remainder();
    let words = rest.len() / 8 * 8;
    total += lanes(&rest[..words]);
    total + rest[words..].iter().map(|&b| u64::from(b)).sum::<u64>()
}

/// The producer's frames and what the consumer must report for `count` of them.
pub struct Source {
    size: usize,
    /// Header + payload, contiguous.
    frames: Vec<Bytes>,
    sums: Vec<u64>,
}

impl Source {
    /// [`DISTINCT_FRAMES`] frames with payloads of `size` bytes.
    pub fn new(size: usize) -> Source {
        assert!(size > 0 && size <= u32::MAX as usize);
        let frames: Vec<Bytes> = (0..DISTINCT_FRAMES)
            .map(|k| {
                let mut frame = Vec::with_capacity(4 + size);
                frame.extend_from_slice(&(size as u32).to_be_bytes());
                frame.extend((0..size).map(|j| (j.wrapping_mul(31) + k * 97 + 1) as u8));
                Bytes::from(frame)
            })
            .collect();
        let sums: Vec<u64> = frames.iter().map(|f| byte_sum(&f[4..])).collect();
        // The checksum itself, against the plain sum, whole and split at an odd point (as a
        // consumer that sees a frame in pieces adds it up).
        for (frame, &sum) in frames.iter().zip(&sums) {
            let payload = &frame[4..];
            let plain: u64 = payload.iter().map(|&b| u64::from(b)).sum();
            let (a, b) = payload.split_at(size / 3 + 1);
            assert_eq!(sum, plain, "byte_sum of {size} bytes");
            assert_eq!(byte_sum(a) + byte_sum(b), plain, "byte_sum of two pieces");
        }
        Source { size, frames, sums }
    }

    /// Frame `i` of the stream: header + payload.
    #[inline]
    pub fn frame(&self, i: u64) -> &Bytes {
        &self.frames[i as usize % DISTINCT_FRAMES]
    }

    /// Frame `i`'s payload.
    #[inline]
    pub fn payload(&self, i: u64) -> &[u8] {
        &self.frame(i)[4..]
    }

    /// The digest of the first `count` frames, computed from the producer's data.
    pub fn expected(&self, count: u64) -> Digest {
        let mut digest = Digest::default();
        for i in 0..count {
            digest.add_frame(self.size, self.sums[i as usize % DISTINCT_FRAMES]);
        }
        digest
    }
}

/// Stream `count` frames of `size` bytes through `row` in `mode`, check the consumer's digest
/// against the producer's and return the time from the first frame to the last one parsed
/// (threads are started before the clock starts and joined before it stops; tasks are spawned on
/// `runtime` inside the timing). Panics on a mismatch or an unknown row.
pub fn run(mode: Mode, row: &str, size: usize, count: u64, runtime: &Runtime) -> Duration {
    let source = Source::new(size);
    let (elapsed, digest) = match mode {
        Mode::Threads => run_threads(row, &source, count),
        Mode::Tasks => run_tasks(row, &source, count, runtime),
    };
    let expected = source.expected(count);
    assert_eq!(
        digest,
        expected,
        "peers/{}/{}/{row}: the consumer parsed something else than the producer sent",
        mode.name(),
        size_label(size)
    );
    elapsed
}

/// Run a producer and a consumer on two fresh threads, timing from a barrier that all three
/// threads pass to the consumer's and producer's end.
fn two_threads(
    producer: impl FnOnce() + Send,
    consumer: impl FnOnce() -> Digest + Send,
) -> (Duration, Digest) {
    let barrier = Barrier::new(3);
    std::thread::scope(|s| {
        let p = s.spawn(|| {
            barrier.wait();
            producer()
        });
        let c = s.spawn(|| {
            barrier.wait();
            consumer()
        });
        barrier.wait();
        let start = Instant::now();
        let digest = c.join().expect("consumer thread");
        p.join().expect("producer thread");
        (start.elapsed(), digest)
    })
}

fn run_threads(row: &str, source: &Source, count: u64) -> (Duration, Digest) {
    let size = source.size;
    match row {
        "packetpipe_write" | "packetpipe_buffer_mut" | "packetpipe_frames" => {
            let (writer, reader) = packetpipe::pipe::pipe();
            let in_place = row == "packetpipe_buffer_mut";
            let frames = row == "packetpipe_frames";
            two_threads(
                move || pipe_producer_blocking(writer, source, count, in_place),
                move || {
                    if frames {
                        frames_consumer_blocking(reader)
                    } else {
                        pipe_consumer_blocking(reader)
                    }
                },
            )
        }
        "duplex" => {
            let (mut w, r) = tokio::io::duplex(BUFFERED);
            two_threads(
                move || {
                    current_thread().block_on(async {
                        for i in 0..count {
                            w.write_all(source.frame(i)).await.expect("duplex write");
                        }
                    })
                },
                move || current_thread().block_on(framed_consumer(r)),
            )
        }
        "piper" => {
            let (r, w) = piper::pipe(BUFFERED);
            two_threads(
                move || {
                    futures::executor::block_on(async {
                        let mut w = w.compat_write();
                        for i in 0..count {
                            w.write_all(source.frame(i)).await.expect("piper write");
                        }
                    })
                },
                move || futures::executor::block_on(framed_consumer(r.compat())),
            )
        }
        "mpsc_bytes" => {
            let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>((BUFFERED / size).max(1));
            two_threads(
                move || {
                    for i in 0..count {
                        tx.blocking_send(source.frame(i).clone())
                            .expect("mpsc send");
                    }
                },
                move || {
                    let mut digest = Digest::default();
                    while let Some(frame) = rx.blocking_recv() {
                        parse_whole_frame(&frame, &mut digest);
                    }
                    digest
                },
            )
        }
        "rtrb" => {
            let (p, c) = rtrb::RingBuffer::<u8>::new(BUFFERED);
            two_threads(
                move || rtrb_producer(p, source, count),
                move || rtrb_consumer(c),
            )
        }
        "memcpy" => {
            let start = Instant::now();
            let digest = memcpy(source, count);
            (start.elapsed(), digest)
        }
        _ => panic!("unknown row {row:?}; rows: {ROWS:?}"),
    }
}

fn run_tasks(row: &str, source: &Source, count: u64, runtime: &Runtime) -> (Duration, Digest) {
    let size = source.size;
    // The tasks must be 'static: they get their own copy of the (small) source.
    let source = std::sync::Arc::new(Source {
        size,
        frames: source.frames.clone(),
        sums: source.sums.clone(),
    });
    let s = source.clone();
    runtime.block_on(async move {
        let start = Instant::now();
        let (producer, consumer) = match row {
            "packetpipe_write" | "packetpipe_buffer_mut" | "packetpipe_frames" => {
                let (writer, reader) = packetpipe::pipe::pipe();
                let in_place = row == "packetpipe_buffer_mut";
                let producer = tokio::spawn(pipe_producer_async(writer, s, count, in_place));
                let consumer = if row == "packetpipe_frames" {
                    tokio::spawn(frames_consumer_async(reader))
                } else {
                    tokio::spawn(pipe_consumer_async(reader))
                };
                (producer, consumer)
            }
            "duplex" => {
                let (mut w, r) = tokio::io::duplex(BUFFERED);
                let producer = tokio::spawn(async move {
                    for i in 0..count {
                        w.write_all(s.frame(i)).await.expect("duplex write");
                    }
                });
                (producer, tokio::spawn(framed_consumer(r)))
            }
            "piper" => {
                let (r, w) = piper::pipe(BUFFERED);
                let producer = tokio::spawn(async move {
                    let mut w = w.compat_write();
                    for i in 0..count {
                        w.write_all(s.frame(i)).await.expect("piper write");
                    }
                });
                (producer, tokio::spawn(framed_consumer(r.compat())))
            }
            "mpsc_bytes" => {
                let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>((BUFFERED / size).max(1));
                let producer = tokio::spawn(async move {
                    for i in 0..count {
                        tx.send(s.frame(i).clone()).await.expect("mpsc send");
                    }
                });
                let consumer = tokio::spawn(async move {
                    let mut digest = Digest::default();
                    while let Some(frame) = rx.recv().await {
                        parse_whole_frame(&frame, &mut digest);
                    }
                    digest
                });
                (producer, consumer)
            }
            "memcpy" => {
                let digest = memcpy(&s, count);
                return (start.elapsed(), digest);
            }
            _ => panic!("unknown row {row:?} in tasks mode; rows: {ROWS:?} (no rtrb)"),
        };
        let digest = consumer.await.expect("consumer task");
        producer.await.expect("producer task");
        (start.elapsed(), digest)
    })
}

fn current_thread() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("current-thread runtime")
}

/// Stage frame `i`: one `write_slice` of header + payload, or `buffer_mut` + the header and the
/// payload written in place + `advance`.
#[inline]
fn stage(writer: &mut PipeWriter, source: &Source, i: u64, in_place: bool) {
    if in_place {
        let payload = source.payload(i);
        let n = 4 + payload.len();
        let space = writer.spare_mut(n).expect("buffer_mut");
        space[..4].copy_from_slice(&(payload.len() as u32).to_be_bytes());
        space[4..n].copy_from_slice(payload);
        writer.commit(n).expect("advance");
    } else {
        writer.write_slice(source.frame(i)).expect("write_slice");
    }
}

fn pipe_producer_blocking(mut writer: PipeWriter, source: &Source, count: u64, in_place: bool) {
    for i in 0..count {
        stage(&mut writer, source, i, in_place);
        let flushed = writer.flush_blocking().expect("flush");
        assert!(!flushed.is_completed, "the reader completed early");
    }
    writer.complete();
}

async fn pipe_producer_async(
    mut writer: PipeWriter,
    source: std::sync::Arc<Source>,
    count: u64,
    in_place: bool,
) {
    for i in 0..count {
        stage(&mut writer, &source, i, in_place);
        let flushed = writer.flush_pipe().await.expect("flush");
        assert!(!flushed.is_completed, "the reader completed early");
    }
    writer.complete();
}

/// Parse every complete frame of `buffer` in place (across segments, through its cursor), add it
/// to `digest`, and return the bytes consumed.
#[inline]
fn parse_buffer(buffer: ReadBuffer<'_>, digest: &mut Digest) -> usize {
    let mut cursor = buffer.cursor();
    let mut consumed = 0;
    while cursor.remaining() >= 4 {
        let mut frame = cursor.clone();
        let len = frame.get_u32() as usize;
        if frame.remaining() < len {
            break;
        }
        let (mut left, mut sum) = (len, 0);
        while left > 0 {
            let chunk = frame.chunk();
            let n = chunk.len().min(left);
            sum += byte_sum(&chunk[..n]);
            frame.advance(n);
            left -= n;
        }
        digest.add_frame(len, sum);
        consumed += 4 + len;
        cursor = frame;
    }
    consumed
}

fn pipe_consumer_blocking(mut reader: PipeReader) -> Digest {
    let mut digest = Digest::default();
    loop {
        let result = reader.read_blocking().expect("read");
        let buffer = result.buffer;
        let (len, done) = (buffer.len(), result.is_completed);
        let consumed = parse_buffer(buffer, &mut digest);
        reader.advance_to(consumed, len).expect("advance_to");
        if done {
            assert_eq!(consumed, len, "a partial frame at the end");
            return digest;
        }
    }
}

async fn pipe_consumer_async(mut reader: PipeReader) -> Digest {
    let mut digest = Digest::default();
    loop {
        let result = reader.read_buffer().await.expect("read");
        let buffer = result.buffer;
        let (len, done) = (buffer.len(), result.is_completed);
        let consumed = parse_buffer(buffer, &mut digest);
        reader.advance_to(consumed, len).expect("advance_to");
        if done {
            assert_eq!(consumed, len, "a partial frame at the end");
            return digest;
        }
    }
}

/// Checksum a frame's payload, whichever segments it spans.
#[inline]
fn add_packet(packet: &[u8], digest: &mut Digest) {
    digest.add_frame(packet.len(), byte_sum(packet));
}

fn frames_consumer_blocking(reader: PipeReader) -> Digest {
    let mut frames =
        packetpipe::frame::Frames::new(reader, packetpipe::frame::LengthDelimited::new());
    let mut digest = Digest::default();
    while let Some(frame) = frames.iter_blocking().next() {
        add_packet(&frame.expect("frame"), &mut digest);
    }
    digest
}

async fn frames_consumer_async(reader: PipeReader) -> Digest {
    let mut frames =
        packetpipe::frame::Frames::new(reader, packetpipe::frame::LengthDelimited::new());
    let mut digest = Digest::default();
    while let Some(frame) = frames.next().await {
        add_packet(&frame.expect("frame"), &mut digest);
    }
    digest
}

/// `FramedRead<_, LengthDelimitedCodec>` over any tokio `AsyncRead`.
async fn framed_consumer(r: impl tokio::io::AsyncRead + Unpin) -> Digest {
    let mut framed = FramedRead::new(r, LengthDelimitedCodec::new());
    let mut digest = Digest::default();
    while let Some(frame) = framed.next().await {
        add_packet(&frame.expect("frame"), &mut digest);
    }
    digest
}

/// A whole frame in one message (the `mpsc` row): parse the header, checksum the payload.
#[inline]
fn parse_whole_frame(frame: &[u8], digest: &mut Digest) {
    let len = u32::from_be_bytes(frame[..4].try_into().expect("header")) as usize;
    assert_eq!(len, frame.len() - 4, "a frame of the wrong length");
    digest.add_frame(len, byte_sum(&frame[4..]));
}

/// A frame parser fed arbitrary pieces of the byte stream (the `rtrb` row).
#[derive(Default)]
struct StreamParser {
    header: [u8; 4],
    have: usize,
    len: usize,
    left: usize,
    sum: u64,
    digest: Digest,
}

impl StreamParser {
    #[inline]
    fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            if self.have < 4 {
                let n = (4 - self.have).min(data.len());
                self.header[self.have..self.have + n].copy_from_slice(&data[..n]);
                self.have += n;
                data = &data[n..];
                if self.have == 4 {
                    self.len = u32::from_be_bytes(self.header) as usize;
                    self.left = self.len;
                    self.sum = 0;
                    self.end_frame_if_done();
                }
                continue;
            }
            let n = self.left.min(data.len());
            self.sum += byte_sum(&data[..n]);
            self.left -= n;
            data = &data[n..];
            self.end_frame_if_done();
        }
    }

    #[inline]
    fn end_frame_if_done(&mut self) {
        if self.left == 0 {
            self.digest.add_frame(self.len, self.sum);
            self.have = 0;
        }
    }

    fn finish(self) -> Digest {
        assert_eq!(self.have, 0, "a partial frame at the end");
        self.digest
    }
}

/// A busy wait that lets the other side run on an oversubscribed machine: `spin_loop` hints, and
/// a `yield_now` every [`SPINS_PER_YIELD`] of them. With a core each, the yield returns at once
/// and this is a pure busy spin; a spin without yields, when the other side is descheduled, burns
/// its whole time slice (milliseconds per frame on the loaded 2-core VM).
#[derive(Default)]
struct SpinWait(u32);

/// See [`SpinWait`].
const SPINS_PER_YIELD: u32 = 64;

impl SpinWait {
    #[inline]
    fn wait(&mut self) {
        self.0 += 1;
        if self.0 % SPINS_PER_YIELD == 0 {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

fn rtrb_producer(mut p: rtrb::Producer<u8>, source: &Source, count: u64) {
    let mut spin = SpinWait::default();
    for i in 0..count {
        let mut frame: &[u8] = source.frame(i);
        while !frame.is_empty() {
            let (pushed, rest) = p.push_partial_slice(frame);
            if pushed.is_empty() {
                spin.wait();
            }
            frame = rest;
        }
    }
}

enum Step {
    Parsed,
    Empty,
    End,
}

/// Parse everything in the ring; `End` once the producer is gone and the ring is empty.
#[inline]
fn rtrb_step(c: &mut rtrb::Consumer<u8>, parser: &mut StreamParser) -> Step {
    let abandoned = c.is_abandoned();
    // `is_abandoned` reads the producer's release of its handle relaxed: the fence makes its
    // last pushes visible to the `slots` below.
    std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
    let n = c.slots();
    if n == 0 {
        return if abandoned { Step::End } else { Step::Empty };
    }
    let chunk = c.read_chunk(n).expect("slots are there");
    let (a, b) = chunk.as_slices();
    parser.feed(a);
    parser.feed(b);
    chunk.commit_all();
    Step::Parsed
}

fn rtrb_consumer(mut c: rtrb::Consumer<u8>) -> Digest {
    let mut parser = StreamParser::default();
    let mut spin = SpinWait::default();
    loop {
        match rtrb_step(&mut c, &mut parser) {
            Step::Parsed => {}
            Step::Empty => spin.wait(),
            Step::End => return parser.finish(),
        }
    }
}

/// The floor: one thread copies each frame into a reused buffer, parses the header and checksums
/// the payload.
fn memcpy(source: &Source, count: u64) -> Digest {
    let mut buffer = vec![0u8; 4 + source.size];
    let mut digest = Digest::default();
    for i in 0..count {
        let frame = source.frame(i);
        buffer[..frame.len()].copy_from_slice(frame);
        let buffer = std::hint::black_box(&mut buffer[..]);
        parse_whole_frame(&buffer[..frame.len()], &mut digest);
    }
    digest
}
