//! The pipe's contract (what the `pipe` module and the two ends document: flushing and reading,
//! backpressure, completion, cancellation, misuse), one test per behaviour, each named after the
//! behaviour it checks.
//!
//! Waiting is observed without timing: a future (or a `poll_*` method) is polled by hand with a
//! waker that counts its wakes, so "is paused", "waits" and "wakes nobody" are exact checks. Tests
//! that use threads or tasks bound every wait with a generous timeout, only so that a bug fails the
//! test instead of hanging it; no sleep is ever a correctness condition.

use std::io::IoSlice;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::thread;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use packetpipe::pipe::{
    pipe, pipe_with, FlushResult, PipeCanceler, PipeOptions, PipeReader, PipeWriter, ReadBuffer,
    DEFAULT_COPY_THRESHOLD,
};
use packetpipe::{ByteSegments, Error, Packet, Pool};

#[path = "../kit/mod.rs"]
mod kit;
use kit::wake::{counting_waker, poll_once};

/// Safety net for cross-thread tests: fail instead of hanging.
const TIMEOUT: Duration = Duration::from_secs(20);

// ------------------------------------------------------------------------------------------------
// Helpers

/// Poll a flush once and demand that it completes now.
#[track_caller]
fn flush_now(writer: &mut PipeWriter) -> FlushResult {
    let (_, waker) = counting_waker();
    match writer.poll_flush_pipe(&mut Context::from_waker(&waker)) {
        Poll::Ready(result) => result.expect("flush failed"),
        Poll::Pending => panic!("flush paused where it must return at once"),
    }
}

/// Whether a flush polled with `waker` is paused.
#[track_caller]
fn flush_is_paused(writer: &mut PipeWriter, waker: &Waker) -> bool {
    match writer.poll_flush_pipe(&mut Context::from_waker(waker)) {
        Poll::Ready(result) => {
            result.expect("flush failed");
            false
        }
        Poll::Pending => true,
    }
}

/// The bytes a read would return now (`try_read` must find some).
#[track_caller]
fn read_now(reader: &mut PipeReader) -> Vec<u8> {
    reader
        .try_read()
        .expect("try_read failed")
        .expect("a read must not wait here")
        .buffer
        .to_vec()
}

/// Length of what a read returns now.
#[track_caller]
fn read_len_now(reader: &mut PipeReader) -> usize {
    reader
        .try_read()
        .expect("try_read failed")
        .expect("a read must not wait here")
        .buffer
        .len()
}

fn chunks_of(buffer: ReadBuffer<'_>) -> Vec<Vec<u8>> {
    buffer.segments().map(<[u8]>::to_vec).collect()
}

fn pooled(pool: &Pool, data: &[u8]) -> Packet {
    pool.copy_from_slice(data).unwrap()
}

/// Whether `packet`'s bytes are held in the value itself: a clone of such a packet is a copy,
/// which owns its bytes alone (`get_mut` is `Some`), where a clone of any other shares them.
fn is_inline(packet: &Packet) -> bool {
    packet.clone().get_mut().is_some()
}

/// Whether `packet` is the only handle to its pooled block: not inline, and `get_mut` finds no
/// other handle (a packet over `Bytes` or static bytes never has one).
fn owns_its_block(packet: &mut Packet) -> bool {
    !is_inline(packet) && packet.get_mut().is_some()
}

/// A pipe over its own pool, so that pool statistics belong to this test alone.
fn pipe_on(pool: &Pool, options: PipeOptions) -> (PipeWriter, PipeReader) {
    pipe_with(PipeOptions {
        pool: Some(pool.clone()),
        ..options
    })
}

#[track_caller]
fn assert_peer_error(error: &Error, side: &str, message: &str) {
    match error {
        Error::Peer { side: s, source } => {
            assert_eq!(s.to_string(), side, "{error}");
            assert_eq!(source.to_string(), message, "{error}");
        }
        other => panic!("expected a peer error from the {side}, got {other:?}"),
    }
    // The message says what happened; the peer's own text is the source, not repeated.
    assert_eq!(
        error.to_string(),
        format!("the {side} completed with an error")
    );
    let source = std::error::Error::source(error).expect("a peer error has a source");
    assert_eq!(source.to_string(), message);
}

fn boom(message: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::ConnectionReset, message.to_owned())
}

mod blocking;
mod cancellation;
mod construction;
mod misuse;
mod read_buffer;
mod read_coalescing;
mod reader_completion;
mod reading;
mod take_frame;
mod writer_completion;
mod writer_flush;
mod writer_staging;
