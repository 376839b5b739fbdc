//! Writer: staging.

use super::*;

#[test]
fn append_stages_an_owned_packet_zero_copy() {
    let pool = Pool::new();
    let (mut writer, mut reader) = pipe_on(&pool, PipeOptions::default());
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
    let ptrs: Vec<*const u8> = result.buffer.segments().map(<[u8]>::as_ptr).collect();
    assert_eq!(
        ptrs,
        [owned_ptr, bytes_ptr, STATIC.as_ptr()],
        "the reader sees the very same bytes"
    );
    assert_eq!(result.buffer.to_vec(), b"owned packeta Bytesstatic");
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
    writer.spare_mut(10).unwrap();
    writer.commit(0).unwrap();
    assert_eq!(writer.unflushed_len(), 0);
    flush_now(&mut writer);
    assert_eq!(wakes.get(), 0);
    assert!(reader.try_read().unwrap().is_none());
    // Between real segments, empty ones leave no zero-length chunk.
    writer.write_slice(b"a").unwrap();
    writer.append(Packet::new()).unwrap();
    writer.append(Bytes::from_static(b"b")).unwrap();
    writer.append(Bytes::new()).unwrap();
    writer.write_slice(b"c").unwrap();
    flush_now(&mut writer);
    let result = reader.try_read().unwrap().unwrap();
    assert!(result.buffer.segments().all(|c| !c.is_empty()));
    assert_eq!(result.buffer.to_vec(), b"abc");
}

#[test]
fn buffer_mut_gives_at_least_one_byte_and_at_least_the_hint() {
    let (mut writer, mut reader) = pipe_with(PipeOptions {
        pause_threshold: 0,
        ..Default::default()
    });
    assert!(!writer.spare_mut(0).unwrap().is_empty());
    let mut expected = Vec::new();
    for hint in [1, 100, 4095, 4096, 4097, 10_000, 100_000, 3 << 20] {
        let space = writer.spare_mut(hint).unwrap();
        assert!(
            space.len() >= hint,
            "buffer_mut({hint}) gave {} bytes",
            space.len()
        );
        let fill = (hint % 251) as u8;
        space[..hint].fill(fill);
        writer.commit(hint).unwrap();
        expected.extend(std::iter::repeat(fill).take(hint));
    }
    flush_now(&mut writer);
    assert_eq!(read_now(&mut reader), expected);
}

#[test]
fn advance_commits_exactly_the_bytes_written() {
    let (mut writer, mut reader) = pipe();
    let space = writer.spare_mut(8).unwrap();
    space[..8].copy_from_slice(b"12345678");
    writer.commit(3).unwrap();
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
    assert_eq!(result.buffer.to_vec(), b"original");
    assert_ne!(
        result.buffer.segments().next().unwrap().as_ptr(),
        source.as_ptr()
    );
}

#[test]
fn a_single_write_stays_one_segment() {
    let (mut writer, mut reader) = pipe_with(PipeOptions {
        pause_threshold: 0,
        ..Default::default()
    });
    writer.write_slice(&[1; 4000]).unwrap();
    writer.write_slice(&[2; 3000]).unwrap(); // does not fit in the first block's tail
    flush_now(&mut writer);
    let result = reader.try_read().unwrap().unwrap();
    let lens: Vec<usize> = result.buffer.segments().map(<[u8]>::len).collect();
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
    writer.spare_mut(3).unwrap()[..3].copy_from_slice(b"def");
    writer.commit(3).unwrap();
    writer.append(Bytes::from_static(b"ghi")).unwrap();
    assert_eq!(writer.unflushed_len(), 9);

    assert_eq!(wakes.get(), 0, "staging must not wake the reader");
    assert!(
        reader.try_read().unwrap().is_none(),
        "staged bytes must be invisible"
    );
    assert!(reader
        .poll_read_buffer(&mut Context::from_waker(&waker))
        .is_pending());

    flush_now(&mut writer);
    assert_eq!(writer.unflushed_len(), 0);
    assert_eq!(wakes.get(), 1, "the flush wakes the waiting reader");
    assert!(reader
        .poll_read_buffer(&mut Context::from_waker(&waker))
        .is_ready());
    assert_eq!(reader.last_read().unwrap().buffer.to_vec(), b"abcdefghi");
}

#[test]
fn after_a_flush_the_writer_keeps_writing_into_the_tail_of_the_same_block() {
    let pool = Pool::new();
    let (mut writer, mut reader) = pipe_on(&pool, PipeOptions::default());
    writer.write_slice(b"first").unwrap();
    flush_now(&mut writer);
    writer.write_slice(b"second").unwrap();
    flush_now(&mut writer);
    let result = reader.try_read().unwrap().unwrap();
    let chunks: Vec<&[u8]> = result.buffer.segments().collect();
    // Same block, next bytes: the second flush grows the first flush's segment.
    assert_eq!(chunks, [&b"firstsecond"[..]]);
    assert_eq!(pool.stats().rents, 1);
}

#[test]
fn a_segment_read_and_consumed_grows_again_with_the_next_flush_into_its_block() {
    let pool = Pool::new();
    let (mut writer, mut reader) = pipe_on(
        &pool,
        PipeOptions {
            pause_threshold: 0,
            ..Default::default()
        },
    );
    let mut start = None;
    // A peer trickling one byte per flush: each read sees the unconsumed bytes as one segment,
    // whether the reader consumed what it saw or only examined it.
    for (i, byte) in b"GET / HTTP/1.1".iter().enumerate() {
        writer.write_slice(&[*byte]).unwrap();
        flush_now(&mut writer);
        let result = reader.try_read().unwrap().unwrap();
        let chunks: Vec<&[u8]> = result.buffer.segments().collect();
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
    assert!(reader.read_blocking().unwrap().is_completed);
    drop(reader);
    assert_eq!(pool.stats().outstanding, 0);
}
