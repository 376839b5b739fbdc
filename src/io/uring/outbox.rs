//! A connection's output on its way from the application's writer to the driver's sends.
//!
//! The application's writer flushes into the output pipe only when it must. A flush with nothing
//! published still unsent seals its staged bytes into one packet and hands it to the
//! connection's outbox ([`RingSink`], the writer's `Deliver`). The driver takes the outbox's
//! packets into its next send and keeps them until the send's completion: no publication, node,
//! parking or wait cell between the flush and the kernel. One uncontended lock to hand over, one
//! to take.
//!
//! Order. Bytes the writer appended as packets (or that the outbox refused) go through the pipe,
//! and the stream must stay in the writer's order:
//!
//! - **The outbox takes a packet only while every published byte has been sent.** The driver
//!   reports what it sent of the pipe (`pipe_sent`) under the lock; a hand-over compares it with
//!   the writer's published count. So a byte the pipe holds unsent was published after every
//!   packet in the outbox, and the driver sends the outbox first.
//! - **The driver looks at the pipe before the outbox.** A packet handed over before bytes the
//!   pipe's poll saw were published is in the outbox when the driver takes the lock after that
//!   poll. A packet handed over after them cannot be: the driver has not sent them. The same holds
//!   for the pipe's end: the writer completes after its last hand-over, so a driver that saw the
//!   end finds every packet before it.
//!
//! Bounds. The outbox refuses packets while it holds the output's pause threshold of unsent
//! bytes; the writer then publishes, and its flush pauses at the pipe's own threshold. A
//! connection's output stays bounded by about twice the threshold.
//!
//! Wakes. A hand-over that finds the driver waiting (`driver_waits`: it found nothing at its last
//! look) wakes the driver's waker for the connection. The driver clears `driver_waits` when it
//! starts servicing the connection, before it polls the application: every service looks at the
//! outbox after that poll unless a send is in flight (whose completion brings another service) or
//! the output has ended, so an application polled there, the usual case, hands over without
//! a wake.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::inbox::InboxHandle;
use crate::packet::Packet;
use crate::pipe::transport::Deliver;

/// The driver's side of a connection's outbox.
pub(super) struct Outbox(Arc<Shared>);

struct Shared {
    state: Mutex<State>,
    /// The driver found nothing at its last look: the next hand-over wakes it. Set by the
    /// driver under the lock, cleared by the hand-over that wakes it (under the lock) or by the
    /// driver starting a service (see the module docs).
    driver_waits: AtomicBool,
}

struct State {
    /// Handed over and not taken into a send yet, in order.
    packets: VecDeque<Packet>,
    /// Bytes handed over and not reported sent (queued, or taken into a send).
    unsent: usize,
    /// Bytes of the output pipe the driver has sent, as last reported.
    pipe_sent: u64,
    /// Unsent bytes at which hand-overs are refused (the output's pause threshold, at most
    /// 4 GiB: a connection's state stays small).
    limit: u32,
    /// The connection is gone: nothing more is taken.
    closed: bool,
}

impl Outbox {
    /// An outbox that refuses packets from `limit` unsent bytes; and the writer's sink into it,
    /// which asks the connection's `inbox` whether the reader waits holding nothing, and wakes the
    /// driver through it.
    pub(super) fn new(limit: usize, inbox: InboxHandle) -> (Outbox, RingSink) {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                packets: VecDeque::new(),
                unsent: 0,
                pipe_sent: 0,
                limit: limit.clamp(1, u32::MAX as usize) as u32,
                closed: false,
            }),
            driver_waits: AtomicBool::new(false),
        });
        (Outbox(shared.clone()), RingSink { shared, inbox })
    }

    /// The driver starts servicing the connection: a hand-over from here on need not wake it
    /// (see the module docs).
    pub(super) fn begin_service(&self) {
        if self.0.driver_waits.load(Ordering::Relaxed) {
            self.0.driver_waits.store(false, Ordering::Relaxed);
        }
    }

    /// Report `sent` more bytes of handed-over packets and `pipe_sent` bytes of the pipe sent in
    /// all, then move the handed-over packets to the back of the queue `into` gives (called only
    /// if there are any). Whether there were any; if not, the next hand-over wakes the driver.
    pub(super) fn take<'a>(
        &self,
        sent: usize,
        pipe_sent: u64,
        into: impl FnOnce() -> &'a mut VecDeque<Packet>,
    ) -> bool {
        let mut state = lock(&self.0.state);
        state.unsent -= sent;
        state.pipe_sent = pipe_sent;
        if state.packets.is_empty() {
            self.0.driver_waits.store(true, Ordering::Relaxed);
            return false;
        }
        let into = into();
        if into.is_empty() {
            std::mem::swap(into, &mut state.packets);
        } else {
            into.append(&mut state.packets);
        }
        true
    }

    /// Nothing more will be sent (a send failed, or the connection is gone): later hand-overs
    /// are refused, and what was handed over goes home.
    pub(super) fn close(&self) {
        let packets = {
            let mut state = lock(&self.0.state);
            state.closed = true;
            std::mem::take(&mut state.packets)
        };
        // Dropped outside the lock.
        drop(packets);
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        self.close();
    }
}

/// The writer's side of a connection's outbox: its `Deliver`.
pub(super) struct RingSink {
    shared: Arc<Shared>,
    inbox: InboxHandle,
}

impl Deliver for RingSink {
    fn write_now(&mut self, _bytes: &[u8], _published: u64) -> Option<usize> {
        None // a ring's send writes later: `hand_over`
    }

    fn takes_packets(&self) -> bool {
        true
    }

    fn hand_over(&mut self, packet: Packet, published: u64) -> Result<(), Packet> {
        let mut state = lock(&self.shared.state);
        if state.closed || state.pipe_sent != published || state.unsent >= state.limit as usize {
            return Err(packet);
        }
        state.unsent += packet.len();
        state.packets.push_back(packet);
        let waits = &self.shared.driver_waits;
        let wake = waits.load(Ordering::Relaxed);
        if wake {
            waits.store(false, Ordering::Relaxed);
        }
        drop(state);
        if wake {
            // Queues the connection for the driver (an application elsewhere: one on the
            // driver's thread hands over inside the service, which clears `driver_waits`).
            self.inbox.wake_driver();
        }
        Ok(())
    }

    fn reader_idle(&self) -> bool {
        // Then the writer gives its buffer back at the hand-over; else it parks it, to write the
        // next flush's bytes after these in the same block, and the driver sends it home if the
        // reader goes idle first (`inbox.rs`).
        self.inbox.reader_idle()
    }

    fn deliver(&mut self) {
        // Published bytes wake the driver through the pipe.
    }

    fn finish(&mut self) {
        // The pipe's end wakes the driver, which sends the outbox and the pipe before shutting
        // the write side down.
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}
