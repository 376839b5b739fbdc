//! `Framed`: one stream and one codec, a `Stream` of decoded frames and a `Sink` of items.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::Stream;

use super::{Decoder, Encoder, FrameWriter, Frames, Next};
use crate::io::{Connection, DuplexPipe};

/// A stream's frames both ways through one codec (tokio-util's `Framed`): a
/// [`Stream`](futures_core::Stream) of decoded frames and a [`futures_sink::Sink`] of items to
/// encode, over an inline connection, so reading a frame reads the socket and flushing writes it,
/// in the caller's own task. [`split`](Framed::split) gives the two halves, a [`FrameWriter`] and
/// a [`Frames`], for two tasks or a `forward`.
///
/// One codec, no `Clone` needed: the `Framed` decodes and encodes with the same value, so an
/// encoder sees what decoding saw (the state a request left when its response is encoded).
/// [`split`](Framed::split) gives each half a copy (it needs `C: Clone`), after which they no
/// longer share state.
///
/// The `Sink`'s flush returns once the stream took the bytes (as `FramedWrite`'s does); its close
/// once the write side is shut down. Errors come out where tokio-util's do: a decoder's error or
/// the stream's read error as an item, a write error from the flush.
///
/// Cancel safety: as its halves'. [`next`](Framed::next) and the `Stream` lose and repeat no
/// frame when dropped mid-wait (the bytes stay in the pipe); a dropped flush or close loses
/// nothing staged: the next flush or close goes on where it stopped.
///
/// A line echo server (feature `tokio`):
///
/// ```
/// use packetpipe::frame::{Framed, Lines};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// # let addr = listener.local_addr()?;
/// # let client = tokio::spawn(async move {
/// #     use tokio::io::{AsyncReadExt, AsyncWriteExt};
/// #     let mut tcp = tokio::net::TcpStream::connect(addr).await?;
/// #     tcp.write_all(b"hello\nworld\n").await?;
/// #     tcp.shutdown().await?;
/// #     let mut echo = String::new();
/// #     tcp.read_to_string(&mut echo).await?;
/// #     Ok::<_, std::io::Error>(echo)
/// # });
/// let (socket, _) = listener.accept().await?;
/// let (mut out, mut lines) = Framed::new(socket, Lines::new()).split();
/// while let Some(line) = lines.next().await {
///     out.send(line?).await?; // encoded, flushed: written to the socket within the call
/// }
/// out.close().await?; // the peer sees the end of the stream
/// # assert_eq!(client.await??, "hello\nworld\n");
/// # Ok(())
/// # })
/// # }
/// ```
#[derive(Debug)]
pub struct Framed<C> {
    /// The reading half, holding the one codec.
    frames: Frames<C>,
    /// The writing half, without an encoder of its own: items are encoded with the `frames`'
    /// codec.
    writer: FrameWriter<()>,
}

impl<C: Decoder> Framed<C> {
    /// Frames over a tokio stream (an inline connection: see
    /// [`io::tokio::connection`](crate::io::tokio::connection)), decoded and encoded with `codec`.
    #[cfg(feature = "tokio")]
    pub fn new<S>(stream: S, codec: C) -> Framed<C>
    where
        S: ::tokio::io::AsyncRead + ::tokio::io::AsyncWrite + Send + 'static,
    {
        let (app, connection) = crate::io::tokio::connection(stream);
        Framed::from_connection(app, connection, codec)
    }

    /// Frames over a connection of any flavor (futures-io, blocking std, or one built with
    /// options): the `Framed` drives the connection's output itself, so the connection's future
    /// is not spawned.
    pub fn from_connection(app: DuplexPipe, connection: Connection, codec: C) -> Framed<C> {
        Framed {
            frames: Frames::new(app.reader, codec),
            writer: FrameWriter::with_connection(app.writer, (), connection),
        }
    }
}

impl<C> Framed<C> {
    /// The writing half and the reading half, for two tasks or a
    /// [`forward`](FrameWriter::forward), each with a copy of the codec (hence `C: Clone`): from
    /// here on the encoder does not see what the decoder saw. A protocol whose responses depend on
    /// its requests carries what the encoder needs in the decoded item (the `http_server`
    /// example's requests carry whether the connection closes), or shares state inside the codec
    /// (an `Arc`), or keeps the `Framed` whole.
    pub fn split(self) -> (FrameWriter<C>, Frames<C>)
    where
        C: Clone,
    {
        let codec = self.frames.decoder().clone();
        (self.writer.map_encoder(|()| codec), self.frames)
    }

    /// The next frame (see [`Frames::next`]).
    #[inline]
    #[allow(clippy::should_implement_trait)] // a future, like `StreamExt::next`'s
    pub fn next(&mut self) -> Next<'_, C>
    where
        C: Decoder,
    {
        self.frames.next()
    }
}

impl<C: Decoder> Stream for Framed<C>
where
    C: Unpin,
{
    type Item = Result<C::Item, C::Error>;

    #[inline]
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Pin::new(&mut self.get_mut().frames).poll_next(cx)
    }
}

/// Encodes with the same codec the stream decodes with.
impl<C, I> futures_sink::Sink<I> for Framed<C>
where
    C: Encoder<I> + Unpin,
{
    type Error = C::Error;

    fn poll_ready(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.get_mut()
            .writer
            .poll_sink_ready(cx)
            .map_err(Into::into)
    }

    fn start_send(self: Pin<&mut Self>, item: I) -> Result<(), Self::Error> {
        let this = self.get_mut();
        this.frames
            .decoder_mut()
            .encode(item, this.writer.get_mut())
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.get_mut()
            .writer
            .poll_sink_flush(cx)
            .map_err(Into::into)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.get_mut()
            .writer
            .poll_sink_close(cx)
            .map_err(Into::into)
    }
}
