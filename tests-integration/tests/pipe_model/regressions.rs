//! Regressions for bugs the model found.

use packetpipe::ByteSegments;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use packetpipe::Error;

use crate::kit::pipe_model::CountWaker;

/// `complete_with_error` documents that the reader gets the error "on every read once it has read
/// the bytes flushed before", and `read_buffer()` returns those bytes first. `read_at_least(n)` with
/// fewer than `n` bytes flushed can never be satisfied: it returns the error at once (it once
/// returned the short buffer with neither `is_completed` nor `is_canceled`), and the bytes stay in
/// the pipe for `read_buffer`.
#[test]
fn read_at_least_returns_the_writers_error_when_fewer_bytes_arrived() {
    let (mut writer, mut reader) = packetpipe::pipe::pipe();
    writer.write_slice(b"abc").unwrap();
    writer.complete_with_error("boom");
    let err = packetpipe::block_on(reader.read_at_least(4)).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Peer {
                side: packetpipe::Side::Writer,
                ..
            }
        ),
        "{err:?}"
    );
    let result = reader
        .read_blocking()
        .expect("the bytes flushed before the error");
    assert_eq!(result.buffer.to_vec(), b"abc");
    assert!(!result.is_completed);
    reader.advance_to(3, 3).unwrap();
    let err = packetpipe::block_on(reader.read_at_least(4)).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Peer {
                side: packetpipe::Side::Writer,
                ..
            }
        ),
        "{err:?}"
    );
}

/// `poll_read` is the poll form of `read` (adapters are thin layers over it), so a read that
/// `cancel_pending_read` cut short must show as canceled through `last_read` (`is_canceled()`):
/// the poll's own `Ok(())` does not say it.
#[test]
fn poll_read_reports_cancellation_through_last_read() {
    let (writer, mut reader) = packetpipe::pipe::pipe();
    let waker = Waker::from(Arc::new(CountWaker::default()));
    let mut cx = Context::from_waker(&waker);
    assert!(reader.poll_read_buffer(&mut cx).is_pending());
    reader.canceler().cancel();
    assert!(matches!(
        reader.poll_read_buffer(&mut cx),
        Poll::Ready(Ok(()))
    ));
    let result = reader
        .last_read()
        .expect("a result after a ready poll_read");
    assert!(result.buffer.is_empty());
    assert!(result.is_canceled, "the poll form loses the cancellation");
    drop(writer);
}
