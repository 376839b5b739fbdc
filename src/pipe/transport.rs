//! Hooks by which a transport moves bytes inside the pipe's own calls.
//!
//! A pipe end may carry one hook, installed by the `io` layer when it builds an inline
//! connection; the pipe knows nothing of sockets:
//!
//! - the reader's [`Refill`]: when a read finds nothing beyond its examined point, the reader asks
//!   its refill to read the source into the reader's own receive block ([`Fill`]) before it
//!   waits, so the bytes arrive in the reader's own poll or call, with no task, queue or
//!   publication between;
//! - the writer's [`Deliver`]: a flush with nothing published still unwritten hands the staged
//!   bytes to the destination straight from the write buffer (no seal, no publication), or, to a
//!   destination that writes later (a ring's send), as the one packet they seal into (no
//!   publication); after a flush publishes bytes, the writer asks it to hand them to the
//!   destination at once (never waiting); on completion, to finish the destination.
//!
//! Both run on the caller's thread inside the end's `&mut self` call; neither may call back into
//! the end that holds it.

use std::task::{Context, Poll};

use super::local::Fill;
use crate::error::SharedError;
use crate::packet::Packet;

/// The reader's source of bytes: reads into the reader's own receive block.
pub(crate) trait Refill: Send + Sync {
    /// The reader has nothing beyond its examined point and needs `need` more bytes (1 for a
    /// plain read); `idle` says it holds no unconsumed byte. Read what the source has now into
    /// `into`: `Ready` once bytes were read (they are readable at once) or `into` completed (the
    /// source's end or error); `Pending` when the source has nothing now, `cx` to be woken when it
    /// has.
    fn poll_refill(
        &mut self,
        cx: &mut Context<'_>,
        need: u64,
        idle: bool,
        into: &mut Fill<'_>,
    ) -> Poll<()>;

    /// A read that must not wait ([`try_read`](super::PipeReader::try_read)) found nothing
    /// beyond its examined point: put into `into` what the source holds already, if it can
    /// without registering for a wake (a socket's readiness cannot: a registration with no
    /// one to wake would replace the reader's). Whether it put anything (or completed `into`).
    fn try_refill(&mut self, _into: &mut Fill<'_>) -> bool {
        false
    }

    /// The reader completed (by the application, with `error` if it gave one) after consuming
    /// `consumed` bytes: the source is not read again.
    fn close(&mut self, error: Option<&SharedError>, consumed: u64);
}

/// The writer's destination: takes what a flush published.
pub(crate) trait Deliver: Send + Sync {
    /// A flush is about to publish `bytes`, staged after the `published` bytes published so far:
    /// if every published byte has been written, write `bytes` to the destination now instead,
    /// without waiting, and return how many it took (the caller publishes the rest, if any).
    /// `None` when it cannot write them first (published bytes wait, the destination has ended,
    /// refused them or failed): the caller publishes them all, and `deliver` sees to them.
    fn write_now(&mut self, bytes: &[u8], published: u64) -> Option<usize>;

    /// Whether this destination takes a flush's staged bytes as a sealed packet, to write later
    /// ([`hand_over`](Self::hand_over)), instead of writing them now
    /// ([`write_now`](Self::write_now)). Asked once, when the hook is installed.
    fn takes_packets(&self) -> bool {
        false
    }

    /// A flush is about to publish `packet` (the write buffer's bytes sealed), staged after the
    /// `published` bytes published so far: if every published byte has been written, take it, to
    /// be written after the packets taken before it. `Err(packet)` when it cannot (published bytes
    /// wait, the destination holds as much as it may, or has ended): the caller publishes it.
    fn hand_over(&mut self, packet: Packet, _published: u64) -> Result<(), Packet> {
        Err(packet)
    }

    /// Whether the other direction waits with nothing unconsumed (an idle connection): a write
    /// buffer whose bytes all went out is then given back rather than kept for the next flush.
    fn reader_idle(&self) -> bool;

    /// A flush published bytes: write what the destination takes now, without waiting.
    fn deliver(&mut self);

    /// The writer completed: the rest is written and the destination finished by whoever drives
    /// it.
    fn finish(&mut self);
}
