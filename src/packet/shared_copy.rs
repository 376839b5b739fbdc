//! Small frames copied side by side into one shared block.
//!
//! A frame copied out of a pipe into a block of its own pays a whole block for a few bytes: the
//! block's header, its rounding up to a size class, and the allocator's chunk overhead. A reader
//! that keeps many small frames (a cache's values, a table of pending requests) pays that per
//! frame. [`SharedCopies`] instead copies frames of up to [`SHARED_COPY_MAX`] bytes one after the
//! other into a block of [`SHARED_COPY_BLOCK`] bytes and seals each into its own packet: the frames
//! share the block's one header and reference count, in the habit of Netty's tiny subpages and
//! jemalloc's slabs.
//!
//! The price is pinning: a block goes home when its last frame drops, so one long-lived frame
//! keeps its whole block. The bound is one block per kept frame: at most [`SHARED_COPY_BLOCK`]
//! bytes plus a header, whatever the other frames of the block did. Frames above
//! [`SHARED_COPY_MAX`] get a fitted block of their own, so a block always holds at least
//! `SHARED_COPY_BLOCK / SHARED_COPY_MAX` frames when it fills.
//!
//! Sharing costs the hot path a little (a frame in a shared block is dropped with a
//! read-modify-write of a count others hold too; the sole holder of a fitted block drops it
//! without one), so it adapts to how frames are used: while frames are kept it shares, and when a
//! block fills with fewer than a quarter of its frames still alive (a parser that drops each frame
//! at once) the next copies get fitted blocks, with one shared block now and then to look again.
//!
//! The writable handle on the block is let go when its owner is about to wait and none of the
//! block's frames is alive ([`SharedCopies::before_wait`]): a pipe whose application kept nothing
//! holds no block while idle, and one whose frames were alive at its last wait holds at most this
//! one block until its next wait. The frames keep the block alive exactly as long as they live.

use std::panic::Location;

use crate::error::Error;
use crate::pool::{BlockUse, Pool};

use super::{Packet, PacketBuf};

/// Payload bytes of a block that small copies share.
pub(crate) const SHARED_COPY_BLOCK: usize = 1024;

/// The largest frame copied into a shared block; larger copies get a fitted block of their own.
pub(crate) const SHARED_COPY_MAX: usize = SHARED_COPY_BLOCK / 4;

/// Copies of the fitted run after a block whose frames mostly died young.
const FITTED_RUN: u8 = 240;

/// The block small copies are written into, and the references counted in advance for the packets
/// it will seal (one read-modify-write per batch of frames, as the pipe's writer does).
///
/// Sharing has a price on the hot path: the last holder of a fitted block drops it without a
/// read-modify-write, while a frame in a shared block always decrements a count others hold too.
/// A parser that drops its frames at once pays that and gains nothing, so sharing adapts: when a
/// block fills while fewer than a quarter of its frames are still alive, the next
/// [`FITTED_RUN`] copies get fitted blocks of their own, and then one block's worth is shared
/// again to look.
///
/// The counters are bytes, so that the whole is 40 bytes in every pipe reader: at most
/// `SEAL_CREDITS` (< 16) credits, at most `SHARED_COPY_BLOCK / (Packet::INLINE_CAPACITY + 1)` (26)
/// frames per block.
#[derive(Default)]
pub(crate) struct SharedCopies {
    buf: Option<PacketBuf>,
    credits: u8,
    /// Frames sealed from `buf`.
    sealed: u8,
    /// Copies still to make into fitted blocks before sharing is tried again.
    fitted_left: u8,
}

const _: () = assert!(SHARED_COPY_BLOCK / (Packet::INLINE_CAPACITY + 1) <= u8::MAX as usize);

impl SharedCopies {
    /// Whether the next small copy goes into a fitted block of its own (frames have been dying
    /// young), counting it; otherwise the caller makes it with [`copy`](Self::copy). Inlined into
    /// the take, so that a parser that drops its frames at once pays one test for all this.
    #[inline(always)]
    pub(crate) fn next_is_fitted(&mut self) -> bool {
        if self.fitted_left > 0 {
            self.fitted_left -= 1;
            true
        } else {
            false
        }
    }

    /// Copy the `n` bytes that `chunks` yields (in order, `n` in all, `0 < n <= SHARED_COPY_MAX`)
    /// into the shared block, renting a fresh one from `pool` when the current one has no room
    /// (before anything is copied: a failed rent copies nothing, and keeps the current block), or
    /// into a fitted block of their own when the block filled with its frames mostly gone. A pool
    /// that tracks leaks records the caller as a fresh block's rent site, and otherwise as the
    /// block's last use.
    #[track_caller]
    pub(crate) fn copy<'a>(
        &mut self,
        pool: &Pool,
        n: usize,
        chunks: impl Iterator<Item = &'a [u8]>,
    ) -> Result<Packet, Error> {
        debug_assert!(n > 0 && n <= SHARED_COPY_MAX);
        let fresh = !matches!(&self.buf, Some(buf) if buf.spare_len() >= n);
        if fresh {
            if let Some(buf) = &self.buf {
                if buf.sealed_alive(usize::from(self.credits)) * 4 < usize::from(self.sealed) {
                    // The full block's frames mostly died young: sharing only costs here.
                    self.release();
                    self.fitted_left = FITTED_RUN - 1;
                    return fitted(pool, n, chunks);
                }
            }
            let block = pool.rent(SHARED_COPY_BLOCK)?;
            self.release();
            self.buf = Some(block);
        }
        let buf = self.buf.as_mut().expect("a block with room for n bytes");
        for chunk in chunks {
            buf.extend_from_slice(chunk)
                .expect("checked: the block has room for n bytes");
        }
        debug_assert_eq!(buf.len(), n, "the chunks hold n bytes");
        let mut credits = usize::from(self.credits);
        let packet = Packet::from(buf.seal_with_credits(&mut credits));
        self.credits = u8::try_from(credits).expect("fewer than 16 credits");
        self.sealed += 1;
        if !fresh {
            // A fresh block's rent site is this take already.
            packet.note_use(BlockUse::Taken, Location::caller());
        }
        Ok(packet)
    }

    /// The owner is about to wait: let go of the block unless frames sealed from it are alive (they
    /// keep it anyway, so writing the next copies into it costs no memory; a connection whose
    /// application kept nothing holds no block while idle). When none is alive, the frames died
    /// young, and the next copies get fitted blocks.
    #[inline]
    pub(crate) fn before_wait(&mut self) {
        if let Some(buf) = &self.buf {
            if buf.sealed_alive(usize::from(self.credits)) > 0 {
                return;
            }
            if self.sealed > 0 {
                self.fitted_left = FITTED_RUN;
            }
            self.release();
        }
    }

    /// Let go of the shared block: its packets keep it alive for as long as they live, and it goes
    /// home with the last of them.
    #[inline]
    pub(crate) fn release(&mut self) {
        if let Some(buf) = self.buf.take() {
            buf.give_back_credits(usize::from(std::mem::take(&mut self.credits)));
        }
        self.sealed = 0;
    }

    /// Whether a block is held (a writable handle on it, not the frames' references).
    #[cfg(test)]
    pub(crate) fn holds_block(&self) -> bool {
        self.buf.is_some()
    }
}

/// The `n` bytes of `chunks` in a fitted block of their own (the caller is recorded as its rent
/// site by a pool that tracks leaks).
#[inline]
#[track_caller]
fn fitted<'a>(
    pool: &Pool,
    n: usize,
    chunks: impl Iterator<Item = &'a [u8]>,
) -> Result<Packet, Error> {
    let mut buf = pool.rent(n)?;
    for chunk in chunks {
        buf.extend_from_slice(chunk)
            .expect("rented at least n bytes");
    }
    Ok(buf.freeze_untracked().into())
}

impl Drop for SharedCopies {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the pipe's reader does with a small copy.
    fn copy(copies: &mut SharedCopies, pool: &Pool, data: &[u8]) -> Packet {
        if copies.next_is_fitted() {
            return fitted(pool, data.len(), std::iter::once(data)).unwrap();
        }
        copies
            .copy(pool, data.len(), std::iter::once(data))
            .unwrap()
    }

    #[test]
    fn frames_share_one_block_until_it_is_full() {
        let pool = Pool::new();
        let mut copies = SharedCopies::default();
        let frames: Vec<Packet> = (0..SHARED_COPY_BLOCK / 64)
            .map(|i| copy(&mut copies, &pool, &[i as u8; 64]))
            .collect();
        assert_eq!(pool.stats().outstanding, 1, "one block for all of them");
        for (i, frame) in frames.iter().enumerate() {
            assert_eq!(&frame[..], &[i as u8; 64][..]);
        }
        // Full: the next frame starts a second block.
        let next = copy(&mut copies, &pool, &[9; 64]);
        assert_eq!(pool.stats().outstanding, 2);
        drop(frames);
        assert_eq!(
            pool.stats().outstanding,
            1,
            "the first block went home with its frames"
        );
        drop(copies);
        assert_eq!(pool.stats().outstanding, 1, "the kept frame pins its block");
        drop(next);
        assert_eq!(pool.stats().outstanding, 0);
    }

    #[test]
    fn a_frame_that_does_not_fit_the_rest_starts_a_new_block() {
        let pool = Pool::new();
        let mut copies = SharedCopies::default();
        let a = copy(&mut copies, &pool, &[1; SHARED_COPY_MAX]);
        let b = copy(&mut copies, &pool, &[2; SHARED_COPY_MAX]);
        let c = copy(&mut copies, &pool, &[3; SHARED_COPY_MAX]);
        let filler = copy(&mut copies, &pool, &[4; SHARED_COPY_MAX - 1]);
        assert_eq!(pool.stats().outstanding, 1);
        let d = copy(&mut copies, &pool, &[5; 2]);
        assert_eq!(pool.stats().outstanding, 2, "2 bytes do not fit the 1 left");
        assert_eq!(&d[..], &[5, 5][..]);
        assert_eq!(&a[..], &[1; SHARED_COPY_MAX][..]);
        drop((a, b, c, filler, d, copies));
        assert_eq!(pool.stats().outstanding, 0);
    }

    #[test]
    fn frames_that_die_young_get_fitted_blocks_then_sharing_is_tried_again() {
        let pool = Pool::new();
        let mut copies = SharedCopies::default();
        let per_block = SHARED_COPY_BLOCK / 64;
        let shared = |p: &Packet| !p.as_owned().unwrap().is_unique();
        // The first block is shared; each frame dropped at once.
        for _ in 0..per_block {
            assert!(shared(&copy(&mut copies, &pool, &[1; 64])));
        }
        // It filled with none alive: the next copies are fitted, each block its frame's alone.
        for _ in 0..FITTED_RUN {
            let frame = copy(&mut copies, &pool, &[2; 64]);
            assert!(!shared(&frame), "a fitted block of its own");
            assert_eq!(&frame[..], &[2; 64][..]);
        }
        // Then sharing again, kept this time: the block fills with every frame alive, and sharing
        // goes on into the next block.
        let kept: Vec<Packet> = (0..2 * per_block)
            .map(|_| copy(&mut copies, &pool, &[3; 64]))
            .collect();
        assert!(kept.iter().all(shared));
        assert_eq!(pool.stats().outstanding, 2, "two shared blocks hold them");
        drop((kept, copies));
        assert_eq!(pool.stats().outstanding, 0);
    }

    #[test]
    fn before_a_wait_the_block_is_kept_only_while_its_frames_are_alive() {
        let pool = Pool::new();
        let mut copies = SharedCopies::default();
        let kept = copy(&mut copies, &pool, &[1; 100]);
        copies.before_wait();
        assert!(copies.holds_block(), "a kept frame holds the block anyway");
        let second = copy(&mut copies, &pool, &[2; 100]);
        assert_eq!(pool.stats().outstanding, 1, "the next copy lies beside it");
        drop((kept, second));
        copies.before_wait();
        assert!(!copies.holds_block(), "nothing alive: let go");
        assert_eq!(pool.stats().outstanding, 0);
        // Those frames died young: the next copies are fitted.
        assert!(copies.next_is_fitted());
    }

    #[test]
    fn release_lets_go_of_the_block_and_gives_back_the_credits() {
        let pool = Pool::new();
        let mut copies = SharedCopies::default();
        let frame = copy(&mut copies, &pool, b"one");
        let second = copy(&mut copies, &pool, b"two");
        assert!(copies.holds_block());
        copies.release();
        assert!(!copies.holds_block());
        drop(frame);
        assert_eq!(pool.stats().outstanding, 1);
        // The last frame returns the block: the credits were given back, or it would stay out.
        drop(second);
        assert_eq!(pool.stats().outstanding, 0);
        // The next copy rents again.
        let again = copy(&mut copies, &pool, b"three");
        assert_eq!(pool.stats().outstanding, 1);
        drop((again, copies));
        assert_eq!(pool.stats().outstanding, 0);
    }
}
