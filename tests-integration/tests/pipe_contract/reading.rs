//! Reader: read, examined, consumed.

use super::*;

#[test]
fn read_returns_every_flushed_unconsumed_byte_as_segments() {
    let (mut writer, mut reader) = pipe();
    writer.append(Bytes::from_static(b"one ")).unwrap();
    flush_now(&mut writer);
    writer.append(Bytes::from_static(b"two ")).unwrap();
    writer.write_slice(b"three").unwrap();
    flush_now(&mut writer);
    let result = reader.try_read().unwrap().unwrap();
    assert_eq!(chunks_of(result.buffer), [&b"one "[..], b"two ", b"three"]);
    assert!(!result.is_completed && !result.is_canceled);
    reader.advance_to(6, 13).unwrap(); // consumed "one tw"
    writer.write_slice(b"!").unwrap();
    flush_now(&mut writer);
    let result = reader.try_read().unwrap().unwrap();
    assert_eq!(result.buffer.to_vec(), b"o three!");
    assert!(result.buffer.segments().all(|c| !c.is_empty()));
}

#[test]
fn read_waits_while_there_is_nothing_beyond_the_examined_point() {
    let (mut writer, mut reader) = pipe();
    let (wakes, waker) = counting_waker();
    {
        let mut read = pin!(reader.read_buffer());
        assert!(
            poll_once(read.as_mut(), &waker).is_pending(),
            "read of an empty pipe must wait"
        );
        writer.write_slice(b"abc").unwrap();
        flush_now(&mut writer);
        assert_eq!(wakes.get(), 1);
        match poll_once(read.as_mut(), &waker) {
            Poll::Ready(Ok(result)) => assert_eq!(result.buffer.to_vec(), b"abc"),
            other => panic!("expected the data, got {other:?}"),
        }
    }
    // Examined == length: the next read waits for new data, though the bytes are unconsumed.
    reader.advance_to(1, 3).unwrap();
    assert!(reader.try_read().unwrap().is_none());
    let mut read = pin!(reader.read_buffer());
    assert!(poll_once(read.as_mut(), &waker).is_pending());
    writer.write_slice(b"d").unwrap();
    flush_now(&mut writer);
    assert_eq!(wakes.get(), 2);
    match poll_once(read.as_mut(), &waker) {
        Poll::Ready(Ok(result)) => {
            assert_eq!(result.buffer.to_vec(), b"bcd", "all unconsumed bytes")
        }
        other => panic!("expected the data, got {other:?}"),
    }
}

#[test]
fn examined_short_of_the_length_lets_the_next_read_return_at_once() {
    let (mut writer, mut reader) = pipe();
    writer.write_slice(b"abcdef").unwrap();
    flush_now(&mut writer);
    assert_eq!(read_len_now(&mut reader), 6);
    reader.advance_to(2, 5).unwrap();
    assert_eq!(read_now(&mut reader), b"cdef");
    reader.advance_to(0, 0).unwrap();
    assert_eq!(read_now(&mut reader), b"cdef");
}

#[test]
fn examined_may_move_backwards_and_the_furthest_counts() {
    let (mut writer, mut reader) = pipe_with(PipeOptions {
        pause_threshold: 10,
        resume_threshold: 5,
        ..Default::default()
    });
    let (wakes, waker) = counting_waker();
    writer.write_slice(&[1; 8]).unwrap();
    flush_now(&mut writer);
    assert_eq!(read_len_now(&mut reader), 8);
    reader.advance_to(0, 8).unwrap(); // furthest examined: 8
    writer.write_slice(&[2; 8]).unwrap();
    flush_now(&mut writer); // 16 - 8 = 8 unexamined < 10
    assert_eq!(read_len_now(&mut reader), 16);
    reader
        .advance_to(0, 2)
        .expect("examined may move backwards without error");
    // For reading, the new examined point counts: there are bytes beyond it.
    assert_eq!(read_len_now(&mut reader), 16);
    reader.advance_to(0, 2).unwrap();
    // For backpressure, the furthest point (8) counts: 8 unexamined, not 14.
    assert!(
        !flush_is_paused(&mut writer, &waker),
        "a backwards examined re-paused the writer"
    );
    writer.write_slice(&[3; 2]).unwrap(); // 18 - 8 = 10: paused
    assert!(flush_is_paused(&mut writer, &waker));
    assert_eq!(read_len_now(&mut reader), 18);
    reader.advance_to(0, 13).unwrap(); // furthest 13: 5 unexamined, not below 5
    assert_eq!(wakes.get(), 0);
    assert_eq!(read_len_now(&mut reader), 18);
    reader.advance_to(0, 3).unwrap(); // backwards again: the writer stays paused, not woken
    assert_eq!(wakes.get(), 0);
    assert!(flush_is_paused(&mut writer, &waker));
    assert_eq!(read_len_now(&mut reader), 18);
    reader.advance_to(0, 14).unwrap(); // furthest 14: 4 unexamined
    assert_eq!(wakes.get(), 1);
    assert!(!flush_is_paused(&mut writer, &waker));
}

#[test]
fn consumed_bytes_are_released_and_blocks_go_home() {
    let pool = Pool::new();
    let (mut writer, mut reader) = pipe_on(&pool, PipeOptions::default());
    writer.append(pooled(&pool, &[1; 100])).unwrap();
    writer.append(pooled(&pool, &[2; 100])).unwrap();
    flush_now(&mut writer);
    assert_eq!(pool.stats().outstanding, 2);
    assert_eq!(read_len_now(&mut reader), 200);
    reader.advance_to(99, 99).unwrap();
    assert_eq!(
        pool.stats().outstanding,
        2,
        "a partly consumed segment keeps its block"
    );
    assert_eq!(read_len_now(&mut reader), 101);
    reader.advance_to(1, 1).unwrap();
    assert_eq!(
        pool.stats().outstanding,
        1,
        "a fully consumed segment drops its packet"
    );
    assert_eq!(read_now(&mut reader), [2; 100]);
    reader.advance_to(100, 100).unwrap();
    let stats = pool.stats();
    assert_eq!((stats.outstanding, stats.rents, stats.returns), (0, 2, 2));
}

#[test]
fn try_read_never_waits() {
    let (mut writer, mut reader) = pipe();
    assert!(reader.try_read().unwrap().is_none(), "empty pipe");
    writer.write_slice(b"abc").unwrap();
    assert!(reader.try_read().unwrap().is_none(), "staged only");
    flush_now(&mut writer);
    assert_eq!(read_now(&mut reader), b"abc");
    reader.advance_to(0, 3).unwrap();
    assert!(
        reader.try_read().unwrap().is_none(),
        "nothing beyond examined"
    );
    // With the writer completed it returns at once, forever.
    writer.complete();
    for _ in 0..2 {
        let result = reader.try_read().unwrap().unwrap();
        assert!(result.is_completed);
        assert_eq!(result.buffer.to_vec(), b"abc");
    }
    // try_read does not register as a waiter: nothing is left behind that blocks anything.
    reader.advance_to(3, 3).unwrap();
    assert!(reader.try_read().unwrap().unwrap().buffer.is_empty());
}

#[test]
fn read_at_least_waits_for_n_bytes_or_completion() {
    let (mut writer, mut reader) = pipe();
    let (wakes, waker) = counting_waker();
    {
        let mut read = pin!(reader.read_at_least(10));
        assert!(poll_once(read.as_mut(), &waker).is_pending());
        writer.write_slice(&[1; 6]).unwrap();
        flush_now(&mut writer);
        assert_eq!(wakes.get(), 0, "6 < 10 bytes: the reader is not woken");
        assert!(
            poll_once(read.as_mut(), &waker).is_pending(),
            "6 < 10 bytes"
        );
        writer.write_slice(&[2; 4]).unwrap();
        flush_now(&mut writer);
        assert_eq!(wakes.get(), 1, "woken once the 10 bytes are there");
        match poll_once(read.as_mut(), &waker) {
            Poll::Ready(Ok(result)) => assert_eq!(result.buffer.len(), 10),
            other => panic!("expected 10 bytes, got {other:?}"),
        }
    }
    // Already there: returns at once, even with examined == length.
    reader.advance_to(0, 10).unwrap();
    {
        let mut read = pin!(reader.read_at_least(4));
        assert!(
            matches!(poll_once(read.as_mut(), &waker), Poll::Ready(Ok(r)) if r.buffer.len() == 10)
        );
    }
    reader.advance_to(4, 10).unwrap();
    // Completion ends the wait with fewer bytes.
    let mut read = pin!(reader.read_at_least(100));
    assert!(poll_once(read.as_mut(), &waker).is_pending());
    writer.complete();
    match poll_once(read.as_mut(), &waker) {
        Poll::Ready(Ok(result)) => {
            assert!(result.is_completed);
            assert_eq!(result.buffer.len(), 6);
        }
        other => panic!("expected completion, got {other:?}"),
    }
}

#[test]
fn read_at_least_lifts_backpressure() {
    let (mut writer, mut reader) = pipe_with(PipeOptions {
        pause_threshold: 16,
        resume_threshold: 8,
        ..Default::default()
    });
    let (writer_wakes, writer_waker) = counting_waker();
    let (reader_wakes, reader_waker) = counting_waker();
    writer.write_slice(&[1; 20]).unwrap();
    assert!(flush_is_paused(&mut writer, &writer_waker));
    {
        let mut read = pin!(reader.read_at_least(40));
        assert!(poll_once(read.as_mut(), &reader_waker).is_pending());
        assert_eq!(
            writer_wakes.get(),
            1,
            "a paused writer is woken to supply the bytes"
        );
        assert!(
            !flush_is_paused(&mut writer, &writer_waker),
            "backpressure not lifted"
        );
        writer.write_slice(&[2; 10]).unwrap();
        assert!(
            !flush_is_paused(&mut writer, &writer_waker),
            "30 of 40 bytes: still lifted"
        );
        writer.write_slice(&[3; 10]).unwrap();
        // 40 published: the reader is satisfied, so ordinary backpressure applies again.
        assert!(flush_is_paused(&mut writer, &writer_waker));
        assert!(reader_wakes.get() >= 1);
        match poll_once(read.as_mut(), &reader_waker) {
            Poll::Ready(Ok(result)) => assert_eq!(result.buffer.len(), 40),
            other => panic!("expected 40 bytes, got {other:?}"),
        }
    }
    let woken = writer_wakes.get();
    reader.advance_to(40, 40).unwrap();
    assert_eq!(writer_wakes.get(), woken + 1);
    assert!(!flush_is_paused(&mut writer, &writer_waker));
}

#[test]
fn read_at_least_dropped_while_waiting_restores_backpressure() {
    let (mut writer, mut reader) = pipe_with(PipeOptions {
        pause_threshold: 16,
        resume_threshold: 8,
        ..Default::default()
    });
    let (_, waker) = counting_waker();
    writer.write_slice(&[1; 10]).unwrap();
    assert!(!flush_is_paused(&mut writer, &waker));
    {
        let mut read = pin!(reader.read_at_least(100));
        assert!(poll_once(read.as_mut(), &waker).is_pending());
        writer.write_slice(&[2; 10]).unwrap();
        assert!(
            !flush_is_paused(&mut writer, &waker),
            "lifted while the read waits"
        );
    }
    assert!(
        flush_is_paused(&mut writer, &waker),
        "a dropped read_at_least kept backpressure lifted"
    );
}

#[test]
fn read_at_least_lifts_backpressure_across_threads() {
    let (mut writer, mut reader) = pipe_with(PipeOptions {
        pause_threshold: 16,
        resume_threshold: 8,
        ..Default::default()
    });
    let (tx, rx) = mpsc::channel();
    let w = thread::spawn(move || {
        for i in 0..10u8 {
            writer.write_slice(&[i; 10]).unwrap();
            writer.flush_blocking().unwrap();
        }
        writer
    });
    let r = thread::spawn(move || {
        let len = packetpipe::block_on(reader.read_at_least(100))
            .unwrap()
            .buffer
            .len();
        tx.send(len).unwrap();
        reader
    });
    let len = rx
        .recv_timeout(TIMEOUT)
        .expect("read_at_least(100) with a 16-byte pause threshold deadlocked");
    assert!(len >= 100);
    let mut reader = r.join().unwrap();
    let expected: Vec<u8> = (0..10u8).flat_map(|i| [i; 10]).collect();
    assert_eq!(reader.last_read().unwrap().buffer.to_vec(), expected);
    // The last flush, with the read satisfied, is under ordinary backpressure: release it.
    reader.advance_to(100, 100).unwrap();
    let _writer = w.join().unwrap();
}
