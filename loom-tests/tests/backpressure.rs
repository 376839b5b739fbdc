#![cfg(packetpipe_loom)]
//! Backpressure: a flush pauses at the pause threshold and resumes below the resume threshold.

use loom::thread;
use packetpipe::pipe::PipeOptions;
use packetpipe_loom_tests::{block_on, pipe};

fn options() -> PipeOptions {
    PipeOptions {
        pause_threshold: 4,
        resume_threshold: 2,
        ..Default::default()
    }
}

/// A flush that reaches the pause threshold (4 bytes unexamined) waits until the reader examines
/// enough to drop below the resume threshold (2), and is then woken: the writer stays open and the
/// reader never completes, so a lost wakeup is a loom deadlock. The flush reports neither
/// completion nor cancellation, and the bytes of the next flush arrive after it.
fn paused_flush_resumes_model() {
    loom::model(|| {
        let (mut writer, mut reader) = pipe(options());
        let producer = thread::spawn(move || {
            writer.append(&b"abcd"[..]).unwrap();
            let first = block_on(writer.flush_pipe()).unwrap();
            assert!(!first.is_completed && !first.is_canceled, "{first:?}");
            writer.append(&b"e"[..]).unwrap();
            block_on(writer.flush_pipe()).unwrap();
            writer
        });
        let (got, completed) = packetpipe_loom_tests::read_to_end(&mut reader, 5);
        assert_eq!(got, b"abcde");
        assert!(!completed);
        drop(producer.join().unwrap());
    });
}

#[test]
#[cfg(not(packetpipe_mutant))]
fn paused_flush_resumes_when_reader_advances() {
    paused_flush_resumes_model();
}

/// A paused flush whose reader completes (without examining anything) returns with
/// `is_completed`; it is never left waiting.
///
/// The race this model rules out: were `PipeWriter::flush_status` to load the reader word twice
/// (once for `DONE`, once more inside `PipeState::must_wait`), a reader completing between the two
/// loads would make the flush return `Ok` with `is_completed == false`; it loads it once.
#[test]
#[cfg(not(packetpipe_mutant))]
fn reader_completion_wakes_paused_flush() {
    loom::model(|| {
        let (mut writer, mut reader) = pipe(options());
        let producer = thread::spawn(move || {
            writer.append(&b"abcd"[..]).unwrap();
            let result = block_on(writer.flush_pipe()).unwrap();
            assert!(result.is_completed, "{result:?}");
            assert!(!result.is_canceled, "{result:?}");
            writer
        });
        let len = block_on(reader.read_buffer()).unwrap().buffer.len();
        assert!(len > 0);
        reader.complete();
        drop(producer.join().unwrap());
    });
}

/// Mutant `no_recheck_flush`: a flush that pauses right after registering its waker misses an
/// advance that came in between and is never woken.
#[test]
#[cfg(packetpipe_mutant)]
#[should_panic(expected = "deadlock")]
fn mutant_no_recheck_flush() {
    paused_flush_resumes_model();
}

/// Mutant `flag_cleared_unlocked`: a wake that clears the waiting flag outside the slot's lock can
/// leave the flag set over an empty slot; the reader's next wait with the same waker then
/// registers nothing and is never woken.
#[test]
#[cfg(packetpipe_mutant)]
#[should_panic(expected = "deadlock")]
fn mutant_flag_cleared_unlocked() {
    paused_flush_resumes_model();
}
