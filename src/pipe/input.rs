//! Where a reader's bytes are: the queue a writer publishes into from any thread, or the
//! reader's own segments when it reads its source itself (`local.rs`). One set of operations
//! over both, so the reader, its buffers and its frames do not tell them apart.

use super::local::Local;
use super::queue::{self, Consumer};
use crate::packet::Packet;

/// A reader's bytes.
pub(crate) enum Input {
    /// Published by a [`PipeWriter`](super::PipeWriter), possibly on another thread.
    Shared(Consumer),
    /// Read by the reader itself from its source (an inline connection). Boxed: the readers of
    /// shared pipes (two per io_uring connection, say) stay the size of the queue's consumer.
    Local(Box<Local>),
}

impl Input {
    /// Make newly published bytes readable: the writer's flags (`DONE`, `FAILED`), then the
    /// consumed and the readable byte counts, a read's whole look at its input in one dispatch.
    #[inline]
    pub(crate) fn refresh_counts(&mut self) -> (u64, u64, u64) {
        match self {
            Input::Shared(queue) => {
                let flags = queue.refresh();
                (flags, queue.consumed(), queue.available())
            }
            Input::Local(local) => (local.flags(), local.consumed(), local.available()),
        }
    }

    /// Bytes published so far (consumed or not), without making them readable.
    #[inline]
    pub(crate) fn published_bytes(&self) -> u64 {
        match self {
            Input::Shared(queue) => queue.published_bytes(),
            Input::Local(local) => local.consumed() + local.available(),
        }
    }

    #[inline]
    pub(crate) fn consumed(&self) -> u64 {
        match self {
            Input::Shared(queue) => queue.consumed(),
            Input::Local(local) => local.consumed(),
        }
    }

    #[inline]
    pub(crate) fn available(&self) -> u64 {
        match self {
            Input::Shared(queue) => queue.available(),
            Input::Local(local) => local.available(),
        }
    }

    /// The readable packets, front to back (none empty).
    #[inline]
    pub(crate) fn packets(&self) -> Packets<'_> {
        match self {
            Input::Shared(queue) => Packets::Shared(queue.packets()),
            Input::Local(local) => Packets::Local(local.packets()),
        }
    }

    #[inline]
    pub(crate) fn front_holding(&self, n: usize) -> Option<&Packet> {
        match self {
            Input::Shared(queue) => queue.front_holding(n),
            Input::Local(local) => local.front_holding(n),
        }
    }

    #[inline(always)]
    pub(crate) fn consume_in_front(&mut self, n: u64) {
        match self {
            Input::Shared(queue) => queue.consume_in_front(n),
            Input::Local(local) => local.consume_in_front(n),
        }
    }

    #[inline]
    pub(crate) fn consume(&mut self, n: u64) {
        match self {
            Input::Shared(queue) => queue.consume(n),
            Input::Local(local) => local.consume(n),
        }
    }

    #[inline]
    pub(crate) fn take(&mut self, n: u64, sink: impl FnMut(Packet)) {
        match self {
            Input::Shared(queue) => queue.take(n, sink),
            Input::Local(local) => local.take(n, sink),
        }
    }

    pub(crate) fn replace_available(&mut self, packet: Packet) {
        match self {
            Input::Shared(queue) => queue.replace_available(packet),
            Input::Local(local) => local.replace_available(packet),
        }
    }

    /// The reader is about to wait: the writer's parked block (or the reader's own receive
    /// block) goes home; whether the last segment may still grow.
    #[inline]
    pub(crate) fn release_parked_tail(&mut self) -> bool {
        match self {
            Input::Shared(queue) => queue.release_parked_tail(),
            Input::Local(local) => local.release_parked_tail(),
        }
    }

    pub(crate) fn close(&mut self) {
        match self {
            Input::Shared(queue) => queue.close(),
            Input::Local(local) => local.close(),
        }
    }
}

/// Iterator over a reader's readable packets.
#[derive(Clone)]
pub(crate) enum Packets<'a> {
    Shared(queue::Packets<'a>),
    Local(std::collections::vec_deque::Iter<'a, Packet>),
}

impl<'a> Iterator for Packets<'a> {
    type Item = &'a Packet;

    #[inline]
    fn next(&mut self) -> Option<&'a Packet> {
        match self {
            Packets::Shared(packets) => packets.next(),
            Packets::Local(packets) => packets.next(),
        }
    }
}
