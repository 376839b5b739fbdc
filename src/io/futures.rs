//! futures-io: `AsyncRead + AsyncBufRead` for [`PipeReader`], `AsyncWrite` for [`PipeWriter`], and
//! the duplex connection over futures-io's traits (feature `futures-io`; for
//! async-std, smol and other runtimes built on them).
//!
//! The behaviour is that of the tokio flavor (`packetpipe::io::tokio`, see also the [`io`](super)
//! module docs): the same connection code, over the other traits.
//!
//! ```
//! use futures::io::{AsyncReadExt, AsyncWriteExt};
//!
//! # futures::executor::block_on(async {
//! let (mut writer, mut reader) = packetpipe::pipe::pipe();
//! writer.write_all(b"through futures-io").await?;
//! writer.close().await?; // completes the writer
//! let mut text = String::new();
//! reader.read_to_string(&mut text).await?;
//! assert_eq!(text, "through futures-io");
//! # Ok::<(), std::io::Error>(())
//! # }).unwrap();
//! ```

use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_io::{AsyncBufRead, AsyncRead, AsyncWrite};

use super::byte_stream;
use super::drain::Sink;
use super::fill::Source;
use super::pumped::{Duplex, Pumped};
use super::transport::{self, ReadSide, SharedStream, WriteSide};
use super::{Connection, ConnectionEnd, ConnectionError, ConnectionOptions, DuplexPipe};
use crate::pipe::{PipeReader, PipeWriter};

/// Reads return the unconsumed bytes, waiting only when there are none; `Ok(0)` once the writer
/// has completed and everything is read; a writer's completion error is returned as that error.
/// Cancel safe: a read that returns `Pending` consumed nothing.
impl AsyncRead for PipeReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let mut filled = 0;
        byte_stream::poll_read(self.get_mut(), cx, buf.len(), |chunk| {
            buf[filled..filled + chunk.len()].copy_from_slice(chunk);
            filled += chunk.len();
        })
    }
}

/// `poll_fill_buf` hands out the first unconsumed segment (empty only at the end of the stream);
/// `consume` releases bytes.
impl AsyncBufRead for PipeReader {
    fn poll_fill_buf(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<&[u8]>> {
        byte_stream::poll_fill_buf(self.get_mut(), cx)
    }

    fn consume(self: Pin<&mut Self>, amt: usize) {
        self.get_mut().consume_filled(amt);
    }
}

/// A write copies into pooled blocks and returns at once, unless the bytes the reader has not
/// examined (flushed or staged) have reached the pause threshold: then it publishes and waits for
/// the reader first. `poll_flush` is the pipe's flush; `poll_close` completes the writer.
/// Cancel safe: a write that returns `Pending` staged nothing.
impl AsyncWrite for PipeWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        byte_stream::poll_write(self.get_mut(), cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        byte_stream::poll_write(self.get_mut(), cx, bufs)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        byte_stream::poll_flush(self.get_mut(), cx)
    }

    fn poll_close(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(byte_stream::shutdown(self.get_mut()))
    }
}

/// A futures-io object as the pumps' source, sink and stream.
struct FuturesIo<'a, T: ?Sized>(Pin<&'a mut T>);

impl<T: AsyncRead + ?Sized> Source for FuturesIo<'_, T> {
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        self.0.as_mut().poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + ?Sized> Sink for FuturesIo<'_, T> {
    fn poll_write_vectored(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.0.as_mut().poll_write_vectored(cx, bufs)
    }

    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.0.as_mut().poll_flush(cx)
    }
}

impl<T: AsyncRead + AsyncWrite + ?Sized> Duplex for FuturesIo<'_, T> {
    fn poll_shutdown(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.0.as_mut().poll_close(cx)
    }
}

/// The standalone pumps over this flavor's traits, for the pump tests (`super::pump_tests`):
/// applications reach the pumps through the pumped transport of `connection_with`.
#[cfg(test)]
pub(crate) fn fill<'a, R>(writer: &'a mut PipeWriter, source: &'a mut R) -> Fill<'a, R>
where
    R: AsyncRead + Unpin + ?Sized,
{
    Fill::new(writer, source)
}

#[cfg(test)]
pub(crate) type Fill<'a, R> = super::fill::Fill<'a, R, super::FuturesIo>;

#[cfg(test)]
impl<R: AsyncRead + Unpin + ?Sized> Future for Fill<'_, R> {
    type Output = io::Result<u64>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let (state, writer, source) = self.get_mut().parts();
        state.poll(cx, writer, &mut FuturesIo(Pin::new(source)))
    }
}

#[cfg(test)]
pub(crate) fn drain<'a, W>(reader: &'a mut PipeReader, sink: &'a mut W) -> Drain<'a, W>
where
    W: AsyncWrite + Unpin + ?Sized,
{
    Drain::new(reader, sink)
}

#[cfg(test)]
pub(crate) type Drain<'a, W> = super::drain::Drain<'a, W, super::FuturesIo>;

#[cfg(test)]
impl<W: AsyncWrite + Unpin + ?Sized> Future for Drain<'_, W> {
    type Output = io::Result<u64>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let (state, reader, sink) = self.get_mut().parts();
        state.poll(cx, reader, &mut FuturesIo(Pin::new(sink)))
    }
}

/// A duplex connection over a futures-io `stream` with default options: the application's
/// [`DuplexPipe`] and the [`Connection`] future of its end. Inline transport: the application's
/// reads read the stream and its flushes write it, the two halves sharing the stream behind a
/// mutex. See the [`io`](super) module docs for how the ends propagate.
pub fn connection<S>(stream: S) -> (DuplexPipe, Connection)
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    connection_with(stream, ConnectionOptions::default())
}

/// [`connection`] with the given options (the pumped transport among them).
pub fn connection_with<S>(stream: S, options: ConnectionOptions) -> (DuplexPipe, Connection)
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    if options.pumped {
        let (app, pumped) = Pumped::<S, super::FuturesIo>::new(stream, options);
        return (app, Connection::pumped(pumped));
    }
    let (read, write) = SharedStream::<_, super::FuturesIo>::split(stream);
    transport::connect(read, write, options)
}

impl<S: AsyncRead + AsyncWrite> Future for Pumped<S, super::FuturesIo> {
    type Output = Result<ConnectionEnd, ConnectionError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let (state, stream) = self.parts();
        state.poll(cx, &mut FuturesIo(stream))
    }
}

impl<S: AsyncRead + Send + 'static> ReadSide for SharedStream<S, super::FuturesIo> {
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        self.with(|stream| stream.poll_read(cx, buf))
    }
}

impl<S: AsyncWrite + Send + 'static> WriteSide for SharedStream<S, super::FuturesIo> {
    fn poll_write_vectored(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.with(|stream| stream.poll_write_vectored(cx, bufs))
    }

    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.with(|stream| stream.poll_flush(cx))
    }

    fn poll_shutdown(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.with(|stream| stream.poll_close(cx))
    }
}
