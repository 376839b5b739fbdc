//! Writer: flush.

use super::*;

#[test]
fn unpaused_flush_returns_at_once_with_a_plain_result() {
    let (mut writer, mut reader) = pipe();
    let (wakes, waker) = counting_waker();
    writer.write_slice(b"x").unwrap();
    let mut flush = pin!(writer.flush_pipe());
    match poll_once(flush.as_mut(), &waker) {
        Poll::Ready(Ok(result)) => {
            assert!(!result.is_completed);
            assert!(!result.is_canceled);
        }
        other => panic!("unpaused flush did not return at once: {other:?}"),
    }
    assert_eq!(wakes.get(), 0);
    assert_eq!(read_now(&mut reader), b"x");
}

#[test]
fn zero_byte_flush_wakes_nobody() {
    let (mut writer, mut reader) = pipe();
    let (wakes, waker) = counting_waker();
    assert!(reader
        .poll_read_buffer(&mut Context::from_waker(&waker))
        .is_pending());
    for _ in 0..3 {
        assert_eq!(flush_now(&mut writer), FlushResult::default());
    }
    assert_eq!(wakes.get(), 0, "a 0-byte flush woke the reader");
    assert!(reader.try_read().unwrap().is_none());

    // After some traffic, with the reader waiting again (examined everything).
    writer.write_slice(b"data").unwrap();
    flush_now(&mut writer);
    assert_eq!(
        wakes.get(),
        1,
        "a flush with bytes wakes the waiting reader"
    );
    assert!(reader
        .poll_read_buffer(&mut Context::from_waker(&waker))
        .is_ready());
    reader.advance_to(0, 4).unwrap();
    assert!(reader
        .poll_read_buffer(&mut Context::from_waker(&waker))
        .is_pending());
    flush_now(&mut writer);
    flush_now(&mut writer);
    assert_eq!(wakes.get(), 1, "a 0-byte flush woke the reader");
}

#[test]
fn flush_pauses_at_pause_threshold_and_resumes_below_resume() {
    let (mut writer, mut reader) = pipe_with(PipeOptions {
        pause_threshold: 100,
        resume_threshold: 50,
        ..Default::default()
    });
    let (wakes, waker) = counting_waker();
    writer.write_slice(&[1; 99]).unwrap();
    assert!(
        !flush_is_paused(&mut writer, &waker),
        "99 < 100: not paused"
    );
    writer.write_slice(&[2]).unwrap();
    assert!(flush_is_paused(&mut writer, &waker), "100 >= 100: paused");
    // The data of a paused flush is published all the same.
    assert_eq!(read_len_now(&mut reader), 100);

    reader.advance_to(0, 50).unwrap(); // 50 unexamined: not below 50
    assert_eq!(
        wakes.get(),
        0,
        "woken although still at the resume threshold"
    );
    assert!(flush_is_paused(&mut writer, &waker));

    assert_eq!(read_len_now(&mut reader), 100);
    reader.advance_to(0, 51).unwrap(); // 49 unexamined
    assert_eq!(wakes.get(), 1, "not woken below the resume threshold");
    assert!(!flush_is_paused(&mut writer, &waker));

    // Hysteresis: a new flush pauses only when the pause threshold is reached again.
    writer.write_slice(&[3; 50]).unwrap(); // 99 unexamined
    assert!(!flush_is_paused(&mut writer, &waker));
    writer.write_slice(&[4]).unwrap(); // 100
    assert!(flush_is_paused(&mut writer, &waker));
    // Consuming (not only examining) also counts.
    assert_eq!(read_len_now(&mut reader), 151);
    reader.advance_to(151, 151).unwrap();
    assert_eq!(wakes.get(), 2);
    assert_eq!(flush_now(&mut writer), FlushResult::default());
}

#[test]
fn paused_flush_future_completes_when_the_reader_catches_up() {
    let (mut writer, mut reader) = pipe_with(PipeOptions {
        pause_threshold: 10,
        resume_threshold: 5,
        ..Default::default()
    });
    let (wakes, waker) = counting_waker();
    writer.write_slice(&[0; 20]).unwrap();
    let mut flush = pin!(writer.flush_pipe());
    assert!(poll_once(flush.as_mut(), &waker).is_pending());
    assert!(
        poll_once(flush.as_mut(), &waker).is_pending(),
        "a spurious poll stays paused"
    );
    assert_eq!(read_len_now(&mut reader), 20);
    reader.advance_to(16, 16).unwrap();
    assert_eq!(wakes.get(), 1);
    match poll_once(flush.as_mut(), &waker) {
        Poll::Ready(Ok(result)) => assert_eq!(result, FlushResult::default()),
        other => panic!("expected the flush to resume, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flush_await_waits_for_a_reader_task() {
    let (mut writer, mut reader) = pipe_with(PipeOptions {
        pause_threshold: 1000,
        resume_threshold: 500,
        ..Default::default()
    });
    let reader_task = tokio::spawn(async move {
        let mut total = 0usize;
        let mut sum = 0u64;
        loop {
            let result = reader.read_buffer().await.unwrap();
            let buffer = result.buffer;
            sum += buffer
                .segments()
                .flatten()
                .map(|&b| u64::from(b))
                .sum::<u64>();
            let (len, done) = (buffer.len(), result.is_completed);
            total += len;
            reader.advance_to(len, len).unwrap();
            if done {
                return (total, sum);
            }
        }
    });
    let mut expected = 0u64;
    for i in 0..500u32 {
        let frame = vec![(i % 256) as u8; 300];
        expected += frame.iter().map(|&b| u64::from(b)).sum::<u64>();
        writer.write_slice(&frame).unwrap();
        let result = tokio::time::timeout(TIMEOUT, writer.flush_pipe())
            .await
            .expect("flush hung")
            .unwrap();
        assert!(!result.is_completed && !result.is_canceled);
    }
    writer.complete();
    let (total, sum) = tokio::time::timeout(TIMEOUT, reader_task)
        .await
        .expect("reader hung")
        .unwrap();
    assert_eq!((total, sum), (500 * 300, expected));
}
