//! Pipes set up the way several tests need them.

use packetpipe::pipe::{pipe_with, PipeOptions, PipeReader, PipeWriter};
use packetpipe::Pool;

/// A pipe on its own pool whose backpressure never triggers for one frame at a time (the pause
/// threshold stays enabled, at 1 MiB), so that what a test counts is the pool's alone.
pub fn unpaused_pipe(pool: &Pool) -> (PipeWriter, PipeReader) {
    pipe_with(PipeOptions {
        pool: Some(pool.clone()),
        pause_threshold: 1 << 20,
        resume_threshold: 1 << 19,
        ..Default::default()
    })
}
