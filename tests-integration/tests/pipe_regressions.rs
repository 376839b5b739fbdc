//! Behaviours of the pipe's contract that are easy to get wrong (misuse, abandoned polls, panics,
//! unusual sequences), one test per behaviour, each named after what it guarantees.

mod kit;

use kit::counting_alloc;
use packetpipe::ByteSegments;

use std::sync::mpsc;
use std::time::Duration;

use packetpipe::pipe::{pipe, pipe_with, PipeOptions, PipeReader};
use packetpipe::Error;

#[global_allocator]
static GLOBAL: counting_alloc::CountingAlloc = counting_alloc::CountingAlloc;

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
        let (mut writer, mut reader) = pipe_with(PipeOptions {
            pause_threshold: 16,
            resume_threshold: 8,
            ..Default::default()
        });
        writer.write_slice(&[1; 10]).unwrap();
        writer.flush_blocking().unwrap();
        let len = reader.read_blocking().unwrap().buffer.len();
        // consumed > 0: a wait target computed as `consumed + n` would overflow.
        reader.advance_to(5, len).unwrap();
        let producer = std::thread::spawn(move || {
            for _ in 0..20 {
                writer.write_slice(&[2; 10]).unwrap();
                // Far past the pause threshold: only the lifted backpressure lets this return.
                writer.flush_blocking().unwrap();
            }
        });
        let result = packetpipe::block_on(reader.read_at_least(usize::MAX)).unwrap();
        let out = (result.buffer.to_vec(), result.is_completed);
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

    let err = packetpipe::block_on(reader.read_at_least(10)).unwrap_err();
    assert!(
        matches!(&err, Error::Peer { side: packetpipe::Side::Writer, source } if source.to_string() == "connection reset"),
        "{err:?}"
    );
    // The short bytes were not lost: a plain read still returns them, then the error again.
    let result = reader.read_blocking().unwrap();
    assert_eq!(result.buffer.to_vec(), b"abc");
    assert!(!result.is_completed && !result.is_canceled);
    consume_all(&mut reader).unwrap();
    assert!(matches!(reader.read_blocking(), Err(Error::Peer { .. })));
    assert!(matches!(
        packetpipe::block_on(reader.read_at_least(1)),
        Err(Error::Peer { .. })
    ));
}

#[test]
fn read_at_least_with_enough_bytes_before_a_writer_error_returns_them_first() {
    let (mut writer, mut reader) = pipe();
    writer.write_slice(b"abcdef").unwrap();
    writer.complete_with_error("boom");
    let result = packetpipe::block_on(reader.read_at_least(4)).unwrap();
    assert_eq!(result.buffer.to_vec(), b"abcdef");
    assert!(
        !result.is_completed,
        "a failed writer ends through its error"
    );
    consume_all(&mut reader).unwrap();
    assert!(matches!(
        packetpipe::block_on(reader.read_at_least(4)),
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
    send_sync::<packetpipe::pipe::SegmentIter<'static>>();
    send_sync::<packetpipe::pipe::ReadResult<'static>>();
    send_sync::<packetpipe::pipe::PipeReader>();
    send_sync::<packetpipe::pipe::PipeWriter>();
}

fn one_pool() -> packetpipe::Pool {
    packetpipe::Pool::new()
}

/// A flush publishing only appended packets, while the write buffer is parked from an earlier
/// flush, must keep it parked (losing track of it would make the next park find the slot
/// taken). The pipe model test reaches this sequence too.
#[test]
fn a_flush_of_appended_bytes_keeps_the_parked_write_buffer() {
    let pool = one_pool();
    let (mut writer, mut reader) = pipe_with(PipeOptions {
        pool: Some(pool.clone()),
        ..Default::default()
    });
    writer.write_slice(b"ab").unwrap();
    writer.flush_blocking().unwrap(); // parks the buffer
    writer.append(bytes::Bytes::from_static(b"cd")).unwrap();
    writer.flush_blocking().unwrap(); // nothing of the buffer to seal: it stays parked
    writer.write_slice(b"ef").unwrap(); // takes it back
    writer.flush_blocking().unwrap();
    let result = reader.read_blocking().unwrap();
    assert_eq!(result.buffer.to_vec(), b"abcdef");
    assert_eq!(
        pool.stats().rents,
        1,
        "the tail of the one block was reused"
    );
    consume_all(&mut reader).unwrap();
    drop((writer, reader));
    assert_eq!(pool.stats().outstanding, 0);
}

/// An idle pipe holds no pooled block: once the reader has consumed everything and waits for
/// more, the writer's partly used block (parked at its last flush) goes home; the writer rents a
/// fresh one when it writes again.
#[test]
fn a_waiting_reader_sends_the_writers_parked_block_home() {
    use std::task::Context;
    let pool = one_pool();
    let (mut writer, mut reader) = pipe_with(PipeOptions {
        pool: Some(pool.clone()),
        ..Default::default()
    });
    writer.write_slice(b"request").unwrap();
    writer.flush_blocking().unwrap();
    reader.read_blocking().unwrap();
    consume_all(&mut reader).unwrap();
    assert_eq!(pool.stats().outstanding, 1, "the writer's parked block");
    let mut cx = Context::from_waker(futures::task::noop_waker_ref());
    assert!(reader.poll_read_buffer(&mut cx).is_pending());
    assert_eq!(pool.stats().outstanding, 0, "the idle pipe holds no block");

    writer.write_slice(b"next").unwrap();
    writer.flush_blocking().unwrap();
    assert_eq!(reader.read_blocking().unwrap().buffer.to_vec(), b"next");
    assert_eq!(pool.stats().rents, 2, "a fresh block for the next write");
}

/// A reader that never waits (a same-thread loop, a busy consumer) leaves the parked buffer to the
/// writer, which keeps filling the same block across flushes.
#[test]
fn a_reader_that_never_waits_leaves_the_writer_its_block() {
    let pool = one_pool();
    let (mut writer, mut reader) = pipe_with(PipeOptions {
        pool: Some(pool.clone()),
        ..Default::default()
    });
    for i in 0..100u8 {
        writer.write_slice(&[i; 10]).unwrap();
        writer.flush_blocking().unwrap();
        let result = reader.try_read().unwrap().expect("flushed bytes are there");
        assert_eq!(result.buffer.to_vec(), [i; 10]);
        consume_all(&mut reader).unwrap();
    }
    assert_eq!(pool.stats().rents, 1, "1,000 bytes in one 4 KiB block");
}

/// A hundred flushes into one block, consumed in one advance, then an idle wait. The seals take
/// their references from a batch the writer counts in advance (15 at a time), the consumed packets
/// give theirs back together (one decrement per run of one block), and the parked block carries
/// the unused ones: it all adds up, so the block goes home exactly once when the pipe goes idle (a
/// second return panics in debug builds, a missing one shows as `outstanding`).
#[test]
fn many_flushes_of_one_block_consumed_at_once_send_it_home_exactly_once() {
    use std::task::Context;
    let pool = one_pool();
    let options = PipeOptions {
        pool: Some(pool.clone()),
        copy_threshold: 0,
        ..Default::default()
    };
    let (mut writer, mut reader) = pipe_with(options);
    for i in 0..100u8 {
        writer.write_slice(&[i; 10]).unwrap();
        writer.flush_blocking().unwrap();
    }
    let expected: Vec<u8> = (0..100u8).flat_map(|i| [i; 10]).collect();
    assert_eq!(reader.read_blocking().unwrap().buffer.to_vec(), expected);
    // A packet taken out by sharing (copy threshold 0) keeps the block past the batch's release.
    let shared = reader.take_frame(10).unwrap();
    consume_all(&mut reader).unwrap();
    assert_eq!(pool.stats().rents, 1, "one block for all 100 flushes");
    let mut cx = Context::from_waker(futures::task::noop_waker_ref());
    assert!(reader.poll_read_buffer(&mut cx).is_pending());
    assert_eq!(pool.stats().outstanding, 1, "the shared packet's block");
    assert_eq!(&shared[..], &[0; 10]);
    drop(shared);
    assert_eq!(pool.stats().outstanding, 0, "the idle pipe holds no block");

    writer.write_slice(b"next").unwrap();
    writer.flush_blocking().unwrap();
    assert_eq!(reader.read_blocking().unwrap().buffer.to_vec(), b"next");
    consume_all(&mut reader).unwrap();
    drop((writer, reader));
    let stats = pool.stats();
    assert_eq!(
        (stats.rents, stats.returns, stats.outstanding),
        (2, 2, 0),
        "{stats:?}"
    );
}

/// After the reader completed, an impossible `buffer_mut` hint fails as it does with a live reader
/// (it once grew a scratch `Vec` to the hint: a capacity-overflow panic, or an abort on a huge one).
#[test]
fn buffer_mut_after_the_reader_completed_fails_like_with_a_live_reader() {
    let (mut live, _reader) = pipe();
    let live_error = live.spare_mut(usize::MAX).unwrap_err();
    assert!(
        matches!(
            live_error,
            Error::RequestTooLarge {
                requested: usize::MAX,
                ..
            }
        ),
        "{live_error:?}"
    );
    let (mut writer, mut reader) = pipe();
    reader.complete();
    writer.write_slice(b"x").unwrap(); // notices the completion
    assert_eq!(writer.spare_mut(usize::MAX).unwrap_err(), live_error);
    // A hint beyond a block's capacity, or beyond the memory there is, is an error naming it,
    // never an abort.
    match writer.spare_mut(1 << 60) {
        Err(Error::AllocationFailed { size })
        | Err(Error::RequestTooLarge {
            requested: size, ..
        }) => {
            assert_eq!(size, 1 << 60)
        }
        other => panic!(
            "expected an error for 2^60 bytes, got {:?}",
            other.map(|s| s.len())
        ),
    }
    assert!(writer.flush_blocking().unwrap().is_completed);
}

/// Discarded writes (the reader completed) hold no memory: `write_slice` copies nothing, and the
/// scratch `buffer_mut` hands out is freed by the writer's next call (it once kept a scratch as
/// large as the largest discarded write for the writer's life).
#[test]
fn discarded_writes_hold_no_memory() {
    let (mut writer, mut reader) = pipe();
    reader.complete();
    writer.write_slice(b"notice").unwrap();
    let big = vec![7u8; 1 << 20];
    let before = counting_alloc::allocations();
    writer.write_slice(&big).unwrap();
    assert_eq!(
        counting_alloc::allocations(),
        before,
        "a discarded write_slice allocates nothing"
    );

    assert!(writer.flush_blocking().unwrap().is_completed); // this thread's waker, made once
    let held_before = counting_alloc::net_bytes_here();
    let space = writer.spare_mut(1 << 20).unwrap();
    space[..3].copy_from_slice(b"abc");
    writer.commit(3).unwrap();
    writer.commit(5).unwrap(); // more of the same handed-out space, as with a live reader
    assert!(writer.flush_blocking().unwrap().is_completed);
    assert_eq!(
        counting_alloc::net_bytes_here(),
        held_before,
        "the discard scratch outlived the write"
    );
}

/// After the reader completed, `consume_all` reports the same error as `advance_to` (it reported
/// "advance without read").
#[test]
fn consume_all_after_the_reader_completed_reports_reader_completed_like_advance_to() {
    let (mut writer, mut reader) = pipe();
    writer.write_slice(b"abc").unwrap();
    writer.flush_blocking().unwrap();
    reader.read_blocking().unwrap();
    reader.complete();
    assert_eq!(reader.advance_to(0, 0).unwrap_err(), Error::ReaderCompleted);
    assert_eq!(
        consume_all(&mut reader).unwrap_err(),
        Error::ReaderCompleted
    );
}

/// After `take_frame`, a read without `advance_to` is an error (returning the rest of the buffer
/// at once would spin a loop that took its frames and reads for more), and after `advance_to`
/// the read waits as expected.
#[test]
fn a_read_after_take_frame_without_advance_to_is_an_error_not_a_spin() {
    use std::task::Context;
    let (mut writer, mut reader) = pipe();
    writer.write_slice(b"\x03abc\x02d").unwrap(); // a whole frame, then the start of the next
    writer.flush_blocking().unwrap();
    reader.read_blocking().unwrap();
    reader.take_frame(1).unwrap();
    assert_eq!(&reader.take_frame(3).unwrap()[..], b"abc");
    let e = reader.read_blocking().unwrap_err();
    assert_eq!(e, Error::ReadWithoutAdvance { len: 2 });
    assert!(e.to_string().contains("advance_to"), "{e}");
    assert_eq!(
        reader.try_read().unwrap_err(),
        Error::ReadWithoutAdvance { len: 2 }
    );
    let mut cx = Context::from_waker(futures::task::noop_waker_ref());
    assert!(matches!(
        reader.poll_read_buffer(&mut cx),
        std::task::Poll::Ready(Err(Error::ReadWithoutAdvance { len: 2 }))
    ));
    // read_at_least waits by count: it may follow directly (the header is there, the body not).
    assert!(reader.poll_read_at_least(&mut cx, 3).is_pending());
    reader.advance_to(0, 2).unwrap(); // the partial frame is examined
    assert!(
        reader.try_read().unwrap().is_none(),
        "now it waits for more"
    );
    writer.write_slice(b"e").unwrap();
    writer.flush_blocking().unwrap();
    assert_eq!(reader.read_blocking().unwrap().buffer.to_vec(), b"\x02de");
}

/// A writer dropped while its thread panics completes with an error, so the reader does not see
/// the truncated stream as complete (as it would if the drop completed normally).
#[test]
fn a_writer_dropped_during_a_panic_completes_with_an_error() {
    let (mut writer, mut reader) = pipe();
    let producer = std::thread::spawn(move || {
        writer.write_slice(b"half a fra").unwrap();
        writer.flush_blocking().unwrap();
        panic!("the producer failed mid-frame");
    });
    assert!(producer.join().is_err());
    let result = reader.read_blocking().unwrap();
    assert_eq!(result.buffer.to_vec(), b"half a fra");
    assert!(
        !result.is_completed,
        "a failed writer ends through its error"
    );
    consume_all(&mut reader).unwrap();
    let e = reader.read_blocking().unwrap_err();
    let source = std::error::Error::source(&e).expect("the panic error");
    assert!(source.to_string().contains("panicked"), "{source}");
}

/// The same for the reader: the writer's flush reports an error, not a normal completion.
#[test]
fn a_reader_dropped_during_a_panic_completes_with_an_error() {
    let (mut writer, reader) = pipe();
    let consumer = std::thread::spawn(move || {
        let _reader = reader;
        panic!("the consumer failed");
    });
    assert!(consumer.join().is_err());
    writer.write_slice(b"x").unwrap();
    let e = writer.flush_blocking().unwrap_err();
    assert!(
        matches!(
            e,
            Error::Peer {
                side: packetpipe::Side::Reader,
                ..
            }
        ),
        "{e:?}"
    );
}

/// A flush whose poll was abandoned while paused does not leave the writer paused: the next
/// flush of new bytes waits for the pause threshold, not for the resume threshold.
#[test]
fn an_abandoned_paused_flush_does_not_make_the_next_flush_wait_for_resume() {
    use std::task::Context;
    let (mut writer, mut reader) = pipe_with(PipeOptions {
        pause_threshold: 100,
        resume_threshold: 10,
        ..Default::default()
    });
    let mut cx = Context::from_waker(futures::task::noop_waker_ref());
    writer.write_slice(&[1; 100]).unwrap();
    assert!(
        writer.poll_flush_pipe(&mut cx).is_pending(),
        "paused at 100"
    );
    // Abandoned. The reader examines 60 bytes: 40 unexamined, below pause, above resume.
    reader.read_blocking().unwrap();
    reader.advance_to(60, 60).unwrap();
    writer.write_slice(&[2; 5]).unwrap();
    // A new flush with new bytes: 45 unexamined < 100 returns at once.
    assert!(writer.poll_flush_pipe(&mut cx).is_ready());
}

/// A `read_at_least` whose poll was abandoned while waiting does not keep the writer's
/// backpressure lifted for good: the reader's next operation ends the lift.
#[test]
fn an_abandoned_read_at_least_poll_stops_lifting_backpressure_at_the_next_read() {
    use std::task::Context;
    let (mut writer, mut reader) = pipe_with(PipeOptions {
        pause_threshold: 10,
        resume_threshold: 5,
        ..Default::default()
    });
    let mut cx = Context::from_waker(futures::task::noop_waker_ref());
    assert!(reader.poll_read_at_least(&mut cx, 1000).is_pending()); // lifts, then abandoned
    writer.write_slice(&[1; 50]).unwrap();
    assert!(
        writer.poll_flush_pipe(&mut cx).is_ready(),
        "lifted while the read waits"
    );
    // The reader moves on to a plain read: the lift ends with it.
    reader.read_blocking().unwrap();
    reader.advance_to(0, 0).unwrap();
    writer.write_slice(&[2; 50]).unwrap();
    assert!(
        writer.poll_flush_pipe(&mut cx).is_pending(),
        "100 unexamined bytes over a pause threshold of 10 must pause again"
    );
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

/// A reader waiting in `read_at_least(n)` wakes once when the n bytes are there, not once per
/// flush before it (a wake, and a poll for nothing, on every segment).
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

// ------------------------------------------------------------------------------------------------
// Misuse and unusual sequences of the public API.

#[test]
fn a_failed_buffer_mut_leaves_the_space_handed_out_before_it() {
    let (mut writer, mut reader) = pipe();
    writer.spare_mut(4).unwrap()[..4].copy_from_slice(b"ping");
    let e = writer.spare_mut(usize::MAX).unwrap_err();
    assert!(matches!(e, Error::RequestTooLarge { .. }), "{e:?}");
    // The 4 bytes written into the first space still commit, and arrive.
    writer.commit(4).unwrap();
    writer.write_slice(b"!").unwrap();
    writer.complete();
    assert_eq!(reader.read_blocking().unwrap().buffer.to_vec(), b"ping!");
}

#[test]
fn appending_an_empty_packet_changes_nothing() {
    let (mut writer, mut reader) = pipe();
    writer.spare_mut(4).unwrap()[..4].copy_from_slice(b"ping");
    writer.append(packetpipe::Packet::new()).unwrap();
    // The space buffer_mut handed out is still there to commit.
    writer.commit(4).unwrap();
    writer.complete();
    let result = reader.read_blocking().unwrap();
    assert_eq!(result.buffer.to_vec(), b"ping");
    assert_eq!(
        result.buffer.segments().count(),
        1,
        "one segment, not split"
    );
}

#[test]
fn bufread_consume_is_clamped_to_the_segment_fill_buf_returned() {
    use std::io::{BufRead, Read};
    let (mut writer, mut reader) = pipe();
    writer
        .append(packetpipe::Packet::from_static(b"ab"))
        .unwrap();
    writer
        .append(packetpipe::Packet::from_static(b"cd"))
        .unwrap();
    writer.complete();
    assert_eq!(reader.fill_buf().unwrap(), b"ab");
    reader.consume(100); // more than fill_buf returned: only "ab" goes
    let mut rest = Vec::new();
    reader.read_to_end(&mut rest).unwrap();
    assert_eq!(rest, b"cd", "bytes fill_buf never returned stay unconsumed");
}

#[test]
fn a_read_buffer_dropped_after_its_coalescing_yield_does_not_make_the_next_one_yield() {
    // In a `select!` loop whose other branch is always ready, a coalescing yield by each fresh
    // `read_buffer()` would let the other branch win every time, and the bytes already there
    // would never be taken.
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};
    let (mut writer, mut reader) = pipe();
    let mut cx = Context::from_waker(Waker::noop());
    writer.write_slice(b"a").unwrap();
    writer.flush_blocking().unwrap();
    // A small read: the next read_buffer() may yield once.
    let Poll::Ready(Ok(read)) = pin!(reader.read_buffer()).poll(&mut cx) else {
        panic!("the byte is there");
    };
    let len = read.buffer.len();
    reader.advance_to(len, len).unwrap();
    writer.write_slice(b"b").unwrap();
    writer.flush_blocking().unwrap();
    // The first fresh read yields (and is dropped, as `select!` drops the losing branch); the
    // second takes the byte.
    assert!(pin!(reader.read_buffer()).poll(&mut cx).is_pending());
    let Poll::Ready(Ok(read)) = pin!(reader.read_buffer()).poll(&mut cx) else {
        panic!("a read after a dropped yield takes the bytes at once");
    };
    assert_eq!(read.buffer.to_vec(), b"b");
}

#[test]
fn a_slow_writer_feeding_a_waiting_reader_keeps_one_block_not_one_per_flush() {
    // A reader that sent the writer's partly used block home each time it went to wait, although
    // its unconsumed bytes keep that block alive, would make the writer rent a new block for the
    // next byte: a sender trickling a large request would hold a block per read (1,000 one-byte
    // flushes: 1,000 blocks, 4 MB).
    use std::future::Future;
    use std::task::{Context, Poll, Waker};
    let pool = one_pool();
    let (mut writer, mut reader) = pipe_with(PipeOptions {
        pool: Some(pool.clone()),
        ..Default::default()
    });
    let mut cx = Context::from_waker(Waker::noop());
    for i in 0..1000 {
        // The reader waits for a 10,000-byte frame (it goes to sleep each time)...
        assert!(std::pin::pin!(reader.read_at_least(10_000))
            .poll(&mut cx)
            .is_pending());
        // ... and the writer brings one byte more.
        writer.write_slice(&[i as u8]).unwrap();
        writer.flush_blocking().unwrap();
    }
    let stats = pool.stats();
    assert!(
        stats.outstanding <= 2,
        "{} blocks ({} bytes) held for 1,000 bytes",
        stats.outstanding,
        stats.outstanding_bytes
    );
    // Consumed, and the reader waits again: the writer's block goes home (an idle pipe holds none).
    let Poll::Ready(Ok(read)) = std::pin::pin!(reader.read_buffer()).poll(&mut cx) else {
        panic!("1,000 bytes are there");
    };
    let len = read.buffer.len();
    assert_eq!(len, 1000);
    reader.advance_to(len, len).unwrap();
    assert!(std::pin::pin!(reader.read_buffer())
        .poll(&mut cx)
        .is_pending());
    assert_eq!(pool.stats().outstanding, 0, "an idle pipe holds no block");
}

#[test]
fn a_peers_interrupted_error_does_not_make_std_helpers_retry_for_ever() {
    // The error is returned again by every later call, and std's `read_to_end` / `write_all`
    // retry `Interrupted`: passed through as `Interrupted`, it would spin them at full CPU for
    // ever.
    use std::io::{ErrorKind, Read, Write};
    let got = within_a_minute(|| {
        let (mut writer, mut reader) = pipe();
        writer.write_slice(b"before").unwrap();
        writer.complete_with_error(std::io::Error::new(ErrorKind::Interrupted, "signal"));
        let mut bytes = Vec::new();
        let e = reader.read_to_end(&mut bytes).unwrap_err();
        (bytes, e.kind(), e.to_string())
    });
    assert_eq!(got.0, b"before");
    assert_eq!(got.1, ErrorKind::Other);
    assert!(got.2.contains("signal"), "{}", got.2);

    let kind = within_a_minute(|| {
        let (mut writer, mut reader) = pipe();
        reader.complete_with_error(std::io::Error::new(ErrorKind::Interrupted, "signal"));
        writer
            .write_all(&[7; 100_000])
            .and_then(|()| writer.flush())
            .unwrap_err()
            .kind()
    });
    assert_eq!(kind, ErrorKind::Other);
}

#[test]
fn a_canceled_frame_read_is_not_interrupted_as_an_io_error() {
    let e = std::io::Error::from(packetpipe::frame::FrameError::Canceled);
    assert_eq!(e.kind(), std::io::ErrorKind::Other);
}

#[test]
fn bufmut_writes_after_the_reader_is_gone_reuse_one_scratch() {
    // `chunk_mut` asks for one byte: a fresh one-byte scratch per call for the discarded bytes
    // would make 8 MiB of `put_slice` 8 million allocations (100x slower than with a live
    // reader).
    use bytes::BufMut;
    let (mut writer, reader) = pipe();
    drop(reader);
    writer.write_slice(b"x").unwrap(); // the writer learns that the reader is gone
    let data = vec![5u8; 1 << 20];
    writer.put_slice(&data); // warm: the scratch exists
    let before = counting_alloc::allocations();
    writer.put_slice(&data);
    writer.put_slice(&data);
    let allocations = counting_alloc::allocations() - before;
    assert!(
        allocations <= 1,
        "{allocations} allocations for 2 MiB of discarded writes"
    );
}

/// Consume the whole buffer of the last read: `advance_to(len, len)`.
fn consume_all(reader: &mut PipeReader) -> Result<(), Error> {
    let len = reader.last_read().map_or(0, |r| r.buffer.len());
    reader.advance_to(len, len)
}
