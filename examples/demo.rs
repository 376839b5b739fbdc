//! The main job, end to end: a producer thread streams length-prefixed frames of mixed sizes
//! through a pipe to a parser on another thread, which takes each frame out (small ones copied into
//! fitted buffers, large ones shared) and checksums it.
//!
//! ```sh
//! cargo run --release --example demo            # 400 MB
//! cargo run --release --example demo -- 2000    # 2000 MB
//! ```
//!
//! Prints progress while running, then frames/s, MB/s, allocations per frame in steady state and
//! the pool's statistics. Exits non-zero if the reader's checksum differs from the writer's.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use packetpipe::pipe::{pipe_with, PipeOptions, PipeReader, PipeWriter};
use packetpipe::{ByteSegments, Pool};

/// Counts every allocation in the process.
struct CountingAllocator;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// Deterministic frame sizes and contents (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Mostly small frames, some medium, a few large: 16 B to 256 KiB.
    fn frame_len(&mut self) -> usize {
        let r = self.next();
        let (lo, hi) = match r % 100 {
            0..=49 => (16, 256),
            50..=84 => (256, 4096),
            85..=97 => (4096, 32 * 1024),
            _ => (32 * 1024, 256 * 1024),
        };
        lo + (r >> 8) as usize % (hi - lo)
    }
}

/// A word-at-a-time checksum of a frame (order-sensitive across frames).
fn mix(state: u64, bytes: &[u8]) -> u64 {
    let mut h = state ^ (bytes.len() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        h = (h ^ u64::from_le_bytes(w.try_into().expect("8 bytes")))
            .wrapping_mul(0x100_0000_01b3)
            .rotate_left(23);
    }
    for &b in words.remainder() {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// Shared progress counters, read by the reporting loop.
#[derive(Default)]
struct Progress {
    frames: AtomicU64,
    bytes: AtomicU64,
}

fn produce(mut writer: PipeWriter, total_bytes: u64) -> Result<(u64, u64), packetpipe::Error> {
    let mut rng = Rng(0x5eed_1234_abcd_ef01);
    let (mut sent, mut frames, mut checksum) = (0u64, 0u64, 0u64);
    while sent < total_bytes {
        let len = rng.frame_len();
        let space = writer.spare_mut(4 + len)?;
        space[..4].copy_from_slice(&(len as u32).to_be_bytes());
        let payload = &mut space[4..4 + len];
        let seed = rng.next();
        for (i, chunk) in payload.chunks_mut(8).enumerate() {
            let word = (seed ^ i as u64)
                .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                .to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
        checksum = mix(checksum, payload);
        writer.commit(4 + len)?;
        if writer.unflushed_len() >= 32 * 1024 {
            writer.flush_blocking()?;
        }
        sent += len as u64;
        frames += 1;
    }
    writer.complete(); // publishes the rest
    Ok((frames, checksum))
}

fn consume(
    mut reader: PipeReader,
    progress: &Progress,
    warm: &AtomicU64,
) -> Result<(u64, u64), String> {
    let (mut frames, mut checksum) = (0u64, 0u64);
    let mut need = 0usize; // bytes the next frame needs, when known
    loop {
        let result = if need > 0 {
            packetpipe::block_on(reader.read_at_least(need))
        } else {
            reader.read_blocking()
        };
        let result = result.map_err(|e| e.to_string())?;
        let (mut left, done) = (result.buffer.len(), result.is_completed);
        need = 0;
        while left >= 4 {
            let mut header = [0u8; 4];
            let buffer = reader.last_read().expect("just read").buffer;
            buffer
                .copy_prefix_to(&mut header)
                .map_err(|e| e.to_string())?;
            let len = u32::from_be_bytes(header) as usize;
            if left < 4 + len {
                need = 4 + len;
                break;
            }
            reader.take_frame(4).map_err(|e| e.to_string())?;
            let frame = reader.take_frame(len).map_err(|e| e.to_string())?;
            checksum = mix(checksum, &frame);
            left -= 4 + len;
            frames += 1;
            progress.frames.store(frames, Ordering::Relaxed);
            progress.bytes.fetch_add(len as u64, Ordering::Relaxed);
            if frames == 20_000 {
                warm.store(ALLOCATIONS.load(Ordering::Relaxed), Ordering::Relaxed);
            }
        }
        if done {
            if left != 0 {
                return Err(format!(
                    "stream ended inside a frame: {left} bytes left over"
                ));
            }
            return Ok((frames, checksum));
        }
        reader.advance_to(0, left).map_err(|e| e.to_string())?;
    }
}

fn main() {
    let megabytes: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(400);
    let total = megabytes * 1_000_000;
    let pool = Pool::new();
    let (writer, reader) = pipe_with(PipeOptions {
        pool: Some(pool.clone()),
        ..Default::default()
    });
    println!("packetpipe demo: streaming {megabytes} MB of length-prefixed frames (16 B .. 256 KiB) writer -> reader thread");

    let progress = Arc::new(Progress::default());
    let warm = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let producer = std::thread::spawn(move || produce(writer, total));
    let consumer = {
        let (progress, warm) = (progress.clone(), warm.clone());
        std::thread::spawn(move || consume(reader, &progress, &warm))
    };

    while !consumer.is_finished() {
        std::thread::sleep(Duration::from_millis(100));
        let bytes = progress.bytes.load(Ordering::Relaxed);
        let secs = start.elapsed().as_secs_f64();
        print!(
            "\r  {:>6} MB  {:>9} frames  {:>8.0} MB/s   ",
            bytes / 1_000_000,
            progress.frames.load(Ordering::Relaxed),
            bytes as f64 / 1e6 / secs
        );
        use std::io::Write;
        let _ = std::io::stdout().flush();
    }
    let elapsed = start.elapsed().as_secs_f64();
    let end_allocations = ALLOCATIONS.load(Ordering::Relaxed);
    println!();

    let (sent_frames, sent_sum) = match producer.join().expect("producer thread") {
        Ok(v) => v,
        Err(e) => {
            eprintln!("producer failed: {e}");
            std::process::exit(1);
        }
    };
    let (got_frames, got_sum) = match consumer.join().expect("consumer thread") {
        Ok(v) => v,
        Err(e) => {
            eprintln!("consumer failed: {e}");
            std::process::exit(1);
        }
    };
    let bytes = progress.bytes.load(Ordering::Relaxed);
    let warm_allocations = warm.load(Ordering::Relaxed);
    let steady_frames = got_frames.saturating_sub(20_000).max(1);
    println!(
        "frames      {got_frames} ({:.0} frames/s)",
        got_frames as f64 / elapsed
    );
    println!(
        "payload     {:.1} MB in {elapsed:.2} s ({:.0} MB/s)",
        bytes as f64 / 1e6,
        bytes as f64 / 1e6 / elapsed
    );
    println!(
        "allocations {:.4} per frame after warm-up ({} over the last {steady_frames} frames, whole process)",
        end_allocations.saturating_sub(warm_allocations) as f64 / steady_frames as f64,
        end_allocations.saturating_sub(warm_allocations)
    );
    let stats = pool.stats();
    println!(
        "pool        rents {} returns {} fresh {} outstanding {} retained {} KiB",
        stats.rents,
        stats.returns,
        stats.fresh_allocations,
        stats.outstanding,
        stats.retained_bytes / 1024
    );
    if sent_frames != got_frames || sent_sum != got_sum {
        eprintln!("CHECKSUM MISMATCH: wrote {sent_frames} frames (sum {sent_sum:016x}), read {got_frames} (sum {got_sum:016x})");
        std::process::exit(1);
    }
    println!("checksum    {got_sum:016x} OK ({sent_frames} frames written, {got_frames} read)");
}
