//! `PipeReader::read_until`: wait until a pattern has arrived, searching each byte once.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::{PipeReader, ReadBuffer};
use crate::error::Error;
use crate::segments::ByteSegments;

impl PipeReader {
    /// Wait until `pattern` has arrived within the first `max` bytes (it must end there), the
    /// writer completes, or the read is canceled; fail with [`Error::PatternNotFound`] (naming the
    /// pattern's length, `max` and the bytes there) once `max` bytes are there without it.
    ///
    /// # Examined bytes
    ///
    /// The first search of a call covers every unconsumed byte from the front, whatever an
    /// earlier [`advance_to`](Self::advance_to) marked examined: a call never skips a byte the
    /// buffer holds (and it returns at once when the pattern is already there, even if no byte
    /// arrived since). Within the call, the search goes on where it stopped: each time the bytes
    /// there do not hold the pattern, the call marks them all examined (consuming nothing, as
    /// `advance_to(0, len)` would) and waits for bytes beyond them, and the next search starts at
    /// the last `pattern.len() - 1` of them (a pattern may straddle the old and the new bytes).
    /// So bytes that trickle in are searched once each, and the reader is woken only by new
    /// bytes. Marking them examined lifts the writer's backpressure too, so a `max` above the
    /// pause threshold can be reached.
    ///
    /// What the call leaves: on success, the examined point as its last wait left it (the bytes
    /// searched before the last arrival; unchanged when it did not wait), and a read result to
    /// advance in. Then
    /// [`advance_to`](Self::advance_to) sets both counts as usual: `advance_to(end, end)` after
    /// parsing a head; `advance_to(0, len)` to mark everything examined without consuming it, so
    /// that the next [`read_buffer`](Self::read_buffer) waits for bytes beyond. A next
    /// `read_until` starts from the front again: to search only new bytes for the next pattern,
    /// consume what was parsed first.
    ///
    /// On success the [`ReadUntilResult`] holds the read buffer (every unconsumed byte) and where
    /// the pattern is: parse in place, then [`advance_to`](Self::advance_to) past what was used
    /// (or [`take_frame`](Self::take_frame) it). Nothing is consumed by the call itself.
    ///
    /// Cancel safety: the future may be dropped at any await point. It consumes nothing; what it
    /// leaves behind is the examined point at the end of the bytes it searched, so a new
    /// `read_until` searches them again (from the start: the search offset lived in the dropped
    /// future) and then waits for bytes beyond them. No byte is lost or skipped.
    ///
    /// Thread-based code drives it with [`block_on`](crate::block_on):
    /// `packetpipe::block_on(reader.read_until(b"\r\n", 512))` parks the thread while waiting.
    ///
    /// An HTTP/1.1 request head: up to 8 KiB ending with an empty line, parsed where it lies.
    ///
    /// ```
    /// # fn main() -> Result<(), packetpipe::Error> {
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use packetpipe::ByteSegments;
    ///
    /// let (mut writer, mut reader) = packetpipe::pipe::pipe();
    /// writer.write_slice(b"GET / HTTP/1.1\r\nHost: example.com\r\n")?;
    /// writer.flush_pipe().await?;
    /// writer.write_slice(b"Accept: */*\r\n\r\nbody...")?;
    /// writer.flush_pipe().await?;
    ///
    /// let until = reader.read_until(b"\r\n\r\n", 8 * 1024).await?;
    /// let end = until.end.expect("a complete head"); // None: the peer closed first
    /// let head = until.buffer.slice(..end);
    /// let mut lines = Vec::new();
    /// let mut start = 0;
    /// while let Some(eol) = head.find_from(start, b"\r\n").filter(|&eol| eol > start) {
    ///     lines.push(head.slice(start..eol).display_lossy().to_string()); // in place, no join
    ///     start = eol + 2;
    /// }
    /// assert_eq!(lines, ["GET / HTTP/1.1", "Host: example.com", "Accept: */*"]);
    /// reader.advance_to(end, end)?; // the body starts here
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    ///
    /// A head longer than the limit is an error, with the numbers:
    ///
    /// ```
    /// let (mut writer, mut reader) = packetpipe::pipe::pipe();
    /// writer.write_slice(&[b'a'; 100])?;
    /// writer.flush_blocking()?;
    /// let err = packetpipe::block_on(reader.read_until(b"\r\n\r\n", 64)).unwrap_err();
    /// assert_eq!(err.to_string(), "no 4-byte pattern within the first 64 bytes (100 bytes in the pipe)");
    /// # Ok::<(), packetpipe::Error>(())
    /// ```
    pub fn read_until<'a>(&'a mut self, pattern: &'a [u8], max: usize) -> ReadUntil<'a> {
        ReadUntil {
            reader: Some(self),
            pattern,
            max,
            searched: None,
        }
    }
}

/// What [`PipeReader::read_until`] found: the read buffer (every unconsumed byte) and where the
/// pattern is in it, if it came before the writer completed or the read was canceled.
///
/// A thread-based caller waits with [`block_on`](crate::block_on):
///
/// ```
/// let (mut writer, mut reader) = packetpipe::pipe();
/// std::thread::spawn(move || -> Result<(), packetpipe::Error> {
///     for piece in [&b"PING"[..], b"\r", b"\n", b"PONG\r\n"] {
///         writer.write_slice(piece)?;
///         writer.flush_blocking()?; // one wake each, one search of the new bytes each
///     }
///     Ok(())
/// });
/// let until = packetpipe::block_on(reader.read_until(b"\r\n", 512))?;
/// assert_eq!((until.found, until.end), (Some(4), Some(6)));
/// assert_eq!(packetpipe::ByteSegments::to_vec(&until.buffer.slice(..4)), b"PING");
/// # Ok::<(), packetpipe::Error>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct ReadUntilResult<'a> {
    /// Every unconsumed byte, as [`ReadResult::buffer`](super::ReadResult::buffer).
    pub buffer: ReadBuffer<'a>,
    /// Offset of the pattern's first byte; `None` when the writer completed (or the read was
    /// canceled) before it came.
    pub found: Option<usize>,
    /// Offset just past the pattern (`found` plus the pattern's length): the length of what it
    /// ends. `None` when `found` is.
    pub end: Option<usize>,
    /// The writer has completed: no byte beyond this buffer will arrive.
    pub is_completed: bool,
    /// The read was cut short by the reader's [`PipeCanceler`](super::PipeCanceler).
    pub is_canceled: bool,
}

/// Future of [`PipeReader::read_until`] (cancel safe: see there).
#[must_use = "futures do nothing unless polled"]
pub struct ReadUntil<'a> {
    reader: Option<&'a mut PipeReader>,
    pattern: &'a [u8],
    max: usize,
    /// Bytes from the front the last search covered without finding the pattern (then marked
    /// examined); `None` before the first search.
    searched: Option<usize>,
}

impl<'a> Future for ReadUntil<'a> {
    type Output = Result<ReadUntilResult<'a>, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let reader = this
            .reader
            .as_mut()
            .expect("ReadUntil polled after completion");
        loop {
            // The first search takes the bytes there now (a read of at least 0 bytes returns at
            // once, whatever was examined before); the later ones wait for bytes beyond those
            // searched, which the last search marked examined.
            let ready = match this.searched {
                None => reader.poll_read_at_least(cx, 0),
                Some(_) => reader.poll_read_buffer(cx),
            };
            match ready {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => {
                    this.reader = None;
                    return Poll::Ready(Err(e));
                }
                Poll::Ready(Ok(())) => {}
            }
            let read = reader.last_read().expect("a ready read leaves its result");
            let buffer = read.buffer;
            let len = buffer.len();
            let (completed, canceled) = (read.is_completed, read.is_canceled);
            // Bytes the last search covered cannot hold the pattern's start, except the last
            // `pattern.len() - 1` of them, which new bytes may complete.
            let start = this.searched.map_or(0, |n| {
                n.saturating_sub(this.pattern.len().saturating_sub(1))
            });
            let found = buffer
                .slice(..len.min(this.max))
                .find_from(start, this.pattern);
            if found.is_some() || len >= this.max || completed || canceled {
                let pattern_len = this.pattern.len();
                let max = this.max;
                let reader: &'a PipeReader = this.reader.take().expect("checked above");
                if found.is_none() && len >= max {
                    return Poll::Ready(Err(Error::PatternNotFound {
                        pattern_len,
                        max,
                        len,
                    }));
                }
                let buffer = reader.last_read().expect("still in hand").buffer;
                return Poll::Ready(Ok(ReadUntilResult {
                    buffer,
                    found,
                    end: found.map(|at| at + pattern_len),
                    is_completed: completed,
                    is_canceled: canceled,
                }));
            }
            // Not there yet: every byte examined, none consumed; wait for more.
            reader.advance_to(0, len)?;
            this.searched = Some(len);
        }
    }
}

impl std::fmt::Debug for ReadUntil<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadUntil")
            .field("pattern_len", &self.pattern.len())
            .field("max", &self.max)
            .field("searched", &self.searched)
            .finish()
    }
}
