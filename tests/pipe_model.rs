//! Model-based property tests of the pipe's contract: random sequences of writer, reader and
//! canceler operations run against a real pipe and against a small reference model (a
//! `VecDeque<u8>` of flushed bytes, the staged bytes and a handful of flags), on one thread, with
//! the futures polled by hand with wakers that count their wakes.
//!
//! After every operation the test checks:
//! - byte-exact contents of every read buffer (as a `Vec`, as its chunks, none of them empty,
//!   through its `Buf` cursor and through a slice) and of every frame taken;
//! - the flags of every result (`is_completed`, `is_canceled`), and `unflushed_len`;
//! - errors exactly where the model says misuse (and the exact error, numbers included), with the
//!   pipe still working afterwards (the following operations are checked as usual);
//! - a flush is pending exactly when the model says the pause threshold is reached, and stays
//!   pending until the reader examines enough, completes, lifts backpressure with
//!   `read_at_least`, or the flush is canceled;
//! - a pending flush's waker and a pending read's waker are woken when the model says the
//!   operation can now complete (no lost wakeup), and never when nothing happened that could let
//!   it complete (no wake from a 0-byte flush, from an advance that does not lift the pause, ...).
//!
//! At the end of each case the writer completes, the reader drains what is left, and the bytes
//! the reader received (read buffers and frames) must equal the bytes the writer wrote, in order
//! (a prefix of them when the reader completed early). Then both ends drop, frames taken earlier
//! must still hold their bytes, and once they drop too both pools (the pipe's and the one the
//! appended pooled packets come from) must have every block back. After the reader completed, the
//! writer must rent nothing from the pipe's pool.
//!
//! Cases: `PIPE_MODEL_CASES` (default 2000).

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use bytes::{Buf, Bytes};
use packetpipe::pipe::{pipe_with, PipeCanceler, PipeOptions, PipeReader, PipeWriter};
use packetpipe::{ByteSegments, Error, Packet, PacketChain, Pool};
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, RngAlgorithm, TestRunner};

// ------------------------------------------------------------------------------------------------
// Operations

/// How an appended packet is owned.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// `Pool::copy_from_slice` (from a second pool, so the pipe's own rents stay countable).
    Pooled,
    /// A window in the middle of a larger pooled packet.
    PooledSlice,
    /// A `PacketBuf` handed over whole.
    PacketBuf,
    /// `Bytes::copy_from_slice`.
    Bytes,
    /// `Bytes::from_static`.
    BytesStatic,
    /// `Vec<u8>`.
    Vec,
    /// `&'static [u8]`.
    Static,
    /// `Packet::copy_from_slice` (inline up to its capacity, a global-pool block beyond).
    Inline,
    /// `Packet::new()` (always empty, whatever the length says).
    Empty,
}

/// A number picked relative to the state when the operation runs (`sel` chooses how).
#[derive(Clone, Copy, Debug)]
struct Pick {
    sel: u8,
    raw: u16,
}

impl Pick {
    /// A value in `0..=max`: 0, `max`, or anything between.
    fn within(self, max: usize) -> usize {
        match self.sel % 4 {
            0 => 0,
            1 => max,
            _ => self.raw as usize % (max + 1),
        }
    }

    /// A value in `max + 1..=max + 4`.
    fn beyond(self, max: usize) -> usize {
        max + 1 + self.raw as usize % 4
    }
}

#[derive(Clone, Copy, Debug)]
enum ReadForm {
    /// `read()` / `read_at_least()` future, polled once (dropped if pending).
    Future,
    /// `poll_read` / `poll_read_at_least`, then `last_read`.
    Poll,
}

#[derive(Clone, Debug)]
enum Op {
    // Writer.
    Append {
        kind: Kind,
        len: usize,
        off: usize,
    },
    /// `buffer_mut(hint)` then `advance(n)`, with `n` within the space or (`over`) beyond it.
    BufferAdvance {
        hint: usize,
        n: Pick,
        over: bool,
    },
    /// `advance(n)` on its own, into what is left of the last `buffer_mut` space.
    Advance {
        n: Pick,
        over: bool,
    },
    Write {
        len: usize,
    },
    /// A new `flush()` future, polled once.
    Flush,
    /// `poll_flush` (re-polls a pending flush; otherwise a flush through the poll form).
    PollFlush,
    WriterComplete,
    WriterCompleteWithError,
    DropWriter,
    // Reader.
    Read {
        form: ReadForm,
    },
    TryRead,
    ReadAtLeast {
        n: Pick,
        form: ReadForm,
    },
    /// A `read_at_least` future polled once and dropped even if pending.
    ReadAtLeastAbandoned {
        n: Pick,
    },
    /// `mode` 0..=6 valid, 7 consumed > examined, 8 examined > len, 9 consume everything.
    AdvanceTo {
        consumed: Pick,
        examined: Pick,
        mode: u8,
    },
    TakeFrame {
        n: Pick,
        over: bool,
    },
    TakeFrameChain {
        n: Pick,
        over: bool,
    },
    ReaderComplete,
    ReaderCompleteWithError,
    DropReader,
    // Either side's canceler.
    CancelRead,
    CancelFlush,
}

/// An operation plus a random byte deciding what a writer operation does while a flush is pending
/// (re-poll it, or drop it and go on).
#[derive(Clone, Debug)]
struct Step {
    op: Op,
    gate: u8,
}

#[derive(Clone, Debug)]
struct CaseConfig {
    pause: usize,
    resume: usize,
    min_segment: usize,
    copy_threshold: usize,
    pool_min_class: usize,
    pool_max_class: usize,
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        Just(Kind::Pooled),
        Just(Kind::PooledSlice),
        Just(Kind::PacketBuf),
        Just(Kind::Bytes),
        Just(Kind::BytesStatic),
        Just(Kind::Vec),
        Just(Kind::Static),
        Just(Kind::Inline),
        Just(Kind::Empty),
    ]
}

fn data_len() -> impl Strategy<Value = usize> {
    prop_oneof![6 => 0usize..24, 3 => 24usize..80, 1 => 80usize..300]
}

fn pick() -> impl Strategy<Value = Pick> {
    (any::<u8>(), any::<u16>()).prop_map(|(sel, raw)| Pick { sel, raw })
}

fn form() -> impl Strategy<Value = ReadForm> {
    prop_oneof![Just(ReadForm::Future), Just(ReadForm::Poll)]
}

fn over() -> impl Strategy<Value = bool> {
    prop::bool::weighted(0.15)
}

fn op() -> impl Strategy<Value = Op> {
    // Completions are rare (about one step in 60 per side) so that most cases spend most of their
    // steps with both ends open; every case ends with a completion anyway.
    prop_oneof![
        // Writer.
        20 => (kind(), data_len(), 0usize..256).prop_map(|(kind, len, off)| Op::Append { kind, len, off }),
        14 => (prop_oneof![0usize..40, 40usize..300], pick(), over())
            .prop_map(|(hint, n, over)| Op::BufferAdvance { hint, n, over }),
        4 => (pick(), over()).prop_map(|(n, over)| Op::Advance { n, over }),
        16 => data_len().prop_map(|len| Op::Write { len }),
        18 => Just(Op::Flush),
        10 => Just(Op::PollFlush),
        1 => Just(Op::WriterComplete),
        1 => Just(Op::WriterCompleteWithError),
        1 => Just(Op::DropWriter),
        // Reader.
        18 => form().prop_map(|form| Op::Read { form }),
        6 => Just(Op::TryRead),
        8 => (pick(), form()).prop_map(|(n, form)| Op::ReadAtLeast { n, form }),
        2 => pick().prop_map(|n| Op::ReadAtLeastAbandoned { n }),
        24 => (pick(), pick(), 0u8..10)
            .prop_map(|(consumed, examined, mode)| Op::AdvanceTo { consumed, examined, mode }),
        8 => (pick(), over()).prop_map(|(n, over)| Op::TakeFrame { n, over }),
        4 => (pick(), over()).prop_map(|(n, over)| Op::TakeFrameChain { n, over }),
        1 => Just(Op::ReaderComplete),
        1 => Just(Op::ReaderCompleteWithError),
        1 => Just(Op::DropReader),
        // Cancelers.
        3 => Just(Op::CancelRead),
        3 => Just(Op::CancelFlush),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    (op(), any::<u8>()).prop_map(|(op, gate)| Step { op, gate })
}

fn case_config() -> impl Strategy<Value = CaseConfig> {
    (
        prop_oneof![6 => Just(64usize), 2 => Just(100usize), 1 => Just(0usize), 1 => Just(16usize)],
        prop_oneof![6 => Just(32usize), 1 => Just(0usize), 1 => Just(64usize), 1 => Just(1000usize)],
        prop_oneof![Just(1usize), Just(8), Just(16), Just(64)],
        prop_oneof![Just(0usize), Just(8), Just(32), Just(4096)],
        prop_oneof![Just(16usize), Just(64)],
        prop_oneof![Just(64usize), Just(256), Just(4096)],
    )
        .prop_map(|(pause, resume, min_segment, copy_threshold, pool_min_class, pool_max_class)| {
            CaseConfig { pause, resume, min_segment, copy_threshold, pool_min_class, pool_max_class }
        })
}

// ------------------------------------------------------------------------------------------------
// Data

const fn static_bytes() -> [u8; 512] {
    let mut a = [0u8; 512];
    let mut i = 0;
    while i < 512 {
        a[i] = (i * 37 + 11) as u8 ^ (i >> 8) as u8;
        i += 1;
    }
    a
}

static STATIC: [u8; 512] = static_bytes();

/// A waker that counts its wakes.
#[derive(Default)]
struct CountWaker(AtomicUsize);

impl Wake for CountWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl CountWaker {
    fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }

    fn reset(&self) {
        self.0.store(0, Ordering::SeqCst);
    }
}

// ------------------------------------------------------------------------------------------------
// Read coalescing

/// Bytes below which a `read_buffer().await` counts as small (the pipe's read coalescing).
const SMALL_READ: u64 = 1024;

// ------------------------------------------------------------------------------------------------
// Coverage: the run asserts that every interesting situation happened at least once

static COVERAGE: Mutex<BTreeMap<&'static str, u64>> = Mutex::new(BTreeMap::new());

fn cover(what: &'static str) {
    *COVERAGE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(what)
        .or_default() += 1;
}

/// Situations every full run must reach (a generator change that loses one fails the test).
const MUST_COVER: &[&str] = &[
    "flush paused",
    "read yielded to coalesce",
    "paused flush resumed by reader progress",
    "paused flush released by read_at_least",
    "paused flush ended by reader completion",
    "paused flush got the reader's error",
    "paused flush canceled",
    "paused flush still paused after a wake",
    "flush canceled without waiting",
    "flush after reader completion",
    "read waited",
    "pending read completed by a flush",
    "pending read completed by writer completion",
    "pending read canceled",
    "read_at_least waited",
    "read_at_least abandoned while waiting",
    "read got the writer's error",
    "try_read found nothing",
    "examined moved backwards",
    "frame copied",
    "frame inline",
    "frame shared",
    "frame chain taken",
    "write discarded after reader completion",
    "error: WriterCompleted",
    "error: ReaderCompleted",
    "error: AdvancePastBuffer",
    "error: AdvanceWithoutRead",
    "error: InvalidAdvance",
    "error: FrameBeyondBuffer",
    "error: Peer",
];

// ------------------------------------------------------------------------------------------------
// The reference model

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Want {
    New,
    AtLeast(usize),
}

/// An error the model expects.
#[derive(Debug, Clone)]
enum Expect {
    WriterCompleted,
    ReaderCompleted,
    /// `available` is `None` when the model does not know how much space `buffer_mut` left.
    AdvancePastBuffer {
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
        requested: usize,
        len: usize,
    },
    Peer {
        side: &'static str,
        message: String,
    },
}

#[track_caller]
fn check_error(actual: &Error, expected: &Expect) {
    let ok = match (actual, expected) {
        (Error::WriterCompleted, Expect::WriterCompleted) => true,
        (Error::ReaderCompleted, Expect::ReaderCompleted) => true,
        (Error::AdvanceWithoutRead, Expect::AdvanceWithoutRead) => true,
        (Error::ReadWithoutAdvance { len }, Expect::ReadWithoutAdvance { len: l }) => len == l,
        (
            Error::AdvancePastBuffer {
                requested,
                available,
            },
            Expect::AdvancePastBuffer {
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
                skip: 0,
                requested,
                len,
            },
            Expect::FrameBeyondBuffer {
                requested: r,
                len: l,
            },
        ) => (requested, len) == (r, l),
        (Error::Peer { side, source }, Expect::Peer { side: s, message }) => {
            side == s
                && source.to_string() == *message
                && actual.to_string() == format!("the {s} completed with an error")
        }
        _ => false,
    };
    assert!(ok, "expected error {expected:?}, got {actual:?} ({actual})");
    cover(match expected {
        Expect::WriterCompleted => "error: WriterCompleted",
        Expect::ReaderCompleted => "error: ReaderCompleted",
        Expect::AdvancePastBuffer { .. } => "error: AdvancePastBuffer",
        Expect::AdvanceWithoutRead => "error: AdvanceWithoutRead",
        Expect::ReadWithoutAdvance { .. } => "error: ReadWithoutAdvance",
        Expect::InvalidAdvance { .. } => "error: InvalidAdvance",
        Expect::FrameBeyondBuffer { .. } => "error: FrameBeyondBuffer",
        Expect::Peer { .. } => "error: Peer",
    });
}

/// What the model says an operation returns.
#[derive(Debug, Clone)]
enum Outcome<T> {
    Pending,
    Ok(T),
    Err(Expect),
}

#[derive(Default)]
struct Model {
    pause: u64,
    resume: u64,
    copy_threshold: usize,
    /// Published bytes the reader has not consumed.
    flushed: VecDeque<u8>,
    /// Bytes the writer committed and has not flushed.
    staged: Vec<u8>,
    published: u64,
    consumed: u64,
    /// Absolute position examined by the last advance (reads wait for bytes beyond it).
    examined: u64,
    /// Furthest examined position (backpressure counts from here).
    examined_max: u64,
    /// Length of the last read buffer (less frames taken), `None` when there is nothing to advance.
    last_len: Option<usize>,
    /// Frames were taken from the last read's buffer since the last read or advance.
    frames_taken: bool,
    /// The last `read_buffer()` future that completed brought fewer than `SMALL_READ` new bytes:
    /// the next one yields once if a few new bytes are there (read coalescing).
    small_async_read: bool,
    writer_done: bool,
    writer_error: Option<String>,
    reader_done: bool,
    reader_error: Option<String>,
    cancel_read: bool,
    cancel_flush: bool,
    /// Target of a pending `read_at_least` (0: none): lifts backpressure below it.
    reader_needs: u64,
    /// What is left of the space the last `buffer_mut` handed out (`None`: not known).
    handed: Option<Vec<u8>>,
    flush_pending: bool,
    /// The writer's hysteresis flag: a flush that went pending resumes only below `resume`.
    writer_paused: bool,
    read_pending: Option<Want>,
    /// Every byte the writer committed while the reader was open, in order.
    written: Vec<u8>,
    /// Bytes consumed when the reader completed (then `received` is a prefix of `written`).
    consumed_at_reader_done: Option<u64>,
}

impl Model {
    fn stage(&mut self, data: &[u8]) {
        if self.reader_done && !data.is_empty() {
            cover("write discarded after reader completion");
        }
        if !self.reader_done {
            self.staged.extend_from_slice(data);
            self.written.extend_from_slice(data);
        }
    }

    fn must_wait(&self, paused: bool) -> bool {
        if self.pause == 0 || self.reader_done || self.reader_needs > self.published {
            return false;
        }
        let unexamined = self.published.saturating_sub(self.examined_max);
        unexamined >= if paused { self.resume } else { self.pause }
    }

    /// Whether a pending flush may return now (it is paused, so the resume threshold applies).
    fn flush_ready(&self) -> bool {
        self.reader_done || self.cancel_flush || !self.must_wait(true)
    }

    fn flush_status(&mut self, paused: bool) -> Option<Result<(bool, bool), Expect>> {
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
    fn publish(&mut self) -> usize {
        let n = self.staged.len();
        self.flushed.extend(self.staged.drain(..));
        self.published += n as u64;
        n
    }

    /// A poll of a flush: `fresh` for a new `flush()` future (which forgets an earlier pause).
    fn poll_flush_pipe(&mut self, fresh: bool) -> Outcome<(bool, bool)> {
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

    fn satisfied(&self, want: Want) -> bool {
        match want {
            Want::New => self.published > self.examined,
            Want::AtLeast(n) => self.flushed.len() >= n,
        }
    }

    fn read_ready(&self, want: Want) -> bool {
        !self.reader_done && (self.cancel_read || self.writer_done || self.satisfied(want))
    }

    fn completed_flag(&self) -> bool {
        self.writer_done && self.writer_error.is_none()
    }

    /// `(is_completed, is_canceled)` of a read that can return now, or the writer's error.
    fn read_check(&mut self, want: Want) -> Option<Result<(bool, bool), Expect>> {
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
    fn poll_read_buffer(&mut self, want: Want) -> Outcome<(bool, bool)> {
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

    fn try_read(&mut self) -> Result<Option<(bool, bool)>, Expect> {
        if self.reader_done {
            return Err(Expect::ReaderCompleted);
        }
        if let (Some(len), true) = (self.last_len, self.frames_taken) {
            return Err(Expect::ReadWithoutAdvance { len });
        }
        self.read_check(Want::New).transpose()
    }

    fn advance_to(&mut self, consumed: usize, examined: usize) -> Result<(), Expect> {
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

    /// Take a frame: returns its bytes.
    fn take_frame(&mut self, n: usize) -> Result<Vec<u8>, Expect> {
        if self.reader_done {
            return Err(Expect::ReaderCompleted);
        }
        let len = self.last_len.ok_or(Expect::AdvanceWithoutRead)?;
        if n > len {
            return Err(Expect::FrameBeyondBuffer { requested: n, len });
        }
        let frame: Vec<u8> = self.flushed.drain(..n).collect();
        self.consumed += n as u64;
        self.last_len = Some(len - n);
        self.frames_taken = true;
        self.examined = self.examined.max(self.consumed);
        self.examined_max = self.examined_max.max(self.consumed);
        Ok(frame)
    }

    fn writer_complete(&mut self, error: Option<String>) {
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

    fn reader_complete(&mut self, error: Option<String>) {
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

fn cover_flush(
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

// ------------------------------------------------------------------------------------------------
// The harness: the real pipe next to the model

struct Harness {
    pool: Pool,
    packet_pool: Pool,
    writer: Option<PipeWriter>,
    reader: Option<PipeReader>,
    canceler: PipeCanceler,
    flush_wakes: Arc<CountWaker>,
    flush_waker: Waker,
    read_wakes: Arc<CountWaker>,
    read_waker: Waker,
    /// Wake counts at the end of the previous step.
    flush_wakes_seen: usize,
    /// Whether the flush waker had been woken when the flush was polled again.
    flush_wakes_seen_before_poll: bool,
    read_wakes_seen: usize,
    /// The last `read` was a coalescing yield (`Pending`, no wait).
    read_yielded: bool,
    m: Model,
    /// Bytes the reader received: consumed prefixes of read buffers, and frames.
    received: Vec<u8>,
    /// Content of the last read buffer (less frames taken).
    last_buffer: Vec<u8>,
    frames: Vec<(Vec<u8>, Packet)>,
    chains: Vec<(Vec<u8>, PacketChain)>,
    /// Counter for fresh data bytes.
    seq: u64,
    rents_at_reader_done: Option<u64>,
}

/// Wakes an operation may cause without being able to complete the pending one (the model checks
/// the rest: a wake is required when the pending operation can complete, and allowed only then
/// or when the step says so).
#[derive(Default)]
struct MayWake {
    flush: bool,
    read: bool,
}

impl Harness {
    fn new(config: &CaseConfig) -> Harness {
        let pool = Pool::builder()
            .min_class_size(config.pool_min_class)
            .max_class_size(config.pool_max_class)
            .build()
            .unwrap();
        let packet_pool = Pool::builder()
            .min_class_size(16)
            .max_class_size(256)
            .build()
            .unwrap();
        let options = PipeOptions::new()
            .pause_threshold(config.pause)
            .resume_threshold(config.resume)
            .min_segment_size(config.min_segment)
            .copy_threshold(config.copy_threshold)
            .pool(pool.clone());
        let (writer, reader) = pipe_with(options);
        // Either end hands out cancelers for both.
        let canceler = if config.min_segment == 1 {
            writer.canceler()
        } else {
            reader.canceler()
        };
        let flush_wakes = Arc::new(CountWaker::default());
        let read_wakes = Arc::new(CountWaker::default());
        let m = Model {
            pause: config.pause as u64,
            resume: config.resume.clamp(1, config.pause.max(1)) as u64,
            copy_threshold: config.copy_threshold,
            ..Model::default()
        };
        Harness {
            pool,
            packet_pool,
            writer: Some(writer),
            reader: Some(reader),
            canceler,
            flush_waker: Waker::from(flush_wakes.clone()),
            flush_wakes,
            read_waker: Waker::from(read_wakes.clone()),
            read_wakes,
            flush_wakes_seen: 0,
            flush_wakes_seen_before_poll: false,
            read_wakes_seen: 0,
            read_yielded: false,
            m,
            received: Vec::new(),
            last_buffer: Vec::new(),
            frames: Vec::new(),
            chains: Vec::new(),
            seq: 0,
            rents_at_reader_done: None,
        }
    }

    fn fresh_bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len)
            .map(|_| {
                self.seq += 1;
                (self.seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8
            })
            .collect()
    }

    #[track_caller]
    fn expect_err<T: std::fmt::Debug>(&mut self, actual: Result<T, Error>, expected: &Expect) {
        match actual {
            Ok(v) => panic!("expected error {expected:?}, got Ok({v:?})"),
            Err(e) => check_error(&e, expected),
        }
    }

    fn run(&mut self, step: &Step) {
        let published_before = self.m.published;
        let writer_done_before = self.m.writer_done;
        let mut may = MayWake::default();
        match &step.op {
            Op::CancelRead => {
                self.canceler.cancel_pending_read();
                self.m.cancel_read = true;
            }
            Op::CancelFlush => {
                self.canceler.cancel_pending_flush();
                self.m.cancel_flush = true;
            }
            Op::Append { .. }
            | Op::BufferAdvance { .. }
            | Op::Advance { .. }
            | Op::Write { .. }
            | Op::Flush
            | Op::PollFlush
            | Op::WriterComplete
            | Op::WriterCompleteWithError
            | Op::DropWriter => self.writer_op(step),
            _ => self.reader_op(step, &mut may),
        }
        // Publishing wakes a waiting reader even when it still lacks bytes (read_at_least).
        may.read |=
            self.m.published != published_before || self.m.writer_done != writer_done_before;
        self.check_wakes(&may);
        self.check_unflushed();
    }

    /// No lost wakeups, no wakes out of nowhere.
    fn check_wakes(&mut self, may: &MayWake) {
        let fw = self.flush_wakes.get();
        if self.m.flush_pending {
            if self.m.flush_ready() {
                assert!(
                    fw > 0,
                    "a pending flush that can now complete was not woken"
                );
            }
            if fw > self.flush_wakes_seen {
                assert!(
                    self.m.flush_ready() || may.flush,
                    "a pending flush was woken although nothing lets it complete"
                );
            }
        }
        self.flush_wakes_seen = fw;
        let rw = self.read_wakes.get();
        if let Some(want) = self.m.read_pending {
            if self.m.read_ready(want) {
                assert!(
                    rw > 0,
                    "a pending read ({want:?}) that can now complete was not woken"
                );
            }
            if rw > self.read_wakes_seen {
                assert!(
                    self.m.read_ready(want) || may.read,
                    "a pending read ({want:?}) was woken although nothing lets it complete"
                );
            }
        }
        self.read_wakes_seen = rw;
    }

    fn check_unflushed(&self) {
        if let Some(writer) = &self.writer {
            if !self.m.reader_done {
                assert_eq!(writer.unflushed_len(), self.m.staged.len(), "unflushed_len");
            }
        }
    }

    // --- writer -----------------------------------------------------------------------------

    fn writer_op(&mut self, step: &Step) {
        if self.writer.is_none() {
            return;
        }
        let mut op = step.op.clone();
        if self.m.flush_pending {
            let ends = matches!(
                op,
                Op::WriterComplete | Op::WriterCompleteWithError | Op::DropWriter
            );
            if !ends && step.gate % 4 != 0 {
                // Keep waiting: poll the pending flush again.
                op = Op::PollFlush;
            } else if !matches!(op, Op::PollFlush) {
                // Drop the pending flush and go on writing.
                self.m.flush_pending = false;
            }
        }
        match op {
            Op::Append { kind, len, off } => self.append(kind, len, off),
            Op::BufferAdvance { hint, n, over } => self.buffer_advance(hint, n, over),
            Op::Advance { n, over } => self.advance(n, over),
            Op::Write { len } => {
                let data = self.fresh_bytes(len);
                let result = self.writer.as_mut().unwrap().write_slice(&data);
                if self.m.writer_done {
                    self.expect_err(result, &Expect::WriterCompleted);
                } else {
                    result.unwrap();
                    self.m.stage(&data);
                    // `write` closes the space `buffer_mut` handed out (an empty write does
                    // nothing at all).
                    if len > 0 {
                        self.m.handed = Some(Vec::new());
                    }
                }
            }
            Op::Flush => self.flush(true),
            Op::PollFlush => self.flush(false),
            Op::WriterComplete => {
                self.writer.as_mut().unwrap().complete();
                self.m.writer_complete(None);
            }
            Op::WriterCompleteWithError => {
                let message = format!("writer failure {}", self.seq);
                self.writer
                    .as_mut()
                    .unwrap()
                    .complete_with_error(message.clone());
                self.m.writer_complete(Some(message));
            }
            Op::DropWriter => {
                self.writer = None;
                self.m.writer_complete(None);
            }
            _ => unreachable!(),
        }
    }

    fn append(&mut self, kind: Kind, len: usize, off: usize) {
        let (data, packet): (Vec<u8>, Packet) = match kind {
            Kind::Pooled => {
                let data = self.fresh_bytes(len);
                let packet = self.packet_pool.copy_from_slice(&data).unwrap();
                (data, packet.into())
            }
            Kind::PooledSlice => {
                let data = self.fresh_bytes(len + 6);
                let packet = Packet::from(self.packet_pool.copy_from_slice(&data).unwrap());
                (data[3..3 + len].to_vec(), packet.slice(3..3 + len))
            }
            Kind::PacketBuf => {
                let data = self.fresh_bytes(len);
                let mut buf = self.packet_pool.rent(len.max(1)).unwrap();
                buf.extend_from_slice(&data).unwrap();
                (data, buf.into())
            }
            Kind::Bytes => {
                let data = self.fresh_bytes(len);
                let packet = Bytes::copy_from_slice(&data);
                (data, packet.into())
            }
            Kind::BytesStatic => {
                let off = off.min(STATIC.len());
                let len = len.min(STATIC.len() - off);
                let s = &STATIC[off..off + len];
                (s.to_vec(), Bytes::from_static(s).into())
            }
            Kind::Vec => {
                let data = self.fresh_bytes(len);
                (data.clone(), data.into())
            }
            Kind::Static => {
                let off = off.min(STATIC.len());
                let len = len.min(STATIC.len() - off);
                let s: &'static [u8] = &STATIC[off..off + len];
                (s.to_vec(), s.into())
            }
            Kind::Inline => {
                let data = self.fresh_bytes(len);
                let packet = Packet::copy_from_slice(&data);
                assert_eq!(packet.is_inline(), len <= Packet::INLINE_CAPACITY);
                (data, packet)
            }
            Kind::Empty => (Vec::new(), Packet::new()),
        };
        let result = self.writer.as_mut().unwrap().append(packet);
        if self.m.writer_done {
            self.expect_err(result, &Expect::WriterCompleted);
        } else {
            result.unwrap();
            if data.is_empty() {
                return; // an empty packet is ignored: it changes nothing
            }
            self.m.stage(&data);
            // `append` closes the space `buffer_mut` handed out: bytes committed later must come
            // after the packet. (Once the writer has noticed that the reader completed, it
            // returns before that, so then the space left is unknown to the model.)
            self.m.handed = if self.m.reader_done {
                None
            } else {
                Some(Vec::new())
            };
        }
    }

    fn buffer_advance(&mut self, hint: usize, n: Pick, over: bool) {
        let writer_done = self.m.writer_done;
        let mut fill = Vec::new();
        {
            let seq = &mut self.seq;
            let writer = self.writer.as_mut().unwrap();
            match writer.buffer_mut(hint) {
                Err(e) => {
                    assert!(writer_done, "buffer_mut({hint}) failed: {e}");
                    check_error(&e, &Expect::WriterCompleted);
                    return;
                }
                Ok(space) => {
                    assert!(
                        !writer_done,
                        "buffer_mut after the writer completed must fail"
                    );
                    assert!(
                        space.len() >= hint.max(1),
                        "buffer_mut({hint}) gave {}",
                        space.len()
                    );
                    for b in space.iter_mut() {
                        *seq += 1;
                        *b = (seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8;
                    }
                    fill.extend_from_slice(space);
                }
            }
        }
        let len = fill.len();
        let n = if over { n.beyond(len) } else { n.within(len) };
        let result = self.writer.as_mut().unwrap().advance(n);
        if n > len {
            self.expect_err(
                result,
                &Expect::AdvancePastBuffer {
                    requested: n,
                    available: Some(len),
                },
            );
            self.m.handed = Some(fill);
        } else {
            result.unwrap();
            self.m.stage(&fill[..n]);
            self.m.handed = Some(fill[n..].to_vec());
        }
    }

    fn advance(&mut self, n: Pick, over: bool) {
        let known = self.m.handed.clone();
        let n = match &known {
            Some(h) if over => n.beyond(h.len()),
            Some(h) => n.within(h.len()),
            // Unknown space: only 0 (always fine) and far too much (always an error) are defined.
            None if over => 1 << 40,
            None => 0,
        };
        let result = self.writer.as_mut().unwrap().advance(n);
        if self.m.writer_done {
            return self.expect_err(result, &Expect::WriterCompleted);
        }
        match known {
            Some(h) if n <= h.len() => {
                result.unwrap();
                self.m.stage(&h[..n]);
                self.m.handed = Some(h[n..].to_vec());
            }
            Some(h) => self.expect_err(
                result,
                &Expect::AdvancePastBuffer {
                    requested: n,
                    available: Some(h.len()),
                },
            ),
            None if n == 0 => result.unwrap(),
            None => self.expect_err(
                result,
                &Expect::AdvancePastBuffer {
                    requested: n,
                    available: None,
                },
            ),
        }
    }

    fn flush(&mut self, fresh: bool) {
        let writer = self.writer.as_mut().unwrap();
        self.flush_wakes_seen_before_poll = self.flush_wakes.get() > 0;
        self.flush_wakes.reset();
        self.flush_wakes_seen = 0;
        let mut cx = Context::from_waker(&self.flush_waker);
        let actual = if fresh {
            let mut future = writer.flush_pipe();
            Pin::new(&mut future).poll(&mut cx)
        } else {
            writer.poll_flush_pipe(&mut cx)
        };
        let was_pending = self.m.flush_pending;
        let reader_needs_lifts = self.m.reader_needs > self.m.published;
        let woken = self.flush_wakes_seen_before_poll;
        let expected = self.m.poll_flush_pipe(fresh);
        cover_flush(
            &expected,
            was_pending && !fresh,
            reader_needs_lifts,
            woken,
            &self.m,
        );
        match (actual, expected) {
            (Poll::Pending, Outcome::Pending) => {}
            (Poll::Ready(Ok(r)), Outcome::Ok(e)) => {
                assert_eq!(
                    (r.is_completed(), r.is_canceled()),
                    e,
                    "flush (is_completed, is_canceled)"
                )
            }
            (Poll::Ready(Err(e)), Outcome::Err(x)) => {
                check_error(&e, &x);
            }
            (actual, expected) => panic!("flush: expected {expected:?}, got {actual:?}"),
        }
    }

    // --- reader -----------------------------------------------------------------------------

    fn reader_op(&mut self, step: &Step, may: &mut MayWake) {
        if self.reader.is_none() {
            return;
        }
        let ends = matches!(
            step.op,
            Op::ReaderComplete | Op::ReaderCompleteWithError | Op::DropReader
        );
        if let Some(want) = self.m.read_pending {
            if !ends {
                // A pending read borrows the reader: the only thing to do is poll it again.
                let form = if step.gate % 2 == 0 {
                    ReadForm::Future
                } else {
                    ReadForm::Poll
                };
                self.read(want, form, false, may);
                return;
            }
        }
        match step.op {
            Op::Read { form } => {
                self.read(Want::New, form, false, may);
            }
            Op::ReadAtLeast { n, form } => {
                let n = n.within(self.m.flushed.len() + 40);
                self.read(Want::AtLeast(n), form, false, may);
            }
            Op::ReadAtLeastAbandoned { n } => {
                let n = n.within(self.m.flushed.len() + 40);
                self.read(Want::AtLeast(n), ReadForm::Future, true, may);
            }
            Op::TryRead => self.try_read(),
            Op::AdvanceTo {
                consumed,
                examined,
                mode,
            } => self.advance_to(consumed, examined, mode),
            Op::TakeFrame { n, over } => self.take_frame(n, over, false),
            Op::TakeFrameChain { n, over } => self.take_frame(n, over, true),
            Op::ReaderComplete => {
                self.reader.as_mut().unwrap().complete();
                self.reader_completed(None);
            }
            Op::ReaderCompleteWithError => {
                let message = format!("reader failure {}", self.seq);
                self.reader
                    .as_mut()
                    .unwrap()
                    .complete_with_error(message.clone());
                self.reader_completed(Some(message));
            }
            Op::DropReader => {
                self.reader = None;
                self.reader_completed(None);
            }
            _ => unreachable!(),
        }
    }

    fn reader_completed(&mut self, error: Option<String>) {
        if !self.m.reader_done {
            self.rents_at_reader_done = Some(self.pool.stats().rents);
        }
        self.m.reader_complete(error);
    }

    /// Poll a read once and check it; returns whether it gave a buffer.
    fn read(&mut self, want: Want, form: ReadForm, abandon: bool, may: &mut MayWake) -> bool {
        let was_pending = self.m.read_pending.is_some();
        let will_wait = !self.m.read_check_peek(want);
        // A `read_at_least` future dropped while pending takes its backpressure lift with it, so a
        // read that is to stay pending goes through the poll form unless it is meant to be dropped.
        let form = match want {
            Want::AtLeast(_) if will_wait && !abandon => ReadForm::Poll,
            _ => form,
        };
        self.read_wakes.reset();
        self.read_wakes_seen = 0;
        let seen = self.m.examined.max(self.m.consumed);
        let unseen = (self.m.consumed + self.m.flushed.len() as u64).saturating_sub(seen);
        let advanced = !(self.m.frames_taken && self.m.last_len.is_some());
        let would_yield = matches!((form, want), (ReadForm::Future, Want::New))
            && advanced
            && !self.m.reader_done
            && self.m.small_async_read
            && unseen > 0
            && unseen < SMALL_READ;
        // A pending read is polled again: the same future's second poll, which does not yield. A
        // fresh future here would, so such a poll goes through the poll form, which is that poll.
        let form = if would_yield && was_pending {
            ReadForm::Poll
        } else {
            form
        };
        let coalescing = matches!((form, want), (ReadForm::Future, Want::New));
        if would_yield && !was_pending {
            // Read coalescing: a fresh `read_buffer()` after a small one, with a few new bytes
            // there, yields once (wakes its task, returns `Pending`) before it looks: no cancel
            // consumed, nothing registered, the model unchanged.
            cover("read yielded to coalesce");
            let reader = self.reader.as_mut().unwrap();
            let mut cx = Context::from_waker(&self.read_waker);
            let mut future = reader.read_buffer();
            let poll = Pin::new(&mut future).poll(&mut cx).map(|r| r.map(drop));
            assert!(
                poll.is_pending(),
                "a coalescing read yields first, got {poll:?}"
            );
            assert_eq!(self.read_wakes.get(), 1, "a yield wakes its task once");
            self.read_wakes.reset();
            self.read_yielded = true;
            // The yield is spent on the reader: the next `read_buffer()`, even a fresh future
            // after this one is dropped (as here), does not yield again.
            self.m.small_async_read = false;
            return false;
        }
        self.read_yielded = false;
        let expected = self.m.poll_read_buffer(want);
        match (&expected, was_pending) {
            (Outcome::Pending, false) => {
                cover("read waited");
                if let Want::AtLeast(_) = want {
                    cover(if abandon {
                        "read_at_least abandoned while waiting"
                    } else {
                        "read_at_least waited"
                    });
                }
            }
            (Outcome::Ok((_, true)), true) => cover("pending read canceled"),
            (Outcome::Ok(_), true) if self.m.writer_done => {
                cover("pending read completed by writer completion")
            }
            (Outcome::Ok(_), true) => cover("pending read completed by a flush"),
            (Outcome::Err(Expect::Peer { .. }), _) => cover("read got the writer's error"),
            _ => {}
        }
        if matches!(expected, Outcome::Pending) && matches!(want, Want::AtLeast(_)) {
            // Registering a read_at_least wakes a paused writer (backpressure is lifted).
            may.flush = true;
        }
        let expected_bytes: Vec<u8> = self.m.flushed.iter().copied().collect();
        let pick = self.seq as usize;
        let reader = self.reader.as_mut().unwrap();
        let mut cx = Context::from_waker(&self.read_waker);
        // (is_completed, is_canceled if reported) of a ready result.
        let actual: Poll<Result<(bool, Option<bool>), Error>> = match form {
            ReadForm::Future => {
                let mut future = match want {
                    Want::New => reader.read_buffer(),
                    Want::AtLeast(n) => reader.read_at_least(n),
                };
                match Pin::new(&mut future).poll(&mut cx) {
                    Poll::Pending => Poll::Pending,
                    Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                    Poll::Ready(Ok(result)) => {
                        check_buffer_parts(result.buffer(), &expected_bytes, pick);
                        Poll::Ready(Ok((result.is_completed(), Some(result.is_canceled()))))
                    }
                }
            }
            ReadForm::Poll => {
                let polled = match want {
                    Want::New => reader.poll_read_buffer(&mut cx),
                    Want::AtLeast(n) => reader.poll_read_at_least(&mut cx, n),
                };
                match polled {
                    Poll::Pending => Poll::Pending,
                    Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                    Poll::Ready(Ok(())) => {
                        let result = reader
                            .last_read()
                            .expect("a ready poll_read leaves a result");
                        check_buffer_parts(result.buffer(), &expected_bytes, pick);
                        Poll::Ready(Ok((result.is_completed(), Some(result.is_canceled()))))
                    }
                }
            }
        };
        let gave_buffer = matches!(actual, Poll::Ready(Ok(_)));
        match (actual, expected) {
            (Poll::Pending, Outcome::Pending) => {
                if abandon {
                    self.m.read_pending = None;
                    self.m.reader_needs = 0;
                }
            }
            (Poll::Ready(Ok((completed, canceled))), Outcome::Ok((e_completed, e_canceled))) => {
                if coalescing {
                    self.m.small_async_read =
                        self.m.consumed + expected_bytes.len() as u64 - seen < SMALL_READ;
                }
                assert_eq!(completed, e_completed, "read is_completed");
                if let Some(canceled) = canceled {
                    assert_eq!(canceled, e_canceled, "read is_canceled");
                }
                self.last_buffer = expected_bytes;
            }
            (Poll::Ready(Err(e)), Outcome::Err(x)) => {
                check_error(&e, &x);
            }
            (actual, expected) => panic!(
                "read {want:?} ({form:?}, was pending: {was_pending}): expected {expected:?}, got {actual:?}"
            ),
        }
        self.check_last_read();
        gave_buffer
    }

    fn try_read(&mut self) {
        let expected = self.m.try_read();
        let pick = self.seq as usize;
        let expected_bytes: Vec<u8> = self.m.flushed.iter().copied().collect();
        let actual = self.reader.as_mut().unwrap().try_read();
        match (actual, expected) {
            (Ok(None), Ok(None)) => cover("try_read found nothing"),
            (Ok(Some(result)), Ok(Some((completed, canceled)))) => {
                check_buffer_parts(result.buffer(), &expected_bytes, pick);
                assert_eq!(result.is_completed(), completed, "try_read is_completed");
                assert_eq!(result.is_canceled(), canceled, "try_read is_canceled");
                self.last_buffer = expected_bytes;
            }
            (Err(e), Err(x)) => {
                check_error(&e, &x);
            }
            (Ok(Some(r)), e) => panic!("try_read: expected {e:?}, got a result {r:?}"),
            (actual, expected) => panic!("try_read: expected {expected:?}, got {actual:?}"),
        }
        self.check_last_read();
    }

    fn advance_to(&mut self, consumed: Pick, examined: Pick, mode: u8) {
        let len = self.m.last_len.unwrap_or(self.m.flushed.len());
        let (c, e) = match mode {
            0..=6 => {
                let e = examined.within(len);
                (consumed.within(e), e)
            }
            7 => {
                let e = examined.within(len);
                (consumed.beyond(e), e)
            }
            8 => (consumed.within(len), examined.beyond(len)),
            _ => (len, len),
        };
        let actual = self.reader.as_mut().unwrap().advance_to(c, e);
        let examined_max = self.m.examined_max;
        match self.m.advance_to(c, e) {
            Ok(()) => {
                if self.m.examined < examined_max {
                    cover("examined moved backwards");
                }
                if let Err(err) = actual {
                    panic!(
                        "advance_to({c}, {e}) with last_len {:?}: {err}",
                        self.m.last_len
                    );
                }
                self.received.extend_from_slice(&self.last_buffer[..c]);
                self.last_buffer.clear();
            }
            Err(x) => self.expect_err(actual, &x),
        }
        self.check_last_read();
    }

    fn take_frame(&mut self, n: Pick, over: bool, chain: bool) {
        let len = self.m.last_len.unwrap_or(self.m.flushed.len());
        let n = if over { n.beyond(len) } else { n.within(len) };
        let expected = self.m.take_frame(n);
        let reader = self.reader.as_mut().unwrap();
        match expected {
            Ok(bytes) => {
                if chain {
                    let frame = reader.take_frame_chain(n).unwrap();
                    assert_eq!(frame.len(), n);
                    assert!(frame.iter().all(|p| !p.is_empty()), "empty chain segment");
                    assert!(frame.to_vec() == bytes, "take_frame_chain({n}) contents");
                    self.chains.push((bytes.clone(), frame));
                    cover("frame chain taken");
                } else {
                    let frame = reader.take_frame(n).unwrap();
                    assert!(frame.as_slice() == bytes, "take_frame({n}) contents");
                    if n > 0 && n <= self.m.copy_threshold.min(Packet::INLINE_CAPACITY) {
                        assert!(
                            frame.is_inline(),
                            "a frame of {n} bytes is copied into the packet value"
                        );
                        cover("frame inline");
                    } else if n > 0 && n <= self.m.copy_threshold {
                        assert!(
                            frame.as_owned().is_some(),
                            "a frame of {n} bytes is copied into a pooled buffer"
                        );
                        cover("frame copied");
                    } else if n > self.m.copy_threshold {
                        cover("frame shared");
                    }
                    self.frames.push((bytes.clone(), frame));
                }
                self.received.extend_from_slice(&bytes);
                self.last_buffer.drain(..n);
            }
            Err(x) => {
                let actual = if chain {
                    reader.take_frame_chain(n).map(|c| c.to_vec())
                } else {
                    reader.take_frame(n).map(|p| p.to_vec())
                };
                self.expect_err(actual, &x);
            }
        }
        self.check_last_read();
    }

    /// `last_read` shows what is left of the last buffer, or nothing after an advance.
    fn check_last_read(&mut self) {
        let pick = self.seq as usize;
        let reader = self.reader.as_ref().unwrap();
        match (reader.last_read(), self.m.last_len) {
            (None, None) => {}
            (Some(result), Some(len)) => {
                assert_eq!(result.buffer().len(), len);
                let expected: Vec<u8> = self.m.flushed.iter().take(len).copied().collect();
                check_buffer_parts(result.buffer(), &expected, pick);
            }
            (result, len) => panic!("last_read: expected a buffer of {len:?}, got {result:?}"),
        }
    }

    // --- end of case ------------------------------------------------------------------------

    fn finish(mut self) {
        // Drop whatever is pending (a pending read_at_least through the poll form: complete it by
        // completing the writer below).
        self.m.flush_pending = false;
        if let Some(writer) = self.writer.as_mut() {
            writer.complete();
        }
        self.m.writer_complete(None);
        let rents_before_drain = self.pool.stats().rents;
        if self.reader.is_some() && !self.m.reader_done {
            let mut may = MayWake::default();
            if self.m.frames_taken && self.m.last_len.is_some() {
                // Frames were taken: advance before reading on (nothing consumed, nothing examined).
                self.reader.as_mut().unwrap().advance_to(0, 0).unwrap();
                self.m.advance_to(0, 0).unwrap();
            }
            let mut want = self.m.read_pending.unwrap_or(Want::New);
            let mut form = ReadForm::Future;
            for round in 0.. {
                assert!(round < 8, "draining a completed pipe does not end");
                if !self.read(want, form, false, &mut may) {
                    if self.read_yielded {
                        // Read coalescing: the woken task polls the same future again, which
                        // does not yield twice; the poll form is that second poll.
                        form = ReadForm::Poll;
                        continue;
                    }
                    if matches!(want, Want::AtLeast(_)) {
                        // A failed writer's error reaches an unsatisfiable `read_at_least` before
                        // the bytes flushed ahead of it are seen: `read_buffer` still gets them.
                        want = Want::New;
                        continue;
                    }
                    break; // the writer's error
                }
                want = Want::New;
                form = ReadForm::Future;
                let len = self.m.last_len.unwrap();
                let completed = self.m.completed_flag();
                let reader = self.reader.as_mut().unwrap();
                reader.advance_to(len, len).unwrap();
                self.m.advance_to(len, len).unwrap();
                self.received.extend_from_slice(&self.last_buffer[..len]);
                if completed && len == 0 {
                    break;
                }
            }
            // Only a failed writer leaves bytes behind: ones the reader examined without consuming
            // (reads then return the error, as there is nothing beyond the examined point).
            if !self.m.flushed.is_empty() {
                assert!(
                    self.m.writer_error.is_some(),
                    "bytes left after draining a completed pipe"
                );
                assert_eq!(self.m.examined, self.m.published);
            }
        }
        // Nothing lost, nothing duplicated, nothing reordered.
        match self.m.consumed_at_reader_done {
            None => {
                let mut delivered = self.received.clone();
                delivered.extend(self.m.flushed.iter());
                assert_eq!(
                    delivered.len(),
                    self.m.written.len(),
                    "bytes received vs written"
                );
                assert!(
                    delivered == self.m.written,
                    "received bytes differ from written bytes"
                );
            }
            Some(consumed) => {
                assert_eq!(
                    self.received.len() as u64,
                    consumed,
                    "bytes received before the reader completed"
                );
                assert!(
                    self.m.written.starts_with(&self.received),
                    "received bytes are not a prefix of the written bytes"
                );
            }
        }
        if let Some(rents) = self.rents_at_reader_done {
            assert_eq!(
                rents_before_drain, rents,
                "the writer rented after the reader completed"
            );
        }
        self.writer = None;
        self.reader = None;
        // Frames outlive the pipe.
        for (bytes, frame) in &self.frames {
            assert!(
                frame.as_slice() == &bytes[..],
                "a frame changed after the pipe dropped"
            );
        }
        for (bytes, chain) in &self.chains {
            assert!(
                chain.to_vec() == *bytes,
                "a frame chain changed after the pipe dropped"
            );
        }
        self.frames.clear();
        self.chains.clear();
        for (name, pool) in [("pipe", &self.pool), ("packet", &self.packet_pool)] {
            let stats = pool.stats();
            assert_eq!(stats.rents, stats.returns, "{name} pool: {stats:?}");
            assert_eq!(stats.outstanding, 0, "{name} pool: {stats:?}");
        }
    }
}

impl Model {
    /// Whether a read of `want` would return now (no state change).
    fn read_check_peek(&self, want: Want) -> bool {
        self.reader_done || self.read_ready(want)
    }
}

/// Check a read buffer against the expected bytes: length, contents, chunks (none empty), the
/// `Buf` cursor, a slice and `get`.
#[track_caller]
fn check_buffer_parts(buffer: packetpipe::pipe::ReadBuffer<'_>, expected: &[u8], pick: usize) {
    assert_eq!(buffer.len(), expected.len(), "read buffer length");
    assert_eq!(buffer.is_empty(), expected.is_empty());
    assert!(
        buffer.to_vec() == expected,
        "read buffer contents differ from the model"
    );
    assert_eq!(ByteSegments::byte_len(&buffer), expected.len());
    let mut joined = Vec::with_capacity(expected.len());
    for chunk in buffer.chunks() {
        assert!(!chunk.is_empty(), "a read buffer chunk is empty");
        joined.extend_from_slice(chunk);
    }
    assert!(
        joined == expected,
        "read buffer chunks differ from the model"
    );
    let mut cursor = buffer.cursor();
    assert_eq!(cursor.remaining(), expected.len());
    let mut through_cursor = vec![0; expected.len()];
    cursor.copy_to_slice(&mut through_cursor);
    assert!(
        through_cursor == expected,
        "read buffer cursor differs from the model"
    );
    assert_eq!(cursor.remaining(), 0);
    if !expected.is_empty() {
        let a = pick % expected.len();
        let b = a + (pick / 7) % (expected.len() - a + 1);
        let slice = buffer.slice(a..b);
        assert!(slice.to_vec() == expected[a..b], "slice {a}..{b} differs");
        assert!(
            slice.chunks().all(|c| !c.is_empty()),
            "slice {a}..{b} has an empty chunk"
        );
        assert_eq!(buffer.get(a), Some(expected[a]));
    }
    assert_eq!(buffer.get(expected.len()), None);
}

fn run_case(config: &CaseConfig, steps: &[Step]) {
    let mut harness = Harness::new(config);
    for (i, step) in steps.iter().enumerate() {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| harness.run(step)));
        if let Err(panic) = outcome {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            panic!("step {i} ({step:?}): {message}");
        }
    }
    harness.finish();
}

fn cases() -> u32 {
    std::env::var("PIPE_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000)
}

/// Random operation sequences agree with the model (`PIPE_MODEL_CASES` cases, default 2000).
#[test]
fn pipe_agrees_with_model() {
    let config = ProptestConfig {
        // ChaCha, the default, dominates the run time in debug builds.
        rng_algorithm: RngAlgorithm::XorShift,
        failure_persistence: None,
        max_shrink_iters: 20_000,
        ..ProptestConfig::with_cases(cases())
    };
    let mut runner = TestRunner::new(config);
    let strategy = (case_config(), prop::collection::vec(step(), 1..200));
    if let Err(e) = runner.run(&strategy, |(config, steps)| {
        run_case(&config, &steps);
        Ok(())
    }) {
        panic!("{e}");
    }
    let coverage = COVERAGE.lock().unwrap().clone();
    println!("coverage over {} cases:", cases());
    for (what, n) in &coverage {
        println!("{n:>9}  {what}");
    }
    if cases() >= 1000 {
        let missing: Vec<_> = MUST_COVER
            .iter()
            .filter(|w| !coverage.contains_key(*w))
            .collect();
        assert!(missing.is_empty(), "situations never reached: {missing:?}");
    }
}

// ------------------------------------------------------------------------------------------------
// Regressions for bugs the model found

/// `complete_with_error` documents that the reader gets the error "on every read once it has read
/// the bytes flushed before", and `read_buffer()` returns those bytes first. `read_at_least(n)` with
/// fewer than `n` bytes flushed can never be satisfied: it returns the error at once (it once
/// returned the short buffer with neither `is_completed` nor `is_canceled`), and the bytes stay in
/// the pipe for `read_buffer`.
#[test]
fn read_at_least_returns_the_writers_error_when_fewer_bytes_arrived() {
    let (mut writer, mut reader) = packetpipe::pipe::pipe();
    writer.write_slice(b"abc").unwrap();
    writer.complete_with_error("boom");
    let err = reader.read_at_least_blocking(4).unwrap_err();
    assert!(matches!(err, Error::Peer { side: "writer", .. }), "{err:?}");
    let result = reader
        .read_blocking()
        .expect("the bytes flushed before the error");
    assert_eq!(result.buffer().to_vec(), b"abc");
    assert!(!result.is_completed());
    reader.advance_to(3, 3).unwrap();
    let err = reader.read_at_least_blocking(4).unwrap_err();
    assert!(matches!(err, Error::Peer { side: "writer", .. }), "{err:?}");
}

/// `poll_read` is the poll form of `read` (adapters are thin layers over it), so a read that
/// `cancel_pending_read` cut short must show as canceled through `last_read` (`is_canceled()`):
/// the poll's own `Ok(())` does not say it.
#[test]
fn poll_read_reports_cancellation_through_last_read() {
    let (writer, mut reader) = packetpipe::pipe::pipe();
    let waker = Waker::from(Arc::new(CountWaker::default()));
    let mut cx = Context::from_waker(&waker);
    assert!(reader.poll_read_buffer(&mut cx).is_pending());
    reader.canceler().cancel_pending_read();
    assert!(matches!(
        reader.poll_read_buffer(&mut cx),
        Poll::Ready(Ok(()))
    ));
    let result = reader
        .last_read()
        .expect("a result after a ready poll_read");
    assert!(result.buffer().is_empty());
    assert!(result.is_canceled(), "the poll form loses the cancellation");
    drop(writer);
}
