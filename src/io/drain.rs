//! The drain pump: a pipe reader's segments out to a sink (a socket) with vectored writes.
//!
//! One loop, shared by every flavor: wait for unconsumed bytes, write up to N segments in one
//! vectored write, consume exactly what the sink took, repeat; flush the sink before waiting on
//! the pipe (so nothing sits in a buffered sink while the pump sleeps) and at the end. On an I/O
//! error the reader is completed with it (the writer's next flush sees it) and it is returned.

use std::io::{self, IoSlice};
use std::task::{ready, Context, Poll};

use super::byte_stream::poll_ready;
#[cfg(test)]
use super::connection::DEFAULT_MAX_WRITE_SEGMENTS;
use super::connection::MAX_WRITE_SEGMENTS;
use crate::error::SharedError;
use crate::pipe::PipeReader;

/// What a drain pump writes to: one flavor's vectored write and flush.
pub(crate) trait Sink {
    fn poll_write_vectored(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>>;

    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
}

/// A drain pump between polls.
#[derive(Debug)]
pub(crate) struct DrainState {
    total: u64,
    /// Bytes written to the sink since its last flush.
    unflushed: bool,
    max_segments: usize,
    finished: bool,
}

impl DrainState {
    pub(crate) fn new(max_segments: usize) -> DrainState {
        DrainState {
            total: 0,
            unflushed: false,
            max_segments: max_segments.clamp(1, MAX_WRITE_SEGMENTS),
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

    /// Run the pump until the writer completes and every byte is written and flushed
    /// (`Ok(bytes written)`), or an error: the sink's (the reader is completed with it), or the
    /// writer's completion error (after every byte before it was written).
    ///
    /// Cancel safe: bytes are consumed from the pipe in the same poll in which the sink accepted
    /// them, so dropping the pump between polls loses and repeats nothing.
    pub(crate) fn poll(
        &mut self,
        cx: &mut Context<'_>,
        reader: &mut PipeReader,
        sink: &mut impl Sink,
    ) -> Poll<io::Result<u64>> {
        assert!(!self.finished, "drain pump polled after it finished");
        let result = self.poll_inner(cx, reader, sink);
        if result.is_ready() {
            self.finished = true;
        }
        result
    }

    fn poll_inner(
        &mut self,
        cx: &mut Context<'_>,
        reader: &mut PipeReader,
        sink: &mut impl Sink,
    ) -> Poll<io::Result<u64>> {
        loop {
            match poll_ready(reader, cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Pending => {
                    // Nothing to write for now: push out what the sink may be holding, then sleep
                    // (the read above registered this task with the pipe).
                    if self.unflushed {
                        ready!(self.flush(cx, reader, sink))?;
                    }
                    return Poll::Pending;
                }
                Poll::Ready(Err(e)) => {
                    // The writer's error (every byte before it is written) or a canceled read.
                    if self.unflushed {
                        ready!(self.flush(cx, reader, sink))?;
                    }
                    return Poll::Ready(Err(e));
                }
            }
            let written = {
                let Some(read) = reader.last_read() else {
                    unreachable!("a ready read leaves its result")
                };
                let buffer = read.buffer;
                if buffer.is_empty() {
                    // The writer completed and everything is written.
                    ready!(self.flush(cx, reader, sink))?;
                    return Poll::Ready(Ok(self.total));
                }
                let mut slices = [IoSlice::new(&[]); MAX_WRITE_SEGMENTS];
                let n = buffer.io_slices(&mut slices[..self.max_segments]);
                let offered: usize = slices[..n].iter().map(|s| s.len()).sum();
                ready!(sink.poll_write_vectored(cx, &slices[..n])).map(|n| (n, offered))
            };
            match written {
                Ok((0, _)) => {
                    let e = io::Error::new(
                        io::ErrorKind::WriteZero,
                        "the sink accepted 0 bytes of a non-empty write",
                    );
                    return Poll::Ready(Err(fail(reader, e)));
                }
                Ok((n, offered)) if n > offered => {
                    // Consuming n would drop bytes the sink was never given.
                    let e = io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("the sink reported {n} bytes written, of {offered} it was given"),
                    );
                    return Poll::Ready(Err(fail(reader, e)));
                }
                Ok((n, _)) => {
                    reader.consume_read(n);
                    self.total += n as u64;
                    self.unflushed = true;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Poll::Ready(Err(fail(reader, e))),
            }
        }
    }

    fn flush(
        &mut self,
        cx: &mut Context<'_>,
        reader: &mut PipeReader,
        sink: &mut impl Sink,
    ) -> Poll<io::Result<()>> {
        match ready!(sink.poll_flush(cx)) {
            Ok(()) => {
                self.unflushed = false;
                Poll::Ready(Ok(()))
            }
            Err(e) => Poll::Ready(Err(fail(reader, e))),
        }
    }
}

/// Complete the reader with the sink's error (the writer's flushes report it) and return it too.
fn fail(reader: &mut PipeReader, error: io::Error) -> io::Error {
    let shared = SharedError::new(error);
    reader.complete_inner(Some(shared.clone()));
    shared.to_io_error()
}

/// Future of a drain pump over one flavor's I/O traits, for the pump tests (`tokio::drain`,
/// `futures::drain`).
///
/// Cancel safety: safe to drop at any await point. Bytes are consumed from the pipe in the same
/// poll in which the sink accepted them, so none is lost or written twice.
#[cfg(test)]
#[must_use = "futures do nothing unless polled"]
pub(crate) struct Drain<'a, W: ?Sized, Flavor> {
    reader: &'a mut PipeReader,
    sink: &'a mut W,
    state: DrainState,
    flavor: std::marker::PhantomData<Flavor>,
}

#[cfg(test)]
impl<'a, W: ?Sized, Flavor> Drain<'a, W, Flavor> {
    pub(crate) fn new(reader: &'a mut PipeReader, sink: &'a mut W) -> Self {
        Drain {
            reader,
            sink,
            state: DrainState::new(DEFAULT_MAX_WRITE_SEGMENTS),
            flavor: std::marker::PhantomData,
        }
    }

    /// Segments per vectored write (1 to [`MAX_WRITE_SEGMENTS`]; default 16).
    pub(crate) fn max_segments(mut self, segments: usize) -> Self {
        self.state.max_segments = segments.clamp(1, MAX_WRITE_SEGMENTS);
        self
    }

    /// The pump's state, reader and sink, for one flavor's `poll`.
    pub(crate) fn parts(&mut self) -> (&mut DrainState, &mut PipeReader, &mut W) {
        (&mut self.state, self.reader, self.sink)
    }
}

/// A blocking `io::Write` as a drain sink.
#[cfg(test)]
struct BlockingSink<'a, W: ?Sized>(&'a mut W);

#[cfg(test)]
impl<W: io::Write + ?Sized> Sink for BlockingSink<'_, W> {
    fn poll_write_vectored(
        &mut self,
        _cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(self.0.write_vectored(bufs))
    }

    fn poll_flush(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.0.flush())
    }
}

/// Drain `reader` into a blocking [`io::Write`] until the writer completes: vectored writes,
/// consuming exactly what each write took; the pump tests' blocking flavor.
#[cfg(test)]
pub(crate) fn drain_blocking<W: io::Write + ?Sized>(
    reader: &mut PipeReader,
    sink: &mut W,
) -> io::Result<u64> {
    let mut state = DrainState::new(DEFAULT_MAX_WRITE_SEGMENTS);
    let mut sink = BlockingSink(sink);
    crate::block_on(std::future::poll_fn(|cx| state.poll(cx, reader, &mut sink)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_segments_is_clamped() {
        assert_eq!(DrainState::new(0).max_segments, 1);
        assert_eq!(DrainState::new(1000).max_segments, MAX_WRITE_SEGMENTS);
        assert_eq!(DrainState::new(8).max_segments, 8);
    }

    #[test]
    fn the_drain_pump_rejects_a_sink_that_reports_more_than_it_was_given() {
        /// Takes what it is given and claims 1,000 bytes more.
        struct Overreporting(Vec<u8>);
        impl std::io::Write for Overreporting {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.extend_from_slice(buf);
                Ok(buf.len() + 1000)
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let (mut writer, mut reader) = crate::pipe::pipe();
        writer.append(crate::Packet::from_static(b"seg1")).unwrap();
        writer.append(crate::Packet::from_static(b"seg2")).unwrap();
        writer.complete();
        let mut sink = Overreporting(Vec::new());
        let e = drain_blocking(&mut reader, &mut sink).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        assert_eq!(
            e.to_string(),
            "the sink reported 1004 bytes written, of 8 it was given"
        );
        // std's default `write_vectored` writes the first slice; nothing was consumed unwritten.
        assert_eq!(sink.0, b"seg1");
    }
}
