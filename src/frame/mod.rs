//! Frames over the pipe: decoders that split the segment chain into frames as a
//! [`Stream`](futures_core::Stream), and encoders that write headers and append payloads zero-copy.
//!
//! - [`Decoder`]: sees the unconsumed bytes as a [`DecodeBuf`] (segments, never forced contiguous)
//!   and answers a frame (taken out with the pipe's copy-small / share-large rule, or built into the
//!   decoder's own type), [`Decoded::NeedAtLeast(n)`](Decoded::NeedAtLeast), or an error.
//! - [`Frames`]: drives a decoder over a [`PipeReader`](crate::pipe::PipeReader); a
//!   [`futures_core::Stream`] and a blocking iterator ([`iter_blocking`](Frames::iter_blocking)); its own [`next`](Frames::next) future
//!   inlines the decode step into the awaiting task. While a frame is incomplete it waits with
//!   [`read_at_least(n)`](crate::pipe::PipeReader::read_at_least): the writer's backpressure is
//!   lifted for the frame, and the reader wakes once when the n bytes are there, not once per
//!   segment. [`into_inner`](Frames::into_inner) gives the reader back, every unconsumed byte intact.
//!   A decoder ends the stream after a frame with [`DecodeBuf::end_stream`] (a request that closes
//!   the connection), and hands a parser one slice with [`DecodeBuf::contiguous`].
//! - [`Encoder`] and [`FrameWriter`]: stage frames in a [`PipeWriter`](crate::pipe::PipeWriter)
//!   (`feed`), send one with a flush (`send`), many with one flush (`feed`... then `flush`, or
//!   `forward` for a stream). Thread-based code runs these futures with [`crate::block_on`].
//! - Built in, behaving as tokio-util's codecs on the same input (same frames, same errors at the
//!   same point; `tests-integration/tests/frame_differential.rs` and the `frame_decoders` fuzz target check it, and
//!   `tests-integration/tests/tokio_util_*.rs` replay what tokio-util's own test suite asserts): [`LengthDelimited`]
//!   (`LengthDelimitedCodec`), [`Delimited`] (`AnyDelimiterCodec`: any byte of a set, or one
//!   sequence of bytes), [`Lines`] (`LinesCodec`) and [`Passthrough`] (`BytesCodec`, zero-copy).
//!   Where they differ from tokio-util on purpose, their docs say so and why.
//! - [`FrameError`]: bad input, with the numbers; the end of the stream inside a frame; pipe errors.
//!
//! ```
//! # fn main() -> Result<(), packetpipe::frame::FrameError> {
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use packetpipe::frame::{FrameWriter, Frames, LengthDelimited};
//!
//! let (writer, reader) = packetpipe::pipe();
//! let producer = tokio::spawn(async move {
//!     let mut out = FrameWriter::new(writer, LengthDelimited::new());
//!     let big = packetpipe::Packet::from(vec![7u8; 100_000]); // appended zero-copy
//!     out.feed(packetpipe::Packet::from_static(b"small"))?;
//!     out.send(big).await?; // both frames, one flush
//!     out.into_inner().complete();
//!     Ok::<_, packetpipe::frame::FrameError>(())
//! });
//!
//! let mut frames = Frames::new(reader, LengthDelimited::new());
//! assert_eq!(frames.next().await.unwrap()?, &b"small"[..]);
//! assert_eq!(frames.next().await.unwrap()?.len(), 100_000);
//! assert!(frames.next().await.is_none());
//! producer.await.unwrap()?;
//! # Ok(())
//! # })
//! # }
//! ```

mod decoder;
mod delimited;
mod encoder;
mod error;
mod framed;
mod frames;
mod length_delimited;
mod passthrough;

pub use decoder::{DecodeBuf, Decoded, Decoder};
pub use delimited::{Delimited, Line, Lines};
pub use encoder::{Close, Encoder, Forward, FrameWriter, SendFuture, DEFAULT_BATCH_BYTES};
pub use error::FrameError;
pub use framed::Framed;
pub use frames::{Frames, IterBlocking, Next};
pub use length_delimited::{
    Builder as LengthDelimitedBuilder, LengthDelimited, LengthDelimitedChains, LengthFieldType,
};
pub use passthrough::Passthrough;
