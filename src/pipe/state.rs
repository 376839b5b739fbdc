//! State shared by the two ends of a pipe (besides the segment queue): the reader's progress,
//! completion, cancellation, and each side's parking spot.
//!
//! Both state words, the queue's `published` and this module's `reader`, share one layout: the
//! top bit `DONE` (the side completed), the next `FAILED` (it completed with an error) and a
//! byte count below them (`COUNT`).
//!
//! Who writes what:
//!
//! | field | written by | read by |
//! |---|---|---|
//! | queue `published` word (bytes flushed + `DONE`/`FAILED`) | writer (SeqCst add) | reader |
//! | `reader` word (furthest examined + `DONE`/`FAILED`) | reader (SeqCst) | writer, only when a flush may pause or the reader completed |
//! | `reader_done` flag (a copy of the word's `DONE`, stored after it) | reader (SeqCst, once) | writer, every flush |
//! | `reader_needs` (target of a pending `read_at_least`) | reader (SeqCst) | writer |
//! | `cancel_read` / `cancel_flush` | any `PipeCanceler` (SeqCst) | reader / writer (swap) |
//! | `waits.reader` | reader registers | writer and cancelers wake |
//! | `waits.writer` | writer registers | reader and cancelers wake |
//! | `reader_closed` wait | writer registers (idle pump) | reader's completion wakes |
//! | queue `parked_tail` | writer parks (before publishing) and reclaims (swap) | reader releases (swap) before it waits |
//! | `writer_error` / `reader_error` | the completing side, before its `DONE` and `FAILED` bits | the other side, after it sees `FAILED` |

use super::wait::WaitCell;
use crate::error::{Error, SharedError};
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::sync::{lock, CachePadded, Mutex};

/// Top bit of a state word: the side has completed.
pub(crate) const DONE: u64 = 1 << 63;
/// Second bit: it completed with an error (stored before the bit is set).
pub(crate) const FAILED: u64 = 1 << 62;
/// The count part of a state word.
pub(crate) const COUNT: u64 = !(DONE | FAILED);

/// Everything the two ends share besides the segment queue, in three cache-line groups (each
/// `CachePadded`, so a pipe costs 512 bytes of state here, not one line per field):
///
/// - `reader`: the reader's examined position, written on every advance. The writer loads it only
///   when a flush may have to pause (the bytes past the position it last loaded reach the pause
///   threshold) or to see how the reader completed, so a streaming pipe far from its threshold
///   does not move this line between the cores on every frame.
/// - `progress`: what the writer reads on every flush and is rarely written: the reader's
///   completion flag, thresholds, the `read_at_least` target, cancel flags, completion errors.
/// - `waits`: each side's parking spot, written only when a side goes to sleep or wakes the other.
///
/// The writer's hot word (`published`) and its parked block live in the queue's own shared state.
pub(crate) struct PipeState {
    pub(crate) reader: CachePadded<AtomicU64>,
    pub(crate) progress: CachePadded<Progress>,
    pub(crate) waits: CachePadded<Waits>,
}

pub(crate) struct Progress {
    /// The reader has completed: set (SeqCst) after `DONE` is in the `reader` word, so a writer
    /// that sees it finds `DONE` there too. Read on every flush; written once.
    pub(crate) reader_done: AtomicBool,
    /// Target of a waiting `read_at_least` (0: none): lifts backpressure below it.
    pub(crate) reader_needs: AtomicU64,
    pub(crate) pause_threshold: u64,
    pub(crate) resume_threshold: u64,
    pub(crate) cancel_read: AtomicBool,
    pub(crate) cancel_flush: AtomicBool,
    writer_error: Mutex<Option<SharedError>>,
    reader_error: Mutex<Option<SharedError>>,
}

pub(crate) struct Waits {
    pub(crate) reader: WaitCell,
    pub(crate) writer: WaitCell,
    /// A writer-side task waiting only for the reader to complete (a fill pump idle on its
    /// source); woken by the reader's completion alone, never by its progress.
    pub(crate) reader_closed: WaitCell,
}

impl PipeState {
    pub(crate) fn new(pause_threshold: u64, resume_threshold: u64) -> PipeState {
        PipeState {
            reader: CachePadded(AtomicU64::new(0)),
            progress: CachePadded(Progress {
                reader_done: AtomicBool::new(false),
                reader_needs: AtomicU64::new(0),
                pause_threshold,
                // A paused flush resumes at `< resume`; 0 would never be reached, so it means
                // "once every flushed byte is examined".
                resume_threshold: resume_threshold.clamp(1, pause_threshold.max(1)),
                cancel_read: AtomicBool::new(false),
                cancel_flush: AtomicBool::new(false),
                writer_error: Mutex::new(None),
                reader_error: Mutex::new(None),
            }),
            waits: CachePadded(Waits {
                reader: WaitCell::default(),
                writer: WaitCell::default(),
                reader_closed: WaitCell::default(),
            }),
        }
    }

    /// Record the writer's error; call before publishing `DONE | FAILED`.
    pub(crate) fn set_writer_error(&self, error: SharedError) {
        *lock(&self.progress.writer_error) = Some(error);
    }

    pub(crate) fn set_reader_error(&self, error: SharedError) {
        *lock(&self.progress.reader_error) = Some(error);
    }

    /// The writer's completion error as seen by the reader (after it saw `FAILED`).
    pub(crate) fn writer_error(&self) -> Error {
        let source = lock(&self.progress.writer_error)
            .clone()
            .expect("FAILED is set after the error");
        Error::Peer {
            side: crate::error::Side::Writer,
            source,
        }
    }

    pub(crate) fn reader_error(&self) -> Error {
        let source = lock(&self.progress.reader_error)
            .clone()
            .expect("FAILED is set after the error");
        Error::Peer {
            side: crate::error::Side::Reader,
            source,
        }
    }

    /// Whether a flush that has published up to `published` must wait, given whether it is
    /// already paused (hysteresis: pause at >= pause threshold, resume at < resume threshold).
    #[inline]
    pub(crate) fn must_wait(&self, reader: u64, published: u64, paused: bool) -> bool {
        if self.progress.pause_threshold == 0 {
            return false;
        }
        if reader & DONE != 0 {
            return false;
        }
        let unexamined = published.saturating_sub(reader & COUNT);
        let threshold = if paused {
            self.progress.resume_threshold
        } else {
            self.progress.pause_threshold
        };
        // A reader waiting in `read_at_least` for bytes not yet published lifts backpressure
        // (checked last: it is only needed when the flush would otherwise wait).
        unexamined >= threshold && self.progress.reader_needs.load(Ordering::SeqCst) <= published
    }
}

/// Cancels the pending read (of the reader it came from: [`PipeReader::canceler`]) or the
/// pending flush (of the writer it came from: [`PipeWriter::canceler`]) from any thread or task,
/// without completing anything. It is the way to wake a thread blocked in
/// [`read_blocking`](super::PipeReader::read_blocking) or [`flush_blocking`](super::PipeWriter::flush_blocking)
/// from another thread; async code may also drop the (cancel-safe) future instead.
///
/// Cancellation is one-shot: it makes the current (or, if none is waiting, the next) read or flush
/// return at once with `is_canceled` set, without losing data.
///
/// ```
/// let (writer, mut reader) = packetpipe::pipe();
/// let canceler = reader.canceler();
/// let t = std::thread::spawn(move || reader.read_blocking().map(|r| r.is_canceled));
/// canceler.cancel();
/// assert_eq!(t.join().unwrap(), Ok(true));
/// # drop(writer);
/// ```
///
/// [`PipeReader::canceler`]: super::PipeReader::canceler
/// [`PipeWriter::canceler`]: super::PipeWriter::canceler
#[derive(Clone)]
pub struct PipeCanceler {
    pub(crate) state: crate::sync::Arc<PipeState>,
    /// Which end it came from: what it cancels.
    pub(crate) end: CancelEnd,
}

/// The end a [`PipeCanceler`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CancelEnd {
    /// Cancels the pending read.
    Reader,
    /// Cancels the pending flush.
    Writer,
}

impl PipeCanceler {
    /// Make the pending read (of a reader's canceler) or flush (of a writer's canceler) return
    /// with `is_canceled`, or the next one if none is pending; a canceled flush keeps its data
    /// committed.
    pub fn cancel(&self) {
        match self.end {
            CancelEnd::Reader => self.cancel_pending_read(),
            CancelEnd::Writer => self.cancel_pending_flush(),
        }
    }

    /// Make the pending read (or the next one) return with `is_canceled`.
    pub(crate) fn cancel_pending_read(&self) {
        self.state
            .progress
            .cancel_read
            .store(true, Ordering::SeqCst);
        self.state.waits.reader.wake();
    }

    /// Wake a reader waiting on its pipe, changing nothing: it looks at its source again (an
    /// inline transport's end).
    pub(crate) fn wake_reader(&self) {
        self.state.waits.reader.wake();
    }

    /// Make the pending flush (or the next one) return with `is_canceled`; flushed data stays
    /// committed.
    pub(crate) fn cancel_pending_flush(&self) {
        self.state
            .progress
            .cancel_flush
            .store(true, Ordering::SeqCst);
        self.state.waits.writer.wake();
    }
}

impl std::fmt::Debug for PipeCanceler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PipeCanceler")
            .field("end", &self.end)
            .finish()
    }
}
