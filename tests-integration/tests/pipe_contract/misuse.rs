//! Misuse: the right error, naming the numbers, and the pipe intact afterwards.

use super::*;

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
            .buffer
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
    assert_eq!(
        consume_all(&mut reader).unwrap_err(),
        Error::AdvanceWithoutRead
    );
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
        reader.read_blocking().map(|r| r.buffer.len()).unwrap_err(),
        Error::ReaderCompleted
    );
    assert_eq!(
        packetpipe::block_on(reader.read_at_least(1))
            .map(|r| r.buffer.len())
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
    assert!(writer.flush_blocking().unwrap().is_completed);
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
        writer.spare_mut(1).map(|s| s.len()).unwrap_err(),
        Error::WriterCompleted
    );
    assert_eq!(writer.commit(0).unwrap_err(), Error::WriterCompleted);
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
        result.buffer.to_vec(),
        b"kept",
        "nothing added, nothing lost"
    );
    assert!(result.is_completed);
}

#[test]
fn writer_advance_past_buffer_mut_space_is_an_error_and_leaves_the_pipe_intact() {
    let (mut writer, mut reader) = pipe();
    let space = writer.spare_mut(10).unwrap();
    let available = space.len();
    space[..5].copy_from_slice(b"hello");
    let e = writer.commit(available + 1).unwrap_err();
    assert_eq!(
        e,
        Error::CommitPastSpare {
            requested: available + 1,
            available
        }
    );
    assert_eq!(
        e.to_string(),
        format!(
            "commit of {} bytes is beyond the {available} bytes spare_mut handed out",
            available + 1
        )
    );
    assert_eq!(
        writer.unflushed_len(),
        0,
        "nothing committed by the failed advance"
    );
    writer.commit(5).unwrap();
    // The space left after a partial advance is what counts now.
    let e = writer.commit(available - 4).unwrap_err();
    assert_eq!(
        e,
        Error::CommitPastSpare {
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
    let e = writer.commit(1).unwrap_err();
    assert_eq!(
        e,
        Error::CommitPastSpare {
            requested: 1,
            available: 0
        }
    );
    writer.commit(0).unwrap();
    // After the whole space was committed, there is no buffer left to advance in.
    let space = writer.spare_mut(1).unwrap();
    let n = space.len();
    space.fill(b'z');
    writer.commit(n).unwrap();
    assert_eq!(
        writer.commit(1).unwrap_err(),
        Error::CommitPastSpare {
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
    let e = writer.commit(5).unwrap_err();
    assert_eq!(
        e,
        Error::CommitPastSpare {
            requested: 5,
            available: 0
        }
    );
    flush_now(&mut writer);
    assert_eq!(read_now(&mut reader), b"abc");
}

/// Consume the whole buffer of the last read: `advance_to(len, len)`.
fn consume_all(reader: &mut PipeReader) -> Result<(), Error> {
    let len = reader.last_read().map_or(0, |r| r.buffer.len());
    reader.advance_to(len, len)
}
