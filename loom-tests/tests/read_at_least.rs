#![cfg(packetpipe_loom)]
//! `read_at_least` lifting backpressure.

use loom::thread;
use packetpipe::pipe::PipeOptions;
use packetpipe::ByteSegments;
use packetpipe_loom_tests::{block_on, pipe};

/// The reader waits for 6 bytes while the writer's first flush (4 bytes, the pause threshold)
/// would pause until the reader examines them: `read_at_least` lifts the pause (and wakes a flush
/// already paused), so the writer supplies the rest and the read returns all 6 bytes. Without the
/// lift both sides wait for each other: a loom deadlock. Afterwards backpressure applies again: the
/// second flush waits until the reader advances.
#[test]
fn read_at_least_lifts_backpressure() {
    loom::model(|| {
        let (mut writer, mut reader) = pipe(PipeOptions {
            pause_threshold: 4,
            resume_threshold: 2,
            ..Default::default()
        });
        let producer = thread::spawn(move || {
            writer.append(&b"abcd"[..]).unwrap();
            block_on(writer.flush_pipe()).unwrap();
            writer.append(&b"ef"[..]).unwrap();
            let second = block_on(writer.flush_pipe()).unwrap();
            assert!(!second.is_completed && !second.is_canceled, "{second:?}");
            writer
        });
        let result = block_on(reader.read_at_least(6)).unwrap();
        assert!(!result.is_completed && !result.is_canceled);
        assert_eq!(result.buffer.to_vec(), b"abcdef");
        reader.advance_to(6, 6).unwrap();
        drop(producer.join().unwrap());
    });
}

/// The writer wakes a reader waiting in `read_at_least(n)` only once n bytes are published. The
/// reader first waits for 4 bytes that arrive in two flushes, then for any new byte with a plain
/// read: neither wait may miss its wake (the second must not be skipped because the writer still
/// sees the first wait's target), whatever the interleaving.
#[test]
fn read_at_least_wake_filter_loses_no_wakeup() {
    loom::model(|| {
        let (mut writer, mut reader) = pipe(PipeOptions {
            pause_threshold: 0,
            ..Default::default()
        });
        let producer = thread::spawn(move || {
            for part in [&b"ab"[..], b"cd", b"e"] {
                writer.append(part).unwrap();
                block_on(writer.flush_pipe()).unwrap();
            }
            writer
        });
        let first = block_on(reader.read_at_least(4)).unwrap().buffer.to_vec();
        assert!(first.len() >= 4, "{first:?}");
        let len = first.len();
        reader.advance_to(len, len).unwrap();
        if len < 5 {
            let rest = block_on(reader.read_buffer()).unwrap().buffer.to_vec();
            assert_eq!(rest, b"e");
        }
        drop(producer.join().unwrap());
    });
}
