//! `PipeReader::read_until` and its blocking form: the pattern found wherever the segments cut it,
//! one wake per flush of new bytes, the limit as an error naming its numbers, the end, a cancel,
//! a writer's error, backpressure lifted while it waits, and cancel safety (the future dropped at
//! every wait).

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll};

use packetpipe::pipe::{pipe, pipe_with, PipeOptions};
use packetpipe::{ByteSegments, Error};

mod kit;

use kit::wake::counting_waker;

#[test]
fn the_pattern_is_found_wherever_the_pieces_cut_it() {
    let text = b"GET / HTTP/1.1\r\nHost: a\r\n\r\nbody";
    let end = text.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    // Every way of cutting the text in three pieces, each piece appended (its own segment) and
    // flushed, with a poll of the same future after each.
    for a in 0..=text.len() {
        for b in a..=text.len() {
            let (mut writer, mut reader) = pipe();
            let (_, waker) = counting_waker();
            let mut cx = Context::from_waker(&waker);
            let mut until = pin!(reader.read_until(b"\r\n\r\n", 1024));
            let mut result = None;
            for piece in [&text[..a], &text[a..b], &text[b..]] {
                if !piece.is_empty() {
                    writer.append(piece.to_vec()).unwrap();
                    writer.flush_blocking().unwrap();
                }
                if let Poll::Ready(r) = until.as_mut().poll(&mut cx) {
                    result = Some(r.unwrap());
                    break;
                }
            }
            let until = result.unwrap_or_else(|| panic!("not found with cuts {a}, {b}"));
            assert_eq!(until.end, Some(end), "cuts {a}, {b}");
            assert_eq!(until.found, Some(end - 4));
            assert_eq!(until.buffer.slice(..end).to_vec(), &text[..end]);
            assert!(!until.is_completed && !until.is_canceled);
        }
    }
}

/// Bytes that trickle in one per flush: the future waits after each, is woken once per flush,
/// and the examined point follows the search (the writer, with a tiny pause threshold, is never
/// held back by the bytes searched).
#[test]
fn trickled_bytes_wake_it_once_each_and_do_not_hold_the_writer_back() {
    let (mut writer, mut reader) = pipe_with(PipeOptions {
        pause_threshold: 8,
        resume_threshold: 4,
        ..Default::default()
    });
    let (wakes, waker) = counting_waker();
    let mut cx = Context::from_waker(&waker);
    let mut text = vec![b'x'; 300];
    text.extend_from_slice(b"\r\n");
    let mut until = pin!(reader.read_until(b"\r\n", 4096));
    assert!(until.as_mut().poll(&mut cx).is_pending());
    for (i, byte) in text.iter().enumerate() {
        writer.write_slice(&[*byte]).unwrap();
        // Never paused: the bytes before this one were all examined by the search.
        assert!(
            pin!(writer.flush_pipe()).poll(&mut cx).is_ready(),
            "the flush of byte {i} waited"
        );
        assert_eq!(wakes.get(), i + 1, "one wake per flush");
        match until.as_mut().poll(&mut cx) {
            Poll::Pending => assert!(i < text.len() - 1),
            Poll::Ready(result) => {
                assert_eq!(i, text.len() - 1);
                assert_eq!(result.unwrap().found, Some(300));
            }
        }
    }
}

#[test]
fn the_limit_without_the_pattern_is_an_error_with_its_numbers() {
    let (mut writer, mut reader) = pipe();
    writer.write_slice(&[b'a'; 40]).unwrap();
    writer.flush_blocking().unwrap();
    let (_, waker) = counting_waker();
    let mut cx = Context::from_waker(&waker);
    {
        let mut until = pin!(reader.read_until(b"\r\n\r\n", 64));
        assert!(until.as_mut().poll(&mut cx).is_pending());
        writer.write_slice(&[b'a'; 30]).unwrap();
        writer.flush_blocking().unwrap();
        match until.as_mut().poll(&mut cx) {
            Poll::Ready(Err(e)) => {
                assert_eq!(
                    e,
                    Error::PatternNotFound {
                        pattern_len: 4,
                        max: 64,
                        len: 70
                    }
                );
                assert_eq!(
                    e.to_string(),
                    "no 4-byte pattern within the first 64 bytes (70 bytes in the pipe)"
                );
                assert_eq!(
                    std::io::Error::from(e).kind(),
                    std::io::ErrorKind::InvalidData
                );
            }
            other => panic!("{other:?}"),
        }
    }
    // A pattern that would end one byte past the limit does not count.
    let (mut writer, mut reader) = pipe();
    writer.write_slice(b"abc\r\n").unwrap();
    writer.flush_blocking().unwrap();
    assert!(matches!(
        packetpipe::block_on(reader.read_until(b"\r\n", 4)),
        Err(Error::PatternNotFound { max: 4, len: 5, .. })
    ));
    // Nothing was consumed.
    assert_eq!(
        packetpipe::block_on(reader.read_at_least(5))
            .unwrap()
            .buffer
            .to_vec(),
        b"abc\r\n"
    );
    // One that ends exactly at it does.
    assert_eq!(
        packetpipe::block_on(reader.read_until(b"\r\n", 5))
            .unwrap()
            .end,
        Some(5)
    );
}

#[test]
fn the_end_or_a_cancel_before_the_pattern_returns_what_is_there() {
    let (mut writer, mut reader) = pipe();
    writer.write_slice(b"partial head\r\n").unwrap();
    writer.complete();
    let until = packetpipe::block_on(reader.read_until(b"\r\n\r\n", 1024)).unwrap();
    assert_eq!((until.found, until.end), (None, None));
    assert!(until.is_completed);
    assert_eq!(until.buffer.to_vec(), b"partial head\r\n");

    let (mut writer, mut reader) = pipe();
    writer.write_slice(b"a").unwrap();
    writer.flush_blocking().unwrap();
    let canceler = reader.canceler();
    let (_, waker) = counting_waker();
    let mut cx = Context::from_waker(&waker);
    {
        let mut until = pin!(reader.read_until(b"\n", 1024));
        assert!(until.as_mut().poll(&mut cx).is_pending());
        canceler.cancel();
        match until.as_mut().poll(&mut cx) {
            Poll::Ready(Ok(until)) => {
                assert!(until.is_canceled && until.found.is_none());
                assert_eq!(until.buffer.to_vec(), b"a");
            }
            other => panic!("{other:?}"),
        }
    }
    // The next one goes on as usual.
    writer.write_slice(b"b\n").unwrap();
    writer.flush_blocking().unwrap();
    assert_eq!(
        packetpipe::block_on(reader.read_until(b"\n", 1024))
            .unwrap()
            .found,
        Some(2)
    );
}

#[test]
fn the_writers_error_comes_after_the_bytes_before_it() {
    let (mut writer, mut reader) = pipe();
    writer.write_slice(b"line\n").unwrap();
    writer.complete_with_error(std::io::Error::other("peer reset"));
    let until = packetpipe::block_on(reader.read_until(b"\n", 1024)).unwrap();
    assert_eq!(until.found, Some(4));
    reader.advance_to(5, 5).unwrap();
    let e = packetpipe::block_on(reader.read_until(b"\n", 1024)).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Peer {
                side: packetpipe::Side::Writer,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn an_empty_pattern_is_found_at_once() {
    let (_writer, mut reader) = pipe();
    let until = packetpipe::block_on(reader.read_until(b"", 0)).unwrap();
    assert_eq!((until.found, until.end), (Some(0), Some(0)));
}

/// Dropped at every wait, with bytes arriving between: each new `read_until` finds everything
/// (nothing consumed, nothing skipped), including bytes examined by a dropped one.
#[test]
fn dropped_at_every_wait_it_loses_and_skips_nothing() {
    let (mut writer, mut reader) = pipe();
    let (_, waker) = counting_waker();
    let mut cx = Context::from_waker(&waker);
    let mut text = Vec::new();
    for i in 0..2000u32 {
        text.extend_from_slice(format!("{i:04}").as_bytes());
    }
    text.extend_from_slice(b"\r\n");
    for piece in text.chunks(3) {
        writer.write_slice(piece).unwrap();
        writer.flush_blocking().unwrap();
        let mut until = pin!(reader.read_until(b"\r\n", 1 << 20));
        if let Poll::Ready(result) = until.as_mut().poll(&mut cx) {
            let until = result.unwrap();
            assert_eq!(until.found, Some(text.len() - 2));
            assert_eq!(until.buffer.to_vec(), text);
            return;
        }
        // Dropped here, pending.
    }
    panic!("the pattern was never found");
}

#[test]
fn blocking_form_across_threads() {
    let (mut writer, mut reader) = pipe();
    let producer = std::thread::spawn(move || {
        for piece in [&b"HEAD"[..], b"ER\r", b"\n\r", b"\nrest"] {
            writer.write_slice(piece).unwrap();
            writer.flush_blocking().unwrap();
            std::thread::yield_now();
        }
    });
    let until = packetpipe::block_on(reader.read_until(b"\r\n\r\n", 1024)).unwrap();
    assert_eq!(until.end, Some(10));
    assert_eq!(until.buffer.slice(..6).to_vec(), b"HEADER");
    let head = until.buffer.slice(..until.end.unwrap());
    assert_eq!(head.find(b"\r\n"), Some(6));
    reader.advance_to(10, 10).unwrap();
    producer.join().unwrap();
    // Everything was flushed before the writer went (completing the pipe).
    let rest = reader.read_blocking().unwrap();
    assert_eq!(rest.buffer.to_vec(), b"rest");
    assert!(rest.is_completed);
}
