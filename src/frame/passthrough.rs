//! `Passthrough`: the bytes as they arrive, one segment per frame, as tokio-util's `BytesCodec`.

use bytes::{Bytes, BytesMut};

use super::{DecodeBuf, Decoded, Decoder, Encoder, FrameError};
use crate::pipe::PipeWriter;
use crate::{Packet, PacketChain};

/// No framing: each frame is the bytes that arrived, as tokio-util's `BytesCodec`, without copying.
///
/// Decoding takes the first segment of the pipe as it is, shared (never copied, whatever its
/// size), so a stream of frames is the stream of segments the writer published: what one flush
/// (or one read of a fill pump) brought, or several such that follow each other in one block. A
/// decode never waits for more than one byte, and the end of the stream is never an error.
/// Decoding yields [`Packet`]s, sharing the writer's pooled blocks: keeping a small one keeps its
/// block alive (use a framing decoder, which copies small frames out, where that matters).
///
/// Encoding appends the payload zero-copy ([`Packet`], [`Bytes`], [`BytesMut`],
/// [`PacketChain`]) or copies it in (`&[u8]`).
///
/// tokio-util's `FramedRead<_, BytesCodec>` yields what each read of its 8 KiB buffer brought; the
/// same bytes come out here, cut where the pipe's segments are cut rather than where the reads
/// were (`tests-integration/tests/frame_differential.rs` compares the two).
///
/// ```
/// use packetpipe::frame::{FrameWriter, Frames, Passthrough};
///
/// let (writer, reader) = packetpipe::pipe();
/// let mut out = FrameWriter::new(writer, Passthrough);
/// packetpipe::block_on(out.send(packetpipe::Packet::from_static(b"hello ")))?; // appended zero-copy
/// packetpipe::block_on(out.send(packetpipe::Packet::from_static(b"world")))?;
/// out.into_inner().complete();
///
/// let chunks: Vec<_> = Frames::new(reader, Passthrough).iter_blocking().collect::<Result<_, _>>()?;
/// assert_eq!(chunks, [&b"hello "[..], &b"world"[..]]); // as the writer published them
/// # Ok::<(), packetpipe::frame::FrameError>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Passthrough;

impl Decoder for Passthrough {
    type Item = Packet;
    type Error = FrameError;

    #[inline]
    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Decoded<Packet>, FrameError> {
        let n = buf.buffer().first_chunk().len();
        if n == 0 {
            return Ok(Decoded::NeedAtLeast(1));
        }
        // The first segment whole: the queue's own packet moves out, no copy, no allocation (a
        // chain holds one packet inline).
        let mut chain = buf.take_frame_chain(n)?;
        Ok(Decoded::Frame(chain.pop_front().unwrap_or_default()))
    }
}

/// Appends the packet, zero-copy.
impl Encoder<Packet> for Passthrough {
    type Error = FrameError;

    fn encode(&mut self, payload: Packet, dst: &mut PipeWriter) -> Result<(), FrameError> {
        Ok(dst.append(payload)?)
    }
}

/// Appends the bytes, zero-copy.
impl Encoder<Bytes> for Passthrough {
    type Error = FrameError;

    fn encode(&mut self, payload: Bytes, dst: &mut PipeWriter) -> Result<(), FrameError> {
        Ok(dst.append(payload)?)
    }
}

/// Appends the bytes, zero-copy (frozen into [`Bytes`]).
impl Encoder<BytesMut> for Passthrough {
    type Error = FrameError;

    fn encode(&mut self, payload: BytesMut, dst: &mut PipeWriter) -> Result<(), FrameError> {
        Ok(dst.append(payload)?)
    }
}

/// Appends each packet of the chain, zero-copy.
impl Encoder<PacketChain> for Passthrough {
    type Error = FrameError;

    fn encode(&mut self, mut payload: PacketChain, dst: &mut PipeWriter) -> Result<(), FrameError> {
        while let Some(packet) = payload.pop_front() {
            dst.append(packet)?;
        }
        Ok(())
    }
}

/// Copies the bytes into the writer's pooled block.
impl Encoder<&[u8]> for Passthrough {
    type Error = FrameError;

    fn encode(&mut self, payload: &[u8], dst: &mut PipeWriter) -> Result<(), FrameError> {
        Ok(dst.write_slice(payload)?)
    }
}
