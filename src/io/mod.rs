//! Between a socket and a parser: the pipe's ends as standard I/O types, and duplex connections
//! over one stream.
//!
//! | what | always | feature `tokio` | feature `futures-io` |
//! |---|---|---|---|
//! | [`PipeReader`] as a byte stream | `std::io::{Read, BufRead}` | `AsyncRead`, `AsyncBufRead` | `AsyncRead`, `AsyncBufRead` |
//! | [`PipeWriter`] as a byte sink | `std::io::Write`, [`bytes::BufMut`] | `AsyncWrite` | `AsyncWrite` |
//! | duplex connection | [`blocking::connection`] | [`tokio::connection`] | [`futures::connection`] |
//! | a connection and its application in one task | [`join`] | | |
//!
//! A socket attaches through `connection(stream)` (or [`Framed`](crate::frame::Framed), which
//! wraps one). A one-way source or sink (a file, a child process's pipe) needs no pump of its
//! own: the pipe's ends are its I/O objects. Into the pipe, tokio's `source.read_buf(&mut
//! writer)` reads straight into the writer's pooled block (the writer is a `BufMut`; no
//! intermediate buffer), then `writer.flush()`; `std::io::copy(&mut source, &mut writer)` and
//! `tokio::io::copy` work too, with one copy through their buffer. Out of it,
//! `tokio::io::copy_buf(&mut reader, &mut sink)` writes each segment where it lies. The pumps
//! that move bytes between a socket and the pipes (vectored writes of up to
//! [`MAX_WRITE_SEGMENTS`] segments, reads into pooled blocks) run inside the pumped transport.
//!
//! With feature `io-uring` (Linux), [`uring::Driver`] serves many TCP connections on one ring:
//! the kernel receives straight into pooled blocks from a provided-buffer ring, and each loop
//! turn submits every connection's sends in one system call; each connection's application gets
//! a [`DuplexPipe`] as with the other transports.
//!
//! With feature `tls`, [`tls::TlsAcceptor`] and [`tls::TlsConnector`] give a [`tls::TlsStream`]
//! that `tokio::connection` and `Framed::new` take as they take a `TcpStream`: its records are
//! decrypted in place in the reader's pooled block (the [`tls`] module docs).
//!
//! Layout: `transport.rs` is the inline transport's core, generic over two small traits (a read
//! half and a write half); `tokio.rs`, `futures.rs` and `blocking.rs` each implement them for
//! their flavor's streams; `pumped.rs` is the pumped transport over the pumps in `fill.rs` and
//! `drain.rs`;
//! `connection.rs` holds the types the application sees; `tls/` is TLS as a layer of the inline
//! transport (records opened in the reader's block, sealed into pooled blocks); `uring/` is the
//! io_uring driver (its own
//! event loop rather than a flavor of the inline transport: the kernel, not the application's
//! read, fills the input pipe).
//!
//! # Which `read`, `write`, `flush`?
//!
//! The pipe's own methods do not share a name with any I/O trait method, so with
//! `AsyncReadExt`, `AsyncWriteExt` or `std::io::{Read, Write}` in scope, `reader.read(&mut buf)`,
//! `writer.write(buf)` and `writer.flush()` are the traits' methods and behave as everywhere else.
//!
//! | pipe method (segments, byte counts) | I/O trait method (a byte stream) |
//! |---|---|
//! | [`PipeReader::read_buffer`] / [`poll_read_buffer`](crate::pipe::PipeReader::poll_read_buffer): every unconsumed byte as a chain of segments, then [`advance_to`](crate::pipe::PipeReader::advance_to) | `read(&mut buf)`: copies into `buf` and consumes; `fill_buf` / `consume`: the first segment |
//! | [`PipeWriter::write_slice`]: stages a copy, never waits | `write(buf)`: stages a copy; waits first if the reader lags by the pause threshold |
//! | [`PipeWriter::flush_pipe`] / [`poll_flush_pipe`](crate::pipe::PipeWriter::poll_flush_pipe): publishes, waits under backpressure, reports [`FlushResult`](crate::pipe::FlushResult) | `flush()`: the same flush; the reader's completion is a `BrokenPipe` error |
//! | [`PipeWriter::complete`] | `shutdown()` (tokio) / `close()` (futures-io) |
//!
//! # Errors
//!
//! Through the I/O traits, an error the other side completed with comes out as itself (same
//! kind, message and source), as if the socket behind the pipe had returned it; a read or flush
//! cut short by a [`PipeCanceler`](crate::pipe::PipeCanceler) is an error of kind `Other`; a
//! write after the reader completed is `BrokenPipe`.
//!
//! # The duplex connection
//!
//! `connection(stream)` (in [`tokio`], [`futures`] or [`blocking`]) gives the application a
//! [`DuplexPipe`] and the caller a [`Connection`], the future of the connection's end
//! (`Ok(`[`ConnectionEnd`]`)` or a [`ConnectionError`] with its [`ErrorOrigin`] and byte
//! position); the library never spawns. `connection_with(stream, options)` takes
//! [`ConnectionOptions`]. [`Framed`](crate::frame::Framed) wraps one with a codec.
//!
//! Two transports move the bytes:
//!
//! - **Inline** (the default): the application's ends own the connection's blocks. When the
//!   reader has nothing beyond its examined point, its read reads the stream itself, straight into
//!   its own pooled receive block, in the same poll or call, and sees the bytes at once; a flush
//!   writes the staged bytes to the stream straight from the writer's block in the same call,
//!   keeping only what the stream did not take (in the output pipe). The [`Connection`] future
//!   writes those (woken by the stream's write readiness) and shuts the write side down if the
//!   flush could not; while the socket keeps up it does nothing. Choose it when the application
//!   reads and writes the connection from one task or one thread: nothing sits between the socket
//!   and the parser, no wake passes between them, and no cross-thread protocol runs per message.
//! - **Pumped** ([`ConnectionOptions::pumped`], async flavors only): the [`Connection`] future runs
//!   a fill pump (stream -> input pipe) and a drain pump (output pipe -> stream). Choose it when
//!   the socket is served on one thread or task and parsed on another: the pipes' cross-thread
//!   path then carries the bytes, with backpressure both ways, and the input is read ahead of the
//!   application (up to the input pipe's pause threshold).
//!
//! Run the [`Connection`] future (spawn it, [`join`] it with the application, or
//! [`block_on`](crate::block_on) it in blocking code): with the inline transport it is what writes the
//! bytes a full socket did not take. How the ends propagate:
//!
//! | event | effect |
//! |---|---|
//! | the peer's end of stream (EOF) | the application's reader completes (after every byte) |
//! | the application completes (or drops) its writer | the last bytes are written, the stream's write side is shut down |
//! | the application completes its writer with an error | the bytes before it are written, the write side is shut down (the peer sees the end of the stream); the connection ends with that error ([`ErrorOrigin::Output`]) |
//! | the application completes its reader with an error | the connection ends with that error ([`ErrorOrigin::Input`], at the bytes consumed) |
//! | a stream read error | the application's reader gets it, after the bytes before it; the connection ends with it ([`ErrorOrigin::Read`]) |
//! | a stream write error | the application's writer gets it on its next flush; the connection ends with it ([`ErrorOrigin::Write`]) |
//! | the application drops its reader | the stream is not read again |
//! | both directions ended | the future returns (inline: the input ends when the application reads the peer's end or drops its reader) |
//! | the future is dropped before that | both pipes complete with a `ConnectionAborted` error (a reader waiting on the stream is woken with it) |
//!
//! # Memory of idle connections
//!
//! A reader (or the pumped transport's fill pump) waiting on its socket holds no pooled block: it waits for
//! readability before it rents (tokio's `TcpStream` and `UnixStream` say when they are readable;
//! a blocking std stream is read into a per-thread scratch while nothing is unconsumed), and a
//! reader that waits with nothing unconsumed sends the writers' partly used blocks home, so an
//! idle connection holds its pipes' small fixed state only.
//!
//! [`PipeReader`]: crate::pipe::PipeReader
//! [`PipeWriter`]: crate::pipe::PipeWriter
//! [`PipeReader::read_buffer`]: crate::pipe::PipeReader::read_buffer
//! [`PipeWriter::write_slice`]: crate::pipe::PipeWriter::write_slice
//! [`PipeWriter::flush_pipe`]: crate::pipe::PipeWriter::flush_pipe
//! [`PipeWriter::complete`]: crate::pipe::PipeWriter::complete

pub mod blocking;
mod buf_mut;
mod byte_stream;
mod connection;
// The pumps run inside the async flavors' pumped transport (and standalone in the tests); a build
// without those flavors compiles them unused.
#[cfg_attr(not(any(feature = "tokio", feature = "futures-io")), allow(dead_code))]
mod drain;
#[cfg_attr(not(any(feature = "tokio", feature = "futures-io")), allow(dead_code))]
mod fill;
#[cfg(feature = "futures-io")]
pub mod futures;
mod join;
#[cfg(any(feature = "tokio", feature = "futures-io"))]
mod pumped;
#[cfg(feature = "tls")]
pub mod tls;
#[cfg(feature = "tokio")]
pub mod tokio;
mod transport;
#[cfg(all(feature = "io-uring", target_os = "linux"))]
pub mod uring;

pub use connection::{
    Connection, ConnectionEnd, ConnectionError, ConnectionOptions, DuplexPipe, ErrorOrigin,
    DEFAULT_MAX_WRITE_SEGMENTS, MAX_WRITE_SEGMENTS,
};
pub use join::{join, Join};

/// Flavor of the pumps and shared streams over tokio's I/O traits.
#[cfg(feature = "tokio")]
#[derive(Debug)]
pub(crate) enum Tokio {}

/// Flavor of the pumps and shared streams over futures-io's traits.
#[cfg(feature = "futures-io")]
#[derive(Debug)]
pub(crate) enum FuturesIo {}

#[cfg(all(test, feature = "tokio", feature = "futures-io"))]
mod pump_tests;
