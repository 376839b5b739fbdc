//! Behaviour of the frame module: a large frame under backpressure with a
//! bounded number of wakes, sharing vs copying, bad input (clear errors, no panic, bounded memory),
//! the end of the stream, cancellation, `into_inner`, and the writer side's batching and cancel
//! safety.

use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::thread;

use futures::StreamExt;
use packetpipe::frame::{
    DecodeBuf, Decoded, Decoder, Delimited, FrameError, FrameWriter, Frames, LengthDelimited, Lines,
};
use packetpipe::pipe::{pipe, pipe_with, PipeOptions, PipeReader, DEFAULT_COPY_THRESHOLD};
use packetpipe::{ByteSegments, Packet, Pool};

mod kit;

use kit::wake::{run_counting_wakes, CountingUnpark, NoopWake};

fn header(len: usize) -> [u8; 4] {
    (len as u32).to_be_bytes()
}

#[test]
fn a_16_mib_frame_in_4_kib_segments_completes_under_backpressure_with_few_wakes() {
    const FRAME: usize = 16 << 20;
    const SEGMENT: usize = 4 << 10;
    let (mut writer, reader) = pipe_with(PipeOptions {
        pause_threshold: 64 << 10,
        resume_threshold: 32 << 10,
        ..Default::default()
    });
    let producer = thread::spawn(move || {
        writer.write_slice(&header(FRAME)).unwrap();
        let mut flushes = 0;
        for i in 0..FRAME / SEGMENT {
            writer.write_slice(&[i as u8; SEGMENT]).unwrap();
            let result = writer.flush_blocking().unwrap();
            assert!(!result.is_completed && !result.is_canceled);
            flushes += 1;
        }
        writer.complete();
        flushes
    });
    let mut frames = Frames::new(
        reader,
        LengthDelimited::builder()
            .max_frame_length(32 << 20)
            .new_codec(),
    );
    let (frame, wakes) = run_counting_wakes(frames.next());
    let frame = frame.expect("a frame").expect("no error");
    let flushes = producer.join().unwrap();
    assert_eq!(frame.len(), FRAME);
    for (i, chunk) in frame.chunks(SEGMENT).enumerate() {
        assert!(chunk.iter().all(|&b| b == i as u8), "segment {i} intact");
    }
    assert_eq!(flushes, 4096);
    // One wake for the first bytes, one when the whole frame is there (a few more if the reader
    // looks while the header is incomplete): far below one per segment.
    assert!(wakes <= 8, "{wakes} wakes for {flushes} segments");
    assert!(futures::executor::block_on(frames.next()).is_none());
}

#[test]
fn a_large_frame_in_one_segment_is_shared_and_a_small_one_leaves_its_block() {
    let pool = Pool::new();
    let (mut writer, reader) = pipe_with(PipeOptions {
        pool: Some(pool.clone()),
        ..Default::default()
    });

    // A receive block holding a 64 B frame and an 8 KiB frame, both whole.
    let mut block = pool.rent(16 << 10).unwrap();
    block.extend_from_slice(&header(64)).unwrap();
    block.extend_from_slice(&[1; 64]).unwrap();
    block.extend_from_slice(&header(8192)).unwrap();
    block.extend_from_slice(&[2; 8192]).unwrap();
    let block = block.freeze();
    let base = block.as_ptr() as usize;
    let block_range = base..base + block.len();
    writer.append(block).unwrap(); // the pipe holds the only handle now
    writer.complete();
    assert_eq!(pool.stats().outstanding, 1);

    let mut frames = Frames::new(reader, LengthDelimited::new());
    let small = frames.iter_blocking().next().unwrap().unwrap();
    assert_eq!(&small[..], &[1; 64][..]);
    assert!(
        !block_range.contains(&(small.as_ptr() as usize)),
        "a small frame is copied out"
    );
    let large = frames.iter_blocking().next().unwrap().unwrap();
    assert_eq!(large.len(), 8192);
    assert_eq!(
        large.as_ptr() as usize,
        base + 4 + 64 + 4,
        "a large frame in one segment is the same bytes of the same block"
    );
    assert!(
        large.clone().get_mut().is_none(),
        "still a pooled packet (a clone shares its block)"
    );
    assert!(frames.iter_blocking().next().is_none());
    // Two blocks out: the receive block (kept by the shared large frame) and the small frame's.
    assert_eq!(pool.stats().outstanding, 2);
    drop(large);
    assert_eq!(
        pool.stats().outstanding,
        1,
        "consumed and no longer shared, the receive block went home"
    );
    drop(frames);
    drop(small);
    assert_eq!(pool.stats().outstanding, 0);
}

#[test]
fn a_large_frame_in_the_middle_of_a_segment_is_shared_and_the_rest_stays_readable() {
    let pool = Pool::new();
    let (mut writer, reader) = pipe_with(PipeOptions {
        pool: Some(pool.clone()),
        ..Default::default()
    });

    // One receive block: two 4 KiB frames and the first 10 bytes of a third, so the first frame
    // is taken out of the middle of its segment and the second out of its end.
    let mut block = pool.rent(16 << 10).unwrap();
    for (fill, len) in [(3u8, 4096), (4, 4096)] {
        block.extend_from_slice(&header(len)).unwrap();
        block.extend_from_slice(&vec![fill; len]).unwrap();
    }
    block.extend_from_slice(&header(100)).unwrap();
    block.extend_from_slice(&[5; 6]).unwrap();
    let block = block.freeze();
    let base = block.as_ptr() as usize;
    writer.append(block).unwrap();
    writer.flush_blocking().unwrap();

    let mut frames = Frames::new(reader, LengthDelimited::new());
    let first = frames.iter_blocking().next().unwrap().unwrap();
    assert_eq!(&first[..], &[3; 4096][..]);
    assert_eq!(first.as_ptr() as usize, base + 4, "shared, not copied");
    let second = frames.iter_blocking().next().unwrap().unwrap();
    assert_eq!(&second[..], &[4; 4096][..]);
    assert_eq!(
        second.as_ptr() as usize,
        base + 4 + 4096 + 4,
        "shared, not copied"
    );
    assert_eq!(
        pool.stats().outstanding,
        1,
        "both frames share the receive block"
    );

    // The third frame's 10 bytes are still unconsumed and intact; its rest completes it.
    writer.write_slice(&[5; 94]).unwrap();
    writer.complete();
    let third = frames.iter_blocking().next().unwrap().unwrap();
    assert_eq!(&third[..], &[5; 100][..]);
    assert!(frames.iter_blocking().next().is_none());
    drop((first, second, third, frames));
    assert_eq!(pool.stats().outstanding, 0, "every block went home");
}

#[test]
fn a_small_frame_does_not_keep_its_receive_block_alive() {
    let pool = Pool::new();
    let (mut writer, reader) = pipe_with(PipeOptions {
        pool: Some(pool.clone()),
        ..Default::default()
    });
    let mut block = pool.rent(64 << 10).unwrap();
    block.extend_from_slice(&header(100)).unwrap();
    block.extend_from_slice(&[9; 100]).unwrap();
    writer.append(block.freeze()).unwrap();
    writer.complete();
    let mut frames = Frames::new(reader, LengthDelimited::new());
    let frame = frames.iter_blocking().next().unwrap().unwrap();
    // The frame's bytes were consumed; the 64 KiB block is gone while the frame lives on.
    let stats = pool.stats();
    assert_eq!(
        stats.outstanding, 1,
        "only the frame's fitted block: {stats:?}"
    );
    assert!(
        frame.len() <= 128,
        "a fitted block of the class of 128 bytes or below"
    );
    // A 100-byte copy lies in the 1 KiB block small copies share: the reader keeps writing into it
    // until it waits, completes or drops, and the frame keeps it while it lives.
    assert_eq!(pool.stats().outstanding_bytes, 1024);
    drop(frame);
    assert_eq!(
        pool.stats().outstanding,
        1,
        "the reader's shared copy block"
    );
    drop(frames);
    assert_eq!(pool.stats().outstanding, 0);
}

#[test]
fn bad_lengths_are_clear_errors() {
    use std::io::ErrorKind::{InvalidData, InvalidInput};
    // The kinds are tokio-util's: a length that overflows with the adjustment is `InvalidInput`.
    let cases: [(LengthDelimited, &[u8], &str, std::io::ErrorKind); 3] = [
        (
            LengthDelimited::builder()
                .max_frame_length(65536)
                .new_codec(),
            &70000u32.to_be_bytes(),
            "frame of 70000 bytes exceeds the maximum frame length 65536",
            InvalidData,
        ),
        (
            LengthDelimited::builder()
                .length_field_type::<u16>()
                .length_adjustment(-5)
                .new_codec(),
            &[0, 2],
            "frame length 2 with length adjustment -5 does not fit the length type",
            InvalidInput,
        ),
        (
            LengthDelimited::builder()
                .length_field_type::<u64>()
                .length_adjustment(10)
                .max_frame_length(usize::MAX)
                .new_codec(),
            &(u64::MAX - 3).to_be_bytes(),
            "frame length 18446744073709551612 with length adjustment 10 does not fit the length type",
            InvalidInput,
        ),
    ];
    for (codec, bytes, message, kind) in cases {
        let (mut writer, reader) = pipe();
        writer.write_slice(bytes).unwrap();
        writer.write_slice(b"payload").unwrap();
        writer.complete();
        let mut frames = Frames::new(reader, codec);
        let err = frames.iter_blocking().next().unwrap().unwrap_err();
        assert_eq!(err.to_string(), message);
        assert_eq!(std::io::Error::from(err).kind(), kind);
        assert!(
            frames.iter_blocking().next().is_none(),
            "the stream ends after the error"
        );
        // Nothing was consumed: the bad header is still there for inspection.
        let mut reader = frames.into_inner();
        let buffer = reader.read_blocking().unwrap().buffer.to_vec();
        assert_eq!(&buffer[..bytes.len()], bytes);
    }
}

/// Feed `total` bytes of garbage (no newline; 64 KiB writes into the pipe's pooled blocks) through
/// `Frames<Lines>` with a maximum line length, resuming after each error; returns the errors seen
/// and the most blocks the pool had out at once.
fn feed_garbage_lines(total: usize, max_line: usize) -> (usize, u64) {
    let pool = Pool::new();
    let (mut writer, reader) = pipe_with(PipeOptions {
        pool: Some(pool.clone()),
        ..Default::default()
    });
    let producer = thread::spawn(move || {
        let chunk = vec![b'x'; 64 << 10];
        let mut sent = 0;
        while sent < total {
            writer.write_slice(&chunk).unwrap();
            writer.flush_blocking().unwrap();
            sent += chunk.len();
        }
    });
    let mut frames = Frames::new(reader, Lines::with_max_length(max_line));
    let mut errors = 0;
    let mut max_outstanding = 0;
    loop {
        match frames.iter_blocking().next() {
            Some(Err(FrameError::DelimiterNotFound { max, examined })) => {
                assert_eq!(max, max_line);
                assert_eq!(examined, max_line + 1);
                errors += 1;
            }
            Some(other) => panic!("unexpected {other:?}"),
            None if frames.resume() => {}
            None => break,
        }
        max_outstanding = max_outstanding.max(pool.stats().outstanding);
    }
    producer.join().unwrap();
    (errors, max_outstanding)
}

#[test]
fn a_delimiter_never_found_is_an_error_and_garbage_is_discarded_in_bounded_memory() {
    let total = std::env::var("FRAME_GARBAGE_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100usize)
        << 20;
    let (errors, max_outstanding) = feed_garbage_lines(total, 1024);
    // One error for the over-long line; the rest of it is discarded as it arrives.
    assert_eq!(errors, 1);
    // Pause threshold 64 KiB of 64 KiB writes in 4 KiB-or-larger blocks: a handful of blocks.
    assert!(
        max_outstanding <= 8,
        "{max_outstanding} blocks out while discarding {total} bytes"
    );
}

#[test]
fn garbage_for_length_delimited_fails_at_once_in_bounded_memory() {
    let pool = Pool::new();
    let (mut writer, reader) = pipe_with(PipeOptions {
        pool: Some(pool.clone()),
        ..Default::default()
    });
    let producer = thread::spawn(move || {
        let garbage: Vec<u8> = (0..64 << 10).map(|i| (i * 7 + 13) as u8 | 0x80).collect();
        // Until the reader goes away: backpressure holds the writer meanwhile.
        loop {
            writer.write_slice(&garbage).unwrap();
            if writer.flush_blocking().unwrap().is_completed {
                return;
            }
        }
    });
    let mut frames = Frames::new(
        reader,
        LengthDelimited::builder()
            .max_frame_length(64 << 10)
            .new_codec(),
    );
    let err = frames.iter_blocking().next().unwrap().unwrap_err();
    assert!(
        matches!(err, FrameError::FrameTooLong { max: 65536, .. }),
        "{err}"
    );
    assert!(frames.iter_blocking().next().is_none());
    thread::sleep(std::time::Duration::from_millis(50)); // let the writer run into backpressure
    assert!(pool.stats().outstanding <= 4, "{:?}", pool.stats());
    drop(frames); // the reader completes: the writer's flush reports it and the writer stops
    producer.join().unwrap();
}

#[test]
fn the_end_yields_the_last_frames_then_remaining_bytes_then_none() {
    let (mut writer, reader) = pipe();
    writer
        .write_slice(b"\0\0\0\x01a\0\0\0\x02bc\0\0\0\x05de")
        .unwrap();
    writer.complete();
    let mut frames = Frames::new(reader, LengthDelimited::new());
    assert_eq!(frames.iter_blocking().next().unwrap().unwrap(), &b"a"[..]);
    assert_eq!(frames.iter_blocking().next().unwrap().unwrap(), &b"bc"[..]);
    let err = frames.iter_blocking().next().unwrap().unwrap_err();
    assert_eq!(
        err.to_string(),
        "6 bytes remaining on stream: the writer completed inside a frame"
    );
    assert_eq!(
        std::io::Error::from(err).kind(),
        std::io::ErrorKind::UnexpectedEof
    );
    assert!(frames.iter_blocking().next().is_none());
    assert!(!frames.resume(), "the end is final");
    assert!(frames.iter_blocking().next().is_none());
}

#[test]
fn a_writer_error_comes_after_the_frames_before_it() {
    let (mut writer, reader) = pipe();
    writer.write_slice(b"\0\0\0\x01a\0\0").unwrap();
    writer.complete_with_error("connection reset");
    let mut frames = Frames::new(reader, LengthDelimited::new());
    assert_eq!(frames.iter_blocking().next().unwrap().unwrap(), &b"a"[..]);
    let err = frames.iter_blocking().next().unwrap().unwrap_err();
    assert!(
        matches!(err, FrameError::Pipe(packetpipe::Error::Peer { .. })),
        "{err:?}"
    );
    assert!(frames.iter_blocking().next().is_none());
}

#[test]
fn into_inner_keeps_a_partial_frame() {
    let (mut writer, reader) = pipe();
    writer.write_slice(b"\0\0\0\x01a\0\0\0\x09part").unwrap();
    writer.flush_blocking().unwrap();
    let mut frames = Frames::new(reader, LengthDelimited::new());
    assert_eq!(frames.iter_blocking().next().unwrap().unwrap(), &b"a"[..]);
    // Poll once more: it waits for the rest of the frame (everything examined).
    let waker = Waker::from(Arc::new(CountingUnpark {
        wakes: AtomicUsize::new(0),
        thread: thread::current(),
    }));
    assert!(frames
        .poll_next_unpin(&mut Context::from_waker(&waker))
        .is_pending());
    let mut reader: PipeReader = frames.into_inner();
    let result = reader
        .try_read()
        .unwrap()
        .expect("the partial frame is readable at once");
    assert_eq!(result.buffer.to_vec(), b"\0\0\0\x09part");
}

#[test]
fn a_canceled_read_yields_canceled_and_the_stream_goes_on() {
    let (mut writer, reader) = pipe();
    let canceler = reader.canceler();
    let mut frames = Frames::new(reader, Lines::new());
    writer.write_slice(b"hel").unwrap();
    writer.flush_blocking().unwrap();
    canceler.cancel();
    assert!(matches!(
        frames.iter_blocking().next(),
        Some(Err(FrameError::Canceled))
    ));
    writer.write_slice(b"lo\n").unwrap();
    writer.complete();
    assert_eq!(frames.iter_blocking().next().unwrap().unwrap(), "hello");
    assert!(frames.iter_blocking().next().is_none());
}

/// A decoder that builds its own item from the view and skips the bytes: big-endian u16s.
struct U16s;

impl Decoder for U16s {
    type Item = u16;
    type Error = FrameError;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Decoded<u16>, FrameError> {
        if buf.len() < 2 {
            return Ok(Decoded::NeedAtLeast(2));
        }
        let value = bytes::Buf::get_u16(&mut buf.buffer().cursor());
        buf.skip(2)?;
        Ok(Decoded::Frame(value))
    }
}

#[test]
fn a_decoder_can_build_its_own_items_across_segments() {
    let (mut writer, reader) = pipe();
    for byte in [0u8, 1, 0, 2, 1, 0] {
        writer.append(vec![byte]).unwrap(); // every value straddles two segments
    }
    writer.complete();
    let values: Vec<u16> = Frames::new(reader, U16s)
        .iter_blocking()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(values, [1, 2, 256]);
}

#[test]
fn forward_of_a_ready_stream_batches_many_frames_into_one_flush() {
    let (writer, mut reader) = pipe();
    let mut out = FrameWriter::new(writer, LengthDelimited::new());
    let items: Vec<Packet> = (0..100u8).map(|i| Packet::from(vec![i; 10])).collect();
    let items = futures::stream::iter(items.into_iter().map(Ok::<_, FrameError>));
    let (result, _) = run_counting_wakes(out.forward(items));
    result.unwrap();
    assert!(
        !futures::executor::block_on(out.flush())
            .unwrap()
            .is_completed
    );
    // One flush published everything: the first read sees all 100 frames.
    let read = reader.try_read().unwrap().unwrap();
    assert_eq!(read.buffer.len(), 100 * 14);
    assert!(reader.try_read().is_ok());
}

/// `send` under backpressure, dropped while its flush waits: the frame is neither lost nor
/// duplicated; `forward` dropped mid-way leaves the items it did not take in the iterator.
#[test]
fn writer_futures_dropped_mid_wait_lose_and_duplicate_nothing() {
    let (writer, reader) = pipe_with(PipeOptions {
        pause_threshold: 16,
        resume_threshold: 8,
        ..Default::default()
    });
    let mut out = FrameWriter::new(writer, LengthDelimited::new());
    let waker = Waker::from(Arc::new(CountingUnpark {
        wakes: AtomicUsize::new(0),
        thread: thread::current(),
    }));
    let mut cx = Context::from_waker(&waker);
    {
        let mut send = pin!(out.send(&b"0123456789abcdef"[..]));
        assert!(
            send.as_mut().poll(&mut cx).is_pending(),
            "paused: 20 bytes >= 16"
        );
    } // dropped mid-wait
    let mut items = (1u8..=5).map(|i| vec![i; 20]).map(Packet::from);
    {
        let stream = futures::stream::iter(items.by_ref().map(Ok::<_, FrameError>));
        let mut forward = pin!(out.forward(stream));
        let _ = Pin::new(&mut forward).poll(&mut cx); // stages until the flush pauses
    }
    let rest: Vec<_> = items.collect();
    out.feed(&b"last"[..]).unwrap();
    out.into_inner().complete();

    let frames: Vec<Packet> = Frames::new(reader, LengthDelimited::new())
        .iter_blocking()
        .collect::<Result<_, _>>()
        .unwrap();
    let mut expected = vec![Packet::from(&b"0123456789abcdef"[..])];
    expected.extend(
        (1u8..=5)
            .map(|i| Packet::from(vec![i; 20]))
            .take(5 - rest.len()),
    );
    expected.push(Packet::from(&b"last"[..]));
    assert_eq!(
        frames,
        expected,
        "{} items left in the iterator",
        rest.len()
    );
}

#[test]
fn chains_share_a_large_frame_that_spans_segments() {
    let pool = Pool::new();
    let (mut writer, reader) = pipe_with(PipeOptions {
        pool: Some(pool.clone()),
        ..Default::default()
    });
    let first = pool.copy_from_slice(&[1; 6000]).unwrap();
    let second = pool.copy_from_slice(&[2; 6000]).unwrap();
    let (p1, p2) = (first.as_ptr() as usize, second.as_ptr() as usize);
    writer.write_slice(&header(12000)).unwrap();
    writer.append(first).unwrap();
    writer.append(second).unwrap();
    writer.write_slice(&header(3)).unwrap();
    writer.write_slice(b"abc").unwrap();
    writer.complete();
    let mut frames = Frames::new(reader, LengthDelimited::new().into_chains());
    let big = frames.iter_blocking().next().unwrap().unwrap();
    assert_eq!(big.len(), 12000);
    let starts: Vec<usize> = big.iter().map(|p| p.as_ptr() as usize).collect();
    assert_eq!(
        starts,
        [p1, p2],
        "the appended packets themselves, not copies"
    );
    let small = frames.iter_blocking().next().unwrap().unwrap();
    assert_eq!((small.to_vec(), small.iter().len()), (b"abc".to_vec(), 1));
    assert!(frames.iter_blocking().next().is_none());

    // And back out: the chain is appended packet by packet behind its header.
    let (writer, mut out_reader) = pipe();
    let mut out = FrameWriter::new(writer, LengthDelimited::new());
    out.feed(big).unwrap();
    out.into_inner().complete();
    let read = out_reader.read_blocking().unwrap();
    let chunks: Vec<usize> = read.buffer.segments().map(<[u8]>::len).collect();
    assert_eq!(chunks, [4, 6000, 6000]);
}

/// A stream that plays a script: `Some(frame)` is yielded, `None` is one `Pending` (the waker is
/// kept); past the end it stays pending. Counts its polls.
struct Script {
    steps: std::collections::VecDeque<Option<&'static [u8]>>,
    polls: usize,
    waker: Option<Waker>,
}

impl Script {
    fn new(steps: &[Option<&'static [u8]>]) -> Script {
        Script {
            steps: steps.iter().copied().collect(),
            polls: 0,
            waker: None,
        }
    }
}

impl futures::Stream for Script {
    type Item = Result<Packet, FrameError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.polls += 1;
        match self.steps.pop_front() {
            Some(Some(frame)) => Poll::Ready(Some(Ok(Packet::from_static(frame)))),
            _ => {
                self.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

#[test]
fn forward_flushes_a_burst_without_polling_the_stream_again() {
    let mut cx = Context::from_waker(futures::task::noop_waker_ref());
    let (writer, mut outbound) = pipe();
    let mut out = FrameWriter::new(writer, LengthDelimited::new());
    let mut stream = Script::new(&[Some(b"one"), None, Some(b"two")]);
    assert!(pin!(out.forward(&mut stream)).poll(&mut cx).is_pending());
    // The frame, then `Pending` (its waker registered): the burst is flushed and that is all.
    assert_eq!(stream.polls, 2);
    let len = outbound.try_read().unwrap().unwrap().buffer.len();
    assert_eq!(len, 7);
    outbound.advance_to(len, len).unwrap();
    // Woken: the next poll takes the next frame.
    assert!(stream.waker.take().is_some());
    assert!(pin!(out.forward(&mut stream)).poll(&mut cx).is_pending());
    assert_eq!(
        outbound.try_read().unwrap().unwrap().buffer.to_vec(),
        b"\0\0\0\x03two"
    );
}

#[test]
fn forward_polls_the_stream_after_a_flush_that_waited() {
    // The flush pauses (threshold 4 bytes), the stream's wake comes while it waits; once the
    // flush goes through in a later poll, the stream must be polled again (its wake is spent).
    let mut cx = Context::from_waker(futures::task::noop_waker_ref());
    let (writer, mut outbound) = pipe_with(PipeOptions {
        pause_threshold: 4,
        resume_threshold: 1,
        ..Default::default()
    });
    let mut out = FrameWriter::new(writer, LengthDelimited::new());
    let mut stream = Script::new(&[Some(b"one"), None, Some(b"two")]);
    let mut forward = pin!(out.forward(&mut stream));
    assert!(forward.as_mut().poll(&mut cx).is_pending()); // flush paused
    let len = outbound.try_read().unwrap().unwrap().buffer.len();
    assert_eq!(len, 7);
    outbound.advance_to(len, len).unwrap(); // resumes the flush
    assert!(forward.as_mut().poll(&mut cx).is_pending());
    let read = outbound
        .try_read()
        .unwrap()
        .expect("the second frame was forwarded");
    assert_eq!(read.buffer.to_vec(), b"\0\0\0\x03two");
}

/// Every item of a stream with good frames, an over-long one (a decoder error, then `resume`) and
/// an incomplete tail (`BytesRemaining` at the end), as text, through `next_item`.
fn drain_items<F>(mut frames: Frames<LengthDelimited>, mut next_item: F) -> Vec<String>
where
    F: FnMut(&mut Frames<LengthDelimited>) -> Option<Result<Packet, FrameError>>,
{
    let mut items = Vec::new();
    loop {
        match next_item(&mut frames) {
            Some(Ok(frame)) => items.push(format!("frame {:?}", frame.to_vec())),
            Some(Err(e)) => items.push(format!("error {e}")),
            None if frames.resume() => items.push("resumed".to_string()),
            None => return items,
        }
    }
}

#[test]
fn frames_next_yields_what_the_stream_yields() {
    let mut bytes = Vec::new();
    for payload in [&b"one"[..], b"two", &[7u8; 40], b"three"] {
        bytes.extend((payload.len() as u32).to_be_bytes());
        bytes.extend(payload);
    }
    bytes.extend(b"\0\0\0\x09tail"); // 4 of 9 bytes
    let frames = || {
        let (mut writer, reader) = pipe();
        writer.write_slice(&bytes).unwrap();
        writer.complete();
        Frames::new(
            reader,
            LengthDelimited::builder().max_frame_length(32).new_codec(),
        )
    };
    // `Frames::next` (the inherent future) against `StreamExt::next` (the `Stream`).
    let inherent = drain_items(frames(), |f| futures::executor::block_on(f.next()));
    let stream = drain_items(frames(), |f| {
        futures::executor::block_on(StreamExt::next(f))
    });
    assert_eq!(inherent, stream);
    assert_eq!(
        inherent[..2],
        ["frame [111, 110, 101]", "frame [116, 119, 111]"]
    );
    assert!(inherent
        .iter()
        .any(|i| i.starts_with("error") && i.contains("32")));
    assert!(inherent.iter().any(|i| i == "resumed"));
    assert!(
        inherent.last().unwrap().starts_with("error"),
        "{inherent:?}"
    );
}

#[test]
fn frames_next_dropped_while_pending_loses_nothing_and_is_woken() {
    let (mut writer, reader) = pipe();
    let mut frames = Frames::new(reader, LengthDelimited::new());
    let counter = Arc::new(CountingUnpark {
        wakes: AtomicUsize::new(0),
        thread: thread::current(),
    });
    let waker = Waker::from(counter.clone());
    let mut cx = Context::from_waker(&waker);
    // Half a frame: pending, then the future is dropped (as in a `select!`).
    writer.write_slice(b"\0\0\0\x04ab").unwrap();
    writer.flush_blocking().unwrap();
    assert!(pin!(frames.next()).poll(&mut cx).is_pending());
    assert_eq!(counter.wakes.load(Ordering::SeqCst), 0);
    // The rest arrives: the reader registered by the dropped future is woken.
    writer.write_slice(b"cd").unwrap();
    writer.flush_blocking().unwrap();
    assert_eq!(counter.wakes.load(Ordering::SeqCst), 1);
    match pin!(frames.next()).poll(&mut cx) {
        Poll::Ready(Some(Ok(frame))) => assert_eq!(frame, &b"abcd"[..]),
        other => panic!("expected the frame, got {other:?}"),
    }
    writer.complete();
    assert!(futures::executor::block_on(frames.next()).is_none());
}

// ------------------------------------------------------------------------------------------------
// Misuse and unusual sequences of the public API.

/// A `Frames` polled once over `bytes` with no complete frame, then taken apart; the caller
/// consumes those bytes itself and writes `more`.
fn reuse_after_into_inner<D: packetpipe::frame::Decoder + Clone>(
    decoder: D,
    bytes: &[u8],
    more: &[u8],
) -> (Frames<D>, packetpipe::pipe::PipeWriter) {
    let (mut writer, reader) = pipe();
    writer.write_slice(bytes).unwrap();
    writer.flush_blocking().unwrap();
    let mut frames = Frames::new(reader, decoder);
    let waker = Waker::from(Arc::new(NoopWake));
    let mut cx = Context::from_waker(&waker);
    assert!(frames.poll_next_unpin(&mut cx).is_pending());
    // The decoder as the stream left it (a search under way), and the reader.
    let decoder = frames.decoder().clone();
    let mut reader = frames.into_inner();
    let len = reader.read_blocking().unwrap().buffer.len();
    assert_eq!(
        len,
        bytes.len(),
        "into_inner hands every unconsumed byte back"
    );
    reader.advance_to(len, len).unwrap();
    writer.write_slice(more).unwrap();
    writer.complete();
    (Frames::new(reader, decoder), writer)
}

#[test]
fn a_delimiter_decoder_taken_back_and_reused_searches_the_new_bytes_from_their_start() {
    let (mut frames, _writer) = reuse_after_into_inner(Lines::new(), b"abcdef", b"x\nyz\n");
    let lines: Vec<String> = frames
        .iter_blocking()
        .map(|line| line.unwrap().to_string())
        .collect();
    assert_eq!(lines, ["x", "yz"]);

    let (mut frames, _writer) =
        reuse_after_into_inner(Delimited::new(b";", 1024), b"0123456789", b"a;b;");
    let got: Vec<Vec<u8>> = frames
        .iter_blocking()
        .map(|frame| frame.unwrap().to_vec())
        .collect();
    assert_eq!(got, [b"a".to_vec(), b"b".to_vec()]);
}

#[test]
fn into_inner_hands_a_pending_cancel_on_to_the_next_read() {
    let (mut writer, reader) = pipe();
    let canceler = reader.canceler();
    let frames = Frames::new(reader, LengthDelimited::new());
    canceler.cancel();
    let mut reader = frames.into_inner();
    writer.write_slice(b"x").unwrap();
    writer.flush_blocking().unwrap();
    assert!(reader.read_blocking().unwrap().is_canceled);
    // One cancel, one canceled read: the next one has the byte.
    reader.advance_to(0, 0).unwrap();
    assert_eq!(reader.read_blocking().unwrap().buffer.to_vec(), b"x");
}

#[test]
#[should_panic(expected = "invalid length field offset")]
fn a_length_field_offset_whose_header_end_overflows_is_refused_by_the_builder() {
    LengthDelimited::builder().length_field_offset(usize::MAX - 2);
}

#[test]
fn the_tail_of_a_discarded_frame_is_not_a_frame_at_the_end_of_the_stream() {
    let (mut writer, reader) = pipe();
    writer.write_slice(b"AAAAAAAAAZ").unwrap(); // 10 bytes, no delimiter, at most 4 allowed
    writer.complete();
    let mut frames = Frames::new(reader, Delimited::new(b"\r\n", 4));
    assert!(matches!(
        frames.iter_blocking().next(),
        Some(Err(FrameError::DelimiterNotFound { max: 4, .. }))
    ));
    assert!(frames.iter_blocking().next().is_none());
    assert!(frames.resume());
    // The rest of the over-long frame is skipped; no delimiter came, so nothing is left.
    assert!(frames.iter_blocking().next().is_none());

    // The same with a delimiter after the over-long frame: the frame after it comes out.
    let (mut writer, reader) = pipe();
    writer.write_slice(b"AAAAAAAAAZ\r\nok\r\n").unwrap();
    writer.complete();
    let mut frames = Frames::new(reader, Delimited::new(b"\r\n", 4));
    assert!(matches!(frames.iter_blocking().next(), Some(Err(_))));
    assert!(frames.resume());
    assert_eq!(frames.iter_blocking().next().unwrap().unwrap(), &b"ok"[..]);
    assert!(frames.iter_blocking().next().is_none());
}

/// Run `f` on a thread; fail instead of hanging if it takes more than ten seconds.
fn within_ten_seconds<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    thread::spawn(move || tx.send(f()).unwrap());
    rx.recv_timeout(std::time::Duration::from_secs(10))
        .expect("did not finish within ten seconds")
}

#[test]
fn forward_ends_with_the_readers_error_once_the_writer_knows_the_reader_completed() {
    // Once the writer knows the reader is gone (here at its first write, which needs a block),
    // its writes are discarded and nothing is left to flush, so the forward must end on the
    // completion itself: with a stream always ready, nothing else would end it.
    let taken = within_ten_seconds(|| {
        let (writer, mut reader) = pipe();
        let mut out = FrameWriter::new(writer, LengthDelimited::new());
        reader.complete_with_error(std::io::Error::other("parser failed"));
        let mut taken = 0u64;
        let items = futures::stream::iter(std::iter::from_fn(|| {
            taken += 1;
            Some(Ok::<_, FrameError>(&b"0123456789"[..]))
        }));
        let e = futures::executor::block_on(out.forward(items)).unwrap_err();
        assert!(e.to_string().contains("reader completed"), "{e}");
        taken
    });
    assert_eq!(
        taken, 1,
        "one item taken: the write that found the reader gone"
    );
}

#[test]
fn forward_stops_taking_items_once_the_reader_has_completed() {
    // The writes are discarded, so the batch never fills: without a check of the completion
    // per item, the whole iterator would be encoded before the one flush that reports it.
    let (writer, mut reader) = pipe();
    let mut out = FrameWriter::new(writer, LengthDelimited::new());
    reader.complete();
    let mut taken = 0u64;
    let items = std::iter::from_fn(|| {
        taken += 1;
        (taken <= 1_000_000).then_some(&b"abcdefgh"[..])
    });
    let items = futures::stream::iter(items.map(Ok::<_, FrameError>));
    futures::executor::block_on(out.forward(items)).unwrap();
    assert!(
        futures::executor::block_on(out.flush())
            .unwrap()
            .is_completed
    );
    assert!(
        taken <= 2,
        "{taken} items taken from a forward to a completed reader"
    );
}

/// The chains decoder chooses between one packet and a chain of the segments' packets by the copy
/// threshold of the pipe it reads, as `take` does: a frame spanning segments is copied into one
/// packet up to the reader's threshold and shared as a chain above it, whatever the default is.
#[test]
fn length_delimited_chains_follow_the_readers_copy_threshold() {
    // (copy threshold, frame length, segments of the decoded frame): 3000 bytes are above the
    // default threshold, 1500 below it.
    let cases = [
        (DEFAULT_COPY_THRESHOLD, 3000, 2),
        (DEFAULT_COPY_THRESHOLD, 1500, 1),
        (4096, 3000, 1),
        (1000, 1500, 2),
    ];
    for (threshold, len, segments) in cases {
        let (mut writer, reader) = pipe_with(PipeOptions {
            copy_threshold: threshold,
            ..Default::default()
        });
        writer.write_slice(&header(len)).unwrap();
        writer.append(vec![1u8; len / 2]).unwrap();
        writer.append(vec![2u8; len - len / 2]).unwrap();
        writer.complete();
        let mut frames = Frames::new(reader, LengthDelimited::new().into_chains());
        let frame = frames.iter_blocking().next().unwrap().unwrap();
        assert_eq!(frame.len(), len);
        assert_eq!(
            frame.iter().len(),
            segments,
            "a {len}-byte frame over two segments with copy threshold {threshold}"
        );
        let mut expected = vec![1u8; len / 2];
        expected.resize(len, 2);
        assert_eq!(frame.to_vec(), expected);
        assert!(frames.iter_blocking().next().is_none());
    }
}
