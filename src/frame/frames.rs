//! `Frames<D>`: a decoder driven over a pipe reader, as a `Stream` and as a blocking iterator.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::{FusedStream, Stream};

use super::{DecodeBuf, Decoded, Decoder, FrameError};
use crate::pipe::PipeReader;

/// Where a [`Frames`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// No read in hand: wait until the pipe holds at least this many unconsumed bytes.
    Wait(usize),
    /// A read in hand: decode from it.
    Decode,
    /// The writer completed: `decode_eof` until it returns `None`.
    Eof,
    /// The decoder failed: ended until [`Frames::resume`].
    Failed,
    /// Ended for good (the writer's completion or an error of the pipe).
    Done,
}

/// The frames of a pipe: a [`Decoder`] driven over a [`PipeReader`].
///
/// A [`Stream`] of `Result<D::Item, D::Error>` for async code, and a blocking iterator
/// ([`iter_blocking`](Self::iter_blocking)) for threads.
///
/// How it reads: frames are decoded from the bytes at hand, one per poll, without touching the
/// pipe's synchronization; when the decoder answers [`Decoded::NeedAtLeast(n)`](Decoded::NeedAtLeast),
/// everything is marked examined and the stream waits with
/// [`read_at_least(n)`](PipeReader::read_at_least): the writer's backpressure is lifted until the
/// n bytes are there (a frame larger than the pause threshold still arrives), and the reader is
/// woken once when they are, not once per segment.
///
/// How it ends, as tokio-util's `FramedRead`:
/// - when the writer completes, the last frames are yielded ([`Decoder::decode_eof`]), then an
///   error if bytes of an incomplete frame remain ([`FrameError::BytesRemaining`] by default), then
///   `None` for good. `decode_eof` is called in `FramedRead`'s order: bytes that arrive with the
///   end are first decoded with [`decode`](Decoder::decode); a completion that brings no new byte
///   goes straight to `decode_eof` (no `decode` of bytes it has already answered for);
/// - after a decoder error the stream yields `None` ([`FusedStream::is_terminated`] is true);
///   [`resume`](Self::resume) goes on decoding (the built-in delimiter decoders then skip the
///   over-long frame; `FramedRead` resumes the same way when polled after that `None`). One
///   deliberate difference: a resumed stream decodes the bytes already in the pipe at once, where
///   `FramedRead` first waits for its next read to return (new bytes or the end), so a complete
///   frame already received would sit there until the peer sends more;
/// - an error of the pipe (the writer completed with an error) is yielded, then `None` for good;
/// - a decoder that calls [`DecodeBuf::end_stream`] ends it after the frame it returns (then
///   `None` for good, without reading the pipe again; the bytes after that frame stay in the
///   pipe), as a `FramedRead` whose stream ended right after that frame would;
/// - a read canceled through [`PipeCanceler`](crate::pipe::PipeCanceler) yields
///   [`FrameError::Canceled`] and the stream goes on.
///
/// Cancel safety: a poll may be abandoned at any point (a `next()` future dropped in a `select!`):
/// a frame is taken out of the pipe only in the poll that returns it, and a poll that returns
/// `Pending` leaves every byte in the pipe, so no frame is lost or yielded twice
/// (`tests-integration/tests/io_cancel.rs` drops it 10,000 times while it waits).
///
/// [`into_inner`](Self::into_inner) hands the reader back with every unconsumed byte intact: the
/// bytes of a partial frame stay in the pipe, and the reader's next `read_buffer` returns them at
/// once.
///
/// ```
/// # use packetpipe::ByteSegments;
/// # fn main() -> Result<(), packetpipe::frame::FrameError> {
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use packetpipe::frame::{Frames, Lines};
///
/// let (mut writer, reader) = packetpipe::pipe();
/// writer.write_slice(b"hello\r\nworld\npart")?;
/// writer.flush_pipe().await?;
/// let mut lines = Frames::new(reader, Lines::new());
/// assert_eq!(lines.next().await.unwrap()?, "hello");
/// assert_eq!(lines.next().await.unwrap()?, "world");
/// let mut reader = lines.into_inner(); // "part" is still in the pipe
/// assert_eq!(reader.read_buffer().await?.buffer.to_vec(), b"part");
/// # Ok(())
/// # })
/// # }
/// ```
pub struct Frames<D> {
    reader: PipeReader,
    decoder: D,
    state: State,
    /// [`DecodeBuf::contiguous`]'s copies of bytes that span segments, reused.
    scratch: Vec<u8>,
    /// Bytes the buffer held when the stream last began to wait ([`State::Wait`]): a read that
    /// finds the writer completed and no byte beyond them goes straight to `decode_eof`, as
    /// `FramedRead` calls `decode_eof` (not `decode`) on the read that returns the end. 0 before
    /// the first read; `usize::MAX` after [`Frames::resume`] (`FramedRead`'s read after an error:
    /// if it finds the end, `decode_eof` follows, whatever the buffer holds).
    seen: usize,
}

impl<D> Unpin for Frames<D> {}

impl<D: Decoder> Frames<D> {
    /// Decode the bytes `reader` receives with `decoder`.
    pub fn new(reader: PipeReader, decoder: D) -> Frames<D> {
        Frames {
            reader,
            decoder,
            state: State::Wait(1),
            scratch: Vec::new(),
            seen: 0,
        }
    }

    /// The next frame, `None` at the end: the future of [`StreamExt::next`], with the decode step
    /// inlined into the task that awaits it.
    ///
    /// `frames.next().await` calls this method, not the `Stream` one (an inherent method wins),
    /// so existing code gets it without a change; code generic over `S: Stream` still calls
    /// `StreamExt::next`. Why it exists: the compiler does not inline
    /// `StreamExt::next`'s poll into an awaiting task, so each frame came back through memory, in
    /// a copy that cost about 12 ns per frame on the machine of BENCHMARKS.md ("frames": "The
    /// decode step inlined"). Cancel safe, as the stream is.
    ///
    /// ```
    /// # fn main() -> Result<(), packetpipe::frame::FrameError> {
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use packetpipe::frame::{Frames, LengthDelimited};
    ///
    /// let (mut writer, reader) = packetpipe::pipe();
    /// writer.write_slice(b"\0\0\0\x02hi\0\0\0\x03you")?;
    /// writer.complete();
    /// let mut frames = Frames::new(reader, LengthDelimited::new());
    /// let mut got = Vec::new();
    /// while let Some(frame) = frames.next().await {
    ///     got.push(frame?.to_vec());
    /// }
    /// assert_eq!(got, [b"hi".to_vec(), b"you".to_vec()]);
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    ///
    /// [`StreamExt::next`]: https://docs.rs/futures/latest/futures/stream/trait.StreamExt.html#method.next
    // Not `Iterator::next` (clippy's guess from the name): the async `next` of `StreamExt`, made
    // inherent on purpose (see above); the blocking iterator is `iter_blocking`.
    #[allow(clippy::should_implement_trait)]
    #[inline]
    pub fn next(&mut self) -> Next<'_, D> {
        Next { frames: self }
    }

    /// The next frame, parking the thread while waiting for bytes; `None` at the end.
    // Always inlined, as `next`'s poll: a call returns each item through memory (`Frames::next`).
    #[inline(always)]
    fn next_blocking(&mut self) -> Option<Result<D::Item, D::Error>> {
        let step = self.step(|reader, n| Poll::Ready(reader.read_at_least_blocking(n).map(|_| ())));
        match step {
            Poll::Ready(item) => item,
            Poll::Pending => unreachable!("a blocking read never returns Pending"),
        }
    }

    /// An iterator over the frames that parks the thread while waiting for bytes (in async code,
    /// `frames.next().await`).
    ///
    /// ```
    /// use packetpipe::frame::{Frames, Lines};
    ///
    /// let (mut writer, reader) = packetpipe::pipe();
    /// writer.write_slice(b"one\ntwo\n")?;
    /// writer.complete();
    /// let mut lines = Frames::new(reader, Lines::new());
    /// let mut iter = lines.iter_blocking();
    /// assert_eq!(iter.next().unwrap()?, "one"); // one frame
    /// assert_eq!(iter.collect::<Result<Vec<_>, _>>()?, ["two"]); // or all of them
    /// # Ok::<(), packetpipe::frame::FrameError>(())
    /// ```
    pub fn iter_blocking(&mut self) -> IterBlocking<'_, D> {
        IterBlocking { frames: self }
    }

    /// After a decoder error (the stream then ended), go on decoding. Returns whether there was
    /// such an error to resume from; after the writer's completion or a pipe error there is
    /// nothing to resume.
    pub fn resume(&mut self) -> bool {
        if self.state == State::Failed {
            // Read again before decoding (as `FramedRead` does), so a completion of the writer
            // since the last read is seen: examined everything, and at least one byte is there
            // unless the buffer was empty.
            if let Some(len) = self.reader.last_read().map(|r| r.buffer.len()) {
                let _ = self.reader.advance_to(0, len);
            }
            self.state = State::Wait(1);
            self.seen = usize::MAX;
            true
        } else {
            false
        }
    }

    /// One step: the next item, the end, or `Pending` when `wait` is pending.
    /// `wait` waits for at least n unconsumed bytes: a poll, or a blocking read. Generic rather
    /// than `dyn`, so the step inlines into `poll_next` with its closure.
    #[inline(always)]
    fn step(
        &mut self,
        mut wait: impl FnMut(&mut PipeReader, usize) -> Poll<Result<(), crate::Error>>,
    ) -> Poll<Option<Result<D::Item, D::Error>>> {
        loop {
            match self.state {
                State::Done | State::Failed => return Poll::Ready(None),
                State::Wait(n) => match wait(&mut self.reader, n) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok(())) => {
                        // A read that finds the writer completed and nothing new is
                        // `FramedRead`'s read of the end: `decode_eof` from there on (`decode`
                        // said it needs more of these bytes already), and its errors end the
                        // stream. New bytes with the end are decoded first, as `FramedRead`
                        // decodes what a read brings before the read that returns the end.
                        let at_end = self
                            .reader
                            .last_read()
                            .is_some_and(|r| r.is_completed && r.buffer.len() <= self.seen);
                        self.state = if at_end { State::Eof } else { State::Decode };
                    }
                    Poll::Ready(Err(e)) => {
                        self.state = State::Done;
                        return Poll::Ready(Some(Err(FrameError::from(e).into())));
                    }
                },
                State::Decode => {
                    let (completed, canceled) = match self.reader.last_status() {
                        Some(status) => status,
                        None => {
                            self.state = State::Wait(1);
                            self.seen = 0;
                            continue;
                        }
                    };
                    let mut buf = DecodeBuf::new(&mut self.reader, &mut self.scratch);
                    // `end_stream` is checked in each arm rather than on the result first: the
                    // frame then goes straight back, never through memory for a check.
                    match self.decoder.decode(&mut buf) {
                        Ok(Decoded::Frame(item)) => {
                            if buf.end {
                                self.state = State::Done;
                            }
                            return Poll::Ready(Some(Ok(item)));
                        }
                        Ok(Decoded::NeedAtLeast(_)) if buf.end => {
                            self.state = State::Done;
                            return Poll::Ready(None);
                        }
                        Ok(Decoded::NeedAtLeast(n)) => {
                            let len = buf.len();
                            if completed {
                                self.state = State::Eof;
                                continue;
                            }
                            self.seen = len;
                            // Examined everything, consumed nothing more: cannot fail, a read
                            // is in hand and 0 <= len <= its length.
                            if let Err(e) = self.reader.advance_to(0, len) {
                                self.state = State::Done;
                                return Poll::Ready(Some(Err(FrameError::from(e).into())));
                            }
                            self.state = State::Wait(n.max(len.saturating_add(1)));
                            if canceled {
                                return Poll::Ready(Some(Err(FrameError::Canceled.into())));
                            }
                        }
                        Err(e) => {
                            self.state = if buf.end { State::Done } else { State::Failed };
                            return Poll::Ready(Some(Err(e)));
                        }
                    }
                }
                State::Eof => {
                    if self.reader.last_read().is_none() {
                        // A resume after an error at the end: read the rest again (at once).
                        self.state = State::Wait(0);
                        continue;
                    }
                    let mut buf = DecodeBuf::new(&mut self.reader, &mut self.scratch);
                    let decoded = self.decoder.decode_eof(&mut buf);
                    let end = buf.end;
                    return Poll::Ready(match decoded {
                        Ok(Some(item)) => {
                            if end {
                                self.state = State::Done;
                            }
                            Some(Ok(item))
                        }
                        Ok(None) => {
                            self.state = State::Done;
                            None
                        }
                        Err(e) => {
                            self.state = State::Done;
                            Some(Err(e))
                        }
                    });
                }
            }
        }
    }
}

impl<D> Frames<D> {
    /// The reader.
    pub fn get_ref(&self) -> &PipeReader {
        &self.reader
    }

    /// The decoder.
    pub fn decoder(&self) -> &D {
        &self.decoder
    }

    /// The decoder, mutably (for example to change its maximum frame length).
    pub fn decoder_mut(&mut self) -> &mut D {
        &mut self.decoder
    }

    /// Go on with another decoder, from where this one stopped: the bytes in the pipe, the state
    /// of the stream (ended, failed, at the end) and the reader are kept (tokio-util's
    /// `FramedRead::map_decoder`).
    ///
    /// ```
    /// use packetpipe::frame::{Frames, Lines, LengthDelimited};
    ///
    /// let (mut writer, reader) = packetpipe::pipe();
    /// writer.write_slice(b"HELLO 1\n\0\0\0\x02hi")?;
    /// writer.complete();
    /// let mut lines = Frames::new(reader, Lines::new());
    /// assert_eq!(lines.iter_blocking().next().unwrap()?, "HELLO 1"); // a text greeting, then binary
    /// let mut frames = lines.map_decoder(|_| LengthDelimited::new());
    /// assert_eq!(frames.iter_blocking().next().unwrap()?, &b"hi"[..]);
    /// # Ok::<(), packetpipe::frame::FrameError>(())
    /// ```
    pub fn map_decoder<C>(self, map: impl FnOnce(D) -> C) -> Frames<C> {
        Frames {
            reader: self.reader,
            decoder: map(self.decoder),
            state: self.state,
            scratch: self.scratch,
            seen: self.seen,
        }
    }

    /// The reader back, every unconsumed byte intact (including those of a partial frame): its next
    /// `read_buffer` returns them at once. (The decoder's state, if it matters, is read before,
    /// through [`decoder`](Self::decoder).)
    pub fn into_inner(self) -> PipeReader {
        let mut reader = self.reader;
        // Mark nothing examined, so the next `read_buffer` does not wait for bytes beyond what this
        // stream examined. A read of at least 0 bytes returns at once; errors (a completed reader)
        // leave nothing to reset.
        let mut canceled = false;
        if reader.last_read().is_none() {
            canceled = reader
                .read_at_least_blocking(0)
                .is_ok_and(|read| read.is_canceled);
        }
        let _ = reader.advance_to(0, 0);
        if canceled {
            // That read took a cancel meant for the caller's next read: hand it on.
            reader.canceler().cancel();
        }
        reader
    }
}

impl<D: Decoder> Stream for Frames<D> {
    type Item = Result<D::Item, D::Error>;

    #[inline(always)]
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut()
            .step(|reader, n| reader.poll_read_at_least(cx, n))
    }
}

impl<D: Decoder> FusedStream for Frames<D> {
    fn is_terminated(&self) -> bool {
        matches!(self.state, State::Done | State::Failed)
    }
}

impl<D: std::fmt::Debug> std::fmt::Debug for Frames<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Frames")
            .field("reader", &self.reader)
            .field("decoder", &self.decoder)
            .field("state", &self.state)
            .finish()
    }
}

/// Future of the next frame of a [`Frames`]; see [`Frames::next`].
#[derive(Debug)]
#[must_use = "futures do nothing unless polled"]
pub struct Next<'a, D> {
    frames: &'a mut Frames<D>,
}

impl<D: Decoder> Future for Next<'_, D> {
    type Output = Option<Result<D::Item, D::Error>>;

    // Always inlined, with the stream's poll (itself always inlined) under it: the point of this
    // future (see `Frames::next`).
    #[inline(always)]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut *self.get_mut().frames).poll_next(cx)
    }
}

/// Blocking iterator over a [`Frames`]; see [`Frames::iter_blocking`].
#[derive(Debug)]
pub struct IterBlocking<'a, D> {
    frames: &'a mut Frames<D>,
}

impl<D: Decoder> Iterator for IterBlocking<'_, D> {
    type Item = Result<D::Item, D::Error>;

    #[inline(always)]
    fn next(&mut self) -> Option<Self::Item> {
        self.frames.next_blocking()
    }
}
