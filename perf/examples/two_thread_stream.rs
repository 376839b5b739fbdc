//! Streams frames from a writer thread to a reader thread through the blocking API, for measuring
//! how often the two sides sleep: run it under `perf stat -e context-switches`.
//!
//! ```text
//! GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=2000000 \
//!     perf stat -e context-switches cargo run --release -p packetpipe-perf --example two_thread_stream -- 4096 78000
//! ```
//!
//! Arguments: frame size in bytes (default 4096) and frame count (default 100,000). The writer
//! stages each frame with `write_slice` and calls `flush_blocking` (default options: frames of
//! 64 KiB pause it at every flush); the reader loops `read_blocking` -> `advance_to(len, len)`.
//! Prints the time per frame; the context switches per frame are perf's count over the frames.

use std::time::Instant;

fn main() -> Result<(), packetpipe::Error> {
    let mut args = std::env::args().skip(1);
    let size: usize = args.next().map_or(4096, |a| a.parse().expect("frame size"));
    let frames: usize = args
        .next()
        .map_or(100_000, |a| a.parse().expect("frame count"));
    let (mut writer, mut reader) = packetpipe::pipe::pipe();
    let start = Instant::now();
    let producer = std::thread::spawn(move || -> Result<(), packetpipe::Error> {
        let frame = vec![7u8; size];
        for _ in 0..frames {
            writer.write_slice(&frame)?;
            writer.flush_blocking()?;
        }
        Ok(())
    });
    let mut received = 0;
    loop {
        let result = reader.read_blocking()?;
        let (len, done) = (result.buffer.len(), result.is_completed);
        reader.advance_to(len, len)?;
        received += len;
        if done {
            break;
        }
    }
    producer.join().expect("the writer thread")?;
    assert_eq!(received, size * frames, "bytes lost or duplicated");
    let per_frame = start.elapsed().as_nanos() as f64 / frames as f64;
    println!("{frames} frames of {size} B: {per_frame:.0} ns per frame");
    Ok(())
}
