#![cfg(packetpipe_loom)]
//! The writer waiting for the reader's completion alone (`poll_reader_completed`, what an idle fill
//! pump waits on besides its socket) against the reader completing or being dropped.

use loom::thread;
use packetpipe::pipe::PipeOptions;
use packetpipe_loom_tests::{block_on, pipe};

/// The writer sleeps until the reader completes; the reader completes (or is dropped) at any point
/// of that. The wake is never lost: a lost one is a loom deadlock.
fn reader_completion_wakes_the_waiting_writer_model(drop_reader: bool) {
    loom::model(move || {
        let (mut writer, mut reader) = pipe(PipeOptions::new());
        let waiter = thread::spawn(move || {
            block_on(std::future::poll_fn(|cx| writer.poll_reader_completed(cx)));
            assert!(writer.is_reader_completed());
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
