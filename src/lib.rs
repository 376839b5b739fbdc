//! # packetpipe
//!
//! A single-producer/single-consumer byte pipe for the space between a socket and a parser, built
//! on pooled, reference-counted packets.
//!
//! - [`pipe`](mod@pipe): `pipe()` -> ([`PipeWriter`], [`PipeReader`]):
//!   append packets or write into pooled buffers, flush with backpressure, read the flushed bytes
//!   as a chain of segments, advance by byte counts, take frames out; async and blocking forms.
//! - [`Pool`]: size-classed buffer pool with per-thread caches and a shared depot; one thread can
//!   rent while another returns with no lock and no fresh allocation in steady state.
//! - [`PacketBuf`]: a writable pooled buffer ([`bytes::BufMut`]) that seals its written bytes into
//!   [`Packet`]s while its tail stays writable.
//! - [`Packet`]: the one immutable packet type, over pooled blocks, [`bytes::Bytes`] and static
//!   slices; clone and slice never allocate (a pooled one costs one atomic increment, and the
//!   last drop returns its block); [`PacketChain`] for several packets read as one.
//! - [`io`]: the pipe's ends as std, `bytes`, tokio and futures-io I/O types; pumps between a
//!   pipe and a socket; a duplex connection (one socket, two pipes, one future).
//! - [`ByteSegments`]: helpers over segmented data (copy out, hex dump, lossy UTF-8, search from an
//!   offset, integers peeked in place).
//! - [`frame`]: decoders over the segment chain as a [`futures_core::Stream`] ([`frame::Frames`]),
//!   encoders that append payloads zero-copy ([`frame::FrameWriter`]); length-delimited, delimited
//!   (one sequence or any byte of a set), lines and passthrough, behaving as tokio-util's codecs.
//!
//! ```
//! use bytes::BufMut;
//! use packetpipe::{ByteSegments, PacketChain, Pool};
//!
//! let pool = Pool::new();
//! let mut buf = pool.rent(4096)?;
//! buf.put_slice(b"hello ");
//! let hello = buf.seal();               // immutable, shares the block
//! buf.put_slice(b"world");
//! let world = buf.seal();               // same block, next bytes
//!
//! let chain: PacketChain = [hello, world].into_iter().collect();
//! assert_eq!(chain.display_lossy().to_string(), "hello world");
//! drop((buf, chain));
//! assert_eq!(pool.stats().outstanding, 0); // every block went home
//! # Ok::<(), packetpipe::Error>(())
//! ```
//!
//! # Packets
//!
//! - [`PacketBuf`]: the unique writable handle to a pooled block; seals into [`Packet`]s.
//! - [`Packet`]: the one immutable packet type, which the pipe accepts and hands out, over
//!   pooled blocks, [`bytes::Bytes`], static slices, and a few bytes held in the value itself;
//!   slicing never allocates for any of them. A pooled packet that is the only handle to its
//!   block can be changed in place ([`Packet::get_mut`], [`Packet::prepend`] into its
//!   [`headroom`](Packet::headroom)).
//! - [`PacketChain`]: several packets read as one, with a cached total length.
//!
//! Bounds conventions: slicing and splitting (`slice`, `split_to`, `split_off`, `Buf::advance`)
//! follow std and `bytes`: out of bounds is a bug in the caller, and they panic with a message
//! naming the numbers. Operations whose success depends on the state of the buffer or on input
//! (`prepend`, `commit`, `extend_from_slice`, [`ByteSegments::copy_prefix_to`]) return a
//! `Result` whose [`Error`] names the numbers.
//!
//! # Where to go next
//!
//! The [`pipe`](mod@pipe) module page explains the two ends and the concurrency design; [`io`] connects
//! them to sockets (and says which transport to choose); [`frame`] turns the segment chain into
//! frames. [`Pool`] explains size classes, thread caches and leak reports.
#![deny(missing_docs)]
#![deny(missing_debug_implementations)]
#![warn(clippy::undocumented_unsafe_blocks)]
// docs.rs (`--cfg docsrs`, nightly): a badge on every item that needs a feature, worked out from
// its `#[cfg]` (`doc_cfg` does that by itself since the `doc_auto_cfg` feature was folded into it).
#![cfg_attr(docsrs, feature(doc_cfg))]

mod block;
mod error;
pub mod frame;
pub mod io;
mod packet;
pub mod pipe;
mod pool;
mod segments;
mod sync;

pub use error::{Error, Operation, SharedError, Side};
pub use packet::{ChainIter, Packet, PacketBuf, PacketChain};
pub use pipe::{block_on, pipe, pipe_with, PipeOptions, PipeReader, PipeWriter};
pub use pool::{BlockUse, LeakReport, OutstandingBlock, Pool, PoolOptions, PoolStats};
#[doc(hidden)]
pub use pool::{PoolMonitor, PoolProbe};
pub use segments::{ByteSegments, HexDump, PeekInt, Utf8Lossy};

/// The README's examples, compiled and run as doctests (they use the `tokio` feature).
#[cfg(all(doctest, feature = "tokio"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
