//! Leak tracking ([`PoolOptions::track_leaks`](super::PoolOptions::track_leaks)): for each block
//! a pool has out, where it was rented, where it was last sealed, sliced or taken, and since when,
//! in a side table of the pool's shared state (Netty's `ResourceLeakDetector` in its paranoid
//! level: every block, every time).
//!
//! The table is keyed by block address, so the block itself carries nothing. Only a tracked pool
//! has one: its rents and returns bypass the thread caches (whose fast paths would not see them)
//! and take the table's lock, and the public operations that seal, slice or take a pooled packet
//! look up whether its pool has a table (`note_use`), one load and a branch when it has none.

use std::collections::HashMap;
use std::fmt;
use std::panic::Location;
use std::time::{Duration, Instant};

use super::Window;
use crate::sync::{lock, Mutex};

/// What a packet's block was last used for, as [`OutstandingBlock::last_use`] records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BlockUse {
    /// Written bytes sealed into a packet ([`PacketBuf::seal`](crate::PacketBuf::seal),
    /// [`freeze`](crate::PacketBuf::freeze)).
    Sealed,
    /// A packet of it sliced or split ([`Packet::slice`](crate::Packet::slice), `split_to`,
    /// `split_off`).
    Sliced,
    /// Taken out of a pipe as a frame, sharing the block
    /// ([`PipeReader::take_frame`](crate::pipe::PipeReader::take_frame) and its kin; a frame
    /// copied out is a block of its own, rented at the take).
    Taken,
}

impl fmt::Display for BlockUse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BlockUse::Sealed => "sealed",
            BlockUse::Sliced => "sliced",
            BlockUse::Taken => "taken",
        })
    }
}

/// A block a tracked pool has out: rented and not yet returned (some packet, buffer or
/// [`Bytes`](bytes::Bytes) made from one still holds it, or was forgotten without being dropped).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutstandingBlock {
    /// Payload bytes of the block.
    pub capacity: usize,
    /// Where it was rented: the caller of [`Pool::rent`](crate::Pool::rent) (or of what rented
    /// for it: `copy_from_slice`, a `take_frame` that copied the frame out, a pipe writer's write).
    pub rented_at: &'static Location<'static>,
    /// What it was last used for, and where.
    pub last_use: Option<(BlockUse, &'static Location<'static>)>,
    /// Time since it was rented.
    pub age: Duration,
}

/// The blocks a pool has out, oldest first, with where each was rented and last used
/// ([`Pool::leak_report`](crate::Pool::leak_report)). Its `Display` is one line per block.
///
/// ```
/// use packetpipe::{Pool, PoolOptions};
///
/// let pool = Pool::with_options(PoolOptions { track_leaks: true, ..PoolOptions::default() })?;
/// let rent_line = line!() + 1;
/// let packet = pool.copy_from_slice(b"never dropped")?;
/// std::mem::forget(packet); // the leak
///
/// let report = pool.leak_report();
/// assert!(report.tracking);
/// assert_eq!(report.blocks.len(), 1);
/// let block = &report.blocks[0];
/// assert_eq!((block.rented_at.file(), block.rented_at.line()), (file!(), rent_line));
/// assert!(report.to_string().starts_with("1 block of the pool outstanding (64 bytes):\n  64 bytes, rented"));
/// # Ok::<(), packetpipe::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeakReport {
    /// Whether the pool tracks its blocks ([`PoolOptions::track_leaks`](super::PoolOptions::track_leaks));
    /// when not, the report is empty.
    pub tracking: bool,
    /// The blocks out, oldest first.
    pub blocks: Vec<OutstandingBlock>,
}

impl fmt::Display for LeakReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.tracking {
            return f.write_str(
                "leak tracking is off for this pool (PoolOptions::track_leaks turns it on)\n",
            );
        }
        let bytes: usize = self.blocks.iter().map(|b| b.capacity).sum();
        let n = self.blocks.len();
        writeln!(
            f,
            "{n} block{} of the pool outstanding ({bytes} bytes){}",
            if n == 1 { "" } else { "s" },
            if n == 0 { "" } else { ":" }
        )?;
        for block in &self.blocks {
            write!(
                f,
                "  {} bytes, rented {:.3?} ago at {}",
                block.capacity, block.age, block.rented_at
            )?;
            if let Some((use_, at)) = block.last_use {
                write!(f, ", last {use_} at {at}")?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// The side table of a tracked pool.
pub(crate) struct LeakTable {
    blocks: Mutex<HashMap<usize, Record>>,
}

struct Record {
    capacity: usize,
    rented_at: &'static Location<'static>,
    since: Instant,
    last_use: Option<(BlockUse, &'static Location<'static>)>,
}

impl LeakTable {
    pub(crate) fn new() -> LeakTable {
        LeakTable {
            blocks: Mutex::new(HashMap::new()),
        }
    }

    /// The block at `addr` was rented at `site`.
    pub(crate) fn rented(&self, addr: usize, capacity: usize, site: &'static Location<'static>) {
        let record = Record {
            capacity,
            rented_at: site,
            since: Instant::now(),
            last_use: None,
        };
        lock(&self.blocks).insert(addr, record);
    }

    /// The block at `addr` was used at `site`.
    fn used(&self, addr: usize, use_: BlockUse, site: &'static Location<'static>) {
        if let Some(record) = lock(&self.blocks).get_mut(&addr) {
            record.last_use = Some((use_, site));
        }
    }

    /// The block at `addr` came back.
    pub(crate) fn returned(&self, addr: usize) {
        lock(&self.blocks).remove(&addr);
    }

    pub(crate) fn report(&self) -> LeakReport {
        let now = Instant::now();
        let mut blocks: Vec<(Instant, OutstandingBlock)> = lock(&self.blocks)
            .values()
            .map(|record| {
                let block = OutstandingBlock {
                    capacity: record.capacity,
                    rented_at: record.rented_at,
                    last_use: record.last_use,
                    age: now.saturating_duration_since(record.since),
                };
                (record.since, block)
            })
            .collect();
        blocks.sort_by_key(|(since, _)| *since);
        LeakReport {
            tracking: true,
            blocks: blocks.into_iter().map(|(_, block)| block).collect(),
        }
    }
}

/// The report of a pool that does not track.
pub(crate) fn untracked() -> LeakReport {
    LeakReport {
        tracking: false,
        blocks: Vec::new(),
    }
}

/// Record that `window`'s block was used at `site`, if its pool tracks leaks: on the public
/// operations that seal, slice or take a packet, where an untracked pool costs one load of the
/// pool's table pointer and a branch.
#[inline(always)]
pub(crate) fn note_use(window: &Window, use_: BlockUse, site: &'static Location<'static>) {
    if let Some(table) = window.pool().leaks.as_deref() {
        note_use_slow(table, window.block_addr(), use_, site);
    }
}

#[cold]
#[inline(never)]
fn note_use_slow(table: &LeakTable, addr: usize, use_: BlockUse, site: &'static Location<'static>) {
    table.used(addr, use_, site);
}
