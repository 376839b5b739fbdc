//! The pipe: one writer, one reader, a chain of pooled segments between them.
//!
//! ```
//! use packetpipe::pipe::pipe;
//!
//! let (mut writer, mut reader) = pipe();
//! let producer = std::thread::spawn(move || -> Result<(), packetpipe::Error> {
//!     for i in 0..100u32 {
//!         writer.write(&i.to_be_bytes())?;
//!         writer.flush_blocking()?;
//!     }
//!     Ok(()) // dropping the writer completes it
//! });
//! let mut sum = 0u64;
//! loop {
//!     let result = reader.read_blocking()?;
//!     let mut cursor = result.buffer().cursor();
//!     let whole = result.buffer().len() / 4 * 4;
//!     for _ in 0..whole / 4 {
//!         sum += u64::from(bytes::Buf::get_u32(&mut cursor));
//!     }
//!     let (len, done) = (result.buffer().len(), result.is_completed());
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
//! See [`PipeWriter`] and [`PipeReader`] for the two ends, and the crate's `concurrency` notes in
//! `src/pipe/state.rs` and `src/pipe/wait.rs` for who writes which field and who wakes whom.

mod blocking;
mod options;
mod queue;
mod read_buffer;
mod reader;
mod state;
mod wait;
mod writer;

pub use options::{PipeOptions, DEFAULT_COPY_THRESHOLD};
pub use read_buffer::{Chunks, ReadBuffer, ReadCursor};
pub use reader::{PipeReader, Read, ReadResult};
pub use state::PipeCanceler;
pub use writer::{Flush, FlushResult, PipeWriter};

use crate::sync::Arc;

/// A pipe with the default [`PipeOptions`].
pub fn pipe() -> (PipeWriter, PipeReader) {
    pipe_with(PipeOptions::default())
}

/// A pipe with the given options.
pub fn pipe_with(options: PipeOptions) -> (PipeWriter, PipeReader) {
    let (producer, consumer) = queue::queue();
    let state = Arc::new(state::PipeState::new(options.pause_threshold, options.resume_threshold));
    let pool = options.resolved_pool();
    let writer = PipeWriter::new(producer, state.clone(), pool.clone(), options.min_segment_size);
    let reader = PipeReader::new(consumer, state, pool, options.copy_threshold);
    (writer, reader)
}
