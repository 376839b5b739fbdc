//! Read coalescing of `read_buffer().await`.

use super::*;

/// Write and flush `n` bytes of `byte`.
fn send(writer: &mut PipeWriter, n: usize, byte: u8) {
    writer.write_slice(&vec![byte; n]).unwrap();
    flush_now(writer);
}

/// Poll a fresh `read_buffer()` until it is ready with `waker`, counting its polls; advance past
/// what it returned. `(polls, bytes)`.
#[track_caller]
fn read_buffer_counting_polls(reader: &mut PipeReader, waker: &Waker) -> (usize, Vec<u8>) {
    let (polls, bytes) = {
        let mut read = pin!(reader.read_buffer());
        (1..=2)
            .find_map(|polls| match poll_once(read.as_mut(), waker) {
                Poll::Ready(result) => Some((polls, result.unwrap().buffer.to_vec())),
                Poll::Pending => None,
            })
            .expect("read_buffer() still pending after a second poll")
    };
    reader.advance_to(bytes.len(), bytes.len()).unwrap();
    (polls, bytes)
}

#[test]
fn read_buffer_after_a_small_read_yields_once_when_a_few_new_bytes_are_there() {
    let (mut writer, mut reader) = pipe();
    let (wakes, waker) = counting_waker();
    send(&mut writer, 10, 1);
    assert_eq!(
        read_buffer_counting_polls(&mut reader, &waker),
        (1, vec![1; 10]),
        "the first read has no small read before it: no yield"
    );
    assert_eq!(wakes.get(), 0);

    send(&mut writer, 10, 2);
    let mut read = pin!(reader.read_buffer());
    assert!(poll_once(read.as_mut(), &waker).is_pending(), "the yield");
    assert_eq!(wakes.get(), 1, "a yield wakes its task at once");
    send(&mut writer, 20, 3); // what the yield is for: the writer adds more meanwhile
    let Poll::Ready(result) = poll_once(read.as_mut(), &waker) else {
        panic!("a read that yielded does not yield again");
    };
    let mut expected = vec![2; 10];
    expected.extend([3; 20]);
    assert_eq!(
        result.unwrap().buffer.to_vec(),
        expected,
        "both flushes in one read"
    );
    assert_eq!(wakes.get(), 1, "no wake beyond the yield's");
}

#[test]
fn read_buffer_yields_only_after_a_small_read_and_for_a_few_new_bytes() {
    let (mut writer, mut reader) = pipe();
    let (wakes, waker) = counting_waker();

    // After a read of 1 KiB or more: no yield.
    send(&mut writer, 1024, 1);
    assert_eq!(read_buffer_counting_polls(&mut reader, &waker).0, 1);
    send(&mut writer, 10, 2);
    assert_eq!(
        read_buffer_counting_polls(&mut reader, &waker).0,
        1,
        "after a large read"
    );

    // After a small read, 1 KiB or more there: no yield.
    send(&mut writer, 1024, 3);
    assert_eq!(
        read_buffer_counting_polls(&mut reader, &waker).0,
        1,
        "a large read now"
    );
    send(&mut writer, 10, 4);
    assert_eq!(
        read_buffer_counting_polls(&mut reader, &waker).0,
        1,
        "after a large read"
    );

    // After a small read, nothing new there: the read waits (registers, no wake), and when the
    // bytes come it is woken and returns them without yielding.
    {
        let mut read = pin!(reader.read_buffer());
        assert!(poll_once(read.as_mut(), &waker).is_pending());
        assert_eq!(wakes.get(), 0, "waiting, not yielding");
        send(&mut writer, 10, 5);
        assert_eq!(wakes.get(), 1, "the flush woke the waiting read");
        let Poll::Ready(result) = poll_once(read.as_mut(), &waker) else {
            panic!("a woken read that waited does not yield");
        };
        assert_eq!(result.unwrap().buffer.to_vec(), vec![5; 10]);
    }
    reader.advance_to(10, 10).unwrap();
    assert_eq!(wakes.get(), 1);
}

#[test]
fn only_read_buffer_futures_yield_to_coalesce() {
    let (mut writer, mut reader) = pipe();
    let (wakes, waker) = counting_waker();
    send(&mut writer, 10, 1);
    read_buffer_counting_polls(&mut reader, &waker);

    // The poll form, read_at_least, try_read and the blocking read take the bytes at once.
    send(&mut writer, 10, 2);
    let mut cx = Context::from_waker(&waker);
    assert!(
        reader.poll_read_buffer(&mut cx).is_ready(),
        "poll_read_buffer"
    );
    reader.advance_to(10, 10).unwrap();
    send(&mut writer, 10, 3);
    assert!(
        poll_once(pin!(reader.read_at_least(1)), &waker).is_ready(),
        "read_at_least"
    );
    reader.advance_to(10, 10).unwrap();
    send(&mut writer, 10, 4);
    assert_eq!(read_now(&mut reader), vec![4; 10], "try_read");
    reader.advance_to(10, 10).unwrap();
    send(&mut writer, 10, 5);
    assert_eq!(
        reader.read_blocking().unwrap().buffer.len(),
        10,
        "read_blocking"
    );
    reader.advance_to(10, 10).unwrap();
    assert_eq!(wakes.get(), 0, "none of them yielded");
}

#[test]
fn a_read_dropped_after_its_yield_loses_nothing() {
    let (mut writer, mut reader) = pipe();
    let (wakes, waker) = counting_waker();
    send(&mut writer, 10, 1);
    read_buffer_counting_polls(&mut reader, &waker);
    send(&mut writer, 10, 2);
    reader.canceler().cancel();
    assert!(poll_once(pin!(reader.read_buffer()), &waker).is_pending());
    assert_eq!(wakes.get(), 1);
    // Dropped after the yield: the bytes and the pending cancel are still there for the next read.
    let result = reader.try_read().unwrap().unwrap();
    assert_eq!(result.buffer.to_vec(), vec![2; 10]);
    assert!(
        result.is_canceled,
        "the cancel was not consumed by the yield"
    );
}
