//! The decoders' fused skip-and-take (`PipeReader::take_frame_after`): what it copies, what it
//! shares, and that a frame beyond the buffer changes nothing.

use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use bytes::Bytes;

use super::{pipe_with, FlushResult, PipeOptions, PipeReader, PipeWriter};
use crate::segments::ByteSegments;
use crate::{Error, Packet, Pool};

struct NoopWake;

impl Wake for NoopWake {
    fn wake(self: Arc<Self>) {}
}

/// Flush without waiting (the pipes here have no backpressure).
fn flush_now(writer: &mut PipeWriter) -> FlushResult {
    let waker = Waker::from(Arc::new(NoopWake));
    match writer.poll_flush_pipe(&mut Context::from_waker(&waker)) {
        Poll::Ready(result) => result.expect("flush failed"),
        Poll::Pending => panic!("flush paused where it must return at once"),
    }
}

fn pooled(pool: &Pool, data: &[u8]) -> Packet {
    pool.copy_from_slice(data).unwrap()
}

/// A pipe over its own pool, so that pool statistics belong to this test alone.
fn pipe_on(pool: &Pool, options: PipeOptions) -> (PipeWriter, PipeReader) {
    pipe_with(PipeOptions {
        pool: Some(pool.clone()),
        ..options
    })
}

/// A pipe on `pool` (copy threshold 100, no backpressure) holding 1,000 bytes in one pooled
/// block, read: the writer, the reader, the bytes and the address of the first.
fn pipe_with_one_block(pool: &Pool, pattern: u32) -> (PipeWriter, PipeReader, Vec<u8>, *const u8) {
    let (mut writer, mut reader) = pipe_on(
        pool,
        PipeOptions {
            copy_threshold: 100,
            pause_threshold: 0,
            ..Default::default()
        },
    );
    let data: Vec<u8> = (0..1000u32).map(|i| (i * pattern % 256) as u8).collect();
    writer.append(pooled(pool, &data)).unwrap(); // one 1024-byte block
    flush_now(&mut writer);
    let start = reader
        .try_read()
        .unwrap()
        .unwrap()
        .buffer
        .segments()
        .next()
        .unwrap_or_default()
        .as_ptr();
    (writer, reader, data, start)
}

#[test]
fn take_frame_after_skips_a_header_then_copies_small_and_shares_large() {
    let pool = Pool::new();
    let (_writer, mut reader, data, start) = pipe_with_one_block(&pool, 13);

    // Skip 4, copy 100 (the threshold) into a buffer fitted to the 100 bytes alone.
    let small = reader.take_frame_after(4, 100).unwrap();
    assert_eq!(&small[..], &data[4..104]);
    assert_ne!(small.as_ptr(), start.wrapping_add(4), "copied");
    let small_block = small.headroom() + small.len();
    assert!(small_block <= pool.class_size_for(100).unwrap());
    assert_eq!(reader.last_read().unwrap().buffer.len(), 896);

    // Skip 2, share 101 out of the same block.
    let large = reader.take_frame_after(2, 101).unwrap();
    assert_eq!(&large[..], &data[106..207]);
    assert_eq!(large.as_ptr(), start.wrapping_add(106), "shared");

    // Skip everything that is left but one byte, take nothing: consumes the skipped bytes.
    let empty = reader.take_frame_after(792, 0).unwrap();
    assert!(empty.is_empty());
    assert_eq!(reader.last_read().unwrap().buffer.to_vec(), &data[999..]);
    reader.advance_to(1, 1).unwrap();
}

#[test]
fn take_frame_after_across_segments_gives_the_bytes_and_bounds_errors_change_nothing() {
    let (mut writer, mut reader) = pipe_with(PipeOptions {
        copy_threshold: 4,
        ..Default::default()
    });
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
        "a frame of 6 bytes after 25 skipped: the buffer last read holds only 30 bytes"
    );
    // A skip near usize::MAX: the numbers as passed, no overflow.
    let e = reader.take_frame_after(usize::MAX, 1).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "a frame of 1 bytes after {} skipped: the buffer last read holds only 30 bytes",
            usize::MAX
        )
    );
    assert_eq!(reader.last_read().unwrap().buffer.len(), 30);

    // The skip crosses the first segment and the frame (above the copy threshold) spans the
    // second and third: copied into one buffer.
    let frame = reader.take_frame_after(12, 10).unwrap();
    assert_eq!(&frame[..], [[2u8; 8].as_slice(), &[3u8; 2]].concat());
    // Small, inside the third segment after the skip: copied.
    let frame = reader.take_frame_after(1, 3).unwrap();
    assert_eq!(&frame[..], &[3u8; 3]);
    assert_eq!(reader.last_read().unwrap().buffer.to_vec(), [3u8; 4]);
    // At the copy threshold, the rest of the third segment: copied.
    let frame = reader.take_frame_after(0, 4).unwrap();
    assert_eq!(&frame[..], &[3u8; 4]);
    reader.advance_to(0, 0).unwrap();
    writer.complete();
    assert!(reader.read_blocking().unwrap().is_completed);
}

#[test]
fn a_large_frame_over_flushes_of_one_block_is_shared_and_over_separate_blocks_copied() {
    let pool = Pool::new();
    let (mut writer, mut reader) = pipe_on(
        &pool,
        PipeOptions {
            copy_threshold: 100,
            min_segment_size: 4096,
            pause_threshold: 0,
            ..Default::default()
        },
    );
    // Three flushes into the tail of one 4 KiB block: one segment, grown by each flush.
    let data: Vec<u8> = (0..600u32).map(|i| (i * 31 % 251) as u8).collect();
    for part in data.chunks(200) {
        writer.write_slice(part).unwrap();
        flush_now(&mut writer);
    }
    let result = reader.try_read().unwrap().unwrap();
    assert_eq!(result.buffer.segments().count(), 1);
    let start = result.buffer.segments().next().unwrap_or_default().as_ptr();
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
