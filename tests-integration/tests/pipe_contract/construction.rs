//! Construction: both ends `Send`, neither `Clone`; options.

use super::*;

/// Compiles only if `T` does not implement `Clone` (the call is ambiguous otherwise).
trait AmbiguousIfClone<A> {
    fn some_item() {}
}
impl<T> AmbiguousIfClone<()> for T {}
#[allow(dead_code)]
struct IsClone;
impl<T: Clone> AmbiguousIfClone<IsClone> for T {}

const _: fn() = || {
    let _ = <PipeWriter as AmbiguousIfClone<_>>::some_item;
    let _ = <PipeReader as AmbiguousIfClone<_>>::some_item;
};

fn assert_send<T: Send>() {}
fn assert_send_sync_clone<T: Send + Sync + Clone>() {}

#[test]
fn both_ends_are_send_and_neither_is_clone() {
    // Not `Clone`: checked at compile time by the `AmbiguousIfClone` constant above.
    assert_send::<PipeWriter>();
    assert_send::<PipeReader>();
    // The cancel handle is what crosses to other threads and tasks.
    assert_send_sync_clone::<PipeCanceler>();
    assert_send::<Error>();

    // And they really work when moved to other threads.
    let (writer, reader) = pipe();
    let w = thread::spawn(move || {
        let mut writer = writer;
        writer.write_slice(b"moved").unwrap();
        writer.flush_blocking().unwrap();
    });
    let r = thread::spawn(move || {
        let mut reader = reader;
        let result = reader.read_blocking().unwrap();
        result.buffer.to_vec()
    });
    w.join().unwrap();
    assert_eq!(r.join().unwrap(), b"moved");
}

#[test]
fn default_options_pause_at_64_kib_and_resume_below_32_kib() {
    let (mut writer, mut reader) = pipe();
    let (wakes, waker) = counting_waker();
    writer.write_slice(&vec![1; 64 * 1024 - 1]).unwrap();
    assert!(
        !flush_is_paused(&mut writer, &waker),
        "65535 unexamined bytes are below the pause threshold"
    );
    writer.write_slice(&[2]).unwrap();
    assert!(
        flush_is_paused(&mut writer, &waker),
        "65536 unexamined bytes reach the pause threshold"
    );

    assert_eq!(read_len_now(&mut reader), 64 * 1024);
    reader.advance_to(0, 32 * 1024).unwrap(); // 32768 left unexamined: not below 32 KiB
    assert_eq!(wakes.get(), 0);
    assert!(flush_is_paused(&mut writer, &waker));
    assert_eq!(read_len_now(&mut reader), 64 * 1024);
    reader.advance_to(0, 32 * 1024 + 1).unwrap(); // 32767 left: below
    assert_eq!(wakes.get(), 1);
    assert!(!flush_is_paused(&mut writer, &waker));
}

#[test]
fn pause_threshold_zero_disables_backpressure() {
    let (mut writer, _reader) = pipe_with(PipeOptions {
        pause_threshold: 0,
        ..Default::default()
    });
    for _ in 0..64 {
        writer.write_slice(&[7; 64 * 1024]).unwrap();
        assert_eq!(flush_now(&mut writer), FlushResult::default());
    }
}

#[test]
fn resume_threshold_above_pause_acts_as_the_pause_threshold() {
    let (mut writer, mut reader) = pipe_with(PipeOptions {
        pause_threshold: 10,
        resume_threshold: 1000,
        ..Default::default()
    });
    let (wakes, waker) = counting_waker();
    writer.write_slice(&[0; 10]).unwrap();
    assert!(flush_is_paused(&mut writer, &waker));
    assert_eq!(read_len_now(&mut reader), 10);
    reader.advance_to(0, 1).unwrap(); // 9 unexamined: below the (clamped) resume threshold of 10
    assert_eq!(wakes.get(), 1);
    assert!(!flush_is_paused(&mut writer, &waker));
}

#[test]
fn min_segment_size_sets_the_size_of_rented_write_buffers() {
    let (mut writer, _reader) = pipe();
    assert!(
        writer.spare_mut(1).unwrap().len() >= 4096,
        "default minimum segment is 4 KiB"
    );
    let (mut writer, _reader) = pipe_with(PipeOptions {
        min_segment_size: 16 * 1024,
        ..Default::default()
    });
    assert!(writer.spare_mut(1).unwrap().len() >= 16 * 1024);
    let (mut writer, _reader) = pipe_with(PipeOptions {
        min_segment_size: 5000,
        ..Default::default()
    });
    assert!(writer.spare_mut(0).unwrap().len() >= 5000);
}

#[test]
fn the_pipe_rents_from_the_pool_given_in_the_options() {
    let pool = Pool::new();
    let (mut writer, mut reader) = pipe_on(&pool, PipeOptions::default());
    writer.write_slice(b"from my pool").unwrap();
    assert_eq!(pool.stats().rents, 1);
    flush_now(&mut writer);
    assert_eq!(read_now(&mut reader), b"from my pool");
    drop((writer, reader));
    assert_eq!(pool.stats().outstanding, 0);
}
