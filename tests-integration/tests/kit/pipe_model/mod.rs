//! The pipe's executable reference model, and the harness that runs a real pipe next to it.
//!
//! One model serves three drivers: the proptests of `tests/pipe_model/` (random operation
//! sequences from proptest strategies), the fuzz target `pipe_ops` (libFuzzer bytes decoded by
//! [`input`]; `fuzz/fuzz_targets/pipe_ops.rs` includes this directory by path) and
//! `tests/fuzz_replay/`, which replays the committed fuzz corpus in `cargo test`. A case is a
//! [`CaseConfig`] and a list of [`Step`]s; [`run_case`] runs it and panics at the first
//! disagreement.
//!
//! The model (`model.rs`) is a `VecDeque<u8>` of flushed bytes, the staged bytes and a handful of
//! flags; the harness (`harness.rs`) polls the pipe's futures by hand with wakers that count their
//! wakes, on one thread. After every operation it checks:
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

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use bytes::{Buf, Bytes};
use packetpipe::pipe::{pipe_with, PipeCanceler, PipeOptions, PipeReader, PipeWriter};
use packetpipe::{ByteSegments, Error, Packet, PacketChain, Pool};

mod harness;
pub mod input;
mod model;

/// The counting waker of the kit (`tests/kit/wake.rs`; the fuzz target includes it beside the model).
pub use super::wake::CountWaker;
use harness::*;
use model::*;

// ------------------------------------------------------------------------------------------------
// Operations

/// How an appended packet is owned.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
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
pub struct Pick {
    pub sel: u8,
    pub raw: u16,
}

impl Pick {
    /// A value in `0..=max`: 0, `max`, or anything between.
    pub fn within(self, max: usize) -> usize {
        match self.sel % 4 {
            0 => 0,
            1 => max,
            _ => self.raw as usize % (max + 1),
        }
    }

    /// A value in `max + 1..=max + 4`.
    pub fn beyond(self, max: usize) -> usize {
        max + 1 + self.raw as usize % 4
    }
}

#[derive(Clone, Copy, Debug)]
pub enum ReadForm {
    /// `read()` / `read_at_least()` future, polled once (dropped if pending).
    Future,
    /// `poll_read` / `poll_read_at_least`, then `last_read`.
    Poll,
}

#[derive(Clone, Debug)]
pub enum Op {
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
    /// `take_frame(skip)` then `take_frame(n)`: take a header, then the frame after it.
    TakeFrameAfter {
        skip: Pick,
        n: Pick,
        over: bool,
    },
    /// `advance_to(len, len)` with the last read's length: everything consumed.
    ConsumeAll,
    ReaderComplete,
    ReaderCompleteWithError,
    DropReader,
    // The reader's canceler, the writer's.
    CancelRead,
    CancelFlush,
}

/// An operation plus a random byte deciding what a writer operation does while a flush is pending
/// (re-poll it, or drop it and go on).
#[derive(Clone, Debug)]
pub struct Step {
    pub op: Op,
    pub gate: u8,
}

#[derive(Clone, Debug)]
pub struct CaseConfig {
    pub pause: usize,
    pub resume: usize,
    pub min_segment: usize,
    pub copy_threshold: usize,
    pub pool_min_class: usize,
    pub pool_max_class: usize,
    /// The pipe's pool's thread cache depth (`None`: the pool's default); a shallow cache sends
    /// blocks through the shared depot sooner.
    pub pool_thread_cache_depth: Option<usize>,
}

// ------------------------------------------------------------------------------------------------
// Data

pub const fn static_bytes() -> [u8; 512] {
    let mut a = [0u8; 512];
    let mut i = 0;
    while i < 512 {
        a[i] = (i * 37 + 11) as u8 ^ (i >> 8) as u8;
        i += 1;
    }
    a
}

pub static STATIC: [u8; 512] = static_bytes();

// ------------------------------------------------------------------------------------------------
// Read coalescing

/// Bytes below which a `read_buffer().await` counts as small (the pipe's read coalescing).
pub const SMALL_READ: u64 = 1024;

// ------------------------------------------------------------------------------------------------
// Coverage: the run asserts that every interesting situation happened at least once

pub static COVERAGE: Mutex<BTreeMap<&'static str, u64>> = Mutex::new(BTreeMap::new());

pub fn cover(what: &'static str) {
    *COVERAGE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(what)
        .or_default() += 1;
}

/// Situations every full run must reach (a generator change that loses one fails the test).
pub const MUST_COVER: &[&str] = &[
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
    "frame taken after a header",
    "consume_all",
    "write discarded after reader completion",
    "error: WriterCompleted",
    "error: ReaderCompleted",
    "error: CommitPastSpare",
    "error: AdvanceWithoutRead",
    "error: InvalidAdvance",
    "error: FrameBeyondBuffer",
    "error: Peer",
];

/// Run one case against a fresh pipe; panics (naming the step) at the first disagreement.
pub fn run_case(config: &CaseConfig, steps: &[Step]) {
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
