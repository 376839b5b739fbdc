//! Blocking connections over std's streams: the same [`DuplexPipe`] and [`Connection`] as the
//! async flavors, and no thread of their own.
//!
//! The application's blocking reads ([`read_blocking`](crate::pipe::PipeReader::read_blocking),
//! `std::io::Read`, a blocking frame iterator) read the stream on the calling thread, and its
//! blocking flushes write it there; completing (or dropping) the writer shuts down the stream's
//! write side after the last byte. While the application holds no unconsumed byte, a read goes
//! through a per-thread scratch buffer and only the bytes that came are copied into the pipe, so
//! a connection blocked waiting for its peer holds no pooled block; bytes of a frame in progress
//! are read straight into the pipe's block.
//!
//! [`block_on(connection)`](crate::block_on) returns how the connection ended, once both
//! directions have. The
//! reads and flushes here block rather than return futures; the futures of the pipe ends, if
//! used on such a connection, keep their cancel safety (a read that is dropped consumed nothing),
//! but each poll may block its thread in the stream's read or write.
//!
//! A length-prefixed echo over `std::net::TcpStream`:
//!
//! ```
//! use packetpipe::frame::{FrameWriter, Frames, LengthDelimited};
//! use std::io::{Read, Write};
//!
//! let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
//! let addr = listener.local_addr()?;
//! let client = std::thread::spawn(move || -> std::io::Result<Vec<u8>> {
//!     let mut tcp = std::net::TcpStream::connect(addr)?;
//!     tcp.write_all(b"\x00\x00\x00\x05hello")?;
//!     tcp.shutdown(std::net::Shutdown::Write)?;
//!     let mut echo = Vec::new();
//!     tcp.read_to_end(&mut echo)?;
//!     Ok(echo)
//! });
//!
//! let (tcp, _) = listener.accept()?;
//! let (app, connection) = packetpipe::io::blocking::connection(tcp);
//! let mut frames = Frames::new(app.reader, LengthDelimited::new());
//! let mut out = FrameWriter::new(app.writer, LengthDelimited::new());
//! for frame in frames.iter_blocking() {
//!     packetpipe::block_on(out.send(frame?))?;
//! }
//! drop((frames, out)); // the write side closes after the last byte
//! let end = packetpipe::block_on(connection)?;
//! assert!(end.peer_closed);
//! assert_eq!(client.join().unwrap()?, b"\x00\x00\x00\x05hello");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, TcpStream};
#[cfg(unix)]
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::task::{Context, Poll};

use super::transport::{self, ReadSide, WriteSide};
use super::{Connection, ConnectionOptions, DuplexPipe};

/// A std stream both of whose halves are `&Self` (`TcpStream`, `UnixStream`).
trait ByRef: Send + Sync + 'static
where
    for<'a> &'a Self: Read + Write,
{
    fn shutdown_write(&self) -> io::Result<()>;
}

impl ByRef for TcpStream {
    fn shutdown_write(&self) -> io::Result<()> {
        self.shutdown(Shutdown::Write)
    }
}

#[cfg(unix)]
impl ByRef for UnixStream {
    fn shutdown_write(&self) -> io::Result<()> {
        self.shutdown(Shutdown::Write)
    }
}

/// One half of a std stream shared by reference.
struct Half<S>(Arc<S>);

impl<S: ByRef> ReadSide for Half<S>
where
    for<'a> &'a S: Read + Write,
{
    const BLOCKING: bool = true;

    fn poll_read(&mut self, _cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        Poll::Ready((&*self.0).read(buf))
    }
}

impl<S: ByRef> WriteSide for Half<S>
where
    for<'a> &'a S: Read + Write,
{
    fn try_write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        (&*self.0).write_vectored(bufs)
    }

    fn poll_write_vectored(
        &mut self,
        _cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Poll::Ready((&*self.0).write_vectored(bufs))
    }

    fn poll_shutdown(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.0.shutdown_write())
    }
}

/// A std stream a blocking connection can run over: `TcpStream`, `UnixStream`, or the two
/// halves of any other stream as a `(reader, writer)` pair (a serial port's clones, a child
/// process's stdout and stdin).
pub trait Stream: sealed::Sealed {
    #[doc(hidden)]
    fn connect(self, options: ConnectionOptions) -> (DuplexPipe, Connection);
}

mod sealed {
    pub trait Sealed {}
}

impl sealed::Sealed for TcpStream {}
impl Stream for TcpStream {
    fn connect(self, options: ConnectionOptions) -> (DuplexPipe, Connection) {
        let stream = Arc::new(self);
        transport::connect(Half(stream.clone()), Half(stream), options)
    }
}

#[cfg(unix)]
impl sealed::Sealed for UnixStream {}
#[cfg(unix)]
impl Stream for UnixStream {
    fn connect(self, options: ConnectionOptions) -> (DuplexPipe, Connection) {
        let stream = Arc::new(self);
        transport::connect(Half(stream.clone()), Half(stream), options)
    }
}

/// The read half of a `(reader, writer)` pair.
struct PairRead<R>(R);
/// The write half of a `(reader, writer)` pair: shutting down is flushing (dropping the writer,
/// with the connection's end, closes it).
struct PairWrite<W>(W);

impl<R: Read + Send + Sync + 'static> ReadSide for PairRead<R> {
    const BLOCKING: bool = true;

    fn poll_read(&mut self, _cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        Poll::Ready(self.0.read(buf))
    }
}

impl<W: Write + Send + Sync + 'static> WriteSide for PairWrite<W> {
    fn try_write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.0.write_vectored(bufs)
    }

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

    fn poll_shutdown(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.0.flush())
    }
}

impl<R: Read + Send + Sync + 'static, W: Write + Send + Sync + 'static> sealed::Sealed for (R, W) {}
impl<R: Read + Send + Sync + 'static, W: Write + Send + Sync + 'static> Stream for (R, W) {
    fn connect(self, options: ConnectionOptions) -> (DuplexPipe, Connection) {
        transport::connect(PairRead(self.0), PairWrite(self.1), options)
    }
}

/// A blocking duplex connection over `stream` with default options: the application's
/// [`DuplexPipe`] and the [`Connection`], which [`block_on`](crate::block_on) runs until it says
/// how the connection ended. The [module docs](self) have an example.
pub fn connection(stream: impl Stream) -> (DuplexPipe, Connection) {
    connection_with(stream, ConnectionOptions::default())
}

/// [`connection`] with the given options.
///
/// # Panics
///
/// If `options.pumped` is set: the pumped transport needs an async flavor (`io::tokio`,
/// `io::futures`); a blocking connection is always inline.
#[track_caller]
pub fn connection_with(
    stream: impl Stream,
    options: ConnectionOptions,
) -> (DuplexPipe, Connection) {
    assert!(
        !options.pumped,
        "ConnectionOptions::pumped is true, but a blocking connection has the inline transport \
         only (the pumped one needs io::tokio or io::futures)"
    );
    stream.connect(options)
}
