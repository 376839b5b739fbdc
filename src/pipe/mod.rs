//! The pipe: one writer, one reader, a chain of pooled segments between them.
//!
//! ```
//! use packetpipe::pipe::pipe;
//!
//! let (mut writer, mut reader) = pipe();
//! let producer = std::thread::spawn(move || -> Result<(), packetpipe::Error> {
//!     for i in 0..100u32 {
//!         writer.write_slice(&i.to_be_bytes())?;
//!         writer.flush_blocking()?;
//!     }
//!     Ok(()) // dropping the writer completes it
//! });
//! let mut sum = 0u64;
//! loop {
//!     let result = reader.read_blocking()?;
//!     let mut cursor = result.buffer.cursor();
//!     let whole = result.buffer.len() / 4 * 4;
//!     for _ in 0..whole / 4 {
//!         sum += u64::from(bytes::Buf::get_u32(&mut cursor));
//!     }
//!     let (len, done) = (result.buffer.len(), result.is_completed);
//!     reader.advance_to(whole, len)?;
//!     if done {
//!         break;
//!     }
//! }
//! producer.join().unwrap()?;
//! assert_eq!(sum, (0..100).sum());
//! # Ok::<(), packetpipe::Error>(())
//! ```
//!
//! See [`PipeWriter`] and [`PipeReader`] for the two ends.
//!
//! # Concurrency design
//!
//! One writer and one reader, on any threads or tasks. No lock on the hot path: a side takes a lock
//! only to park its waker or to wake a side that said it is parked. The loom models in
//! `loom-tests/` check each protocol below.
//!
//! **Who writes what.**
//!
//! | state | written by | read by |
//! |---|---|---|
//! | segment nodes after the reader's position (packet, `next` link) | writer, before publishing | reader, after publishing |
//! | `published` word: bytes flushed + `DONE`/`FAILED` bits | writer (one SeqCst add per flush or completion) | reader |
//! | `consumer_pos`: the reader's current node | reader (Release, after taking the node's packet) | writer (Acquire, before reusing nodes) |
//! | `reader` word: furthest examined byte + `DONE`/`FAILED` bits | reader (SeqCst store) | writer (backpressure) |
//! | `reader_needs`: byte target of a waiting `read_at_least` | reader (SeqCst) | writer (backpressure) |
//! | `cancel_read` / `cancel_flush` | the reader's / the writer's `PipeCanceler` (SeqCst) | reader / writer (swap, one-shot) |
//! | completion errors | the completing side, before its `FAILED` bit | the other side, after seeing it |
//!
//! **Which orderings pair up.**
//!
//! - *Data.* The writer fills a node and links it (`next`, Release), then publishes its bytes with a
//!   SeqCst add to `published`; the reader loads `published` (SeqCst, so acquire) and only then
//!   walks the links it covers. Nodes linked but not yet covered ("staged") are never touched by the
//!   reader, so staging costs no atomics at all.
//! - *Close vs data.* Completion adds the last staged bytes and the `DONE` bit in the same atomic
//!   add, and the reader takes both from one load: it cannot see "closed" without the bytes before
//!   it (a reader that loaded the two apart could end a stream short of its last bytes).
//! - *Node reuse.* The reader takes a consumed node's packet out, then stores its position
//!   (Release); the writer loads it (Acquire) before reusing any node behind it.
//! - *Sleep and wake.* A side that must wait stores its waker and sets its `waiting` flag (SeqCst),
//!   both under the waker slot's lock, and re-checks its condition (SeqCst loads); the other side
//!   changes the state (SeqCst) and then loads the flag (SeqCst), and only if it is set takes the
//!   lock, clears the flag and takes the waker. In the single order of SeqCst operations one of the
//!   two sees the other, so no wakeup is lost (`wait.rs`). Since the flag and the slot change
//!   together, a reader that finds its flag still set with the same waker skips registering again.
//! - *Packet release.* Clones increment the block's count Relaxed; drops decrement with Release and
//!   the last one fences Acquire before the block is reused. A sole holder sees a count of 1 with an
//!   Acquire load and skips the decrement.
//! - *Pool.* Thread caches are thread-local; whole magazines move through the depot under a mutex.
//!
//! **Where each side waits, and who wakes it.**
//!
//! | waiter | waits in | woken by |
//! |---|---|---|
//! | reader | `read_buffer` (no byte beyond the examined point), `read_at_least(n)` (fewer than `n` bytes) | a flush that published bytes, writer completion, the reader's canceler |
//! | writer | `flush_pipe` while flushed-but-unexamined bytes are >= pause (until < resume) | an `advance_to`/`take_frame` that brings them below resume, a `read_at_least` waiting for unpublished bytes, reader completion, the writer's canceler |
//! | writer | `poll_reader_completed` (an idle fill pump) | reader completion or drop only |
//!
//! **The writer's block between flushes.** Each flush that publishes parks the writer's partly
//! used block in the queue's `ParkingSlot` (a plain store, before publishing); the writer's next
//! write takes it back with an atomic swap, unless the reader, about to sleep (or completing), took
//! it first and sent it home. One swap on each side decides; the loser does nothing (`block.rs`,
//! loom model `parked_tail`). The seals between flushes take their block references from a batch
//! the writer counted in advance (one atomic add per 15 flushes, not one per flush); unused ones go
//! back with the block.
//!
//! **A waiting reader holds memory in proportion to its bytes.** A reader about to sleep with a
//! few unconsumed bytes (a partial request) in blocks much larger than them (a 256 KiB receive
//! block holding 1 byte) copies them into one fitted pooled block, puts it in place of their
//! packets in the queue (the consumer's own published nodes: no new cross-thread step) and sends
//! the writer's parked block home as an idle reader does (when the bytes are at most 16 KiB and the
//! blocks holding them more than 4 times larger, and larger than 4 KiB). The other designs: receiving into small blocks
//! first and growing the receive size with the data would cost every large frame more system
//! calls and segments, and the writer (or the transport) cannot know whether the parser will
//! wait; copying every small frame out at once (`take_frame`'s copy threshold) already happens
//! for complete frames, and it is the incomplete one the parser leaves behind that pinned the
//! block. At the wait, the reader knows both: the bytes are incomplete and nothing else will
//! consume them soon. The copy is bounded (at most 16 KiB per wait), and reads that find their
//! bytes never pay for it.
//!
//! **What is bounded rather than prevented.** A flush racing with the reader's completion can
//! publish after the reader released everything: those bytes (at most that one flush's; every
//! later flush sees the completion and discards) stay in the queue until the reader end is dropped.
//! Handing them back would need the writer to take nodes the consumer owns.

mod blocking;
pub use blocking::block_on;
#[cfg(test)]
mod compaction_tests;
mod input;
mod local;
mod options;
mod queue;
#[cfg(test)]
mod quiet_tests;
mod read_buffer;
mod read_until;
mod reader;
mod state;
#[cfg(test)]
mod take_frame_after_tests;
pub(crate) mod transport;
pub(crate) use local::Fill;
pub(crate) use queue::TailProbe;
mod wait;
mod writer;

pub use options::{PipeOptions, DEFAULT_COPY_THRESHOLD};
pub use read_buffer::{ReadBuffer, ReadCursor, SegmentIter};
pub use read_until::{ReadUntil, ReadUntilResult};
pub use reader::{PipeReader, ReadFuture, ReadResult};
pub use state::PipeCanceler;
pub use writer::{Flush, FlushResult, PipeWriter};

use crate::sync::Arc;

/// A pipe with the default [`PipeOptions`].
pub fn pipe() -> (PipeWriter, PipeReader) {
    pipe_with(PipeOptions::default())
}

/// A reader with no writer end, to read a source itself (`PipeReader::set_source`: an inline
/// connection's input): the options' thresholds do not apply (nothing waits for it), its pool,
/// segment size and copy threshold do. `keep_idle`: it keeps its receive block while it waits.
pub(crate) fn local_reader(options: PipeOptions, keep_idle: bool) -> PipeReader {
    let state = Arc::new(state::PipeState::new(
        options.pause_threshold as u64,
        options.resume_threshold as u64,
    ));
    let pool = options.resolved_pool();
    PipeReader::new_local(
        state,
        pool,
        options.copy_threshold,
        options.segment_size(),
        keep_idle,
    )
}

/// A pipe with the given options.
pub fn pipe_with(options: PipeOptions) -> (PipeWriter, PipeReader) {
    let (producer, consumer) = queue::queue();
    let state = Arc::new(state::PipeState::new(
        options.pause_threshold as u64,
        options.resume_threshold as u64,
    ));
    let pool = options.resolved_pool();
    let writer = PipeWriter::new(
        producer,
        state.clone(),
        pool.clone(),
        options.segment_size(),
    );
    let reader = PipeReader::new(consumer, state, pool, options.copy_threshold);
    (writer, reader)
}
