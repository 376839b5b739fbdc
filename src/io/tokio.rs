//! tokio: `AsyncRead + AsyncBufRead` for [`PipeReader`], `AsyncWrite` for [`PipeWriter`], and the
//! duplex connection over tokio's I/O traits (feature `tokio`).
//!
//! A tokio echo server on the duplex connection:
//!
//! ```
//! use tokio::io::AsyncWriteExt;
//! use tokio::net::TcpListener;
//!
//! # fn main() -> std::io::Result<()> {
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let listener = TcpListener::bind("127.0.0.1:0").await?;
//! # let addr = listener.local_addr()?;
//! # let client = tokio::spawn(async move {
//! #     let mut tcp = tokio::net::TcpStream::connect(addr).await?;
//! #     tcp.write_all(b"ping").await?;
//! #     tcp.shutdown().await?;
//! #     let mut echo = Vec::new();
//! #     tokio::io::AsyncReadExt::read_to_end(&mut tcp, &mut echo).await?;
//! #     Ok::<_, std::io::Error>(echo)
//! # });
//! let (tcp, _) = listener.accept().await?;
//! let (mut app, connection) = packetpipe::io::tokio::connection(tcp);
//! tokio::spawn(connection); // returns when both directions have ended
//! // The application: echo every byte back, straight from the input's segments.
//! tokio::io::copy_buf(&mut app.reader, &mut app.writer).await?;
//! app.writer.shutdown().await?; // completes the output: the socket's write side closes
//! # assert_eq!(client.await.unwrap()?, b"ping");
//! # Ok(())
//! # })
//! # }
//! ```
//!
//! A one-way source (a file, a child process's stdout) needs no connection: the writer is a
//! [`bytes::BufMut`], so `read_buf` reads straight into its pooled block, and a flush publishes
//! the bytes (waiting while the reader lags by the pause threshold):
//!
//! ```
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//!
//! # fn main() -> std::io::Result<()> {
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let (mut writer, mut reader) = packetpipe::pipe();
//! let mut source: &[u8] = b"from any tokio AsyncRead"; // a File, a ChildStdout, ...
//! while source.read_buf(&mut writer).await? > 0 {
//!     writer.flush().await?;
//! }
//! writer.shutdown().await?; // completes the writer: the reader sees the end of the stream
//! let mut got = Vec::new();
//! reader.read_to_end(&mut got).await?;
//! assert_eq!(got, b"from any tokio AsyncRead");
//! # Ok(())
//! # })
//! # }
//! ```

use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use ::tokio::io::{AsyncBufRead, AsyncRead, AsyncWrite, ReadBuf};

use std::any::Any;

use ::tokio::net::{tcp, TcpStream};
#[cfg(unix)]
use ::tokio::net::{unix, UnixStream};

use super::byte_stream;
use super::drain::Sink;
use super::fill::Source;
use super::pumped::{Duplex, Pumped};
use super::transport::{self, ReadSide, SharedStream, WriteSide};
use super::{Connection, ConnectionEnd, ConnectionError, ConnectionOptions, DuplexPipe};
use crate::pipe::{PipeReader, PipeWriter};

/// Reads return the unconsumed bytes, waiting only when there are none; end of stream (no bytes
/// filled) once the writer has completed and everything is read; a writer's completion error is
/// returned as that error. Cancel safe: a read that returns `Pending` consumed nothing.
impl AsyncRead for PipeReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let max = buf.remaining();
        byte_stream::poll_read(self.get_mut(), cx, max, |chunk| buf.put_slice(chunk)).map_ok(drop)
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
/// the reader first. `poll_flush` is the pipe's flush; `poll_shutdown` completes the writer.
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

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        byte_stream::poll_flush(self.get_mut(), cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(byte_stream::shutdown(self.get_mut()))
    }
}

/// A tokio I/O object as the pumps' source, sink and stream.
struct TokioIo<'a, T: ?Sized>(Pin<&'a mut T>);

impl<T: AsyncRead + ?Sized> Source for TokioIo<'_, T> {
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        let mut buf = ReadBuf::new(buf);
        ready!(self.0.as_mut().poll_read(cx, &mut buf))?;
        Poll::Ready(Ok(buf.filled().len()))
    }
}

impl<T: AsyncWrite + ?Sized> Sink for TokioIo<'_, T> {
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

impl<T: AsyncRead + AsyncWrite + ?Sized> Duplex for TokioIo<'_, T> {
    fn poll_shutdown(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.0.as_mut().poll_shutdown(cx)
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
pub(crate) type Fill<'a, R> = super::fill::Fill<'a, R, super::Tokio>;

#[cfg(test)]
impl<R: AsyncRead + Unpin + ?Sized> Future for Fill<'_, R> {
    type Output = io::Result<u64>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let (state, writer, source) = self.get_mut().parts();
        state.poll(cx, writer, &mut TokioIo(Pin::new(source)))
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
pub(crate) type Drain<'a, W> = super::drain::Drain<'a, W, super::Tokio>;

#[cfg(test)]
impl<W: AsyncWrite + Unpin + ?Sized> Future for Drain<'_, W> {
    type Output = io::Result<u64>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let (state, reader, sink) = self.get_mut().parts();
        state.poll(cx, reader, &mut TokioIo(Pin::new(sink)))
    }
}

/// A duplex connection over `stream` with default options: the application's [`DuplexPipe`] and
/// the [`Connection`] future of its end (spawn it, or join it with the application). The
/// [module docs](self) have an example; the [`io`](super) module docs say how the ends propagate.
///
/// Inline transport: the application's reads read the stream and its flushes write it. tokio's
/// `TcpStream` and `UnixStream` are read on readiness (`poll_read_ready`, then their read, so a
/// connection waiting for its peer holds no pooled block) and written with `try_write_vectored`;
/// any other stream through its `AsyncRead` and `AsyncWrite`, its halves sharing it behind a
/// mutex.
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
        let (app, pumped) = Pumped::<S, super::Tokio>::new(stream, options);
        return (app, Connection::pumped(pumped));
    }
    let mut slot = Some(stream);
    let any: &mut dyn Any = &mut slot;
    #[cfg(feature = "tls")]
    if let Some(tls) = any.downcast_mut::<Option<super::tls::TlsStream<TcpStream>>>() {
        if tls.as_ref().is_some_and(|tls| tls.is_fresh()) {
            let tls = tls.take().expect("just put");
            return super::tls::inline::connect(tls, TcpStream::into_split, options);
        }
    }
    #[cfg(all(feature = "tls", unix))]
    if let Some(tls) = any.downcast_mut::<Option<super::tls::TlsStream<UnixStream>>>() {
        if tls.as_ref().is_some_and(|tls| tls.is_fresh()) {
            let tls = tls.take().expect("just put");
            return super::tls::inline::connect(tls, UnixStream::into_split, options);
        }
    }
    if let Some(tcp) = any.downcast_mut::<Option<TcpStream>>() {
        let (read, write) = tcp.take().expect("just put").into_split();
        return transport::connect(read, write, options);
    }
    #[cfg(unix)]
    if let Some(unix) = any.downcast_mut::<Option<UnixStream>>() {
        let (read, write) = unix.take().expect("just put").into_split();
        return transport::connect(read, write, options);
    }
    let (read, write) = SharedStream::<_, super::Tokio>::split(slot.take().expect("just put"));
    transport::connect(read, write, options)
}

impl<S: AsyncRead + AsyncWrite> Future for Pumped<S, super::Tokio> {
    type Output = Result<ConnectionEnd, ConnectionError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let (state, stream) = self.parts();
        state.poll(cx, &mut TokioIo(stream))
    }
}

/// Readiness first: `poll_read_ready` before a block is rented (no zero-byte read probe), then
/// tokio's own read, which after a short read forgets the readiness, so the next wait costs no
/// system call.
macro_rules! ready_halves {
    ($read:ty, $write:ty, $stream:ty) => {
        impl ReadSide for $read {
            fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                AsRef::<$stream>::as_ref(self).poll_read_ready(cx)
            }

            fn poll_read(
                &mut self,
                cx: &mut Context<'_>,
                buf: &mut [u8],
            ) -> Poll<io::Result<usize>> {
                let mut buf = ReadBuf::new(buf);
                ready!(AsyncRead::poll_read(Pin::new(self), cx, &mut buf))?;
                Poll::Ready(Ok(buf.filled().len()))
            }
        }

        impl WriteSide for $write {
            fn try_write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
                <$write>::try_write_vectored(self, bufs)
            }

            fn poll_write_vectored(
                &mut self,
                cx: &mut Context<'_>,
                bufs: &[IoSlice<'_>],
            ) -> Poll<io::Result<usize>> {
                AsyncWrite::poll_write_vectored(Pin::new(self), cx, bufs)
            }

            fn poll_shutdown(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                AsyncWrite::poll_shutdown(Pin::new(self), cx)
            }
        }
    };
}

ready_halves!(tcp::OwnedReadHalf, tcp::OwnedWriteHalf, TcpStream);
#[cfg(unix)]
ready_halves!(unix::OwnedReadHalf, unix::OwnedWriteHalf, UnixStream);

impl<S: AsyncRead + Send + 'static> ReadSide for SharedStream<S, super::Tokio> {
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        self.with(|stream| {
            let mut buf = ReadBuf::new(buf);
            ready!(stream.poll_read(cx, &mut buf))?;
            Poll::Ready(Ok(buf.filled().len()))
        })
    }
}

impl<S: AsyncWrite + Send + 'static> WriteSide for SharedStream<S, super::Tokio> {
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
        self.with(|stream| stream.poll_shutdown(cx))
    }
}
