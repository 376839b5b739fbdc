#![cfg(packetpipe_loom)]
//! Publish/read: the writer's flushes against a reader that may be waiting for them.

use loom::thread;
use packetpipe::pipe::PipeOptions;
use packetpipe_loom_tests::{block_on, pipe};

/// Bytes flushed over several flushes arrive complete and in order, and a reader waiting for them
/// is always woken by a flush. The writer stays open (the thread hands it back instead of dropping
/// it), so only the publish wake can end each wait: a lost wakeup is a loom deadlock.
fn flushes_arrive_in_order_model() {
    loom::model(|| {
        let (mut writer, mut reader) = pipe(PipeOptions {
            pause_threshold: 0,
            ..Default::default()
        });
        let producer = thread::spawn(move || {
            writer.append(&b"ab"[..]).unwrap();
            block_on(writer.flush_pipe()).unwrap();
            writer.append(&b"c"[..]).unwrap();
            block_on(writer.flush_pipe()).unwrap();
            writer
        });
        let (got, completed) = packetpipe_loom_tests::read_to_end(&mut reader, 3);
        assert_eq!(got, b"abc", "bytes lost, duplicated or reordered");
        assert!(!completed, "the writer is still open");
        drop(producer.join().unwrap());
    });
}

#[test]
#[cfg(not(packetpipe_mutant))]
fn flushes_arrive_in_order_and_wake_the_reader() {
    flushes_arrive_in_order_model();
}

/// Mutant `relaxed_publish`: with a Relaxed publish the reader can act on a byte count whose node
/// link it cannot see yet.
#[test]
#[cfg(packetpipe_mutant)]
#[should_panic(expected = "published bytes cover a node whose link is not visible")]
fn mutant_relaxed_publish() {
    flushes_arrive_in_order_model();
}

/// Mutant `no_recheck`: a reader that sleeps right after registering its waker misses a flush that
/// came in between and is never woken.
#[test]
#[cfg(packetpipe_mutant)]
#[should_panic(expected = "deadlock")]
fn mutant_no_recheck() {
    flushes_arrive_in_order_model();
}

/// Mutant `stale_registration`: a reader waiting again with the same waker skips registering
/// although the first flush's wake took its registration; the second flush then wakes nobody.
#[test]
#[cfg(packetpipe_mutant)]
#[should_panic(expected = "deadlock")]
fn mutant_stale_registration() {
    flushes_arrive_in_order_model();
}
