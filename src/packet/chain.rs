//! `PacketChain`: several packets read as one (the .NET `Next` chain).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::fmt;
use std::io::IoSlice;
use std::ops::{Deref, DerefMut};

use bytes::Buf;

use super::Packet;
use crate::error::Operation;

/// Segments kept inline before the chain spills to the heap.
const INLINE: usize = 4;

/// A sequence of packets read as one, with a cached total length.
///
/// Holds up to 4 segments without allocating, then spills to a heap deque (reused from a per-thread
/// stash of those dropped chains left behind, so a steady stream of long chains allocates nothing
/// after the first few). Empty packets are never
/// stored, so every segment has at least one byte. Implements [`Buf`] (consuming reads from the
/// front) and [`ByteSegments`](crate::ByteSegments) (`to_vec`, hex dump, lossy UTF-8 display,
/// pattern search across segment boundaries).
///
/// ```
/// use bytes::Buf;
/// use packetpipe::{ByteSegments, Packet, PacketChain};
///
/// let mut chain = PacketChain::new();
/// chain.push(Packet::from_static(b"GET / HT"));
/// chain.push(Packet::from_static(b"TP/1.1\r\n\r\n"));
/// assert_eq!(chain.len(), 18);
/// assert_eq!(chain.find(b"HTTP"), Some(6)); // found across the boundary
/// let line = chain.split_to(14);
/// assert_eq!(line.to_vec(), b"GET / HTTP/1.1");
/// assert_eq!(chain.get_u16(), 0x0d0a);
/// ```
#[derive(Clone, Default)]
pub struct PacketChain {
    segments: Segments,
    len: usize,
}

#[derive(Clone)]
enum Segments {
    Inline {
        ring: [Option<Packet>; INLINE],
        head: usize,
        count: usize,
    },
    Heap(Spilled),
}

/// Dropped chains' heap deques kept for reuse, per thread: at most this many...
const STASH_DEQUES: usize = 4;
/// ... each of at most this many segments of capacity (larger ones are freed).
const STASH_MAX_SEGMENTS: usize = 1024;

// Not the loom shim: this is a per-thread cache of empty deques, not a protocol between threads.
std::thread_local! {
    static STASH: RefCell<Vec<VecDeque<Packet>>> = const { RefCell::new(Vec::new()) };
}

/// A chain's heap storage. Dropped, its deque goes back to this thread's stash (emptied, so
/// its packets' blocks go home first); a chain that spills takes one from there before it
/// allocates. With 17 segments per 1 MiB frame in 64 KiB reads, that is the chain's three
/// allocations per frame (the deque and its two growths) saved in steady state.
struct Spilled(VecDeque<Packet>);

impl Spilled {
    fn new() -> Spilled {
        // `try_with`: during thread teardown the stash may be gone; then allocate.
        let reused = STASH
            .try_with(|stash| stash.try_borrow_mut().ok()?.pop())
            .ok()
            .flatten();
        Spilled(reused.unwrap_or_else(|| VecDeque::with_capacity(INLINE * 2)))
    }
}

impl Drop for Spilled {
    fn drop(&mut self) {
        if self.0.capacity() > STASH_MAX_SEGMENTS {
            return;
        }
        let mut deque = std::mem::take(&mut self.0);
        deque.clear(); // the packets go now, not when the deque is reused
        let _ = STASH.try_with(|stash| {
            if let Ok(mut stash) = stash.try_borrow_mut() {
                if stash.len() < STASH_DEQUES {
                    stash.push(deque);
                }
            }
        });
    }
}

impl Clone for Spilled {
    fn clone(&self) -> Spilled {
        let mut copy = Spilled::new();
        copy.extend(self.iter().cloned());
        copy
    }
}

impl Deref for Spilled {
    type Target = VecDeque<Packet>;
    fn deref(&self) -> &VecDeque<Packet> {
        &self.0
    }
}

impl DerefMut for Spilled {
    fn deref_mut(&mut self) -> &mut VecDeque<Packet> {
        &mut self.0
    }
}

impl Default for Segments {
    fn default() -> Segments {
        Segments::Inline {
            ring: Default::default(),
            head: 0,
            count: 0,
        }
    }
}

impl Segments {
    #[inline]
    fn count(&self) -> usize {
        match self {
            Segments::Inline { count, .. } => *count,
            Segments::Heap(deque) => deque.len(),
        }
    }

    #[inline]
    fn get(&self, index: usize) -> Option<&Packet> {
        match self {
            Segments::Inline { ring, head, count } => (index < *count)
                .then(|| ring[(head + index) % INLINE].as_ref())
                .flatten(),
            Segments::Heap(deque) => deque.get(index),
        }
    }

    fn front_mut(&mut self) -> Option<&mut Packet> {
        match self {
            Segments::Inline { ring, head, count } => {
                if *count == 0 {
                    None
                } else {
                    ring[*head].as_mut()
                }
            }
            Segments::Heap(deque) => deque.front_mut(),
        }
    }

    fn push_back(&mut self, packet: Packet) {
        match self {
            Segments::Inline { ring, head, count } if *count < INLINE => {
                ring[(*head + *count) % INLINE] = Some(packet);
                *count += 1;
            }
            Segments::Inline { .. } => {
                let mut deque = Spilled::new();
                while let Some(p) = self.pop_front() {
                    deque.push_back(p);
                }
                deque.push_back(packet);
                *self = Segments::Heap(deque);
            }
            Segments::Heap(deque) => deque.push_back(packet),
        }
    }

    fn push_front(&mut self, packet: Packet) {
        match self {
            Segments::Inline { ring, head, count } if *count < INLINE => {
                *head = (*head + INLINE - 1) % INLINE;
                ring[*head] = Some(packet);
                *count += 1;
            }
            Segments::Inline { .. } => {
                let mut deque = Spilled::new();
                deque.push_back(packet);
                while let Some(p) = self.pop_front() {
                    deque.push_back(p);
                }
                *self = Segments::Heap(deque);
            }
            Segments::Heap(deque) => deque.push_front(packet),
        }
    }

    fn pop_front(&mut self) -> Option<Packet> {
        match self {
            Segments::Inline { ring, head, count } => {
                if *count == 0 {
                    return None;
                }
                let packet = ring[*head].take();
                *head = (*head + 1) % INLINE;
                *count -= 1;
                packet
            }
            Segments::Heap(deque) => deque.pop_front(),
        }
    }
}

impl PacketChain {
    /// An empty chain.
    pub fn new() -> PacketChain {
        PacketChain::default()
    }

    /// Total bytes in all segments (cached, O(1)).
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the chain holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The segments, front to back (none of them empty; `iter().len()` counts them).
    #[inline]
    pub fn iter(&self) -> ChainIter<'_> {
        ChainIter {
            chain: self,
            front: 0,
            back: self.segments.count(),
        }
    }

    /// Append a packet (an empty one is dropped).
    pub fn push(&mut self, packet: impl Into<Packet>) {
        let packet = packet.into();
        if !packet.is_empty() {
            self.len += packet.len();
            self.segments.push_back(packet);
        }
    }

    /// Put a packet in front (an empty one is dropped), for example a header.
    pub fn push_front(&mut self, packet: impl Into<Packet>) {
        let packet = packet.into();
        if !packet.is_empty() {
            self.len += packet.len();
            self.segments.push_front(packet);
        }
    }

    /// Remove and return the first segment.
    pub fn pop_front(&mut self) -> Option<Packet> {
        let packet = self.segments.pop_front()?;
        self.len -= packet.len();
        Some(packet)
    }

    /// Drop every segment.
    pub fn clear(&mut self) {
        *self = PacketChain::new();
    }

    /// Take the first `at` bytes out as a chain of their own (sharing, never copying).
    ///
    /// # Panics
    ///
    /// If `at > len`, with a message naming both.
    #[track_caller]
    #[must_use = "consider Buf::advance to drop the first bytes"]
    pub fn split_to(&mut self, at: usize) -> PacketChain {
        if let Err(e) = super::check_at(Operation::SplitTo, at, self.len) {
            panic!("{e}");
        }
        let mut head = PacketChain::new();
        while head.len < at {
            let want = at - head.len;
            let front = self.segments.front_mut().expect("len counts the segments");
            if front.len() <= want {
                let packet = self.pop_front().expect("front exists");
                head.push(packet);
            } else {
                head.push(front.split_to(want));
                self.len -= want;
            }
        }
        head
    }

    /// The bytes as one packet: the segment itself when there is one, else a copy into a pooled
    /// buffer of the global pool.
    #[cfg(not(packetpipe_loom))]
    pub fn to_packet(&self) -> Result<Packet, crate::Error> {
        match self.segments.count() {
            0 => Ok(Packet::new()),
            1 => Ok(self.segments.get(0).expect("one segment").clone()),
            _ => {
                let mut buf = crate::Pool::global().rent(self.len)?;
                for segment in self.iter() {
                    buf.extend_from_slice(segment)?;
                }
                Ok(buf.freeze())
            }
        }
    }
}

impl<P: Into<Packet>> Extend<P> for PacketChain {
    fn extend<I: IntoIterator<Item = P>>(&mut self, iter: I) {
        for packet in iter {
            self.push(packet);
        }
    }
}

impl<P: Into<Packet>> FromIterator<P> for PacketChain {
    fn from_iter<I: IntoIterator<Item = P>>(iter: I) -> PacketChain {
        let mut chain = PacketChain::new();
        chain.extend(iter);
        chain
    }
}

impl From<Packet> for PacketChain {
    fn from(packet: Packet) -> PacketChain {
        let mut chain = PacketChain::new();
        chain.push(packet);
        chain
    }
}

impl fmt::Debug for PacketChain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PacketChain")
            .field("len", &self.len)
            .field("segments", &self.segments.count())
            .finish()
    }
}

impl Buf for PacketChain {
    fn remaining(&self) -> usize {
        self.len
    }

    fn chunk(&self) -> &[u8] {
        self.segments.get(0).map_or(&[], |p| p.as_slice())
    }

    fn advance(&mut self, mut cnt: usize) {
        assert!(
            cnt <= self.len,
            "cannot advance past `remaining`: {cnt} <= {}",
            self.len
        );
        while cnt > 0 {
            let front = self.segments.front_mut().expect("len counts the segments");
            if front.len() <= cnt {
                cnt -= front.len();
                self.pop_front();
            } else {
                front.advance(cnt);
                self.len -= cnt;
                cnt = 0;
            }
        }
    }

    fn chunks_vectored<'a>(&'a self, dst: &mut [IoSlice<'a>]) -> usize {
        let mut n = 0;
        for (slot, packet) in dst.iter_mut().zip(self.iter()) {
            *slot = IoSlice::new(packet.as_slice());
            n += 1;
        }
        n
    }
}

/// Equal when the bytes are, however they are split into segments.
///
/// ```
/// use packetpipe::{Packet, PacketChain};
///
/// let a: PacketChain = [&b"hel"[..], &b"lo, world"[..]].into_iter().map(Packet::from).collect();
/// let b: PacketChain = [&b"hello,"[..], &b" "[..], &b"world"[..]].into_iter().map(Packet::from).collect();
/// assert_eq!(a, b);
/// let c: PacketChain = [&b"hello, worle"[..]].into_iter().map(Packet::from).collect();
/// assert_ne!(a, c);
/// assert_ne!(a, PacketChain::new());
/// assert_eq!(PacketChain::new(), PacketChain::default());
/// ```
impl PartialEq for PacketChain {
    fn eq(&self, other: &PacketChain) -> bool {
        if self.len != other.len {
            return false;
        }
        let (mut a, mut b) = (
            self.iter().map(Packet::as_slice),
            other.iter().map(Packet::as_slice),
        );
        let (mut x, mut y): (&[u8], &[u8]) = (&[], &[]);
        loop {
            if x.is_empty() {
                match a.next() {
                    Some(next) => x = next,
                    None => return true, // equal lengths: `b` is used up too
                }
            }
            if y.is_empty() {
                y = b.next().expect("equal lengths");
            }
            let n = x.len().min(y.len());
            if x[..n] != y[..n] {
                return false;
            }
            (x, y) = (&x[n..], &y[n..]);
        }
    }
}

impl Eq for PacketChain {}

/// The segments of a [`PacketChain`], front to back ([`PacketChain::iter`]).
#[derive(Clone, Debug)]
pub struct ChainIter<'a> {
    chain: &'a PacketChain,
    front: usize,
    back: usize,
}

impl<'a> Iterator for ChainIter<'a> {
    type Item = &'a Packet;

    #[inline]
    fn next(&mut self) -> Option<&'a Packet> {
        if self.front == self.back {
            return None;
        }
        let packet = self.chain.segments.get(self.front);
        self.front += 1;
        packet
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.back - self.front;
        (n, Some(n))
    }
}

impl DoubleEndedIterator for ChainIter<'_> {
    #[inline]
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.front == self.back {
            return None;
        }
        self.back -= 1;
        self.chain.segments.get(self.back)
    }
}

impl ExactSizeIterator for ChainIter<'_> {
    #[inline]
    fn len(&self) -> usize {
        self.back - self.front
    }
}

impl std::iter::FusedIterator for ChainIter<'_> {}

impl<'a> IntoIterator for &'a PacketChain {
    type Item = &'a Packet;
    type IntoIter = ChainIter<'a>;

    fn into_iter(self) -> ChainIter<'a> {
        self.iter()
    }
}
