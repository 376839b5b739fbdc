//! `PipeReader::read_until`: wait until a pattern has arrived, searching each byte once.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::{block_on, PipeReader, ReadBuffer};
use crate::error::Error;
use crate::segments::ByteSegments;

impl PipeReader {
    /// Wait until `pattern` has arrived within the first `max` bytes (it must end there), the
    /// writer completes, or the read is canceled; fail with [`Error::PatternNotFound`] (naming the
    /// pattern's length, `max` and the bytes there) once `max` bytes are there without it.
    ///
    /// The search goes on where it stopped: each time the bytes there do not hold the pattern,
    /// the reader marks them all examined (consuming nothing) and waits for bytes beyond them, and
    /// the next search starts at the last `pattern.len() - 1` of them (a pattern may straddle the
    /// old and the new bytes). So bytes that trickle in are searched once each, and the reader is
    /// woken only by new bytes. Marking them examined lifts the writer's backpressure too, so a
    /// `max` above the pause threshold can be reached.
    ///
    /// On success the [`Until`] holds the read buffer (every unconsumed byte) and where the
    /// pattern is: parse in place, then [`advance_to`](Self::advance_to) past what was used (or
    /// [`take_frame`](Self::take_frame) it). Nothing is consumed by the call itself.
    ///
    /// Cancel safety: the future may be dropped at any await point. It consumes nothing; what it
    /// leaves behind is the examined point at the end of the bytes it searched, so a new
    /// `read_until` searches them again (from the start: the search offset lived in the dropped
    /// future) and then waits for bytes beyond them. No byte is lost or skipped.
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
    /// let end = until.end().expect("a complete head"); // None: the peer closed first
    /// let head = until.buffer().slice(..end);
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
    /// let err = reader.read_until_blocking(b"\r\n\r\n", 64).unwrap_err();
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

    /// [`read_until`](Self::read_until) for thread-based code: parks the thread while waiting.
    ///
    /// ```
    /// let (mut writer, mut reader) = packetpipe::pipe::pipe();
    /// std::thread::spawn(move || -> Result<(), packetpipe::Error> {
    ///     for piece in [&b"PING"[..], b"\r", b"\n", b"PONG\r\n"] {
    ///         writer.write_slice(piece)?;
    ///         writer.flush_blocking()?; // one wake each, one search of the new bytes each
    ///     }
    ///     Ok(())
    /// });
    /// let until = reader.read_until_blocking(b"\r\n", 512)?;
    /// assert_eq!(until.found(), Some(4));
    /// assert_eq!(until.buffer().slice(..4).to_vec(), b"PING");
    /// # Ok::<(), packetpipe::Error>(())
    /// ```
    pub fn read_until_blocking<'a>(
        &'a mut self,
        pattern: &'a [u8],
        max: usize,
    ) -> Result<Until<'a>, Error> {
        block_on(self.read_until(pattern, max))
    }
}

/// What [`PipeReader::read_until`] found: the read buffer (every unconsumed byte) and where the
/// pattern is in it, if it came before the writer completed or the read was canceled.
#[derive(Clone, Copy)]
pub struct Until<'a> {
    buffer: ReadBuffer<'a>,
    found: Option<usize>,
    pattern_len: usize,
    is_completed: bool,
    is_canceled: bool,
}

impl<'a> Until<'a> {
    /// Every unconsumed byte, as [`ReadResult::buffer`](super::ReadResult::buffer).
    pub fn buffer(&self) -> ReadBuffer<'a> {
        self.buffer
    }

    /// Offset of the pattern's first byte; `None` when the writer completed (or the read was
    /// canceled) before it came.
    pub fn found(&self) -> Option<usize> {
        self.found
    }

    /// Offset just past the pattern: the length of what it ends.
    pub fn end(&self) -> Option<usize> {
        self.found.map(|at| at + self.pattern_len)
    }

    /// The writer has completed: no byte beyond this buffer will arrive.
    pub fn is_completed(&self) -> bool {
        self.is_completed
    }

    /// The read was cut short by [`PipeCanceler::cancel_pending_read`](super::PipeCanceler::cancel_pending_read).
    pub fn is_canceled(&self) -> bool {
        self.is_canceled
    }
}

impl std::fmt::Debug for Until<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Until")
            .field("len", &self.buffer.len())
            .field("found", &self.found)
            .field("is_completed", &self.is_completed)
            .field("is_canceled", &self.is_canceled)
            .finish()
    }
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
    type Output = Result<Until<'a>, Error>;

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
            let buffer = read.buffer();
            let len = buffer.len();
            let (completed, canceled) = (read.is_completed(), read.is_canceled());
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
                let buffer = reader.last_read().expect("still in hand").buffer();
                return Poll::Ready(Ok(Until {
                    buffer,
                    found,
                    pattern_len,
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
