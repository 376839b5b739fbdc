//! Memory a kept small frame costs: 1,000,000 frames taken with `take_frame` and kept in a
//! `Vec<Packet>`, against `Bytes::copy_from_slice` of the same frames kept in a `Vec<Bytes>`, at
//! 8, 16, 64, 200 and 1,000 bytes; then what a kept frame pins when the frames around it are
//! dropped as taken (one kept in each 1 KiB's worth, the shared copy block's size).
//!
//! Two measures per frame, each of one run in a fresh process (so no run reuses memory another
//! freed):
//!
//! - *heap*: the vector's slot (`size_of` the element) plus every allocation made while taking
//!   or copying the frames (counted by a global allocator), each at its glibc chunk size: the
//!   request plus the 8-byte chunk header, rounded up to 16, at least 32 bytes;
//! - *RSS*: growth of the resident set (`/proc/self/statm`) over the same work, the vector's
//!   pages included.
//!
//! ```text
//! cargo run --release -p packetpipe-perf --example retained_frames            # the table
//! cargo run --release -p packetpipe-perf --example retained_frames -- packet 64 1000000   # one run
//! cargo run --release -p packetpipe-perf --example retained_frames -- sparse 64 1000000   # one kept per 1 KiB taken
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use packetpipe::pipe::{pipe_with, PipeOptions};
use packetpipe::{Packet, Pool};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static REQUESTED: AtomicU64 = AtomicU64::new(0);
static CHUNKS: AtomicU64 = AtomicU64::new(0);

/// glibc's chunk for a request of `size` bytes (64-bit): size plus the 8-byte header, rounded up
/// to 16, at least 32.
fn chunk(size: usize) -> u64 {
    (((size + 8 + 15) & !15).max(32)) as u64
}

fn count(size: usize) {
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    REQUESTED.fetch_add(size as u64, Ordering::Relaxed);
    CHUNKS.fetch_add(chunk(size), Ordering::Relaxed);
}

// SAFETY: every method forwards to `System` with the caller's arguments; counting touches atomics
// only, which do not allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: forwarded from the caller, who upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: as `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: as `alloc`; `ptr` came from `System` through this allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as `realloc`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Resident bytes of this process.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|f| f.parse().ok())
        .expect("statm's resident field");
    pages * 4096
}

/// What a run measured, per frame.
struct PerFrame {
    allocations: f64,
    heap: f64,
    rss: f64,
}

/// Counters and RSS around `work`, which keeps `frames` frames, with the element size `slot`.
fn measure(frames: usize, slot: usize, work: impl FnOnce()) -> PerFrame {
    let (a, c) = (
        ALLOCATIONS.load(Ordering::Relaxed),
        CHUNKS.load(Ordering::Relaxed),
    );
    let resident = rss();
    work();
    let n = frames as f64;
    PerFrame {
        allocations: (ALLOCATIONS.load(Ordering::Relaxed) - a) as f64 / n,
        heap: slot as f64 + (CHUNKS.load(Ordering::Relaxed) - c) as f64 / n,
        rss: rss().saturating_sub(resident) as f64 / n,
    }
}

/// Frames per write-flush-read round.
const ROUND: usize = 1000;

fn run_packet(size: usize, frames: usize) -> PerFrame {
    run_packet_keeping(size, frames, 1)
}

/// `run_packet` keeping one frame in `every` (the rest dropped as taken); per kept frame.
fn run_packet_keeping(size: usize, frames: usize, every: usize) -> PerFrame {
    let frame: Vec<u8> = (0..size).map(|i| i as u8).collect();
    let pool = Pool::new();
    let (mut writer, mut reader) = pipe_with(PipeOptions {
        pool: Some(pool.clone()),
        pause_threshold: 1 << 30,
        ..Default::default()
    });
    let mut kept: Vec<Packet> = Vec::with_capacity(frames);
    let mut left = frames;
    let mut rounds = Vec::new();
    while left > 0 {
        let n = left.min(ROUND);
        rounds.push(n);
        left -= n;
    }
    let result = measure(
        frames.div_ceil(every),
        std::mem::size_of::<Packet>(),
        || {
            // The pipe's own segments are counted too: a few, recycled from the second round on (the
            // frames are copied out of them), so they add little per frame.
            for n in rounds {
                for _ in 0..n {
                    writer.write_slice(&frame).unwrap();
                }
                writer.flush_blocking().unwrap();
                reader.read_blocking().unwrap();
                for i in 0..n {
                    let frame = reader.take_frame(size).unwrap();
                    if i % every == 0 {
                        kept.push(frame);
                    }
                }
                reader.advance_to(0, 0).unwrap();
            }
        },
    );
    assert!(kept.iter().all(|p| p[..] == frame[..]));
    result
}

fn run_bytes(size: usize, frames: usize) -> PerFrame {
    let frame: Vec<u8> = (0..size).map(|i| i as u8).collect();
    let mut kept: Vec<Bytes> = Vec::with_capacity(frames);
    let result = measure(frames, std::mem::size_of::<Bytes>(), || {
        for _ in 0..frames {
            kept.push(Bytes::copy_from_slice(std::hint::black_box(&frame)));
        }
    });
    assert!(kept.iter().all(|b| b[..] == frame[..]));
    result
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [kind, size, frames] = &args[..] {
        let (size, frames) = (size.parse().unwrap(), frames.parse().unwrap());
        let r = match kind.as_str() {
            "packet" => run_packet(size, frames),
            "bytes" => run_bytes(size, frames),
            // One kept frame in each shared block's worth (1 KiB / size): what a kept frame pins.
            "sparse" => run_packet_keeping(size, frames, (1024 / size).max(1)),
            other => panic!("unknown kind {other:?}: packet or bytes"),
        };
        println!("{} {} {}", r.allocations, r.heap, r.rss);
        return;
    }
    let frames: usize = args.first().map_or(1_000_000, |a| a.parse().unwrap());
    let exe = std::env::current_exe().unwrap();
    let one = |kind: &str, size: usize| -> [f64; 3] {
        let out = Command::new(&exe)
            .args([kind, &size.to_string(), &frames.to_string()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let v: Vec<f64> = text
            .split_whitespace()
            .map(|f| f.parse().unwrap())
            .collect();
        [v[0], v[1], v[2]]
    };
    println!("{frames} frames kept; bytes per frame (heap: slot + glibc chunks; RSS growth)");
    println!(
        "| frame | Packet allocs | Packet heap | Packet RSS | Bytes allocs | Bytes heap | Bytes RSS | heap ratio | RSS ratio |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for size in [8, 16, 64, 200, 1000] {
        let p = one("packet", size);
        let b = one("bytes", size);
        println!(
            "| {size} B | {:.3} | {:.0} | {:.0} | {:.3} | {:.0} | {:.0} | {:.2}x | {:.2}x |",
            p[0],
            p[1],
            p[2],
            b[0],
            b[1],
            b[2],
            p[1] / b[1],
            p[2] / b[2]
        );
    }
    println!();
    println!("One frame kept in each 1 KiB's worth taken (the rest dropped at once): bytes per kept frame");
    println!("| frame | Packet heap | Packet RSS | Bytes heap | heap ratio |");
    println!("|---:|---:|---:|---:|---:|");
    for size in [64, 200] {
        let p = one("sparse", size);
        let b = one("bytes", size);
        println!(
            "| {size} B | {:.0} | {:.0} | {:.0} | {:.2}x |",
            p[1],
            p[2],
            b[1],
            p[1] / b[1]
        );
    }
}
