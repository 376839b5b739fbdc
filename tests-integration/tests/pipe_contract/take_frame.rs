//! `take_frame` and `take_frame_chain`.

use super::*;

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
    assert_eq!(reader.last_read().unwrap().buffer.to_vec(), &data[201..]);
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
    let (mut writer, mut reader) = pipe_with(PipeOptions {
        pause_threshold: 0,
        ..Default::default()
    });
    let n = DEFAULT_COPY_THRESHOLD;
    writer.append(Bytes::from(vec![5u8; 4 * n])).unwrap();
    flush_now(&mut writer);
    let start = reader
        .try_read()
        .unwrap()
        .unwrap()
        .buffer
        .segments()
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
    let (mut writer, mut reader) = pipe_on(
        &pool,
        PipeOptions {
            copy_threshold: 16,
            ..Default::default()
        },
    );
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
        let buffer = reader.last_read().unwrap().buffer;
        let Some(len) = buffer.peek_be::<u8>(0).map(usize::from) else {
            break;
        };
        if buffer.len() < 1 + len {
            break;
        }
        assert_eq!(reader.take_frame(1).unwrap(), &[len as u8][..]);
        frames.push(reader.take_frame(len).unwrap());
    }
    assert_eq!(frames, [&b"abc"[..], &b"de"[..]]);
    assert_eq!(reader.last_read().unwrap().buffer.to_vec(), b"\x04fg");
    // Relative to what is left: examined 3 = everything, so the next read waits.
    reader.advance_to(0, 3).unwrap();
    assert!(reader.try_read().unwrap().is_none());
    writer.write_slice(b"hi").unwrap();
    flush_now(&mut writer);
    assert_eq!(read_now(&mut reader), b"\x04fghi");
}

#[test]
fn take_frame_chain_shares_a_frame_spanning_segments() {
    let (mut writer, mut reader) = pipe_with(PipeOptions {
        copy_threshold: 4,
        ..Default::default()
    });
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
fn first_chunk_is_the_first_segment_of_any_view() {
    let (mut writer, mut reader) = pipe();
    writer.append(&b"abc"[..]).unwrap();
    writer.append(&b"defg"[..]).unwrap();
    flush_now(&mut writer);
    let result = reader.try_read().unwrap().unwrap();
    let buffer = result.buffer;
    assert_eq!(buffer.segments().next().unwrap_or_default(), b"abc");
    assert_eq!(
        buffer.slice(..2).segments().next().unwrap_or_default(),
        b"ab"
    );
    assert_eq!(
        buffer.slice(1..).segments().next().unwrap_or_default(),
        b"bc"
    );
    assert_eq!(
        buffer.slice(3..5).segments().next().unwrap_or_default(),
        b"de"
    );
    assert_eq!(buffer.slice(7..).segments().next().unwrap_or_default(), b"");
    reader.advance_to(7, 7).unwrap();
    writer.complete();
    let result = reader.read_blocking().unwrap();
    assert_eq!(result.buffer.segments().next().unwrap_or_default(), b"");
}
