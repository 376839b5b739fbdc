//! The reading end of a pipe.

use std::future::Future;
use std::panic::Location;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::blocking::{block_on, coalesce, SMALL_READ};
use super::input::Input;
use super::local::Local;
use super::queue::{Consumer, TailProbe};
use super::read_buffer::ReadBuffer;
use super::state::{CancelEnd, PipeCanceler, PipeState, DONE, FAILED};
use super::transport::Refill;
use crate::error::{Error, SharedError};
use crate::packet::{Packet, PacketChain, SharedCopies, SHARED_COPY_MAX};
use crate::pool::{BlockUse, Pool};
use crate::sync::atomic::Ordering;
use crate::sync::Arc;

/// The outcome of a read: the buffer of every flushed, unconsumed byte, and the pipe's status.
///
/// It borrows the reader, so the reader cannot advance while the buffer is alive; drop it (or stop
/// using it) before [`PipeReader::advance_to`].
#[derive(Clone, Copy, Debug)]
pub struct ReadResult<'a> {
    /// Every flushed byte not yet consumed, as a chain of segments.
    pub buffer: ReadBuffer<'a>,
    /// The writer has completed: no bytes beyond this buffer will ever arrive.
    pub is_completed: bool,
    /// The read was cut short by the reader's [`PipeCanceler`].
    pub is_canceled: bool,
}

/// A reader about to wait with at most this many unconsumed bytes moves them into a fitted pooled
/// block when the pooled blocks holding them are more than [`COMPACT_RATIO`] times larger (and more
/// than `COMPACT_RATIO` x 1 KiB), then gives the writer's parked block back: a connection stalled
/// after one byte of a request holds one small block, not a receive block (256 KiB, say); one
/// stalled after 1 KiB of a large value holds about 1 KiB.
///
/// Why copy at the wait rather than receive into small blocks first: the copy happens only when
/// the reader goes to sleep (a slow path), so reads that find whole frames keep one large
/// segment per socket read and pay nothing; the bytes copied are bounded by this limit, so a
/// sender trickling one byte per packet makes each wait copy at most 16 KiB (about as much work
/// as the receive system call that brought the byte). Above the limit the unconsumed bytes are
/// themselves at least 1/16 of a 256 KiB block, and a large value streaming in fills its blocks:
/// held memory stays in proportion to what arrived.
pub(crate) const COMPACT_UP_TO: usize = 16 * 1024;

/// See [`COMPACT_UP_TO`].
pub(crate) const COMPACT_RATIO: usize = 4;

/// The smallest "fitted" size [`COMPACT_RATIO`] is applied to: a block of a few KiB is not worth
/// a copy to save.
const MIN_COMPACT_BLOCK: usize = 1024;

/// What a read is waiting for.
#[derive(Clone, Copy)]
enum Want {
    /// Any byte beyond the examined point.
    New,
    /// At least this many unconsumed bytes.
    AtLeast(u64),
}

/// The reading end of a pipe: read the flushed bytes as a chain of segments, then advance by byte
/// counts.
///
/// The usual loop, as with System.IO.Pipelines: read, parse what is complete, advance past what was
/// consumed and mark how far was examined (the next read waits for bytes beyond it).
///
/// ```
/// # fn main() -> Result<(), packetpipe::Error> {
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let (mut writer, mut reader) = packetpipe::pipe::pipe();
/// writer.write_slice(b"line one\nline tw")?;
/// writer.flush_pipe().await?;
///
/// use packetpipe::ByteSegments;
///
/// let result = reader.read_buffer().await?;
/// let buffer = result.buffer;
/// let newline = buffer.find(b"\n").unwrap();
/// assert_eq!(buffer.slice(..newline).to_vec(), b"line one");
/// let len = buffer.len();
/// reader.advance_to(newline + 1, len)?; // consumed the line, examined everything
///
/// writer.write_slice(b"o\n")?;
/// writer.complete();
/// let result = reader.read_buffer().await?;
/// assert_eq!(result.buffer.to_vec(), b"line two\n");
/// assert!(result.is_completed);
/// # Ok(())
/// # })
/// # }
/// ```
pub struct PipeReader {
    /// The bytes: the shared queue, or the reader's own when it reads its source itself.
    queue: Input,
    state: Arc<PipeState>,
    pool: Pool,
    copy_threshold: usize,
    /// Absolute position the last `advance_to` examined up to: `read_buffer` waits for bytes beyond it.
    examined: u64,
    /// Furthest examined position, shared with the writer for backpressure.
    examined_max: u64,
    /// Examined positions up to this one cannot lift the writer's pause: the last wake check saw
    /// the writer still bound to wait with this position + the resume threshold published, and its
    /// published count only grows. Spares a paused writer's reader the check on every frame.
    no_wake_up_to: u64,
    /// Length of the buffer handed out by the last read (less frames taken since); `None` when
    /// there is no read to advance in.
    last_len: Option<u64>,
    /// Writer flags seen at the last read.
    writer_flags: u64,
    /// `(is_completed, is_canceled)` of the last successful read, for `last_read`.
    last_status: (bool, bool),
    /// A `read_at_least` target is stored in the shared state (backpressure lifted).
    lifting: bool,
    /// Frames were taken from the last read's buffer and no `advance_to` followed yet.
    frames_taken: bool,
    /// The last blocking read brought fewer than `SMALL_READ` new bytes: the next one coalesces.
    coalesce: bool,
    /// The last `read_buffer().await` brought fewer than `SMALL_READ` new bytes: the next one may
    /// yield once first (see `ReadFuture::poll`).
    small_async_read: bool,
    completed: bool,
    /// An inline transport's reads of the source (`pipe::transport`), when there is one.
    source: Option<Box<dyn Refill>>,
    /// Times a waiting reader moved its unconsumed bytes into a fitted block.
    compactions: u64,
    /// The block that small copied frames share (`packet::shared_copy`); let go before waiting.
    copies: SharedCopies,
    /// The waker this reader registered last with its wait cell (`WaitCell::register_once`).
    registered: Option<std::task::Waker>,
}

impl PipeReader {
    /// Frames of at most this many bytes are copied when taken ([`take_frame`](Self::take_frame)),
    /// larger ones shared (set with [`PipeOptions::copy_threshold`](super::PipeOptions::copy_threshold)).
    #[inline]
    pub(crate) fn copy_threshold(&self) -> usize {
        self.copy_threshold
    }

    pub(crate) fn new(
        queue: Consumer,
        state: Arc<PipeState>,
        pool: Pool,
        copy_threshold: usize,
    ) -> PipeReader {
        PipeReader::with_input(Input::Shared(queue), state, pool, copy_threshold)
    }

    /// A reader of its own source (set with [`set_source`](Self::set_source)): no writer end,
    /// its bytes in its own segments (`local.rs`), read into blocks of `min_segment_size` bytes
    /// or more.
    pub(crate) fn new_local(
        state: Arc<PipeState>,
        pool: Pool,
        copy_threshold: usize,
        min_segment_size: usize,
        keep_idle: bool,
    ) -> PipeReader {
        let local = Local::new(pool.clone(), min_segment_size, keep_idle);
        PipeReader::with_input(Input::Local(Box::new(local)), state, pool, copy_threshold)
    }

    fn with_input(
        queue: Input,
        state: Arc<PipeState>,
        pool: Pool,
        copy_threshold: usize,
    ) -> PipeReader {
        PipeReader {
            queue,
            state,
            pool,
            copy_threshold,
            examined: 0,
            examined_max: 0,
            no_wake_up_to: 0,
            last_len: None,
            writer_flags: 0,
            last_status: (false, false),
            lifting: false,
            frames_taken: false,
            coalesce: false,
            small_async_read: false,
            completed: false,
            source: None,
            compactions: 0,
            copies: SharedCopies::default(),
            registered: None,
        }
    }

    /// Read `source` within this reader's own waits from now on (an inline transport; a reader
    /// made with [`new_local`](Self::new_local)).
    pub(crate) fn set_source(&mut self, source: Box<dyn Refill>) {
        debug_assert!(self.is_local(), "a source fills the reader's own segments");
        self.source = Some(source);
    }

    /// Whether this reader reads its own source into its own segments: no writer shares its
    /// state, so it publishes no position and lifts no backpressure.
    #[inline]
    fn is_local(&self) -> bool {
        matches!(self.queue, Input::Local(_))
    }

    /// See [`TailProbe`]; `None` for a reader of its own source.
    pub(crate) fn tail_probe(&self) -> Option<TailProbe> {
        match &self.queue {
            Input::Shared(queue) => Some(queue.tail_probe()),
            Input::Local(_) => None,
        }
    }

    /// Whether a read would find nothing new, after a read that found nothing: its wake is still
    /// registered (no publication has used it up) and nothing was published since. Then a caller
    /// that only looks for new bytes (a driver with many connections) may skip the read: a
    /// publication this misses wakes it. (A skipped read also leaves the writer's parked block
    /// alone: [`release_writer_block`](Self::release_writer_block) sends it home.) False for a
    /// reader of its own source.
    ///
    /// The registration first: a wake may use it up for bytes an earlier read already returned
    /// (the writer publishes, the reader reads them, then the writer's wake runs), and the next
    /// publication then wakes nobody unless a read registers again.
    #[cfg_attr(not(all(feature = "io-uring", target_os = "linux")), allow(dead_code))]
    #[inline]
    pub(crate) fn is_quiet(&self) -> bool {
        match &self.queue {
            Input::Shared(queue) => self.state.waits.reader.is_waiting() && queue.is_quiet(),
            Input::Local(_) => false,
        }
    }

    /// Whether the writer's buffer is parked (a peek): [`release_writer_block`] would send its
    /// block home. False for a reader of its own source.
    ///
    /// [`release_writer_block`]: Self::release_writer_block
    #[cfg_attr(not(all(feature = "io-uring", target_os = "linux")), allow(dead_code))]
    #[inline]
    pub(crate) fn writer_block_parked(&self) -> bool {
        match &self.queue {
            Input::Shared(queue) => queue.writer_parked(),
            Input::Local(_) => false,
        }
    }

    /// Send the writer's parked block home if this reader holds no unconsumed byte (an idle
    /// connection's output).
    pub(crate) fn release_writer_block(&mut self) {
        if self.queue.available() == 0 {
            self.queue.release_parked_tail();
        }
    }

    /// Wait until there are bytes beyond the examined point (or the writer completes, or the read
    /// is canceled), then return all unconsumed bytes.
    ///
    /// Between two reads, [`advance_to`](Self::advance_to) says how far the last buffer was
    /// consumed and examined; without it, a read returns the same bytes at once. After
    /// [`take_frame`](Self::take_frame), a read without `advance_to` is
    /// [`Error::ReadWithoutAdvance`] instead (the rest would come back at once and spin a parser
    /// loop that took its frames and reads for more).
    ///
    /// Read coalescing: when the previous `read_buffer().await` brought fewer than 1 KiB of new
    /// bytes and the bytes there now are new but fewer than that, the read first yields to the
    /// executor once (wakes its task and returns `Pending`), so that a writer streaming small
    /// flushes on another worker adds more before this read takes them. Without it, two tasks
    /// on two workers trade small frames a few at a time, and every read pays for its wait and
    /// its wake (BENCHMARKS.md, "Async read coalescing"). A reader whose bytes are not there yet
    /// does not yield (it just waits), and a read that yielded does not yield again, nor does
    /// the next `read_buffer` if that one was dropped after its yield (in a `select!`). The
    /// poll form ([`poll_read_buffer`](Self::poll_read_buffer)) and
    /// [`read_at_least`](Self::read_at_least) never yield.
    #[inline]
    pub fn read_buffer(&mut self) -> ReadFuture<'_> {
        ReadFuture {
            reader: Some(self),
            want: Want::New,
            coalesce: Coalesce::FirstPoll,
        }
    }

    /// Wait until at least `n` unconsumed bytes are available (or the writer completes, or the read
    /// is canceled). While it waits, the writer's backpressure is lifted so that it can supply them
    /// even if they exceed the pause threshold.
    ///
    /// If the writer completes normally with fewer than `n` bytes, the result holds them with
    /// `is_completed` set; if it completes with an error, the read returns that error (the bytes
    /// stay in the pipe for [`read_buffer`](Self::read_buffer)). `n = usize::MAX` reads until the
    /// writer completes.
    #[inline]
    pub fn read_at_least(&mut self, n: usize) -> ReadFuture<'_> {
        ReadFuture {
            reader: Some(self),
            want: Want::AtLeast(n as u64),
            coalesce: Coalesce::Off,
        }
    }

    /// Return the unconsumed bytes if a read would not wait now, `Ok(None)` if it would. Like
    /// [`read_buffer`](Self::read_buffer), after frames were taken it needs `advance_to` first.
    #[inline]
    pub fn try_read(&mut self) -> Result<Option<ReadResult<'_>>, Error> {
        self.check_open()?;
        self.check_advanced()?;
        self.end_lift();
        let mut checked = self.check(Want::New);
        if checked.is_none() {
            if let (Some(source), Input::Local(local)) = (self.source.as_mut(), &mut self.queue) {
                if source.try_refill(&mut local.fill(&self.state)) {
                    checked = self.check(Want::New);
                }
            }
        }
        match checked {
            Some(Ok(status)) => Ok(Some(self.result(status))),
            Some(Err(e)) => Err(e),
            None => Ok(None),
        }
    }

    /// [`read_buffer`](Self::read_buffer) for thread-based code: parks the thread while waiting
    /// (after a brief spin and a few yields).
    ///
    /// Read coalescing: when the previous blocking read brought fewer than 1 KiB of new bytes
    /// and fewer than that are there now, the read first spins for about 200 ns (touching no
    /// shared memory) so that a writer streaming small flushes adds a few. Two threads trading
    /// small frames one at a time otherwise move the pipe's shared cache lines between the cores
    /// for every frame. A reader whose data is not coming yet loses nothing (it would wait
    /// anyway); one reading small pieces that are already there pays the delay on each read.
    /// (`read_buffer().await` coalesces by yielding to its executor once instead.)
    #[inline]
    pub fn read_blocking(&mut self) -> Result<ReadResult<'_>, Error> {
        self.read_blocking_want(Want::New)
    }

    /// [`read_at_least`](Self::read_at_least) for thread-based code, with the read coalescing of
    /// [`read_blocking`](Self::read_blocking) (the frame stream's blocking iterator).
    #[inline]
    pub(crate) fn read_at_least_blocking(&mut self, n: usize) -> Result<ReadResult<'_>, Error> {
        self.read_blocking_want(Want::AtLeast(n as u64))
    }

    /// The blocking reads: [`ReadFuture`] driven by `block_on`, with read coalescing (see
    /// `blocking::coalesce`): after a read that brought few new bytes, a read that finds few new
    /// bytes first lets a streaming writer add more.
    #[inline]
    fn read_blocking_want(&mut self, want: Want) -> Result<ReadResult<'_>, Error> {
        let seen = self.seen();
        if self.coalesce
            && !self.is_local()
            && self.queue.published_bytes().saturating_sub(seen) < SMALL_READ
        {
            coalesce();
        }
        let status = {
            let result = block_on(ReadFuture {
                reader: Some(self),
                want,
                coalesce: Coalesce::Off, // the blocking reads coalesce above, without a yield
            })?;
            (result.is_completed, result.is_canceled)
        };
        self.coalesce = self.last_read_was_small(seen);
        Ok(self.result(status))
    }

    /// Where the bytes a read would call new start: past the examined point and the consumed ones.
    #[inline]
    fn seen(&self) -> u64 {
        self.examined.max(self.queue.consumed())
    }

    /// Whether the last read brought fewer than `SMALL_READ` bytes beyond `seen` (its `seen()`
    /// before it ran): the read coalescing's "small read".
    #[inline]
    fn last_read_was_small(&self, seen: u64) -> bool {
        let end = self.queue.consumed() + self.last_len.unwrap_or(0);
        end.saturating_sub(seen) < SMALL_READ
    }

    /// The poll form of [`read_buffer`](Self::read_buffer): `Ready(Ok(()))` means a read result is available
    /// from [`last_read`](Self::last_read).
    #[inline]
    pub fn poll_read_buffer(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        self.check_advanced()?;
        self.poll_want(cx, Want::New).map_ok(|_| ())
    }

    /// The poll form of [`read_at_least`](Self::read_at_least).
    pub fn poll_read_at_least(
        &mut self,
        cx: &mut Context<'_>,
        n: usize,
    ) -> Poll<Result<(), Error>> {
        self.poll_want(cx, Want::AtLeast(n as u64)).map_ok(|_| ())
    }

    /// The buffer of the last completed read (less frames taken since), without waiting; `None` if
    /// the reader advanced since.
    #[inline]
    pub fn last_read(&self) -> Option<ReadResult<'_>> {
        self.last_len.map(|_| self.result(self.last_status))
    }

    /// The buffer of the last read (less frames taken since), as [`last_read`](Self::last_read)
    /// without the status.
    #[inline]
    pub(crate) fn last_buffer(&self) -> Option<ReadBuffer<'_>> {
        self.last_len
            .map(|len| ReadBuffer::new(&self.queue, len as usize))
    }

    /// `(is_completed, is_canceled)` of the last read, if the reader has not advanced since.
    #[inline]
    pub(crate) fn last_status(&self) -> Option<(bool, bool)> {
        self.last_len.map(|_| self.last_status)
    }

    /// After frames were taken, a new `read_buffer` needs `advance_to` first: the rest of the
    /// buffer is not marked examined, so it would come back at once and a parser loop that took
    /// its frames and reads for more would spin. (`read_at_least` waits by count, so it may follow
    /// directly; a read after a read without `take_frame` returns the same bytes, as documented.)
    #[inline]
    fn check_advanced(&self) -> Result<(), Error> {
        match self.last_len {
            Some(len) if self.frames_taken => Err(Error::ReadWithoutAdvance { len: len as usize }),
            _ => Ok(()),
        }
    }

    /// Stop lifting backpressure for a `read_at_least` that is no longer waiting (its poll form
    /// may have been abandoned while pending).
    #[inline]
    ///
    /// SeqCst: the writer skips waking this side while its target is not reached (one wake per
    /// large frame, not per segment); a writer that publishes after this side next registers as
    /// waiting must see the cleared target, or it would skip a wake a plain read waits for (the
    /// handshake in `wait.rs` orders only SeqCst operations).
    fn end_lift(&mut self) {
        if self.lifting {
            self.lifting = false;
            self.state.progress.reader_needs.store(0, Ordering::SeqCst);
        }
    }

    #[inline]
    fn poll_want(&mut self, cx: &mut Context<'_>, want: Want) -> Poll<Result<(bool, bool), Error>> {
        self.check_open()?;
        if let Want::New = want {
            self.end_lift();
        }
        let mut registered = false;
        let result = loop {
            if let Some(result) = self.check(want) {
                break result;
            }
            if registered {
                return Poll::Pending;
            }
            if let (Some(source), Input::Local(local)) = (self.source.as_mut(), &mut self.queue) {
                let available = local.available();
                let need = match want {
                    Want::New => 1,
                    Want::AtLeast(n) => n.saturating_sub(available).max(1),
                };
                let mut fill = local.fill(&self.state);
                if source
                    .poll_refill(cx, need, available == 0, &mut fill)
                    .is_ready()
                {
                    continue;
                }
            }
            if let (Want::AtLeast(n), false) = (want, self.is_local()) {
                // Lift backpressure: the writer must not pause while we wait for bytes it has not
                // published yet. Wake it if it is already paused.
                // Saturating: `read_at_least(usize::MAX)` means "until the writer completes", and a
                // wrapped target would re-impose the pause the wait relies on lifting.
                let target = self.queue.consumed().saturating_add(n);
                self.state
                    .progress
                    .reader_needs
                    .store(target, Ordering::SeqCst);
                self.lifting = true;
                self.state.waits.writer.wake();
            }
            // About to sleep: let go of the block small copies share unless frames taken from it
            // keep it anyway, and with everything consumed send the writer's parked block
            // home, so an idle pipe holds none (the writer rents a fresh one if it writes again). With a few
            // unconsumed bytes (a partial frame) in large blocks, those bytes move to a fitted
            // block first (`compact_waiting`), and the large blocks go home the same way.
            self.copies.before_wait();
            if self.queue.available() == 0 {
                self.queue.release_parked_tail();
            } else {
                self.compact_waiting();
            }
            self.state
                .waits
                .reader
                .register_once(cx.waker(), &mut self.registered);
            registered = true;
        };
        self.end_lift();
        Poll::Ready(result)
    }

    /// About to wait with unconsumed bytes: if they are a small part of the pooled blocks holding
    /// them, copy them into one fitted pooled block, put it in their place and send the writer's
    /// parked block home, so a stalled connection holds memory in proportion to the bytes it
    /// sent, not a whole receive block (see [`COMPACT_UP_TO`] for when).
    ///
    /// Out of line: it runs only when the reader is about to sleep, never on a read that finds
    /// its bytes.
    #[cold]
    #[inline(never)]
    fn compact_waiting(&mut self) {
        let available = self.queue.available();
        if available > COMPACT_UP_TO as u64 {
            return;
        }
        let available = available as usize;
        // Pooled bytes the unconsumed bytes keep alive: each block counted once (consecutive
        // segments of one block follow each other). Other owners (`Bytes`, vectors) are the
        // user's memory: they neither count nor stop the copy.
        let mut pinned = 0;
        let mut last_block = 0;
        for packet in self.queue.packets() {
            if let Some(owned) = packet.as_owned() {
                let window = owned.window();
                if window.block_addr() != last_block {
                    last_block = window.block_addr();
                    pinned += window.block_capacity();
                }
            }
        }
        if pinned <= COMPACT_RATIO * available.max(MIN_COMPACT_BLOCK) {
            return;
        }
        // The writer's parked block goes home first. If the writer holds it (it is writing), its
        // next flush grows the last segment in that block: the bytes stay where they are.
        if self.queue.release_parked_tail() {
            return;
        }
        // A failed rent (the allocator is out of memory) leaves the bytes where they are.
        let Ok(mut buf) = self.pool.rent(available) else {
            return;
        };
        for chunk in ReadBuffer::new(&self.queue, available).segments() {
            buf.extend_from_slice(chunk)
                .expect("rented at least the available bytes");
        }
        self.queue
            .replace_available(Packet::from(buf.freeze_untracked()));
        self.compactions += 1;
    }

    /// How many times a waiting reader moved its unconsumed bytes into a fitted block (see
    /// [`COMPACT_UP_TO`]).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn compactions(&self) -> u64 {
        self.compactions
    }

    /// `Some` when a read can return now: `(is_completed, is_canceled)` or the writer's error.
    /// A successful outcome is also kept for [`last_read`](Self::last_read).
    #[inline]
    fn check(&mut self, want: Want) -> Option<Result<(bool, bool), Error>> {
        // SeqCst: after `register`, this load is the waiter's re-check in the handshake with a
        // canceler (`wait.rs`); a Relaxed load could miss a cancel whose wake saw no waiter
        // (the loom cancel model checks it).
        crate::sync::loom_seq_cst_point();
        let canceled = self.state.progress.cancel_read.load(Ordering::SeqCst)
            && self
                .state
                .progress
                .cancel_read
                .swap(false, Ordering::SeqCst);
        let (flags, consumed, available) = self.queue.refresh_counts();
        self.writer_flags = flags;
        let unseen = consumed + available > self.examined;
        let satisfied = canceled
            || match want {
                Want::New => unseen,
                Want::AtLeast(n) => available >= n,
            };
        let done = self.writer_flags & DONE != 0;
        let failed = self.writer_flags & FAILED != 0;
        // Deliver the writer's error, on every later read, once no read can be satisfied by the
        // bytes flushed before it: for `read_buffer`, when every such byte has been seen; for
        // `read_at_least(n)`, when fewer than `n` arrived (they never will: a short buffer with
        // neither `is_completed` nor `is_canceled` would break that read's promise).
        let at_least = matches!(want, Want::AtLeast(_));
        if done && failed && !satisfied && (!unseen || at_least) {
            return Some(Err(self.state.writer_error()));
        }
        if !(satisfied || done) {
            return None;
        }
        if done {
            self.release_finished();
        }
        // A writer that failed reports its end through the error, once its bytes are read.
        let status = (done && !failed, canceled);
        self.last_len = Some(available);
        self.frames_taken = false;
        self.last_status = status;
        Some(Ok(status))
    }

    #[inline]
    fn result(&self, (is_completed, is_canceled): (bool, bool)) -> ReadResult<'_> {
        let len = self.last_len.expect("a read result follows a read") as usize;
        ReadResult {
            buffer: ReadBuffer::new(&self.queue, len),
            is_completed,
            is_canceled,
        }
    }

    /// Release the first `consumed` bytes of the last read buffer and mark the first `examined`
    /// bytes as seen: the next read waits for bytes beyond them. `consumed <= examined <=` the
    /// buffer's length. Examined may move backwards; the furthest point counts for backpressure.
    ///
    /// Errors, leaving the pipe unchanged: no read since the last advance, `consumed > examined`,
    /// `examined` beyond the buffer, the reader completed.
    #[inline]
    pub fn advance_to(&mut self, consumed: usize, examined: usize) -> Result<(), Error> {
        self.check_open()?;
        let len = self.last_len.ok_or(Error::AdvanceWithoutRead)?;
        if consumed > examined || examined as u64 > len {
            return Err(Error::InvalidAdvance {
                consumed,
                examined,
                len: len as usize,
            });
        }
        self.end_lift();
        let start = self.queue.consumed();
        // A parser that needs more bytes examines without consuming (every frame's last read).
        if consumed > 0 {
            self.queue.consume(consumed as u64);
        }
        self.last_len = None;
        self.frames_taken = false;
        self.examined = start + examined as u64;
        self.note_examined(self.examined);
        if self.writer_flags & DONE != 0 {
            self.release_finished();
        }
        Ok(())
    }

    /// The writer has completed and every byte is consumed: nothing more can arrive, so the last
    /// segment, kept in case the writer's next flush grew it, goes (with its block) now rather
    /// than when the reader is dropped.
    #[cold]
    #[inline(never)]
    fn release_finished(&mut self) {
        if self.queue.available() == 0 {
            self.queue.release_parked_tail();
        }
    }

    /// Wait until at least one unconsumed byte is available, the writer completes, or the read is
    /// canceled: the I/O adapters' read (a byte stream has no "examined" point). `(is_completed,
    /// is_canceled)`; the buffer is then [`last_read`](Self::last_read).
    #[inline]
    pub(crate) fn poll_available(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(bool, bool), Error>> {
        self.poll_want(cx, Want::AtLeast(1))
    }

    /// Bytes consumed since the pipe was made: the stream position of the first unconsumed byte.
    #[inline]
    pub(crate) fn position(&self) -> u64 {
        self.queue.consumed()
    }

    /// The first segment of the last read buffer (empty if there is none).
    #[inline]
    pub(crate) fn first_chunk(&self) -> &[u8] {
        match self.last_len {
            Some(len) if len > 0 => self.queue.packets().next().map_or(&[], |p| &p[..]),
            _ => &[],
        }
    }

    /// Consume up to `n` bytes of the last read buffer (clamped to what it holds), keeping the rest
    /// of that buffer readable: the I/O adapters' `consume`.
    #[inline]
    pub(crate) fn consume_read(&mut self, n: usize) {
        let n = (n as u64).min(self.last_len.unwrap_or(0));
        if n > 0 {
            self.queue.consume(n);
            self.after_take(n as usize);
        }
        // A byte stream has no read to advance in: consuming is the advance.
        self.last_len = None;
    }

    /// The byte streams' `consume` after `fill_buf`: up to `n` bytes of the first segment, which
    /// is what `fill_buf` returned (clamped to it: bytes the caller never saw stay unconsumed).
    #[inline]
    pub(crate) fn consume_filled(&mut self, n: usize) {
        let n = n.min(self.first_chunk().len());
        self.consume_read(n);
    }

    /// Hand the first `max` bytes (at most) of the last read buffer to `put`, segment by segment,
    /// then consume them; returns how many.
    pub(crate) fn read_with(&mut self, max: usize, mut put: impl FnMut(&[u8])) -> usize {
        let mut copied = 0;
        if let Some(result) = self.last_read() {
            for chunk in result.buffer.segments() {
                let n = chunk.len().min(max - copied);
                put(&chunk[..n]);
                copied += n;
                if copied == max {
                    break;
                }
            }
        }
        self.consume_read(copied);
        copied
    }

    /// Take the first `n` bytes of the last read buffer out as a packet that outlives the pipe.
    ///
    /// Frames of at most the copy threshold are copied, so a small frame never pins a large block:
    /// one of at most [`Packet::INLINE_CAPACITY`] bytes into the packet value itself (no rent),
    /// one of at most 256 bytes into a 1 KiB block that the small copies taken from this reader
    /// share side by side (one header and reference count for several frames; a kept frame keeps
    /// at most that block alive; while taken frames are dropped at once, fitted buffers instead),
    /// a larger one into a fitted pooled buffer. Larger frames are shared without copying when they lie in one
    /// segment, or in segments that follow each other in one block (a pump's consecutive reads
    /// into the same block, a writer's flushes); a large frame spanning separate blocks is copied
    /// once (use [`take_frame_chain`](Self::take_frame_chain) to share it as a chain instead). The buffer of
    /// the last read shrinks by `n`; call [`advance_to`](Self::advance_to) as usual afterwards
    /// (positions relative to what is left) to mark how far the rest was examined.
    ///
    /// ```
    /// use packetpipe::ByteSegments;
    ///
    /// let (mut writer, mut reader) = packetpipe::pipe::pipe();
    /// writer.write_slice(b"\x03abc\x02de")?;
    /// writer.flush_blocking()?;
    /// reader.read_blocking()?;
    /// let mut frames = Vec::new();
    /// while let Some(len) = reader.last_read().and_then(|r| r.buffer.peek_be::<u8>(0)) {
    ///     reader.take_frame(1)?; // the length prefix
    ///     frames.push(reader.take_frame(len as usize)?);
    /// }
    /// assert_eq!(frames, [&b"abc"[..], &b"de"[..]]);
    /// # Ok::<(), packetpipe::Error>(())
    /// ```
    #[inline]
    #[track_caller]
    pub fn take_frame(&mut self, n: usize) -> Result<Packet, Error> {
        self.take_frame_after(0, n)
    }

    /// Drop the first `skip` bytes of the last read buffer (a header, say), then take the next
    /// `n` out as [`take_frame`](Self::take_frame) does: one call, one bounds check, one
    /// examined-position update, and a copied frame's buffer holds the `n` bytes only (the
    /// decoders' form; outside the crate, a header and the frame after it are two `take_frame`s).
    // Always inlined (into a decoder's `decode`): left to the compiler, the frames bench's binary
    // called it, and a 64-byte frame took 28 ns instead of 16 (BENCHMARKS.md, "frames": "The
    // decode step inlined").
    // `track_caller`: a pool that tracks leaks records the caller as the frame's rent site (a
    // copy) or as the last use of the block it shares.
    #[inline(always)]
    #[track_caller]
    pub(crate) fn take_frame_after(&mut self, skip: usize, n: usize) -> Result<Packet, Error> {
        self.check_take(skip, n)?;
        // Within the buffer's length: checked.
        let total = skip + n;
        // A reader of its own input, a frame that fits the packet value, in the first segment:
        // the most common take of small frames, with one look at the input (no examined position
        // to share: nothing waits on this reader's progress).
        if let Input::Local(local) = &mut self.queue {
            if n <= Packet::INLINE_CAPACITY && n > 0 && n <= self.copy_threshold {
                if let Some(front) = local.front_holding(total) {
                    let frame = Packet::inline_from(front, skip, n);
                    local.consume_in_front(total as u64);
                    self.examined = self.examined.max(local.consumed());
                    self.last_len = self.last_len.map(|len| len - total as u64);
                    self.frames_taken = true;
                    return Ok(frame);
                }
            }
        }
        let packet = match self.queue.front_holding(total) {
            // The common case, the frame in the first segment: copy or share it from there.
            Some(front) if n > 0 => {
                if n <= self.copy_threshold {
                    // A frame that fits the packet value is held there: no rent at all.
                    let frame = if n <= Packet::INLINE_CAPACITY {
                        Packet::inline_from(front, skip, n)
                    } else if n <= SHARED_COPY_MAX && !self.copies.next_is_fitted() {
                        // Beside the other small copies, in the block they share.
                        let bytes = &front[skip..total];
                        self.copies.copy(&self.pool, n, std::iter::once(bytes))?
                    } else {
                        Packet::from(self.pool.copy_owned(&front[skip..total])?)
                    };
                    self.queue.consume_in_front(total as u64);
                    frame
                } else if front.len() > total {
                    // Shared out of the middle of the segment: one reference more on its block,
                    // the segment advanced in place (no split of the queue's packet, no loop).
                    let frame = front.slice(skip..total);
                    self.queue.consume_in_front(total as u64);
                    frame.note_use(BlockUse::Taken, Location::caller());
                    frame
                } else {
                    self.queue.consume(skip as u64);
                    let mut frame = Packet::new();
                    self.queue.take(n as u64, |p| frame = p);
                    frame.note_use(BlockUse::Taken, Location::caller());
                    frame
                }
            }
            _ => self.take_spanning(skip, n)?,
        };
        self.after_take(total);
        self.frames_taken = true;
        Ok(packet)
    }

    /// `take_frame_after`'s general case: `n` bytes (0, or not all in the first segment after
    /// `skip`) copied into one buffer, or shared when above the copy threshold and in one
    /// segment. The buffer is rented before anything is consumed, so a failed rent changes nothing.
    #[track_caller]
    fn take_spanning(&mut self, skip: usize, n: usize) -> Result<Packet, Error> {
        if n == 0 {
            self.queue.consume(skip as u64);
            return Ok(Packet::new());
        }
        // Whether the segment holding the frame's first byte ends before the frame does.
        let spans_segments = ReadBuffer::new(&self.queue, skip + n)
            .slice(skip..)
            .first_chunk()
            .len()
            < n;
        if spans_segments && n > self.copy_threshold && self.in_one_block(skip, n) {
            // Segments that follow each other in one block (a pump's reads into the same block, a
            // writer's flushes): one window over them, shared, not copied.
            self.queue.consume(skip as u64);
            let mut frame = Packet::new();
            self.queue.take(n as u64, |p| {
                frame
                    .try_join(p)
                    .unwrap_or_else(|_| unreachable!("in_one_block checked every segment"))
            });
            frame.note_use(BlockUse::Taken, Location::caller());
            Ok(frame)
        } else if n <= Packet::INLINE_CAPACITY && (n <= self.copy_threshold || spans_segments) {
            self.queue.consume(skip as u64);
            let frame = Packet::inline_from_chunks(ReadBuffer::new(&self.queue, n).segments());
            self.queue.consume(n as u64);
            Ok(frame)
        } else if n <= SHARED_COPY_MAX
            && (n <= self.copy_threshold || spans_segments)
            && !self.copies.next_is_fitted()
        {
            let frame = {
                let chunks = ReadBuffer::new(&self.queue, skip + n)
                    .slice(skip..)
                    .segments();
                self.copies.copy(&self.pool, n, chunks)?
            };
            self.queue.consume((skip + n) as u64);
            Ok(frame)
        } else if n <= self.copy_threshold || spans_segments {
            let mut buf = self.pool.rent(n)?;
            self.queue.consume(skip as u64);
            for chunk in ReadBuffer::new(&self.queue, n).segments() {
                buf.extend_from_slice(chunk)
                    .expect("rented at least n bytes");
            }
            self.queue.consume(n as u64);
            // The rent above recorded this take (leak tracking).
            Ok(buf.freeze_untracked().into())
        } else {
            self.queue.consume(skip as u64);
            let mut frame = Packet::new();
            self.queue.take(n as u64, |p| frame = p);
            frame.note_use(BlockUse::Taken, Location::caller());
            Ok(frame)
        }
    }

    /// Whether the `n > 0` bytes after the first `skip` lie in pooled segments of one block, each
    /// starting where the one before ends (so one window can cover them).
    fn in_one_block(&self, mut skip: usize, mut n: usize) -> bool {
        let mut previous: Option<&crate::packet::OwnedPacket> = None;
        for packet in self.queue.packets() {
            if skip >= packet.len() {
                skip -= packet.len();
                continue;
            }
            let Some(owned) = packet.as_owned() else {
                return false;
            };
            if previous.is_some_and(|p| !p.is_followed_by(owned)) {
                return false;
            }
            let here = packet.len() - std::mem::take(&mut skip);
            if here >= n {
                return true;
            }
            n -= here;
            previous = Some(owned);
        }
        false
    }

    /// Take the first `n` bytes of the last read buffer out as a chain, never copying.
    #[track_caller]
    pub fn take_frame_chain(&mut self, n: usize) -> Result<PacketChain, Error> {
        self.check_take(0, n)?;
        let mut chain = PacketChain::new();
        let site = Location::caller();
        self.queue.take(n as u64, |p| {
            p.note_use(BlockUse::Taken, site);
            chain.push(p)
        });
        self.after_take(n);
        self.frames_taken = true;
        Ok(chain)
    }

    /// Consume the first `n` bytes of the last read buffer without taking them out (a decoder's
    /// skip): the same checks and bookkeeping as a take, no packet made.
    #[inline]
    pub(crate) fn skip_frame(&mut self, n: usize) -> Result<(), Error> {
        self.check_take(0, n)?;
        self.queue.consume(n as u64);
        self.after_take(n);
        self.frames_taken = true;
        Ok(())
    }

    /// `skip` bytes and then a frame of `n` must lie within the last read buffer.
    #[inline]
    fn check_take(&self, skip: usize, n: usize) -> Result<(), Error> {
        self.check_open()?;
        let len = self.last_len.ok_or(Error::AdvanceWithoutRead)?;
        // Both within `len` and their sum too (checked without an overflowing add).
        if n as u64 > len || skip as u64 > len - n as u64 {
            return Err(Error::FrameBeyondBuffer {
                skip,
                requested: n,
                len: len as usize,
            });
        }
        Ok(())
    }

    #[inline]
    fn after_take(&mut self, n: usize) {
        self.end_lift();
        self.last_len = self.last_len.map(|len| len - n as u64);
        let consumed = self.queue.consumed();
        self.examined = self.examined.max(consumed);
        self.note_examined(consumed);
    }

    /// Share a new furthest-examined position with the writer, waking it if that lifts its pause.
    /// Inline: it runs once per frame taken; the wake is out of line.
    #[inline(always)]
    fn note_examined(&mut self, position: u64) {
        // A local reader has no writer to tell.
        if position <= self.examined_max || self.is_local() {
            return;
        }
        self.examined_max = position;
        self.state.reader.store(position, Ordering::SeqCst);
        if position > self.no_wake_up_to && self.state.waits.writer.is_waiting() {
            self.wake_paused_writer();
        }
    }

    /// The writer waits: wake it if the examined position just shared lifts its pause. If not,
    /// note how far this reader can go before a check can come out differently.
    #[cold]
    #[inline(never)]
    fn wake_paused_writer(&mut self) {
        let published = self.queue.published_bytes();
        let reader = self.state.reader.load(Ordering::SeqCst);
        if !self.state.must_wait(reader, published, true) {
            self.state.waits.writer.wake();
        } else {
            // `must_wait` held: `published - position >= resume threshold` (DONE unset, a lifting
            // target not above `published`). For a later position up to `published - resume`, and
            // any published count from `published` on, it still holds: no wake is due. Only this
            // reader lifts (and wakes at once when it does) or completes, so nothing else changes
            // the answer.
            self.no_wake_up_to = published.saturating_sub(self.state.progress.resume_threshold);
        }
    }

    /// Stop reading: every unconsumed byte is released, a paused flush returns `is_completed`, and
    /// the writer's later writes are discarded. Later reads return [`Error::ReaderCompleted`].
    /// Completing again does nothing.
    pub fn complete(&mut self) {
        self.complete_inner(None);
    }

    /// As [`complete`](Self::complete), and the writer gets `error` (as [`Error::Peer`]) on every
    /// later flush.
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
        self.last_len = None;
        self.end_lift();
        let mut word = DONE | self.examined_max;
        let source = self.source.take();
        if let Some(mut source) = source {
            source.close(error.as_ref(), self.queue.consumed());
        }
        if let Some(error) = error {
            self.state.set_reader_error(error);
            word |= FAILED;
        }
        self.state.reader.store(word, Ordering::SeqCst);
        // After the word: a writer that sees the flag finds `DONE` (and the error) in the word.
        self.state
            .progress
            .reader_done
            .store(true, Ordering::SeqCst);
        self.state.waits.writer.wake();
        self.state.waits.reader_closed.wake();
        self.queue.release_parked_tail();
        self.copies.release();
        self.queue.close();
    }

    /// A handle that cancels this reader's pending read from another thread or task
    /// ([`PipeCanceler::cancel`]).
    pub fn canceler(&self) -> PipeCanceler {
        PipeCanceler {
            end: CancelEnd::Reader,
            state: self.state.clone(),
        }
    }

    #[inline]
    fn check_open(&self) -> Result<(), Error> {
        if self.completed {
            return Err(Error::ReaderCompleted);
        }
        Ok(())
    }
}

/// Dropping the reader completes it; dropped while its thread panics, it completes with an error
/// (the writer's flushes report the failure instead of a normal `is_completed`).
impl Drop for PipeReader {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.complete_with_error("the reader was dropped while its thread panicked");
        } else {
            self.complete();
        }
    }
}

impl std::fmt::Debug for PipeReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PipeReader")
            .field("consumed", &self.queue.consumed())
            .field("examined", &self.examined)
            .field("completed", &self.completed)
            .finish()
    }
}

/// Future of [`PipeReader::read_buffer`] and [`PipeReader::read_at_least`] (named so that it does
/// not clash with `std::io::Read` under glob imports).
///
/// Cancel safety: safe to drop at any await point (in a `select!`, say). A read consumes nothing by
/// itself, so a dropped read loses no byte; a dropped `read_at_least` also stops lifting the
/// writer's backpressure. The next read sees the same bytes.
#[must_use = "futures do nothing unless polled"]
pub struct ReadFuture<'a> {
    reader: Option<&'a mut PipeReader>,
    want: Want,
    coalesce: Coalesce,
}

/// Where a [`ReadFuture`] stands with read coalescing (see [`PipeReader::read_buffer`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Coalesce {
    /// Not this kind of read (`read_at_least`, the blocking reads).
    Off,
    /// `read_buffer`, not polled yet: it may yield once.
    FirstPoll,
    /// `read_buffer`, polled: it records whether it brought few bytes when it completes.
    Polled,
}

impl<'a> Future for ReadFuture<'a> {
    type Output = Result<ReadResult<'a>, Error>;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let (want, coalesce) = (self.want, self.coalesce);
        if coalesce == Coalesce::FirstPoll {
            self.coalesce = Coalesce::Polled;
        }
        let reader = self
            .reader
            .as_mut()
            .expect("ReadFuture polled after completion");
        if let (Want::New, Err(e)) = (want, reader.check_advanced()) {
            self.reader = None;
            return Poll::Ready(Err(e));
        }
        // Only coalescing reads look at where their new bytes start.
        let seen = match coalesce {
            Coalesce::Off => 0,
            _ => reader.seen(),
        };
        // After a small read, a few new bytes already there: a writer streaming small flushes is
        // probably adding more right now. Let it (yield once), then take them together. (Loom
        // explores interleavings, not time: a yield would only add steps to its models.)
        if coalesce == Coalesce::FirstPoll
            && reader.small_async_read
            && !reader.completed
            && !reader.is_local()
            && !cfg!(packetpipe_loom)
        {
            let unseen = reader.queue.published_bytes().saturating_sub(seen);
            if unseen > 0 && unseen < SMALL_READ {
                // Spent on the reader, not on this future: a read dropped after its yield (a
                // `select!` whose other branch won) and made again must not yield again, or a
                // loop of such reads would never take the bytes that are there.
                reader.small_async_read = false;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
        }
        let status = match reader.poll_want(cx, want) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Ready(Ok(status)) => status,
        };
        if coalesce != Coalesce::Off {
            reader.small_async_read = reader.last_read_was_small(seen);
        }
        let reader: &'a PipeReader = self.reader.take().expect("checked above");
        Poll::Ready(Ok(reader.result(status)))
    }
}

impl Drop for ReadFuture<'_> {
    fn drop(&mut self) {
        // A `read_at_least` dropped while waiting must not keep backpressure lifted.
        if let Some(reader) = &mut self.reader {
            reader.end_lift();
        }
    }
}

impl std::fmt::Debug for ReadFuture<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReadFuture")
    }
}
