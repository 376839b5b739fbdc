//! The fill pump: bytes from a source (a socket) straight into a pipe writer's pooled blocks.
//!
//! One loop, shared by every flavor (tokio, futures-io, blocking std): rent writable space from the
//! writer, read into it, commit what was read, flush (publish, with backpressure), repeat; at the
//! end of the stream complete the writer, on an I/O error complete it with that error (the parser
//! sees it after the bytes before it) and return it; stop when the reader completes.
//!
//! An idle connection holds no pooled block: after a short read (the source is drained) the pump
//! first waits for the source with a zero-byte read, as Kestrel does, and only then rents; a read
//! that still finds nothing gives the rented block back before the pump sleeps. Sources whose
//! zero-byte read waits for readiness (tokio's `TcpStream`, `UnixStream`, `DuplexStream`) never
//! rent while idle; others (a `PipeReader` among them: its zero-byte read returns at once, as
//! tokio's `AsyncRead` convention allows) make the pump rent, find nothing and give the block
//! back on each wake: no block is held while idle, but each wake costs a rent and a return.

use std::io;
use std::task::{Context, Poll};

use super::byte_stream::io_error;
use crate::error::SharedError;
use crate::pipe::PipeWriter;

/// What a fill pump reads from: one flavor's `poll_read`, as a byte count.
pub(crate) trait Source {
    /// Read into `buf`. With a non-empty `buf`, `Ok(0)` is the end of the stream. With an empty
    /// `buf`: wait until the source is readable if it can tell, else return at once.
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>>;
}

/// A fill pump between polls.
#[derive(Debug)]
pub(crate) struct FillState {
    /// Bytes read from the source so far.
    total: u64,
    /// Read bytes are staged and a flush is pending.
    flushing: bool,
    /// Wait for the source (zero-byte read) before renting.
    probe: bool,
    /// Whether this source's zero-byte read is worth making (false for blocking sources).
    probe_source: bool,
    finished: bool,
}

impl FillState {
    pub(crate) fn new(probe_source: bool) -> FillState {
        FillState {
            total: 0,
            flushing: false,
            probe: probe_source,
            probe_source,
            finished: false,
        }
    }

    #[cfg(any(feature = "tokio", feature = "futures-io"))]
    pub(crate) fn is_finished(&self) -> bool {
        self.finished
    }

    /// Bytes moved so far.
    #[cfg(any(feature = "tokio", feature = "futures-io"))]
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// Run the pump until the source ends (`Ok(bytes read)`, writer completed), the reader
    /// completes (`Ok`), or an error (returned, and given to the reader when it is the source's).
    ///
    /// Cancel safe: bytes read from the source are committed to the writer in the same poll, so
    /// dropping the pump between polls loses nothing; a later flush or completion publishes them.
    pub(crate) fn poll(
        &mut self,
        cx: &mut Context<'_>,
        writer: &mut PipeWriter,
        source: &mut impl Source,
    ) -> Poll<io::Result<u64>> {
        assert!(!self.finished, "fill pump polled after it finished");
        let result = self.poll_inner(cx, writer, source);
        if result.is_ready() {
            self.finished = true;
        }
        result
    }

    fn poll_inner(
        &mut self,
        cx: &mut Context<'_>,
        writer: &mut PipeWriter,
        source: &mut impl Source,
    ) -> Poll<io::Result<u64>> {
        loop {
            if self.flushing {
                let result = std::task::ready!(writer.poll_flush_pipe(cx));
                self.flushing = false;
                match result {
                    Ok(flushed) if flushed.is_completed => return Poll::Ready(Ok(self.total)),
                    // Canceled: the bytes are published all the same; keep pumping.
                    Ok(_) => {}
                    Err(e) => return Poll::Ready(Err(io_error(e))),
                }
            }
            if writer.is_reader_completed() {
                return Poll::Ready(Ok(self.total));
            }
            if self.probe {
                match source.poll_read(cx, &mut []) {
                    Poll::Pending => return self.idle(cx, writer),
                    Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(fail(writer, e))),
                    Poll::Ready(Ok(_)) => self.probe = false,
                }
            }
            // Reuse the tail of the current block if at least half a segment is left.
            let hint = (writer.min_segment_size() / 2).max(1);
            let space = match writer.spare_mut(hint) {
                Ok(space) => space,
                Err(e) => return Poll::Ready(Err(fail(writer, io_error(e)))),
            };
            let len = space.len();
            match source.poll_read(cx, space) {
                Poll::Pending => {
                    writer.release_unused_buffer();
                    self.probe = self.probe_source;
                    return self.idle(cx, writer);
                }
                Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(fail(writer, e))),
                Poll::Ready(Ok(0)) => {
                    writer.complete();
                    return Poll::Ready(Ok(self.total));
                }
                Poll::Ready(Ok(n)) => {
                    if n > len {
                        let e = io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("the source reported {n} bytes read into a {len}-byte buffer"),
                        );
                        return Poll::Ready(Err(fail(writer, e)));
                    }
                    writer.commit(n).map_err(io_error)?;
                    self.total += n as u64;
                    self.flushing = true;
                    // A short read drained the source: wait for it before renting again.
                    self.probe = self.probe_source && n < len;
                }
            }
        }
    }

    /// The source has nothing: sleep until it does, or until the reader completes.
    fn idle(&mut self, cx: &mut Context<'_>, writer: &mut PipeWriter) -> Poll<io::Result<u64>> {
        match writer.poll_reader_completed(cx) {
            Poll::Ready(()) => Poll::Ready(Ok(self.total)),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Complete the writer with the source's error (the reader gets it after the bytes before it) and
/// return it to the caller too.
fn fail(writer: &mut PipeWriter, error: io::Error) -> io::Error {
    let shared = SharedError::new(error);
    writer.complete_with_shared(shared.clone());
    shared.to_io_error()
}

/// Future of a fill pump over one flavor's I/O traits, for the pump tests (`tokio::fill`,
/// `futures::fill`).
///
/// Cancel safety: safe to drop at any await point (in a `select!`, say). Bytes read from the
/// source are committed to the writer in the same poll, so none is lost or repeated: a new fill
/// (or the writer's own flush) carries on where this one stopped.
#[cfg(test)]
#[must_use = "futures do nothing unless polled"]
pub(crate) struct Fill<'a, R: ?Sized, Flavor> {
    writer: &'a mut PipeWriter,
    source: &'a mut R,
    state: FillState,
    flavor: std::marker::PhantomData<Flavor>,
}

#[cfg(test)]
impl<'a, R: ?Sized, Flavor> Fill<'a, R, Flavor> {
    pub(crate) fn new(writer: &'a mut PipeWriter, source: &'a mut R) -> Self {
        Fill {
            writer,
            source,
            state: FillState::new(true),
            flavor: std::marker::PhantomData,
        }
    }

    /// The pump's state, writer and source, for one flavor's `poll`.
    pub(crate) fn parts(&mut self) -> (&mut FillState, &mut PipeWriter, &mut R) {
        (&mut self.state, self.writer, self.source)
    }
}

/// A blocking `io::Read` as a fill source (it has no readiness to wait for).
#[cfg(test)]
struct BlockingSource<'a, R: ?Sized>(&'a mut R);

#[cfg(test)]
impl<R: io::Read + ?Sized> Source for BlockingSource<'_, R> {
    fn poll_read(&mut self, _cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        Poll::Ready(self.0.read(buf))
    }
}

/// Fill `writer` from a blocking [`io::Read`] until its end, reading straight into the writer's
/// pooled blocks and flushing after each read; the pump tests' blocking flavor.
#[cfg(test)]
pub(crate) fn fill_blocking<R: io::Read + ?Sized>(
    writer: &mut PipeWriter,
    source: &mut R,
) -> io::Result<u64> {
    let mut state = FillState::new(false);
    let mut source = BlockingSource(source);
    crate::block_on(std::future::poll_fn(|cx| {
        state.poll(cx, writer, &mut source)
    }))
}
