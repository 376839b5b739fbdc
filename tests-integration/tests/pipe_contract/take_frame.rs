//! `take_frame`, `take_frame_chain` and `take_frame_after`.

use super::*;

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

    // n == copy threshold: copied into the 1 KiB block the reader's small copies share.
    let mut small = reader.take_frame(100).unwrap();
    assert_eq!(&small[..], &data[..100]);
    assert_ne!(small.as_ptr(), start, "a small frame must be copied");
    assert!(!is_inline(&small), "copied into a pooled buffer");

    // n > copy threshold: shared, zero-copy, out of the same block.
    let mut large = reader.take_frame(101).unwrap();
    assert_eq!(&large[..], &data[100..201]);
    assert_eq!(
        large.as_ptr(),
        start.wrapping_add(100),
        "a large frame must be shared"
    );
    assert!(!owns_its_block(&mut large), "shares the pipe's block");

    // The rest is still in the pipe.
    assert_eq!(reader.last_read().unwrap().buffer().to_vec(), &data[201..]);
    reader.advance_to(799, 799).unwrap();

    // The small frame does not pin the large block: once the large frame and the pipe are gone,
    // only the small frame's copy block is out (the reader let go of it), 1 KiB.
    drop((writer, reader, large));
    let stats = pool.stats();
    assert_eq!(stats.outstanding, 1, "{stats:?}");
    assert!(
        owns_its_block(&mut small),
        "the copy shares its block with nothing once the reader let go of it"
    );
    let retained = stats.retained_bytes;
    drop(small);
    let stats = pool.stats();
    assert_eq!(stats.outstanding, 0, "{stats:?}");
    assert_eq!(
        stats.retained_bytes - retained,
        1024, // the class of 1 KiB
        "the shared copy block"
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
    assert!(is_inline(&tiny));
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
    let small_block = small.headroom() + small.len();
    assert!(small_block <= 112, "the class of 100 bytes (1.75 x 64)");
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
    let mut frame = reader.take_frame_after(50, 500).unwrap();
    assert_eq!(&frame[..], &data[50..550]);
    assert_eq!(frame.as_ptr(), start.wrapping_add(50), "shared, not copied");
    assert_eq!(pool.stats().rents, rents, "no buffer rented for the frame");
    assert!(!owns_its_block(&mut frame), "shares the pipe's block");
    reader.advance_to(50, 50).unwrap();
    drop(frame);

    // Segments of separate blocks (appended packets) do not join: copied into one buffer.
    writer.append(pooled(&pool, &data[..300])).unwrap();
    writer.append(pooled(&pool, &data[300..])).unwrap();
    flush_now(&mut writer);
    reader.try_read().unwrap().unwrap();
    let mut frame = reader.take_frame(600).unwrap();
    assert_eq!(&frame[..], &data[..]);
    assert!(owns_its_block(&mut frame), "a copy of its own");
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
