//! Soak test: many pipes at once on a multi-thread tokio runtime, with everything that can go wrong
//! going wrong at random, for a bounded time.
//!
//! Each round runs `SOAK_PIPES` pipes concurrently (default 48), all renting from one private
//! `Pool`. Per pipe, from a seeded RNG: small pause/resume thresholds, segment size and copy
//! threshold; length-prefixed frames of 1 B to 256 KiB written with `write_slice`, `buffer_mut` +
//! `advance` or `append` (pooled packets and `Bytes`); flushes and reads wrapped in short
//! `tokio::time::timeout`s, so futures are dropped mid-wait; `read_at_least` for the rest of a
//! frame; frames taken out with `take_frame` (copied or shared) and some kept past the pipe's
//! end; a third task firing the reader's and the writer's cancelers; the writer
//! completing cleanly, with an error, or dropped mid-stream; the reader completing early, with an
//! error, or dropped mid-stream.
//!
//! Frame `i` of pipe `p` has contents generated from `(p, i)`, so the reader checks every frame it
//! gets without the writer keeping a copy. After each pipe:
//! - if the writer completed cleanly (or was dropped: that completes it) and the reader read to
//!   the end, the reader got exactly the frames the writer committed, in order, each intact;
//! - otherwise the reader's bytes are a prefix of the writer's: frames `0..k` intact, then at most
//!   the start of frame `k`.
//!
//! At the end, once the frames kept past their pipes are checked and dropped,
//! `pool.stats().outstanding == 0`.
//!
//! Bounds: `SOAK_SECS` seconds of rounds (default 30; CI runs the default, set it higher for a
//! longer soak); the seed is new each run unless `SOAK_SEED` replays one (printed at the start).
//! Release builds only (`cargo test --release --test soak`): a debug build is too slow to reach
//! interesting volumes in that time.

use std::time::{Duration, Instant};

mod kit;

use kit::rng::{env_u64 as env, XorShiftStar as Rng};

use bytes::Bytes;
use packetpipe::pipe::{pipe_with, PipeCanceler, PipeOptions, PipeReader, PipeWriter};
use packetpipe::{ByteSegments, Error, Packet, Pool};
use tokio::time::timeout;

const MAX_FRAME: usize = 256 * 1024;

/// Length of frame `i` of pipe `seed`.
fn frame_len(seed: u64, i: u64) -> usize {
    Rng::new(seed ^ i.wrapping_mul(0xA24B_AED4_963E_E407)).size(MAX_FRAME)
}

/// Byte `k` of frame `i`'s payload in pipe `seed`.
fn frame_byte(seed: u64, i: u64, k: usize) -> u8 {
    (seed as usize ^ (i as usize).wrapping_mul(131) ^ k.wrapping_mul(7)) as u8 ^ (k >> 8) as u8
}

/// Frame `i` as sent: a 4-byte little-endian payload length, then the payload.
fn frame(seed: u64, i: u64) -> Vec<u8> {
    let len = frame_len(seed, i);
    let mut out = Vec::with_capacity(4 + len);
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.extend((0..len).map(|k| frame_byte(seed, i, k)));
    out
}

/// How a side ends.
#[derive(Clone, Copy, Debug, PartialEq)]
enum End {
    Complete,
    CompleteWithError,
    Drop,
}

fn pick_end(rng: &mut Rng) -> End {
    match rng.below(4) {
        0 => End::CompleteWithError,
        1 => End::Drop,
        _ => End::Complete,
    }
}

/// Write `data` in random pieces through `buffer_mut` + `advance`.
fn write_in_pieces(writer: &mut PipeWriter, data: &[u8], rng: &mut Rng) -> Result<(), Error> {
    let mut at = 0;
    while at < data.len() {
        let want = rng.size(data.len() - at);
        let space = writer.spare_mut(want)?;
        let n = want.min(space.len());
        space[..n].copy_from_slice(&data[at..at + n]);
        writer.commit(n)?;
        at += n;
    }
    Ok(())
}

/// What the writer did.
#[derive(Debug)]
struct Written {
    /// Frames committed in full (written; completion publishes anything staged).
    frames: u64,
    end: End,
    /// The writer stopped because a flush reported the reader gone.
    reader_gone: bool,
}

async fn write_side(
    mut writer: PipeWriter,
    seed: u64,
    pool: Pool,
    mut rng: Rng,
    budget: usize,
) -> Written {
    let end = pick_end(&mut rng);
    // Stop early (mid-stream) sometimes: the reader then sees a shorter stream.
    let stop_after = if rng.one_in(4) {
        rng.below(8)
    } else {
        u64::MAX
    };
    let (mut frames, mut bytes) = (0u64, 0usize);
    let mut reader_gone = false;
    while bytes < budget && frames < stop_after {
        let data = frame(seed, frames);
        let result = match rng.below(4) {
            0 => writer.write_slice(&data),
            1 => write_in_pieces(&mut writer, &data, &mut rng),
            2 => writer
                .write_slice(&data[..4])
                .and_then(|()| writer.append(pool.copy_from_slice(&data[4..]).expect("copy"))),
            _ => writer.append(Bytes::from(data.clone())),
        };
        if let Err(e) = result {
            panic!("pipe {seed:x}: write of frame {frames}: {e}");
        }
        frames += 1;
        bytes += data.len();
        if rng.one_in(3) {
            continue; // several frames per flush
        }
        // A short timeout drops the flush future mid-wait now and then: the bytes stay committed.
        let wait = Duration::from_micros(50 + rng.below(3000));
        match timeout(wait, writer.flush_pipe()).await {
            Err(_elapsed) => {}
            Ok(Ok(result)) if result.is_completed => {
                reader_gone = true;
                break;
            }
            Ok(Ok(_)) => {}
            Ok(Err(Error::Peer {
                side: packetpipe::Side::Reader,
                ..
            })) => {
                reader_gone = true;
                break;
            }
            Ok(Err(e)) => panic!("pipe {seed:x}: flush: {e}"),
        }
        if rng.one_in(16) {
            tokio::task::yield_now().await;
        }
    }
    match end {
        End::Complete => writer.complete(),
        End::CompleteWithError => writer.complete_with_error("soak writer error"),
        End::Drop => drop(writer),
    }
    Written {
        frames,
        end,
        reader_gone,
    }
}

/// What the reader saw.
#[derive(Debug)]
struct Received {
    frames: u64,
    /// Bytes of the next frame seen after the last whole one.
    partial: usize,
    /// Read until `is_completed` (or the writer's error after its bytes).
    to_the_end: bool,
    writer_error: bool,
    /// Frames kept past the pipe, with their index.
    kept: Vec<(u64, Packet)>,
}

async fn read_side(mut reader: PipeReader, seed: u64, mut rng: Rng) -> Received {
    let end = pick_end(&mut rng);
    let stop_after = if rng.one_in(4) {
        rng.below(10)
    } else {
        u64::MAX
    };
    let mut got = Received {
        frames: 0,
        partial: 0,
        to_the_end: false,
        writer_error: false,
        kept: Vec::new(),
    };
    let mut need = 4usize; // bytes wanted before the next parse makes progress
    loop {
        if got.frames >= stop_after {
            break;
        }
        let wait = Duration::from_micros(50 + rng.below(5000));
        let use_at_least = rng.one_in(2);
        let read = async {
            if use_at_least {
                reader.read_at_least(need).await.map(|r| r.is_completed)
            } else {
                reader.read_buffer().await.map(|r| r.is_completed)
            }
        };
        let completed = match timeout(wait, read).await {
            Err(_elapsed) => continue, // dropped mid-wait; nothing consumed
            Ok(Ok(completed)) => completed,
            Ok(Err(Error::Peer {
                side: packetpipe::Side::Writer,
                ..
            })) => {
                got.to_the_end = true;
                got.writer_error = true;
                break;
            }
            Ok(Err(e)) => panic!("pipe {seed:x}: read: {e}"),
        };
        // Take out every whole frame.
        loop {
            let buffer = reader.last_read().expect("a read completed").buffer;
            if buffer.len() < 4 {
                need = 4;
                break;
            }
            let mut header = [0u8; 4];
            buffer
                .slice(..4)
                .copy_prefix_to(&mut header)
                .expect("4 bytes");
            let len = u32::from_le_bytes(header) as usize;
            let expected_len = frame_len(seed, got.frames);
            assert_eq!(
                len, expected_len,
                "pipe {seed:x}: frame {} length",
                got.frames
            );
            if buffer.len() < 4 + len {
                need = 4 + len;
                break;
            }
            reader.take_frame(4).expect("header");
            let payload = reader.take_frame(len).expect("payload");
            check_payload(seed, got.frames, &payload.to_vec(), len);
            if rng.one_in(50) && got.kept.len() < 4 {
                got.kept.push((got.frames, payload));
            }
            got.frames += 1;
        }
        let left = reader.last_read().expect("a read completed").buffer;
        // The start of the next frame must be right too.
        let prefix = left.to_vec();
        check_partial(seed, got.frames, &prefix);
        got.partial = prefix.len();
        reader.advance_to(0, prefix.len()).expect("advance");
        if completed {
            got.to_the_end = true;
            break;
        }
    }
    match end {
        End::Complete => reader.complete(),
        End::CompleteWithError => reader.complete_with_error("soak reader error"),
        End::Drop => drop(reader),
    }
    got
}

#[track_caller]
fn check_payload(seed: u64, i: u64, payload: &[u8], len: usize) {
    assert_eq!(payload.len(), len, "pipe {seed:x}: frame {i} length");
    if let Some(k) = (0..len).find(|&k| payload[k] != frame_byte(seed, i, k)) {
        panic!("pipe {seed:x}: frame {i} differs at byte {k} of {len}");
    }
}

/// `bytes` must be the start of frame `i` (header included).
#[track_caller]
fn check_partial(seed: u64, i: u64, bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    let expected = frame(seed, i);
    assert!(
        bytes.len() < expected.len() && bytes == &expected[..bytes.len()],
        "pipe {seed:x}: {} bytes after frame {} are not the start of the next frame",
        bytes.len(),
        i
    );
}

async fn cancel_side(read_canceler: PipeCanceler, flush_canceler: PipeCanceler, mut rng: Rng) {
    for _ in 0..rng.below(4) {
        tokio::time::sleep(Duration::from_micros(rng.below(20_000))).await;
        if rng.one_in(2) {
            read_canceler.cancel();
        } else {
            flush_canceler.cancel();
        }
    }
}

/// What one pipe did: frames written and read, and the frames kept past its end.
struct PipeRun {
    written: u64,
    read: u64,
    kept: Vec<(u64, u64, Packet)>,
}

async fn one_pipe(pool: Pool, seed: u64) -> PipeRun {
    let mut rng = Rng::new(seed);
    let pause = rng.size(64 * 1024);
    let options = PipeOptions {
        pool: Some(pool.clone()),
        pause_threshold: pause,
        resume_threshold: rng.below(pause as u64 + 1) as usize,
        min_segment_size: rng.size(16 * 1024),
        copy_threshold: rng.size(8 * 1024),
    };
    let (writer, reader) = pipe_with(options);
    let (read_canceler, flush_canceler) = (reader.canceler(), writer.canceler());
    // Bytes to write: 64 KiB to 4 MiB, log-uniform.
    let budget = (64 << 10) + rng.size(4 << 20);
    let write = tokio::spawn(write_side(writer, seed, pool, rng.clone(), budget));
    rng.next();
    let read = tokio::spawn(read_side(reader, seed, rng.clone()));
    rng.next();
    let cancel = tokio::spawn(cancel_side(read_canceler, flush_canceler, rng));
    let written = write.await.expect("writer task");
    let received = read.await.expect("reader task");
    cancel.await.expect("canceler task");

    assert!(
        received.frames <= written.frames,
        "pipe {seed:x}: more frames read than written: {received:?} {written:?}"
    );
    let clean = matches!(written.end, End::Complete | End::Drop) && !written.reader_gone;
    if clean && received.to_the_end {
        assert!(!received.writer_error, "pipe {seed:x}");
        assert_eq!(
            (received.frames, received.partial),
            (written.frames, 0),
            "pipe {seed:x}: a clean completion lost or cut frames: {written:?}"
        );
    }
    if written.end == End::CompleteWithError && received.to_the_end && !written.reader_gone {
        assert!(
            received.writer_error,
            "pipe {seed:x}: the writer's error never arrived"
        );
        assert_eq!(received.frames, written.frames, "pipe {seed:x}");
    }
    PipeRun {
        written: written.frames,
        read: received.frames,
        kept: received
            .kept
            .into_iter()
            .map(|(i, packet)| (seed, i, packet))
            .collect(),
    }
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "release only: cargo test --release --test soak"
)]
#[cfg_attr(miri, ignore = "a timed soak is not for Miri")]
fn soak_many_pipes_with_cancels_drops_and_errors() {
    let secs = env("SOAK_SECS", 30);
    let pipes = env("SOAK_PIPES", 48);
    let seed = kit::soak::seed();
    eprintln!("soak: {secs} s, {pipes} pipes per round, SOAK_SEED={seed}");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_time()
        .build()
        .expect("runtime");
    let pool = Pool::with_options(packetpipe::PoolOptions {
        max_class_size: 128 * 1024,
        ..packetpipe::PoolOptions::default()
    })
    .expect("pool");
    let deadline = Instant::now() + Duration::from_secs(secs);
    let (mut rounds, mut kept) = (0u64, Vec::new());
    let (mut written, mut read) = (0u64, 0u64);
    while rounds == 0 || Instant::now() < deadline {
        let round: Vec<_> = (0..pipes)
            .map(|p| {
                let pipe_seed = seed ^ (rounds << 20) ^ p;
                runtime.spawn(one_pipe(pool.clone(), pipe_seed))
            })
            .collect();
        for task in round {
            let run = runtime.block_on(task).expect("pipe task");
            written += run.written;
            read += run.read;
            // Keep a few frames across rounds: they outlive their pipes and the rounds after.
            kept.extend(run.kept);
        }
        kept.truncate(64);
        rounds += 1;
    }
    drop(runtime);
    for (seed, i, packet) in &kept {
        check_payload(*seed, *i, &packet.to_vec(), frame_len(*seed, *i));
    }
    drop(kept);
    let stats = pool.stats();
    eprintln!(
        "soak: {rounds} rounds of {pipes} pipes, {written} frames written, {read} read and \
         checked; pool {stats:?}"
    );
    assert_eq!(stats.outstanding, 0, "blocks not returned: {stats:?}");
    assert_eq!(stats.rents, stats.returns, "{stats:?}");
}
