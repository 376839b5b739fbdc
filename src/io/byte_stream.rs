//! The pipe's ends as byte streams: what every I/O trait implementation here shares (std's below;
//! tokio's and futures-io's in their own files are thin mappings onto the same poll functions).
//!
//! - Reading returns the unconsumed bytes (a byte stream has no "examined" point), waits only when
//!   there are none, and returns 0 once the writer has completed and everything is read.
//! - Writing copies into pooled blocks and returns at once, unless the bytes the reader has not
//!   examined yet (flushed or staged) have reached the pause threshold: then it publishes and waits
//!   like a flush first, so memory stays bounded even if the caller never flushes.
//! - Errors: a peer's completion error comes out as that error itself (its kind, message and
//!   source), as if the socket behind the pipe had returned it, except that a peer's `Interrupted`
//!   comes out as `Other` wrapping it; a read or flush cut short by a
//!   [`PipeCanceler`](crate::pipe::PipeCanceler) is an error of kind `Other` too. (Not
//!   `Interrupted`, which `std::io::copy`, `read_exact` and `write_all` retry: the error here is
//!   returned again by every later call, so they would spin for ever.) A write or a flush after
//!   the reader completed is `BrokenPipe` (or the reader's error), whether or not there are bytes
//!   to publish.

use std::io::{self, BufRead, IoSlice, Read, Write};
use std::task::{ready, Context, Poll};

use crate::error::Error;
use crate::pipe::{block_on, PipeReader, PipeWriter};

/// A pipe error as an [`io::Error`]: a peer's (or an I/O) error as itself, anything else
/// converted with its [`Error::io_kind`].
pub(crate) fn io_error(error: Error) -> io::Error {
    match error {
        Error::Peer { source, .. } | Error::Io { source } => {
            let error = source.to_io_error();
            if error.kind() == io::ErrorKind::Interrupted {
                // Here it is permanent (every later call returns it again), and std's helpers
                // retry `Interrupted` for ever: kind `Other`, wrapping it.
                return io::Error::other(error);
            }
            error
        }
        error => error.into(),
    }
}

/// Wait for unconsumed bytes (or the end), then hand up to `max` of them to `put` and consume
/// them: the core of every `read`. `Ok(0)` is the end of the stream (or `max == 0`).
pub(crate) fn poll_read(
    reader: &mut PipeReader,
    cx: &mut Context<'_>,
    max: usize,
    put: impl FnMut(&[u8]),
) -> Poll<io::Result<usize>> {
    if max == 0 {
        return Poll::Ready(Ok(0));
    }
    ready!(poll_ready(reader, cx))?;
    Poll::Ready(Ok(reader.read_with(max, put)))
}

/// Wait for unconsumed bytes (or the end); then `last_read` holds them.
pub(crate) fn poll_ready(reader: &mut PipeReader, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
    let (_, canceled) = ready!(reader.poll_available(cx)).map_err(io_error)?;
    if canceled {
        return Poll::Ready(Err(io_error(Error::Canceled {
            operation: crate::error::Operation::Read,
        })));
    }
    Poll::Ready(Ok(()))
}

/// The core of `fill_buf`: the first unconsumed segment, empty only at the end of the stream.
#[cfg(any(feature = "tokio", feature = "futures-io"))]
pub(crate) fn poll_fill_buf<'a>(
    reader: &'a mut PipeReader,
    cx: &mut Context<'_>,
) -> Poll<io::Result<&'a [u8]>> {
    ready!(poll_ready(reader, cx))?;
    Poll::Ready(Ok(reader.first_chunk()))
}

/// The core of `write` / `write_vectored` (see `PipeWriter::poll_write_io`).
pub(crate) fn poll_write(
    writer: &mut PipeWriter,
    cx: &mut Context<'_>,
    bufs: &[IoSlice<'_>],
) -> Poll<io::Result<usize>> {
    writer.poll_write_io(cx, bufs).map_err(io_error)
}

/// The core of `flush`: the pipe's flush (publish, wait under backpressure). After the writer
/// completed there is nothing left to flush: `Ok`, as for a shut-down socket.
pub(crate) fn poll_flush(writer: &mut PipeWriter, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
    if writer.is_writer_completed() {
        return Poll::Ready(Ok(()));
    }
    let result = ready!(writer.poll_flush_pipe(cx)).map_err(io_error)?;
    if result.is_canceled {
        return Poll::Ready(Err(io_error(Error::Canceled {
            operation: crate::error::Operation::Flush,
        })));
    }
    if result.is_completed {
        return Poll::Ready(Err(io_error(Error::ReaderGone)));
    }
    Poll::Ready(Ok(()))
}

/// The core of `shutdown` / `close`: complete the writer (staged bytes are published first).
#[cfg(any(feature = "tokio", feature = "futures-io"))]
pub(crate) fn shutdown(writer: &mut PipeWriter) -> io::Result<()> {
    writer.complete();
    Ok(())
}

/// Blocking reads: each call waits (parking the thread) until bytes or the end arrive.
///
/// ```
/// use std::io::Read;
///
/// let (mut writer, mut reader) = packetpipe::pipe::pipe();
/// let producer = std::thread::spawn(move || {
///     std::io::Write::write_all(&mut writer, b"hello over a pipe")
/// }); // dropping the writer completes it: the reader sees the end
/// let mut text = String::new();
/// reader.read_to_string(&mut text)?;
/// producer.join().unwrap()?;
/// assert_eq!(text, "hello over a pipe");
/// # Ok::<(), std::io::Error>(())
/// ```
impl Read for PipeReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let max = buf.len();
        let mut filled = 0;
        block_on(std::future::poll_fn(|cx| {
            poll_read(self, cx, max, |chunk| {
                buf[filled..filled + chunk.len()].copy_from_slice(chunk);
                filled += chunk.len();
            })
        }))
    }
}

/// `fill_buf` returns the first unconsumed segment (waiting for one; empty only at the end of the
/// stream); `consume` releases bytes of that segment (clamped to it: bytes `fill_buf` did not
/// return stay unconsumed).
///
/// ```
/// use std::io::BufRead;
///
/// let (mut writer, reader) = packetpipe::pipe::pipe();
/// writer.write_slice(b"one\ntwo\n")?;
/// writer.complete();
/// let lines: Vec<String> = reader.lines().collect::<Result<_, _>>()?;
/// assert_eq!(lines, ["one", "two"]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
impl BufRead for PipeReader {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        block_on(std::future::poll_fn(|cx| poll_ready(self, cx)))?;
        Ok(self.first_chunk())
    }

    fn consume(&mut self, amt: usize) {
        self.consume_filled(amt);
    }
}

/// Blocking writes: a write copies into pooled blocks and returns at once unless the reader lags
/// by the pause threshold, then it publishes and parks the thread until the reader catches up;
/// `flush` publishes (and waits the same way).
///
/// ```
/// # use packetpipe::ByteSegments;
/// use std::io::Write;
///
/// let (mut writer, mut reader) = packetpipe::pipe::pipe();
/// write!(writer, "{} + {} = {}", 2, 2, 4)?;
/// writer.flush()?; // std::io::Write::flush: publishes the staged bytes
/// assert_eq!(reader.read_blocking()?.buffer.to_vec(), b"2 + 2 = 4");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
impl Write for PipeWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[IoSlice::new(buf)])
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        block_on(std::future::poll_fn(|cx| poll_write(self, cx, bufs)))
    }

    fn flush(&mut self) -> io::Result<()> {
        block_on(std::future::poll_fn(|cx| poll_flush(self, cx)))
    }
}
