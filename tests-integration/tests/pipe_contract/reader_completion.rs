//! Reader completion.

use super::*;

#[test]
fn reader_completion_releases_everything_it_holds_and_wakes_a_paused_flush() {
    let pool = Pool::new();
    let (mut writer, mut reader) = pipe_on(
        &pool,
        PipeOptions {
            pause_threshold: 100,
            resume_threshold: 50,
            ..Default::default()
        },
    );
    let (wakes, waker) = counting_waker();
    writer.append(pooled(&pool, &[1; 200])).unwrap();
    writer.append(pooled(&pool, &[2; 200])).unwrap();
    assert!(flush_is_paused(&mut writer, &waker));
    assert_eq!(read_len_now(&mut reader), 400);
    reader.advance_to(10, 10).unwrap();
    assert_eq!(pool.stats().outstanding, 2);
    reader.complete();
    assert_eq!(
        pool.stats().outstanding,
        0,
        "unconsumed bytes must be released at completion"
    );
    assert_eq!(wakes.get(), 1, "a paused flush is woken");
    match writer.poll_flush_pipe(&mut Context::from_waker(&waker)) {
        Poll::Ready(Ok(result)) => {
            assert!(result.is_completed);
            assert!(!result.is_canceled);
        }
        other => panic!("expected is_completed, got {other:?}"),
    }
    // Later flushes say so too.
    assert!(writer.flush_blocking().unwrap().is_completed);
}

#[test]
fn reader_completion_releases_everything_and_later_writes_are_discarded_renting_nothing() {
    let pool = Pool::new();
    let (mut writer, mut reader) = pipe_on(&pool, PipeOptions::default());
    writer.write_slice(&[1; 1000]).unwrap(); // block A (the writer's buffer)
    flush_now(&mut writer);
    writer.write_slice(&[2; 500]).unwrap(); // staged, in block A's tail
    writer.append(pooled(&pool, &[3; 100])).unwrap(); // staged, block B
    assert_eq!(read_len_now(&mut reader), 1000);
    reader.advance_to(10, 10).unwrap();
    assert_eq!(pool.stats().outstanding, 2);

    reader.complete(); // the reader stays alive, completed
    let result = writer.flush_blocking().unwrap();
    assert!(result.is_completed);
    assert_eq!(
        pool.stats().outstanding,
        0,
        "after the reader completed, the writer's flush must release the staged buffers, not publish them"
    );

    // Later writes of every kind are accepted, discarded, and rent nothing.
    let rents = pool.stats().rents;
    for _ in 0..10 {
        writer.write_slice(&[4; 10_000]).unwrap();
        let space = writer.spare_mut(100_000).unwrap();
        assert!(space.len() >= 100_000);
        writer.commit(100_000).unwrap();
        writer.append(Bytes::from_static(b"discarded")).unwrap();
        assert_eq!(writer.unflushed_len(), 0, "discarded writes are not staged");
        assert!(writer.flush_blocking().unwrap().is_completed);
    }
    let stats = pool.stats();
    assert_eq!(
        stats.rents, rents,
        "writes after the reader completed rented from the pool"
    );
    assert_eq!(stats.outstanding, 0, "{stats:?}");
    drop((writer, reader));
    assert_eq!(pool.stats().outstanding, 0);
}

#[test]
fn a_write_into_the_current_buffer_after_reader_completion_is_discarded() {
    let pool = Pool::new();
    let (mut writer, mut reader) = pipe_on(&pool, PipeOptions::default());
    writer.write_slice(b"before").unwrap();
    flush_now(&mut writer);
    assert_eq!(read_now(&mut reader), b"before");
    reader.advance_to(6, 6).unwrap();
    reader.complete();
    // The writer's block (its tail parked at the flush) went home with the reader's completion.
    assert_eq!(pool.stats().outstanding, 0, "{:?}", pool.stats());
    writer.write_slice(b"after").unwrap(); // would have fit in the parked buffer
    assert!(writer.flush_blocking().unwrap().is_completed);
    assert_eq!(
        pool.stats().outstanding,
        0,
        "the discarded write still holds a block"
    );
}

#[test]
fn reader_completion_makes_later_writes_rent_nothing_once_noticed() {
    let pool = Pool::new();
    let (mut writer, mut reader) = pipe_on(&pool, PipeOptions::default());
    writer.write_slice(&[1; 1000]).unwrap();
    flush_now(&mut writer);
    assert_eq!(read_len_now(&mut reader), 1000);
    reader.advance_to(1000, 1000).unwrap();
    drop(reader);
    assert!(writer.flush_blocking().unwrap().is_completed);
    assert_eq!(pool.stats().outstanding, 0);
    let rents = pool.stats().rents;
    for _ in 0..10 {
        writer.write_slice(&[4; 10_000]).unwrap();
        writer.spare_mut(100_000).unwrap();
        writer.commit(100_000).unwrap();
        writer.append(pooled(&pool, b"dropped at once")).unwrap();
        assert!(writer.flush_blocking().unwrap().is_completed);
    }
    assert_eq!(
        pool.stats().rents,
        rents + 10,
        "only the test's own 10 appended packets were rented"
    );
    assert_eq!(pool.stats().outstanding, 0);
}

#[test]
fn reader_drop_completes_and_releases_a_paused_writer_on_another_thread() {
    let pool = Pool::new();
    let (mut writer, mut reader) = pipe_on(
        &pool,
        PipeOptions {
            pause_threshold: 1024,
            resume_threshold: 512,
            ..Default::default()
        },
    );
    let (tx, rx) = mpsc::channel();
    let t = thread::spawn(move || {
        let mut frames = 0u64;
        loop {
            writer.write_slice(&[0xAB; 300]).unwrap();
            let result = writer.flush_blocking().unwrap();
            frames += 1;
            if result.is_completed {
                tx.send(frames).unwrap();
                return writer;
            }
        }
    });
    // Read a little, then drop the reader while the writer is (or soon will be) paused.
    let mut seen = 0;
    while seen < 5000 {
        let result = reader.read_blocking().unwrap();
        let len = result.buffer.len();
        assert!(result.buffer.segments().flatten().all(|&b| b == 0xAB));
        seen += len;
        reader.advance_to(len, len).unwrap();
    }
    drop(reader);
    let frames = rx
        .recv_timeout(TIMEOUT)
        .expect("the paused writer was not released by the reader's drop");
    assert!(frames >= 5000 / 300);
    let writer = t.join().unwrap();
    drop(writer);
    assert_eq!(pool.stats().outstanding, 0);
}

#[test]
fn reader_error_delivered_on_every_later_flush() {
    let (mut writer, mut reader) = pipe();
    let (wakes, waker) = counting_waker();
    writer.write_slice(&[0; 100_000]).unwrap();
    assert!(flush_is_paused(&mut writer, &waker));
    reader.complete_with_error(boom("parser gave up"));
    assert_eq!(wakes.get(), 1);
    match writer.poll_flush_pipe(&mut Context::from_waker(&waker)) {
        Poll::Ready(Err(e)) => assert_peer_error(&e, "reader", "parser gave up"),
        other => panic!("expected the reader's error, got {other:?}"),
    }
    for _ in 0..3 {
        writer.write_slice(b"accepted and discarded").unwrap();
        let e = writer.flush_blocking().unwrap_err();
        assert_peer_error(&e, "reader", "parser gave up");
    }
}
