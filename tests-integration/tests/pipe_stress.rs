//! Cross-thread stress of the pipe (its contract and its cross-thread ordering): a writer thread
//! and a reader thread stream length-prefixed frames (4-byte big-endian length, then the payload)
//! of random sizes from 1 B to 256 KiB, skewed towards small ones, and both compute a 64-bit
//! FNV-1a over all payloads in order; the sums, frame counts and byte counts must agree.
//!
//! - The writer stages each frame in one of several ways: `write`, one `buffer_mut` + `advance`,
//!   many small `buffer_mut` + partial `advance`s, or `append` of packets of every kind (pooled,
//!   `PacketBuf`, `Bytes`, `Vec`, static), a frame often split over several packets. It flushes
//!   after some frames (through the future, counting the flushes that had to wait, or
//!   `flush_blocking`). The last frame is never flushed: completing (or dropping) the writer must
//!   publish it, and the reader must not see the end before it.
//! - The reader parses in place from `read()` / `read_at_least()` buffers (header through the
//!   `Buf` cursor, payload through the chunks of a slice), or takes frames out with
//!   `take_frame` / `take_frame_chain`, and advances with `advance_to`, examining either the whole
//!   buffer or only part of it (then it waits with `read_at_least` for the bytes the next frame
//!   needs, which lifts backpressure for frames larger than the pause threshold).
//! - Variants:
//!   - small thresholds (pause 8 KiB, resume 4 KiB, 1 KiB segments): the writer keeps pausing
//!     (asserted: flushes had to wait);
//!   - lockstep (pause and resume at 1 byte, a flush after every frame, reader jitter): every
//!     flush waits until the reader has examined everything, so both sides go through their wait
//!     handshakes on nearly every frame;
//!   - slow reader (small thresholds, a parser three times slower): the writer pauses while the
//!     reader is busy advancing;
//!   - the default thresholds;
//!   - cancels (small thresholds plus a third thread firing the reader's and the writer's
//!     cancelers every few hundred microseconds): canceled results lose nothing
//!     (asserted: both sides saw some).
//! - Every variant uses its own pool, which must have every block back at the end.
//! - A watchdog fails the test if neither side makes progress for 60 s (a lost wakeup hangs).
//!
//! Frames per variant: `STRESS_FRAMES`, default 10^6 in release builds, 50,000 in debug builds
//! (half of that for lockstep, whose frames cost two thread wake-ups each).

use packetpipe::ByteSegments;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use packetpipe::pipe::{pipe_with, PipeOptions, PipeReader, PipeWriter};
use packetpipe::{Packet, Pool};

mod kit;

use kit::rng::SplitMix64 as Rng;
use kit::wake::block_on;

const MAX_FRAME: usize = 256 * 1024;
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

fn fnv(mut hash: u64, data: &[u8]) -> u64 {
    for &b in data {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(FNV_PRIME);
    }
    hash
}

fn frames_per_variant() -> u64 {
    std::env::var("STRESS_FRAMES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if cfg!(debug_assertions) {
            50_000
        } else {
            1_000_000
        })
}

/// A frame length: 90% 1-512 B, 9% 513 B-16 KiB, 1% 16-256 KiB, log-uniform within each band,
/// with the two extremes (1 B and 256 KiB) showing up now and then.
fn frame_len(rng: &mut Rng) -> usize {
    let (lo, hi) = match rng.below(1000) {
        0 => return 1,
        1 => return MAX_FRAME,
        2..=900 => (1.0f64, 512.0f64),
        901..=990 => (513.0, 16384.0),
        _ => (16385.0, MAX_FRAME as f64),
    };
    let u = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
    let len = (lo.ln() + u * (hi.ln() - lo.ln())).exp().round() as usize;
    len.clamp(lo as usize, hi as usize)
}

/// Random bytes with a static lifetime, for appending `&'static [u8]` and `Bytes::from_static`.
fn static_data() -> &'static [u8] {
    static DATA: OnceLock<&'static [u8]> = OnceLock::new();
    DATA.get_or_init(|| {
        let mut data = vec![0u8; 2 * MAX_FRAME];
        Rng(7).fill(&mut data);
        Box::leak(data.into_boxed_slice())
    })
}

#[derive(Default)]
struct Progress {
    frames_written: AtomicU64,
    frames_read: AtomicU64,
    done: AtomicBool,
}

#[derive(Debug, Default, PartialEq, Eq)]
struct Totals {
    frames: u64,
    payload_bytes: u64,
    checksum: u64,
}

#[derive(Debug, Default)]
struct WriterReport {
    totals: Totals,
    flushes: u64,
    flushes_waited: u64,
    flushes_canceled: u64,
    /// Bytes staged and not flushed when the writer completed.
    staged_at_completion: usize,
}

#[derive(Debug, Default)]
struct ReaderReport {
    totals: Totals,
    reads: u64,
    reads_waited: u64,
    reads_canceled: u64,
    frames_taken: u64,
}

// ------------------------------------------------------------------------------------------------
// Writer

fn append_kind(writer: &mut PipeWriter, pool: &Pool, rng: &mut Rng, data: &[u8]) {
    let packet: Packet = match rng.below(5) {
        0 => pool.copy_from_slice(data).unwrap(),
        1 => {
            let mut buf = pool.rent(data.len().max(1)).unwrap();
            buf.extend_from_slice(data).unwrap();
            buf.into()
        }
        2 => Bytes::copy_from_slice(data).into(),
        _ => data.to_vec().into(),
    };
    writer.append(packet).unwrap();
}

fn write_frames(
    mut writer: PipeWriter,
    pool: Pool,
    frames: u64,
    seed: u64,
    flush_every: u64,
    cancels: bool,
    progress: &Progress,
) -> WriterReport {
    let mut rng = Rng(seed);
    let mut report = WriterReport::default();
    let mut sum = FNV_OFFSET;
    let mut scratch = vec![0u8; 4 + MAX_FRAME];
    for i in 0..frames {
        let len = frame_len(&mut rng);
        let header = (len as u32).to_be_bytes();
        let last = i + 1 == frames;
        // The last frame stays in the write buffer, unflushed: completion must publish it.
        let method = if last { rng.below(3) } else { rng.below(7) };
        match method {
            // write(): header and payload, separately or at once.
            0 => {
                rng.fill(&mut scratch[4..4 + len]);
                sum = fnv(sum, &scratch[4..4 + len]);
                if rng.below(2) == 0 {
                    writer.write_slice(&header).unwrap();
                    writer.write_slice(&scratch[4..4 + len]).unwrap();
                } else {
                    scratch[..4].copy_from_slice(&header);
                    writer.write_slice(&scratch[..4 + len]).unwrap();
                }
            }
            // One buffer_mut for the whole frame, filled in place.
            1 => {
                let space = writer.spare_mut(4 + len).unwrap();
                assert!(space.len() >= 4 + len);
                space[..4].copy_from_slice(&header);
                rng.fill(&mut space[4..4 + len]);
                sum = fnv(sum, &space[4..4 + len]);
                writer.commit(4 + len).unwrap();
            }
            // Many small buffer_mut hints, each partly used.
            2 => {
                scratch[..4].copy_from_slice(&header);
                rng.fill(&mut scratch[4..4 + len]);
                sum = fnv(sum, &scratch[4..4 + len]);
                let mut done = 0;
                while done < 4 + len {
                    let hint = rng.below(if len > 4096 { 8192 } else { 64 }) as usize;
                    let space = writer.spare_mut(hint).unwrap();
                    assert!(space.len() >= hint.max(1));
                    let cap = 1 + rng.below(space.len() as u64) as usize;
                    let n = cap.min(4 + len - done);
                    space[..n].copy_from_slice(&scratch[done..done + n]);
                    writer.commit(n).unwrap();
                    done += n;
                }
            }
            // Static data: header written, payload appended as `&'static [u8]` / `Bytes`.
            3 => {
                let off = rng.below((static_data().len() - len) as u64) as usize;
                let payload: &'static [u8] = &static_data()[off..off + len];
                sum = fnv(sum, payload);
                writer.write_slice(&header).unwrap();
                if rng.below(2) == 0 {
                    writer.append(payload).unwrap();
                } else {
                    writer.append(Bytes::from_static(payload)).unwrap();
                }
            }
            // Appended packets of every kind, the frame split over one to three of them.
            _ => {
                scratch[..4].copy_from_slice(&header);
                rng.fill(&mut scratch[4..4 + len]);
                sum = fnv(sum, &scratch[4..4 + len]);
                let frame = &scratch[..4 + len];
                let parts = 1 + rng.below(3) as usize;
                let mut start = 0;
                for part in 0..parts {
                    let end = if part + 1 == parts {
                        frame.len()
                    } else {
                        start + rng.below((frame.len() - start) as u64 + 1) as usize
                    };
                    append_kind(&mut writer, &pool, &mut rng, &frame[start..end]);
                    start = end;
                }
            }
        }
        report.totals.frames += 1;
        report.totals.payload_bytes += len as u64;
        // Flush after one frame in `flush_every` on average (8: about 14 KB, above the small
        // pause threshold) and whenever 32 KiB are staged; never after the last frame, which
        // completion must publish.
        if !last && (rng.below(flush_every) == 0 || writer.unflushed_len() > 32 * 1024) {
            let result = if rng.below(4) == 0 {
                writer.flush_blocking().unwrap()
            } else {
                let (result, waited) = block_on(writer.flush_pipe());
                report.flushes_waited += u64::from(waited);
                result.unwrap()
            };
            report.flushes += 1;
            assert!(!result.is_completed, "the reader completed before the end");
            if result.is_canceled {
                assert!(cancels, "a flush was canceled although nobody cancels");
                report.flushes_canceled += 1;
            }
            progress.frames_written.store(i + 1, Ordering::Relaxed);
        }
    }
    report.totals.checksum = sum;
    report.staged_at_completion = writer.unflushed_len();
    assert!(report.staged_at_completion > 0);
    // Complete with whatever is still staged (explicitly, or by dropping the writer).
    if seed % 2 == 0 {
        writer.complete();
    }
    drop(writer);
    report
}

// ------------------------------------------------------------------------------------------------
// Reader

fn read_frames(
    mut reader: PipeReader,
    seed: u64,
    extra_passes: u32,
    jitter_ns: u64,
    cancels: bool,
    progress: &Progress,
) -> ReaderReport {
    let mut rng = Rng(seed);
    let mut report = ReaderReport::default();
    let mut sum = FNV_OFFSET;
    // Unconsumed bytes the next frame needs (its header, or header and payload).
    let mut need = 4usize;
    let mut at_least = false;
    loop {
        let (completed, canceled) = {
            let (result, waited) = match (at_least, rng.below(4)) {
                (false, 0) => (reader.read_blocking(), false),
                (false, _) => block_on(reader.read_buffer()),
                (true, 0) => (packetpipe::block_on(reader.read_at_least(need)), false),
                (true, _) => block_on(reader.read_at_least(need)),
            };
            report.reads += 1;
            report.reads_waited += u64::from(waited);
            let result = result.unwrap();
            (result.is_completed, result.is_canceled)
        };
        if canceled {
            assert!(cancels, "a read was canceled although nobody cancels");
            report.reads_canceled += 1;
        }
        // Parse every whole frame; `pos` counts bytes parsed in place and not yet consumed.
        let mut pos = 0;
        loop {
            let result = reader.last_read().expect("a read result");
            let buffer = result.buffer;
            let available = buffer.len() - pos;
            if available < 4 {
                need = 4;
                break;
            }
            let len = buffer.slice(pos..pos + 4).cursor().get_u32() as usize;
            assert!(
                (1..=MAX_FRAME).contains(&len),
                "frame length {len} is out of range"
            );
            if available < 4 + len {
                need = 4 + len;
                break;
            }
            match rng.below(5) {
                0 => {
                    // Take the frame out as a packet (after the bytes parsed in place).
                    if pos > 0 {
                        reader.take_frame(pos).unwrap();
                        pos = 0;
                    }
                    let header = reader.take_frame(4).unwrap();
                    assert_eq!(&header[..], &(len as u32).to_be_bytes());
                    let frame = reader.take_frame(len).unwrap();
                    assert_eq!(frame.len(), len);
                    sum = fnv(sum, &frame);
                    report.frames_taken += 1;
                }
                1 => {
                    // Take header and payload out as one chain.
                    if pos > 0 {
                        reader.take_frame_chain(pos).unwrap();
                        pos = 0;
                    }
                    let mut chain = reader.take_frame_chain(4 + len).unwrap();
                    assert_eq!(chain.len(), 4 + len);
                    assert_eq!(chain.get_u32() as usize, len);
                    while chain.has_remaining() {
                        let n = chain.chunk().len();
                        sum = fnv(sum, chain.chunk());
                        chain.advance(n);
                    }
                    report.frames_taken += 1;
                }
                _ => {
                    for chunk in buffer.slice(pos + 4..pos + 4 + len).segments() {
                        sum = fnv(sum, chunk);
                    }
                    pos += 4 + len;
                }
            }
            report.totals.frames += 1;
            report.totals.payload_bytes += len as u64;
            // A slow parser: hash the frame's bytes again (so the writer keeps hitting the pause
            // threshold while the reader is busy advancing).
            for _ in 0..extra_passes {
                let result = reader.last_read().expect("a read result");
                let consumed = result.buffer.slice(..pos);
                let mut h = FNV_OFFSET;
                for chunk in consumed.segments() {
                    h = fnv(h, chunk);
                }
                std::hint::black_box(h);
            }
        }
        let len = reader.last_read().expect("a read result").buffer.len();
        if completed {
            assert_eq!(pos, len, "the writer completed in the middle of a frame");
            break;
        }
        // Now and then the reader dawdles, so that the writer runs into the pause threshold even
        // when it is the slower side.
        match rng.below(64) {
            0..=7 => thread::yield_now(),
            8 => thread::sleep(Duration::from_micros(100)),
            _ => {}
        }
        // Either examine everything and wait for more, or examine part of it and wait for the
        // bytes the next frame needs (which lifts backpressure for large frames).
        at_least = rng.below(3) == 0;
        let examined = if at_least {
            pos + rng.below((len - pos) as u64 + 1) as usize
        } else {
            len
        };
        reader.advance_to(pos, examined).unwrap();
        // Jitter: now and then a short busy wait before the next read (up to about the time the
        // writer takes to wake up and publish again), so that the writer's next publish
        // sometimes lands while the reader is between checking for data and registering its
        // waker (the window a missing re-check would lose a wakeup in).
        if jitter_ns > 0 && rng.below(4) == 0 {
            let until = Instant::now() + Duration::from_nanos(rng.below(jitter_ns));
            while Instant::now() < until {
                std::hint::spin_loop();
            }
        }
        progress
            .frames_read
            .store(report.totals.frames, Ordering::Relaxed);
    }
    progress
        .frames_read
        .store(report.totals.frames, Ordering::Relaxed);
    report.totals.checksum = sum;
    if seed % 2 == 0 {
        reader.complete();
    }
    drop(reader);
    report
}

// ------------------------------------------------------------------------------------------------
// Driver

struct Variant {
    name: &'static str,
    options: PipeOptions,
    cancels: bool,
    /// Whether flushes must have waited (backpressure happened).
    expect_pauses: bool,
    /// The writer flushes after one frame in this many, on average.
    flush_every: u64,
    /// Extra passes the reader makes over the bytes it parses in place (a slow parser).
    reader_extra_passes: u32,
    /// Upper bound of a random busy wait after one `advance_to` in four (0: none).
    reader_jitter_ns: u64,
    /// This variant runs `STRESS_FRAMES / frames_divisor` frames (its frames cost more).
    frames_divisor: u64,
    seed: u64,
}

fn run(variant: Variant) {
    let frames = (frames_per_variant() / variant.frames_divisor).max(1);
    let pool = Pool::new();
    let (writer, reader) = pipe_with(PipeOptions {
        pool: Some(pool.clone()),
        ..variant.options
    });
    let (read_canceler, flush_canceler) = (reader.canceler(), writer.canceler());
    let progress = Arc::new(Progress::default());
    let start = Instant::now();

    let writer_thread = {
        let (pool, progress, cancels) = (pool.clone(), progress.clone(), variant.cancels);
        let (seed, flush_every) = (variant.seed, variant.flush_every);
        thread::Builder::new()
            .name("writer".into())
            .spawn(move || {
                write_frames(writer, pool, frames, seed, flush_every, cancels, &progress)
            })
            .unwrap()
    };
    let reader_thread = {
        let (progress, cancels) = (progress.clone(), variant.cancels);
        let seed = variant.seed.wrapping_mul(31);
        let (extra_passes, jitter_ns) = (variant.reader_extra_passes, variant.reader_jitter_ns);
        thread::Builder::new()
            .name("reader".into())
            .spawn(move || read_frames(reader, seed, extra_passes, jitter_ns, cancels, &progress))
            .unwrap()
    };
    let cancel_thread = variant.cancels.then(|| {
        let progress = progress.clone();
        thread::spawn(move || {
            let mut rng = Rng(99);
            let mut fired = 0u64;
            while !progress.done.load(Ordering::Relaxed) {
                thread::sleep(Duration::from_micros(50 + rng.below(400)));
                match rng.below(3) {
                    0 => read_canceler.cancel(),
                    1 => flush_canceler.cancel(),
                    _ => {
                        flush_canceler.cancel();
                        read_canceler.cancel();
                    }
                }
                fired += 1;
            }
            fired
        })
    });

    // Watchdog: fail if neither side makes progress for a minute (a lost wakeup hangs here).
    let mut last = (0, 0);
    let mut last_change = Instant::now();
    while !(writer_thread.is_finished() && reader_thread.is_finished()) {
        thread::sleep(Duration::from_millis(20));
        let now = (
            progress.frames_written.load(Ordering::Relaxed),
            progress.frames_read.load(Ordering::Relaxed),
        );
        if now != last {
            last = now;
            last_change = Instant::now();
        }
        assert!(
            last_change.elapsed() < Duration::from_secs(60),
            "{}: no progress for 60 s: {} frames written (flushed), {} read",
            variant.name,
            now.0,
            now.1
        );
    }
    let writer_report = writer_thread
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e));
    let reader_report = reader_thread
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e));
    progress.done.store(true, Ordering::Relaxed);
    let fired = cancel_thread.map(|t| t.join().unwrap());
    let elapsed = start.elapsed();

    println!(
        "{}: {} frames, {:.1} MB in {:.2?}; writer {:?}; reader {:?}; cancels fired {:?}",
        variant.name,
        reader_report.totals.frames,
        reader_report.totals.payload_bytes as f64 / 1e6,
        elapsed,
        writer_report,
        reader_report,
        fired
    );
    assert_eq!(writer_report.totals.frames, frames);
    assert_eq!(
        reader_report.totals, writer_report.totals,
        "{}: reader and writer disagree",
        variant.name
    );
    if frames >= 10_000 {
        assert!(reader_report.frames_taken > 0);
    }
    if variant.expect_pauses && frames >= 10_000 {
        assert!(
            writer_report.flushes_waited > 0,
            "{}: no flush ever waited",
            variant.name
        );
    }
    if variant.cancels && frames >= 50_000 {
        assert!(
            writer_report.flushes_canceled > 0 && reader_report.reads_canceled > 0,
            "{}: cancels fired but no canceled result was seen",
            variant.name
        );
    }
    let stats = pool.stats();
    assert_eq!(stats.rents, stats.returns, "{}: {stats:?}", variant.name);
    assert_eq!(stats.outstanding, 0, "{}: {stats:?}", variant.name);
}

fn small_thresholds() -> PipeOptions {
    PipeOptions {
        pause_threshold: 8 * 1024,
        resume_threshold: 4 * 1024,
        min_segment_size: 1024,
        ..Default::default()
    }
}

#[test]
fn stress_small_thresholds() {
    run(Variant {
        name: "small thresholds",
        options: small_thresholds(),
        cancels: false,
        expect_pauses: true,
        flush_every: 8,
        reader_extra_passes: 0,
        reader_jitter_ns: 0,
        frames_divisor: 1,
        seed: 1,
    });
}

/// Pause at the first unexamined byte: every flush waits until the reader has examined everything,
/// so writer and reader take turns and every frame goes through both wait handshakes (a wakeup
/// lost in either hangs the pipe, which the watchdog reports).
#[test]
fn stress_lockstep() {
    run(Variant {
        name: "lockstep",
        options: PipeOptions {
            pause_threshold: 1,
            resume_threshold: 1,
            min_segment_size: 1024,
            ..Default::default()
        },
        cancels: false,
        expect_pauses: true,
        flush_every: 1,
        reader_extra_passes: 0,
        reader_jitter_ns: 60_000,
        frames_divisor: 2,
        seed: 4,
    });
}

/// Small thresholds and a reader slower than the writer: the writer pauses at nearly every flush
/// while the reader is busy advancing (the pause/resume handshake under contention).
#[test]
fn stress_slow_reader() {
    run(Variant {
        name: "slow reader",
        options: small_thresholds(),
        cancels: false,
        expect_pauses: true,
        flush_every: 2,
        reader_extra_passes: 3,
        reader_jitter_ns: 0,
        frames_divisor: 1,
        seed: 5,
    });
}

#[test]
fn stress_default_thresholds() {
    run(Variant {
        name: "default thresholds",
        options: PipeOptions::default(),
        cancels: false,
        expect_pauses: false,
        flush_every: 8,
        reader_extra_passes: 0,
        reader_jitter_ns: 0,
        frames_divisor: 1,
        seed: 2,
    });
}

#[test]
fn stress_with_cancels() {
    run(Variant {
        name: "cancels",
        options: PipeOptions {
            copy_threshold: 512,
            ..small_thresholds()
        },
        cancels: true,
        expect_pauses: true,
        flush_every: 8,
        reader_extra_passes: 0,
        reader_jitter_ns: 0,
        frames_divisor: 1,
        seed: 3,
    });
}
