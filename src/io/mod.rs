//! Between a socket and a parser: the pipe's ends as standard I/O types, pumps that move bytes
//! between a pipe and a socket, and a duplex connection that runs both pumps over one stream.
//!
//! | what | always | feature `tokio` | feature `futures-io` |
//! |---|---|---|---|
//! | [`PipeReader`] as a byte stream | `std::io::{Read, BufRead}` | `AsyncRead`, `AsyncBufRead` | `AsyncRead`, `AsyncBufRead` |
//! | [`PipeWriter`] as a byte sink | `std::io::Write`, [`bytes::BufMut`] | `AsyncWrite` | `AsyncWrite` |
//! | fill a writer from a source | [`fill_blocking`] | [`tokio::fill`] | [`futures::fill`] |
//! | drain a reader into a sink | [`drain_blocking`] | [`tokio::drain`] | [`futures::drain`] |
//! | duplex connection | | [`tokio::connection`] | [`futures::connection`] |
//! | a connection and its application in one task | [`join`] | | |
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
//! `connection(stream)` (in [`tokio`] or [`futures`]) gives the application a [`DuplexPipe`] and
//! the caller one future that runs both pumps; the library never spawns. Run it with the
//! application in one task with [`join`]: their wakes of each other (the fill pump's flush wakes
//! the application, the application's flush wakes the drain pump) then cost a pass of the same
//! poll instead of a trip through the executor. How the ends propagate:
//!
//! | event | effect |
//! |---|---|
//! | the peer's end of stream (EOF) | the application's reader completes (after every byte) |
//! | the application completes (or drops) its writer | the last bytes are written, the stream's write side is shut down |
//! | the application completes its writer with an error | the bytes before it are written, the write side is shut down (the peer sees the end of the stream); the future returns the error |
//! | a socket read error | the application's reader gets it, after the bytes before it |
//! | a socket write error | the application's writer gets it on its next flush |
//! | the application drops its reader | the pump stops reading the socket |
//! | both directions ended | the future returns (the first error, if any) and drops the stream |
//! | the future is dropped before that | both pipes complete with a `ConnectionAborted` error |
//!
//! # Memory of idle connections
//!
//! A pump waiting on its socket holds no pooled block (it waits for readability before renting),
//! and a pipe whose reader waits for more sends the writer's partly used block home, so an idle
//! connection holds its pipes' small fixed state only.
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
mod drain;
mod fill;
#[cfg(feature = "futures-io")]
pub mod futures;
mod join;
#[cfg(any(feature = "tokio", feature = "futures-io"))]
mod pumped;
#[cfg(feature = "tokio")]
pub mod tokio;
mod transport;

pub use connection::{
    Connection, ConnectionError, ConnectionOptions, DuplexPipe, End, ErrorOrigin,
};
#[cfg(any(feature = "tokio", feature = "futures-io"))]
pub use drain::Drain;
#[cfg(any(feature = "tokio", feature = "futures-io"))]
pub use fill::Fill;

/// Marker for the futures over tokio's I/O traits: [`Fill`] and [`Drain`] with it are
/// `io::tokio::{Fill, Drain}`.
#[cfg(feature = "tokio")]
#[derive(Debug)]
pub enum Tokio {}

/// Marker for the futures over futures-io's traits: [`Fill`] and [`Drain`] with it are
/// `io::futures::{Fill, Drain}`.
#[cfg(feature = "futures-io")]
#[derive(Debug)]
pub enum FuturesIo {}
pub use drain::{drain_blocking, DEFAULT_MAX_WRITE_SEGMENTS, MAX_WRITE_SEGMENTS};
pub use fill::fill_blocking;
pub use join::{join, Join};
