#![cfg(packetpipe_loom)]
//! Repeated pause/resume cycles driven by `take_frame`: each frame the reader takes out must let a
//! paused writer go on.

use loom::thread;
use packetpipe::pipe::PipeOptions;
use packetpipe_loom_tests::{block_on, pipe};

/// The writer flushes two 2-byte frames under a pause threshold of 2, so every flush pauses; the
/// reader waits for each frame with `read_at_least` and takes it out with `take_frame` (no
/// `advance_to`), which must wake the writer every time. A missed wake is a loom deadlock.
fn take_frame_resumes_paused_flushes_model() {
    loom::model(|| {
        let (mut writer, mut reader) = pipe(PipeOptions {
            pause_threshold: 2,
            resume_threshold: 1,
            ..Default::default()
        });
        let producer = thread::spawn(move || {
            for frame in [&b"ab"[..], &b"cd"[..]] {
                writer.append(frame).unwrap();
                let flushed = block_on(writer.flush_pipe()).unwrap();
                assert!(!flushed.is_completed && !flushed.is_canceled);
            }
            writer
        });
        let mut frames = Vec::new();
        for _ in 0..2 {
            block_on(reader.read_at_least(2)).unwrap();
            frames.push(reader.take_frame(2).unwrap().to_vec());
        }
        assert_eq!(frames, [b"ab", b"cd"]);
        drop(producer.join().unwrap());
    });
}

#[test]
#[cfg(not(packetpipe_mutant))]
fn take_frame_resumes_paused_flushes() {
    take_frame_resumes_paused_flushes_model();
}

/// Mutant `take_frame_no_wake`: frames taken without telling the writer leave it paused.
#[test]
#[cfg(packetpipe_mutant)]
#[should_panic(expected = "deadlock")]
fn mutant_take_frame_no_wake() {
    take_frame_resumes_paused_flushes_model();
}

/// Several frames taken from one read while the writer stays paused: the reader skips the wake
/// check for the frames that cannot lift the pause (the writer's published count only grows), and
/// must still wake it at the frame that brings the unexamined bytes under the resume threshold, in
/// each of two pause cycles (the second starts from the first cycle's skip point).
fn take_frame_skips_checks_only_while_the_writer_must_wait_model() {
    loom::model(|| {
        let (mut writer, mut reader) = pipe(PipeOptions {
            pause_threshold: 4,
            resume_threshold: 2,
            ..Default::default()
        });
        let producer = thread::spawn(move || {
            for frames in [&b"abcd"[..], &b"efgh"[..]] {
                writer.append(frames).unwrap();
                let flushed = block_on(writer.flush_pipe()).unwrap();
                assert!(!flushed.is_completed && !flushed.is_canceled);
            }
            writer
        });
        let mut frames = Vec::new();
        for _ in 0..2 {
            // A plain read (a `read_at_least` would lift the pause and wake the writer itself):
            // the writer's 4 bytes arrive in one flush.
            assert_eq!(block_on(reader.read_buffer()).unwrap().buffer.len(), 4);
            for _ in 0..4 {
                frames.push(reader.take_frame(1).unwrap()[0]);
            }
            reader.advance_to(0, 0).unwrap();
        }
        assert_eq!(frames, b"abcdefgh");
        drop(producer.join().unwrap());
    });
}

#[test]
#[cfg(not(packetpipe_mutant))]
fn take_frame_skips_checks_only_while_the_writer_must_wait() {
    take_frame_skips_checks_only_while_the_writer_must_wait_model();
}

/// Mutant `stale_no_wake`: the skip reaches past the frame that should resume the writer.
#[test]
#[cfg(packetpipe_mutant)]
#[should_panic(expected = "deadlock")]
fn mutant_stale_no_wake() {
    take_frame_skips_checks_only_while_the_writer_must_wait_model();
}
