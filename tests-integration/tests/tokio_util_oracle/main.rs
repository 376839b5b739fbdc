//! tokio-util 0.7's own codec tests as the oracle for `packetpipe::frame`: what
//! `tokio-util/tests/{length_delimited,codecs,framed_read,framed_write,framed}.rs` assert, said in
//! this crate's words, over a pipe. One module per file; each test is named after the tokio-util
//! test it mirrors (or says which in a comment), and each module's header lists the tests that
//! this API cannot express, with why.
//!
//! How a tokio-util mock becomes a pipe:
//! - each `Ok(chunk)` / `data(chunk)` a mock reader returns is one write + flush into the pipe
//!   (every read test runs twice: with `write_slice`, where consecutive flushes into one block
//!   make one growing segment, and with `append`, one segment per chunk, so headers and
//!   delimiters also straddle segments);
//! - a mock's `Pending` (or `WouldBlock`) is a poll of the stream that must return `Pending`
//!   (nothing more has been written);
//! - the end of a mock's calls (its read returning 0 bytes) is the writer's completion;
//! - a mock's `Err(e)` is the writer completing with `e`;
//! - a codec-level `decode(buf)` returning `None` is the stream returning `Pending`, `decode_eof`
//!   is the stream after the writer's completion; a codec-level `decode` after an error is the
//!   stream after [`Frames::resume`](packetpipe::frame::Frames::resume) (a stream ends after a
//!   decoder error until resumed);
//! - a mock writer (`AsyncWrite`) is the same mock, written to by a socket writer's loop
//!   (`wire::mock::drain`, over the reader's `AsyncBufRead`) that empties the pipe a
//!   `FrameWriter` encodes into: the same writes, partial writes, `Pending`s and flushes are
//!   asserted, call by call.
//!
//! Where this crate differs from tokio-util on purpose, a test named `deviation_*` pins the
//! difference (and the codec's rustdoc says why).

mod codecs;
mod framed;
mod framed_read;
#[cfg(feature = "tokio")]
mod framed_write;
mod length_delimited;
mod wire;
