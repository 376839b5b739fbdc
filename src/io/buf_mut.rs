//! `bytes::BufMut` for the writer: `put_u32_le` and friends write straight into pooled blocks.

use bytes::buf::UninitSlice;
use bytes::BufMut;

use crate::pipe::PipeWriter;

/// Writes go into the writer's current pooled block, renting the next one (of the pipe's minimum
/// segment size) when it fills, so a value may straddle two segments; use
/// [`PipeWriter::write_slice`] to keep a run of bytes in one segment. Staged bytes are published by
/// a flush as usual.
///
/// Following `BufMut`'s convention, misuse panics instead of returning an error: once the writer has
/// completed, [`remaining_mut`](BufMut::remaining_mut) is 0 and every `put_*` panics; a pool that
/// cannot allocate panics with the allocation error. After the reader has completed, writes are
/// accepted and discarded, as with the writer's own methods.
///
/// ```
/// # use packetpipe::ByteSegments;
/// use bytes::BufMut;
///
/// let (mut writer, mut reader) = packetpipe::pipe::pipe();
/// writer.put_u32_le(7);
/// writer.put_slice(b"seven");
/// writer.flush_blocking()?;
/// assert_eq!(reader.read_blocking()?.buffer.to_vec(), b"\x07\0\0\0seven");
/// # Ok::<(), packetpipe::Error>(())
/// ```
// SAFETY: `chunk_mut` returns the writable tail `spare_mut` hands out (initialized memory of a
// pooled block, or the discard scratch), never empty; `advance_mut(cnt)` commits through `advance`,
// which refuses (and here panics) any `cnt` beyond that tail, so only bytes inside the last chunk
// handed out are ever reported written. `remaining_mut` is 0 exactly when no chunk can be handed out.
unsafe impl BufMut for PipeWriter {
    #[inline]
    fn remaining_mut(&self) -> usize {
        if self.is_writer_completed() {
            0
        } else {
            // Unbounded, like `Vec`: each chunk is a pooled block, renting the next as needed.
            isize::MAX as usize
        }
    }

    #[inline]
    unsafe fn advance_mut(&mut self, cnt: usize) {
        if let Err(e) = self.commit(cnt) {
            panic!("{e}");
        }
    }

    #[inline]
    fn chunk_mut(&mut self) -> &mut UninitSlice {
        match self.spare_mut(1) {
            Ok(space) => UninitSlice::new(space),
            Err(e) => panic!("{e}"),
        }
    }
}
