//! Regression tests for contract bugs found from outside, one test per behaviour, each named after
//! what it guarantees.

use std::sync::mpsc;
use std::time::Duration;

use packetpipe::pipe::{pipe, pipe_with, PipeOptions};
use packetpipe::Error;

/// Run `f` on a thread and fail (instead of hanging the suite) if it takes longer than a minute.
fn within_a_minute<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the operation hung (or panicked) instead of finishing")
}

#[test]
fn read_at_least_usize_max_after_consuming_reads_to_the_end_under_backpressure() {
    let (bytes, completed) = within_a_minute(|| {
        let (mut writer, mut reader) =
            pipe_with(PipeOptions::new().pause_threshold(16).resume_threshold(8));
        writer.write_slice(&[1; 10]).unwrap();
        writer.flush_blocking().unwrap();
        let len = reader.read_blocking().unwrap().buffer().len();
        reader.advance_to(5, len).unwrap(); // consumed > 0: the old target `consumed + n` overflowed
        let producer = std::thread::spawn(move || {
            for _ in 0..20 {
                writer.write_slice(&[2; 10]).unwrap();
                // Far past the pause threshold: only the lifted backpressure lets this return.
                writer.flush_blocking().unwrap();
            }
        });
        let result = reader.read_at_least_blocking(usize::MAX).unwrap();
        let out = (result.buffer().to_vec(), result.is_completed());
        producer.join().unwrap();
        out
    });
    assert!(
        completed,
        "reading to the end ends with the writer's completion"
    );
    let mut expected = vec![1; 5];
    expected.extend(std::iter::repeat(2).take(200));
    assert_eq!(bytes, expected);
}

#[test]
fn read_at_least_returns_the_writers_error_when_fewer_bytes_arrived() {
    let (mut writer, mut reader) = pipe();
    writer.write_slice(b"abc").unwrap();
    writer.flush_blocking().unwrap();
    writer.complete_with_error("connection reset");

    let err = reader.read_at_least_blocking(10).unwrap_err();
    assert!(
        matches!(&err, Error::Peer { side: "writer", source } if source.to_string() == "connection reset"),
        "{err:?}"
    );
    // The short bytes were not lost: a plain read still returns them, then the error again.
    let result = reader.read_blocking().unwrap();
    assert_eq!(result.buffer().to_vec(), b"abc");
    assert!(!result.is_completed() && !result.is_canceled());
    reader.consume_all().unwrap();
    assert!(matches!(reader.read_blocking(), Err(Error::Peer { .. })));
    assert!(matches!(
        reader.read_at_least_blocking(1),
        Err(Error::Peer { .. })
    ));
}

#[test]
fn read_at_least_with_enough_bytes_before_a_writer_error_returns_them_first() {
    let (mut writer, mut reader) = pipe();
    writer.write_slice(b"abcdef").unwrap();
    writer.complete_with_error("boom");
    let result = reader.read_at_least_blocking(4).unwrap();
    assert_eq!(result.buffer().to_vec(), b"abcdef");
    assert!(
        !result.is_completed(),
        "a failed writer ends through its error"
    );
    reader.consume_all().unwrap();
    assert!(matches!(
        reader.read_at_least_blocking(4),
        Err(Error::Peer { .. })
    ));
}

/// The read views can cross into a spawned task (e.g. `write_all_buf(&mut cursor)` inside
/// `tokio::spawn`): a compile-time check.
#[test]
fn read_views_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<packetpipe::pipe::ReadBuffer<'static>>();
    send_sync::<packetpipe::pipe::ReadCursor<'static>>();
    send_sync::<packetpipe::pipe::Chunks<'static>>();
    send_sync::<packetpipe::pipe::ReadResult<'static>>();
    send_sync::<packetpipe::pipe::PipeReader>();
    send_sync::<packetpipe::pipe::PipeWriter>();
}

/// A waker that counts its wakes.
#[derive(Default)]
struct WakeCount(std::sync::atomic::AtomicUsize);

impl std::task::Wake for WakeCount {
    fn wake(self: std::sync::Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// DESIGN §6: a reader waiting in `read_at_least(n)` wakes once when the n bytes are there, not
/// once per flush before (it used to be woken, and re-polled for nothing, on every segment).
/// Switching to a plain read afterwards, even from a `poll_read_at_least` left pending, gets a
/// wake on the next flush again.
#[test]
fn read_at_least_wakes_once_when_n_bytes_arrived_not_per_flush() {
    use std::task::{Context, Poll, Waker};
    let (mut writer, mut reader) = pipe();
    let count = std::sync::Arc::new(WakeCount::default());
    let waker = Waker::from(count.clone());
    let mut cx = Context::from_waker(&waker);
    let wakes = || count.0.load(std::sync::atomic::Ordering::Relaxed);

    assert!(reader.poll_read_at_least(&mut cx, 1000).is_pending());
    for i in 0..99 {
        writer.write_slice(&[i as u8; 10]).unwrap();
        writer.flush_blocking().unwrap();
    }
    assert_eq!(wakes(), 0, "990 of 1000 bytes: no wake yet");
    assert!(reader.poll_read_at_least(&mut cx, 1000).is_pending());
    writer.write_slice(&[99; 10]).unwrap();
    writer.flush_blocking().unwrap();
    assert_eq!(wakes(), 1, "woken once, when the 1000th byte arrived");
    assert!(matches!(
        reader.poll_read_at_least(&mut cx, 1000),
        Poll::Ready(Ok(()))
    ));
    reader.advance_to(0, 1000).unwrap();

    // A `poll_read_at_least` left pending, then a plain read: the next flush wakes it.
    assert!(reader.poll_read_at_least(&mut cx, 5000).is_pending());
    assert!(reader.poll_read_buffer(&mut cx).is_pending());
    writer.write_slice(b"x").unwrap();
    writer.flush_blocking().unwrap();
    assert_eq!(wakes(), 2, "a plain read is woken by the next flush");
    assert!(matches!(
        reader.poll_read_buffer(&mut cx),
        Poll::Ready(Ok(()))
    ));
}
