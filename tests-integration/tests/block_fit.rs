//! Blocks that fit: how much pooled memory a stream of frames of any size holds
//! per byte it carries.
//!
//! The workload: a deterministic, seeded stream of frames whose bodies are uniform in 1 B..=256 KiB,
//! each behind a 4-byte big-endian length header, through one pipe with its own [`Pool`] (so only
//! this pipe's blocks count), on one thread. The steady state is a sliding window: each step writes
//! and flushes one frame, then, while more than [`WINDOW`] frames are in flight, the consumer
//! finishes the oldest one; after the window first fills and [`WARMUP`] more steps, every step
//! samples
//!
//! ```text
//! held / in flight = PoolStats::outstanding_bytes / (header + body bytes of the frames in flight)
//! ```
//!
//! `outstanding_bytes` is the capacity of every block rented and not yet returned: the blocks
//! under the unconsumed segments, the writer's partly written block, and for the `take_frame`
//! consumers the blocks that kept frames pin. Free blocks cached by the pool (`retained_bytes`) are
//! not block waste and are printed apart. The figure is deterministic (no timing): the same seed
//! gives the same blocks.
//!
//! Paths (writer x consumer):
//! - `write_slice`: one `write_slice(header + body)` per frame;
//! - `buffer_mut`: `buffer_mut(4 + len)`, header and body written in place, `advance(4 + len)`;
//! - consumer `advance`: frames stay in the pipe until consumed (`advance_to` past the frame);
//! - consumer `take_frame`: each frame is taken out at once (`take_frame`: copied when <= the copy
//!   threshold or split over segments, shared otherwise) and the last [`WINDOW`] are kept.
//!
//! The second test runs frames of one size at a time, for sizes around every power of two from 64 B
//! to 256 KiB (at least [`MIN_WINDOW_BYTES`] in flight), and reports the worst size per path: the
//! mix averages the bad sizes away. Both tests assert the target, mean <= 1.3.
//!
//! Run `cargo test --release -p packetpipe-tests --test block_fit -- --nocapture --test-threads=1` to see the tables
//! (`BLOCK_FIT_VERBOSE=1`: every size of the sweep).

use packetpipe::ByteSegments;
use std::collections::VecDeque;

use packetpipe::pipe::{pipe_with, PipeOptions, PipeReader, PipeWriter};
use packetpipe::{Packet, Pool};

mod kit;

use kit::rng::SplitMix64 as Rng;

/// Largest frame body.
const MAX_BODY: usize = 256 * 1024;
/// Frames in flight in the steady state (about 4 MiB at a mean body of 128 KiB).
const WINDOW: usize = 32;
/// Steps after the window first fills before sampling starts.
const WARMUP: usize = 2 * WINDOW;
/// Sampled steps of the uniform mix: 1500, or `BLOCK_FIT_SAMPLES` (scripts/valgrind.sh takes
/// fewer: each step copies and checks a frame of 128 KiB on average).
fn uniform_samples() -> usize {
    std::env::var("BLOCK_FIT_SAMPLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1500)
}
/// Warm-up steps and samples per size of the fixed-size sweep (at most).
const FIXED_SAMPLES: usize = 256;
/// Bytes in flight at least, for the fixed-size sweep.
const MIN_WINDOW_BYTES: usize = 512 * 1024;
/// The bound the mean ratio must stay under.
const TARGET: f64 = 1.3;

#[derive(Clone, Copy, Debug, PartialEq)]
enum WritePath {
    WriteSlice,
    BufferMut,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Consume {
    Advance,
    TakeFrame,
}

/// Body bytes of frame `i`: a window of a fixed pattern starting at a per-frame offset, so a
/// misplaced or stale byte shows.
fn pattern() -> Vec<u8> {
    (0..MAX_BODY + 256)
        .map(|j| (j.wrapping_mul(31) ^ (j >> 8)) as u8)
        .collect()
}

fn body(pattern: &[u8], i: usize, len: usize) -> &[u8] {
    let start = (i * 7) % 256;
    &pattern[start..start + len]
}

#[derive(Debug)]
struct Fit {
    mean: f64,
    max: f64,
    /// Mean of (outstanding + retained) / in flight: with the pool's free caches.
    mean_with_cached: f64,
    samples: usize,
}

fn write_frame(writer: &mut PipeWriter, path: WritePath, scratch: &mut Vec<u8>, body: &[u8]) {
    let header = (body.len() as u32).to_be_bytes();
    match path {
        WritePath::WriteSlice => {
            scratch.clear();
            scratch.extend_from_slice(&header);
            scratch.extend_from_slice(body);
            writer.write_slice(scratch).unwrap();
        }
        WritePath::BufferMut => {
            let n = 4 + body.len();
            let space = writer.spare_mut(n).unwrap();
            assert!(space.len() >= n, "buffer_mut gave {} < {n}", space.len());
            space[..4].copy_from_slice(&header);
            space[4..n].copy_from_slice(body);
            writer.commit(n).unwrap();
        }
    }
    writer.flush_blocking().unwrap();
}

/// Check that the reader's buffer starts with frame `expected` and return its stream length.
fn check_front(reader: &mut PipeReader, expected: &[u8]) -> usize {
    let result = reader
        .try_read()
        .unwrap()
        .expect("a flushed frame is readable");
    let buffer = result.buffer;
    let n = 4 + expected.len();
    assert!(buffer.len() >= n, "buffer {} < frame {n}", buffer.len());
    let header: Vec<u8> = (0..4).map(|k| buffer.peek_be::<u8>(k).unwrap()).collect();
    assert_eq!(header, (expected.len() as u32).to_be_bytes());
    let mut at = 0usize; // offset into the frame (header included)
    for chunk in buffer.segments() {
        if at >= n {
            break;
        }
        let take = chunk.len().min(n - at);
        // The part of this chunk that is body: frame bytes [max(at, 4), at + take).
        let from = at.max(4);
        if from < at + take {
            assert_eq!(
                &chunk[from - at..take],
                &expected[from - 4..at + take - 4],
                "frame bytes {from}..{}",
                at + take
            );
        }
        at += take;
    }
    n
}

/// Frame bodies: uniform in 1..=MAX_BODY from a seed, or all of one length.
#[derive(Clone, Copy, Debug)]
enum Sizes {
    Uniform(u64),
    Fixed(usize),
}

impl Sizes {
    /// Frames in flight: [`WINDOW`], or enough frames for [`MIN_WINDOW_BYTES`] of small ones (so
    /// the two partly used blocks at the window's ends weigh little against what it carries).
    fn window(self) -> usize {
        match self {
            Sizes::Uniform(_) => WINDOW,
            Sizes::Fixed(len) => WINDOW.max(MIN_WINDOW_BYTES.div_ceil(4 + len)),
        }
    }
}

fn run(path: WritePath, consume: Consume, sizes: Sizes) -> Fit {
    let pool = Pool::new();
    let (mut writer, mut reader) = pipe_with(PipeOptions {
        pool: Some(pool.clone()),
        // One thread: the writer must never wait for the reader.
        pause_threshold: 0,
        ..Default::default()
    });
    let pattern = pattern();
    let mut rng = Rng(match sizes {
        Sizes::Uniform(seed) => seed,
        Sizes::Fixed(_) => 0,
    });
    let window = sizes.window();
    let mut scratch = Vec::with_capacity(MAX_BODY + 4);
    let mut in_flight: VecDeque<(usize, usize)> = VecDeque::new(); // (frame index, body len)
    let mut kept: VecDeque<Packet> = VecDeque::new();
    let mut in_flight_bytes = 0usize;
    let (mut sum, mut max, mut sum_cached, mut samples) = (0.0, 0.0f64, 0.0, 0usize);
    let (warmup, samples_wanted) = match sizes {
        Sizes::Uniform(_) => (WARMUP, uniform_samples()),
        // One size: the window's blocks repeat, a few hundred steps show the steady state.
        Sizes::Fixed(_) => (window.min(FIXED_SAMPLES), window.min(FIXED_SAMPLES)),
    };
    let steps = window + warmup + samples_wanted;

    for i in 0..steps {
        let len = match sizes {
            Sizes::Uniform(_) => 1 + rng.below(MAX_BODY as u64) as usize,
            Sizes::Fixed(len) => len,
        };
        write_frame(&mut writer, path, &mut scratch, body(&pattern, i, len));
        match consume {
            Consume::Advance => {
                in_flight.push_back((i, len));
                in_flight_bytes += 4 + len;
                while in_flight.len() > window {
                    let (j, len) = in_flight.pop_front().unwrap();
                    let n = check_front(&mut reader, body(&pattern, j, len));
                    reader.advance_to(n, n).unwrap();
                    in_flight_bytes -= n;
                }
            }
            Consume::TakeFrame => {
                let n = check_front(&mut reader, body(&pattern, i, len));
                let frame = reader.take_frame(n).unwrap();
                assert_eq!(frame.len(), n);
                assert_eq!(&frame[4..], body(&pattern, i, len));
                reader.advance_to(0, 0).unwrap(); // end this read: the buffer is empty now
                kept.push_back(frame);
                in_flight_bytes += n;
                while kept.len() > window {
                    in_flight_bytes -= kept.pop_front().unwrap().len();
                }
            }
        }
        if i >= window + warmup {
            let stats = pool.stats();
            let ratio = stats.outstanding_bytes as f64 / in_flight_bytes as f64;
            sum += ratio;
            max = max.max(ratio);
            sum_cached +=
                (stats.outstanding_bytes + stats.retained_bytes) as f64 / in_flight_bytes as f64;
            samples += 1;
        }
    }
    drop((writer, reader, kept));
    let stats = pool.stats();
    assert_eq!(
        (stats.outstanding, stats.outstanding_bytes),
        (0, 0),
        "{stats:?}"
    );
    Fit {
        mean: sum / samples as f64,
        max,
        mean_with_cached: sum_cached / samples as f64,
        samples,
    }
}

#[test]
fn pooled_bytes_held_per_byte_in_flight() {
    let seed = 0x5eed_0010;
    let cases = [
        (WritePath::WriteSlice, Consume::Advance),
        (WritePath::BufferMut, Consume::Advance),
        (WritePath::WriteSlice, Consume::TakeFrame),
        (WritePath::BufferMut, Consume::TakeFrame),
    ];
    println!(
        "block fit: bodies uniform 1 B..=256 KiB + 4 B header, {WINDOW} frames in flight, \
         {} samples after {WARMUP} warm-up steps, seed {seed:#x}",
        uniform_samples()
    );
    println!(
        "| write path | consumer | held / in flight, mean | max | with cached free blocks, mean |"
    );
    println!("|---|---|---:|---:|---:|");
    let mut results = Vec::new();
    for (path, consume) in cases {
        let fit = run(path, consume, Sizes::Uniform(seed));
        println!(
            "| {path:?} | {consume:?} | {:.3} | {:.3} | {:.3} |",
            fit.mean, fit.max, fit.mean_with_cached
        );
        assert_eq!(fit.samples, uniform_samples());
        assert!(fit.mean >= 1.0, "blocks hold at least the bytes: {fit:?}");
        results.push((path, consume, fit));
    }
    for (path, consume, fit) in results {
        assert!(
            fit.mean <= TARGET,
            "{path:?} + {consume:?}: pooled bytes held per byte in flight {:.3} > {TARGET}",
            fit.mean
        );
    }
}

/// Body lengths for the sweep: around every power of two from 64 B to 256 KiB (the header making
/// the frame just fit, or just not fit, a power of two) and between them.
fn sweep_lengths() -> Vec<usize> {
    let mut lengths = Vec::new();
    for k in 6..=18 {
        let p = 1usize << k;
        for len in [
            p - 4,
            p - 3,
            p + p / 4 - 3,
            p + p / 3,
            p + p / 2 - 3,
            p + 3 * p / 4 - 3,
        ] {
            if (1..=MAX_BODY).contains(&len) {
                lengths.push(len);
            }
        }
    }
    lengths
}

/// Frames of one size, for sizes across the range: the worst size per path, which the uniform mix
/// averages away (a 4 KiB + 4 B frame in an 8 KiB block).
#[test]
fn pooled_bytes_held_per_byte_in_flight_fixed_sizes() {
    let cases = [
        (WritePath::WriteSlice, Consume::Advance),
        (WritePath::BufferMut, Consume::Advance),
        (WritePath::BufferMut, Consume::TakeFrame),
    ];
    println!("block fit, fixed body sizes (header 4 B), >= {MIN_WINDOW_BYTES} B in flight");
    println!("| write path | consumer | worst body size | held / in flight there (mean) | mean over sizes |");
    println!("|---|---|---:|---:|---:|");
    let mut worst_all = Vec::new();
    for (path, consume) in cases {
        let mut worst = (0usize, 0.0f64);
        let mut total = 0.0;
        let lengths = sweep_lengths();
        for &len in &lengths {
            let fit = run(path, consume, Sizes::Fixed(len));
            if std::env::var_os("BLOCK_FIT_VERBOSE").is_some() {
                println!(
                    "  {path:?} {consume:?} body {len}: {:.3} (max {:.3})",
                    fit.mean, fit.max
                );
            }
            total += fit.mean;
            if fit.mean > worst.1 {
                worst = (len, fit.mean);
            }
        }
        println!(
            "| {path:?} | {consume:?} | {} | {:.3} | {:.3} |",
            worst.0,
            worst.1,
            total / lengths.len() as f64
        );
        worst_all.push((path, consume, worst));
    }
    for (path, consume, (len, ratio)) in worst_all {
        assert!(
            ratio <= TARGET,
            "{path:?} + {consume:?}: {ratio:.3} pooled bytes held per byte in flight at body \
             {len} B > {TARGET}"
        );
    }
}
