//! Settings of a pipe.

use crate::pool::Pool;

/// Settings for [`pipe_with`](crate::pipe::pipe_with): plain data, built with struct update
/// syntax from the defaults (so code that names a few fields keeps compiling when fields are
/// added).
///
/// ```
/// use packetpipe::{pipe_with, PipeOptions};
///
/// let (writer, reader) = pipe_with(PipeOptions {
///     pause_threshold: 1 << 20,
///     resume_threshold: 512 << 10,
///     min_segment_size: 16 * 1024,
///     copy_threshold: 1024,
///     ..Default::default()
/// });
/// # drop((writer, reader));
/// ```
///
/// The defaults: pause at 64 KiB, resume below 32 KiB, 4 KiB segments, copy frames up to 2 KiB,
/// the global pool.
#[derive(Clone, Debug)]
pub struct PipeOptions {
    /// A flush waits while this many flushed bytes or more are unexamined by the reader. 0
    /// disables backpressure. Default 64 KiB.
    pub pause_threshold: usize,
    /// A paused flush resumes once unexamined bytes drop below this. Values above the pause
    /// threshold are treated as equal to it; 0 is treated as 1 (resume once every flushed byte
    /// has been examined). Default 32 KiB.
    pub resume_threshold: usize,
    /// Size of the pooled buffers the writer rents for [`spare_mut`](crate::PipeWriter::spare_mut)
    /// and [`write_slice`](crate::PipeWriter::write_slice) (0 is treated as 1). Default 4 KiB.
    ///
    /// A write of a segment or more gets a block of its own size; writes of a quarter of a
    /// segment or less share segment-sized blocks. In between, the writer rents a segment or the
    /// smallest multiple of the write's size that is at least a segment, whichever a run of such
    /// writes would leave less of unused. The pool rounds each up to its size class (at most 25%
    /// more, see [`Pool`](crate::Pool#size-classes)).
    pub min_segment_size: usize,
    /// [`take_frame`](crate::PipeReader::take_frame) copies frames of at most this many bytes (so
    /// a small frame does not pin a large block: into the packet value, a block small copies
    /// share, or a fitted buffer) and shares larger frames without copying. Default
    /// [`DEFAULT_COPY_THRESHOLD`].
    pub copy_threshold: usize,
    /// The pool the writer rents from and `take_frame` copies into; `None` (the default) is the
    /// global pool, [`Pool::global`], looked up when the pipe is made (building the options
    /// touches no pool).
    pub pool: Option<Pool>,
}

/// Default `take_frame` copy threshold: frames up to this size are copied out (see
/// [`PipeReader::take_frame`](super::PipeReader::take_frame)),
/// larger ones shared.
///
/// This is a memory choice, not a speed crossover: `benches/pipe.rs` (`take_frame`, BENCHMARKS.md)
/// measured sharing faster than copying at every size, because sharing here costs one reference
/// count and no allocation (the .NET system paid 128 B per shared slice, which is why copying won
/// there below 2-4 KiB). Copying stays within about 2x of sharing up to 2 KiB and grows with size
/// beyond; 2 KiB is half the default segment, so a shared frame pins at most about twice its size.
pub const DEFAULT_COPY_THRESHOLD: usize = 2048;

impl Default for PipeOptions {
    fn default() -> PipeOptions {
        PipeOptions {
            pause_threshold: 64 * 1024,
            resume_threshold: 32 * 1024,
            min_segment_size: 4096,
            copy_threshold: DEFAULT_COPY_THRESHOLD,
            pool: None,
        }
    }
}

impl PipeOptions {
    pub(crate) fn resolved_pool(&self) -> Pool {
        match &self.pool {
            Some(pool) => pool.clone(),
            #[cfg(not(packetpipe_loom))]
            None => Pool::global().clone(),
            #[cfg(packetpipe_loom)]
            None => Pool::new(),
        }
    }

    /// The segment size the writer and a local reader use (at least 1).
    #[inline]
    pub(crate) fn segment_size(&self) -> usize {
        self.min_segment_size.max(1)
    }
}
