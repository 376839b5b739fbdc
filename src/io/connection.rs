//! The duplex connection: one byte stream (a socket) in, two pipes out, one future that says how
//! it ended.
//!
//! System.IO.Pipelines' `IDuplexPipe` and Kestrel's socket transport: the application gets a
//! [`DuplexPipe`] (a reader of the bytes the peer sent, a writer of the bytes to send) and the
//! caller gets a [`Connection`], the future of the connection's end. The library never spawns.
//!
//! Two transports behind the same types (the `io` module docs say when to choose which):
//! inline (the default: the application's reader reads the socket and its flushes write it,
//! `transport.rs`) and pumped (two pump futures between the socket and the pipes, `pumped.rs`).
//! Both transports name this module and not the other way round: the inline transport's state
//! reaches [`Connection`] as an [`InlineState`].

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::pipe::{PipeOptions, PipeReader, PipeWriter};

/// The application's side of a duplex connection: read what the peer sent, write what to send.
///
/// Dropping both ends ends the connection: the writer's drop completes it (the stream's write
/// side is shut down after the last byte), the reader's drop stops reading the stream.
#[derive(Debug)]
pub struct DuplexPipe {
    /// Bytes received from the stream, in order; completes at the peer's end of stream.
    pub reader: PipeReader,
    /// Bytes to send; completing it shuts down the stream's write side after the last byte.
    pub writer: PipeWriter,
}

/// Default number of segments handed to one vectored write.
pub const DEFAULT_MAX_WRITE_SEGMENTS: usize = 16;

/// Upper bound on segments per vectored write (the `IoSlice` array lives on the stack; Linux's
/// `IOV_MAX` is 1024, but a write rarely takes more than a few dozen).
pub const MAX_WRITE_SEGMENTS: usize = 64;

/// Settings of a duplex connection: plain data, built with struct update syntax so that a
/// configuration keeps compiling when fields are added.
///
/// ```
/// use packetpipe::io::ConnectionOptions;
/// use packetpipe::PipeOptions;
///
/// let options = ConnectionOptions {
///     output: PipeOptions::default(),
///     max_write_segments: 32,
///     keep_blocks_idle: true,
///     ..Default::default()
/// };
/// assert!(!options.pumped);
/// ```
///
/// What each transport honours: the blocking connection (`io::blocking`) has the inline
/// transport only, so it rejects `pumped: true` (its `connection_with` panics, naming the
/// option); the io_uring driver receives into its provided-buffer ring, so the input pipe's
/// `min_segment_size` does not size its reads there (the ring's `buffer_size` does), and it
/// writes with its own submissions, so `pumped` does not apply either (see
/// [`DriverOptions::connection`](crate::io::uring::DriverOptions::connection)).
#[derive(Clone, Debug)]
pub struct ConnectionOptions {
    /// Options of the input pipe (stream -> application). Its minimum segment size is the size of
    /// each socket read; its pause threshold bounds what the pumped transport buffers for a slow
    /// application (the inline one reads only when the application asks for more). Default:
    /// [`PipeOptions::default()`].
    pub input: PipeOptions,
    /// Options of the output pipe (application -> stream): its pause threshold bounds what a
    /// socket that does not take the bytes leaves buffered before the application's flush waits.
    /// Default: [`PipeOptions::default()`].
    pub output: PipeOptions,
    /// Segments handed to one vectored write of the stream, 1 to [`MAX_WRITE_SEGMENTS`] (a value
    /// outside is clamped into that range). Default: [`DEFAULT_MAX_WRITE_SEGMENTS`] (16).
    pub max_write_segments: usize,
    /// The pumped transport instead of the inline one: two pump futures, run by the
    /// [`Connection`] future, move the bytes between the stream and the pipes, so the application
    /// may read and write from other threads or tasks than the one that runs the connection (a
    /// socket served on one thread and parsed on another). Async flavors only (`io::tokio`,
    /// `io::futures`); the blocking connection rejects it. Default: `false`.
    pub pumped: bool,
    /// Keep the connection's receive and send blocks while it waits for its peer (inline
    /// transport). By default an idle connection holds no pooled block: its reader gives the
    /// receive block back when it waits with nothing unconsumed, and its writer the send block,
    /// so a server with 10,000 idle connections holds no buffer memory for them. That costs a
    /// block rented and returned in each direction per wait: at one message per wait (a
    /// request/response connection whose peer waits for each reply) about 200 user instructions
    /// per message (an echo server of 68-byte messages: 3,168 against 2,961 kept, measured with
    /// callgrind), and a blocking connection reads through a per-thread scratch meanwhile (one
    /// more copy). Kept, an idle connection holds its two blocks, a segment each (4 KiB with the
    /// default options), and saves that per message. Default: `false`.
    pub keep_blocks_idle: bool,
}

impl Default for ConnectionOptions {
    /// Default pipes both ways, 16 segments per vectored write, the inline transport, no blocks
    /// kept while idle.
    fn default() -> ConnectionOptions {
        ConnectionOptions {
            input: PipeOptions::default(),
            output: PipeOptions::default(),
            max_write_segments: DEFAULT_MAX_WRITE_SEGMENTS,
            pumped: false,
            keep_blocks_idle: false,
        }
    }
}

/// Which part of the connection an error came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorOrigin {
    /// Reading the stream (a reset, say); the application's reader got it after the bytes before.
    Read,
    /// Writing or shutting down the stream; the application's writer got it on its next flush.
    Write,
    /// The application completed its reader with this error (a frame decoder's error, say).
    Input,
    /// The application completed its writer with this error; the stream's write side was shut
    /// down after the bytes before it.
    Output,
}

/// How a connection failed: the first error of either direction, where it came from, and at
/// which byte of its direction. The underlying [`io::Error`] is its
/// [`source()`](std::error::Error::source) (its text is not repeated in this error's `Display`);
/// `io::Error::from(e)` gives an I/O error of the same kind wrapping it.
#[derive(Debug)]
pub struct ConnectionError {
    origin: ErrorOrigin,
    position: u64,
    error: io::Error,
}

impl ConnectionError {
    pub(crate) fn new(origin: ErrorOrigin, position: u64, error: io::Error) -> ConnectionError {
        ConnectionError {
            origin,
            position,
            error,
        }
    }

    /// The error's kind (that of the stream's error, or of the application's).
    pub fn kind(&self) -> io::ErrorKind {
        self.error.kind()
    }

    /// Where it came from.
    pub fn origin(&self) -> ErrorOrigin {
        self.origin
    }

    /// For [`Read`](ErrorOrigin::Read) and [`Input`](ErrorOrigin::Input): the bytes received
    /// (read) or consumed by the application before it (for a decoder's error, the position of
    /// the frame it could not decode); for [`Write`](ErrorOrigin::Write) and
    /// [`Output`](ErrorOrigin::Output): the bytes written to the stream before it.
    pub fn position(&self) -> u64 {
        self.position
    }
}

impl std::fmt::Display for ConnectionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.origin {
            ErrorOrigin::Read => "reading the stream failed after",
            ErrorOrigin::Write => "writing the stream failed after",
            ErrorOrigin::Input => "the application ended its input with an error at",
            ErrorOrigin::Output => "the application ended its output with an error after",
        };
        let unit = match self.origin {
            ErrorOrigin::Read => "bytes received",
            ErrorOrigin::Input => "bytes consumed",
            ErrorOrigin::Write | ErrorOrigin::Output => "bytes written",
        };
        // The I/O error's own text is left to `source()`: printing both would say it twice in a
        // chain.
        write!(f, "{what} {} {unit}", self.position)
    }
}

impl std::error::Error for ConnectionError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl From<ConnectionError> for io::Error {
    fn from(e: ConnectionError) -> io::Error {
        io::Error::new(e.error.kind(), e)
    }
}

/// How a connection ended without an error: the `Ok` of a [`Connection`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionEnd {
    /// Whether the peer ended its stream (end of file): `false` when the application stopped
    /// reading first (dropped or completed its reader).
    pub peer_closed: bool,
    /// Bytes received from the stream.
    pub received: u64,
    /// Bytes written to the stream.
    pub sent: u64,
}

/// What the [`Connection`] future asks of the inline transport's shared state (`transport.rs`).
pub(crate) trait InlineState: Send + Sync {
    /// The connection future's poll: write what flushes left, shut down when the application's
    /// output ended, return once both directions have ended.
    fn poll_drive(&self, cx: &mut Context<'_>) -> Poll<Result<ConnectionEnd, ConnectionError>>;

    /// Write what flushes left, with `cx` woken by the stream: `Ready` once nothing is left
    /// (`closed`: once the output ended).
    fn poll_output(&self, cx: &mut Context<'_>, closed: bool) -> Poll<()>;

    /// The connection's future was dropped before the end: cut both directions.
    fn abort(&self);
}

/// The future of a duplex connection's end: `Ok(ConnectionEnd)` once both directions ended cleanly, or the
/// first error of either, with its origin and position ([`ConnectionError`]).
///
/// Inline transport (the default): the application's reader reads the stream and its flushes
/// write it; this future writes only what the stream did not take at once (and shuts down the
/// write side if a flush could not), so it costs nothing while the socket keeps up. Run it (spawn
/// it, or [`join`](super::join) it with the application, or [`block_on`](crate::block_on) it in blocking code):
/// bytes a full socket did not take are written by it. Pumped transport: it runs both pumps.
///
/// Cancel safety: dropping it before the end cuts the connection: each unfinished direction
/// completes with a `ConnectionAborted` error, so the application does not mistake the cut for a
/// clean end.
#[must_use = "futures do nothing unless polled"]
pub struct Connection {
    inner: Inner,
    /// Dropped early, the connection is cut (`false` when a frame writer holds it: its drop only
    /// stops driving the output).
    abort_on_drop: bool,
}

enum Inner {
    Inline(Arc<dyn InlineState>),
    #[cfg(any(feature = "tokio", feature = "futures-io"))]
    Pumped(Pin<Box<dyn Future<Output = Result<ConnectionEnd, ConnectionError>> + Send>>),
    Done,
}

impl Connection {
    pub(crate) fn inline(shared: Arc<dyn InlineState>) -> Connection {
        Connection {
            inner: Inner::Inline(shared),
            abort_on_drop: true,
        }
    }

    #[cfg(any(feature = "tokio", feature = "futures-io"))]
    pub(crate) fn pumped(
        future: impl Future<Output = Result<ConnectionEnd, ConnectionError>> + Send + 'static,
    ) -> Connection {
        Connection {
            inner: Inner::Pumped(Box::pin(future)),
            abort_on_drop: true,
        }
    }

    /// Held by a frame writer, which drives the output: dropping it does not cut the input.
    pub(crate) fn held_by_writer(mut self) -> Connection {
        self.abort_on_drop = false;
        self
    }

    /// `Ready` once every byte the application flushed is written to the stream (or the output
    /// ended); the pumped transport cannot tell and is always `Ready`.
    pub(crate) fn poll_flushed(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        match &self.inner {
            Inner::Inline(shared) => shared.poll_output(cx, false),
            _ => Poll::Ready(()),
        }
    }

    /// `Ready` once the output ended: every byte written and the write side shut down (or a
    /// write failed).
    pub(crate) fn poll_output_closed(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        match &self.inner {
            Inner::Inline(shared) => shared.poll_output(cx, true),
            _ => Poll::Ready(()),
        }
    }
}

impl Future for Connection {
    type Output = Result<ConnectionEnd, ConnectionError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let result = match &mut self.inner {
            Inner::Inline(shared) => std::task::ready!(shared.poll_drive(cx)),
            #[cfg(any(feature = "tokio", feature = "futures-io"))]
            Inner::Pumped(future) => std::task::ready!(future.as_mut().poll(cx)),
            Inner::Done => panic!("Connection polled after it returned"),
        };
        self.inner = Inner::Done;
        Poll::Ready(result)
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        if let Inner::Inline(shared) = &self.inner {
            if self.abort_on_drop {
                shared.abort();
            }
        }
    }
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let transport = match &self.inner {
            Inner::Inline(_) => "inline",
            #[cfg(any(feature = "tokio", feature = "futures-io"))]
            Inner::Pumped(_) => "pumped",
            Inner::Done => "ended",
        };
        f.debug_struct("Connection")
            .field("transport", &transport)
            .finish()
    }
}
