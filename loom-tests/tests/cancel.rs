#![cfg(packetpipe_loom)]
//! Cancellation of a pending read or flush from a third thread.

use loom::thread;
use packetpipe::pipe::PipeOptions;
use packetpipe::ByteSegments;
use packetpipe_loom_tests::{block_on, pipe};

/// A third thread cancels the reader's read while the writer flushes one byte: the read that is
/// waiting (or the next one, if none waits) returns `is_canceled`. Exactly one canceled result
/// comes out (the reader keeps reading until it has it and the byte, and a read after everyone is
/// done finds no cancel left), no cancel is lost and no read is left waiting (a loom deadlock).
fn cancel_read_model() {
    loom::model(|| {
        let (mut writer, mut reader) = pipe(PipeOptions {
            pause_threshold: 0,
            ..Default::default()
        });
        let canceler = reader.canceler();
        let cancel = thread::spawn(move || canceler.cancel());
        let producer = thread::spawn(move || {
            writer.append(&b"a"[..]).unwrap();
            block_on(writer.flush_pipe()).unwrap();
            writer
        });
        let mut canceled = 0;
        let mut got = Vec::new();
        while canceled == 0 || got.is_empty() {
            let result = block_on(reader.read_buffer()).unwrap();
            assert!(!result.is_completed);
            if result.is_canceled {
                canceled += 1;
            }
            let bytes = result.buffer.to_vec();
            got.extend_from_slice(&bytes);
            reader.advance_to(bytes.len(), bytes.len()).unwrap();
        }
        assert_eq!(canceled, 1, "one cancel, one canceled read");
        assert_eq!(got, b"a");
        cancel.join().unwrap();
        let writer = producer.join().unwrap();
        assert!(
            reader.try_read().unwrap().is_none(),
            "a second canceled read"
        );
        drop(writer);
    });
}

/// The lost cancel this model rules out (loom reports it as "deadlock", the reader asleep for
/// good): if `PipeReader::check` tested `cancel_read` with a Relaxed load right after `register`
/// stored the waiting flag, nothing would order that load after the flag store (the C++ model
/// allows it to read a stale `false`, and aarch64 does reorder it), while the canceler's `wake`
/// finds no waiter yet. The load is SeqCst, a re-check of the handshake like the others.
#[test]
#[cfg(not(packetpipe_mutant))]
fn cancel_pending_read_exactly_once() {
    cancel_read_model();
}

/// A third thread cancels the writer's flush, which is paused (4 bytes at pause threshold 4) or
/// just finishing because the reader advanced at the same time. Exactly one flush reports
/// `is_canceled`: the paused one, or else the next one; the data stays committed (the reader got it
/// all); nothing waits forever.
#[test]
#[cfg(not(packetpipe_mutant))]
fn cancel_pending_flush_exactly_once() {
    loom::model(|| {
        let (mut writer, mut reader) = pipe(PipeOptions {
            pause_threshold: 4,
            resume_threshold: 2,
            ..Default::default()
        });
        let canceler = writer.canceler();
        let cancel = thread::spawn(move || canceler.cancel());
        let producer = thread::spawn(move || {
            writer.append(&b"abcd"[..]).unwrap();
            let result = block_on(writer.flush_pipe()).unwrap();
            assert!(!result.is_completed);
            (writer, result.is_canceled)
        });
        let result = block_on(reader.read_buffer()).unwrap();
        assert_eq!(result.buffer.to_vec(), b"abcd");
        reader.advance_to(4, 4).unwrap();
        cancel.join().unwrap();
        let (mut writer, first_canceled) = producer.join().unwrap();
        // Not paused now (the reader examined everything): this flush returns at once, canceled
        // only if the cancel was not consumed by the first.
        let next = block_on(writer.flush_pipe()).unwrap();
        assert!(!next.is_completed);
        assert!(
            first_canceled != next.is_canceled,
            "canceled flushes: {first_canceled} then {}",
            next.is_canceled
        );
        assert!(
            !block_on(writer.flush_pipe()).unwrap().is_canceled,
            "a cancel reported twice"
        );
    });
}

/// Mutant `cancel_no_wake`: a cancel that sets the flag without waking leaves a waiting reader
/// asleep.
#[test]
#[cfg(packetpipe_mutant)]
#[should_panic(expected = "deadlock")]
fn mutant_cancel_no_wake() {
    cancel_read_model();
}
