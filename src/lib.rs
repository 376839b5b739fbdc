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
//!   [`OwnedPacket`]s while its tail stays writable.
//! - [`OwnedPacket`]: an immutable window into a pooled block; clone and slice cost one atomic
//!   increment; the last drop returns the block.
//! - [`Packet`]: one type over pooled packets, [`bytes::Bytes`] and static slices, whose slicing
//!   never allocates; [`PacketChain`] for several packets read as one.
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
//! use packetpipe::{ByteSegments, Packet, PacketChain, Pool};
//!
//! let pool = Pool::new();
//! let mut buf = pool.rent(4096)?;
//! buf.put_slice(b"hello ");
//! let hello = buf.seal();               // immutable, shares the block
//! buf.put_slice(b"world");
//! let world = buf.seal();               // same block, next bytes
//!
//! let chain: PacketChain = [Packet::from(hello), Packet::from(world)].into_iter().collect();
//! assert_eq!(chain.display_lossy().to_string(), "hello world");
//! drop((buf, chain));
//! assert_eq!(pool.stats().outstanding, 0); // every block went home
//! # Ok::<(), packetpipe::Error>(())
//! ```
//!
//! # Packets
//!
//! - [`OwnedPacket`]: an immutable, reference-counted window into a pooled block.
//! - [`PacketBuf`]: the unique writable handle to a pooled block; seals into `OwnedPacket`s.
//! - [`Packet`]: the one type the pipe accepts and hands out, over pooled packets,
//!   [`bytes::Bytes`], static slices, and a few bytes held in the value itself; slicing never
//!   allocates for any of them.
//! - [`PacketChain`]: several packets read as one, with a cached total length.
//!
//! Bounds conventions: slicing and splitting (`slice`, `split_to`, `split_off`, `Buf::advance`)
//! follow std and `bytes` and panic with a message naming the numbers; each has a `try_` form that
//! returns [`Error::OutOfRange`] instead. Operations whose success depends on the state of the
//! buffer (`prepend`, `commit`, `extend_from_slice`) always return a `Result`.
//!
//! # Where to go next
//!
//! The [`pipe`](mod@pipe) module page explains the two ends and the concurrency design; [`io`] connects
//! them to sockets (and says which transport to choose); [`frame`] turns the segment chain into
//! frames. [`Pool`] explains size classes, thread caches and leak reports.
#![deny(missing_docs)]
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

pub use error::{Error, SharedError};
pub use packet::{OwnedPacket, Packet, PacketBuf, PacketChain};
pub use pipe::{block_on, pipe, pipe_with, PipeOptions, PipeReader, PipeWriter};
pub use pool::{BlockUse, LeakReport, OutstandingBlock, Pool, PoolBuilder, PoolMonitor, PoolStats};
pub use segments::{ByteSegments, HexDump, PeekInt, Utf8Lossy};

/// The README's examples, compiled and run as doctests (they use the `tokio` feature).
#[cfg(all(doctest, feature = "tokio"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
