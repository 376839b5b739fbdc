#![cfg(packetpipe_loom)]
//! The inline connection's output: the application's flushes write the stream themselves while
//! nothing is queued, and only what the stream does not take is queued for the connection's
//! future, which may run on another thread. Every byte must reach the peer once, in order, and
//! a queued byte must never wait for a wake nobody sends.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use futures_io::{AsyncRead, AsyncWrite};
use loom::sync::{Mutex, Notify};
use loom::thread;
use packetpipe::io::ConnectionOptions;
use packetpipe::pipe::PipeOptions;
use packetpipe_loom_tests::{block_on, Hold};

/// The peer's side of a socket whose send buffer holds `room` bytes: a write takes what fits
/// and is refused (`Pending`, its waker kept, as a socket's readiness) when nothing does; the
/// peer makes room as it reads, and wakes the last refused writer.
struct Wire {
    state: Mutex<WireState>,
    /// Signalled at each write and at the shutdown (the peer reads then).
    arrived: Notify,
}

struct WireState {
    sent: Vec<u8>,
    room: usize,
    shut: bool,
    refused: Option<Waker>,
}

impl Wire {
    fn new(room: usize) -> Arc<Wire> {
        Arc::new(Wire {
            state: Mutex::new(WireState {
                sent: Vec::new(),
                room,
                shut: false,
                refused: None,
            }),
            arrived: Notify::new(),
        })
    }

    /// Read everything sent so far (making room for as much), waking a refused writer; whether
    /// the write side was shut down.
    fn read(&self, into: &mut Vec<u8>) -> bool {
        let (refused, shut) = {
            let mut state = self.state.lock().unwrap();
            let taken = std::mem::take(&mut state.sent);
            state.room += taken.len();
            into.extend_from_slice(&taken);
            let refused = if taken.is_empty() {
                None
            } else {
                state.refused.take()
            };
            (refused, state.shut)
        };
        if let Some(waker) = refused {
            waker.wake();
        }
        shut
    }
}

/// The application's stream: the write half of [`Wire`]; nothing to read (the peer sends
/// nothing and the application reads nothing).
struct Stream(Arc<Wire>);

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        _buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(Ok(0))
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let n = {
            let mut state = self.0.state.lock().unwrap();
            if state.room == 0 {
                state.refused = Some(cx.waker().clone());
                return Poll::Pending;
            }
            let n = state.room.min(buf.len());
            state.sent.extend_from_slice(&buf[..n]);
            state.room -= n;
            n
        };
        self.0.arrived.notify();
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_close(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.0.state.lock().unwrap().shut = true;
        self.0.arrived.notify();
        Poll::Ready(Ok(()))
    }
}

/// The application flushes `abc` into a socket with room for 2 bytes (`c` is queued for the
/// connection's future), reads what the peer got (making room), flushes `de`, and completes its
/// writer only once the peer has all five bytes (a request answered before the connection
/// closes): so a queued byte that nobody is woken to write is a loom deadlock, not a late write
/// at the shutdown. The connection's future runs on its own thread; the application and the
/// peer on the model's.
fn flushes_and_the_connection_future_share_the_output_model() {
    loom::model(|| {
        let wire = Wire::new(2);
        let pipe_options = PipeOptions {
            min_segment_size: 8,
            ..Default::default()
        };
        let (app, connection) = packetpipe::io::futures::connection_with(
            Stream(wire.clone()),
            ConnectionOptions {
                input: pipe_options.clone(),
                output: pipe_options,
                ..Default::default()
            },
        );
        let (reader, mut writer) = (Hold::new(app.reader), Hold::new(app.writer));
        let connection = Hold::new(connection);
        drop(reader.into_inner()); // the application reads nothing: the input ends
        let driver = thread::spawn(move || block_on(connection.into_inner()));
        let mut got = Vec::new();
        writer.write_slice(b"abc").unwrap();
        block_on(writer.flush_pipe()).unwrap();
        wire.read(&mut got);
        writer.write_slice(b"de").unwrap();
        block_on(writer.flush_pipe()).unwrap();
        loop {
            wire.read(&mut got);
            if got.len() >= 5 {
                break;
            }
            wire.arrived.wait();
        }
        writer.into_inner().complete();
        loop {
            if wire.read(&mut got) {
                break;
            }
            wire.arrived.wait();
        }
        assert_eq!(got, b"abcde");
        let end = driver.join().unwrap().expect("the connection ends cleanly");
        assert_eq!(end.sent, 5);
        assert!(!end.peer_closed, "{end:?}");
    });
}

#[test]
#[cfg(not(packetpipe_mutant))]
fn flushes_and_the_connection_future_share_the_output() {
    flushes_and_the_connection_future_share_the_output_model();
}

/// Mutant `write_ahead_of_queue`: a flush writes its bytes straight to the stream although
/// bytes published before them are still queued: `de` can reach the peer before `c`.
#[test]
#[cfg(packetpipe_mutant)]
#[should_panic(expected = "left == right")]
fn mutant_write_ahead_of_queue() {
    flushes_and_the_connection_future_share_the_output_model();
}

/// Mutant `queued_no_wake`: a flush that leaves bytes queued does not wake the connection's
/// future: nobody writes them, and the application waits for an answer forever.
#[test]
#[cfg(packetpipe_mutant)]
#[should_panic(expected = "deadlock")]
fn mutant_queued_no_wake() {
    flushes_and_the_connection_future_share_the_output_model();
}
