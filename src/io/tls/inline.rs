//! A [`TlsStream`] served by the inline transport: its records opened in the reader's receive
//! block ([`TlsRecords`], the transport's [`Layer`]) and the writer's flushes sealed and written
//! ([`TlsWrite`], a [`WriteSide`] over the stream's own).

use std::io::{self, IoSlice};
use std::task::{Context, Poll};

use super::records::{ciphertext_for, record_len, Opened, Opener, Sealer};
use super::{seal_slices, Outgoing, TlsStream};
use crate::io::byte_stream::io_error;
use crate::io::transport::{self, Layer, ReadSide, Received, WriteSide};
use crate::io::{Connection, ConnectionOptions, DuplexPipe};
use crate::pipe::Fill;

/// A connection over a TLS stream whose halves are `read` and `write` (a `TcpStream`'s, split).
pub(crate) fn connect<S, R: ReadSide, W: WriteSide>(
    stream: TlsStream<S>,
    split: impl FnOnce(S) -> (R, W),
    options: ConnectionOptions,
) -> (DuplexPipe, Connection) {
    debug_assert!(stream.is_fresh());
    let (read, write) = split(stream.stream);
    let mut buffered = stream.received;
    buffered.truncate(stream.filled);
    let records = TlsRecords {
        opener: stream.opener,
        buffered,
        closed: false,
    };
    let mut sealer = stream.sealer;
    if let Some(pool) = &options.output.pool {
        sealer.set_pool(pool.clone());
    }
    let write = TlsWrite {
        inner: write,
        sealer,
        out: Outgoing::default(),
        covers: 0,
    };
    transport::connect_layered(read, records, write, options)
}

/// The error of a stream that ended without the peer's `close_notify`, `pending` bytes into a
/// record.
pub(crate) fn unexpected_end(pending: usize) -> io::Error {
    let message = if pending == 0 {
        "the TLS peer closed the connection without a close_notify (the data may be truncated)"
            .to_string()
    } else {
        format!("the TLS peer closed the connection {pending} bytes into a record")
    };
    io::Error::new(io::ErrorKind::UnexpectedEof, message)
}

/// The reader's side: records opened in the receive block.
pub(crate) struct TlsRecords {
    opener: Opener,
    /// Ciphertext the handshake received past its last record.
    buffered: Vec<u8>,
    /// The peer's `close_notify` came.
    closed: bool,
}

impl TlsRecords {
    /// Open every complete record among the pending bytes: their plaintext becomes readable,
    /// the rest of them (header, tag, padding, control messages) is dropped.
    fn open_pending(&mut self, into: &mut Fill<'_>) -> io::Result<Received> {
        let mut readable = false;
        loop {
            if self.closed {
                // Nothing the peer sends after its close_notify is read.
                let pending = into.pending();
                into.pending_skip(pending).map_err(io_error)?;
                return Ok(Received::Closed);
            }
            let (area, at) = into.pending_mut();
            let len = match self.opener.record_len(&area[at..])? {
                Some(len) if len <= area.len() - at => len,
                _ => break,
            };
            // The plaintext goes to the front of the free tail, right after the bytes already
            // readable: consecutive records make one contiguous run, and a frame spanning them
            // is shared as one segment, not copied together.
            match self.opener.open(&mut area[..at + len], at)? {
                Opened::Data { len: plain } => {
                    into.front_readable(plain, len).map_err(io_error)?;
                    readable |= plain > 0;
                }
                Opened::Control => into.pending_skip(len).map_err(io_error)?,
                Opened::CloseNotify => {
                    into.pending_skip(len).map_err(io_error)?;
                    self.closed = true;
                }
            }
        }
        Ok(if readable {
            Received::Readable
        } else {
            Received::Partial
        })
    }

    /// Bytes still needed to complete the record at the front of the pending ones.
    fn record_rest(&self, into: &mut Fill<'_>) -> usize {
        let (area, at) = into.pending_mut();
        let pending = &area[at..];
        match record_len(pending) {
            Ok(Some(len)) => len.saturating_sub(pending.len()),
            _ => 0,
        }
    }
}

impl Layer for TlsRecords {
    const PLAIN: bool = false;

    fn take_buffered(
        &mut self,
        into: &mut Fill<'_>,
        hint: usize,
    ) -> Option<(usize, io::Result<Received>)> {
        if self.buffered.is_empty() {
            return None;
        }
        let buffered = std::mem::take(&mut self.buffered);
        let result = (|| {
            let need = buffered.len().max(ciphertext_for(hint));
            let space = into.read_space(need).map_err(io_error)?;
            space[..buffered.len()].copy_from_slice(&buffered);
            into.add_pending(buffered.len()).map_err(io_error)?;
            self.open_pending(into)
        })();
        Some((buffered.len(), result))
    }

    fn space<'f>(
        &mut self,
        into: &'f mut Fill<'_>,
        hint: usize,
    ) -> Result<&'f mut [u8], crate::Error> {
        // Room for the records that bring `hint` bytes of plaintext (opened, they shrink to it),
        // of which the pending bytes are the front.
        let need = ciphertext_for(hint)
            .saturating_sub(into.pending())
            .max(self.record_rest(into));
        into.read_space(need)
    }

    fn received(&mut self, into: &mut Fill<'_>, n: usize) -> io::Result<Received> {
        into.add_pending(n).map_err(io_error)?;
        self.open_pending(into)
    }

    fn end_of_stream(&mut self) -> io::Result<()> {
        if self.closed {
            Ok(())
        } else {
            Err(unexpected_end(0))
        }
    }
}

/// The writer's side: what a flush offers is sealed into records, written before the bytes
/// count as taken.
///
/// The transport's output offers the same bytes again until they are taken, so the records
/// sealed for the first `covers` bytes of an offer are written (across as many offers as the
/// stream needs) before those bytes are reported taken: nothing is sealed twice, and what the
/// stream has not taken stays the transport's to wait for.
pub(crate) struct TlsWrite<W> {
    inner: W,
    sealer: Sealer,
    out: Outgoing,
    /// Plaintext bytes at the front of the current offer that `out` holds sealed.
    covers: usize,
}

impl<W: WriteSide> TlsWrite<W> {
    fn write(
        &mut self,
        cx: Option<&mut Context<'_>>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.out.is_empty() {
            self.covers = seal_slices(&mut self.sealer, bufs, &mut self.out)?;
        } else {
            let offered: usize = bufs.iter().map(|b| b.len()).sum();
            if offered < self.covers {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "a TLS write was offered {offered} bytes after sealing {} of an earlier offer",
                        self.covers
                    ),
                )));
            }
        }
        let inner = &mut self.inner;
        let written = match cx {
            Some(cx) => self
                .out
                .poll_write(|bufs| inner.poll_write_vectored(cx, bufs)),
            None => self
                .out
                .poll_write(|bufs| match inner.try_write_vectored(bufs) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => Poll::Pending,
                    other => Poll::Ready(other),
                }),
        };
        match written {
            Poll::Ready(Ok(())) => Poll::Ready(Ok(std::mem::take(&mut self.covers))),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<W: WriteSide> WriteSide for TlsWrite<W> {
    fn try_write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self.write(None, bufs) {
            Poll::Ready(result) => result,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn poll_write_vectored(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.write(Some(cx), bufs)
    }

    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let inner = &mut self.inner;
        match self
            .out
            .poll_write(|bufs| inner.poll_write_vectored(cx, bufs))
        {
            Poll::Ready(Ok(())) => self.inner.poll_flush(cx),
            other => other,
        }
    }

    fn poll_shutdown(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.sealer.seal_close_notify(&mut self.out.records)?;
        let inner = &mut self.inner;
        match self
            .out
            .poll_write(|bufs| inner.poll_write_vectored(cx, bufs))
        {
            Poll::Ready(Ok(())) => self.inner.poll_shutdown(cx),
            other => other,
        }
    }
}
