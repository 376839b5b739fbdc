//! The pipe's contract (what the `pipe` module and the two ends document: flushing and reading,
//! backpressure, completion, cancellation, misuse), one test per behaviour, each named after the
//! behaviour it checks.
//!
//! Waiting is observed without timing: a future (or a `poll_*` method) is polled by hand with a
//! waker that counts its wakes, so "is paused", "waits" and "wakes nobody" are exact checks. Tests
//! that use threads or tasks bound every wait with a generous timeout, only so that a bug fails the
//! test instead of hanging it; no sleep is ever a correctness condition.

use std::future::Future;
use std::io::IoSlice;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use packetpipe::pipe::{
    pipe, pipe_with, FlushResult, PipeCanceler, PipeOptions, PipeReader, PipeWriter, ReadBuffer,
    DEFAULT_COPY_THRESHOLD,
};
use packetpipe::{ByteSegments, Error, OwnedPacket, Packet, Pool};

/// Safety net for cross-thread tests: fail instead of hanging.
const TIMEOUT: Duration = Duration::from_secs(20);

// ------------------------------------------------------------------------------------------------
// Helpers

/// A waker that counts how often it was woken.
#[derive(Default)]
struct WakeCounter(AtomicUsize);

impl WakeCounter {
    fn wakes(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

impl Wake for WakeCounter {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn counting_waker() -> (Arc<WakeCounter>, Waker) {
    let counter = Arc::new(WakeCounter::default());
    let waker = Waker::from(counter.clone());
    (counter, waker)
}

fn poll_once<F: Future>(future: Pin<&mut F>, waker: &Waker) -> Poll<F::Output> {
    future.poll(&mut Context::from_waker(waker))
}

/// Poll a flush once and demand that it completes now.
#[track_caller]
fn flush_now(writer: &mut PipeWriter) -> FlushResult {
    let (_, waker) = counting_waker();
    match writer.poll_flush_pipe(&mut Context::from_waker(&waker)) {
        Poll::Ready(result) => result.expect("flush failed"),
        Poll::Pending => panic!("flush paused where it must return at once"),
    }
}

/// Whether a flush polled with `waker` is paused.
#[track_caller]
fn flush_is_paused(writer: &mut PipeWriter, waker: &Waker) -> bool {
    match writer.poll_flush_pipe(&mut Context::from_waker(waker)) {
        Poll::Ready(result) => {
            result.expect("flush failed");
            false
        }
        Poll::Pending => true,
    }
}

/// The bytes a read would return now (`try_read` must find some).
#[track_caller]
fn read_now(reader: &mut PipeReader) -> Vec<u8> {
    reader
        .try_read()
        .expect("try_read failed")
        .expect("a read must not wait here")
        .buffer()
        .to_vec()
}

/// Length of what a read returns now.
#[track_caller]
fn read_len_now(reader: &mut PipeReader) -> usize {
    reader
        .try_read()
        .expect("try_read failed")
        .expect("a read must not wait here")
        .buffer()
        .len()
}

fn chunks_of(buffer: ReadBuffer<'_>) -> Vec<Vec<u8>> {
    buffer.chunks().map(<[u8]>::to_vec).collect()
}

fn pooled(pool: &Pool, data: &[u8]) -> OwnedPacket {
    pool.copy_from_slice(data).unwrap()
}

/// A pipe over its own pool, so that pool statistics belong to this test alone.
fn pipe_on(pool: &Pool, options: PipeOptions) -> (PipeWriter, PipeReader) {
    pipe_with(options.pool(pool.clone()))
}

#[track_caller]
fn assert_peer_error(error: &Error, side: &str, message: &str) {
    match error {
        Error::Peer { side: s, source } => {
            assert_eq!(*s, side, "{error}");
            assert_eq!(source.to_string(), message, "{error}");
        }
        other => panic!("expected a peer error from the {side}, got {other:?}"),
    }
    // The message says what happened; the peer's own text is the source, not repeated.
    assert_eq!(
        error.to_string(),
        format!("the {side} completed with an error")
    );
    let source = std::error::Error::source(error).expect("a peer error has a source");
    assert_eq!(source.to_string(), message);
}

fn boom(message: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::ConnectionReset, message.to_owned())
}

// ------------------------------------------------------------------------------------------------
// Construction: both ends `Send`, neither `Clone`; options.

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
        result.buffer().to_vec()
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
    assert_eq!(wakes.wakes(), 0);
    assert!(flush_is_paused(&mut writer, &waker));
    assert_eq!(read_len_now(&mut reader), 64 * 1024);
    reader.advance_to(0, 32 * 1024 + 1).unwrap(); // 32767 left: below
    assert_eq!(wakes.wakes(), 1);
    assert!(!flush_is_paused(&mut writer, &waker));
}

#[test]
fn pause_threshold_zero_disables_backpressure() {
    let (mut writer, _reader) = pipe_with(PipeOptions::new().pause_threshold(0));
    for _ in 0..64 {
        writer.write_slice(&[7; 64 * 1024]).unwrap();
        assert_eq!(flush_now(&mut writer), FlushResult::default());
    }
}

#[test]
fn resume_threshold_above_pause_acts_as_the_pause_threshold() {
    let (mut writer, mut reader) = pipe_with(
        PipeOptions::new()
            .pause_threshold(10)
            .resume_threshold(1000),
    );
    let (wakes, waker) = counting_waker();
    writer.write_slice(&[0; 10]).unwrap();
    assert!(flush_is_paused(&mut writer, &waker));
    assert_eq!(read_len_now(&mut reader), 10);
    reader.advance_to(0, 1).unwrap(); // 9 unexamined: below the (clamped) resume threshold of 10
    assert_eq!(wakes.wakes(), 1);
    assert!(!flush_is_paused(&mut writer, &waker));
}

#[test]
fn min_segment_size_sets_the_size_of_rented_write_buffers() {
    let (mut writer, _reader) = pipe();
    assert!(
        writer.buffer_mut(1).unwrap().len() >= 4096,
        "default minimum segment is 4 KiB"
    );
    let (mut writer, _reader) = pipe_with(PipeOptions::new().min_segment_size(16 * 1024));
    assert!(writer.buffer_mut(1).unwrap().len() >= 16 * 1024);
    let (mut writer, _reader) = pipe_with(PipeOptions::new().min_segment_size(5000));
    assert!(writer.buffer_mut(0).unwrap().len() >= 5000);
}

#[test]
fn the_pipe_rents_from_the_pool_given_in_the_options() {
    let pool = Pool::new();
    let (mut writer, mut reader) = pipe_on(&pool, PipeOptions::new());
    writer.write_slice(b"from my pool").unwrap();
    assert_eq!(pool.stats().rents, 1);
    flush_now(&mut writer);
    assert_eq!(read_now(&mut reader), b"from my pool");
    drop((writer, reader));
    assert_eq!(pool.stats().outstanding, 0);
}

// ------------------------------------------------------------------------------------------------
// Writer: staging.

#[test]
fn append_stages_an_owned_packet_zero_copy() {
    let pool = Pool::new();
    let (mut writer, mut reader) = pipe_on(&pool, PipeOptions::new());
    let owned = pooled(&pool, b"owned packet");
    let owned_ptr = owned.as_ptr();
    let bytes = Bytes::from(b"a Bytes".to_vec());
    let bytes_ptr = bytes.as_ptr();
    static STATIC: &[u8] = b"static";
    writer.append(owned).unwrap();
    writer.append(bytes).unwrap();
    writer.append(Packet::from_static(STATIC)).unwrap();
    flush_now(&mut writer);

    let result = reader.try_read().unwrap().unwrap();
    let ptrs: Vec<*const u8> = result.buffer().chunks().map(<[u8]>::as_ptr).collect();
    assert_eq!(
        ptrs,
        [owned_ptr, bytes_ptr, STATIC.as_ptr()],
        "the reader sees the very same bytes"
    );
    assert_eq!(result.buffer().to_vec(), b"owned packeta Bytesstatic");
    assert_eq!(pool.stats().rents, 1, "append rents nothing");
}

#[test]
fn empty_appends_writes_and_advances_stage_nothing() {
    let (mut writer, mut reader) = pipe();
    let (wakes, waker) = counting_waker();
    assert!(reader
        .poll_read_buffer(&mut Context::from_waker(&waker))
        .is_pending());
    writer.append(Packet::new()).unwrap();
    writer.append(Bytes::new()).unwrap();
    writer.write_slice(&[]).unwrap();
    writer.buffer_mut(10).unwrap();
    writer.advance(0).unwrap();
    assert_eq!(writer.unflushed_len(), 0);
    flush_now(&mut writer);
    assert_eq!(wakes.wakes(), 0);
    assert!(reader.try_read().unwrap().is_none());
    // Between real segments, empty ones leave no zero-length chunk.
    writer.write_slice(b"a").unwrap();
    writer.append(Packet::new()).unwrap();
    writer.append(Bytes::from_static(b"b")).unwrap();
    writer.append(Bytes::new()).unwrap();
    writer.write_slice(b"c").unwrap();
    flush_now(&mut writer);
    let result = reader.try_read().unwrap().unwrap();
    assert!(result.buffer().chunks().all(|c| !c.is_empty()));
    assert_eq!(result.buffer().to_vec(), b"abc");
}

#[test]
fn buffer_mut_gives_at_least_one_byte_and_at_least_the_hint() {
    let (mut writer, mut reader) = pipe_with(PipeOptions::new().pause_threshold(0));
    assert!(!writer.buffer_mut(0).unwrap().is_empty());
    let mut expected = Vec::new();
    for hint in [1, 100, 4095, 4096, 4097, 10_000, 100_000, 3 << 20] {
        let space = writer.buffer_mut(hint).unwrap();
        assert!(
            space.len() >= hint,
            "buffer_mut({hint}) gave {} bytes",
            space.len()
        );
        let fill = (hint % 251) as u8;
        space[..hint].fill(fill);
        writer.advance(hint).unwrap();
        expected.extend(std::iter::repeat(fill).take(hint));
    }
    flush_now(&mut writer);
    assert_eq!(read_now(&mut reader), expected);
}

#[test]
fn advance_commits_exactly_the_bytes_written() {
    let (mut writer, mut reader) = pipe();
    let space = writer.buffer_mut(8).unwrap();
    space[..8].copy_from_slice(b"12345678");
    writer.advance(3).unwrap();
    assert_eq!(writer.unflushed_len(), 3);
    flush_now(&mut writer);
    assert_eq!(read_now(&mut reader), b"123");
}

#[test]
fn write_stages_a_copy() {
    let (mut writer, mut reader) = pipe();
    let mut source = b"original".to_vec();
    writer.write_slice(&source).unwrap();
    source.copy_from_slice(b"changed!");
    flush_now(&mut writer);
    let result = reader.try_read().unwrap().unwrap();
    assert_eq!(result.buffer().to_vec(), b"original");
    assert_ne!(
        result.buffer().chunks().next().unwrap().as_ptr(),
        source.as_ptr()
    );
}

#[test]
fn a_single_write_stays_one_segment() {
    let (mut writer, mut reader) = pipe_with(PipeOptions::new().pause_threshold(0));
    writer.write_slice(&[1; 4000]).unwrap();
    writer.write_slice(&[2; 3000]).unwrap(); // does not fit in the first block's tail
    flush_now(&mut writer);
    let result = reader.try_read().unwrap().unwrap();
    let lens: Vec<usize> = result.buffer().chunks().map(<[u8]>::len).collect();
    assert_eq!(lens, [4000, 3000]);
}

#[test]
fn staged_bytes_are_invisible_until_flush() {
    let (mut writer, mut reader) = pipe();
    let (wakes, waker) = counting_waker();
    assert!(reader
        .poll_read_buffer(&mut Context::from_waker(&waker))
        .is_pending());

    writer.write_slice(b"abc").unwrap();
    writer.buffer_mut(3).unwrap()[..3].copy_from_slice(b"def");
    writer.advance(3).unwrap();
    writer.append(Bytes::from_static(b"ghi")).unwrap();
    assert_eq!(writer.unflushed_len(), 9);

    assert_eq!(wakes.wakes(), 0, "staging must not wake the reader");
    assert!(
        reader.try_read().unwrap().is_none(),
        "staged bytes must be invisible"
    );
    assert!(reader
        .poll_read_buffer(&mut Context::from_waker(&waker))
        .is_pending());

    flush_now(&mut writer);
    assert_eq!(writer.unflushed_len(), 0);
    assert_eq!(wakes.wakes(), 1, "the flush wakes the waiting reader");
    assert!(reader
        .poll_read_buffer(&mut Context::from_waker(&waker))
        .is_ready());
    assert_eq!(reader.last_read().unwrap().buffer().to_vec(), b"abcdefghi");
}

#[test]
fn after_a_flush_the_writer_keeps_writing_into_the_tail_of_the_same_block() {
    let pool = Pool::new();
    let (mut writer, mut reader) = pipe_on(&pool, PipeOptions::new());
    writer.write_slice(b"first").unwrap();
    flush_now(&mut writer);
    writer.write_slice(b"second").unwrap();
    flush_now(&mut writer);
    let result = reader.try_read().unwrap().unwrap();
    let chunks: Vec<&[u8]> = result.buffer().chunks().collect();
    // Same block, next bytes: the second flush grows the first flush's segment.
    assert_eq!(chunks, [&b"firstsecond"[..]]);
    assert_eq!(pool.stats().rents, 1);
}

#[test]
fn a_segment_read_and_consumed_grows_again_with_the_next_flush_into_its_block() {
    let pool = Pool::new();
    let (mut writer, mut reader) = pipe_on(&pool, PipeOptions::new().pause_threshold(0));
    let mut start = None;
    // A peer trickling one byte per flush: each read sees the unconsumed bytes as one segment,
    // whether the reader consumed what it saw or only examined it.
    for (i, byte) in b"GET / HTTP/1.1".iter().enumerate() {
        writer.write_slice(&[*byte]).unwrap();
        flush_now(&mut writer);
        let result = reader.try_read().unwrap().unwrap();
        let chunks: Vec<&[u8]> = result.buffer().chunks().collect();
        assert_eq!(chunks.len(), 1, "one segment after {} flushes", i + 1);
        let first = *start.get_or_insert(chunks[0].as_ptr());
        if i < 8 {
            assert_eq!(chunks[0], &b"GET / HTTP/1.1"[..=i]);
            assert_eq!(chunks[0].as_ptr(), first, "the same segment, grown");
            reader.advance_to(0, i + 1).unwrap();
        } else {
            // Everything up to the last read was consumed: the segment holds what came since.
            let from = if i == 8 { 0 } else { i };
            assert_eq!(chunks[0], &b"GET / HTTP/1.1"[from..=i]);
            let len = chunks[0].len();
            reader.advance_to(len, len).unwrap();
        }
    }
    assert_eq!(pool.stats().rents, 1, "one block for every flush");
    writer.complete();
    assert!(reader.read_blocking().unwrap().is_completed());
    drop(reader);
    assert_eq!(pool.stats().outstanding, 0);
}

// ------------------------------------------------------------------------------------------------
// Writer: flush.

#[test]
fn unpaused_flush_returns_at_once_with_a_plain_result() {
    let (mut writer, mut reader) = pipe();
    let (wakes, waker) = counting_waker();
    writer.write_slice(b"x").unwrap();
    let mut flush = pin!(writer.flush_pipe());
    match poll_once(flush.as_mut(), &waker) {
        Poll::Ready(Ok(result)) => {
            assert!(!result.is_completed());
            assert!(!result.is_canceled());
        }
        other => panic!("unpaused flush did not return at once: {other:?}"),
    }
    assert_eq!(wakes.wakes(), 0);
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
    assert_eq!(wakes.wakes(), 0, "a 0-byte flush woke the reader");
    assert!(reader.try_read().unwrap().is_none());

    // After some traffic, with the reader waiting again (examined everything).
    writer.write_slice(b"data").unwrap();
    flush_now(&mut writer);
    assert_eq!(
        wakes.wakes(),
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
    assert_eq!(wakes.wakes(), 1, "a 0-byte flush woke the reader");
}

#[test]
fn flush_pauses_at_pause_threshold_and_resumes_below_resume() {
    let (mut writer, mut reader) =
        pipe_with(PipeOptions::new().pause_threshold(100).resume_threshold(50));
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
        wakes.wakes(),
        0,
        "woken although still at the resume threshold"
    );
    assert!(flush_is_paused(&mut writer, &waker));

    assert_eq!(read_len_now(&mut reader), 100);
    reader.advance_to(0, 51).unwrap(); // 49 unexamined
    assert_eq!(wakes.wakes(), 1, "not woken below the resume threshold");
    assert!(!flush_is_paused(&mut writer, &waker));

    // Hysteresis: a new flush pauses only when the pause threshold is reached again.
    writer.write_slice(&[3; 50]).unwrap(); // 99 unexamined
    assert!(!flush_is_paused(&mut writer, &waker));
    writer.write_slice(&[4]).unwrap(); // 100
    assert!(flush_is_paused(&mut writer, &waker));
    // Consuming (not only examining) also counts.
    assert_eq!(read_len_now(&mut reader), 151);
    reader.advance_to(151, 151).unwrap();
    assert_eq!(wakes.wakes(), 2);
    assert_eq!(flush_now(&mut writer), FlushResult::default());
}

#[test]
fn paused_flush_future_completes_when_the_reader_catches_up() {
    let (mut writer, mut reader) =
        pipe_with(PipeOptions::new().pause_threshold(10).resume_threshold(5));
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
    assert_eq!(wakes.wakes(), 1);
    match poll_once(flush.as_mut(), &waker) {
        Poll::Ready(Ok(result)) => assert_eq!(result, FlushResult::default()),
        other => panic!("expected the flush to resume, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flush_await_waits_for_a_reader_task() {
    let (mut writer, mut reader) = pipe_with(
        PipeOptions::new()
            .pause_threshold(1000)
            .resume_threshold(500),
    );
    let reader_task = tokio::spawn(async move {
        let mut total = 0usize;
        let mut sum = 0u64;
        loop {
            let result = reader.read_buffer().await.unwrap();
            let buffer = result.buffer();
            sum += buffer
                .chunks()
                .flatten()
                .map(|&b| u64::from(b))
                .sum::<u64>();
            let (len, done) = (buffer.len(), result.is_completed());
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
        assert!(!result.is_completed() && !result.is_canceled());
    }
    writer.complete();
    let (total, sum) = tokio::time::timeout(TIMEOUT, reader_task)
        .await
        .expect("reader hung")
        .unwrap();
    assert_eq!((total, sum), (500 * 300, expected));
}

// ------------------------------------------------------------------------------------------------
// Cancellation.

#[test]
fn cancel_pending_flush_keeps_data_committed() {
    let (mut writer, mut reader) =
        pipe_with(PipeOptions::new().pause_threshold(10).resume_threshold(5));
    let canceler = writer.canceler();
    let (wakes, waker) = counting_waker();
    writer.write_slice(b"0123456789abcdef").unwrap();
    assert!(flush_is_paused(&mut writer, &waker));
    canceler.cancel_pending_flush();
    assert_eq!(wakes.wakes(), 1, "canceling wakes the paused flush");
    match writer.poll_flush_pipe(&mut Context::from_waker(&waker)) {
        Poll::Ready(Ok(result)) => {
            assert!(result.is_canceled());
            assert!(!result.is_completed());
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
    let (mut writer, mut reader) =
        pipe_with(PipeOptions::new().pause_threshold(10).resume_threshold(5));
    let canceler = writer.canceler();
    let (_, waker) = counting_waker();
    writer.write_slice(&[0; 20]).unwrap();
    assert!(flush_is_paused(&mut writer, &waker));
    canceler.cancel_pending_flush();
    let Poll::Ready(Ok(result)) = writer.poll_flush_pipe(&mut Context::from_waker(&waker)) else {
        panic!("canceled flush did not return");
    };
    assert!(result.is_canceled());
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
    canceler.cancel_pending_flush();
    assert!(flush_now(&mut writer).is_canceled());
    assert_eq!(flush_now(&mut writer), FlushResult::default());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_pending_flush_from_another_task() {
    let (mut writer, mut reader) =
        pipe_with(PipeOptions::new().pause_threshold(8).resume_threshold(4));
    let canceler = writer.canceler();
    writer.write_slice(&[9; 8]).unwrap();
    let flushing = tokio::spawn(async move {
        let result = writer.flush_pipe().await.unwrap();
        (result, writer)
    });
    // The task either is paused already or will see the flag when it polls: one-shot either way.
    tokio::task::spawn_blocking(move || canceler.cancel_pending_flush())
        .await
        .unwrap();
    let (result, _writer) = tokio::time::timeout(TIMEOUT, flushing)
        .await
        .expect("flush hung")
        .unwrap();
    assert!(result.is_canceled());
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
        canceler.cancel_pending_read();
        assert_eq!(wakes.wakes(), 1);
        match poll_once(read.as_mut(), &waker) {
            Poll::Ready(Ok(result)) => {
                assert!(result.is_canceled());
                assert!(!result.is_completed());
                assert!(result.buffer().is_empty());
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
    canceler.cancel_pending_read();
    {
        let result = reader.try_read().unwrap().unwrap();
        assert!(result.is_canceled());
        assert_eq!(result.buffer().to_vec(), b"kept");
    }
    reader.advance_to(0, 0).unwrap();
    {
        let result = reader.try_read().unwrap().unwrap();
        assert!(!result.is_canceled(), "the cancel was not one-shot");
        assert_eq!(result.buffer().to_vec(), b"kept");
    }
    reader.advance_to(4, 4).unwrap();
    assert!(reader.try_read().unwrap().is_none());
    // The blocking form too.
    canceler.cancel_pending_read();
    assert!(reader.read_blocking().unwrap().is_canceled());
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
    canceler.cancel_pending_read();
    assert_eq!(wakes.wakes(), 1);
    assert!(matches!(
        reader.poll_read_buffer(&mut Context::from_waker(&waker)),
        Poll::Ready(Ok(()))
    ));
    let result = reader.last_read().expect("poll_read returned Ready");
    assert!(result.is_canceled(), "the poll form lost the cancellation");
}

#[test]
fn cancel_pending_read_from_another_thread_wakes_a_blocked_read() {
    let (writer, mut reader) = pipe();
    let canceler = reader.canceler();
    let (tx, rx) = mpsc::channel();
    let t = thread::spawn(move || {
        let canceled = reader.read_blocking().unwrap().is_canceled();
        tx.send(canceled).unwrap();
        reader
    });
    canceler.cancel_pending_read();
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

// ------------------------------------------------------------------------------------------------
// Writer completion.

#[test]
fn writer_completion_commits_staged_data() {
    let (mut writer, mut reader) = pipe();
    let (wakes, waker) = counting_waker();
    assert!(reader
        .poll_read_buffer(&mut Context::from_waker(&waker))
        .is_pending());
    writer.write_slice(b"abc").unwrap();
    writer.buffer_mut(3).unwrap()[..3].copy_from_slice(b"def");
    writer.advance(3).unwrap();
    writer.append(Bytes::from_static(b"ghi")).unwrap();
    writer.complete();
    assert_eq!(wakes.wakes(), 1, "completion wakes the reader");
    assert!(reader
        .poll_read_buffer(&mut Context::from_waker(&waker))
        .is_ready());
    let result = reader.last_read().unwrap();
    assert_eq!(
        result.buffer().to_vec(),
        b"abcdefghi",
        "staged data lost on completion"
    );
    assert!(result.is_completed());
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
    assert_eq!(wakes.wakes(), 1, "dropping the writer wakes the reader");
    let result = reader.try_read().unwrap().unwrap();
    assert_eq!(result.buffer().to_vec(), b"flushed staged");
    assert!(result.is_completed());
    // Completed: reads keep returning at once.
    reader.advance_to(14, 14).unwrap();
    let result = reader.try_read().unwrap().unwrap();
    assert!(result.is_completed() && result.buffer().is_empty());
}

#[test]
fn writer_completion_is_seen_only_after_every_byte_across_threads() {
    // The failure this rules out: the reader seeing "writer closed" before the last bytes.
    for round in 0..200u32 {
        let (mut writer, mut reader) = pipe_with(PipeOptions::new().pause_threshold(0));
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
            let len = result.buffer().len();
            let done = result.is_completed();
            got.extend(result.buffer().to_vec());
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
                if result.is_completed() {
                    assert_eq!(
                        result.buffer().to_vec(),
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
    assert_eq!(result.buffer().to_vec(), b"abcde");
    assert!(!result.is_canceled());
    // Examined but not consumed: the data is seen, so now the error.
    reader.advance_to(0, 5).unwrap();
    let first = reader
        .try_read()
        .map(|r| r.map(|r| r.buffer().len()))
        .unwrap_err();
    assert_peer_error(&first, "writer", "connection reset");
    // On every later read, whichever form.
    for _ in 0..3 {
        let e = reader
            .try_read()
            .map(|r| r.map(|r| r.buffer().len()))
            .unwrap_err();
        assert_peer_error(&e, "writer", "connection reset");
        assert_eq!(e, first, "the same shared error each time");
        let e = reader
            .read_blocking()
            .map(|r| r.buffer().len())
            .unwrap_err();
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
            Poll::Ready(Ok(result)) => panic!("short buffer of {} bytes", result.buffer().len()),
            Poll::Pending => panic!("read_at_least waits on a completed writer"),
        }
    }
    assert_eq!(reader.read_blocking().unwrap().buffer().to_vec(), b"abc");
    reader.advance_to(0, 3).unwrap();
    let e = reader
        .read_at_least_blocking(10)
        .map(|r| r.buffer().len())
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
    assert_eq!(wakes.wakes(), 1);
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
        assert!(result.is_completed());
        assert_eq!(result.buffer().to_vec(), b"x");
    }
    reader.advance_to(1, 1).unwrap();
    assert!(reader.try_read().unwrap().unwrap().is_completed());

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
        assert!(result.is_completed());
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
        result.buffer().to_vec(),
        b"once",
        "no duplicate, nothing lost"
    );
    assert!(result.is_completed());
    reader.complete();
    reader.complete();
    assert_eq!(
        reader.try_read().map(|r| r.is_some()).unwrap_err(),
        Error::ReaderCompleted
    );
}

// ------------------------------------------------------------------------------------------------
// Reader: read, examined, consumed.

#[test]
fn read_returns_every_flushed_unconsumed_byte_as_segments() {
    let (mut writer, mut reader) = pipe();
    writer.append(Bytes::from_static(b"one ")).unwrap();
    flush_now(&mut writer);
    writer.append(Bytes::from_static(b"two ")).unwrap();
    writer.write_slice(b"three").unwrap();
    flush_now(&mut writer);
    let result = reader.try_read().unwrap().unwrap();
    assert_eq!(
        chunks_of(result.buffer()),
        [&b"one "[..], b"two ", b"three"]
    );
    assert!(!result.is_completed() && !result.is_canceled());
    reader.advance_to(6, 13).unwrap(); // consumed "one tw"
    writer.write_slice(b"!").unwrap();
    flush_now(&mut writer);
    let result = reader.try_read().unwrap().unwrap();
    assert_eq!(result.buffer().to_vec(), b"o three!");
    assert!(result.buffer().chunks().all(|c| !c.is_empty()));
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
        assert_eq!(wakes.wakes(), 1);
        match poll_once(read.as_mut(), &waker) {
            Poll::Ready(Ok(result)) => assert_eq!(result.buffer().to_vec(), b"abc"),
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
    assert_eq!(wakes.wakes(), 2);
    match poll_once(read.as_mut(), &waker) {
        Poll::Ready(Ok(result)) => {
            assert_eq!(result.buffer().to_vec(), b"bcd", "all unconsumed bytes")
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
    let (mut writer, mut reader) =
        pipe_with(PipeOptions::new().pause_threshold(10).resume_threshold(5));
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
    assert_eq!(wakes.wakes(), 0);
    assert_eq!(read_len_now(&mut reader), 18);
    reader.advance_to(0, 3).unwrap(); // backwards again: the writer stays paused, not woken
    assert_eq!(wakes.wakes(), 0);
    assert!(flush_is_paused(&mut writer, &waker));
    assert_eq!(read_len_now(&mut reader), 18);
    reader.advance_to(0, 14).unwrap(); // furthest 14: 4 unexamined
    assert_eq!(wakes.wakes(), 1);
    assert!(!flush_is_paused(&mut writer, &waker));
}

#[test]
fn consumed_bytes_are_released_and_blocks_go_home() {
    let pool = Pool::new();
    let (mut writer, mut reader) = pipe_on(&pool, PipeOptions::new());
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
        assert!(result.is_completed());
        assert_eq!(result.buffer().to_vec(), b"abc");
    }
    // try_read does not register as a waiter: nothing is left behind that blocks anything.
    reader.advance_to(3, 3).unwrap();
    assert!(reader.try_read().unwrap().unwrap().buffer().is_empty());
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
        assert_eq!(wakes.wakes(), 0, "6 < 10 bytes: the reader is not woken");
        assert!(
            poll_once(read.as_mut(), &waker).is_pending(),
            "6 < 10 bytes"
        );
        writer.write_slice(&[2; 4]).unwrap();
        flush_now(&mut writer);
        assert_eq!(wakes.wakes(), 1, "woken once the 10 bytes are there");
        match poll_once(read.as_mut(), &waker) {
            Poll::Ready(Ok(result)) => assert_eq!(result.buffer().len(), 10),
            other => panic!("expected 10 bytes, got {other:?}"),
        }
    }
    // Already there: returns at once, even with examined == length.
    reader.advance_to(0, 10).unwrap();
    {
        let mut read = pin!(reader.read_at_least(4));
        assert!(
            matches!(poll_once(read.as_mut(), &waker), Poll::Ready(Ok(r)) if r.buffer().len() == 10)
        );
    }
    reader.advance_to(4, 10).unwrap();
    // Completion ends the wait with fewer bytes.
    let mut read = pin!(reader.read_at_least(100));
    assert!(poll_once(read.as_mut(), &waker).is_pending());
    writer.complete();
    match poll_once(read.as_mut(), &waker) {
        Poll::Ready(Ok(result)) => {
            assert!(result.is_completed());
            assert_eq!(result.buffer().len(), 6);
        }
        other => panic!("expected completion, got {other:?}"),
    }
}

#[test]
fn read_at_least_lifts_backpressure() {
    let (mut writer, mut reader) =
        pipe_with(PipeOptions::new().pause_threshold(16).resume_threshold(8));
    let (writer_wakes, writer_waker) = counting_waker();
    let (reader_wakes, reader_waker) = counting_waker();
    writer.write_slice(&[1; 20]).unwrap();
    assert!(flush_is_paused(&mut writer, &writer_waker));
    {
        let mut read = pin!(reader.read_at_least(40));
        assert!(poll_once(read.as_mut(), &reader_waker).is_pending());
        assert_eq!(
            writer_wakes.wakes(),
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
        assert!(reader_wakes.wakes() >= 1);
        match poll_once(read.as_mut(), &reader_waker) {
            Poll::Ready(Ok(result)) => assert_eq!(result.buffer().len(), 40),
            other => panic!("expected 40 bytes, got {other:?}"),
        }
    }
    let woken = writer_wakes.wakes();
    reader.advance_to(40, 40).unwrap();
    assert_eq!(writer_wakes.wakes(), woken + 1);
    assert!(!flush_is_paused(&mut writer, &writer_waker));
}

#[test]
fn read_at_least_dropped_while_waiting_restores_backpressure() {
    let (mut writer, mut reader) =
        pipe_with(PipeOptions::new().pause_threshold(16).resume_threshold(8));
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
    let (mut writer, mut reader) =
        pipe_with(PipeOptions::new().pause_threshold(16).resume_threshold(8));
    let (tx, rx) = mpsc::channel();
    let w = thread::spawn(move || {
        for i in 0..10u8 {
            writer.write_slice(&[i; 10]).unwrap();
            writer.flush_blocking().unwrap();
        }
        writer
    });
    let r = thread::spawn(move || {
        let len = reader.read_at_least_blocking(100).unwrap().buffer().len();
        tx.send(len).unwrap();
        reader
    });
    let len = rx
        .recv_timeout(TIMEOUT)
        .expect("read_at_least(100) with a 16-byte pause threshold deadlocked");
    assert!(len >= 100);
    let mut reader = r.join().unwrap();
    let expected: Vec<u8> = (0..10u8).flat_map(|i| [i; 10]).collect();
    assert_eq!(reader.last_read().unwrap().buffer().to_vec(), expected);
    // The last flush, with the read satisfied, is under ordinary backpressure: release it.
    reader.advance_to(100, 100).unwrap();
    let _writer = w.join().unwrap();
}

// ------------------------------------------------------------------------------------------------
// take_frame.

/// A pipe on `pool` (copy threshold 100, no backpressure) holding 1,000 bytes in one pooled
/// block, read: the writer, the reader, the bytes and the address of the first.
fn pipe_with_one_block(pool: &Pool, pattern: u32) -> (PipeWriter, PipeReader, Vec<u8>, *const u8) {
    let (mut writer, mut reader) = pipe_on(
        pool,
        PipeOptions::new().copy_threshold(100).pause_threshold(0),
    );
    let data: Vec<u8> = (0..1000u32).map(|i| (i * pattern % 256) as u8).collect();
    writer.append(pooled(pool, &data)).unwrap(); // one 1024-byte block
    flush_now(&mut writer);
    let start = reader
        .try_read()
        .unwrap()
        .unwrap()
        .buffer()
        .first_chunk()
        .as_ptr();
    (writer, reader, data, start)
}

#[test]
fn take_frame_copies_small_and_shares_large() {
    let pool = Pool::new();
    let (writer, mut reader, data, start) = pipe_with_one_block(&pool, 7);

    // n == copy threshold: copied into its own, fitted, pooled buffer.
    let small = reader.take_frame(100).unwrap();
    assert_eq!(&small[..], &data[..100]);
    assert_ne!(small.as_ptr(), start, "a small frame must be copied");
    let small_owned = small.as_owned().expect("copied into a pooled buffer");
    assert!(
        small_owned.is_unique(),
        "the copy shares its block with nothing"
    );

    // n > copy threshold: shared, zero-copy, out of the same block.
    let large = reader.take_frame(101).unwrap();
    assert_eq!(&large[..], &data[100..201]);
    assert_eq!(
        large.as_ptr(),
        start.wrapping_add(100),
        "a large frame must be shared"
    );
    assert!(
        !large.as_owned().expect("a pooled packet").is_unique(),
        "shares the pipe's block"
    );

    // The rest is still in the pipe.
    assert_eq!(reader.last_read().unwrap().buffer().to_vec(), &data[201..]);
    reader.advance_to(799, 799).unwrap();

    // The small frame does not pin the large block: once the large frame and the pipe are gone,
    // only the small frame's fitted block is out, and it is the size class of 100 bytes.
    drop((writer, reader, large));
    let stats = pool.stats();
    assert_eq!(stats.outstanding, 1, "{stats:?}");
    let retained = stats.retained_bytes;
    drop(small);
    let stats = pool.stats();
    assert_eq!(stats.outstanding, 0, "{stats:?}");
    assert_eq!(
        stats.retained_bytes - retained,
        pool.class_size_for(100).unwrap() as u64,
        "fitted buffer"
    );
}

#[test]
fn take_frame_default_copy_threshold_is_the_documented_one() {
    let (mut writer, mut reader) = pipe_with(PipeOptions::new().pause_threshold(0));
    let n = DEFAULT_COPY_THRESHOLD;
    writer.append(Bytes::from(vec![5u8; 4 * n])).unwrap();
    flush_now(&mut writer);
    let start = reader
        .try_read()
        .unwrap()
        .unwrap()
        .buffer()
        .chunks()
        .next()
        .unwrap()
        .as_ptr();
    let copied = reader.take_frame(n).unwrap();
    assert_ne!(copied.as_ptr(), start);
    let shared = reader.take_frame(n + 1).unwrap();
    assert_eq!(shared.as_ptr(), start.wrapping_add(n));
    assert_eq!((copied.len(), shared.len()), (n, n + 1));
}

#[test]
fn take_frame_outlives_the_pipe() {
    let pool = Pool::new();
    let (mut writer, mut reader) = pipe_on(&pool, PipeOptions::new().copy_threshold(16));
    writer.write_slice(b"tiny").unwrap();
    writer.write_slice(&[b'L'; 5000]).unwrap();
    flush_now(&mut writer);
    reader.try_read().unwrap().unwrap();
    let tiny = reader.take_frame(4).unwrap();
    let large = reader.take_frame(5000).unwrap();
    drop((writer, reader));
    assert_eq!(&tiny[..], b"tiny");
    assert_eq!(&large[..], &[b'L'; 5000][..]);
    // The tiny frame is inline (no block); the large one keeps its shared block.
    assert!(tiny.is_inline());
    assert_eq!(pool.stats().outstanding, 1);
    drop((tiny, large));
    assert_eq!(pool.stats().outstanding, 0);
}

#[test]
fn take_frame_shrinks_the_read_buffer_and_advance_to_is_relative_to_what_is_left() {
    let (mut writer, mut reader) = pipe();
    writer.write_slice(b"\x03abc\x02de\x04fg").unwrap();
    flush_now(&mut writer);
    reader.try_read().unwrap().unwrap();
    let mut frames = Vec::new();
    loop {
        let buffer = reader.last_read().unwrap().buffer();
        let Some(len) = buffer.get(0).map(usize::from) else {
            break;
        };
        if buffer.len() < 1 + len {
            break;
        }
        assert_eq!(reader.take_frame(1).unwrap(), &[len as u8][..]);
        frames.push(reader.take_frame(len).unwrap());
    }
    assert_eq!(frames, [&b"abc"[..], &b"de"[..]]);
    assert_eq!(reader.last_read().unwrap().buffer().to_vec(), b"\x04fg");
    // Relative to what is left: examined 3 = everything, so the next read waits.
    reader.advance_to(0, 3).unwrap();
    assert!(reader.try_read().unwrap().is_none());
    writer.write_slice(b"hi").unwrap();
    flush_now(&mut writer);
    assert_eq!(read_now(&mut reader), b"\x04fghi");
}

#[test]
fn take_frame_chain_shares_a_frame_spanning_segments() {
    let (mut writer, mut reader) = pipe_with(PipeOptions::new().copy_threshold(4));
    let a = Bytes::from(vec![1u8; 10]);
    let b = Bytes::from(vec![2u8; 10]);
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    writer.append(a).unwrap();
    writer.append(b).unwrap();
    flush_now(&mut writer);
    reader.try_read().unwrap().unwrap();
    let chain = reader.take_frame_chain(15).unwrap();
    let ptrs: Vec<*const u8> = chain.iter().map(|p| p.as_ptr()).collect();
    assert_eq!(ptrs, [pa, pb]);
    assert_eq!(chain.to_vec(), [[1u8; 10].as_slice(), &[2u8; 5]].concat());
    // A frame spanning segments through take_frame still has the right bytes.
    let frame = reader.take_frame(5).unwrap();
    assert_eq!(&frame[..], &[2u8; 5]);
}

#[test]
fn take_frame_after_skips_a_header_then_copies_small_and_shares_large() {
    let pool = Pool::new();
    let (_writer, mut reader, data, start) = pipe_with_one_block(&pool, 13);

    // Skip 4, copy 100 (the threshold) into a buffer fitted to the 100 bytes alone.
    let small = reader.take_frame_after(4, 100).unwrap();
    assert_eq!(&small[..], &data[4..104]);
    assert_ne!(small.as_ptr(), start.wrapping_add(4), "copied");
    let small_block = small.as_owned().unwrap().headroom() + small.len();
    assert!(small_block <= pool.class_size_for(100).unwrap());
    assert_eq!(reader.last_read().unwrap().buffer().len(), 896);

    // Skip 2, share 101 out of the same block.
    let large = reader.take_frame_after(2, 101).unwrap();
    assert_eq!(&large[..], &data[106..207]);
    assert_eq!(large.as_ptr(), start.wrapping_add(106), "shared");

    // Skip everything that is left but one byte, take nothing: consumes the skipped bytes.
    let empty = reader.take_frame_after(792, 0).unwrap();
    assert!(empty.is_empty());
    assert_eq!(reader.last_read().unwrap().buffer().to_vec(), &data[999..]);
    reader.advance_to(1, 1).unwrap();
}

#[test]
fn take_frame_after_across_segments_gives_the_bytes_and_bounds_errors_change_nothing() {
    let (mut writer, mut reader) = pipe_with(PipeOptions::new().copy_threshold(4));
    writer.append(Bytes::from(vec![1u8; 10])).unwrap();
    writer.append(Bytes::from(vec![2u8; 10])).unwrap();
    writer.append(Bytes::from(vec![3u8; 10])).unwrap();
    flush_now(&mut writer);
    reader.try_read().unwrap().unwrap();

    // Beyond the buffer, counting the skipped bytes: an error naming skip and n, nothing consumed.
    let e = reader.take_frame_after(25, 6).unwrap_err();
    assert_eq!(
        e,
        Error::FrameBeyondBuffer {
            skip: 25,
            requested: 6,
            len: 30
        }
    );
    assert_eq!(
        e.to_string(),
        "take_frame_after of 25 + 6 bytes: the buffer last read holds only 30 bytes"
    );
    // A skip near usize::MAX: the numbers as passed, no overflow.
    let e = reader.take_frame_after(usize::MAX, 1).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "take_frame_after of {} + 1 bytes: the buffer last read holds only 30 bytes",
            usize::MAX
        )
    );
    assert_eq!(reader.last_read().unwrap().buffer().len(), 30);

    // The skip crosses the first segment and the frame (above the copy threshold) spans the
    // second and third: copied into one buffer.
    let frame = reader.take_frame_after(12, 10).unwrap();
    assert_eq!(&frame[..], [[2u8; 8].as_slice(), &[3u8; 2]].concat());
    // Small, inside the third segment after the skip: copied.
    let frame = reader.take_frame_after(1, 3).unwrap();
    assert_eq!(&frame[..], &[3u8; 3]);
    assert_eq!(reader.last_read().unwrap().buffer().to_vec(), [3u8; 4]);
    // At the copy threshold, the rest of the third segment: copied.
    let frame = reader.take_frame_after(0, 4).unwrap();
    assert_eq!(&frame[..], &[3u8; 4]);
    reader.advance_to(0, 0).unwrap();
    writer.complete();
    assert!(reader.read_blocking().unwrap().is_completed());
}

#[test]
fn a_large_frame_over_flushes_of_one_block_is_shared_and_over_separate_blocks_copied() {
    let pool = Pool::new();
    let (mut writer, mut reader) = pipe_on(
        &pool,
        PipeOptions::new()
            .copy_threshold(100)
            .min_segment_size(4096)
            .pause_threshold(0),
    );
    // Three flushes into the tail of one 4 KiB block: one segment, grown by each flush.
    let data: Vec<u8> = (0..600u32).map(|i| (i * 31 % 251) as u8).collect();
    for part in data.chunks(200) {
        writer.write_slice(part).unwrap();
        flush_now(&mut writer);
    }
    let result = reader.try_read().unwrap().unwrap();
    assert_eq!(result.buffer().chunks().count(), 1);
    let start = result.buffer().first_chunk().as_ptr();
    let rents = pool.stats().rents;

    // 500 bytes from offset 50, above the copy threshold: a window shared out of the segment, no
    // copy, no rent.
    let frame = reader.take_frame_after(50, 500).unwrap();
    assert_eq!(&frame[..], &data[50..550]);
    assert_eq!(frame.as_ptr(), start.wrapping_add(50), "shared, not copied");
    assert_eq!(pool.stats().rents, rents, "no buffer rented for the frame");
    assert!(
        !frame.as_owned().unwrap().is_unique(),
        "shares the pipe's block"
    );
    reader.advance_to(50, 50).unwrap();
    drop(frame);

    // Segments of separate blocks (appended packets) do not join: copied into one buffer.
    writer.append(pooled(&pool, &data[..300])).unwrap();
    writer.append(pooled(&pool, &data[300..])).unwrap();
    flush_now(&mut writer);
    reader.try_read().unwrap().unwrap();
    let frame = reader.take_frame(600).unwrap();
    assert_eq!(&frame[..], &data[..]);
    assert!(frame.as_owned().unwrap().is_unique(), "a copy of its own");
}

#[test]
fn first_chunk_is_the_first_segment_of_any_view() {
    let (mut writer, mut reader) = pipe();
    writer.append(&b"abc"[..]).unwrap();
    writer.append(&b"defg"[..]).unwrap();
    flush_now(&mut writer);
    let result = reader.try_read().unwrap().unwrap();
    let buffer = result.buffer();
    assert_eq!(buffer.first_chunk(), b"abc");
    assert_eq!(buffer.slice(..2).first_chunk(), b"ab");
    assert_eq!(buffer.slice(1..).first_chunk(), b"bc");
    assert_eq!(buffer.slice(3..5).first_chunk(), b"de");
    assert_eq!(buffer.slice(7..).first_chunk(), b"");
    reader.advance_to(7, 7).unwrap();
    writer.complete();
    let result = reader.read_blocking().unwrap();
    assert_eq!(result.buffer().first_chunk(), b"");
}

// ------------------------------------------------------------------------------------------------
// Reader completion.

#[test]
fn reader_completion_releases_everything_it_holds_and_wakes_a_paused_flush() {
    let pool = Pool::new();
    let (mut writer, mut reader) = pipe_on(
        &pool,
        PipeOptions::new().pause_threshold(100).resume_threshold(50),
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
    assert_eq!(wakes.wakes(), 1, "a paused flush is woken");
    match writer.poll_flush_pipe(&mut Context::from_waker(&waker)) {
        Poll::Ready(Ok(result)) => {
            assert!(result.is_completed());
            assert!(!result.is_canceled());
        }
        other => panic!("expected is_completed, got {other:?}"),
    }
    assert!(writer.is_reader_completed());
}

#[test]
fn reader_completion_releases_everything_and_later_writes_are_discarded_renting_nothing() {
    let pool = Pool::new();
    let (mut writer, mut reader) = pipe_on(&pool, PipeOptions::new());
    writer.write_slice(&[1; 1000]).unwrap(); // block A (the writer's buffer)
    flush_now(&mut writer);
    writer.write_slice(&[2; 500]).unwrap(); // staged, in block A's tail
    writer.append(pooled(&pool, &[3; 100])).unwrap(); // staged, block B
    assert_eq!(read_len_now(&mut reader), 1000);
    reader.advance_to(10, 10).unwrap();
    assert_eq!(pool.stats().outstanding, 2);

    reader.complete(); // the reader stays alive, completed
    let result = writer.flush_blocking().unwrap();
    assert!(result.is_completed());
    assert_eq!(
        pool.stats().outstanding,
        0,
        "after the reader completed, the writer's flush must release the staged buffers, not publish them"
    );

    // Later writes of every kind are accepted, discarded, and rent nothing.
    let rents = pool.stats().rents;
    for _ in 0..10 {
        writer.write_slice(&[4; 10_000]).unwrap();
        let space = writer.buffer_mut(100_000).unwrap();
        assert!(space.len() >= 100_000);
        writer.advance(100_000).unwrap();
        writer.append(Bytes::from_static(b"discarded")).unwrap();
        assert_eq!(writer.unflushed_len(), 0, "discarded writes are not staged");
        assert!(writer.flush_blocking().unwrap().is_completed());
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
    let (mut writer, mut reader) = pipe_on(&pool, PipeOptions::new());
    writer.write_slice(b"before").unwrap();
    flush_now(&mut writer);
    assert_eq!(read_now(&mut reader), b"before");
    reader.advance_to(6, 6).unwrap();
    reader.complete();
    // The writer's block (its tail parked at the flush) went home with the reader's completion.
    assert_eq!(pool.stats().outstanding, 0, "{:?}", pool.stats());
    writer.write_slice(b"after").unwrap(); // would have fit in the parked buffer
    assert!(writer.flush_blocking().unwrap().is_completed());
    assert_eq!(
        pool.stats().outstanding,
        0,
        "the discarded write still holds a block"
    );
}

#[test]
fn reader_completion_makes_later_writes_rent_nothing_once_noticed() {
    let pool = Pool::new();
    let (mut writer, mut reader) = pipe_on(&pool, PipeOptions::new());
    writer.write_slice(&[1; 1000]).unwrap();
    flush_now(&mut writer);
    assert_eq!(read_len_now(&mut reader), 1000);
    reader.advance_to(1000, 1000).unwrap();
    drop(reader);
    assert!(writer.flush_blocking().unwrap().is_completed());
    assert_eq!(pool.stats().outstanding, 0);
    let rents = pool.stats().rents;
    for _ in 0..10 {
        writer.write_slice(&[4; 10_000]).unwrap();
        writer.buffer_mut(100_000).unwrap();
        writer.advance(100_000).unwrap();
        writer.append(pooled(&pool, b"dropped at once")).unwrap();
        assert!(writer.flush_blocking().unwrap().is_completed());
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
        PipeOptions::new()
            .pause_threshold(1024)
            .resume_threshold(512),
    );
    let (tx, rx) = mpsc::channel();
    let t = thread::spawn(move || {
        let mut frames = 0u64;
        loop {
            writer.write_slice(&[0xAB; 300]).unwrap();
            let result = writer.flush_blocking().unwrap();
            frames += 1;
            if result.is_completed() {
                tx.send(frames).unwrap();
                return writer;
            }
        }
    });
    // Read a little, then drop the reader while the writer is (or soon will be) paused.
    let mut seen = 0;
    while seen < 5000 {
        let result = reader.read_blocking().unwrap();
        let len = result.buffer().len();
        assert!(result.buffer().chunks().flatten().all(|&b| b == 0xAB));
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
    assert_eq!(wakes.wakes(), 1);
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

// ------------------------------------------------------------------------------------------------
// Misuse: the right error, naming the numbers, and the pipe intact afterwards.

/// A pipe whose reader has just read `hello` (5 bytes, in two segments).
fn pipe_with_hello() -> (PipeWriter, PipeReader) {
    let (mut writer, mut reader) = pipe();
    writer.append(Bytes::from_static(b"he")).unwrap();
    writer.append(Bytes::from_static(b"llo")).unwrap();
    flush_now(&mut writer);
    assert_eq!(read_now(&mut reader), b"hello");
    (writer, reader)
}

/// The pipe still works: the last read is intact, a correct advance works, and new data flows.
#[track_caller]
fn assert_reader_intact(writer: &mut PipeWriter, reader: &mut PipeReader) {
    assert_eq!(
        reader
            .last_read()
            .expect("the last read survives the error")
            .buffer()
            .to_vec(),
        b"hello"
    );
    reader.advance_to(2, 5).unwrap();
    writer.write_slice(b"!").unwrap();
    flush_now(writer);
    assert_eq!(read_now(reader), b"llo!");
    reader.advance_to(4, 4).unwrap();
}

#[test]
fn advance_past_the_buffer_is_an_error_and_leaves_the_pipe_intact() {
    let (mut writer, mut reader) = pipe_with_hello();
    let e = reader.advance_to(0, 6).unwrap_err();
    assert_eq!(
        e,
        Error::InvalidAdvance {
            consumed: 0,
            examined: 6,
            len: 5
        }
    );
    assert_eq!(
        e.to_string(),
        "advance_to: examined (6) is beyond the end of the buffer (5 bytes)"
    );
    let e = reader.advance_to(6, 6).unwrap_err();
    assert_eq!(
        e,
        Error::InvalidAdvance {
            consumed: 6,
            examined: 6,
            len: 5
        }
    );
    assert!(
        e.to_string().contains('6') && e.to_string().contains('5'),
        "{e}"
    );
    let e = reader.advance_to(usize::MAX, usize::MAX).unwrap_err();
    assert!(e.to_string().contains(&usize::MAX.to_string()), "{e}");
    let io: std::io::Error = e.into();
    assert_eq!(io.kind(), std::io::ErrorKind::InvalidInput);
    assert_reader_intact(&mut writer, &mut reader);
}

#[test]
fn consumed_greater_than_examined_is_an_error_and_leaves_the_pipe_intact() {
    let (mut writer, mut reader) = pipe_with_hello();
    let e = reader.advance_to(3, 2).unwrap_err();
    assert_eq!(
        e,
        Error::InvalidAdvance {
            consumed: 3,
            examined: 2,
            len: 5
        }
    );
    assert_eq!(
        e.to_string(),
        "advance_to: consumed (3) is greater than examined (2)"
    );
    assert_reader_intact(&mut writer, &mut reader);
}

#[test]
fn advance_with_no_read_is_an_error_and_leaves_the_pipe_intact() {
    let (mut writer, mut reader) = pipe();
    assert_eq!(
        reader.advance_to(0, 0).unwrap_err(),
        Error::AdvanceWithoutRead
    );
    assert_eq!(reader.consume_all().unwrap_err(), Error::AdvanceWithoutRead);
    assert_eq!(reader.take_frame(0).unwrap_err(), Error::AdvanceWithoutRead);
    writer.append(Bytes::from_static(b"he")).unwrap();
    writer.append(Bytes::from_static(b"llo")).unwrap();
    flush_now(&mut writer);
    // Still no read: the data arriving does not make an advance valid.
    let e = reader.advance_to(5, 5).unwrap_err();
    assert_eq!(e, Error::AdvanceWithoutRead);
    assert!(e.to_string().contains("without a read"), "{e}");
    assert_eq!(read_now(&mut reader), b"hello");
    reader.advance_to(0, 2).unwrap();
    // One advance per read.
    assert_eq!(
        reader.advance_to(0, 2).unwrap_err(),
        Error::AdvanceWithoutRead
    );
    assert_eq!(
        read_now(&mut reader),
        b"hello",
        "the failed advance changed nothing"
    );
    assert_reader_intact(&mut writer, &mut reader);
}

#[test]
fn take_frame_past_the_buffer_is_an_error_and_leaves_the_pipe_intact() {
    let (mut writer, mut reader) = pipe_with_hello();
    let e = reader.take_frame(6).unwrap_err();
    assert_eq!(
        e,
        Error::FrameBeyondBuffer {
            skip: 0,
            requested: 6,
            len: 5
        }
    );
    assert_eq!(
        e.to_string(),
        "take_frame of 6 bytes: the buffer last read holds only 5 bytes"
    );
    assert!(reader.take_frame_chain(6).is_err());
    assert_reader_intact(&mut writer, &mut reader);
}

#[test]
fn read_after_reader_completed_is_an_error_and_the_writer_still_works() {
    let (mut writer, mut reader) = pipe_with_hello();
    reader.complete();
    assert_eq!(
        reader.try_read().map(|r| r.is_some()).unwrap_err(),
        Error::ReaderCompleted
    );
    assert_eq!(
        reader
            .read_blocking()
            .map(|r| r.buffer().len())
            .unwrap_err(),
        Error::ReaderCompleted
    );
    assert_eq!(
        reader
            .read_at_least_blocking(1)
            .map(|r| r.buffer().len())
            .unwrap_err(),
        Error::ReaderCompleted
    );
    let (_, waker) = counting_waker();
    {
        let mut read = pin!(reader.read_buffer());
        assert!(matches!(
            poll_once(read.as_mut(), &waker),
            Poll::Ready(Err(Error::ReaderCompleted))
        ));
    }
    assert_eq!(reader.advance_to(0, 0).unwrap_err(), Error::ReaderCompleted);
    assert_eq!(reader.take_frame(1).unwrap_err(), Error::ReaderCompleted);
    assert!(reader.last_read().is_none());
    let e = Error::ReaderCompleted;
    assert!(e.to_string().contains("reader has completed"), "{e}");
    assert_eq!(
        std::io::Error::from(e).kind(),
        std::io::ErrorKind::BrokenPipe
    );
    // The writer is told, and keeps working (its writes are discarded).
    writer.write_slice(b"more").unwrap();
    assert!(writer.flush_blocking().unwrap().is_completed());
}

#[test]
fn writes_after_writer_completed_are_errors_and_the_data_stays_readable() {
    let (mut writer, mut reader) = pipe();
    writer.write_slice(b"kept").unwrap();
    writer.complete();
    assert_eq!(
        writer.write_slice(b"x").unwrap_err(),
        Error::WriterCompleted
    );
    assert_eq!(
        writer.append(Bytes::from_static(b"x")).unwrap_err(),
        Error::WriterCompleted
    );
    assert_eq!(
        writer.buffer_mut(1).map(|s| s.len()).unwrap_err(),
        Error::WriterCompleted
    );
    assert_eq!(writer.advance(0).unwrap_err(), Error::WriterCompleted);
    assert_eq!(writer.flush_blocking().unwrap_err(), Error::WriterCompleted);
    let (_, waker) = counting_waker();
    assert!(matches!(
        writer.poll_flush_pipe(&mut Context::from_waker(&waker)),
        Poll::Ready(Err(Error::WriterCompleted))
    ));
    let e = Error::WriterCompleted;
    assert!(e.to_string().contains("writer has completed"), "{e}");
    assert_eq!(
        std::io::Error::from(e).kind(),
        std::io::ErrorKind::BrokenPipe
    );
    let result = reader.try_read().unwrap().unwrap();
    assert_eq!(
        result.buffer().to_vec(),
        b"kept",
        "nothing added, nothing lost"
    );
    assert!(result.is_completed());
}

#[test]
fn writer_advance_past_buffer_mut_space_is_an_error_and_leaves_the_pipe_intact() {
    let (mut writer, mut reader) = pipe();
    let space = writer.buffer_mut(10).unwrap();
    let available = space.len();
    space[..5].copy_from_slice(b"hello");
    let e = writer.advance(available + 1).unwrap_err();
    assert_eq!(
        e,
        Error::AdvancePastBuffer {
            requested: available + 1,
            available
        }
    );
    assert_eq!(
        e.to_string(),
        format!(
            "advance of {} bytes is beyond the {available} bytes buffer_mut handed out",
            available + 1
        )
    );
    assert_eq!(
        writer.unflushed_len(),
        0,
        "nothing committed by the failed advance"
    );
    writer.advance(5).unwrap();
    // The space left after a partial advance is what counts now.
    let e = writer.advance(available - 4).unwrap_err();
    assert_eq!(
        e,
        Error::AdvancePastBuffer {
            requested: available - 4,
            available: available - 5
        }
    );
    flush_now(&mut writer);
    assert_eq!(read_now(&mut reader), b"hello");
}

#[test]
fn writer_advance_with_no_buffer_is_an_error() {
    let (mut writer, mut reader) = pipe();
    let e = writer.advance(1).unwrap_err();
    assert_eq!(
        e,
        Error::AdvancePastBuffer {
            requested: 1,
            available: 0
        }
    );
    writer.advance(0).unwrap();
    // After the whole space was committed, there is no buffer left to advance in.
    let space = writer.buffer_mut(1).unwrap();
    let n = space.len();
    space.fill(b'z');
    writer.advance(n).unwrap();
    assert_eq!(
        writer.advance(1).unwrap_err(),
        Error::AdvancePastBuffer {
            requested: 1,
            available: 0
        }
    );
    flush_now(&mut writer);
    assert_eq!(read_now(&mut reader), vec![b'z'; n]);
}

#[test]
fn writer_advance_after_write_without_buffer_mut_is_an_error() {
    let (mut writer, mut reader) = pipe();
    writer.write_slice(b"abc").unwrap();
    let e = writer.advance(5).unwrap_err();
    assert_eq!(
        e,
        Error::AdvancePastBuffer {
            requested: 5,
            available: 0
        }
    );
    flush_now(&mut writer);
    assert_eq!(read_now(&mut reader), b"abc");
}

// ------------------------------------------------------------------------------------------------
// The read buffer.

/// A reader whose last read is "hel" + "lo wo" + "rld!" (three segments).
fn three_segments() -> (PipeWriter, PipeReader) {
    let (mut writer, mut reader) = pipe();
    for part in [&b"hel"[..], b"lo wo", b"rld!"] {
        writer.append(Bytes::from_static(part)).unwrap();
    }
    flush_now(&mut writer);
    reader.try_read().unwrap().unwrap();
    (writer, reader)
}

#[test]
fn read_buffer_len_is_empty_and_get() {
    let (_writer, reader) = three_segments();
    let buffer = reader.last_read().unwrap().buffer();
    assert_eq!(buffer.len(), 12);
    assert!(!buffer.is_empty());
    assert_eq!(buffer.get(0), Some(b'h'));
    assert_eq!(buffer.get(3), Some(b'l'));
    assert_eq!(buffer.get(11), Some(b'!'));
    assert_eq!(buffer.get(12), None);
    assert_eq!(ByteSegments::byte_len(&buffer), 12);
    let empty = buffer.slice(4..4);
    assert!(empty.is_empty() && empty.get(0).is_none());
    assert_eq!(empty.chunks().count(), 0);
}

#[test]
fn read_buffer_chunks_are_never_zero_length() {
    let (_writer, mut reader) = three_segments();
    {
        let buffer = reader.last_read().unwrap().buffer();
        assert_eq!(chunks_of(buffer), [&b"hel"[..], b"lo wo", b"rld!"]);
        assert_eq!(chunks_of(buffer.slice(3..8)), [b"lo wo"]);
        assert_eq!(chunks_of(buffer.slice(2..4)), [&b"l"[..], b"l"]);
        assert_eq!(chunks_of(buffer.slice(3..3)), Vec::<Vec<u8>>::new());
        assert_eq!(chunks_of(buffer.slice(8..)), [b"rld!"]);
        assert_eq!(chunks_of(buffer.slice(..3)), [b"hel"]);
        assert_eq!(chunks_of(buffer.slice(12..)), Vec::<Vec<u8>>::new());
        for start in 0..=12 {
            for end in start..=12 {
                let slice = buffer.slice(start..end);
                assert!(slice.chunks().all(|c| !c.is_empty()), "{start}..{end}");
                assert_eq!(slice.chunks().map(<[u8]>::len).sum::<usize>(), end - start);
            }
        }
    }
    // Consuming a segment exactly, or part of one.
    reader.advance_to(3, 3).unwrap();
    let result = reader.try_read().unwrap().unwrap();
    assert_eq!(chunks_of(result.buffer()), [&b"lo wo"[..], b"rld!"]);
    reader.advance_to(2, 2).unwrap();
    let result = reader.try_read().unwrap().unwrap();
    assert_eq!(chunks_of(result.buffer()), [&b" wo"[..], b"rld!"]);
}

#[test]
fn read_buffer_cursor_is_a_buf_across_segments() {
    let (_writer, reader) = three_segments();
    let buffer = reader.last_read().unwrap().buffer();
    let mut cursor = buffer.cursor();
    assert_eq!(cursor.remaining(), 12);
    assert_eq!(cursor.chunk(), b"hel");
    cursor.advance(2);
    assert_eq!(
        cursor.get_u16(),
        u16::from_be_bytes(*b"ll"),
        "a u16 straddling two segments"
    );
    assert_eq!(cursor.chunk(), b"o wo");
    cursor.advance(4); // exactly to the end of a segment
    assert_eq!(cursor.chunk(), b"rld!");
    let mut rest = [0u8; 4];
    cursor.copy_to_slice(&mut rest);
    assert_eq!(&rest, b"rld!");
    assert_eq!(cursor.remaining(), 0);
    assert!(!cursor.has_remaining());

    let mut cursor = buffer.cursor();
    let mut all = [0u8; 12];
    cursor.copy_to_slice(&mut all);
    assert_eq!(&all, b"hello world!");

    let mut cursor = buffer.slice(1..10).cursor();
    let mut slots = [IoSlice::new(&[]); 8];
    let n = cursor.chunks_vectored(&mut slots);
    let got: Vec<&[u8]> = slots[..n].iter().map(|s| &s[..]).collect();
    assert_eq!(got, [&b"el"[..], b"lo wo", b"rl"]);
    cursor.advance(2);
    let mut slots = [IoSlice::new(&[]); 8];
    let n = cursor.chunks_vectored(&mut slots);
    let got: Vec<&[u8]> = slots[..n].iter().map(|s| &s[..]).collect();
    assert_eq!(
        got,
        [&b"lo wo"[..], b"rl"],
        "no empty slice after advancing to a boundary"
    );
    assert_eq!(cursor.copy_to_bytes(7), Bytes::from_static(b"lo worl"));
    // Reading the cursor consumes nothing from the pipe.
    assert_eq!(reader.last_read().unwrap().buffer().len(), 12);
}

#[test]
fn read_buffer_to_vec_slice_and_copy_prefix() {
    let (_writer, reader) = three_segments();
    let buffer = reader.last_read().unwrap().buffer();
    assert_eq!(buffer.to_vec(), b"hello world!");
    assert_eq!(buffer.slice(2..9).to_vec(), b"llo wor");
    assert_eq!(buffer.slice(2..9).slice(1..3).to_vec(), b"lo");
    assert_eq!(buffer.slice(..).to_vec(), b"hello world!");
    assert_eq!(
        buffer.try_slice(5..13).unwrap_err(),
        Error::OutOfRange {
            operation: "slice",
            start: 5,
            end: 13,
            len: 12
        }
    );
    assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| buffer.slice(13..))).is_err());
    let mut prefix = [0u8; 7];
    buffer.copy_prefix_to(&mut prefix).unwrap();
    assert_eq!(&prefix, b"hello w");
    assert!(buffer.copy_prefix_to(&mut [0u8; 13]).is_err());
    assert_eq!(buffer.display_lossy().to_string(), "hello world!");
}

#[test]
fn read_buffer_find_works_across_segments() {
    let (_writer, reader) = three_segments();
    let buffer = reader.last_read().unwrap().buffer();
    assert_eq!(buffer.find(b"llo"), Some(2), "spans the first boundary");
    assert_eq!(buffer.find(b"world"), Some(6), "spans the second boundary");
    assert_eq!(buffer.find(b"hello world!"), Some(0), "spans every segment");
    assert_eq!(buffer.find(b"!"), Some(11));
    assert_eq!(buffer.find(b"xyz"), None);
    assert_eq!(buffer.find(b"world!!"), None);
    assert_eq!(buffer.find(b""), Some(0));
    assert_eq!(buffer.slice(4..).find(b"l"), Some(5));
    assert_eq!(
        buffer.slice(..9).find(b"rl"),
        None,
        "a match past the slice end does not count"
    );
}

#[test]
fn read_buffer_io_slices_for_vectored_writes() {
    let (_writer, reader) = three_segments();
    let buffer = reader.last_read().unwrap().buffer();
    let mut slots = [IoSlice::new(&[]); 4];
    let n = buffer.io_slices(&mut slots);
    assert_eq!(n, 3);
    let got: Vec<&[u8]> = slots[..n].iter().map(|s| &s[..]).collect();
    assert_eq!(got, [&b"hel"[..], b"lo wo", b"rld!"]);
    let mut two = [IoSlice::new(&[]); 2];
    assert_eq!(buffer.io_slices(&mut two), 2);
    assert_eq!(&two[1][..], b"lo wo");
    let mut out = Vec::new();
    let written = std::io::Write::write_vectored(&mut out, &slots[..n]).unwrap();
    assert_eq!(&out[..written], &b"hello world!"[..written]);
    let n = buffer.slice(4..10).io_slices(&mut slots);
    let got: Vec<&[u8]> = slots[..n].iter().map(|s| &s[..]).collect();
    assert_eq!(got, [&b"o wo"[..], b"rl"]);
}

// ------------------------------------------------------------------------------------------------
// Blocking forms.

#[test]
fn blocking_forms_stream_length_prefixed_frames_across_threads() {
    const FRAMES: u32 = 3000;
    let pool = Pool::new();
    let (mut writer, mut reader) = pipe_on(
        &pool,
        PipeOptions::new()
            .pause_threshold(2048)
            .resume_threshold(512)
            .min_segment_size(1024)
            .copy_threshold(64),
    );
    let producer = thread::spawn(move || {
        let mut checksum = 0u64;
        for i in 0..FRAMES {
            let len = (i * 37 % 1500) as usize + 1;
            let frame: Vec<u8> = (0..len).map(|j| (i as usize + j) as u8).collect();
            checksum = frame.iter().fold(checksum, |c, &b| {
                c.wrapping_mul(31).wrapping_add(u64::from(b))
            });
            writer.write_slice(&(len as u32).to_be_bytes()).unwrap();
            if i % 2 == 0 {
                writer.write_slice(&frame).unwrap();
            } else {
                writer.append(frame).unwrap();
            }
            if i % 3 != 0 {
                assert!(!writer.flush_blocking().unwrap().is_completed());
            }
        }
        checksum
    });
    let (tx, rx) = mpsc::channel();
    let consumer = thread::spawn(move || {
        let mut checksum = 0u64;
        let mut frames = 0u32;
        loop {
            let result = reader.read_blocking().unwrap();
            let done = result.is_completed();
            loop {
                let buffer = reader.last_read().unwrap().buffer();
                if buffer.len() < 4 {
                    break;
                }
                let len = buffer.cursor().get_u32() as usize;
                if buffer.len() < 4 + len {
                    break;
                }
                reader.take_frame(4).unwrap();
                let frame = reader.take_frame(len).unwrap();
                checksum = frame.iter().fold(checksum, |c, &b| {
                    c.wrapping_mul(31).wrapping_add(u64::from(b))
                });
                frames += 1;
            }
            let left = reader.last_read().unwrap().buffer().len();
            reader.advance_to(0, left).unwrap();
            if done {
                assert_eq!(left, 0, "a partial frame at the end");
                break;
            }
        }
        tx.send(()).unwrap();
        (frames, checksum)
    });
    rx.recv_timeout(TIMEOUT).expect("the streaming test hung");
    let sent = producer.join().unwrap();
    let (frames, received) = consumer.join().unwrap();
    assert_eq!(frames, FRAMES);
    assert_eq!(received, sent);
    assert_eq!(pool.stats().outstanding, 0);
}

#[test]
fn flush_blocking_parks_until_the_reader_catches_up() {
    let (mut writer, mut reader) =
        pipe_with(PipeOptions::new().pause_threshold(100).resume_threshold(50));
    let (tx, rx) = mpsc::channel();
    let t = thread::spawn(move || {
        writer.write_slice(&[1; 150]).unwrap();
        let result = writer.flush_blocking().unwrap(); // paused until the reader examines 101+
        tx.send(result).unwrap();
        writer
    });
    // Examine in small steps; the flush can only return once fewer than 50 are unexamined.
    let mut examined = 0;
    while examined < 150 {
        let result = reader.read_blocking().unwrap();
        let len = result.buffer().len();
        examined = (examined + 10).min(len);
        reader.advance_to(0, examined).unwrap();
        if examined <= 100 {
            assert!(
                rx.try_recv().is_err(),
                "the flush returned with {} bytes unexamined",
                150 - examined
            );
        }
    }
    let result = rx
        .recv_timeout(TIMEOUT)
        .expect("the paused flush was never released");
    assert_eq!(result, FlushResult::default());
    drop(t.join().unwrap());
}

// ------------------------------------------------------------------------------------------------
// Read coalescing of `read_buffer().await`

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
                Poll::Ready(result) => Some((polls, result.unwrap().buffer().to_vec())),
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
    assert_eq!(wakes.wakes(), 0);

    send(&mut writer, 10, 2);
    let mut read = pin!(reader.read_buffer());
    assert!(poll_once(read.as_mut(), &waker).is_pending(), "the yield");
    assert_eq!(wakes.wakes(), 1, "a yield wakes its task at once");
    send(&mut writer, 20, 3); // what the yield is for: the writer adds more meanwhile
    let Poll::Ready(result) = poll_once(read.as_mut(), &waker) else {
        panic!("a read that yielded does not yield again");
    };
    let mut expected = vec![2; 10];
    expected.extend([3; 20]);
    assert_eq!(
        result.unwrap().buffer().to_vec(),
        expected,
        "both flushes in one read"
    );
    assert_eq!(wakes.wakes(), 1, "no wake beyond the yield's");
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
        assert_eq!(wakes.wakes(), 0, "waiting, not yielding");
        send(&mut writer, 10, 5);
        assert_eq!(wakes.wakes(), 1, "the flush woke the waiting read");
        let Poll::Ready(result) = poll_once(read.as_mut(), &waker) else {
            panic!("a woken read that waited does not yield");
        };
        assert_eq!(result.unwrap().buffer().to_vec(), vec![5; 10]);
    }
    reader.advance_to(10, 10).unwrap();
    assert_eq!(wakes.wakes(), 1);
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
        reader.read_blocking().unwrap().buffer().len(),
        10,
        "read_blocking"
    );
    reader.advance_to(10, 10).unwrap();
    assert_eq!(wakes.wakes(), 0, "none of them yielded");
}

#[test]
fn a_read_dropped_after_its_yield_loses_nothing() {
    let (mut writer, mut reader) = pipe();
    let (wakes, waker) = counting_waker();
    send(&mut writer, 10, 1);
    read_buffer_counting_polls(&mut reader, &waker);
    send(&mut writer, 10, 2);
    reader.canceler().cancel_pending_read();
    assert!(poll_once(pin!(reader.read_buffer()), &waker).is_pending());
    assert_eq!(wakes.wakes(), 1);
    // Dropped after the yield: the bytes and the pending cancel are still there for the next read.
    let result = reader.try_read().unwrap().unwrap();
    assert_eq!(result.buffer().to_vec(), vec![2; 10]);
    assert!(
        result.is_canceled(),
        "the cancel was not consumed by the yield"
    );
}
