//! The reference model: what the pipe must do, operation by operation, as a `VecDeque<u8>` of
//! flushed bytes, the staged bytes and a handful of flags.

use super::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Want {
    New,
    AtLeast(usize),
}

/// An error the model expects.
#[derive(Debug, Clone)]
pub(crate) enum Expect {
    WriterCompleted,
    ReaderCompleted,
    /// `available` is `None` when the model does not know how much space `buffer_mut` left.
    CommitPastSpare {
        requested: usize,
        available: Option<usize>,
    },
    AdvanceWithoutRead,
    ReadWithoutAdvance {
        len: usize,
    },
    InvalidAdvance {
        consumed: usize,
        examined: usize,
        len: usize,
    },
    FrameBeyondBuffer {
        skip: usize,
        requested: usize,
        len: usize,
    },
    Peer {
        side: &'static str,
        message: String,
    },
}

#[track_caller]
pub(crate) fn check_error(actual: &Error, expected: &Expect) {
    let ok = match (actual, expected) {
        (Error::WriterCompleted, Expect::WriterCompleted) => true,
        (Error::ReaderCompleted, Expect::ReaderCompleted) => true,
        (Error::AdvanceWithoutRead, Expect::AdvanceWithoutRead) => true,
        (Error::ReadWithoutAdvance { len }, Expect::ReadWithoutAdvance { len: l }) => len == l,
        (
            Error::CommitPastSpare {
                requested,
                available,
            },
            Expect::CommitPastSpare {
                requested: r,
                available: a,
            },
        ) => requested == r && a.as_ref().map_or(true, |a| a == available),
        (
            Error::InvalidAdvance {
                consumed,
                examined,
                len,
            },
            Expect::InvalidAdvance {
                consumed: c,
                examined: e,
                len: l,
            },
        ) => (consumed, examined, len) == (c, e, l),
        (
            Error::FrameBeyondBuffer {
                skip,
                requested,
                len,
            },
            Expect::FrameBeyondBuffer {
                skip: s,
                requested: r,
                len: l,
            },
        ) => (skip, requested, len) == (s, r, l),
        (Error::Peer { side, source }, Expect::Peer { side: s, message }) => {
            side.to_string() == *s
                && source.to_string() == *message
                && actual.to_string() == format!("the {s} completed with an error")
        }
        _ => false,
    };
    assert!(ok, "expected error {expected:?}, got {actual:?} ({actual})");
    cover(match expected {
        Expect::WriterCompleted => "error: WriterCompleted",
        Expect::ReaderCompleted => "error: ReaderCompleted",
        Expect::CommitPastSpare { .. } => "error: CommitPastSpare",
        Expect::AdvanceWithoutRead => "error: AdvanceWithoutRead",
        Expect::ReadWithoutAdvance { .. } => "error: ReadWithoutAdvance",
        Expect::InvalidAdvance { .. } => "error: InvalidAdvance",
        Expect::FrameBeyondBuffer { .. } => "error: FrameBeyondBuffer",
        Expect::Peer { .. } => "error: Peer",
    });
}

/// What the model says an operation returns.
#[derive(Debug, Clone)]
pub(crate) enum Outcome<T> {
    Pending,
    Ok(T),
    Err(Expect),
}

#[derive(Default)]
pub(crate) struct Model {
    pub(crate) pause: u64,
    pub(crate) resume: u64,
    pub(crate) copy_threshold: usize,
    /// Published bytes the reader has not consumed.
    pub(crate) flushed: VecDeque<u8>,
    /// Bytes the writer committed and has not flushed.
    pub(crate) staged: Vec<u8>,
    pub(crate) published: u64,
    pub(crate) consumed: u64,
    /// Absolute position examined by the last advance (reads wait for bytes beyond it).
    pub(crate) examined: u64,
    /// Furthest examined position (backpressure counts from here).
    pub(crate) examined_max: u64,
    /// Length of the last read buffer (less frames taken), `None` when there is nothing to advance.
    pub(crate) last_len: Option<usize>,
    /// Frames were taken from the last read's buffer since the last read or advance.
    pub(crate) frames_taken: bool,
    /// The last `read_buffer()` future that completed brought fewer than `SMALL_READ` new bytes:
    /// the next one yields once if a few new bytes are there (read coalescing).
    pub(crate) small_async_read: bool,
    pub(crate) writer_done: bool,
    pub(crate) writer_error: Option<String>,
    pub(crate) reader_done: bool,
    pub(crate) reader_error: Option<String>,
    pub(crate) cancel_read: bool,
    pub(crate) cancel_flush: bool,
    /// Target of a pending `read_at_least` (0: none): lifts backpressure below it.
    pub(crate) reader_needs: u64,
    /// What is left of the space the last `buffer_mut` handed out (`None`: not known).
    pub(crate) handed: Option<Vec<u8>>,
    pub(crate) flush_pending: bool,
    /// The writer's hysteresis flag: a flush that went pending resumes only below `resume`.
    pub(crate) writer_paused: bool,
    pub(crate) read_pending: Option<Want>,
    /// Every byte the writer committed while the reader was open, in order.
    pub(crate) written: Vec<u8>,
    /// Bytes consumed when the reader completed (then `received` is a prefix of `written`).
    pub(crate) consumed_at_reader_done: Option<u64>,
}

impl Model {
    pub(crate) fn stage(&mut self, data: &[u8]) {
        if self.reader_done && !data.is_empty() {
            cover("write discarded after reader completion");
        }
        if !self.reader_done {
            self.staged.extend_from_slice(data);
            self.written.extend_from_slice(data);
        }
    }

    pub(crate) fn must_wait(&self, paused: bool) -> bool {
        if self.pause == 0 || self.reader_done || self.reader_needs > self.published {
            return false;
        }
        let unexamined = self.published.saturating_sub(self.examined_max);
        unexamined >= if paused { self.resume } else { self.pause }
    }

    /// Whether a pending flush may return now (it is paused, so the resume threshold applies).
    pub(crate) fn flush_ready(&self) -> bool {
        self.reader_done || self.cancel_flush || !self.must_wait(true)
    }

    pub(crate) fn flush_status(&mut self, paused: bool) -> Option<Result<(bool, bool), Expect>> {
        if self.reader_done {
            return Some(match &self.reader_error {
                Some(message) => Err(Expect::Peer {
                    side: "reader",
                    message: message.clone(),
                }),
                None => Ok((true, false)),
            });
        }
        if self.cancel_flush {
            self.cancel_flush = false;
            return Some(Ok((false, true)));
        }
        if self.must_wait(paused) {
            return None;
        }
        Some(Ok((false, false)))
    }

    /// Publish the staged bytes; returns how many.
    pub(crate) fn publish(&mut self) -> usize {
        let n = self.staged.len();
        self.flushed.extend(self.staged.drain(..));
        self.published += n as u64;
        n
    }

    /// A poll of a flush: `fresh` for a new `flush()` future (which forgets an earlier pause).
    pub(crate) fn poll_flush_pipe(&mut self, fresh: bool) -> Outcome<(bool, bool)> {
        if fresh {
            self.writer_paused = false;
        }
        if self.writer_done {
            return Outcome::Err(Expect::WriterCompleted);
        }
        let published = self.publish();
        if self.reader_done {
            // The writer learns the reader is gone and forgets its buffer.
            self.handed = None;
        } else if published > 0 {
            // Publishing parks the write buffer (an idle reader may send it home): the space
            // `buffer_mut` handed out is void.
            self.handed = Some(Vec::new());
            // New bytes make a new flush: a pause left by an abandoned poll does not carry over.
            self.writer_paused = false;
        }
        let paused = self.writer_paused;
        let status = match self.flush_status(paused) {
            Some(status) => Some(status),
            None => {
                // Registers its waker, marks itself paused and checks again.
                self.writer_paused = true;
                self.flush_status(true)
            }
        };
        match status {
            None => {
                self.flush_pending = true;
                Outcome::Pending
            }
            Some(result) => {
                self.writer_paused = false;
                self.flush_pending = false;
                match result {
                    Ok(r) => Outcome::Ok(r),
                    Err(e) => Outcome::Err(e),
                }
            }
        }
    }

    pub(crate) fn satisfied(&self, want: Want) -> bool {
        match want {
            Want::New => self.published > self.examined,
            Want::AtLeast(n) => self.flushed.len() >= n,
        }
    }

    pub(crate) fn read_ready(&self, want: Want) -> bool {
        !self.reader_done && (self.cancel_read || self.writer_done || self.satisfied(want))
    }

    pub(crate) fn completed_flag(&self) -> bool {
        self.writer_done && self.writer_error.is_none()
    }

    /// `(is_completed, is_canceled)` of a read that can return now, or the writer's error.
    pub(crate) fn read_check(&mut self, want: Want) -> Option<Result<(bool, bool), Expect>> {
        if self.cancel_read {
            self.cancel_read = false;
            self.last_len = Some(self.flushed.len());
            self.frames_taken = false;
            return Some(Ok((self.completed_flag(), true)));
        }
        let satisfied = self.satisfied(want);
        // A failed writer's error comes once no read can be satisfied by the bytes flushed before
        // it: for `read_buffer`, once every such byte has been seen; for `read_at_least(n)` with
        // fewer than `n` bytes, at once (a short buffer with neither flag would break its promise;
        // `read_at_least_returns_the_writers_error_when_fewer_bytes_arrived`).
        let unseen = self.published > self.examined;
        if self.writer_done && !satisfied && (!unseen || matches!(want, Want::AtLeast(_))) {
            if let Some(message) = &self.writer_error {
                return Some(Err(Expect::Peer {
                    side: "writer",
                    message: message.clone(),
                }));
            }
        }
        if satisfied || self.writer_done {
            self.last_len = Some(self.flushed.len());
            self.frames_taken = false;
            return Some(Ok((self.completed_flag(), false)));
        }
        None
    }

    /// A poll of a read. Returns the outcome and whether it woke a pending flush.
    pub(crate) fn poll_read_buffer(&mut self, want: Want) -> Outcome<(bool, bool)> {
        if self.reader_done {
            return Outcome::Err(Expect::ReaderCompleted);
        }
        if let (Want::New, Some(len), true) = (want, self.last_len, self.frames_taken) {
            // After take_frame, a read needs advance_to first (the rest would come back at once).
            return Outcome::Err(Expect::ReadWithoutAdvance { len });
        }
        match self.read_check(want) {
            Some(result) => {
                if let Want::AtLeast(_) = want {
                    self.reader_needs = 0;
                }
                self.read_pending = None;
                match result {
                    Ok(flags) => Outcome::Ok(flags),
                    Err(e) => Outcome::Err(e),
                }
            }
            None => {
                if let Want::AtLeast(n) = want {
                    self.reader_needs = self.consumed + n as u64;
                }
                self.read_pending = Some(want);
                Outcome::Pending
            }
        }
    }

    pub(crate) fn try_read(&mut self) -> Result<Option<(bool, bool)>, Expect> {
        if self.reader_done {
            return Err(Expect::ReaderCompleted);
        }
        if let (Some(len), true) = (self.last_len, self.frames_taken) {
            return Err(Expect::ReadWithoutAdvance { len });
        }
        self.read_check(Want::New).transpose()
    }

    pub(crate) fn advance_to(&mut self, consumed: usize, examined: usize) -> Result<(), Expect> {
        if self.reader_done {
            return Err(Expect::ReaderCompleted);
        }
        let len = self.last_len.ok_or(Expect::AdvanceWithoutRead)?;
        if consumed > examined || examined > len {
            return Err(Expect::InvalidAdvance {
                consumed,
                examined,
                len,
            });
        }
        let start = self.consumed;
        self.flushed.drain(..consumed);
        self.consumed += consumed as u64;
        self.last_len = None;
        self.frames_taken = false;
        self.examined = start + examined as u64;
        self.examined_max = self.examined_max.max(self.examined);
        Ok(())
    }

    /// `consume_all`: everything the last read returned (less frames taken) is consumed and
    /// examined; the same errors as `advance_to`.
    pub(crate) fn consume_all(&mut self) -> Result<usize, Expect> {
        if self.reader_done {
            return Err(Expect::ReaderCompleted);
        }
        let len = self.last_len.ok_or(Expect::AdvanceWithoutRead)?;
        self.advance_to(len, len)?;
        Ok(len)
    }

    /// Take a frame of `n` bytes after `skip` bytes (both consumed): returns the skipped bytes
    /// and the frame's.
    pub(crate) fn take_frame(
        &mut self,
        skip: usize,
        n: usize,
    ) -> Result<(Vec<u8>, Vec<u8>), Expect> {
        if self.reader_done {
            return Err(Expect::ReaderCompleted);
        }
        let len = self.last_len.ok_or(Expect::AdvanceWithoutRead)?;
        if skip.checked_add(n).map_or(true, |end| end > len) {
            return Err(Expect::FrameBeyondBuffer {
                skip,
                requested: n,
                len,
            });
        }
        let skipped: Vec<u8> = self.flushed.drain(..skip).collect();
        let frame: Vec<u8> = self.flushed.drain(..n).collect();
        self.consumed += (skip + n) as u64;
        self.last_len = Some(len - skip - n);
        self.frames_taken = true;
        self.examined = self.examined.max(self.consumed);
        self.examined_max = self.examined_max.max(self.consumed);
        Ok((skipped, frame))
    }

    pub(crate) fn writer_complete(&mut self, error: Option<String>) {
        if self.writer_done {
            return;
        }
        self.writer_done = true;
        self.writer_error = error;
        if !self.reader_done {
            self.publish();
        }
        self.staged.clear();
        self.handed = None;
        self.flush_pending = false;
    }

    pub(crate) fn reader_complete(&mut self, error: Option<String>) {
        if self.reader_done {
            return;
        }
        self.reader_done = true;
        self.reader_error = error;
        self.last_len = None;
        self.consumed_at_reader_done = Some(self.consumed);
        self.consumed += self.flushed.len() as u64;
        self.flushed.clear();
        self.staged.clear();
        self.handed = None;
        self.read_pending = None;
        self.reader_needs = 0;
    }
}

pub(crate) fn cover_flush(
    outcome: &Outcome<(bool, bool)>,
    repoll: bool,
    reader_needs_lifts: bool,
    woken: bool,
    m: &Model,
) {
    match (outcome, repoll) {
        (Outcome::Pending, false) => cover("flush paused"),
        (Outcome::Pending, true) if woken => cover("paused flush still paused after a wake"),
        (Outcome::Ok((true, _)), true) => cover("paused flush ended by reader completion"),
        (Outcome::Ok((_, true)), true) => cover("paused flush canceled"),
        (Outcome::Ok(_), true) if reader_needs_lifts => {
            cover("paused flush released by read_at_least")
        }
        (Outcome::Ok(_), true) => cover("paused flush resumed by reader progress"),
        (Outcome::Err(Expect::Peer { .. }), true) => cover("paused flush got the reader's error"),
        (Outcome::Ok((_, true)), false) => cover("flush canceled without waiting"),
        _ => {}
    }
    if m.reader_done && !m.writer_done {
        cover("flush after reader completion");
    }
}
