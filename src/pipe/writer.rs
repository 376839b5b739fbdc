//! The writing end of a pipe.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::blocking::block_on;
use super::queue::Producer;
use super::state::{PipeCanceler, PipeState, DONE, FAILED};
use crate::error::{Error, SharedError};
use crate::packet::{Packet, PacketBuf};
use crate::pool::Pool;
use crate::sync::atomic::Ordering;
use crate::sync::Arc;

/// The outcome of a flush.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlushResult {
    is_completed: bool,
    is_canceled: bool,
}

impl FlushResult {
    /// The reader has completed: nothing written from now on will be read.
    #[inline]
    pub fn is_completed(&self) -> bool {
        self.is_completed
    }

    /// The flush was cut short by [`PipeCanceler::cancel_pending_flush`]; the data stays committed.
    #[inline]
    pub fn is_canceled(&self) -> bool {
        self.is_canceled
    }
}

/// The writing end of a pipe: stage bytes, then [`flush_pipe`](PipeWriter::flush_pipe) to publish them.
///
/// Bytes are staged by appending packets (zero-copy) or by writing into pooled buffers
/// ([`buffer_mut`](PipeWriter::buffer_mut) + [`advance`](PipeWriter::advance), or
/// [`write_slice`](PipeWriter::write_slice)). Staged bytes are invisible to the reader until flushed. After a
/// flush the writer keeps writing into the tail of the same pooled block while the flushed part
/// travels to the reader as a shared packet.
///
/// Dropping the writer completes it: staged bytes are published, then the reader sees the end.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), packetpipe::Error> {
/// let (mut writer, mut reader) = packetpipe::pipe::pipe();
/// writer.write_slice(b"hello ")?;
/// writer.append(bytes::Bytes::from_static(b"world"))?;
/// writer.flush_pipe().await?;
/// writer.complete();
///
/// let result = reader.read_buffer().await?;
/// assert_eq!(result.buffer().to_vec(), b"hello world");
/// assert!(result.is_completed());
/// # Ok(())
/// # }
/// ```
pub struct PipeWriter {
    queue: Producer,
    state: Arc<PipeState>,
    pool: Pool,
    min_segment_size: usize,
    /// The current pooled write buffer; its written bytes are staged but not yet sealed.
    buf: Option<PacketBuf>,
    /// Bytes of the last `buffer_mut` slice not yet committed by `advance`.
    handed_out: usize,
    /// Scratch space handed out once the reader has completed (writes are discarded).
    discard: Vec<u8>,
    /// Bytes published so far (the writer is the only one changing that count).
    published: u64,
    /// The current flush is waiting for the reader (cleared whenever a flush returns).
    paused: bool,
    reader_done: bool,
    completed: bool,
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
            buf: None,
            handed_out: 0,
            discard: Vec::new(),
            published: 0,
            paused: false,
            reader_done: false,
            completed: false,
        }
    }

    /// Stage a packet without copying it. Empty packets are ignored.
    #[inline]
    pub fn append(&mut self, packet: impl Into<Packet>) -> Result<(), Error> {
        self.check_open()?;
        if self.reader_done {
            return Ok(());
        }
        self.seal_buf();
        self.queue.push(packet.into());
        // Bytes committed after this must come after the packet: ask for space again.
        self.handed_out = 0;
        Ok(())
    }

    /// Writable space of at least `size_hint` bytes (and at least one) in a pooled buffer. Write
    /// into it, then [`advance`](Self::advance) by the number of bytes written.
    ///
    /// ```
    /// let (mut writer, mut reader) = packetpipe::pipe::pipe();
    /// let space = writer.buffer_mut(4)?;
    /// space[..4].copy_from_slice(b"ping");
    /// writer.advance(4)?;
    /// writer.flush_blocking()?;
    /// assert_eq!(reader.read_blocking()?.buffer().to_vec(), b"ping");
    /// # Ok::<(), packetpipe::Error>(())
    /// ```
    #[inline]
    pub fn buffer_mut(&mut self, size_hint: usize) -> Result<&mut [u8], Error> {
        self.check_open()?;
        let need = size_hint.max(1);
        let fits = self
            .buf
            .as_ref()
            .is_some_and(|b| bytes::BufMut::remaining_mut(b) >= need);
        if !fits && !self.reader_done {
            self.seal_buf();
            self.buf = None;
            if !self.check_reader_done() {
                self.buf = Some(self.pool.rent(need.max(self.min_segment_size))?);
            }
        }
        let space = match (&mut self.buf, self.reader_done) {
            (Some(buf), false) => buf.spare_mut(),
            _ => {
                // The reader is gone: hand out scratch space, rent nothing.
                if self.discard.len() < need {
                    self.discard.resize(need, 0);
                }
                &mut self.discard[..]
            }
        };
        self.handed_out = space.len();
        Ok(space)
    }

    /// Commit `n` bytes written into the space [`buffer_mut`](Self::buffer_mut) handed out.
    /// Errors if `n` is beyond that space (nothing is committed then).
    #[inline]
    pub fn advance(&mut self, n: usize) -> Result<(), Error> {
        self.check_open()?;
        if n > self.handed_out {
            return Err(Error::AdvancePastBuffer {
                requested: n,
                available: self.handed_out,
            });
        }
        self.handed_out -= n;
        if let (Some(buf), false) = (&mut self.buf, self.reader_done) {
            buf.commit(n).expect("within the space handed out");
        }
        Ok(())
    }

    /// Stage a copy of `data`. Each call's bytes land contiguously in one pooled buffer (a new one
    /// is rented when the current one lacks room), so a frame written at once stays one segment.
    #[inline]
    pub fn write_slice(&mut self, data: &[u8]) -> Result<(), Error> {
        self.check_open()?;
        if data.is_empty() {
            return Ok(());
        }
        let space = self.buffer_mut(data.len())?;
        space[..data.len()].copy_from_slice(data);
        self.advance(data.len())?;
        // The caller was never handed the rest of that space: a later `advance` without
        // `buffer_mut` must not commit it (it may hold an earlier renter's bytes).
        self.handed_out = 0;
        Ok(())
    }

    /// Bytes staged and not yet flushed.
    #[inline]
    pub fn unflushed_len(&self) -> usize {
        let in_buf = self.buf.as_ref().map_or(0, |b| b.len());
        self.queue.staged_bytes() as usize + in_buf
    }

    /// Publish the staged bytes and, when the reader lags by the pause threshold or more, wait
    /// until it catches up below the resume threshold (or completes, or the flush is canceled).
    /// Allocates nothing; when not paused it returns at once.
    #[inline]
    pub fn flush_pipe(&mut self) -> Flush<'_> {
        self.paused = false;
        Flush { writer: self }
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
        self.publish_staged();
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
            self.state.writer_wait.register(cx.waker());
            // MUTANT no_recheck_flush (test-only, `--cfg packetpipe_mutant="no_recheck_flush"`):
            // pause right after registering, without checking again; an advance in between that
            // brought the reader below the resume threshold is never seen.
            if cfg!(packetpipe_mutant = "no_recheck_flush") {
                self.paused = true;
                return Poll::Pending;
            }
            registered = true;
            self.paused = true;
        }
    }

    /// `Some(result)` when the flush can return now, `None` when it must wait.
    #[inline]
    fn flush_status(&mut self) -> Option<Result<FlushResult, Error>> {
        crate::sync::loom_seq_cst_point();
        let reader = self.state.reader.load(Ordering::SeqCst);
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
        if self.state.cancel_flush.load(Ordering::SeqCst)
            && self.state.cancel_flush.swap(false, Ordering::SeqCst)
        {
            return Some(Ok(FlushResult {
                is_completed: false,
                is_canceled: true,
            }));
        }
        // The reader word loaded above, not a second load: a completion landing between two loads
        // would otherwise end the flush without `is_completed` (found by the loom backpressure model).
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

    fn complete_inner(&mut self, error: Option<SharedError>) {
        if self.completed {
            return;
        }
        self.completed = true;
        if self.check_reader_done() {
            self.queue.discard_staged();
        } else {
            self.seal_buf();
        }
        self.buf = None;
        let mut flags = DONE;
        if let Some(error) = error {
            self.state.set_writer_error(error);
            flags |= FAILED;
        }
        // Bytes and DONE go out in one atomic add: the reader cannot see the end before the data.
        self.queue.publish(flags);
        self.state.reader_wait.wake();
    }

    /// A handle that cancels pending reads and flushes from another thread or task.
    pub fn canceler(&self) -> PipeCanceler {
        PipeCanceler {
            state: self.state.clone(),
        }
    }

    /// Whether the reader has completed (as of the last flush or buffer request).
    pub fn is_reader_completed(&self) -> bool {
        self.reader_done
    }

    /// Whether this writer has completed (its own `complete`, not the reader's).
    #[inline]
    pub(crate) fn is_writer_completed(&self) -> bool {
        self.completed
    }

    #[inline]
    fn check_open(&self) -> Result<(), Error> {
        if self.completed {
            return Err(Error::WriterCompleted);
        }
        Ok(())
    }

    /// Stage the write buffer's written bytes as a packet; drop the buffer once full.
    #[inline]
    fn seal_buf(&mut self) {
        let Some(buf) = &mut self.buf else { return };
        if bytes::BufMut::remaining_mut(buf) == 0 {
            // Full: the buffer's own reference passes to the packet (no increment + decrement).
            let buf = self.buf.take().expect("checked above");
            self.handed_out = 0;
            if !buf.is_empty() {
                self.queue.push(buf.freeze().into());
            }
        } else if !buf.is_empty() {
            let packet = buf.seal();
            self.queue.push(packet.into());
        }
    }

    #[inline]
    fn publish_staged(&mut self) {
        // Checked first so bytes written after the reader completed are released here, not
        // published into a queue nobody reads.
        if self.check_reader_done() {
            return;
        }
        self.seal_buf();
        let staged = self.queue.staged_bytes();
        if staged > 0 {
            self.queue.publish(0);
            self.published += staged;
            // A reader waiting in `read_at_least(n)` is woken once its n bytes are published, not
            // on every flush before (DESIGN §6: one wake per large frame, not one per segment).
            // SeqCst, after the publish: a target this load misses was stored before the reader's
            // re-check, which then sees the bytes; a target it sees stale (0, or an old one the
            // reader has since cleared with a SeqCst store before registering) costs at most a
            // spurious wake.
            if self.state.reader_needs.load(Ordering::SeqCst) <= self.published {
                self.state.reader_wait.wake();
            }
        }
    }

    #[inline]
    fn check_reader_done(&mut self) -> bool {
        if !self.reader_done && self.state.reader.load(Ordering::Acquire) & DONE != 0 {
            self.note_reader_done();
        }
        self.reader_done
    }

    /// The reader is gone: release everything staged, and rent nothing from now on.
    fn note_reader_done(&mut self) {
        if !self.reader_done {
            self.reader_done = true;
            self.buf = None;
            self.handed_out = 0;
            self.queue.discard_staged();
        }
    }
}

impl Drop for PipeWriter {
    fn drop(&mut self) {
        self.complete();
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
