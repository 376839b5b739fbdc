//! The writing end of a pipe.

use std::future::Future;
use std::io::IoSlice;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use super::blocking::block_on;
use super::queue::Producer;
use super::state::{CancelEnd, PipeCanceler, PipeState, COUNT, DONE, FAILED};
use super::transport::Deliver;
use crate::error::{Error, SharedError};
use crate::packet::{Packet, PacketBuf, ParkedBuf};
use crate::pool::Pool;
use crate::sync::atomic::Ordering;
use crate::sync::Arc;

/// The outcome of a flush.
///
/// A writer that goes on writing after a flush checks `is_completed`: once the reader has
/// completed, later writes are discarded.
// Not `#[must_use]`: `writer.flush_pipe().await?;` is the common form in code whose next write
// or read learns of the end anyway, and marking it would make each of those a warning.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlushResult {
    /// The reader has completed: nothing written from now on will be read.
    pub is_completed: bool,
    /// The flush was cut short by the writer's [`PipeCanceler`]; the data stays committed.
    pub is_canceled: bool,
}

/// The writing end of a pipe: stage bytes, then [`flush_pipe`](PipeWriter::flush_pipe) to publish them.
///
/// Bytes are staged by appending packets (zero-copy) or by writing into pooled buffers
/// ([`spare_mut`](PipeWriter::spare_mut) + [`commit`](PipeWriter::commit), or
/// [`write_slice`](PipeWriter::write_slice)). Staged bytes are invisible to the reader until flushed. After a
/// flush the writer keeps writing into the tail of the same pooled block while the flushed part
/// travels to the reader as a shared packet.
///
/// Dropping the writer completes it: staged bytes are published, then the reader sees the end.
///
/// ```
/// # fn main() -> Result<(), packetpipe::Error> {
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let (mut writer, mut reader) = packetpipe::pipe::pipe();
/// writer.write_slice(b"hello ")?;
/// writer.append(bytes::Bytes::from_static(b"world"))?;
/// writer.flush_pipe().await?;
/// writer.complete();
///
/// let result = reader.read_buffer().await?;
/// assert_eq!(packetpipe::ByteSegments::to_vec(&result.buffer), b"hello world");
/// assert!(result.is_completed);
/// # Ok(())
/// # })
/// # }
/// ```
pub struct PipeWriter {
    queue: Producer,
    state: Arc<PipeState>,
    pool: Pool,
    min_segment_size: usize,
    buf: WriteBuf,
    /// References to the write buffer's block counted in advance for its seals
    /// (`block::Writer::seal_with_credits`): one read-modify-write per batch of flushes, not per
    /// flush. Only while `buf` is `Active` (`Parked` carries them in the parking slot); given back
    /// whenever the buffer goes ([`drop_buf`](Self::drop_buf)).
    seal_credits: usize,
    /// Bytes of the last `spare_mut` slice not yet committed by `commit`.
    handed_out: usize,
    /// Bytes published so far (the writer is the only one changing that count).
    published: u64,
    /// The current flush is waiting for the reader (cleared whenever a flush returns).
    paused: bool,
    reader_done: bool,
    /// The reader's examined position as this writer last loaded it (it only grows): enough to
    /// know that a flush or write far below the pause threshold cannot pause.
    reader_seen: u64,
    completed: bool,
    /// An inline transport's destination (`pipe::transport`), when there is one.
    sink: Option<Box<dyn Deliver>>,
    /// The destination takes flushes as packets (`Deliver::takes_packets`), asked once.
    sink_takes_packets: bool,
}

/// The writer's write buffer.
enum WriteBuf {
    /// None: the next write rents one.
    None,
    /// A pooled buffer being written; its written bytes are staged but not yet sealed.
    Active(PacketBuf),
    /// The buffer between a flush and the next write, its reference parked in the queue so an idle
    /// reader can send the block home (`block::ParkingSlot`).
    Parked(ParkedBuf),
    /// The reader has completed: scratch space for the `spare_mut` call being served (writes
    /// into it are discarded); freed by the writer's next call, so discarded writes hold nothing.
    Discard(Box<[u8]>),
}

impl PipeWriter {
    pub(crate) fn new(
        queue: Producer,
        state: Arc<PipeState>,
        pool: Pool,
        min_segment_size: usize,
    ) -> PipeWriter {
        PipeWriter {
            queue,
            state,
            pool,
            min_segment_size,
            buf: WriteBuf::None,
            seal_credits: 0,
            handed_out: 0,
            published: 0,
            paused: false,
            reader_done: false,
            reader_seen: 0,
            completed: false,
            sink: None,
            sink_takes_packets: false,
        }
    }

    /// Hand every flush's bytes to `sink` within the flush from now on (an inline transport).
    pub(crate) fn set_sink(&mut self, sink: Box<dyn Deliver>) {
        self.sink_takes_packets = sink.takes_packets();
        self.sink = Some(sink);
    }

    /// Stage a packet without copying it. Empty packets are ignored: they change nothing, not even
    /// the space [`spare_mut`](Self::spare_mut) handed out.
    #[inline]
    pub fn append(&mut self, packet: impl Into<Packet>) -> Result<(), Error> {
        self.check_open()?;
        let packet = packet.into();
        if packet.is_empty() {
            return Ok(());
        }
        self.end_discarded_write();
        if self.reader_done {
            return Ok(());
        }
        self.seal_buf();
        self.queue.push(packet);
        // Bytes committed after this must come after the packet: ask for space again.
        self.handed_out = 0;
        Ok(())
    }

    /// Writable space of at least `size_hint` bytes (and at least one) in a pooled buffer. Write
    /// into it, then [`commit`](Self::commit) the number of bytes written (the names
    /// [`PacketBuf`] uses for its tail). A hint above what
    /// one block holds (4 GiB) is [`Error::RequestTooLarge`]; `write_slice` splits such data.
    ///
    /// The space is never uninitialized memory, but it is not cleared either: it holds whatever
    /// the block held before (zeros, or an earlier renter's bytes, unless the pool was built with
    /// [`clear_on_return`](crate::PoolOptions::clear_on_return)). Commit only bytes you wrote.
    ///
    /// ```
    /// use packetpipe::ByteSegments;
    ///
    /// let (mut writer, mut reader) = packetpipe::pipe();
    /// let space = writer.spare_mut(4)?;
    /// space[..4].copy_from_slice(b"ping");
    /// writer.commit(4)?;
    /// writer.flush_blocking()?;
    /// assert_eq!(reader.read_blocking()?.buffer.to_vec(), b"ping");
    /// # Ok::<(), packetpipe::Error>(())
    /// ```
    #[inline]
    pub fn spare_mut(&mut self, size_hint: usize) -> Result<&mut [u8], Error> {
        self.check_open()?;
        let need = size_hint.max(1);
        // (No `end_discarded_write` here: a discard buffer exists only once the reader is known
        // gone, and the branch below reuses or replaces it.)
        if !self.reader_done {
            self.unpark();
            let fits =
                matches!(&self.buf, WriteBuf::Active(b) if bytes::BufMut::remaining_mut(b) >= need);
            // Nothing is rented once the reader is gone (the discard branch below serves it).
            if !fits && !self.check_reader_done() {
                // Rent first: a failed rent leaves the current buffer, and the space it handed
                // out, as they were (a later `commit` still commits into it).
                let rented = self.pool.rent(self.rent_size(need))?;
                self.seal_buf();
                self.drop_buf();
                self.buf = WriteBuf::Active(rented);
            }
        }
        if self.reader_done {
            // The reader is gone: rent nothing, hand out scratch space, reused while it is large
            // enough (a `BufMut` asks for one byte at a time: a scratch per call allocated once
            // per byte). Requests no buffer could serve fail as they would with a live reader.
            if !matches!(&self.buf, WriteBuf::Discard(scratch) if scratch.len() >= need) {
                self.drop_buf();
                self.buf = WriteBuf::Discard(discard_scratch(need.max(DISCARD_SCRATCH))?);
            }
        }
        let space = match &mut self.buf {
            WriteBuf::Active(buf) => buf.spare_mut(),
            WriteBuf::Discard(scratch) => &mut scratch[..],
            WriteBuf::None | WriteBuf::Parked(_) => unreachable!("a buffer was just provided"),
        };
        self.handed_out = space.len();
        Ok(space)
    }

    /// Commit `n` bytes written into the space [`spare_mut`](Self::spare_mut) handed out.
    /// Errors if `n` is beyond that space (nothing is committed then).
    ///
    /// The space lasts until the writer's next write, append of a non-empty packet, flush or
    /// completion, as a `GetMemory` span does in System.IO.Pipelines: after those, call
    /// `spare_mut` again. (A flush with nothing staged may leave it, but do not count on it.)
    #[inline]
    pub fn commit(&mut self, n: usize) -> Result<(), Error> {
        self.check_open()?;
        if n > self.handed_out {
            return Err(Error::CommitPastSpare {
                requested: n,
                available: self.handed_out,
            });
        }
        self.handed_out -= n;
        if let WriteBuf::Active(buf) = &mut self.buf {
            buf.commit(n).expect("within the space handed out");
        }
        Ok(())
    }

    /// Stage a copy of `data`. Each call's bytes land contiguously in one pooled buffer (a new one
    /// is rented when the current one lacks room), so a frame written at once stays one segment.
    #[inline]
    pub fn write_slice(&mut self, data: &[u8]) -> Result<(), Error> {
        // Fast path: the block of the last write (parked by a flush since, or still active) has
        // room. A buffer is only active or parked while the writer is open and the reader not
        // known to be done, so those checks are the slow path's.
        // (An empty write changes nothing, not even the space `spare_mut` handed out.)
        if !data.is_empty() {
            self.unpark();
            if let WriteBuf::Active(buf) = &mut self.buf {
                if buf.extend_from_slice(data).is_ok() {
                    // Nothing was handed out: a later `commit` must not commit the tail.
                    self.handed_out = 0;
                    return Ok(());
                }
            }
        }
        self.write_slice_slow(data)
    }

    /// Stage `n > 0` bytes that `fill` writes, in the block of the last write when it has room
    /// (`write_slice`'s fast path, for the encoders that copy a header and a payload): `None`,
    /// with nothing staged and `fill` not called, when it has not; else `fill`'s result, the
    /// bytes staged only if it is `Ok`.
    #[inline]
    pub(crate) fn stage_in_place<E>(
        &mut self,
        n: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
    ) -> Option<Result<(), E>> {
        if n == 0 {
            return None;
        }
        self.unpark();
        let WriteBuf::Active(buf) = &mut self.buf else {
            return None;
        };
        if buf.spare_len() < n {
            return None;
        }
        let filled = fill(&mut buf.spare_mut()[..n]);
        if filled.is_ok() {
            buf.commit(n).expect("the free tail holds `n` bytes");
            // Nothing was handed out: a later `commit` must not commit the tail.
            self.handed_out = 0;
        }
        Some(filled)
    }

    /// [`write_slice`](Self::write_slice) into a new block, or checked for a closed end.
    #[inline(never)]
    fn write_slice_slow(&mut self, data: &[u8]) -> Result<(), Error> {
        self.check_open()?;
        if data.is_empty() {
            return Ok(());
        }
        if self.reader_done {
            self.end_discarded_write();
            return Ok(()); // discarded without copying
        }
        if data.len() > crate::packet::MAX_CAPACITY {
            // More than one block holds: one block per piece.
            for piece in data.chunks(crate::packet::MAX_CAPACITY) {
                self.write_slice_slow(piece)?;
            }
            return Ok(());
        }
        let space = self.spare_mut(data.len())?;
        space[..data.len()].copy_from_slice(data);
        self.commit(data.len())?;
        // The caller was never handed the rest of that space: a later `commit` without
        // `spare_mut` must not commit it (it may hold an earlier renter's bytes).
        self.handed_out = 0;
        Ok(())
    }

    /// Bytes staged and not yet flushed.
    #[inline]
    pub fn unflushed_len(&self) -> usize {
        let in_buf = match &self.buf {
            WriteBuf::Active(buf) => buf.len(),
            _ => 0,
        };
        self.queue.staged_bytes() as usize + in_buf
    }

    /// Publish the staged bytes and, when the reader lags by the pause threshold or more, wait
    /// until it catches up below the resume threshold (or completes, or the flush is canceled).
    /// Allocates nothing; when not paused it returns at once.
    #[inline]
    pub fn flush_pipe(&mut self) -> Flush<'_> {
        self.start_flush();
        Flush { writer: self }
    }

    /// A new flush starts: a pause left from an abandoned one does not carry over (see
    /// [`flush_pipe`](Self::flush_pipe)); for flush futures built outside the pipe.
    #[inline]
    pub(crate) fn start_flush(&mut self) {
        self.paused = false;
    }

    /// [`flush_pipe`](Self::flush_pipe) for thread-based code: parks the thread while paused.
    #[inline]
    pub fn flush_blocking(&mut self) -> Result<FlushResult, Error> {
        block_on(self.flush_pipe())
    }

    /// The poll form of [`flush_pipe`](Self::flush_pipe), for adapters and hand-written futures.
    #[inline]
    pub fn poll_flush_pipe(&mut self, cx: &mut Context<'_>) -> Poll<Result<FlushResult, Error>> {
        self.check_open()?;
        self.end_discarded_write();
        if self.sink.is_some() {
            self.write_now();
        }
        if self.publish_staged() {
            // New bytes: a new flush, paused only at the pause threshold again. A pause left over
            // from a flush whose poll was abandoned while waiting must not make this one wait for
            // the (lower) resume threshold.
            self.paused = false;
            if let Some(sink) = self.sink.as_mut() {
                sink.deliver();
            }
        }
        let mut registered = false;
        loop {
            let status = self.flush_status();
            if let Some(result) = status {
                self.paused = false;
                return Poll::Ready(result);
            }
            if registered {
                self.paused = true;
                return Poll::Pending;
            }
            // Announce the wait, then check again: the reader may have advanced in between.
            self.state.waits.writer.register(cx.waker());
            registered = true;
            self.paused = true;
        }
    }

    /// An inline transport's flush: with no packet staged and nothing published still unwritten,
    /// write the write buffer's bytes to the destination straight from the block, unsealed and
    /// unpublished (no reference counted, no atomic add, no wake); only what the destination
    /// does not take is published, as any flush's bytes are. A block whose bytes all went out and
    /// of which no packet is alive is written again from its start.
    #[inline]
    fn write_now(&mut self) {
        if self.queue.staged_bytes() != 0 || self.reader_done {
            return;
        }
        let (WriteBuf::Active(buf), Some(sink)) = (&mut self.buf, self.sink.as_mut()) else {
            return;
        };
        if buf.is_empty() {
            return;
        }
        if self.sink_takes_packets {
            self.hand_over();
            return;
        }
        let Some(n) = sink.write_now(buf, self.published) else {
            return;
        };
        // The space `spare_mut` handed out goes with the flush, as on the publishing path.
        self.handed_out = 0;
        // The bytes went out without a packet: the last packet published from this block grows
        // no more (the next bytes do not follow it in the stream).
        self.queue.end_growth();
        buf.discard_front(n);
        if buf.is_empty() {
            if sink.reader_idle() {
                // The connection waits for its peer: it holds no block.
                self.drop_buf();
            } else {
                buf.rewind(self.seal_credits);
                // Parked like a flushed buffer, so that the reader gives the block back when it
                // goes idle.
                self.park();
            }
        }
    }

    /// [`write_now`](Self::write_now) for a destination that writes later (a ring's send): the
    /// write buffer's bytes sealed into one packet and handed to it, unpublished (no node, no
    /// atomic add, no wake through the pipe); a packet it refuses is staged, and published as
    /// any flush's bytes are. Called with an active, non-empty buffer and nothing staged.
    #[inline]
    fn hand_over(&mut self) {
        let WriteBuf::Active(buf) = &mut self.buf else {
            return;
        };
        let full = bytes::BufMut::remaining_mut(buf) == 0;
        let packet: Packet = if full {
            // The buffer's own reference passes to the packet, as `seal_buf` does.
            buf.give_back_credits(std::mem::take(&mut self.seal_credits));
            let WriteBuf::Active(buf) = std::mem::replace(&mut self.buf, WriteBuf::None) else {
                unreachable!("matched above")
            };
            buf.freeze_untracked().into()
        } else {
            buf.seal_with_credits(&mut self.seal_credits).into()
        };
        // The space `spare_mut` handed out goes with the flush, as on the publishing path.
        self.handed_out = 0;
        // The next bytes do not follow the last packet published from this block.
        self.queue.end_growth();
        let Some(sink) = self.sink.as_mut() else {
            unreachable!("called with a destination")
        };
        if let Err(packet) = sink.hand_over(packet, self.published) {
            self.queue.push(packet);
            return;
        }
        if !full {
            if sink.reader_idle() {
                // The connection waits for its peer: it holds no block.
                self.drop_buf();
            } else {
                // Parked like a flushed buffer, so that the reader gives the block back when it
                // goes idle.
                self.park();
            }
        }
    }

    /// `Some(result)` when the flush can return now, `None` when it must wait.
    #[inline]
    fn flush_status(&mut self) -> Option<Result<FlushResult, Error>> {
        crate::sync::loom_seq_cst_point();
        let progress = &self.state.progress;
        // This writer may know already (`poll_reader_completed` sees `DONE` in the word, which the
        // reader stores before the flag): a flush after that must say so too (the loom model
        // `completion_reaches_an_unpaused_flush` checks it).
        let done = self.reader_done || progress.reader_done.load(Ordering::SeqCst);
        // The common case, far from the pause threshold: the reader's position only grows, so the
        // one this writer loaded last already says this flush cannot pause; it is not loaded again
        // (that line is written on every advance, and loading it on every flush would move it
        // between the cores per frame). Completion and cancellation are seen through their
        // read-mostly flags.
        if !done
            && !self.paused
            && self.published.saturating_sub(self.reader_seen) < progress.pause_threshold
            && !progress.cancel_flush.load(Ordering::SeqCst)
        {
            return Some(Ok(FlushResult::default()));
        }
        let reader = self.state.reader.load(Ordering::SeqCst);
        self.reader_seen = reader & COUNT;
        if reader & DONE != 0 {
            self.note_reader_done();
            if reader & FAILED != 0 {
                return Some(Err(self.state.reader_error()));
            }
            return Some(Ok(FlushResult {
                is_completed: true,
                is_canceled: false,
            }));
        }
        if self.state.progress.cancel_flush.load(Ordering::SeqCst)
            && self
                .state
                .progress
                .cancel_flush
                .swap(false, Ordering::SeqCst)
        {
            return Some(Ok(FlushResult {
                is_completed: false,
                is_canceled: true,
            }));
        }
        // The reader word loaded above, not a second load: a completion landing between two loads
        // would otherwise end the flush without `is_completed` (the loom backpressure model
        // checks it).
        if self.state.must_wait(reader, self.published, self.paused) {
            return None;
        }
        Some(Ok(FlushResult::default()))
    }

    /// Mark the writing done: staged bytes are published (nothing is lost), then the reader sees
    /// completion. Later writes and flushes return [`Error::WriterCompleted`]. Completing again does
    /// nothing.
    pub fn complete(&mut self) {
        self.complete_inner(None);
    }

    /// As [`complete`](Self::complete), and the reader gets `error` (as [`Error::Peer`]) on every
    /// read once it has read the bytes flushed before.
    pub fn complete_with_error(
        &mut self,
        error: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) {
        self.complete_inner(Some(SharedError::new(error)));
    }

    pub(crate) fn complete_inner(&mut self, error: Option<SharedError>) {
        if self.completed {
            return;
        }
        self.completed = true;
        if self.check_reader_done() {
            self.queue.discard_staged();
        } else {
            self.seal_buf();
        }
        self.unpark();
        self.drop_buf();
        let mut flags = DONE;
        if let Some(error) = error {
            self.state.set_writer_error(error);
            flags |= FAILED;
        }
        // Bytes and DONE go out in one atomic add: the reader cannot see the end before the data.
        self.queue.publish(flags);
        self.state.waits.reader.wake();
        if let Some(mut sink) = self.sink.take() {
            sink.finish();
        }
    }

    /// A handle that cancels this writer's pending flush from another thread or task
    /// ([`PipeCanceler::cancel`]).
    pub fn canceler(&self) -> PipeCanceler {
        PipeCanceler {
            end: CancelEnd::Writer,
            state: self.state.clone(),
        }
    }

    /// Whether the reader has examined every byte published so far (an inline transport's output
    /// examines what the stream took): then a flush left nothing for anyone to write.
    #[inline]
    pub(crate) fn is_published_examined(&mut self) -> bool {
        if self.reader_seen < self.published {
            self.reader_seen = self.state.reader.load(Ordering::Acquire) & COUNT;
        }
        self.reader_seen >= self.published
    }

    /// Whether the reader has completed (as of the last flush or buffer request).
    #[inline]
    pub(crate) fn is_reader_completed(&self) -> bool {
        self.reader_done
    }

    /// Whether this writer has completed (its own `complete`, not the reader's).
    #[inline]
    pub(crate) fn is_writer_completed(&self) -> bool {
        self.completed
    }

    /// The I/O adapters' write: stage bytes from `bufs` (copied into pooled blocks, continuing into
    /// a new block when the current one fills) and return at once, unless the unexamined plus
    /// staged bytes have reached the pause threshold (or a flush is still paused): then publish and
    /// wait like a flush first. One call stages at most the room left below the pause threshold
    /// (or what a waiting `read_at_least` still needs), so memory stays bounded even if the caller
    /// never flushes. Cancel safe: bytes are staged only in the poll that returns their count.
    pub(crate) fn poll_write_io(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<Result<usize, Error>> {
        self.check_open()?;
        let total = bufs.iter().fold(0usize, |n, b| n.saturating_add(b.len()));
        if total == 0 {
            return Poll::Ready(Ok(0));
        }
        loop {
            if self.check_reader_done() {
                return Poll::Ready(Err(self.reader_gone()));
            }
            let pause = self.state.progress.pause_threshold;
            // By the position loaded last, then (only if that says pause) by a fresh one.
            if self.paused
                || (pause > 0
                    && self.pending_bytes(false) >= pause
                    && self.pending_bytes(true) >= pause)
            {
                let result = ready!(self.poll_flush_pipe(cx))?;
                if result.is_completed {
                    return Poll::Ready(Err(self.reader_gone()));
                }
                if result.is_canceled {
                    return Poll::Ready(Err(Error::Canceled {
                        operation: crate::error::Operation::Flush,
                    }));
                }
            }
            let room = self.write_room();
            if room > 0 {
                return Poll::Ready(self.stage_copy(bufs, room));
            }
            // A `read_at_least` that lifted the pause got its bytes in between: flush, and wait.
        }
    }

    /// Bytes the reader has not examined yet, flushed or staged, by the reader position this
    /// writer loaded last (`fresh`: load it again first).
    #[inline]
    fn pending_bytes(&mut self, fresh: bool) -> u64 {
        if fresh {
            self.reader_seen = self.state.reader.load(Ordering::Acquire) & COUNT;
        }
        self.published.saturating_sub(self.reader_seen) + self.unflushed_len() as u64
    }

    /// How many bytes a write may stage now: the room below the pause threshold, or what a
    /// waiting `read_at_least` still needs beyond the published and staged bytes.
    #[inline]
    fn write_room(&mut self) -> usize {
        let pause = self.state.progress.pause_threshold;
        if pause == 0 {
            return usize::MAX;
        }
        // The position loaded last, and a fresh one only when that leaves no room.
        let mut below_pause = pause.saturating_sub(self.pending_bytes(false));
        if below_pause == 0 {
            below_pause = pause.saturating_sub(self.pending_bytes(true));
        }
        let needed = self
            .state
            .progress
            .reader_needs
            .load(Ordering::SeqCst)
            .saturating_sub(self.published + self.unflushed_len() as u64);
        usize::try_from(below_pause.max(needed)).unwrap_or(usize::MAX)
    }

    /// Copy up to `limit` bytes of `bufs` into the write buffer, filling the current block's tail
    /// and renting more as needed; returns how many were staged.
    fn stage_copy(&mut self, bufs: &[IoSlice<'_>], limit: usize) -> Result<usize, Error> {
        /// Blocks rented for a long write are at most this large (a pooled class, not a one-off).
        const MAX_RENT: usize = 64 * 1024;
        let mut staged = 0;
        'outer: for buf in bufs {
            let mut data = &buf[..buf.len().min(limit - staged)];
            while !data.is_empty() {
                self.unpark();
                let tail = match &self.buf {
                    WriteBuf::Active(buf) => bytes::BufMut::remaining_mut(buf),
                    _ => 0,
                };
                let hint = if tail > 0 {
                    1
                } else {
                    data.len().min(MAX_RENT)
                };
                let space = match self.spare_mut(hint) {
                    Ok(space) => space,
                    Err(e) if staged == 0 => return Err(e),
                    Err(_) => break 'outer, // report what was staged; the next write errors
                };
                let n = space.len().min(data.len());
                space[..n].copy_from_slice(&data[..n]);
                self.commit(n)?;
                data = &data[n..];
                staged += n;
            }
            if staged == limit {
                break;
            }
        }
        // Nothing of the block's tail was handed to the caller.
        self.handed_out = 0;
        Ok(staged)
    }

    /// The error a write gets once the reader is gone: its completion error, or
    /// [`Error::ReaderGone`].
    fn reader_gone(&self) -> Error {
        if self.state.reader.load(Ordering::Acquire) & FAILED != 0 {
            self.state.reader_error()
        } else {
            Error::ReaderGone
        }
    }

    /// Drop the write buffer if nothing is written into it (an idle pump gives its block back).
    #[inline]
    pub(crate) fn release_unused_buffer(&mut self) {
        let unused = match &self.buf {
            WriteBuf::Active(buf) => buf.is_empty(),
            WriteBuf::Discard(_) => true,
            WriteBuf::None | WriteBuf::Parked(_) => false,
        };
        if unused {
            self.drop_buf();
        }
    }

    /// Complete with an error that the caller keeps a handle to as well.
    pub(crate) fn complete_with_shared(&mut self, error: SharedError) {
        self.complete_inner(Some(error));
    }

    /// `Ready` once the reader has completed (or been dropped); otherwise `cx` is woken when it
    /// does, and by nothing else (not by the reader's progress). Like tokio's `Sender::closed`: a
    /// producer idle on its own source (a socket) can stop as soon as nobody reads.
    pub(crate) fn poll_reader_completed(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.poll_reader_completed_inner(cx)
    }

    /// [`poll_reader_completed`](Self::poll_reader_completed) for the loom models (which drive
    /// the wait from outside the crate); it exists only in builds with `--cfg packetpipe_loom`.
    #[cfg(packetpipe_loom)]
    #[doc(hidden)]
    pub fn loom_poll_reader_completed(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.poll_reader_completed_inner(cx)
    }

    #[inline]
    fn poll_reader_completed_inner(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.check_reader_done() {
            return Poll::Ready(());
        }
        // The wait handshake (`wait.rs`): announce, then re-check with a SeqCst load.
        self.state.waits.reader_closed.register(cx.waker());
        crate::sync::loom_seq_cst_point();
        if self.state.reader.load(Ordering::SeqCst) & DONE != 0 {
            self.note_reader_done();
            return Poll::Ready(());
        }
        Poll::Pending
    }

    /// The size of the blocks this writer rents for its own buffers.
    #[inline]
    pub(crate) fn min_segment_size(&self) -> usize {
        self.min_segment_size
    }

    #[inline]
    fn check_open(&self) -> Result<(), Error> {
        if self.completed {
            return Err(Error::WriterCompleted);
        }
        Ok(())
    }

    /// Stage the write buffer's written bytes: as a packet, or, when the packet sealed last from
    /// this buffer is still the queue's last, as growth of that packet (consecutive flushes into
    /// one block read as one segment); drop the buffer once full.
    #[inline]
    fn seal_buf(&mut self) {
        let WriteBuf::Active(buf) = &mut self.buf else {
            return;
        };
        if self.queue.last_growable() && !buf.is_empty() && buf.headroom() == 0 {
            // The bytes start where the last packet ends (it was sealed from this buffer and
            // nothing was pushed since): sealed in place, no packet, no reference counted.
            let n = buf.seal_in_place();
            self.queue.grow_last(n);
            if bytes::BufMut::remaining_mut(buf) == 0 {
                self.drop_buf();
            }
            return;
        }
        if bytes::BufMut::remaining_mut(buf) == 0 {
            // Full: the buffer's own reference passes to the packet (no increment + decrement).
            buf.give_back_credits(std::mem::take(&mut self.seal_credits));
            let WriteBuf::Active(buf) = std::mem::replace(&mut self.buf, WriteBuf::None) else {
                unreachable!("matched above")
            };
            self.handed_out = 0;
            if !buf.is_empty() {
                self.queue.push(buf.freeze_untracked().into());
            }
        } else if !buf.is_empty() {
            let packet = buf.seal_with_credits(&mut self.seal_credits);
            self.queue.push_growable(packet.into());
        }
    }

    /// Drop the write buffer, giving back the references counted in advance for its seals. The
    /// space `spare_mut` handed out goes with it.
    #[inline]
    fn drop_buf(&mut self) {
        self.queue.end_growth();
        if let WriteBuf::Active(buf) = &self.buf {
            buf.give_back_credits(std::mem::take(&mut self.seal_credits));
        }
        debug_assert_eq!(self.seal_credits, 0, "credits outside an active buffer");
        self.buf = WriteBuf::None;
        self.handed_out = 0;
    }

    /// Publish the staged bytes; whether there were any.
    #[inline]
    fn publish_staged(&mut self) -> bool {
        // Checked first so bytes written after the reader completed are released here, not
        // published into a queue nobody reads.
        if self.check_reader_done() {
            return false;
        }
        self.seal_buf();
        let staged = self.queue.staged_bytes();
        if staged > 0 {
            // Parked before publishing, so a reader that sees these bytes also sees the parked
            // block and can send it home if it goes idle (`block::ParkingSlot`).
            self.park();
            self.queue.publish(0);
            self.published += staged;
            // A reader waiting in `read_at_least(n)` is woken once its n bytes are published, not
            // on every flush before it (one wake per large frame, not one per segment).
            // SeqCst, after the publish: a target this load misses was stored before the reader's
            // re-check, which then sees the bytes; a target it sees stale (0, or an old one the
            // reader has since cleared with a SeqCst store before registering) costs at most a
            // spurious wake.
            if self.state.progress.reader_needs.load(Ordering::SeqCst) <= self.published {
                self.state.waits.reader.wake();
            }
        }
        staged > 0
    }

    #[inline]
    fn check_reader_done(&mut self) -> bool {
        if !self.reader_done && self.state.progress.reader_done.load(Ordering::Acquire) {
            self.note_reader_done();
        }
        self.reader_done
    }

    /// Park the write buffer's reference (it holds nothing unsealed after `seal_buf`): the space
    /// `spare_mut` handed out is void from here on.
    #[inline]
    fn park(&mut self) {
        // Only an active buffer: one parked earlier stays parked (replacing it would lose track
        // of the reference the slot still holds).
        if let WriteBuf::Active(_) = self.buf {
            let WriteBuf::Active(buf) = std::mem::replace(&mut self.buf, WriteBuf::None) else {
                unreachable!("matched above")
            };
            debug_assert!(buf.is_empty(), "sealed before parking");
            let credits = std::mem::take(&mut self.seal_credits);
            self.buf = WriteBuf::Parked(self.queue.park_tail(buf, credits));
            self.handed_out = 0;
        }
    }

    /// Take the parked write buffer back, unless the reader released it while idle. The check
    /// is inlined into every write (most find the buffer active); the reclaim is not.
    #[inline(always)]
    fn unpark(&mut self) {
        if let WriteBuf::Parked(_) = self.buf {
            self.reclaim_parked();
        }
    }

    #[inline(never)]
    fn reclaim_parked(&mut self) {
        let WriteBuf::Parked(parked) = std::mem::replace(&mut self.buf, WriteBuf::None) else {
            unreachable!("called with a parked buffer")
        };
        if let Some((buf, credits)) = self.queue.reclaim_tail(parked) {
            self.buf = WriteBuf::Active(buf);
            self.seal_credits = credits;
        } else {
            self.queue.forget_growth();
        }
    }

    /// How many bytes to rent for a write of `need` bytes that does not fit the current block.
    ///
    /// A write of a segment or more gets a block of its own; one of a quarter of a segment or
    /// less, a segment (it holds four such writes or more). In between, a segment holds one to
    /// three and can leave almost half of itself unused (a 2 KiB + 5 B frame in a 4 KiB block), so
    /// the writer weighs the segment against the smallest multiple of `need` that is at least a
    /// segment (2 to 4 writes), each as the pool's class would round it, and takes the one a run of
    /// such writes would leave less of unused: at most about 20% (tests-integration/tests/block_fit.rs).
    #[inline]
    fn rent_size(&self, need: usize) -> usize {
        let segment = self.min_segment_size;
        if need >= segment {
            return need;
        }
        if need <= segment / 4 {
            return segment;
        }
        let multiple = need.saturating_mul(segment.div_ceil(need));
        let capacity = |size: usize| self.pool.class_size_for(size).unwrap_or(size);
        let (a, b) = (capacity(segment), capacity(multiple));
        // Unused fraction (a % need) / a against (b % need) / b, cross-multiplied (a, b and
        // need are far below 2^32 whenever this matters; saturating keeps the extremes sane).
        if (a % need).saturating_mul(b) <= (b % need).saturating_mul(a) {
            segment
        } else {
            multiple
        }
    }

    /// Free the scratch of a discarded write (the reader completed) once the writer moves on.
    #[inline]
    fn end_discarded_write(&mut self) {
        if let WriteBuf::Discard(_) = self.buf {
            self.buf = WriteBuf::None;
            self.handed_out = 0;
        }
    }

    /// The reader is gone: release everything staged, and rent nothing from now on.
    fn note_reader_done(&mut self) {
        if !self.reader_done {
            self.reader_done = true;
            self.unpark();
            self.drop_buf();
            self.queue.discard_staged();
        }
    }
}

/// Dropping the writer completes it (staged bytes are published first). Dropped while its thread
/// panics, it completes with an error instead, so the reader sees a failure, not a normal end of a
/// truncated stream. A task that is aborted (tokio's `JoinHandle::abort`) or a future that is
/// dropped unwinds no panic: its writer completes normally; complete it with an error yourself on
/// such paths (a drop guard) if a cut-off stream must not look finished. A process abort runs no
/// destructor at all.
impl Drop for PipeWriter {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.complete_with_error("the writer was dropped while its thread panicked");
        } else {
            self.complete();
        }
    }
}

impl std::fmt::Debug for PipeWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PipeWriter")
            .field("unflushed_len", &self.unflushed_len())
            .field("published", &self.published)
            .field("completed", &self.completed)
            .finish()
    }
}

/// Future of [`PipeWriter::flush_pipe`].
///
/// Cancel safety: safe to drop at any await point. Its first poll publishes the staged bytes (a
/// future dropped unpolled leaves them staged for the next flush); dropping it while it waits under
/// backpressure only stops the waiting: the bytes stay published, none is lost or sent twice.
#[must_use = "futures do nothing unless polled"]
pub struct Flush<'a> {
    writer: &'a mut PipeWriter,
}

impl Future for Flush<'_> {
    type Output = Result<FlushResult, Error>;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.writer.poll_flush_pipe(cx)
    }
}

impl std::fmt::Debug for Flush<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Flush")
    }
}

/// Smallest scratch a discarded write gets (reused by the writes that follow).
const DISCARD_SCRATCH: usize = 16 << 10;

/// Scratch space of `len` bytes for a write the reader will never see: the same limit and the
/// same allocation failure as a live reader's `spare_mut` (an error, never an abort).
fn discard_scratch(len: usize) -> Result<Box<[u8]>, Error> {
    if len > crate::packet::MAX_CAPACITY {
        return Err(Error::RequestTooLarge {
            requested: len,
            headroom: 0,
            limit: crate::packet::MAX_CAPACITY,
        });
    }
    let mut scratch = Vec::new();
    scratch
        .try_reserve_exact(len)
        .map_err(|_| Error::AllocationFailed { size: len })?;
    scratch.resize(len, 0);
    Ok(scratch.into_boxed_slice())
}
