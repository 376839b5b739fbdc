//! Cancellation.

use super::*;

#[test]
fn cancel_pending_flush_keeps_data_committed() {
    let (mut writer, mut reader) = pipe_with(PipeOptions {
        pause_threshold: 10,
        resume_threshold: 5,
        ..Default::default()
    });
    let canceler = writer.canceler();
    let (wakes, waker) = counting_waker();
    writer.write_slice(b"0123456789abcdef").unwrap();
    assert!(flush_is_paused(&mut writer, &waker));
    canceler.cancel();
    assert_eq!(wakes.get(), 1, "canceling wakes the paused flush");
    match writer.poll_flush_pipe(&mut Context::from_waker(&waker)) {
        Poll::Ready(Ok(result)) => {
            assert!(result.is_canceled);
            assert!(!result.is_completed);
        }
        other => panic!("expected a canceled flush, got {other:?}"),
    }
    assert_eq!(
        read_now(&mut reader),
        b"0123456789abcdef",
        "canceled flush lost its data"
    );
    // Nothing is published twice or lost afterwards either.
    writer.write_slice(b"!").unwrap();
    reader.advance_to(16, 16).unwrap();
    flush_now(&mut writer);
    assert_eq!(read_now(&mut reader), b"!");
}

#[test]
fn cancel_pending_flush_is_one_shot() {
    let (mut writer, mut reader) = pipe_with(PipeOptions {
        pause_threshold: 10,
        resume_threshold: 5,
        ..Default::default()
    });
    let canceler = writer.canceler();
    let (_, waker) = counting_waker();
    writer.write_slice(&[0; 20]).unwrap();
    assert!(flush_is_paused(&mut writer, &waker));
    canceler.cancel();
    let Poll::Ready(Ok(result)) = writer.poll_flush_pipe(&mut Context::from_waker(&waker)) else {
        panic!("canceled flush did not return");
    };
    assert!(result.is_canceled);
    // The next flush is an ordinary one again: still over the threshold, so it pauses.
    assert!(
        flush_is_paused(&mut writer, &waker),
        "the cancel was not one-shot"
    );
    assert!(flush_is_paused(&mut writer, &waker));

    // A cancel with no flush pending applies to the next flush, once.
    assert_eq!(read_len_now(&mut reader), 20);
    reader.advance_to(20, 20).unwrap();
    assert_eq!(flush_now(&mut writer), FlushResult::default());
    canceler.cancel();
    assert!(flush_now(&mut writer).is_canceled);
    assert_eq!(flush_now(&mut writer), FlushResult::default());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_pending_flush_from_another_task() {
    let (mut writer, mut reader) = pipe_with(PipeOptions {
        pause_threshold: 8,
        resume_threshold: 4,
        ..Default::default()
    });
    let canceler = writer.canceler();
    writer.write_slice(&[9; 8]).unwrap();
    let flushing = tokio::spawn(async move {
        let result = writer.flush_pipe().await.unwrap();
        (result, writer)
    });
    // The task either is paused already or will see the flag when it polls: one-shot either way.
    tokio::task::spawn_blocking(move || canceler.cancel())
        .await
        .unwrap();
    let (result, _writer) = tokio::time::timeout(TIMEOUT, flushing)
        .await
        .expect("flush hung")
        .unwrap();
    assert!(result.is_canceled);
    assert_eq!(read_now(&mut reader), [9; 8]);
}

#[test]
fn cancel_pending_read_is_one_shot() {
    let (mut writer, mut reader) = pipe();
    let canceler = reader.canceler();
    let (wakes, waker) = counting_waker();

    // A waiting read is woken and returns `is_canceled`.
    {
        let mut read = pin!(reader.read_buffer());
        assert!(poll_once(read.as_mut(), &waker).is_pending());
        canceler.cancel();
        assert_eq!(wakes.get(), 1);
        match poll_once(read.as_mut(), &waker) {
            Poll::Ready(Ok(result)) => {
                assert!(result.is_canceled);
                assert!(!result.is_completed);
                assert!(result.buffer.is_empty());
            }
            other => panic!("expected a canceled read, got {other:?}"),
        }
    }
    // Only once: the next read waits again.
    {
        let mut read = pin!(reader.read_buffer());
        assert!(poll_once(read.as_mut(), &waker).is_pending());
    }
    assert!(reader.try_read().unwrap().is_none());

    // A cancel with no read pending applies to the next read, once; the data is untouched.
    writer.write_slice(b"kept").unwrap();
    flush_now(&mut writer);
    canceler.cancel();
    {
        let result = reader.try_read().unwrap().unwrap();
        assert!(result.is_canceled);
        assert_eq!(result.buffer.to_vec(), b"kept");
    }
    reader.advance_to(0, 0).unwrap();
    {
        let result = reader.try_read().unwrap().unwrap();
        assert!(!result.is_canceled, "the cancel was not one-shot");
        assert_eq!(result.buffer.to_vec(), b"kept");
    }
    reader.advance_to(4, 4).unwrap();
    assert!(reader.try_read().unwrap().is_none());
    // The blocking form too.
    canceler.cancel();
    assert!(reader.read_blocking().unwrap().is_canceled);
    assert!(reader.try_read().unwrap().is_none());
}

#[test]
fn poll_read_of_a_canceled_read_reports_is_canceled_through_last_read() {
    let (_writer, mut reader) = pipe();
    let canceler = reader.canceler();
    let (wakes, waker) = counting_waker();
    assert!(reader
        .poll_read_buffer(&mut Context::from_waker(&waker))
        .is_pending());
    canceler.cancel();
    assert_eq!(wakes.get(), 1);
    assert!(matches!(
        reader.poll_read_buffer(&mut Context::from_waker(&waker)),
        Poll::Ready(Ok(()))
    ));
    let result = reader.last_read().expect("poll_read returned Ready");
    assert!(result.is_canceled, "the poll form lost the cancellation");
}

#[test]
fn cancel_pending_read_from_another_thread_wakes_a_blocked_read() {
    let (writer, mut reader) = pipe();
    let canceler = reader.canceler();
    let (tx, rx) = mpsc::channel();
    let t = thread::spawn(move || {
        let canceled = reader.read_blocking().unwrap().is_canceled;
        tx.send(canceled).unwrap();
        reader
    });
    canceler.cancel();
    assert!(rx
        .recv_timeout(TIMEOUT)
        .expect("the canceled read did not return"));
    let mut reader = t.join().unwrap();
    assert!(
        reader.try_read().unwrap().is_none(),
        "the cancel was not one-shot"
    );
    drop(writer);
}
