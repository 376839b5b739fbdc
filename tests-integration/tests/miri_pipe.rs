//! Small two-thread pipe tests, sized for Miri (`scripts/miri.sh`) and quick natively.
//!
//! They drive the unsafe core across threads: the segment queue's publication and node recycling
//! (`src/pipe/queue.rs`), writer and reader sharing pooled blocks (`src/block.rs`: the writer fills
//! a block's tail while the reader releases windows of its head), frames taken out by copy and by
//! sharing, and blocks going back to the pool from the other thread. No wall-clock timeouts: every
//! wait ends because the other side acts (flush, advance, completion, cancel).
//!
//! Frames per run: `MIRI_PIPE_FRAMES` (default 60 under Miri, 20,000 natively).

use std::thread;

use bytes::Bytes;
use packetpipe::pipe::{pipe_with, PipeOptions, PipeReader, PipeWriter};
use packetpipe::{Packet, Pool};

fn frames() -> u64 {
    std::env::var("MIRI_PIPE_FRAMES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if cfg!(miri) { 60 } else { 20_000 })
}

/// Small blocks and thresholds, so segments roll over and flushes pause every few frames.
fn small_pipe(pool: &Pool) -> (PipeWriter, PipeReader) {
    pipe_with(PipeOptions {
        pool: Some(pool.clone()),
        pause_threshold: 256,
        resume_threshold: 64,
        min_segment_size: 128,
        copy_threshold: 32,
    })
}

fn small_pool() -> Pool {
    Pool::with_options(packetpipe::PoolOptions {
        min_class_size: 64,
        max_class_size: 1024,
        thread_cache_depth: 2,
        ..packetpipe::PoolOptions::default()
    })
    .unwrap()
}

/// Payload length of frame `i`: 0 to 599 bytes, so some frames exceed the largest class (plain
/// allocations) and the copy threshold (shared, not copied).
fn frame_len(i: u64) -> usize {
    let x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40;
    match i % 5 {
        0 => 0,
        1 | 2 => (x % 24) as usize,
        3 => (x % 200) as usize,
        _ => (x % 600) as usize,
    }
}

fn payload(i: u64, len: usize) -> Vec<u8> {
    (0..len).map(|k| (i as usize * 31 + k) as u8).collect()
}

/// Write frame `i` (a 2-byte little-endian length, then the payload) in one of four ways.
fn write_frame(writer: &mut PipeWriter, pool: &Pool, i: u64) {
    let body = payload(i, frame_len(i));
    let header = (body.len() as u16).to_le_bytes();
    match i % 4 {
        0 => {
            writer.write_slice(&header).unwrap();
            writer.write_slice(&body).unwrap();
        }
        1 => {
            let n = header.len() + body.len();
            let space = writer.spare_mut(n).unwrap();
            space[..2].copy_from_slice(&header);
            space[2..n].copy_from_slice(&body);
            writer.commit(n).unwrap();
        }
        2 => {
            writer.write_slice(&header).unwrap();
            if !body.is_empty() {
                writer.append(pool.copy_from_slice(&body).unwrap()).unwrap();
            }
        }
        _ => {
            writer.append(Bytes::from(header.to_vec())).unwrap();
            writer.append(Packet::from(body)).unwrap();
        }
    }
}

/// Parse and take out every whole frame of the last read.
fn take_frames(reader: &mut PipeReader, next: &mut u64, kept: &mut Vec<(u64, Packet)>) {
    while let Some(buffer) = reader.last_read().map(|r| r.buffer) {
        if buffer.len() < 2 {
            break;
        }
        let len = packetpipe::ByteSegments::peek_le::<u16>(&buffer, 0).unwrap() as usize;
        if buffer.len() < 2 + len {
            break;
        }
        reader.take_frame(2).unwrap();
        let frame = reader.take_frame(len).unwrap();
        assert_eq!(
            &frame.to_vec()[..],
            &payload(*next, frame_len(*next))[..],
            "frame {next}"
        );
        // Keep a few frames alive past the pipe: their blocks go home when the test drops them.
        if *next % 7 == 0 {
            kept.push((*next, frame));
        }
        *next += 1;
    }
}

/// A writer thread streams length-prefixed frames through a small, often paused pipe; the reader
/// takes each frame out (copied or shared) and checks it. Every byte arrives once, in order; every
/// block goes back to the pool once the frames kept past the pipe are dropped.
#[test]
fn frames_stream_between_two_threads_under_backpressure() {
    let pool = small_pool();
    let (mut writer, mut reader) = small_pipe(&pool);
    let total = frames();
    let producer = thread::spawn({
        let pool = pool.clone();
        move || {
            for i in 0..total {
                write_frame(&mut writer, &pool, i);
                if i % 3 == 2 {
                    writer.flush_blocking().unwrap();
                }
            }
            writer.complete();
        }
    });
    let (mut next, mut kept) = (0u64, Vec::new());
    loop {
        let result = reader.read_blocking().unwrap();
        let done = result.is_completed;
        take_frames(&mut reader, &mut next, &mut kept);
        let left = reader.last_read().unwrap().buffer.len();
        assert!(!done || left == 0, "{left} bytes after the last frame");
        reader.advance_to(0, left).unwrap();
        if done {
            break;
        }
    }
    producer.join().unwrap();
    assert_eq!(next, total);
    drop(reader);
    for (i, frame) in &kept {
        assert_eq!(&frame.to_vec()[..], &payload(*i, frame_len(*i))[..]);
    }
    drop(kept);
    let stats = pool.stats();
    assert_eq!(
        (stats.rents, stats.outstanding),
        (stats.returns, 0),
        "{stats:?}"
    );
}

/// The reader stops half-way (completing while the writer may be paused) and the writer keeps
/// writing: the paused flush returns `is_completed`, later writes are discarded, and every block
/// goes home. A canceler on a third thread cancels a read that may be waiting.
#[test]
fn reader_completes_mid_stream_while_the_writer_is_paused() {
    let pool = small_pool();
    let (mut writer, mut reader) = small_pipe(&pool);
    let total = frames();
    let canceler = reader.canceler();
    let producer = thread::spawn({
        let pool = pool.clone();
        move || {
            let mut saw_completed = false;
            for i in 0..total {
                write_frame(&mut writer, &pool, i);
                let result = writer.flush_blocking().unwrap();
                saw_completed |= result.is_completed;
            }
            writer.complete();
            saw_completed
        }
    });
    let cancel = thread::spawn(move || canceler.cancel());
    let (mut next, mut kept) = (0u64, Vec::new());
    while next < total / 2 {
        let result = reader.read_blocking().unwrap();
        if result.is_completed {
            break;
        }
        take_frames(&mut reader, &mut next, &mut kept);
        let left = reader.last_read().unwrap().buffer.len();
        reader.advance_to(0, left).unwrap();
    }
    reader.complete();
    cancel.join().unwrap();
    let saw_completed = producer.join().unwrap();
    assert!(
        saw_completed || next == total,
        "flushes never saw the reader complete"
    );
    drop((reader, kept));
    let stats = pool.stats();
    assert_eq!(
        (stats.rents, stats.outstanding),
        (stats.returns, 0),
        "{stats:?}"
    );
}

/// A byte source that hands out at most a few bytes per read (a trickling peer), from a script.
struct Trickle {
    data: Vec<u8>,
    at: usize,
    step: u64,
}

impl std::io::Read for Trickle {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.step = self
            .step
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let n = ((self.step >> 33) % 97 + 1) as usize;
        let n = n.min(buf.len()).min(self.data.len() - self.at);
        buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// A byte sink that takes at most a few bytes per write (a socket that refuses part of a write),
/// shared with the test to read back what was written.
#[derive(Clone, Default)]
struct Partial {
    written: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    step: u64,
}

impl std::io::Write for Partial {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.step = self.step.wrapping_mul(6364136223846793005).wrapping_add(1);
        let n = ((self.step >> 33) % 61 + 1) as usize;
        let n = n.min(buf.len());
        self.written.lock().unwrap().extend_from_slice(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The inline connection's own paths, without a socket (so Miri runs them): a blocking
/// connection over an in-memory `(reader, writer)` pair echoes length-delimited frames. Reads
/// trickle in (frames span reads and the reader's blocks; its receive block is grown in place and
/// read into again from its start), writes are taken in part (a flush writes straight from its
/// block, and what the sink does not take goes through the output pipe), and small blocks make
/// frames roll over blocks. Every frame comes back once, in order, and every block goes home.
#[test]
fn inline_connection_echo_over_trickling_reads_and_partial_writes() {
    use packetpipe::frame::{FrameWriter, Frames, LengthDelimited};
    use packetpipe::io::{blocking, ConnectionOptions};

    let pool = small_pool();
    let count = frames().min(if cfg!(miri) { 40 } else { 5_000 });
    let mut request = Vec::new();
    for i in 0..count {
        let len = frame_len(i);
        request.extend((len as u32).to_be_bytes());
        request.extend(payload(i, len));
    }
    let sink = Partial::default();
    let written = sink.written.clone();
    let pipe = || PipeOptions {
        pool: Some(pool.clone()),
        min_segment_size: 128,
        copy_threshold: 32,
        ..Default::default()
    };
    let options = ConnectionOptions {
        input: pipe(),
        output: pipe(),
        ..Default::default()
    };
    let source = Trickle {
        data: request.clone(),
        at: 0,
        step: 7,
    };
    let (app, connection) = blocking::connection_with((source, sink), options);
    let mut frames = Frames::new(app.reader, LengthDelimited::new());
    let mut out = FrameWriter::new(app.writer, LengthDelimited::new());
    let mut echoed = 0;
    for frame in frames.iter_blocking() {
        packetpipe::block_on(out.send(frame.unwrap())).unwrap();
        echoed += 1;
    }
    assert_eq!(echoed, count);
    packetpipe::block_on(out.close()).unwrap();
    drop((frames, out));
    let end = packetpipe::block_on(connection).unwrap();
    assert_eq!(end.received, request.len() as u64);
    assert_eq!(end.sent, request.len() as u64);
    assert!(
        *written.lock().unwrap() == request,
        "the echo differs from the request"
    );
    assert_eq!(pool.stats().outstanding, 0);
}
