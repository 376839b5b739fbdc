#![cfg(packetpipe_loom)]
//! `read_at_least` ended by something other than its bytes: a writer failing with fewer bytes
//! flushed, and a cancel.

use loom::thread;
use packetpipe::pipe::PipeOptions;
use packetpipe::ByteSegments;
use packetpipe::Error;
use packetpipe_loom_tests::{block_on, pipe};

/// The reader waits for 10 bytes; the writer flushes 3 and fails. Whenever the failure lands, the
/// wait ends with the writer's error (never a short buffer with neither flag, never a hang), and
/// the 3 bytes are still there for a plain read.
fn failing_writer_ends_read_at_least_model() {
    loom::model(|| {
        let (mut writer, mut reader) = pipe(PipeOptions {
            pause_threshold: 4,
            ..Default::default()
        });
        let producer = thread::spawn(move || {
            writer.append(&b"abc"[..]).unwrap();
            block_on(writer.flush_pipe()).unwrap();
            writer.complete_with_error("boom");
        });
        match block_on(reader.read_at_least(10)) {
            Err(Error::Peer {
                side: packetpipe::Side::Writer,
                ..
            }) => {}
            Err(other) => panic!("unexpected error {other:?}"),
            Ok(result) => panic!(
                "expected the writer's error, got {} bytes (completed {}, canceled {})",
                result.buffer.len(),
                result.is_completed,
                result.is_canceled
            ),
        }
        let bytes = block_on(reader.read_buffer()).unwrap().buffer.to_vec();
        assert_eq!(bytes, b"abc");
        producer.join().unwrap();
    });
}

#[test]
#[cfg(not(packetpipe_mutant))]
fn failing_writer_ends_read_at_least_with_its_error() {
    failing_writer_ends_read_at_least_model();
}

/// Mutant `short_read_at_least`: the read returns a short buffer with neither flag.
#[test]
#[cfg(packetpipe_mutant)]
#[should_panic(expected = "expected the writer's error")]
fn mutant_short_read_at_least() {
    failing_writer_ends_read_at_least_model();
}

/// A `read_at_least(10)` that lifted the writer's backpressure is canceled from another thread:
/// it returns `is_canceled` (with whatever is there), is not left waiting, and the lift ends:
/// the writer's next flush over the threshold pauses again until the reader advances.
#[test]
#[cfg(not(packetpipe_mutant))]
fn cancel_ends_read_at_least_and_its_lift() {
    loom::model(|| {
        let (mut writer, mut reader) = pipe(PipeOptions {
            pause_threshold: 2,
            resume_threshold: 1,
            ..Default::default()
        });
        let canceler = reader.canceler();
        let cancel = thread::spawn(move || canceler.cancel());
        let result = block_on(reader.read_at_least(10)).unwrap();
        assert!(result.is_canceled);
        assert!(result.buffer.is_empty());
        reader.advance_to(0, 0).unwrap();
        cancel.join().unwrap();
        let producer = thread::spawn(move || {
            writer.append(&b"abcd"[..]).unwrap();
            let flushed = block_on(writer.flush_pipe()).unwrap();
            assert!(!flushed.is_canceled && !flushed.is_completed);
            writer
        });
        let (got, _) = packetpipe_loom_tests::read_to_end(&mut reader, 4);
        assert_eq!(got, b"abcd");
        drop(producer.join().unwrap());
    });
}
