//! packetpipe against its peers on one streaming workload (issue 10, item 4).
//!
//! ```text
//! GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=2000000 cargo bench -p packetpipe-perf --bench peers
//! python3 scripts/plot_peers.py      # docs/peers.svg and a markdown table of ns/frame and ratios
//! ```
//!
//! One row at a time, for a quick look or `perf stat`: `examples/peers_stream.rs` runs the same
//! code (`benches/peers/workloads.rs`).
//!
//! # Workload
//!
//! A producer streams length-prefixed frames (a 4-byte big-endian length, then a payload of 64 B,
//! 4 KiB or 64 KiB, deterministic counter patterns, 7 distinct frames sent round-robin) to a
//! consumer, which parses every frame and checksums its payload (frame count, byte count and an
//! order-sensitive hash of each frame's length and byte sum). After every measured run the
//! consumer's digest is compared with the one computed from the producer's frames; a mismatch
//! panics, so a wrong row fails instead of reporting a time.
//!
//! Modes (criterion ids `peers/{threads|tasks}/{64B|4KiB|64KiB}/{row}`):
//! - `threads`: producer and consumer on two OS threads, blocking APIs. The threads are spawned
//!   for each criterion sample and meet at a barrier; the clock runs from the barrier to the
//!   consumer's last frame and both joins (the `duplex` row's two current-thread runtimes are
//!   built inside it: microseconds, against samples of tens of milliseconds).
//! - `tasks`: two tokio tasks on a 2-worker multi-thread runtime built once outside the timing;
//!   the clock runs from before the two `spawn`s to both `await`s.
//!
//! Every bounded peer gets 64 KiB of buffering, packetpipe's default pause threshold.
//!
//! # Rows
//!
//! - `packetpipe_write`: `write_slice(frame)` (header and payload in one call) then a flush per
//!   frame (`flush_blocking` / `flush_pipe().await`); the consumer `read_blocking` /
//!   `read_buffer().await`, parses every complete frame in place across segments with the
//!   buffer's cursor, checksums it, and `advance_to(consumed, len)`. Default pipe options.
//! - `packetpipe_buffer_mut`: `buffer_mut(4 + S)`, the header and the payload written in place,
//!   `advance(4 + S)`, a flush per frame; the same consumer.
//! - `packetpipe_frames`: the `write_slice` producer; the consumer is
//!   `Frames<LengthDelimited>` (`iter_blocking` / `Stream::next`), frames taken out by
//!   `take_frame` (copied up to the 2 KiB copy threshold, shared above it), checksummed.
//! - `duplex`: `tokio::io::duplex(64 KiB)`, producer `write_all(frame)`, consumer
//!   `FramedRead<_, LengthDelimitedCodec>`; on threads each side `block_on`s its own
//!   current-thread runtime.
//! - `piper`: `piper::pipe(64 KiB)` through `tokio_util::compat`, producer `write_all(frame)`,
//!   consumer `FramedRead<_, LengthDelimitedCodec>`; on threads each side runs
//!   `futures::executor::block_on`.
//! - `mpsc_bytes`: `tokio::sync::mpsc::channel::<Bytes>(max(1, 64 KiB / S))`, the zero-copy
//!   baseline: the producer sends a clone of a prebuilt `Bytes` frame, the consumer parses the
//!   header and checksums the payload; `blocking_send` / `blocking_recv` on threads.
//! - `rtrb` (threads only): `rtrb::RingBuffer<u8>` of 64 KiB, `push_partial_slice` /
//!   `read_chunk`, the consumer parsing the pieces as they come; busy-spinning, for reference
//!   (`spin_loop` hints and a `yield_now` every 64 of them: a pure spin, when the other thread was
//!   descheduled on the loaded 2-core VM, burned whole time slices, milliseconds per frame). Not on
//!   tasks: the ring has no async wait, and polling it with `yield_now` says nothing about it.
//! - `memcpy`: one thread copies each frame into a reused buffer, parses the header and checksums
//!   the payload: the floor. The same single-thread loop in both modes.
//!
//! The checksum (a SWAR byte sum, `workloads::byte_sum`) costs about 1.5x the copy of the same
//! bytes, in every row alike, `memcpy` included.
//!
//! Every byte-stream producer writes one call per frame and (packetpipe) flushes once per frame:
//! no row batches.
//!
//! # Settings
//!
//! `iter_custom`: one criterion iteration is N frames (4 MiB of payload, 256 to 20,000 frames:
//! 20,000 at 64 B, 1,024 at 4 KiB, 256 at 64 KiB), `Throughput::Elements(N)`, so criterion's
//! per-iteration estimate divided by N is the time per frame (`scripts/plot_peers.py` does
//! that). 10 samples, 1 s warm-up, 3 s measurement per row (defaults the command line
//! overrides): 45 rows, about 5 minutes including the build. A quick check:
//! `cargo bench -p packetpipe-perf --bench peers -- --warm-up-time 0.5 --measurement-time 1`; one mode or size:
//! `cargo bench -p packetpipe-perf --bench peers -- peers/threads/4KiB`.
//!
//! # Targets (issue 10, item 4), same run
//!
//! - `packetpipe_write` and `packetpipe_buffer_mut` <= 0.8x the time of the best of `duplex` and
//!   `piper`, at every size, on threads and on tasks;
//! - <= 1.5x `memcpy` time at 64 KiB.
//!
//! Context switches per frame (issue 10, item 1: < 0.05 at 4 KiB and 64 KiB on threads; at 64 B
//! on tasks no more than piper's): `perf stat -e context-switches` over `examples/peers_stream.rs`.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

// Shared with examples/peers_stream.rs; its command-line parsing is unused here.
#[allow(dead_code)]
#[path = "peers/workloads.rs"]
mod workloads;

use workloads::{Mode, SIZES};

fn peers(c: &mut Criterion) {
    let runtime = workloads::runtime();
    for mode in Mode::ALL {
        for size in SIZES {
            let frames = workloads::frames_per_iteration(size);
            let mut group = c.benchmark_group(format!(
                "peers/{}/{}",
                mode.name(),
                workloads::size_label(size)
            ));
            group.throughput(Throughput::Elements(frames));
            for row in workloads::rows(mode) {
                group.bench_function(row, |b| {
                    b.iter_custom(|iters| workloads::run(mode, row, size, iters * frames, &runtime))
                });
            }
            group.finish();
        }
    }
}

criterion_group! {
    name = benches;
    // Defaults that the command line overrides (`-- --warm-up-time 0.5 --measurement-time 1`).
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = peers
}
criterion_main!(benches);
