//! Writer completion.

use super::*;

#[test]
fn writer_completion_commits_staged_data() {
    let (mut writer, mut reader) = pipe();
    let (wakes, waker) = counting_waker();
    assert!(reader
        .poll_read_buffer(&mut Context::from_waker(&waker))
        .is_pending());
    writer.write_slice(b"abc").unwrap();
    writer.spare_mut(3).unwrap()[..3].copy_from_slice(b"def");
    writer.commit(3).unwrap();
    writer.append(Bytes::from_static(b"ghi")).unwrap();
    writer.complete();
    assert_eq!(wakes.get(), 1, "completion wakes the reader");
    assert!(reader
        .poll_read_buffer(&mut Context::from_waker(&waker))
        .is_ready());
    let result = reader.last_read().unwrap();
    assert_eq!(
        result.buffer.to_vec(),
        b"abcdefghi",
        "staged data lost on completion"
    );
    assert!(result.is_completed);
}

#[test]
fn writer_drop_completes_and_commits_staged_data() {
    let (mut writer, mut reader) = pipe();
    let (wakes, waker) = counting_waker();
    writer.write_slice(b"flushed ").unwrap();
    flush_now(&mut writer);
    assert_eq!(read_now(&mut reader), b"flushed ");
    reader.advance_to(0, 8).unwrap();
    assert!(reader
        .poll_read_buffer(&mut Context::from_waker(&waker))
        .is_pending());
    writer.write_slice(b"staged").unwrap();
    drop(writer);
    assert_eq!(wakes.get(), 1, "dropping the writer wakes the reader");
    let result = reader.try_read().unwrap().unwrap();
    assert_eq!(result.buffer.to_vec(), b"flushed staged");
    assert!(result.is_completed);
    // Completed: reads keep returning at once.
    reader.advance_to(14, 14).unwrap();
    let result = reader.try_read().unwrap().unwrap();
    assert!(result.is_completed && result.buffer.is_empty());
}

#[test]
fn writer_completion_is_seen_only_after_every_byte_across_threads() {
    // The failure this rules out: the reader seeing "writer closed" before the last bytes.
    for round in 0..200u32 {
        let (mut writer, mut reader) = pipe_with(PipeOptions {
            pause_threshold: 0,
            ..Default::default()
        });
        let t = thread::spawn(move || {
            for i in 0..20u32 {
                writer
                    .write_slice(&(round * 100 + i).to_le_bytes())
                    .unwrap();
                if i % 3 == 0 {
                    writer.flush_blocking().unwrap();
                }
            }
            // Last bytes staged, then completion without a flush.
        });
        let mut got = Vec::new();
        loop {
            let result = reader.read_blocking().unwrap();
            let len = result.buffer.len();
            let done = result.is_completed;
            got.extend(result.buffer.to_vec());
            reader.advance_to(len, len).unwrap();
            if done {
                break;
            }
        }
        t.join().unwrap();
        let expected: Vec<u8> = (0..20u32)
            .flat_map(|i| (round * 100 + i).to_le_bytes())
            .collect();
        assert_eq!(got, expected, "round {round}");
    }
}

#[test]
fn completion_is_never_seen_before_the_last_bytes_by_a_spinning_reader() {
    // The same bug class, aimed at the moment of completion: the reader spins on `try_read`
    // while the writer completes with bytes still staged. The two threads meet on spin flags
    // (not a blocking barrier) so that the reader is already spinning when the writer completes.
    const ROUNDS: usize = 2000;
    let ready = Arc::new(AtomicUsize::new(usize::MAX));
    let go = Arc::new(AtomicUsize::new(usize::MAX));
    let (tx, rx) = mpsc::channel::<PipeWriter>();
    let start = Instant::now();
    let writer_thread = thread::spawn({
        let (ready, go) = (ready.clone(), go.clone());
        move || {
            for (round, mut writer) in rx.into_iter().enumerate() {
                writer.write_slice(b"first").unwrap();
                writer.flush_blocking().unwrap();
                writer.write_slice(b"last").unwrap(); // staged: committed by the completion
                ready.store(round, Ordering::SeqCst);
                while go.load(Ordering::SeqCst) != round {
                    assert!(start.elapsed() < TIMEOUT, "the reader never started");
                    thread::yield_now();
                }
                writer.complete();
            }
        }
    });
    // A work budget, not a correctness condition: on a loaded machine, stop early.
    const BUDGET: Duration = Duration::from_secs(2);
    for round in 0..ROUNDS {
        if start.elapsed() > BUDGET {
            break;
        }
        let (writer, mut reader) = pipe();
        tx.send(writer).unwrap();
        while ready.load(Ordering::SeqCst) != round {
            assert!(start.elapsed() < TIMEOUT, "the writer never got ready");
            thread::yield_now();
        }
        go.store(round, Ordering::SeqCst);
        loop {
            if let Some(result) = reader.try_read().unwrap() {
                if result.is_completed {
                    assert_eq!(
                        result.buffer.to_vec(),
                        b"firstlast",
                        "round {round}: completion seen before the last bytes"
                    );
                    break;
                }
            }
            assert!(start.elapsed() < TIMEOUT, "the writer never completed");
        }
    }
    drop(tx);
    writer_thread.join().unwrap();
}

#[test]
fn writer_error_delivered_on_every_later_read_after_the_data() {
    let (mut writer, mut reader) = pipe();
    writer.write_slice(b"abc").unwrap();
    flush_now(&mut writer);
    writer.write_slice(b"de").unwrap(); // staged: committed by the completion
    writer.complete_with_error(boom("connection reset"));

    // First the data, all of it.
    let result = reader.try_read().unwrap().unwrap();
    assert_eq!(result.buffer.to_vec(), b"abcde");
    assert!(!result.is_canceled);
    // Examined but not consumed: the data is seen, so now the error.
    reader.advance_to(0, 5).unwrap();
    let first = reader
        .try_read()
        .map(|r| r.map(|r| r.buffer.len()))
        .unwrap_err();
    assert_peer_error(&first, "writer", "connection reset");
    // On every later read, whichever form.
    for _ in 0..3 {
        let e = reader
            .try_read()
            .map(|r| r.map(|r| r.buffer.len()))
            .unwrap_err();
        assert_peer_error(&e, "writer", "connection reset");
        assert_eq!(e, first, "the same shared error each time");
        let e = reader.read_blocking().map(|r| r.buffer.len()).unwrap_err();
        assert_peer_error(&e, "writer", "connection reset");
    }
    // The source is the error the writer gave.
    let source = std::error::Error::source(&first).expect("a peer error has a source");
    let io = source
        .downcast_ref::<std::io::Error>()
        .expect("the writer's io::Error");
    assert_eq!(io.kind(), std::io::ErrorKind::ConnectionReset);
    // Converts to io::Error, keeping the kind of the I/O error that travelled through the pipe.
    let as_io: std::io::Error = first.into();
    assert_eq!(as_io.kind(), std::io::ErrorKind::ConnectionReset);
    let inner = std::error::Error::source(&as_io).expect("the chain reaches the writer's error");
    assert_eq!(inner.to_string(), "connection reset");
}

#[test]
fn writer_error_reaches_read_at_least_when_fewer_bytes_arrived() {
    let (mut writer, mut reader) = pipe();
    writer.write_slice(b"abc").unwrap();
    writer.complete_with_error("truncated");
    let (_, waker) = counting_waker();
    // read_at_least(10) can never be satisfied: it returns the writer's error at once rather
    // than a short buffer with neither is_completed nor is_canceled (a parser trusting the
    // promised 10 bytes would fail or spin). The 3 bytes stay in the pipe for read_buffer.
    {
        let mut read = pin!(reader.read_at_least(10));
        match poll_once(read.as_mut(), &waker) {
            Poll::Ready(Err(e)) => assert_peer_error(&e, "writer", "truncated"),
            Poll::Ready(Ok(result)) => panic!("short buffer of {} bytes", result.buffer.len()),
            Poll::Pending => panic!("read_at_least waits on a completed writer"),
        }
    }
    assert_eq!(reader.read_blocking().unwrap().buffer.to_vec(), b"abc");
    reader.advance_to(0, 3).unwrap();
    let e = packetpipe::block_on(reader.read_at_least(10))
        .map(|r| r.buffer.len())
        .unwrap_err();
    assert_peer_error(&e, "writer", "truncated");
}

#[test]
fn writer_error_wakes_a_waiting_reader_and_then_is_delivered() {
    let (mut writer, mut reader) = pipe();
    let (wakes, waker) = counting_waker();
    assert!(reader
        .poll_read_buffer(&mut Context::from_waker(&waker))
        .is_pending());
    writer.complete_with_error("producer failed");
    assert_eq!(wakes.get(), 1);
    match reader.poll_read_buffer(&mut Context::from_waker(&waker)) {
        Poll::Ready(Err(e)) => assert_peer_error(&e, "writer", "producer failed"),
        other => panic!("expected the writer's error, got {other:?}"),
    }
}

#[test]
fn first_completion_wins() {
    // Writer: an error first, then more completions: the first error stays.
    let (mut writer, mut reader) = pipe();
    writer.complete_with_error("first");
    writer.complete_with_error("second");
    writer.complete();
    drop(writer);
    for _ in 0..2 {
        let e = reader.try_read().map(|r| r.is_some()).unwrap_err();
        assert_peer_error(&e, "writer", "first");
    }

    // Writer: a clean completion first; a later error is ignored.
    let (mut writer, mut reader) = pipe();
    writer.write_slice(b"x").unwrap();
    writer.complete();
    writer.complete_with_error("too late");
    for _ in 0..2 {
        let result = reader.try_read().unwrap().unwrap();
        assert!(result.is_completed);
        assert_eq!(result.buffer.to_vec(), b"x");
    }
    reader.advance_to(1, 1).unwrap();
    assert!(reader.try_read().unwrap().unwrap().is_completed);

    // Reader: an error first, then more completions.
    let (mut writer, mut reader) = pipe();
    reader.complete_with_error("first");
    reader.complete_with_error("second");
    reader.complete();
    drop(reader);
    for _ in 0..2 {
        let e = writer.flush_blocking().unwrap_err();
        assert_peer_error(&e, "reader", "first");
    }

    // Reader: a clean completion first; a later error is ignored.
    let (mut writer, mut reader) = pipe();
    reader.complete();
    reader.complete_with_error("too late");
    for _ in 0..2 {
        let result = writer.flush_blocking().unwrap();
        assert!(result.is_completed);
    }
}

#[test]
fn completing_twice_is_harmless() {
    let (mut writer, mut reader) = pipe();
    writer.write_slice(b"once").unwrap();
    writer.complete();
    writer.complete();
    drop(writer); // Drop completes a third time
    let result = reader.try_read().unwrap().unwrap();
    assert_eq!(
        result.buffer.to_vec(),
        b"once",
        "no duplicate, nothing lost"
    );
    assert!(result.is_completed);
    reader.complete();
    reader.complete();
    assert_eq!(
        reader.try_read().map(|r| r.is_some()).unwrap_err(),
        Error::ReaderCompleted
    );
}
