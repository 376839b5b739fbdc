//! The pumped transport: two pump futures, the fill and the drain, run over one stream by one
//! future, with the pipes' cross-thread path between them and the application. For a socket
//! served on one thread and parsed on another (`ConnectionOptions::pumped`).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::connection::{
    ConnectionEnd, ConnectionError, ConnectionOptions, DuplexPipe, ErrorOrigin,
};
use super::drain::{DrainState, Sink};
use super::fill::{FillState, Source};
use crate::error::SharedError;
use crate::pipe::{pipe_with, PipeReader, PipeWriter};

/// A stream the connection runs over: one flavor's read, vectored write, flush and shutdown.
pub(crate) trait Duplex: Source + Sink {
    fn poll_shutdown(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
}

/// The pumps' ends of the two pipes and the connection's progress.
#[derive(Debug)]
pub(crate) struct ConnectionState {
    /// Writes what the stream delivers (the application reads it).
    input: PipeWriter,
    /// Reads what the application writes (the stream gets it).
    output: PipeReader,
    fill: FillState,
    drain: DrainState,
    /// The drain finished cleanly and the stream's write side is shut down (or the drain failed).
    output_done: bool,
    /// The first error of either direction, and which.
    error: Option<(ErrorOrigin, io::Error)>,
}

impl ConnectionState {
    /// Both pipes: the application's ends, and the state holding the pumps' ends.
    pub(crate) fn new(options: ConnectionOptions) -> (DuplexPipe, ConnectionState) {
        let (input, reader) = pipe_with(options.input);
        let (writer, output) = pipe_with(options.output);
        let state = ConnectionState {
            input,
            output,
            fill: FillState::new(true),
            drain: DrainState::new(options.max_write_segments),
            output_done: false,
            error: None,
        };
        (DuplexPipe { reader, writer }, state)
    }

    /// Run both directions until both have ended; the first error, if any.
    pub(crate) fn poll(
        &mut self,
        cx: &mut Context<'_>,
        stream: &mut impl Duplex,
    ) -> Poll<Result<ConnectionEnd, ConnectionError>> {
        if !self.fill.is_finished() {
            if let Poll::Ready(Err(e)) = self.fill.poll(cx, &mut self.input, stream) {
                self.error.get_or_insert((ErrorOrigin::Read, e));
            }
        }
        if !self.output_done {
            if !self.drain.is_finished() {
                if let Poll::Ready(Err(e)) = self.drain.poll(cx, &mut self.output, stream) {
                    // Kept for the future's result; the write side is still shut down below, so
                    // the peer sees the end of the output (after the bytes before the error)
                    // rather than waiting for more. (After a socket write error the shutdown
                    // fails too; its error is not the first, so it is dropped.)
                    self.error.get_or_insert((ErrorOrigin::Write, e));
                }
            }
            if self.drain.is_finished() && !self.output_done {
                if let Poll::Ready(result) = stream.poll_shutdown(cx) {
                    self.output_done = true;
                    // A peer that already closed the connection leaves nothing to shut down.
                    if let Err(e) = result.or_else(ignore_not_connected) {
                        self.error.get_or_insert((ErrorOrigin::Write, e));
                    }
                }
            }
        }
        if self.fill.is_finished() && self.output_done {
            let (received, sent) = (self.fill.total(), self.drain.total());
            return Poll::Ready(match self.error.take() {
                None => Ok(ConnectionEnd {
                    peer_closed: self.input.is_writer_completed(),
                    received,
                    sent,
                }),
                Some((origin, e)) => {
                    let position = if origin == ErrorOrigin::Read {
                        received
                    } else {
                        sent
                    };
                    Err(ConnectionError::new(origin, position, e))
                }
            });
        }
        Poll::Pending
    }

    /// The connection future is dropped: the application must not mistake the cut-off streams for
    /// clean ends, so each unfinished direction completes with `ConnectionAborted`.
    pub(crate) fn abort(&mut self) {
        if self.fill.is_finished() && self.output_done {
            return;
        }
        let aborted = SharedError::new(io::Error::new(
            io::ErrorKind::ConnectionAborted,
            "the connection future was dropped before the stream ended",
        ));
        if !self.fill.is_finished() {
            self.input.complete_with_shared(aborted.clone());
        }
        if !self.output_done {
            self.output.complete_inner(Some(aborted));
        }
    }
}

pin_project_lite::pin_project! {
    /// The pumps over one flavor's I/O traits: reads the stream into the application's reader
    /// and writes the application's writer to the stream, until both directions have ended; then
    /// returns the first error of either (or `Ok`) and drops the stream. Dropped before that, each
    /// unfinished direction completes with a `ConnectionAborted` error.
    #[must_use = "futures do nothing unless polled"]
    pub(crate) struct Pumped<S, Flavor> {
        #[pin]
        stream: S,
        state: ConnectionState,
        flavor: std::marker::PhantomData<Flavor>,
    }

    impl<S, Flavor> PinnedDrop for Pumped<S, Flavor> {
        fn drop(this: Pin<&mut Self>) {
            this.project().state.abort();
        }
    }
}

impl<S, Flavor> Pumped<S, Flavor> {
    /// The application's ends and the connection future over `stream`.
    pub(crate) fn new(stream: S, options: ConnectionOptions) -> (DuplexPipe, Self) {
        let (app, state) = ConnectionState::new(options);
        let connection = Pumped {
            stream,
            state,
            flavor: std::marker::PhantomData,
        };
        (app, connection)
    }

    /// The connection's state and stream, for one flavor's `poll`.
    pub(crate) fn parts(self: Pin<&mut Self>) -> (&mut ConnectionState, Pin<&mut S>) {
        let this = self.project();
        (this.state, this.stream)
    }
}

impl<S, Flavor> std::fmt::Debug for Pumped<S, Flavor> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pumped")
            .field("state", &self.state)
            .finish()
    }
}

fn ignore_not_connected(e: io::Error) -> io::Result<()> {
    if e.kind() == io::ErrorKind::NotConnected {
        Ok(())
    } else {
        Err(e)
    }
}
