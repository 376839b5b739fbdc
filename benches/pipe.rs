//! What the pipe costs per frame, next to baselines measured in the same run.
//!
//! Groups (one per frame size where the size matters, so the ratios within a group read off
//! directly):
//!
//! - `pipe_append/{64B,4KiB,64KiB}`: same thread, per frame `append(packet)` -> flush -> `try_read`
//!   -> `advance_to(len, len)`. The flush polls the `Flush` future once (what `.await` does; an
//!   unpaused flush is ready at once; the one-thread pipes pause at 1 MiB instead of 64 KiB, since a
//!   flushed, unread 64 KiB frame would otherwise pause the flush). Packet variants: `append_pooled` (a clone of a pooled
//!   pooled `Packet`: one atomic increment, one decrement on release), `append_bytes` (a clone of a
//!   shared `Bytes`), `append_static` (no reference count: the pipe alone), and
//!   `append_pooled_blocking` (`flush_blocking` + `read_blocking`, the thread-user path).
//!   Baselines: a tokio bounded `mpsc::channel::<Bytes>` on one thread, `try_send` + `try_recv` of a
//!   shared `Bytes` clone (`tokio_mpsc_bytes`) or a static one (`tokio_mpsc_static`), and
//!   `send().await` + `recv().await` on a current-thread runtime (`tokio_mpsc_async`).
//! - `pipe_write/{64B,4KiB,64KiB}`: same thread, per frame `buffer_mut(n)` + copy + `advance(n)`
//!   (`buffer_mut_advance`) or `write(&frame)` (`write`), then flush -> `try_read` -> `advance_to`.
//!   Baselines: `memcpy` (`copy_from_slice` of the frame into a preallocated buffer) and
//!   `pool_rent_copy_return` (rent n bytes from the global pool, copy, drop).
//! - `pipe_flush`: an unpaused flush. `empty` (nothing staged, polling the future), `empty_blocking`
//!   (`flush_blocking`), `write_8B_then_flush` (an 8-byte `write` followed by a flush, per op) and
//!   `write_8B_only` (the same writes, flushed outside the timed loop): the difference of the last
//!   two is what a flush right after a small write costs. `atomic_fetch_add_seqcst` is one locked
//!   read-modify-write on this machine, for scale.
//! - `pipe_threads/{64B,4KiB,64KiB}`: streaming across two threads, per frame: a writer thread
//!   stages a frame and calls `flush_blocking` (default options, so 64 KiB frames pause it); a
//!   reader thread loops `read_blocking` -> `advance_to(len, len)`. Measured with `iter_custom`
//!   over N frames, from the writer's first frame to the reader's last byte. `append_static`,
//!   `append_pooled` (clones of one pooled packet, so its count bounces between the cores),
//!   `write`, and the baseline `tokio_mpsc_blocking` (`blocking_send`/`blocking_recv` of static
//!   `Bytes` through a channel of `max(1, 64 KiB / n)` slots, the pipe's default pause threshold).
//! - `take_frame/{16B,64B,...,64KiB}`: `take_frame(n)` + drop of the frame, from 256 KiB pooled
//!   packets (appended 16 times per batch, so the source stays in cache), on a pipe with
//!   `copy_threshold(0)` (`share`: always zero-copy) or `copy_threshold(usize::MAX)` (`copy`:
//!   always into a fitted pooled buffer, or inline in the `Packet` at 16 B). A size where `copy` became cheaper than `share` would be the time crossover
//!   for `DEFAULT_COPY_THRESHOLD`; BENCHMARKS.md has the measured curve.
//!
//! Copy speed on glibc 2.36 / AMD EPYC depends on `GLIBC_TUNABLES` (its `memcpy` is slow for 4-64 KiB without it): run `pipe_write` and
//! `take_frame` with and without the tunable.
//!
//! ```text
//! CARGO_TARGET_DIR=/work/target-pipe-bench GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=2000000 \
//!     cargo bench -p packetpipe-perf --bench pipe -- --warm-up-time 1 --measurement-time 3
//! ```

use std::future::Future;
use std::hint::black_box;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion};
use packetpipe::pipe::{pipe, pipe_with, PipeOptions, PipeReader, PipeWriter};
use packetpipe::{Packet, Pool};

const SIZES: [(usize, &str); 3] = [(64, "64B"), (4 << 10, "4KiB"), (64 << 10, "64KiB")];

const TAKE_SIZES: [(usize, &str); 9] = [
    (16, "16B"),
    (64, "64B"),
    (256, "256B"),
    (1 << 10, "1KiB"),
    (2 << 10, "2KiB"),
    (4 << 10, "4KiB"),
    (8 << 10, "8KiB"),
    (16 << 10, "16KiB"),
    (64 << 10, "64KiB"),
];

/// A waker that does nothing: the pipe's ready paths never wake.
struct NoopWake;

impl Wake for NoopWake {
    fn wake(self: Arc<Self>) {}
}

fn noop_waker() -> Waker {
    Waker::from(Arc::new(NoopWake))
}

/// Flush as an async task does (poll the `Flush` future once). Panics if the flush would wait.
#[inline]
fn flush_ready(writer: &mut PipeWriter, cx: &mut Context<'_>) {
    match Pin::new(&mut writer.flush_pipe()).poll(cx) {
        Poll::Ready(result) => {
            black_box(result.expect("flush"));
        }
        Poll::Pending => panic!("an unpaused flush returned Pending"),
    }
}

/// Read what is flushed (a read that must not wait) and consume all of it; returns its length.
#[inline]
fn read_all(reader: &mut PipeReader) -> usize {
    let len = reader
        .try_read()
        .expect("read")
        .expect("flushed bytes are ready")
        .buffer
        .len();
    reader.advance_to(len, len).expect("advance");
    len
}

/// A pipe for one-thread benches: the default options, except that backpressure pauses at 1 MiB
/// rather than 64 KiB, so that a 64 KiB frame flushed before its read does not pause the flush
/// (the check stays on the path, unlike with backpressure disabled).
fn same_thread_pipe() -> (PipeWriter, PipeReader) {
    pipe_with(PipeOptions {
        pause_threshold: 1 << 20,
        resume_threshold: 512 << 10,
        ..Default::default()
    })
}

fn frame(size: usize) -> Vec<u8> {
    (0..size).map(|i| i as u8).collect()
}

fn pooled_packet(size: usize) -> Packet {
    Pool::global().copy_from_slice(&frame(size)).expect("rent")
}

/// A shared (already promoted) `Bytes`: cloning it is one atomic increment.
fn shared_bytes(size: usize) -> Bytes {
    let bytes = Bytes::from(frame(size));
    drop(bytes.clone());
    bytes
}

fn static_frame(size: usize) -> &'static [u8] {
    Box::leak(frame(size).into_boxed_slice())
}

// ------------------------------------------------------------------------------------------------

fn pipe_append(c: &mut Criterion) {
    let waker = noop_waker();
    let mut cx = Context::from_waker(&waker);
    for (size, label) in SIZES {
        let mut group = c.benchmark_group(format!("pipe_append/{label}"));
        let bytes = shared_bytes(size);
        let static_bytes = Bytes::from_static(static_frame(size));

        // Baselines: tokio's bounded channel, sender and receiver on this thread.
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(1024);
        group.bench_function("tokio_mpsc_bytes", |b| {
            b.iter(|| {
                tx.try_send(bytes.clone()).expect("room");
                drop(black_box(rx.try_recv().expect("sent")));
            })
        });
        group.bench_function("tokio_mpsc_static", |b| {
            b.iter(|| {
                tx.try_send(static_bytes.clone()).expect("room");
                drop(black_box(rx.try_recv().expect("sent")));
            })
        });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        group.bench_function("tokio_mpsc_async", |b| {
            b.iter_custom(|iters| {
                runtime.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        tx.send(bytes.clone()).await.expect("open");
                        drop(black_box(rx.recv().await.expect("sent")));
                    }
                    start.elapsed()
                })
            })
        });
        drop((tx, rx));

        let (mut writer, mut reader) = same_thread_pipe();
        let pooled = pooled_packet(size);
        group.bench_function("append_pooled", |b| {
            b.iter(|| {
                writer.append(pooled.clone()).expect("append");
                flush_ready(&mut writer, &mut cx);
                black_box(read_all(&mut reader));
            })
        });
        group.bench_function("append_bytes", |b| {
            b.iter(|| {
                writer.append(bytes.clone()).expect("append");
                flush_ready(&mut writer, &mut cx);
                black_box(read_all(&mut reader));
            })
        });
        let static_packet = Packet::from_static(static_frame(size));
        group.bench_function("append_static", |b| {
            b.iter(|| {
                writer.append(static_packet.clone()).expect("append");
                flush_ready(&mut writer, &mut cx);
                black_box(read_all(&mut reader));
            })
        });
        group.bench_function("append_pooled_blocking", |b| {
            b.iter(|| {
                writer.append(pooled.clone()).expect("append");
                black_box(writer.flush_blocking().expect("flush"));
                let len = reader.read_blocking().expect("read").buffer.len();
                reader.advance_to(len, len).expect("advance");
            })
        });
        group.finish();
    }
}

fn pipe_write(c: &mut Criterion) {
    let waker = noop_waker();
    let mut cx = Context::from_waker(&waker);
    for (size, label) in SIZES {
        let mut group = c.benchmark_group(format!("pipe_write/{label}"));
        let src = frame(size);
        let mut dst = vec![0u8; size];

        group.bench_function("memcpy", |b| {
            b.iter(|| {
                black_box(&mut dst[..]).copy_from_slice(black_box(&src[..]));
            })
        });
        let pool = Pool::global();
        group.bench_function("pool_rent_copy_return", |b| {
            b.iter(|| {
                let mut buf = pool.rent(black_box(size)).expect("rent");
                buf.extend_from_slice(black_box(&src[..])).expect("fits");
                drop(black_box(buf));
            })
        });

        let (mut writer, mut reader) = same_thread_pipe();
        group.bench_function("buffer_mut_advance", |b| {
            b.iter(|| {
                let space = writer.spare_mut(size).expect("buffer");
                space[..size].copy_from_slice(black_box(&src[..]));
                writer.commit(size).expect("advance");
                flush_ready(&mut writer, &mut cx);
                black_box(read_all(&mut reader));
            })
        });
        group.bench_function("write", |b| {
            b.iter(|| {
                writer.write_slice(black_box(&src[..])).expect("write");
                flush_ready(&mut writer, &mut cx);
                black_box(read_all(&mut reader));
            })
        });
        group.finish();
    }
}

/// Ops per timed batch in `pipe_flush` (the reader drains between batches, untimed).
const FLUSH_BATCH: u64 = 256;

fn pipe_flush(c: &mut Criterion) {
    let waker = noop_waker();
    let mut cx = Context::from_waker(&waker);
    let mut group = c.benchmark_group("pipe_flush");
    let small = [0x5au8; 8];

    let counter = AtomicU64::new(0);
    group.bench_function("atomic_fetch_add_seqcst", |b| {
        b.iter(|| black_box(counter.fetch_add(1, Ordering::SeqCst)))
    });

    let (mut writer, mut reader) = same_thread_pipe();
    group.bench_function("empty", |b| b.iter(|| flush_ready(&mut writer, &mut cx)));
    group.bench_function("empty_blocking", |b| {
        b.iter(|| black_box(writer.flush_blocking().expect("flush")))
    });

    group.bench_function("write_8B_then_flush", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let batch = left.min(FLUSH_BATCH);
                let start = Instant::now();
                for _ in 0..batch {
                    writer.write_slice(black_box(&small[..])).expect("write");
                    flush_ready(&mut writer, &mut cx);
                }
                total += start.elapsed();
                left -= batch;
                read_all(&mut reader);
            }
            total
        })
    });
    group.bench_function("write_8B_only", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let batch = left.min(FLUSH_BATCH);
                let start = Instant::now();
                for _ in 0..batch {
                    writer.write_slice(black_box(&small[..])).expect("write");
                }
                total += start.elapsed();
                left -= batch;
                flush_ready(&mut writer, &mut cx);
                read_all(&mut reader);
            }
            total
        })
    });
    group.finish();
}

// ------------------------------------------------------------------------------------------------

/// A writer thread and a reader thread that stay alive across criterion's samples. `run(n)` has
/// the writer produce n frames and the reader consume them, and returns the time from the
/// writer's start to the reader's end.
struct Streaming {
    to_writer: Option<mpsc::Sender<u64>>,
    to_reader: Option<mpsc::Sender<u64>>,
    started: mpsc::Receiver<Instant>,
    ended: mpsc::Receiver<Instant>,
    threads: Vec<JoinHandle<()>>,
}

impl Streaming {
    fn new(
        mut produce: impl FnMut(u64) + Send + 'static,
        mut consume: impl FnMut(u64) + Send + 'static,
    ) -> Streaming {
        let (to_writer, writer_rx) = mpsc::channel::<u64>();
        let (to_reader, reader_rx) = mpsc::channel::<u64>();
        let (started_tx, started) = mpsc::channel();
        let (ended_tx, ended) = mpsc::channel();
        let writer = thread::spawn(move || {
            while let Ok(frames) = writer_rx.recv() {
                let start = Instant::now();
                produce(frames);
                started_tx.send(start).expect("bench alive");
            }
        });
        let reader = thread::spawn(move || {
            while let Ok(frames) = reader_rx.recv() {
                consume(frames);
                ended_tx.send(Instant::now()).expect("bench alive");
            }
        });
        Streaming {
            to_writer: Some(to_writer),
            to_reader: Some(to_reader),
            started,
            ended,
            threads: vec![writer, reader],
        }
    }

    fn run(&self, frames: u64) -> Duration {
        let send = |to: &Option<mpsc::Sender<u64>>| {
            to.as_ref()
                .expect("running")
                .send(frames)
                .expect("thread alive")
        };
        send(&self.to_reader);
        send(&self.to_writer);
        let start = self.started.recv().expect("writer done");
        let end = self.ended.recv().expect("reader done");
        end.saturating_duration_since(start)
    }
}

impl Drop for Streaming {
    fn drop(&mut self) {
        self.to_writer = None;
        self.to_reader = None;
        for thread in self.threads.drain(..) {
            thread.join().expect("bench thread");
        }
    }
}

/// The reader side of a streaming pipe: read and consume until `frames * size` bytes arrived.
fn pipe_consumer(mut reader: PipeReader, size: usize) -> impl FnMut(u64) + Send + 'static {
    move |frames| {
        let target = frames * size as u64;
        let mut got = 0u64;
        while got < target {
            let len = reader.read_blocking().expect("read").buffer.len();
            reader.advance_to(len, len).expect("advance");
            got += len as u64;
        }
    }
}

fn streaming_pipe(
    size: usize,
    mut stage: impl FnMut(&mut PipeWriter) + Send + 'static,
) -> Streaming {
    let (mut writer, reader) = pipe();
    Streaming::new(
        move |frames| {
            for _ in 0..frames {
                stage(&mut writer);
                black_box(writer.flush_blocking().expect("flush"));
            }
        },
        pipe_consumer(reader, size),
    )
}

fn pipe_threads(c: &mut Criterion) {
    for (size, label) in SIZES {
        let mut group = c.benchmark_group(format!("pipe_threads/{label}"));

        let slots = (64 * 1024 / size).max(1);
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(slots);
        let static_bytes = Bytes::from_static(static_frame(size));
        let tokio = Streaming::new(
            move |frames| {
                for _ in 0..frames {
                    tx.blocking_send(static_bytes.clone()).expect("open");
                }
            },
            move |frames| {
                for _ in 0..frames {
                    drop(black_box(rx.blocking_recv().expect("sent")));
                }
            },
        );
        group.bench_function("tokio_mpsc_blocking", |b| b.iter_custom(|n| tokio.run(n)));
        drop(tokio);

        let static_packet = Packet::from_static(static_frame(size));
        let streaming = streaming_pipe(size, move |writer| {
            writer.append(static_packet.clone()).expect("append")
        });
        group.bench_function("append_static", |b| b.iter_custom(|n| streaming.run(n)));
        drop(streaming);

        let pooled = pooled_packet(size);
        let streaming = streaming_pipe(size, move |writer| {
            writer.append(pooled.clone()).expect("append")
        });
        group.bench_function("append_pooled", |b| b.iter_custom(|n| streaming.run(n)));
        drop(streaming);

        let src = frame(size);
        let streaming = streaming_pipe(size, move |writer| {
            writer.write_slice(black_box(&src[..])).expect("write")
        });
        group.bench_function("write", |b| b.iter_custom(|n| streaming.run(n)));
        drop(streaming);

        group.finish();
    }
}

// ------------------------------------------------------------------------------------------------

/// Size of the source packets `take_frame` cuts frames from, and how many are appended per batch.
const TAKE_SOURCE: usize = 256 << 10;
const TAKE_APPENDS: usize = 16;

/// Take `iters` frames of `size` bytes (dropping each at once), timing only the takes.
fn take_frames(
    writer: &mut PipeWriter,
    reader: &mut PipeReader,
    source: &Packet,
    size: usize,
    iters: u64,
    cx: &mut Context<'_>,
) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        for _ in 0..TAKE_APPENDS {
            writer.append(source.clone()).expect("append");
        }
        flush_ready(writer, cx);
        let available = reader
            .try_read()
            .expect("read")
            .expect("flushed")
            .buffer
            .len();
        let frames = ((available / size) as u64).min(left);
        let start = Instant::now();
        for _ in 0..frames {
            drop(black_box(reader.take_frame(size).expect("take")));
        }
        total += start.elapsed();
        left -= frames;
        let rest = reader.last_read().expect("read").buffer.len();
        reader.advance_to(rest, rest).expect("advance");
    }
    total
}

fn take_frame(c: &mut Criterion) {
    let waker = noop_waker();
    let mut cx = Context::from_waker(&waker);
    let source = pooled_packet(TAKE_SOURCE);
    for (size, label) in TAKE_SIZES {
        let mut group = c.benchmark_group(format!("take_frame/{label}"));
        for (name, threshold) in [("share", 0), ("copy", usize::MAX)] {
            // No backpressure: a batch stages several MiB before the reader takes any of it.
            let (mut writer, mut reader) = pipe_with(PipeOptions {
                pause_threshold: 0,
                copy_threshold: threshold,
                ..Default::default()
            });
            group.bench_function(name, |b| {
                b.iter_custom(|iters| {
                    take_frames(&mut writer, &mut reader, &source, size, iters, &mut cx)
                })
            });
        }
        group.finish();
    }
}

criterion_group!(
    benches,
    pipe_append,
    pipe_write,
    pipe_flush,
    pipe_threads,
    take_frame
);
criterion_main!(benches);
