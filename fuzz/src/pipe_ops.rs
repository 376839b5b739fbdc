//! The `pipe_ops` fuzz target's decoder and checker, shared by the libFuzzer target
//! (`fuzz/fuzz_targets/pipe_ops.rs`) and the replay test of the main crate (`tests/fuzz_replay.rs`,
//! which runs every committed corpus and regression input in `cargo test`). Both include this
//! file with `#[path]`, so it is not part of the library's API and needs no crate of its own.
//!
//! An input is decoded into pipe settings and a sequence of operations on one writer and one
//! reader (on one thread, futures polled once with a no-op waker: `Pending` means "would wait"),
//! including misuse (advance past the handed-out space or the read buffer, advance with no read,
//! use after completion), cancels, completion with and without an error, and dropping either end
//! or a pending future. A byte model (`VecDeque` of flushed, unconsumed bytes plus the staged
//! bytes and a few flags) predicts each outcome:
//!
//! - every read buffer holds exactly the flushed, unconsumed bytes, in order (no byte lost,
//!   duplicated or reordered), in non-empty chunks; every frame taken holds the next bytes;
//! - `is_completed` / `is_canceled` as the model says; a read is pending (or `try_read` is `None`)
//!   exactly when the model says it would wait;
//! - misuse returns the documented error (with the numbers) and leaves the data intact (the next
//!   read still sees every byte);
//! - a flush is pending only when the flushed-but-unexamined bytes reach the threshold;
//! - at the end, frames taken earlier still hold their bytes after both ends dropped, and both
//!   pools (the pipe's and the one appended packets come from) have every block back.
//!
//! The misuse rules settled in issue 11 are checked exactly: `consume_all` after the reader
//! completed is `ReaderCompleted` (as `advance_to`); `read_buffer`/`try_read` after `take_frame`
//! without `advance_to` is `ReadWithoutAdvance` (a `read_at_least` may follow directly);
//! `read_at_least(n)` short of `n` on a failed writer returns the writer's error.
//!
//! Input format (stable, so committed inputs stay meaningful): byte 0 and 1 choose the settings;
//! then each operation is 3 bytes, an opcode and a little-endian `u16` operand pair packed as
//! `a = byte1`, `b = byte2` (missing bytes read as 0). At most `MAX_OPS` operations are run.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use bytes::Bytes;
use packetpipe::pipe::{pipe_with, PipeCanceler, PipeOptions, PipeReader, PipeWriter};
use packetpipe::{ByteSegments, Error, Packet, PacketChain, Pool};

/// Operations run per input at most (longer inputs are cut).
pub const MAX_OPS: usize = 2000;

/// One decoded operation; operands are raw bytes interpreted against the state when it runs.
#[derive(Clone, Copy, Debug)]
pub enum Op {
    WriteSlice(u8, u8),
    BufferAdvance(u8, u8),
    Advance(u8),
    Append(u8, u8),
    Flush,
    FlushFutureDropped,
    TryRead,
    PollRead,
    PollReadAtLeast(u8, u8),
    ReadFutureDropped(u8, u8),
    AdvanceTo(u8, u8),
    /// `take_frame`, or `take_frame_after` when the second byte is odd (it then picks the skip).
    TakeFrame(u8, u8),
    TakeFrameChain(u8),
    ConsumeAll,
    CancelRead,
    CancelFlush,
    WriterComplete(u8),
    ReaderComplete(u8),
    DropWriter,
    DropReader,
}

/// Settings decoded from the first two bytes.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    pub pause: usize,
    pub resume: usize,
    pub min_segment: usize,
    pub copy_threshold: usize,
}

/// Decode an input into settings and operations.
pub fn decode(data: &[u8]) -> (Settings, Vec<Op>) {
    let byte = |i: usize| data.get(i).copied().unwrap_or(0);
    let (s0, s1) = (byte(0), byte(1));
    let pause = [0, 1, 64, 300, 4096][s0 as usize % 5];
    let settings = Settings {
        pause,
        resume: [0, 1, pause / 2, pause, pause + 7][(s0 / 5) as usize % 5],
        min_segment: [1, 16, 64, 1000][s1 as usize % 4],
        copy_threshold: [0, 8, 64, 100_000][(s1 / 4) as usize % 4],
    };
    let ops = data
        .get(2..)
        .unwrap_or(&[])
        .chunks(3)
        .take(MAX_OPS)
        .map(|c| {
            let (op, a, b) = (
                c[0],
                c.get(1).copied().unwrap_or(0),
                c.get(2).copied().unwrap_or(0),
            );
            match op % 21 {
                0 => Op::WriteSlice(a, b),
                1 => Op::BufferAdvance(a, b),
                2 => Op::Advance(a),
                3 => Op::Append(a, b),
                4 => Op::Flush,
                5 => Op::FlushFutureDropped,
                6 => Op::TryRead,
                7 => Op::PollRead,
                8 => Op::PollReadAtLeast(a, b),
                9 => Op::ReadFutureDropped(a, b),
                10 => Op::AdvanceTo(a, b),
                11 => Op::TakeFrame(a, b),
                12 => Op::TakeFrameChain(a),
                13 => Op::ConsumeAll,
                14 => Op::CancelRead,
                15 => Op::CancelFlush,
                16 => Op::WriterComplete(a),
                17 => Op::ReaderComplete(a),
                18 => Op::DropWriter,
                19 => Op::DropReader,
                _ => Op::WriteSlice(a, b.wrapping_add(128)),
            }
        })
        .collect();
    (settings, ops)
}

/// Decode and run one input; panics (with the step and the model's view) on any disagreement.
pub fn run(data: &[u8]) {
    let (settings, ops) = decode(data);
    let mut harness = Harness::new(settings);
    for (step, op) in ops.iter().enumerate() {
        harness.step = step;
        harness.ops.push(*op);
        harness.op(*op);
    }
    harness.finish();
}

/// A size from two operand bytes: small sizes most of the time, up to ~16 KiB.
fn size(a: u8, b: u8) -> usize {
    match b % 4 {
        0 => a as usize % 8,
        1 => a as usize,
        2 => a as usize * 8,
        _ => (a as usize) << 6,
    }
}

/// A position in `0..=max` or beyond it, from one operand byte.
fn pick(sel: u8, max: usize) -> usize {
    match sel % 8 {
        0 => 0,
        1 | 2 => max,
        3 => max + 1 + (sel as usize >> 3),
        _ => (sel as usize * 7919) % (max + 1),
    }
}

/// A waker that only counts its wakes: the harness polls again when it wants (`Pending` = would
/// wait, unless the future woke it: a read that yields to coalesce).
#[derive(Default)]
struct CountingWaker(std::sync::atomic::AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Bytes below which a `read_buffer().await` counts as small (the pipe's read coalescing).
const SMALL_READ: u64 = 1024;

/// A read's result, copied out: the buffer's chunks, `is_completed`, `is_canceled`.
type Got = (Vec<Vec<u8>>, bool, bool);

/// What a read waits for.
#[derive(Clone, Copy, Debug)]
enum Want {
    New,
    AtLeast(usize),
}

/// How a read is issued.
#[derive(Clone, Copy, Debug)]
enum ReadForm {
    /// `try_read`.
    Try,
    /// `poll_read_buffer` / `poll_read_at_least`, then `last_read`.
    Poll,
    /// `read_buffer()` / `read_at_least()` future polled once, then dropped.
    Future,
}

/// The model's answer for a read.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Expect {
    /// Would wait.
    Pending,
    /// A result with these flags.
    Ready { completed: bool, canceled: bool },
    /// The writer's completion error.
    WriterError,
}

struct Harness {
    step: usize,
    /// The operations run so far, for the failure message.
    ops: Vec<Op>,
    settings: Settings,
    waker: Waker,
    wakes: Arc<CountingWaker>,
    pool: Pool,
    /// Appended pooled packets come from here, so the pipe's pool counts only its own rents.
    other_pool: Pool,
    /// `None` once dropped.
    writer: Option<PipeWriter>,
    reader: Option<PipeReader>,
    canceler: PipeCanceler,
    /// `Some(failed)` once the writer completed (dropping it completes it without an error).
    writer_done: Option<bool>,
    reader_done: Option<bool>,
    /// Flushed bytes the reader has not consumed, in order.
    flushed: VecDeque<u8>,
    /// Bytes staged by the writer, not yet flushed.
    staged: Vec<u8>,
    consumed: u64,
    examined: u64,
    examined_max: u64,
    last_len: Option<usize>,
    /// A frame was taken since the last read and no advance followed: `read_buffer`/`try_read`
    /// are `ReadWithoutAdvance` then.
    took_since_read: bool,
    /// The last `read_buffer()` future that completed brought fewer than `SMALL_READ` new bytes.
    small_async_read: bool,
    cancel_read: bool,
    cancel_flush: bool,
    /// Bytes the last `buffer_mut` handed out and not yet committed (as the writer counts them).
    handed_out: usize,
    next_byte: u32,
    /// Frames kept past the pipe, with the bytes they must hold.
    kept: Vec<(Kept, Vec<u8>)>,
}

/// A frame taken out of the pipe.
#[derive(Debug)]
enum Kept {
    Packet(Packet),
    Chain(PacketChain),
}

impl Kept {
    fn to_vec(&self) -> Vec<u8> {
        match self {
            Kept::Packet(p) => ByteSegments::to_vec(p),
            Kept::Chain(c) => ByteSegments::to_vec(c),
        }
    }
}

impl Harness {
    fn new(settings: Settings) -> Harness {
        let pool = Pool::builder()
            .min_class_size(64)
            .max_class_size(4096)
            .thread_cache_depth(2)
            .build()
            .expect("pool settings");
        let other_pool = Pool::builder()
            .max_class_size(4096)
            .build()
            .expect("pool settings");
        let (writer, reader) = pipe_with(
            PipeOptions::new()
                .pool(pool.clone())
                .pause_threshold(settings.pause)
                .resume_threshold(settings.resume)
                .min_segment_size(settings.min_segment)
                .copy_threshold(settings.copy_threshold),
        );
        let canceler = reader.canceler();
        let wakes = Arc::new(CountingWaker::default());
        Harness {
            step: 0,
            ops: Vec::new(),
            settings,
            waker: Waker::from(wakes.clone()),
            wakes,
            pool,
            other_pool,
            writer: Some(writer),
            reader: Some(reader),
            canceler,
            writer_done: None,
            reader_done: None,
            flushed: VecDeque::new(),
            staged: Vec::new(),
            consumed: 0,
            examined: 0,
            examined_max: 0,
            last_len: None,
            took_since_read: false,
            small_async_read: false,
            cancel_read: false,
            cancel_flush: false,
            handed_out: 0,
            next_byte: 0,
            kept: Vec::new(),
        }
    }

    fn fresh(&mut self, len: usize) -> Vec<u8> {
        (0..len)
            .map(|_| {
                self.next_byte = self.next_byte.wrapping_add(1);
                (self.next_byte % 251) as u8
            })
            .collect()
    }

    #[track_caller]
    fn fail(&self, what: &str) -> ! {
        panic!(
            "step {}: {what}\n  settings {:?}\n  writer done {:?} reader done {:?}, flushed {} \
             staged {} consumed {} examined {} (max {}) last_len {:?} cancel_read {} \
             cancel_flush {}\n  operations: {:?}",
            self.step,
            self.settings,
            self.writer_done,
            self.reader_done,
            self.flushed.len(),
            self.staged.len(),
            self.consumed,
            self.examined,
            self.examined_max,
            self.last_len,
            self.cancel_read,
            self.cancel_flush,
            self.ops,
        )
    }

    #[track_caller]
    fn expect_error<T: std::fmt::Debug>(
        &self,
        actual: Result<T, Error>,
        ok: impl Fn(&Error) -> bool,
        what: &str,
    ) {
        match actual {
            Err(e) if ok(&e) => {}
            Err(e) => self.fail(&format!("{what}: wrong error {e:?}")),
            Ok(v) => self.fail(&format!("{what}: returned {v:?}, expected an error")),
        }
    }

    fn op(&mut self, op: Op) {
        match op {
            Op::WriteSlice(a, b) => self.write_slice(size(a, b)),
            Op::BufferAdvance(a, b) => self.buffer_advance(size(a, b), b >> 2),
            Op::Advance(a) => self.advance_past(a),
            Op::Append(a, b) => self.append(size(a, b), b >> 2),
            Op::Flush => self.flush(false),
            Op::FlushFutureDropped => self.flush(true),
            Op::TryRead => self.read(Want::New, ReadForm::Try),
            Op::PollRead => self.read(Want::New, ReadForm::Poll),
            Op::PollReadAtLeast(a, b) => self.read(Want::AtLeast(size(a, b)), ReadForm::Poll),
            Op::ReadFutureDropped(a, b) => {
                let want = if b % 2 == 0 {
                    Want::New
                } else {
                    Want::AtLeast(size(a, b >> 1))
                };
                self.read(want, ReadForm::Future)
            }
            Op::AdvanceTo(a, b) => self.advance_to(a, b),
            Op::TakeFrame(a, b) => self.take_frame(a, b, false),
            Op::TakeFrameChain(a) => self.take_frame(a, 0, true),
            Op::ConsumeAll => self.consume_all(),
            Op::CancelRead => {
                self.canceler.cancel_pending_read();
                self.cancel_read = true;
            }
            Op::CancelFlush => {
                self.canceler.cancel_pending_flush();
                self.cancel_flush = true;
            }
            Op::WriterComplete(a) => self.writer_complete(a % 2 == 1, false),
            Op::ReaderComplete(a) => self.reader_complete(a % 2 == 1, false),
            Op::DropWriter => self.writer_complete(false, true),
            Op::DropReader => self.reader_complete(false, true),
        }
    }

    // --------------------------------------------------------------------------------------------
    // Writer

    /// Bytes the writer accepted: staged, or released at once when the reader is gone.
    fn stage(&mut self, bytes: &[u8]) {
        if self.reader_done.is_none() {
            self.staged.extend_from_slice(bytes);
        }
    }

    /// Staged bytes become visible to the reader (writer flush or completion).
    fn publish(&mut self) {
        let staged = std::mem::take(&mut self.staged);
        if self.reader_done.is_none() {
            self.flushed.extend(staged);
        }
    }

    #[track_caller]
    fn expect_writer_completed<T: std::fmt::Debug>(&self, result: Result<T, Error>, what: &str) {
        self.expect_error(result, |e| *e == Error::WriterCompleted, what);
    }

    fn write_slice(&mut self, len: usize) {
        if self.writer.is_none() {
            return;
        }
        let data = self.fresh(len);
        let result = self.writer.as_mut().expect("checked").write_slice(&data);
        if self.writer_done.is_some() {
            return self.expect_writer_completed(result, "write_slice after complete");
        }
        if let Err(e) = result {
            self.fail(&format!("write_slice({len}): {e:?}"));
        }
        if len > 0 {
            // An empty write leaves the space handed out earlier to the caller.
            self.handed_out = 0;
        }
        self.stage(&data);
    }

    /// `buffer_mut(hint)`, fill part of the space, `advance` by a count within it, all of it, or
    /// past it (misuse: an error, nothing committed).
    fn buffer_advance(&mut self, hint: usize, sel: u8) {
        let Some(writer) = self.writer.as_mut() else {
            return;
        };
        let result = writer.buffer_mut(hint).map(|space| space.len());
        if self.writer_done.is_some() {
            return self.expect_writer_completed(result, "buffer_mut after complete");
        }
        let space = match result {
            Ok(space) => space,
            Err(e) => self.fail(&format!("buffer_mut({hint}): {e:?}")),
        };
        if space < hint.max(1) {
            self.fail(&format!("buffer_mut({hint}) handed out only {space} bytes"));
        }
        self.handed_out = space;
        let n = pick(sel, space.min(20_000));
        let bytes = self.fresh(n.min(space));
        let writer = self.writer.as_mut().expect("checked");
        // The same request again returns the same space (nothing was committed in between).
        let again = writer.buffer_mut(hint).expect("buffer_mut again");
        if again.len() != space {
            let len = again.len();
            self.fail(&format!(
                "buffer_mut({hint}) again: {len} bytes, first {space}"
            ));
        }
        again[..bytes.len()].copy_from_slice(&bytes);
        let result = writer.advance(n);
        if n > space {
            return self.expect_error(
                result,
                |e| {
                    *e == Error::AdvancePastBuffer {
                        requested: n,
                        available: space,
                    }
                },
                "advance past the handed-out space",
            );
        }
        if let Err(e) = result {
            self.fail(&format!("advance({n}) within {space} bytes: {e:?}"));
        }
        self.handed_out = space - n;
        self.stage(&bytes);
    }

    /// `advance` past what is left of the handed-out space, without a new `buffer_mut`: an error,
    /// nothing committed. (Committing earlier space again is not modelled: its content is
    /// whatever was written there.)
    fn advance_past(&mut self, sel: u8) {
        let Some(writer) = self.writer.as_mut() else {
            return;
        };
        let n = self.handed_out + 1 + sel as usize % 4;
        let result = writer.advance(n);
        if self.writer_done.is_some() {
            return self.expect_writer_completed(result, "advance after complete");
        }
        if self.reader_done.is_some() {
            // Nothing committed reaches anyone now; whether `append` still resets the handed-out
            // space once the writer knows the reader is gone is not part of the contract.
            return;
        }
        // The writer may have dropped what is left of the space since (a flush that found the
        // buffer full): `available` is at most what the model counts.
        let left = self.handed_out;
        self.expect_error(
            result,
            |e| {
                matches!(*e, Error::AdvancePastBuffer { requested, available }
                    if requested == n && available <= left)
            },
            "advance past the handed-out space",
        );
    }

    fn append(&mut self, len: usize, kind: u8) {
        if self.writer.is_none() {
            return;
        }
        let data = self.fresh(len);
        let packet: Packet = match kind % 4 {
            0 if !data.is_empty() => self.other_pool.copy_from_slice(&data).expect("copy").into(),
            1 => Bytes::from(data.clone()).into(),
            2 => {
                // A window in the middle of a larger pooled packet.
                let mut wide = vec![0xEE];
                wide.extend_from_slice(&data);
                wide.push(0xEE);
                let packet = self.other_pool.copy_from_slice(&wide).expect("copy");
                packet.slice(1..1 + data.len()).into()
            }
            _ => data.clone().into(),
        };
        let result = self.writer.as_mut().expect("checked").append(packet);
        if self.writer_done.is_some() {
            return self.expect_writer_completed(result, "append after complete");
        }
        if let Err(e) = result {
            self.fail(&format!("append({len}): {e:?}"));
        }
        if data.is_empty() {
            return; // an empty packet is ignored: the handed-out space stays
        }
        self.handed_out = 0;
        self.stage(&data);
    }

    /// `poll_flush_pipe` once, or a `flush_pipe()` future polled once and dropped.
    fn flush(&mut self, as_future: bool) {
        let Some(writer) = self.writer.as_mut() else {
            return;
        };
        let mut cx = Context::from_waker(&self.waker);
        let poll = if as_future {
            let mut flush = pin!(writer.flush_pipe());
            flush.as_mut().poll(&mut cx)
        } else {
            writer.poll_flush_pipe(&mut cx)
        };
        if self.writer_done.is_some() {
            if !matches!(poll, Poll::Ready(Err(Error::WriterCompleted))) {
                self.fail(&format!("flush after complete: {poll:?}"));
            }
            return;
        }
        // Staged bytes are published first, whatever the outcome (released if the reader is gone).
        self.publish();
        match (self.reader_done, poll) {
            (Some(false), Poll::Ready(Ok(r))) if r.is_completed() && !r.is_canceled() => {}
            (Some(true), Poll::Ready(Err(Error::Peer { side: "reader", .. }))) => {}
            (Some(_), other) => self.fail(&format!("flush with the reader completed: {other:?}")),
            (None, Poll::Ready(Ok(r))) if self.cancel_flush => {
                if !r.is_canceled() || r.is_completed() {
                    self.fail(&format!("flush after cancel_pending_flush: {r:?}"));
                }
                self.cancel_flush = false;
            }
            (None, Poll::Ready(Ok(r))) => {
                if r.is_canceled() || r.is_completed() {
                    self.fail(&format!("flush: {r:?}"));
                }
            }
            (None, Poll::Pending) => {
                let published = self.consumed + self.flushed.len() as u64;
                let unexamined = published.saturating_sub(self.examined_max);
                let s = self.settings;
                let least = s.resume.min(s.pause).max(1) as u64;
                if self.cancel_flush || s.pause == 0 || unexamined < least {
                    self.fail(&format!(
                        "flush pending with {unexamined} unexamined bytes (pause {}, resume {})",
                        s.pause, s.resume
                    ));
                }
            }
            (None, Poll::Ready(Err(e))) => self.fail(&format!("flush: {e:?}")),
        }
    }

    /// `complete`, `complete_with_error` or drop (completes without an error if not completed).
    fn writer_complete(&mut self, with_error: bool, drop_it: bool) {
        let Some(writer) = self.writer.as_mut() else {
            return;
        };
        if drop_it {
            self.writer = None;
        } else if with_error {
            writer.complete_with_error("fuzz writer error");
        } else {
            writer.complete();
        }
        if self.writer_done.is_none() {
            self.publish();
            self.writer_done = Some(with_error);
        }
    }

    // --------------------------------------------------------------------------------------------
    // Reader

    /// The model's outcome of a read that runs its check now (consuming a pending cancel).
    fn expect_read(&mut self, want: Want) -> Expect {
        let canceled = std::mem::take(&mut self.cancel_read);
        let available = self.flushed.len();
        let unseen = self.consumed + available as u64 > self.examined;
        let satisfied = canceled
            || match want {
                Want::New => unseen,
                Want::AtLeast(n) => available >= n,
            };
        let done = self.writer_done.is_some();
        let failed = self.writer_done == Some(true);
        let completed = done && !failed;
        if done && failed && !satisfied {
            return match want {
                Want::New if !unseen => Expect::WriterError,
                Want::New => Expect::Ready {
                    completed,
                    canceled,
                },
                Want::AtLeast(_) => Expect::WriterError,
            };
        }
        if !(satisfied || done) {
            return Expect::Pending;
        }
        Expect::Ready {
            completed,
            canceled,
        }
    }

    fn read(&mut self, want: Want, form: ReadForm) {
        if self.reader.is_none() {
            return;
        }
        if self.reader_done.is_some() {
            let reader = self.reader.as_mut().expect("checked");
            let mut cx = Context::from_waker(&self.waker);
            let result = match (form, want) {
                (ReadForm::Try, _) => reader.try_read().map(|r| r.map(|r| r.buffer().len())),
                (_, Want::New) => match reader.poll_read_buffer(&mut cx) {
                    Poll::Ready(r) => r.map(|()| None),
                    Poll::Pending => Ok(Some(usize::MAX)),
                },
                (_, Want::AtLeast(n)) => match reader.poll_read_at_least(&mut cx, n) {
                    Poll::Ready(r) => r.map(|()| None),
                    Poll::Pending => Ok(Some(usize::MAX)),
                },
            };
            return self.expect_error(
                result,
                |e| *e == Error::ReaderCompleted,
                "read after complete",
            );
        }
        if self.took_since_read && (matches!(want, Want::New) || matches!(form, ReadForm::Try)) {
            let len = self.last_len.expect("frames are taken from a read buffer");
            let reader = self.reader.as_mut().expect("checked");
            let mut cx = Context::from_waker(&self.waker);
            let result: Result<(), Error> = match form {
                ReadForm::Try => reader.try_read().map(drop),
                ReadForm::Poll => match reader.poll_read_buffer(&mut cx) {
                    Poll::Ready(r) => r,
                    Poll::Pending => Ok(()),
                },
                ReadForm::Future => match pin!(reader.read_buffer()).as_mut().poll(&mut cx) {
                    Poll::Ready(r) => r.map(drop),
                    Poll::Pending => Ok(()),
                },
            };
            return self.expect_error(
                result,
                |e| *e == Error::ReadWithoutAdvance { len },
                "read after take_frame without advance_to",
            );
        }
        let seen = self.examined.max(self.consumed);
        let unseen = (self.consumed + self.flushed.len() as u64).saturating_sub(seen);
        let coalescing = matches!((form, want), (ReadForm::Future, Want::New));
        if coalescing && self.small_async_read && unseen > 0 && unseen < SMALL_READ {
            // Read coalescing: the read yields once (wakes its task, returns `Pending`) before
            // it looks, so it consumes no pending cancel.
            let before = self.wakes.0.load(std::sync::atomic::Ordering::Relaxed);
            let reader = self.reader.as_mut().expect("checked");
            let mut cx = Context::from_waker(&self.waker);
            let poll = pin!(reader.read_buffer())
                .as_mut()
                .poll(&mut cx)
                .map(|r| r.map(drop));
            let woken = self.wakes.0.load(std::sync::atomic::Ordering::Relaxed) - before;
            if !poll.is_pending() || woken != 1 {
                self.fail(&format!(
                    "read_buffer() after a small read, {unseen} new bytes: expected a yield (Pending, \
                     1 wake), got {poll:?} with {woken} wakes"
                ));
            }
            // The yield is spent on the reader: the next read_buffer() (this future is dropped)
            // takes the bytes without yielding again.
            self.small_async_read = false;
            return;
        }
        let expect = self.expect_read(want);
        let reader = self.reader.as_mut().expect("checked");
        let mut cx = Context::from_waker(&self.waker);
        // `Ok(Some(..))`: a result; `Ok(None)`: pending; `Err`: an error.
        let outcome: Result<Option<Got>, Error> = match form {
            ReadForm::Try => reader
                .try_read()
                .map(|r| r.map(|r| (chunks(&r.buffer()), r.is_completed(), r.is_canceled()))),
            ReadForm::Poll => {
                let poll = match want {
                    Want::New => reader.poll_read_buffer(&mut cx),
                    Want::AtLeast(n) => reader.poll_read_at_least(&mut cx, n),
                };
                match poll {
                    Poll::Pending => Ok(None),
                    Poll::Ready(Err(e)) => Err(e),
                    Poll::Ready(Ok(())) => {
                        let r = reader.last_read().expect("a read just completed");
                        Ok(Some((
                            chunks(&r.buffer()),
                            r.is_completed(),
                            r.is_canceled(),
                        )))
                    }
                }
            }
            ReadForm::Future => {
                let read = match want {
                    Want::New => reader.read_buffer(),
                    Want::AtLeast(n) => reader.read_at_least(n),
                };
                let mut read = pin!(read);
                match read.as_mut().poll(&mut cx) {
                    Poll::Pending => Ok(None),
                    Poll::Ready(Err(e)) => Err(e),
                    Poll::Ready(Ok(r)) => Ok(Some((
                        chunks(&r.buffer()),
                        r.is_completed(),
                        r.is_canceled(),
                    ))),
                }
            }
        };
        let got = match (expect, outcome) {
            (Expect::Pending, Ok(None)) => return,
            (Expect::WriterError, Err(Error::Peer { side: "writer", .. })) => return,
            (
                Expect::Ready {
                    completed,
                    canceled,
                },
                Ok(Some((chunks, is_completed, is_canceled))),
            ) => {
                if (is_completed, is_canceled) != (completed, canceled) {
                    self.fail(&format!(
                        "read {want:?} {form:?}: completed {is_completed} canceled {is_canceled}, \
                         expected {completed} {canceled}"
                    ));
                }
                chunks
            }
            (expect, outcome) => {
                let outcome = outcome.map(|r| r.map(|(c, d, k)| (c.concat().len(), d, k)));
                self.fail(&format!(
                    "read {want:?} {form:?}: expected {expect:?}, got {outcome:?}"
                ))
            }
        };
        if got.iter().any(Vec::is_empty) {
            self.fail("a read buffer has an empty chunk");
        }
        let got = got.concat();
        if got.len() != self.flushed.len() || !got.iter().eq(self.flushed.iter()) {
            let first_bad = got
                .iter()
                .zip(self.flushed.iter())
                .position(|(a, b)| a != b);
            self.fail(&format!(
                "read {want:?} {form:?}: {} bytes, expected the {} flushed unconsumed bytes \
                 (first difference at {first_bad:?})",
                got.len(),
                self.flushed.len()
            ));
        }
        self.last_len = Some(got.len());
        self.took_since_read = false;
        if coalescing {
            self.small_async_read = self.consumed + (got.len() as u64) - seen < SMALL_READ;
        }
    }

    #[track_caller]
    fn expect_reader_completed<T: std::fmt::Debug>(&self, result: Result<T, Error>, what: &str) {
        self.expect_error(result, |e| *e == Error::ReaderCompleted, what);
    }

    /// Consume `n` bytes from the front of the model.
    fn consume(&mut self, n: usize) -> Vec<u8> {
        self.consumed += n as u64;
        self.flushed.drain(..n).collect()
    }

    fn advance_to(&mut self, a: u8, b: u8) {
        let Some(reader) = self.reader.as_mut() else {
            return;
        };
        let len = self.last_len.unwrap_or(0);
        let examined = pick(b, len);
        let consumed = if a % 4 == 3 {
            examined + 1 + (a as usize >> 2) // consumed > examined
        } else {
            pick(a, examined)
        };
        let result = reader.advance_to(consumed, examined);
        if self.reader_done.is_some() {
            return self.expect_reader_completed(result, "advance_to after complete");
        }
        let Some(len) = self.last_len else {
            return self.expect_error(result, |e| *e == Error::AdvanceWithoutRead, "advance_to");
        };
        if consumed > examined || examined > len {
            let expected = Error::InvalidAdvance {
                consumed,
                examined,
                len,
            };
            return self.expect_error(result, |e| *e == expected, "invalid advance_to");
        }
        if let Err(e) = result {
            self.fail(&format!(
                "advance_to({consumed}, {examined}) of {len}: {e:?}"
            ));
        }
        let start = self.consumed;
        self.consume(consumed);
        self.examined = start + examined as u64;
        self.examined_max = self.examined_max.max(self.examined);
        self.last_len = None;
        self.took_since_read = false;
    }

    fn consume_all(&mut self) {
        let Some(reader) = self.reader.as_mut() else {
            return;
        };
        let result = reader.consume_all();
        if self.reader_done.is_some() {
            // The same error as `advance_to` gives (issue 11).
            return self.expect_error(
                result,
                |e| *e == Error::ReaderCompleted,
                "consume_all after complete",
            );
        }
        let Some(len) = self.last_len else {
            return self.expect_error(result, |e| *e == Error::AdvanceWithoutRead, "consume_all");
        };
        if let Err(e) = result {
            self.fail(&format!("consume_all of {len}: {e:?}"));
        }
        self.consume(len);
        self.examined = self.consumed;
        self.examined_max = self.examined_max.max(self.examined);
        self.last_len = None;
        self.took_since_read = false;
    }

    fn take_frame(&mut self, sel: u8, skip_sel: u8, chain: bool) {
        let Some(reader) = self.reader.as_mut() else {
            return;
        };
        let len = self.last_len.unwrap_or(0);
        let skip = if skip_sel % 2 == 1 {
            pick(skip_sel / 2, len)
        } else {
            0
        };
        let n = pick(sel, len - skip.min(len));
        let result = if chain {
            reader.take_frame_chain(n).map(Kept::Chain)
        } else if skip_sel % 2 == 1 {
            reader.take_frame_after(skip, n).map(Kept::Packet)
        } else {
            reader.take_frame(n).map(Kept::Packet)
        };
        if self.reader_done.is_some() {
            return self.expect_reader_completed(result, "take_frame after complete");
        }
        let Some(len) = self.last_len else {
            return self.expect_error(result, |e| *e == Error::AdvanceWithoutRead, "take_frame");
        };
        if skip + n > len {
            let expected = Error::FrameBeyondBuffer {
                skip,
                requested: n,
                len,
            };
            return self.expect_error(result, |e| *e == expected, "take_frame beyond the buffer");
        }
        let frame = match result {
            Ok(frame) => frame,
            Err(e) => self.fail(&format!("take_frame_after({skip}, {n}) of {len}: {e:?}")),
        };
        self.consume(skip);
        let expected = self.consume(n);
        if frame.to_vec() != expected {
            self.fail(&format!("take_frame({n}): wrong bytes"));
        }
        self.examined = self.examined.max(self.consumed);
        self.examined_max = self.examined_max.max(self.consumed);
        self.last_len = Some(len - skip - n);
        self.took_since_read = true;
        // Keep some frames past the end of the pipe.
        if sel % 3 == 0 && n > 0 {
            self.kept.push((frame, expected));
        }
    }

    /// `complete`, `complete_with_error` or drop: every unconsumed byte is released.
    fn reader_complete(&mut self, with_error: bool, drop_it: bool) {
        let Some(reader) = self.reader.as_mut() else {
            return;
        };
        if drop_it {
            self.reader = None;
        } else if with_error {
            reader.complete_with_error("fuzz reader error");
        } else {
            reader.complete();
        }
        if self.reader_done.is_none() {
            self.reader_done = Some(with_error);
            self.flushed.clear();
            self.staged.clear();
            self.last_len = None;
            self.took_since_read = false;
        }
    }

    // --------------------------------------------------------------------------------------------
    // End of a case

    /// Complete the writer, drain the reader, drop everything: the reader got every flushed byte
    /// (checked read by read), frames kept past the pipe still hold theirs, every block is home.
    fn finish(mut self) {
        self.step = usize::MAX;
        self.writer_complete(false, false);
        if self.reader.is_some() && self.reader_done.is_none() {
            if self.last_len.is_some() {
                self.consume_all();
            }
            // Each round either ends or consumes bytes (a pending cancel is consumed by one read).
            for _ in 0..self.flushed.len() + 3 {
                self.read(Want::New, ReadForm::Try);
                if self.last_len.is_none() {
                    // The writer's error (after the last bytes) or nothing left to wait for.
                    break;
                }
                let len = self.last_len.unwrap_or(0);
                self.consume_all();
                if len == 0 && !self.cancel_read && self.flushed.is_empty() {
                    break;
                }
            }
            // A writer that failed reports its error once every byte was seen: examined bytes
            // may stay unconsumed then. Nothing else may be left.
            let unseen = self.consumed + self.flushed.len() as u64 > self.examined;
            if (self.writer_done == Some(false) && !self.flushed.is_empty()) || unseen {
                self.fail("bytes left unread after the writer completed");
            }
        }
        let (pool, other_pool) = (self.pool.clone(), self.other_pool.clone());
        self.writer = None;
        self.reader = None;
        for (frame, expected) in &self.kept {
            if frame.to_vec() != *expected {
                self.fail("a frame taken earlier changed after the pipe was dropped");
            }
        }
        drop(self);
        for (name, pool) in [("pipe", pool), ("appended packets", other_pool)] {
            let stats = pool.stats();
            assert_eq!(
                stats.outstanding, 0,
                "{name} pool: blocks not returned: {stats:?}"
            );
            assert_eq!(stats.rents, stats.returns, "{name} pool: {stats:?}");
        }
    }
}

/// The chunks of a read buffer, copied out.
fn chunks(buffer: &packetpipe::pipe::ReadBuffer<'_>) -> Vec<Vec<u8>> {
    buffer.chunks().map(<[u8]>::to_vec).collect()
}
