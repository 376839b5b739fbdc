//! The read buffer.

use super::*;

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
    let buffer = reader.last_read().unwrap().buffer;
    assert_eq!(buffer.len(), 12);
    assert!(!buffer.is_empty());
    assert_eq!(buffer.peek_be::<u8>(0), Some(b'h'));
    assert_eq!(buffer.peek_be::<u8>(3), Some(b'l'));
    assert_eq!(buffer.peek_be::<u8>(11), Some(b'!'));
    assert_eq!(buffer.peek_be::<u8>(12), None);
    assert_eq!(ByteSegments::len(&buffer), 12);
    let empty = buffer.slice(4..4);
    assert!(empty.is_empty() && empty.peek_be::<u8>(0).is_none());
    assert_eq!(empty.segments().count(), 0);
}

#[test]
fn read_buffer_chunks_are_never_zero_length() {
    let (_writer, mut reader) = three_segments();
    {
        let buffer = reader.last_read().unwrap().buffer;
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
                assert!(slice.segments().all(|c| !c.is_empty()), "{start}..{end}");
                assert_eq!(
                    slice.segments().map(<[u8]>::len).sum::<usize>(),
                    end - start
                );
            }
        }
    }
    // Consuming a segment exactly, or part of one.
    reader.advance_to(3, 3).unwrap();
    let result = reader.try_read().unwrap().unwrap();
    assert_eq!(chunks_of(result.buffer), [&b"lo wo"[..], b"rld!"]);
    reader.advance_to(2, 2).unwrap();
    let result = reader.try_read().unwrap().unwrap();
    assert_eq!(chunks_of(result.buffer), [&b" wo"[..], b"rld!"]);
}

#[test]
fn read_buffer_cursor_is_a_buf_across_segments() {
    let (_writer, reader) = three_segments();
    let buffer = reader.last_read().unwrap().buffer;
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
    assert_eq!(reader.last_read().unwrap().buffer.len(), 12);
}

#[test]
fn read_buffer_to_vec_slice_and_copy_prefix() {
    let (_writer, reader) = three_segments();
    let buffer = reader.last_read().unwrap().buffer;
    assert_eq!(buffer.to_vec(), b"hello world!");
    assert_eq!(buffer.slice(2..9).to_vec(), b"llo wor");
    assert_eq!(buffer.slice(2..9).slice(1..3).to_vec(), b"lo");
    assert_eq!(buffer.slice(..).to_vec(), b"hello world!");
    let panic =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| buffer.slice(5..13))).unwrap_err();
    assert_eq!(
        panic.downcast_ref::<String>().map(String::as_str),
        Some(
            Error::OutOfRange {
                operation: packetpipe::Operation::Slice,
                start: 5,
                end: 13,
                len: 12
            }
            .to_string()
            .as_str()
        )
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
    let buffer = reader.last_read().unwrap().buffer;
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
    let buffer = reader.last_read().unwrap().buffer;
    let mut slots = [IoSlice::new(&[]); 4];
    let cursor = buffer.cursor();
    let n = cursor.chunks_vectored(&mut slots);
    assert_eq!(n, 3);
    let got: Vec<&[u8]> = slots[..n].iter().map(|s| &s[..]).collect();
    assert_eq!(got, [&b"hel"[..], b"lo wo", b"rld!"]);
    let mut two = [IoSlice::new(&[]); 2];
    assert_eq!(cursor.chunks_vectored(&mut two), 2);
    assert_eq!(&two[1][..], b"lo wo");
    let mut out = Vec::new();
    let written = std::io::Write::write_vectored(&mut out, &slots[..n]).unwrap();
    assert_eq!(&out[..written], &b"hello world!"[..written]);
    let middle = buffer.slice(4..10).cursor();
    let mut slots = [IoSlice::new(&[]); 4];
    let n = middle.chunks_vectored(&mut slots);
    let got: Vec<&[u8]> = slots[..n].iter().map(|s| &s[..]).collect();
    assert_eq!(got, [&b"o wo"[..], b"rl"]);
}
