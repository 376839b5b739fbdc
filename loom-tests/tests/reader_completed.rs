#![cfg(packetpipe_loom)]
//! The writer waiting for the reader's completion alone (`poll_reader_completed`, what an idle fill
//! pump waits on besides its socket) against the reader completing or being dropped; and a writer
//! far below its pause threshold (whose flushes do not load the reader's position) learning of
//! the completion.

use loom::thread;
use packetpipe::pipe::PipeOptions;
use packetpipe_loom_tests::{block_on, pipe};

/// The writer sleeps until the reader completes; the reader completes (or is dropped) at any point
/// of that. The wake is never lost: a lost one is a loom deadlock.
fn reader_completion_wakes_the_waiting_writer_model(drop_reader: bool) {
    loom::model(move || {
        let (mut writer, mut reader) = pipe(PipeOptions::default());
        let waiter = thread::spawn(move || {
            block_on(std::future::poll_fn(|cx| {
                writer.loom_poll_reader_completed(cx)
            }));
            assert!(block_on(writer.flush_pipe()).unwrap().is_completed);
            writer
        });
        if drop_reader {
            drop(reader.into_inner());
        } else {
            reader.complete();
        }
        drop(waiter.join().unwrap());
    });
}

#[test]
#[cfg(not(packetpipe_mutant))]
fn reader_completion_wakes_the_waiting_writer() {
    reader_completion_wakes_the_waiting_writer_model(false);
}

#[test]
#[cfg(not(packetpipe_mutant))]
fn reader_drop_wakes_the_waiting_writer() {
    reader_completion_wakes_the_waiting_writer_model(true);
}

/// A writer far below its pause threshold flushes while the reader completes; once it has seen the
/// completion (`poll_reader_completed`, through the read-mostly flag), its next flush reports
/// `is_completed`. The flag must go out after `DONE` is in the reader's word: the flush that sees
/// the flag reads the word for how the reader completed.
fn completion_reaches_an_unpaused_flush_model() {
    loom::model(|| {
        let (mut writer, mut reader) = pipe(PipeOptions::default());
        let producer = thread::spawn(move || {
            writer.append(&b"a"[..]).unwrap();
            let _ = block_on(writer.flush_pipe()).unwrap(); // before or after the completion
            block_on(std::future::poll_fn(|cx| {
                writer.loom_poll_reader_completed(cx)
            }));
            let after = block_on(writer.flush_pipe()).unwrap();
            assert!(after.is_completed, "{after:?}");
            writer
        });
        reader.complete();
        drop(producer.join().unwrap());
    });
}

#[test]
#[cfg(not(packetpipe_mutant))]
fn completion_reaches_an_unpaused_flush() {
    completion_reaches_an_unpaused_flush_model();
}

/// Mutant `done_flag_first`: the completion flag before the word.
#[test]
#[cfg(packetpipe_mutant)]
#[should_panic(expected = "is_completed: false")]
fn mutant_done_flag_first() {
    completion_reaches_an_unpaused_flush_model();
}
