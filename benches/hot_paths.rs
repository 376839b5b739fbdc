//! Hot paths for the instruction-count guard (`scripts/instructions.sh`): each path runs `n` times,
//! so that instructions per operation = (count at `3n` - count at `n`) / `2n` under
//! `valgrind --tool=callgrind`, with setup and teardown cancelled out. Instruction counts do not
//! depend on what else the machine is doing, unlike times.
//!
//! ```text
//! target/release/deps/hot_paths-<hash> <path> <n>     # run one path n times
//! bash scripts/instructions.sh                       # all paths, compared with the budget file
//! ```
//!
//! Paths (64-byte payloads, one thread, default options unless said; a flush is one poll of
//! `poll_flush_pipe`, ready at once):
//!
//! - `rent_return`: `Pool::rent(64)` + drop, warm thread cache.
//! - `append_read_advance`: `append` of a static 64-byte packet, flush, `try_read`, `advance_to`.
//! - `write_flush_read_advance`: `write_slice` of 64 bytes, flush, `try_read`, `advance_to`.
//! - `flush_unpaused`: an 8-byte `write_slice` then a flush that does not pause (the reader keeps up).
//! - `decode_length_delimited`: one 64-byte frame (4-byte header) through `Frames<LengthDelimited>`
//!   (`iter_blocking`), the writer staging and flushing each frame.
//! - `decode_lines`: one 64-byte line (63 characters and `\n`) through `Frames<Lines>`, the same
//!   way.
//!
//! Run without arguments (as `cargo bench` does), it prints how to use it and exits.

use std::hint::black_box;
use std::task::{Context, Poll};

use bytes::Bytes;
use packetpipe::frame::{Frames, LengthDelimited, Lines};
use packetpipe::pipe::{pipe, pipe_with, PipeOptions, PipeReader, PipeWriter};
use packetpipe::Pool;

const PATHS: [&str; 6] = [
    "rent_return",
    "append_read_advance",
    "write_flush_read_advance",
    "flush_unpaused",
    "decode_length_delimited",
    "decode_lines",
];

fn read_advance(reader: &mut PipeReader) {
    let len = reader
        .try_read()
        .expect("open")
        .expect("flushed bytes are there")
        .buffer
        .len();
    reader.advance_to(len, len).expect("advance");
}

/// One poll of the flush with a waker that does nothing (what `.await` does when the flush is
/// ready at once; none of these paths pauses).
fn flush(writer: &mut PipeWriter) {
    let mut cx = Context::from_waker(futures::task::noop_waker_ref());
    match writer.poll_flush_pipe(&mut cx) {
        Poll::Ready(result) => assert!(!result.expect("flush").is_completed),
        Poll::Pending => unreachable!("these paths never pause"),
    }
}

fn run(path: &str, n: usize) {
    match path {
        "rent_return" => {
            let pool = Pool::new();
            for _ in 0..n {
                drop(black_box(pool.rent(64).expect("rent")));
            }
        }
        "append_read_advance" => {
            let (mut writer, mut reader) = pipe();
            let packet = Bytes::from_static(&[7; 64]);
            for _ in 0..n {
                writer.append(black_box(packet.clone())).expect("append");
                flush(&mut writer);
                read_advance(&mut reader);
            }
        }
        "write_flush_read_advance" => {
            let (mut writer, mut reader) = pipe();
            let data = [7u8; 64];
            for _ in 0..n {
                writer.write_slice(black_box(&data)).expect("write");
                flush(&mut writer);
                read_advance(&mut reader);
            }
        }
        "flush_unpaused" => {
            let (mut writer, mut reader) = pipe_with(PipeOptions {
                pause_threshold: 1 << 30,
                ..Default::default()
            });
            for i in 0..n {
                writer.write_slice(black_box(&[1u8; 8])).expect("write");
                flush(&mut writer);
                if i % 1024 == 1023 {
                    read_advance(&mut reader); // keep the pipe short; amortized over 1024 flushes
                }
            }
        }
        "decode_length_delimited" => {
            let (mut writer, reader) = pipe();
            let mut frames = Frames::new(reader, LengthDelimited::new());
            let mut frame = 60u32.to_be_bytes().to_vec();
            frame.extend([9u8; 60]);
            for _ in 0..n {
                writer.write_slice(black_box(&frame)).expect("write");
                flush(&mut writer);
                let packet = frames
                    .iter_blocking()
                    .next()
                    .expect("a frame")
                    .expect("decoded");
                assert_eq!(packet.len(), 60);
            }
        }
        "decode_lines" => decode_lines(n),
        _ => unreachable!("checked by the caller"),
    }
}

/// `decode_lines`, out of line so that adding it left the other paths' code (and counts) as they
/// were.
#[inline(never)]
fn decode_lines(n: usize) {
    let (mut writer, reader) = pipe();
    let mut frames = Frames::new(reader, Lines::new());
    let mut line = vec![b'x'; 63];
    line.push(b'\n');
    for _ in 0..n {
        writer.write_slice(black_box(&line)).expect("write");
        flush(&mut writer);
        let line = frames
            .iter_blocking()
            .next()
            .expect("a line")
            .expect("decoded");
        assert_eq!(line.len(), 63);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [path, n] if PATHS.contains(&path.as_str()) => {
            let n = n.parse().expect("n: a count");
            run(path, n);
        }
        _ => {
            println!("hot_paths: instruction-count guard; run `bash scripts/instructions.sh`");
            println!("usage: hot_paths <path> <n>; paths: {}", PATHS.join(", "));
        }
    }
}
