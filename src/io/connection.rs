//! The duplex connection: one byte stream (a socket) in, two pipes out, one future to run.
//!
//! System.IO.Pipelines' `IDuplexPipe` and Kestrel's socket transport: the application gets a
//! [`DuplexPipe`] (a reader of the bytes the peer sent, a writer of the bytes to send) and the
//! caller gets one future that runs both pumps over the stream. The library never spawns: the
//! caller spawns or joins the future on whatever executor it uses.
//!
//! How the ends propagate is in the `io` module docs (public).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::drain::{DrainState, Sink, DEFAULT_MAX_WRITE_SEGMENTS};
use super::fill::{FillState, Source};
use crate::error::SharedError;
use crate::pipe::{pipe_with, PipeOptions, PipeReader, PipeWriter};

/// The application's side of a duplex connection: read what the peer sent, write what to send.
///
/// Dropping both ends ends the connection: the writer's drop completes it (the stream's write
/// side is shut down after the last byte), the reader's drop stops the reading pump.
#[derive(Debug)]
pub struct DuplexPipe {
    /// Bytes received from the stream, in order; completes at the peer's end of stream.
    pub reader: PipeReader,
    /// Bytes to send; completing it shuts down the stream's write side after the last byte.
    pub writer: PipeWriter,
}

/// Settings of a duplex connection.
///
/// ```
/// use packetpipe::io::ConnectionOptions;
/// use packetpipe::pipe::PipeOptions;
///
/// let options = ConnectionOptions::new()
///     .input(PipeOptions::new().pause_threshold(1 << 20).min_segment_size(16 * 1024))
///     .output(PipeOptions::new().pause_threshold(256 * 1024))
///     .max_write_segments(32);
/// # drop(options);
/// ```
#[derive(Clone, Debug)]
pub struct ConnectionOptions {
    input: PipeOptions,
    output: PipeOptions,
    max_write_segments: usize,
}

impl Default for ConnectionOptions {
    fn default() -> ConnectionOptions {
        ConnectionOptions {
            input: PipeOptions::new(),
            output: PipeOptions::new(),
            max_write_segments: DEFAULT_MAX_WRITE_SEGMENTS,
        }
    }
}

impl ConnectionOptions {
    /// Default pipes both ways ([`PipeOptions::new`]) and 16 segments per vectored write.
    pub fn new() -> ConnectionOptions {
        ConnectionOptions::default()
    }

    /// Options of the input pipe (stream -> application). Its minimum segment size is the size of
    /// each socket read; its pause threshold bounds what is buffered for a slow application.
    pub fn input(mut self, options: PipeOptions) -> Self {
        self.input = options;
        self
    }

    /// Options of the output pipe (application -> stream).
    pub fn output(mut self, options: PipeOptions) -> Self {
        self.output = options;
        self
    }

    /// Segments handed to one vectored write of the stream (1 to
    /// [`MAX_WRITE_SEGMENTS`](super::MAX_WRITE_SEGMENTS)).
    pub fn max_write_segments(mut self, segments: usize) -> Self {
        self.max_write_segments = segments;
        self
    }
}

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
    /// The first error of either direction.
    error: Option<io::Error>,
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
    ) -> Poll<io::Result<()>> {
        if !self.fill.is_finished() {
            if let Poll::Ready(Err(e)) = self.fill.poll(cx, &mut self.input, stream) {
                self.error.get_or_insert(e);
            }
        }
        if !self.output_done {
            if !self.drain.is_finished() {
                if let Poll::Ready(Err(e)) = self.drain.poll(cx, &mut self.output, stream) {
                    // Kept for the future's result; the write side is still shut down below, so
                    // the peer sees the end of the output (after the bytes before the error)
                    // rather than waiting for more. (After a socket write error the shutdown
                    // fails too; its error is not the first, so it is dropped.)
                    self.error.get_or_insert(e);
                }
            }
            if self.drain.is_finished() && !self.output_done {
                if let Poll::Ready(result) = stream.poll_shutdown(cx) {
                    self.output_done = true;
                    // A peer that already closed the connection leaves nothing to shut down.
                    if let Err(e) = result.or_else(ignore_not_connected) {
                        self.error.get_or_insert(e);
                    }
                }
            }
        }
        if self.fill.is_finished() && self.output_done {
            return Poll::Ready(self.error.take().map_or(Ok(()), Err));
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
    /// Future of a duplex connection over one flavor's I/O traits (`io::tokio::Connection<S>`,
    /// `io::futures::Connection<S>`): reads the stream into the application's reader and writes
    /// the application's writer to the stream, until both directions have ended; then returns the
    /// first error of either (or `Ok`) and drops the stream.
    ///
    /// Cancel safety: dropping it ends the connection (it owns the stream): bytes not yet
    /// delivered are lost, and each unfinished direction completes with a `ConnectionAborted`
    /// error so the application does not mistake the cut for a clean end.
    #[must_use = "futures do nothing unless polled"]
    pub struct Connection<S, Flavor> {
        #[pin]
        stream: S,
        state: ConnectionState,
        flavor: std::marker::PhantomData<Flavor>,
    }

    impl<S, Flavor> PinnedDrop for Connection<S, Flavor> {
        fn drop(this: Pin<&mut Self>) {
            this.project().state.abort();
        }
    }
}

impl<S, Flavor> Connection<S, Flavor> {
    /// The application's ends and the connection future over `stream`.
    pub(crate) fn new(stream: S, options: ConnectionOptions) -> (DuplexPipe, Self) {
        let (app, state) = ConnectionState::new(options);
        let connection = Connection {
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

impl<S, Flavor> std::fmt::Debug for Connection<S, Flavor> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
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
