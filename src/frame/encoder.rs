//! The `Encoder` trait and `FrameWriter`: frames into a pipe writer, many frames per flush.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use futures_core::Stream;
use pin_project_lite::pin_project;

use super::FrameError;
use crate::io::Connection;
use crate::pipe::{FlushResult, PipeWriter};
use crate::ByteSegments;

/// Turns items into frames staged in a [`PipeWriter`].
///
/// `encode` writes through the writer's own methods: a header through
/// [`spare_mut`](PipeWriter::spare_mut) + [`commit`](PipeWriter::commit) or its
/// [`bytes::BufMut`] implementation, a payload [`append`](PipeWriter::append)ed zero-copy. It
/// stages; publishing is the flush's job, so many frames can share one flush. An encoder should
/// check everything that can fail before it stages a byte, so a failed item leaves nothing behind.
/// Its error type takes both the pipe's errors (what the writer's methods return) and the frame
/// module's, so `?` works on every call inside `encode`.
///
/// ```
/// # use packetpipe::ByteSegments;
/// use bytes::BufMut;
/// use packetpipe::frame::{Encoder, FrameError, FrameWriter};
/// use packetpipe::pipe::PipeWriter;
///
/// /// A one-byte tag, then a big-endian u32.
/// struct Tagged;
///
/// impl Encoder<(u8, u32)> for Tagged {
///     type Error = FrameError;
///
///     fn encode(&mut self, (tag, value): (u8, u32), dst: &mut PipeWriter) -> Result<(), FrameError> {
///         dst.put_u8(tag);
///         dst.put_u32(value);
///         Ok(())
///     }
/// }
///
/// let (writer, mut reader) = packetpipe::pipe();
/// let mut out = FrameWriter::new(writer, Tagged);
/// out.feed((1, 7))?;
/// packetpipe::block_on(out.send((2, 8)))?; // both frames, one flush
/// assert_eq!(reader.read_blocking()?.buffer.to_vec(), b"\x01\0\0\0\x07\x02\0\0\0\x08");
/// # Ok::<(), FrameError>(())
/// ```
pub trait Encoder<Item> {
    /// The error. Both the pipe's errors ([`crate::Error`], what the writer's methods return)
    /// and the frame module's ([`FrameError`]) convert into it, so `?` works on every call inside
    /// `encode` whatever the error type.
    type Error: From<FrameError> + From<crate::Error>;

    /// Stage `item` as a frame in `dst`.
    fn encode(&mut self, item: Item, dst: &mut PipeWriter) -> Result<(), Self::Error>;
}

impl<Item, E: Encoder<Item> + ?Sized> Encoder<Item> for &mut E {
    type Error = E::Error;

    fn encode(&mut self, item: Item, dst: &mut PipeWriter) -> Result<(), Self::Error> {
        (**self).encode(item, dst)
    }
}

/// Stage `head` then `tail`, copied, contiguous in one pooled block of the writer: an encoder's
/// copying path (a header and a small payload, a payload and its delimiter): straight into the
/// block of the last write when it has room, else one [`spare_mut`](PipeWriter::spare_mut) and
/// one [`commit`](PipeWriter::commit).
pub(crate) fn put_copied(
    dst: &mut PipeWriter,
    head: &[u8],
    tail: &(impl ByteSegments + ?Sized),
) -> Result<(), FrameError> {
    let total = head.len() + crate::ByteSegments::len(tail);
    let copy = |space: &mut [u8]| {
        space[..head.len()].copy_from_slice(head);
        tail.copy_prefix_to(&mut space[head.len()..total])
    };
    if let Some(staged) = dst.stage_in_place(total, copy) {
        return Ok(staged?);
    }
    // A new block (or a closed end's error).
    copy(dst.spare_mut(total)?)?;
    dst.commit(total)?;
    Ok(())
}

/// Staged bytes at which [`FrameWriter::forward`] (and the `Sink`'s `poll_ready`) flush before
/// going on, by default: the pipe's default pause threshold, so a long batch neither grows
/// without bound nor flushes more often than backpressure would make it wait anyway.
pub const DEFAULT_BATCH_BYTES: usize = 64 * 1024;

/// The writing side of framing: an [`Encoder`] over a [`PipeWriter`], sink-like.
///
/// - [`feed`](Self::feed) encodes and stages, no flush (many items, then one
///   [`flush`](Self::flush): one flush for the batch);
/// - [`send`](Self::send) encodes, then flushes once;
/// - [`forward`](Self::forward) encodes every item of a [`Stream`], flushing whenever the stream
///   has nothing ready (a burst of frames goes out with one flush) and each time
///   [`batch bytes`](Self::set_batch_bytes) are staged, to bound memory;
/// - [`flush`](Self::flush) publishes what is staged; [`close`](Self::close) flushes and
///   completes the writer.
///
/// Thread-based code runs the futures with [`crate::block_on`]. The flushes are the pipe's: they
/// wait only under backpressure, and report the reader's completion in their [`FlushResult`].
///
/// One difference from tokio-util's `FramedWrite`, on purpose: its `poll_ready` flushes (and
/// waits) once its buffer holds the backpressure boundary (8 KiB by default); `feed` here never
/// flushes or waits, since the caller decides when a batch is complete (one flush per burst is
/// the point of staging). The counterparts are [`set_batch_bytes`](Self::set_batch_bytes), at
/// which `forward` flushes, and the pipe's pause threshold, at which those flushes
/// wait for the reader: together they bound what is staged as the boundary does.
///
/// ```
/// # use packetpipe::ByteSegments;
/// # fn main() -> Result<(), packetpipe::frame::FrameError> {
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use packetpipe::frame::{FrameWriter, LengthDelimited};
///
/// let (writer, mut reader) = packetpipe::pipe();
/// let mut out = FrameWriter::new(writer, LengthDelimited::builder().length_field_type::<u8>().new_codec());
/// out.feed(&b"a"[..])?;
/// out.send(&b"bc"[..]).await?; // both frames, one flush
/// for item in [&b"d"[..], &b"e"[..]] {
///     out.feed(item)?;
/// }
/// out.flush().await?; // two more, one flush
/// assert_eq!(reader.read_buffer().await?.buffer.to_vec(), b"\x01a\x02bc\x01d\x01e");
/// # Ok(())
/// # })
/// # }
/// ```
#[derive(Debug)]
pub struct FrameWriter<E> {
    writer: PipeWriter,
    encoder: E,
    batch_bytes: usize,
    /// The connection whose output this writer drives (a [`Framed`](super::Framed)'s): its
    /// `Sink` flush waits until the stream took the bytes, its close until the write side is
    /// shut down.
    connection: Option<Connection>,
}

impl<E> FrameWriter<E> {
    /// Encode with `encoder` into `writer`.
    pub fn new(writer: PipeWriter, encoder: E) -> FrameWriter<E> {
        FrameWriter {
            writer,
            encoder,
            batch_bytes: DEFAULT_BATCH_BYTES,
            connection: None,
        }
    }

    /// Encode into a connection's output writer, driving the connection's output.
    pub(crate) fn with_connection(writer: PipeWriter, encoder: E, connection: Connection) -> Self {
        FrameWriter {
            connection: Some(connection.held_by_writer()),
            ..FrameWriter::new(writer, encoder)
        }
    }

    /// Flush within [`forward`](Self::forward) (and the `Sink`'s `poll_ready`) whenever this many
    /// bytes are staged (default [`DEFAULT_BATCH_BYTES`]; at least 1).
    pub fn set_batch_bytes(&mut self, bytes: usize) {
        self.batch_bytes = bytes.max(1);
    }

    /// Encode `item` and stage it, without flushing.
    ///
    /// ```
    /// # use packetpipe::ByteSegments;
    /// use packetpipe::frame::{FrameWriter, Lines};
    ///
    /// let (writer, mut reader) = packetpipe::pipe();
    /// let mut out = FrameWriter::new(writer, Lines::new());
    /// out.feed("staged")?;
    /// assert!(reader.try_read()?.is_none()); // not flushed yet
    /// packetpipe::block_on(out.flush())?;
    /// assert_eq!(reader.read_blocking()?.buffer.to_vec(), b"staged\n");
    /// # Ok::<(), packetpipe::frame::FrameError>(())
    /// ```
    pub fn feed<I>(&mut self, item: I) -> Result<(), E::Error>
    where
        E: Encoder<I>,
    {
        self.encoder.encode(item, &mut self.writer)
    }

    /// Encode and stage `item` now, then flush.
    ///
    /// Cancel safety: the item is staged when `send` is called, before the future is first
    /// polled; the future only flushes. Dropped before it completes, it loses nothing and
    /// duplicates nothing: the frame stays staged and goes out with the next flush, or when the
    /// writer completes.
    pub fn send<I>(&mut self, item: I) -> SendFuture<'_, E::Error>
    where
        E: Encoder<I>,
    {
        let error = self.feed(item).err();
        self.writer.start_flush();
        SendFuture {
            writer: &mut self.writer,
            connection: self.connection.as_mut(),
            error,
        }
    }

    /// Encode every item of `stream` as it comes, flushing whenever the stream has nothing ready
    /// (so a burst of frames shares one flush), whenever [`batch bytes`](Self::set_batch_bytes) are
    /// staged, and at its end. Ends with the stream, at its first error (what was encoded before it
    /// stays staged), or when a flush reports the reader completed.
    ///
    /// Cancel safety: each item taken from the stream is staged at once; dropped before it
    /// completes, the future loses and duplicates nothing (pass `&mut stream` to keep the rest).
    ///
    /// ```
    /// # use packetpipe::ByteSegments;
    /// # fn main() -> Result<(), packetpipe::frame::FrameError> {
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use packetpipe::frame::{FrameWriter, Frames, LengthDelimited};
    ///
    /// // An echo: every frame read from one pipe is written to another.
    /// let (mut inbound, reader) = packetpipe::pipe();
    /// let (writer, mut outbound) = packetpipe::pipe();
    /// inbound.write_slice(b"\0\0\0\x02hi\0\0\0\x03you")?;
    /// inbound.complete();
    /// let mut frames = Frames::new(reader, LengthDelimited::new());
    /// let mut out = FrameWriter::new(writer, LengthDelimited::new());
    /// out.forward(&mut frames).await?;
    /// assert_eq!(outbound.read_buffer().await?.buffer.to_vec(), b"\0\0\0\x02hi\0\0\0\x03you");
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn forward<S, T, X>(&mut self, stream: S) -> Forward<'_, E, S>
    where
        S: Stream<Item = Result<T, X>>,
        E: Encoder<T>,
        E::Error: From<X>,
    {
        Forward {
            frame_writer: self,
            stream,
            flushing: false,
            done: false,
        }
    }

    /// Publish what is staged (the pipe's [`flush_pipe`](PipeWriter::flush_pipe)).
    ///
    /// Cancel safety: dropping the future loses nothing; the bytes are published at its first
    /// poll, and a later flush waits again if backpressure still applies.
    pub fn flush(&mut self) -> SendFuture<'_, FrameError> {
        self.writer.start_flush();
        SendFuture {
            writer: &mut self.writer,
            connection: self.connection.as_mut(),
            error: None,
        }
    }

    /// The pipe writer.
    pub fn get_ref(&self) -> &PipeWriter {
        &self.writer
    }

    /// The pipe writer, mutably (to write or append around the frames).
    pub fn get_mut(&mut self) -> &mut PipeWriter {
        &mut self.writer
    }

    /// The encoder.
    pub fn encoder(&self) -> &E {
        &self.encoder
    }

    /// The encoder, mutably.
    pub fn encoder_mut(&mut self) -> &mut E {
        &mut self.encoder
    }

    /// The pipe writer back, with whatever is staged still staged.
    pub fn into_inner(self) -> PipeWriter {
        self.writer
    }

    /// Go on with another encoder, with what is staged still staged and the same batch size
    /// (tokio-util's `FramedWrite::map_encoder`).
    ///
    /// ```
    /// # use packetpipe::ByteSegments;
    /// use packetpipe::frame::{FrameWriter, LengthDelimited, Lines};
    ///
    /// let (writer, mut reader) = packetpipe::pipe();
    /// let mut out = FrameWriter::new(writer, Lines::new());
    /// out.feed("HELLO 1")?;
    /// let mut out = out.map_encoder(|_| LengthDelimited::new());
    /// packetpipe::block_on(out.send(&b"hi"[..]))?;
    /// assert_eq!(reader.read_blocking()?.buffer.to_vec(), b"HELLO 1\n\0\0\0\x02hi");
    /// # Ok::<(), packetpipe::frame::FrameError>(())
    /// ```
    pub fn map_encoder<F>(self, map: impl FnOnce(E) -> F) -> FrameWriter<F> {
        FrameWriter {
            writer: self.writer,
            encoder: map(self.encoder),
            batch_bytes: self.batch_bytes,
            connection: self.connection,
        }
    }

    /// Flush what is staged, complete the writer, and over a [`Framed`](super::Framed)'s
    /// connection wait until the stream took every byte and its write side is shut down (the
    /// `Sink`'s `close`). Cancel safe: dropped early, the writer may be completed already and
    /// the connection's future (or a later `close`) finishes the rest.
    pub fn close(&mut self) -> Close<'_, E> {
        Close { frame_writer: self }
    }

    /// The `Sink`'s `poll_ready`: flush first once the batch is full.
    pub(crate) fn poll_sink_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), FrameError>> {
        if self.writer.unflushed_len() >= self.batch_bytes {
            ready!(self.poll_sink_flush(cx))?;
        }
        Poll::Ready(Ok(()))
    }

    /// The `Sink` flush: publish, then (over a connection) wait until the stream took the bytes.
    pub(crate) fn poll_sink_flush(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), FrameError>> {
        ready!(poll_flush_through(
            &mut self.writer,
            self.connection.as_mut(),
            cx
        ))?;
        if self.connection.is_some() {
            // A write that failed meanwhile completed the output with its error: say so here.
            ready!(self.writer.poll_flush_pipe(cx))?;
        }
        Poll::Ready(Ok(()))
    }

    /// The `Sink` close: flush, complete the writer, and (over a connection) wait until the
    /// write side is shut down.
    pub(crate) fn poll_sink_close(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), FrameError>> {
        if !self.writer.is_writer_completed() {
            ready!(self.poll_sink_flush(cx))?;
            self.writer.complete();
        }
        if let Some(connection) = self.connection.as_mut() {
            ready!(connection.poll_output_closed(cx));
        }
        Poll::Ready(Ok(()))
    }
}

/// tokio-util's `FramedWrite` as a [`futures_sink::Sink`]: `poll_ready` flushes first once
/// [`set_batch_bytes`](FrameWriter::set_batch_bytes) bytes are staged (the backpressure
/// boundary), `start_send` encodes and stages the item, `poll_flush` publishes (and, over a
/// connection, waits until the stream took the bytes), `poll_close` flushes and completes the
/// writer (over a connection, once the write side is shut down). A flush that finds the reader
/// gone is an error ([`crate::Error::ReaderGone`] or the reader's error).
impl<E: Encoder<I>, I> futures_sink::Sink<I> for FrameWriter<E>
where
    E: Unpin,
{
    type Error = E::Error;

    fn poll_ready(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.get_mut().poll_sink_ready(cx).map_err(Into::into)
    }

    fn start_send(self: Pin<&mut Self>, item: I) -> Result<(), Self::Error> {
        self.get_mut().feed(item)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.get_mut().poll_sink_flush(cx).map_err(Into::into)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.get_mut().poll_sink_close(cx).map_err(Into::into)
    }
}

/// Future of [`FrameWriter::send`] and [`FrameWriter::flush`]: the flush (after the item was
/// staged); over a [`Framed`](super::Framed)'s connection it returns once the stream took the
/// bytes.
#[must_use = "futures do nothing unless polled"]
pub struct SendFuture<'a, Er> {
    writer: &'a mut PipeWriter,
    connection: Option<&'a mut Connection>,
    error: Option<Er>,
}

// Nothing in it is pinned: the error is only ever moved out.
impl<Er> Unpin for SendFuture<'_, Er> {}

impl<Er: From<FrameError>> Future for SendFuture<'_, Er> {
    type Output = Result<FlushResult, Er>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Some(e) = this.error.take() {
            return Poll::Ready(Err(e));
        }
        poll_flush_through(this.writer, this.connection.as_deref_mut(), cx).map_err(Into::into)
    }
}

/// Flush `writer`; over a connection, also write the connection's output until the stream took
/// every byte (nobody else does for a `Framed`): a flush paused at the output's threshold waits
/// for the stream, which this poll writes to, not for another task.
fn poll_flush_through(
    writer: &mut PipeWriter,
    connection: Option<&mut Connection>,
    cx: &mut Context<'_>,
) -> Poll<Result<FlushResult, FrameError>> {
    let Some(connection) = connection else {
        return writer.poll_flush_pipe(cx).map_err(FrameError::from);
    };
    loop {
        let flushed = writer.poll_flush_pipe(cx);
        if matches!(flushed, Poll::Ready(Ok(_))) && writer.is_published_examined() {
            // The flush wrote its bytes to the stream itself (or published none the stream has
            // not taken): nothing is left to wait for.
            return flushed.map_err(FrameError::from);
        }
        // Either way the stream gets what is published; `Pending` here registered `cx` with it.
        let written = connection.poll_flushed(cx);
        match (flushed, written) {
            (Poll::Ready(result), Poll::Ready(())) => {
                return Poll::Ready(result.map_err(FrameError::from))
            }
            (Poll::Ready(Err(e)), _) => return Poll::Ready(Err(e.into())),
            (_, Poll::Pending) => return Poll::Pending,
            // Paused, and the stream took everything: the pause is lifted, flush again.
            (Poll::Pending, Poll::Ready(())) => {}
        }
    }
}

impl<Er> std::fmt::Debug for SendFuture<'_, Er> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SendFuture")
    }
}

/// Future of [`FrameWriter::close`].
#[must_use = "futures do nothing unless polled"]
pub struct Close<'a, E> {
    frame_writer: &'a mut FrameWriter<E>,
}

impl<E> Future for Close<'_, E> {
    type Output = Result<(), FrameError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.get_mut().frame_writer.poll_sink_close(cx)
    }
}

impl<E> std::fmt::Debug for Close<'_, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Close")
    }
}

/// Poll the writer's flush; `Some(result)` when the batch loop must stop with it.
fn poll_flush_step<Er: From<FrameError>>(
    writer: &mut PipeWriter,
    connection: Option<&mut Connection>,
    cx: &mut Context<'_>,
    done: bool,
) -> Poll<Result<Option<FlushResult>, Er>> {
    let result = ready!(poll_flush_through(writer, connection, cx))?;
    let stop = done || result.is_completed || result.is_canceled;
    Poll::Ready(Ok(stop.then_some(result)))
}

pin_project! {
    /// Future of [`FrameWriter::forward`].
    #[must_use = "futures do nothing unless polled"]
    pub struct Forward<'a, E, S> {
        frame_writer: &'a mut FrameWriter<E>,
        #[pin]
        stream: S,
        flushing: bool,
        done: bool,
    }
}

impl<E, S, T, X> Future for Forward<'_, E, S>
where
    S: Stream<Item = Result<T, X>>,
    E: Encoder<T>,
    E::Error: From<X>,
{
    type Output = Result<(), E::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        // The stream answered `Pending` in this poll: its waker is registered, so once the burst
        // is flushed there is nothing to do until it wakes us (polling it again would only
        // register again).
        let mut stream_pending = false;
        loop {
            if *this.flushing {
                if ready!(poll_flush_step::<E::Error>(
                    &mut this.frame_writer.writer,
                    this.frame_writer.connection.as_mut(),
                    cx,
                    *this.done
                ))?
                .is_some()
                {
                    return Poll::Ready(Ok(()));
                }
                *this.flushing = false;
                if stream_pending {
                    return Poll::Pending;
                }
            }
            match this.stream.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(item))) => {
                    this.frame_writer.feed(item)?;
                    let writer = &this.frame_writer.writer;
                    // A reader found completed while encoding: writes are discarded from here, so
                    // flush now, which reports it (or its error) and ends the forward.
                    *this.flushing = writer.unflushed_len() >= this.frame_writer.batch_bytes
                        || writer.is_reader_completed();
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(e.into())),
                Poll::Ready(None) => {
                    *this.done = true;
                    *this.flushing = true;
                }
                Poll::Pending => {
                    let writer = &this.frame_writer.writer;
                    if writer.unflushed_len() == 0 && !writer.is_reader_completed() {
                        return Poll::Pending;
                    }
                    // Nothing more ready: publish the burst staged so far.
                    *this.flushing = true;
                    stream_pending = true;
                }
            }
        }
    }
}

impl<E, S> std::fmt::Debug for Forward<'_, E, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Forward")
    }
}
