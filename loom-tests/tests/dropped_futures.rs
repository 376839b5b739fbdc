#![cfg(packetpipe_loom)]
//! Futures dropped while waiting (as in a `select!`) and the next one polled with another waker:
//! the new waker must be the one woken.

use packetpipe::ByteSegments;
use std::pin::pin;
use std::task::Poll;

use loom::thread;
use packetpipe::pipe::PipeOptions;
use packetpipe_loom_tests::{block_on, pipe, poll_once};

/// A read polled once (a waker that does nothing) and dropped while waiting, then a new read with
/// another waker: the writer's flush wakes the new one. A stale waker is a loom deadlock.
fn read_dropped_then_repolled_model() {
    loom::model(|| {
        let (mut writer, mut reader) = pipe(PipeOptions {
            pause_threshold: 0,
            ..Default::default()
        });
        let producer = thread::spawn(move || {
            writer.append(&b"ab"[..]).unwrap();
            block_on(writer.flush_pipe()).unwrap();
            writer
        });
        let first = {
            let mut read = pin!(reader.read_buffer());
            match poll_once(read.as_mut()) {
                Poll::Ready(result) => Some(result.unwrap().buffer.to_vec()),
                Poll::Pending => None, // dropped while waiting
            }
        };
        let got = match first {
            Some(bytes) => bytes,
            None => block_on(reader.read_buffer()).unwrap().buffer.to_vec(),
        };
        assert_eq!(got, b"ab");
        drop(producer.join().unwrap());
    });
}

/// A flush paused at the threshold, polled once and dropped, then a new flush with another waker:
/// the reader's advance wakes the new one.
fn flush_dropped_then_repolled_model() {
    loom::model(|| {
        let (mut writer, mut reader) = pipe(PipeOptions {
            pause_threshold: 2,
            resume_threshold: 1,
            ..Default::default()
        });
        let producer = thread::spawn(move || {
            writer.append(&b"abcd"[..]).unwrap();
            {
                let mut flush = pin!(writer.flush_pipe());
                let _ = poll_once(flush.as_mut()); // published; paused or not, then dropped
            }
            let result = block_on(writer.flush_pipe()).unwrap();
            assert!(!result.is_completed && !result.is_canceled, "{result:?}");
            writer
        });
        let (got, _) = packetpipe_loom_tests::read_to_end(&mut reader, 4);
        assert_eq!(got, b"abcd");
        drop(producer.join().unwrap());
    });
}

#[test]
#[cfg(not(packetpipe_mutant))]
fn read_dropped_while_waiting_then_repolled_with_another_waker() {
    read_dropped_then_repolled_model();
}

#[test]
#[cfg(not(packetpipe_mutant))]
fn flush_dropped_while_paused_then_repolled_with_another_waker() {
    flush_dropped_then_repolled_model();
}

/// Mutant `stale_waker`: a wait cell that keeps the first waker registered wakes the dropped
/// future's waker, and the new read sleeps forever.
#[test]
#[cfg(packetpipe_mutant)]
#[should_panic(expected = "deadlock")]
fn mutant_stale_waker() {
    read_dropped_then_repolled_model();
}
