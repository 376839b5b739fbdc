//! Reference counting of pooled blocks, checked against a model.
//!
//! Random sequences of operations over `PacketBuf`, pooled `Packet`, `Packet` (pooled, `Bytes` from
//! a `Vec`, from a `BytesMut`, from a pooled packet, and static) and `PacketChain`, on one thread
//! and with packets sent to worker threads that use and drop them. After every operation each
//! object's bytes must equal its model (a `Vec<u8>`); where the model knows every handle to a block
//! it also predicts `is_unique`, `get_mut` and `prepend` exactly. After each case every block must
//! be back: `outstanding == 0` and `rents == returns` exactly (a block returned twice would make
//! `returns > rents`), and after a trim every allocated block was freed once.
//!
//! `PROPTEST_CASES` sets the number of cases (default 256 per test).

use std::sync::{mpsc, Arc, Mutex};
use std::thread;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use packetpipe::{ByteSegments, Error, Packet, PacketBuf, PacketChain, Pool};
use proptest::prelude::*;
use proptest::sample::Index;

static STATIC: &[u8] = b"static bytes 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKL";

/// The largest pooled class of the pools under test; larger requests are plain allocations.
const MAX_CLASS: usize = 4096;

mod blocks;
use blocks::*;
mod objects;
use objects::*;
mod operations;
use operations::*;
mod chain;
mod runner_ops;
mod scenarios;
