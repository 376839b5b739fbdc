//! The pipe allocates nothing per frame in steady state, asserted with a counting global
//! allocator (allocation counts are deterministic, unlike times, so they are asserted exactly, as
//! zero).
//!
//! Allocations are counted per thread (a `const`-initialized thread-local `Cell`, which never
//! allocates itself), so the tests of this binary can run in parallel without seeing each other's
//! allocations. The cross-thread ping-pong counts on both of its threads and adds the two counts up:
//! together they are every allocation the pipes' work makes.
//!
//! Each measurement first runs the operation unmeasured (warm-up: the pool's thread caches, the
//! recycled segment nodes, the blocking forms' thread waker), then counts a batch of frames.

use packetpipe::ByteSegments;
use std::hint::black_box;
use std::sync::{mpsc, Arc};
use std::task::{Context, Poll, Wake, Waker};
use std::thread;
use std::time::Duration;

use bytes::Bytes;
use packetpipe::pipe::{pipe_with, PipeOptions, PipeReader, PipeWriter};
use packetpipe::{Packet, Pool};

mod kit;

use kit::counting_alloc::{self, allocations};
use kit::pipes::unpaused_pipe as test_pipe;
use kit::wake::CountWaker;

#[global_allocator]
static GLOBAL: counting_alloc::CountingAlloc = counting_alloc::CountingAlloc;

const WARM_UP: usize = 256;
const FRAMES: usize = 2000;

/// Allocations made by this thread in `FRAMES` runs of `frame`, after `WARM_UP` unmeasured runs.
fn allocations_per_batch(frame: impl FnMut()) -> u64 {
    counting_alloc::allocations_per_batch(WARM_UP, FRAMES, frame)
}

/// Read everything now (the read must not wait), check its length, consume it all.
#[track_caller]
fn read_and_consume(reader: &mut PipeReader, expected_len: usize) {
    let result = reader.read_blocking().unwrap();
    let len = result.buffer.len();
    assert_eq!(len, expected_len);
    assert!(!result.is_completed && !result.is_canceled);
    reader.advance_to(len, len).unwrap();
}

const SIZES: [usize; 3] = [64, 4096, 64 * 1024];

// ------------------------------------------------------------------------------------------------

#[test]
fn the_counter_counts() {
    let before = allocations();
    drop(black_box(vec![1u8; 100]));
    drop(black_box(Box::new(5u64)));
    assert_eq!(allocations() - before, 2);
    assert_eq!(
        allocations_per_batch(|| drop(black_box(Vec::<u8>::with_capacity(64)))),
        FRAMES as u64
    );
    // Creating a pipe allocates (shared state, the first segment node): the counter sees pipe work.
    let pool = Pool::new();
    let before = allocations();
    let pipe = black_box(test_pipe(&pool));
    assert!(
        allocations() - before > 0,
        "creating a pipe was not counted"
    );
    drop(pipe);
    // And it counts on other threads, for that thread.
    let on_thread = thread::spawn(|| {
        let before = allocations();
        drop(black_box(vec![0u8; 10]));
        allocations() - before
    });
    assert_eq!(on_thread.join().unwrap(), 1);
}

#[test]
fn append_read_advance_allocates_nothing_per_frame() {
    let pool = Pool::new();
    for size in SIZES {
        let (mut writer, mut reader) = test_pipe(&pool);

        // A fresh pooled packet per frame (rent, fill, seal), the usual producer.
        let n = allocations_per_batch(|| {
            let mut buf = pool.rent(size).unwrap();
            buf.extend_from_slice(&vec_free_fill(size)[..size]).unwrap();
            writer.append(buf.freeze()).unwrap();
            writer.flush_blocking().unwrap();
            read_and_consume(&mut reader, size);
        });
        assert_eq!(n, 0, "append(fresh pooled packet) -> read -> advance_to, {size} B: {n} allocations in {FRAMES} frames");

        // Shares of one pooled packet.
        let shared: Packet = pool.copy_from_slice(&vec![3u8; size]).unwrap();
        let n = allocations_per_batch(|| {
            writer.append(shared.clone()).unwrap();
            writer.flush_blocking().unwrap();
            read_and_consume(&mut reader, size);
        });
        assert_eq!(
            n, 0,
            "append(shared pooled packet), {size} B: {n} allocations"
        );

        // `Bytes` (already shared once, so cloning it is a reference count) and static slices.
        let bytes = Bytes::from(vec![4u8; size]);
        drop(bytes.clone());
        let n = allocations_per_batch(|| {
            writer.append(bytes.clone()).unwrap();
            writer.append(Packet::from_static(&STATIC[..size])).unwrap();
            writer.flush_blocking().unwrap();
            read_and_consume(&mut reader, 2 * size);
        });
        assert_eq!(
            n, 0,
            "append(Bytes) + append(static), {size} B: {n} allocations"
        );

        // Several frames per read, consumed one by one.
        let n = allocations_per_batch(|| {
            for _ in 0..4 {
                writer.append(shared.clone()).unwrap();
            }
            writer.flush_blocking().unwrap();
            for left in (1..=4).rev() {
                let result = reader.read_blocking().unwrap();
                assert_eq!(result.buffer.len(), left * size);
                reader.advance_to(size, size).unwrap();
            }
        });
        assert_eq!(
            n, 0,
            "4 appends -> 4 x (read -> advance_to), {size} B: {n} allocations"
        );
    }
    assert_eq!(pool.stats().outstanding, 0);
}

static STATIC: [u8; 64 * 1024] = [5; 64 * 1024];

/// Bytes to copy from, without allocating.
fn vec_free_fill(size: usize) -> &'static [u8] {
    &STATIC[..size]
}

#[test]
fn buffer_mut_advance_flush_read_advance_to_allocates_nothing_per_frame() {
    let pool = Pool::new();
    for size in SIZES {
        let (mut writer, mut reader) = test_pipe(&pool);
        let mut tag = 0u8;
        let n = allocations_per_batch(|| {
            tag = tag.wrapping_add(1);
            let space = writer.spare_mut(size).unwrap();
            space[..size].fill(tag);
            writer.commit(size).unwrap();
            writer.flush_blocking().unwrap();
            let result = reader.read_blocking().unwrap();
            assert_eq!(result.buffer.len(), size);
            assert!(result.buffer.segments().flatten().all(|&b| b == tag));
            reader.advance_to(size, size).unwrap();
        });
        assert_eq!(n, 0, "buffer_mut/advance -> flush -> read -> advance_to, {size} B: {n} allocations in {FRAMES} frames");

        let n = allocations_per_batch(|| {
            writer.write_slice(&STATIC[..size]).unwrap();
            writer.flush_blocking().unwrap();
            read_and_consume(&mut reader, size);
        });
        assert_eq!(
            n, 0,
            "write -> flush -> read -> advance_to, {size} B: {n} allocations"
        );
        drop((writer, reader));
        assert_eq!(pool.stats().outstanding, 0);
    }
}

#[test]
fn unpaused_flush_allocates_nothing() {
    let pool = Pool::new();
    let (mut writer, mut reader) = pipe_with(PipeOptions {
        pool: Some(pool.clone()),
        ..Default::default()
    });
    let counter = Arc::new(CountWaker::default());
    let waker = Waker::from(counter.clone());
    let mut in_flush = 0;
    let mut flushes = 0;
    let mut frame = |writer: &mut PipeWriter, reader: &mut PipeReader, counting: bool| {
        // With bytes staged, then with nothing staged, then the async form.
        writer.write_slice(&STATIC[..64]).unwrap();
        let before = allocations();
        let result = writer.flush_blocking().unwrap();
        let zero_byte = writer.flush_blocking().unwrap();
        writer.write_slice(&STATIC[..64]).unwrap();
        let polled = writer.poll_flush_pipe(&mut Context::from_waker(&waker));
        let after = allocations();
        assert!(!result.is_completed && !result.is_canceled);
        assert!(!zero_byte.is_completed && !zero_byte.is_canceled);
        assert!(matches!(polled, Poll::Ready(Ok(_))), "the flush paused");
        if counting {
            in_flush += after - before;
            flushes += 3;
        }
        read_and_consume(reader, 128);
    };
    for _ in 0..WARM_UP {
        frame(&mut writer, &mut reader, false);
    }
    for _ in 0..FRAMES {
        frame(&mut writer, &mut reader, true);
    }
    assert_eq!(
        in_flush, 0,
        "{in_flush} allocations in {flushes} unpaused flushes"
    );
    assert_eq!(counter.get(), 0);
}

#[test]
fn a_read_that_waits_and_the_flush_that_wakes_it_allocate_nothing() {
    let pool = Pool::new();
    let (mut writer, mut reader) = test_pipe(&pool);
    let counter = Arc::new(CountWaker::default());
    let waker = Waker::from(counter.clone());
    let mut waits = 0usize;
    let n = allocations_per_batch(|| {
        let mut cx = Context::from_waker(&waker);
        assert!(
            reader.poll_read_buffer(&mut cx).is_pending(),
            "the read must wait"
        );
        waits += 1;
        writer.write_slice(&STATIC[..100]).unwrap();
        writer.flush_blocking().unwrap(); // wakes the waiting reader
        assert!(reader.poll_read_buffer(&mut cx).is_ready());
        let len = reader.last_read().unwrap().buffer.len();
        assert_eq!(len, 100);
        reader.advance_to(len, len).unwrap();
    });
    assert_eq!(n, 0, "{n} allocations in {FRAMES} waiting reads");
    assert_eq!(counter.get(), waits, "every wait was woken exactly once");

    // The same with a paused flush that the reader releases.
    let (mut writer, mut reader) = pipe_with(PipeOptions {
        pool: Some(pool.clone()),
        pause_threshold: 100,
        resume_threshold: 50,
        ..Default::default()
    });
    let n = allocations_per_batch(|| {
        let mut cx = Context::from_waker(&waker);
        writer.write_slice(&STATIC[..100]).unwrap();
        assert!(
            writer.poll_flush_pipe(&mut cx).is_pending(),
            "the flush must pause"
        );
        let len = reader.try_read().unwrap().unwrap().buffer.len();
        reader.advance_to(len, len).unwrap(); // wakes the paused flush
        assert!(writer.poll_flush_pipe(&mut cx).is_ready());
    });
    assert_eq!(n, 0, "{n} allocations in {FRAMES} paused flushes");
}

#[test]
fn take_frame_on_the_copy_path_allocates_nothing_per_frame() {
    let pool = Pool::new();
    let (mut writer, mut reader) = pipe_with(PipeOptions {
        pool: Some(pool.clone()),
        copy_threshold: 1024,
        pause_threshold: 1 << 20,
        ..Default::default()
    });

    // One small frame per read, copied into a fitted pooled buffer (300 bytes), or beside the
    // other small copies in the block they share (100 bytes).
    for size in [300, 100] {
        let n = allocations_per_batch(|| {
            writer.write_slice(&STATIC[..size]).unwrap();
            writer.flush_blocking().unwrap();
            let buffer = reader.read_blocking().unwrap().buffer;
            assert_eq!(buffer.len(), size);
            let segment = buffer.segments().next().unwrap_or_default().as_ptr();
            let mut frame = reader.take_frame(size).unwrap();
            assert_ne!(frame.as_ptr(), segment, "copied, not shared");
            if size > 256 {
                // Not inline (a clone shares the block), and the only handle to its block.
                assert!(
                    frame.clone().get_mut().is_none() && frame.get_mut().is_some(),
                    "a fitted block of its own"
                );
            }
            drop(black_box(frame));
            reader.advance_to(0, 0).unwrap();
        });
        assert_eq!(
            n, 0,
            "write -> flush -> read -> take_frame(copy) of {size} B: {n} allocations in {FRAMES} frames"
        );
    }

    // Many frames per read, each copied; frames kept alive for a while (a batch) before dropping.
    let mut kept: Vec<Packet> = Vec::with_capacity(16);
    let n = allocations_per_batch(|| {
        for _ in 0..16 {
            writer.write_slice(&STATIC[..200]).unwrap();
        }
        writer.flush_blocking().unwrap();
        reader.read_blocking().unwrap();
        for _ in 0..16 {
            kept.push(reader.take_frame(200).unwrap());
        }
        assert_eq!(reader.last_read().unwrap().buffer.len(), 0);
        reader.advance_to(0, 0).unwrap();
        kept.clear();
    });
    assert_eq!(n, 0, "16 x take_frame(copy) per read: {n} allocations");

    // The sharing path, for comparison, allocates nothing either.
    let n = allocations_per_batch(|| {
        writer.write_slice(&STATIC[..4000]).unwrap();
        writer.flush_blocking().unwrap();
        reader.read_blocking().unwrap();
        let frame = reader.take_frame(4000).unwrap();
        drop(black_box(frame));
        reader.advance_to(0, 0).unwrap();
    });
    assert_eq!(n, 0, "take_frame(share): {n} allocations");
    drop((writer, reader));
    assert_eq!(pool.stats().outstanding, 0);
}

// ------------------------------------------------------------------------------------------------
// Request/response across two threads: every read waits for the other side.

const ROUND_TRIPS: usize = 10_000;
const PING_PONG_WARM_UP: usize = 1_000;

/// Fill `pool`'s shared depot with `blocks` free 4 KiB blocks (the class the 64-byte messages'
/// `buffer_mut` rents: the pipe's minimum segment size).
///
/// Why: in a request/response exchange each side's reader, about to wait, sends the other side's
/// parked write buffer home, so blocks flow both ways between the two threads' caches, and how many
/// go which way drifts with the timing. A thread cache holds up to two magazines (64 blocks) before
/// it spills one to the depot, so a thread that runs dry while the other holds fewer than that
/// allocates a fresh block, until enough blocks circulate; that takes tens of thousands of round
/// trips to happen by chance. Prefilled with more than two full caches' worth, the depot always has
/// a magazine for the thread that runs dry: the steady state a long-running server reaches, from
/// the first round trip.
fn warm_pool_for_ping_pong(pool: &Pool, blocks: usize) {
    let rented: Vec<_> = (0..blocks).map(|_| pool.rent(4096).unwrap()).collect();
    drop(rented); // this thread keeps two magazines; the rest go to the depot
}
const REQUEST: usize = 64;
const RESPONSE: usize = 64;

/// Reads one `len`-byte message, checks its first byte, consumes it.
fn receive(reader: &mut PipeReader, len: usize, tag: u8) {
    let result = reader.read_blocking().unwrap();
    assert_eq!(result.buffer.len(), len, "one message at a time");
    assert_eq!(result.buffer.peek_be::<u8>(0), Some(tag));
    reader.advance_to(len, len).unwrap();
}

fn send(writer: &mut PipeWriter, len: usize, tag: u8) {
    let space = writer.spare_mut(len).unwrap();
    space[..len].fill(tag);
    writer.commit(len).unwrap();
    let result = writer.flush_blocking().unwrap();
    // Both threads hand their pipe ends back when done, so no side completes mid-exchange.
    assert!(!result.is_completed && !result.is_canceled);
}

#[test]
fn request_response_ping_pong_across_threads_allocates_nothing() {
    let pool = Pool::new();
    warm_pool_for_ping_pong(&pool, 320);
    let options = PipeOptions {
        pool: Some(pool.clone()),
        ..Default::default()
    };
    let (mut request_writer, mut request_reader) = pipe_with(options.clone());
    let (mut response_writer, mut response_reader) = pipe_with(options);
    let (done_tx, done_rx) = mpsc::channel();

    let server = thread::spawn(move || {
        let mut measured = 0;
        for i in 0..PING_PONG_WARM_UP + ROUND_TRIPS {
            if i == PING_PONG_WARM_UP {
                measured = allocations();
            }
            let tag = i as u8;
            receive(&mut request_reader, REQUEST, tag);
            send(&mut response_writer, RESPONSE, tag.wrapping_add(1));
        }
        (allocations() - measured, request_reader, response_writer)
    });
    let client = thread::spawn(move || {
        let mut measured = 0;
        for i in 0..PING_PONG_WARM_UP + ROUND_TRIPS {
            if i == PING_PONG_WARM_UP {
                measured = allocations();
            }
            let tag = i as u8;
            send(&mut request_writer, REQUEST, tag);
            receive(&mut response_reader, RESPONSE, tag.wrapping_add(1));
        }
        let n = allocations() - measured;
        done_tx.send(()).unwrap();
        (n, request_writer, response_reader)
    });
    done_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the ping-pong hung");
    let (client, request_writer, response_reader) = client.join().unwrap();
    let (server, request_reader, response_writer) = server.join().unwrap();
    assert_eq!(
        (client, server),
        (0, 0),
        "allocations in {ROUND_TRIPS} round trips (client, server)"
    );
    drop((
        request_writer,
        request_reader,
        response_writer,
        response_reader,
    ));
    assert_eq!(pool.stats().outstanding, 0);
}

/// The same exchange with the read driven by hand, to show that the reads really wait (they return
/// `Pending` and the thread parks) and that waiting allocates nothing.
#[test]
fn ping_pong_reads_really_wait_and_waiting_allocates_nothing() {
    struct Unparker(thread::Thread);
    impl Wake for Unparker {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.unpark();
        }
    }

    /// Poll-read until `len` bytes are there, parking in between; returns how often it waited.
    fn receive_counting_waits(
        reader: &mut PipeReader,
        waker: &Waker,
        len: usize,
        tag: u8,
    ) -> usize {
        let mut cx = Context::from_waker(waker);
        let mut waits = 0;
        while reader.poll_read_buffer(&mut cx).is_pending() {
            waits += 1;
            thread::park();
        }
        let result = reader.last_read().unwrap();
        assert_eq!(result.buffer.len(), len);
        assert_eq!(result.buffer.peek_be::<u8>(0), Some(tag));
        reader.advance_to(len, len).unwrap();
        waits
    }

    let pool = Pool::new();
    warm_pool_for_ping_pong(&pool, 320);
    let options = PipeOptions {
        pool: Some(pool.clone()),
        ..Default::default()
    };
    let (mut request_writer, mut request_reader) = pipe_with(options.clone());
    let (mut response_writer, mut response_reader) = pipe_with(options);
    let (done_tx, done_rx) = mpsc::channel();

    let server = thread::spawn(move || {
        let waker = Waker::from(Arc::new(Unparker(thread::current())));
        let (mut measured, mut waits) = (0, 0);
        for i in 0..PING_PONG_WARM_UP + ROUND_TRIPS {
            if i == PING_PONG_WARM_UP {
                measured = allocations();
                waits = 0;
            }
            let tag = i as u8;
            waits += receive_counting_waits(&mut request_reader, &waker, REQUEST, tag);
            send(&mut response_writer, RESPONSE, tag.wrapping_add(1));
        }
        (
            allocations() - measured,
            waits,
            request_reader,
            response_writer,
        )
    });
    let client = thread::spawn(move || {
        let waker = Waker::from(Arc::new(Unparker(thread::current())));
        let (mut measured, mut waits) = (0, 0);
        for i in 0..PING_PONG_WARM_UP + ROUND_TRIPS {
            if i == PING_PONG_WARM_UP {
                measured = allocations();
                waits = 0;
            }
            let tag = i as u8;
            send(&mut request_writer, REQUEST, tag);
            waits +=
                receive_counting_waits(&mut response_reader, &waker, RESPONSE, tag.wrapping_add(1));
        }
        let n = allocations() - measured;
        done_tx.send(()).unwrap();
        (n, waits, request_writer, response_reader)
    });
    done_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the ping-pong hung");
    let (client_allocs, client_waits, request_writer, response_reader) = client.join().unwrap();
    let (server_allocs, server_waits, request_reader, response_writer) = server.join().unwrap();
    assert!(
        client_waits + server_waits > 0,
        "no read waited: the test does not measure waiting"
    );
    assert_eq!(
        (client_allocs, server_allocs),
        (0, 0),
        "allocations in {ROUND_TRIPS} round trips with {client_waits} + {server_waits} waits"
    );
    drop((
        request_writer,
        request_reader,
        response_writer,
        response_reader,
    ));
    assert_eq!(pool.stats().outstanding, 0);
}
