//! A connection's received packets on their way from the driver to the application's reader.
//!
//! The application's reader owns its segments (`pipe::Local`, as an inline connection's reader
//! does): when it has nothing beyond its examined point, its source ([`RingSource`], the reader's
//! `Refill`) takes every packet the driver delivered to the connection's [`Inbox`] and makes them
//! readable at once. So the bytes cross no pipe protocol on their way from the kernel to the
//! parser: no publication, parking, wait cell or node per message; one uncontended lock to
//! deliver, one to take, and queues that trade places instead of moving packets.
//!
//! The application usually runs on the driver's thread, inside the driver's poll: then every
//! step below is a plain call on one thread, and the driver knows a waiting reader's waker as the
//! application's own (it polls the application instead of waking it). The application may also
//! have sent its reader to another thread; the lock is what makes that correct, and these rules
//! what make it live:
//!
//! - **The reader waits for what comes after its last take.** Taking (under the lock) registers
//!   the reader's waker and sets `reader_waits`; so does finding nothing. The driver, delivering
//!   packets or the end (under the lock), wakes a reader whose `reader_waits` is set and clears
//!   it. So a reader that took everything may, on its next look, find `ready` (an atomic the
//!   driver sets and the reader clears, both under the lock) false and wait without taking the
//!   lock: anything delivered after its take finds `reader_waits` set and wakes it. It does so
//!   only with the waker it registered (the same task), else it registers again under the lock.
//! - **The driver stops receiving while the reader lags.** At the input's pause threshold of
//!   delivered, untaken bytes the receive is paused ([`Receive::Paused`]); the reader, taking them,
//!   wakes the driver, which receives again once they are at or below the resume threshold. A
//!   reader holds at most what it took when it needed more, so the connection's input stays
//!   bounded by about twice the threshold.
//! - **The reader completing (or dropped) closes the inbox** and wakes the driver: nothing more is
//!   received for it, and what it did not take goes home.
//! - **A reader that waits holding nothing marks the connection idle** (`reader_idle`, which only
//!   the reader writes): the application's flushes then give their write buffer back (the
//!   outbox's `reader_idle`), and a write buffer parked before the reader went idle is sent home
//!   by the driver (the reader wakes it for that), so an idle connection holds no block.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use crate::error::SharedError;
use crate::packet::Packet;
use crate::pipe::transport::Refill;
use crate::pipe::{Fill, TailProbe};

/// What a connection's receive should do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Receive {
    /// Receive.
    Open,
    /// The reader lags: the packets it has not taken reach the pause threshold.
    Paused,
    /// The reader is gone: receive nothing more.
    Closed,
}

/// Whom a delivery wakes.
pub(super) enum WakeReader {
    /// Nobody: the reader does not wait (it will look), or there was nothing new.
    No,
    /// The application's own waker: the driver polls the application.
    App,
    /// A waker elsewhere (the reader was sent to another task or thread).
    Other(Waker),
}

/// The driver's side of a connection's inbox.
pub(super) struct Inbox(Arc<Shared>);

struct Shared {
    state: Mutex<State>,
    /// There is something to take: packets, or the end. Set by the driver and cleared by the
    /// reader, both under the lock; read by the reader without it (see the module docs).
    ready: AtomicBool,
    /// The reader waits holding no unconsumed byte (the connection is idle). Written by the
    /// reader only; read by the writer's sink and the driver (a hint for giving blocks back).
    reader_idle: AtomicBool,
}

struct State {
    /// Delivered and not taken yet, in order.
    packets: VecDeque<Packet>,
    /// Bytes in `packets`.
    bytes: usize,
    /// The input's end, once delivered: `None` inside for the peer's end, the receive's error
    /// otherwise. The reader sees it after the packets before it.
    end: Option<Option<SharedError>>,
    /// The reader completed: nothing more is delivered.
    closed: bool,
    /// The reader waits for the next delivery (see the module docs).
    reader_waits: bool,
    reader: Option<Waker>,
    /// The driver stopped receiving at the pause threshold: the reader wakes `driver` when it
    /// takes packets.
    paused: bool,
    driver: Waker,
    pause_threshold: usize,
    resume_threshold: usize,
}

impl Inbox {
    /// An inbox whose reader wakes `driver` (the driver's waker for this connection) when it
    /// takes packets the driver paused on, or closes, or goes idle while the connection's output
    /// (`output`) holds a parked write buffer; and the reader's source over it.
    pub(super) fn new(
        driver: Waker,
        output: TailProbe,
        pause_threshold: usize,
        resume_threshold: usize,
    ) -> (Inbox, RingSource) {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                packets: VecDeque::new(),
                bytes: 0,
                end: None,
                closed: false,
                reader_waits: false,
                reader: None,
                paused: false,
                driver,
                pause_threshold,
                resume_threshold,
            }),
            ready: AtomicBool::new(false),
            reader_idle: AtomicBool::new(false),
        });
        let source = RingSource {
            shared: shared.clone(),
            registered: None,
            output,
        };
        (Inbox(shared), source)
    }

    /// Whether the reader waits holding nothing (a hint: see the module docs).
    pub(super) fn reader_idle(&self) -> bool {
        self.0.reader_idle.load(Ordering::Relaxed)
    }

    /// The writer's sink's view of this inbox.
    pub(super) fn handle(&self) -> InboxHandle {
        InboxHandle(self.0.clone())
    }

    /// Deliver `arrived` (`bytes` bytes, in order, none empty; left empty) and, with `end`, the
    /// input's end after them (`Some(None)` the peer's, `Some(Some(e))` an error). What the
    /// receive should do now, and whom to wake: `app` is the application's waker.
    pub(super) fn deliver(
        &self,
        arrived: &mut VecDeque<Packet>,
        bytes: usize,
        end: Option<Option<io::Error>>,
        app: &Waker,
    ) -> (Receive, WakeReader) {
        let mut state = lock(&self.0.state);
        if state.closed {
            drop(state);
            // Nobody takes them: their blocks go home.
            arrived.clear();
            return (Receive::Closed, WakeReader::No);
        }
        if bytes > 0 {
            if state.packets.is_empty() {
                std::mem::swap(&mut state.packets, arrived);
            } else {
                state.packets.append(arrived);
            }
            state.bytes += bytes;
        }
        if let (Some(end), None) = (end, &state.end) {
            state.end = Some(end.map(SharedError::new));
        }
        let receive = state.receive();
        if state.bytes == 0 && state.end.is_none() {
            return (receive, WakeReader::No);
        }
        self.0.ready.store(true, Ordering::Release);
        if !std::mem::take(&mut state.reader_waits) {
            return (receive, WakeReader::No);
        }
        let wake = match &state.reader {
            Some(waker) if waker.will_wake(app) => WakeReader::App,
            Some(waker) => WakeReader::Other(waker.clone()),
            None => WakeReader::No,
        };
        (receive, wake)
    }

    /// Whether to receive now (after the reader took packets or closed).
    pub(super) fn receive_state(&self) -> Receive {
        lock(&self.0.state).receive()
    }
}

impl State {
    /// Paused from the pause threshold of untaken bytes until they are down to the resume
    /// threshold; closed once the reader has closed.
    fn receive(&mut self) -> Receive {
        if self.closed {
            return Receive::Closed;
        }
        self.paused = match self.paused {
            true => self.bytes > self.resume_threshold,
            false => self.bytes >= self.pause_threshold,
        };
        match self.paused {
            true => Receive::Paused,
            false => Receive::Open,
        }
    }
}

/// What the writer's sink (`outbox.rs`) needs of a connection's inbox: whether the reader waits
/// holding nothing, and the driver's waker, which the inbox keeps for the connection.
pub(super) struct InboxHandle(Arc<Shared>);

impl InboxHandle {
    /// See [`Inbox::reader_idle`].
    pub(super) fn reader_idle(&self) -> bool {
        self.0.reader_idle.load(Ordering::Relaxed)
    }

    /// Wake the driver's waker for this connection.
    pub(super) fn wake_driver(&self) {
        wake_driver(&self.0);
    }
}

/// Wake the driver's waker of `shared`'s connection (cloned under the lock, woken outside it).
fn wake_driver(shared: &Shared) {
    let driver = lock(&shared.state).driver.clone();
    driver.wake();
}

/// The reader's side of a connection's inbox: its `Refill`.
pub(super) struct RingSource {
    shared: Arc<Shared>,
    /// The waker registered under the lock by the last take or wait, while `reader_waits` may
    /// still hold for it: a look that finds nothing with this waker need not register again.
    registered: Option<Waker>,
    /// The connection's output, to see whether its writer's buffer is parked.
    output: TailProbe,
}

impl RingSource {
    /// Whether the reader waits holding nothing (`idle`), or has taken bytes. Going idle with
    /// the output's write buffer parked, it wakes the driver, which sends that block home.
    fn set_idle(&self, idle: bool) {
        if self.shared.reader_idle.load(Ordering::Relaxed) != idle {
            self.shared.reader_idle.store(idle, Ordering::Relaxed);
            if idle && self.output.parked() {
                wake_driver(&self.shared);
            }
        }
    }

    /// Take what the inbox holds into `into` (its packets, or else its end) and register `waker`
    /// for what comes after. Whether there was anything.
    fn take(&mut self, into: &mut Fill<'_>, waker: Option<&Waker>) -> bool {
        let mut guard = lock(&self.shared.state);
        let state = &mut *guard;
        let mut took = false;
        let mut driver = None;
        if state.bytes > 0 {
            into.append(&mut state.packets, std::mem::take(&mut state.bytes) as u64);
            // The driver stopped receiving for these: it may receive again.
            driver = std::mem::take(&mut state.paused).then(|| state.driver.clone());
            took = true;
        } else if let Some(end) = state.end.take() {
            // Taken once: the reader has completed its input.
            state.closed = true;
            match end {
                None => into.complete(),
                Some(error) => into.complete_with_shared(error),
            }
            took = true;
        }
        // Packets and the end may have been delivered together: the end is still there.
        self.shared
            .ready
            .store(state.end.is_some(), Ordering::Relaxed);
        match waker {
            Some(waker) if !state.closed => {
                if !state.reader.as_ref().is_some_and(|w| w.will_wake(waker)) {
                    state.reader = Some(waker.clone());
                }
                state.reader_waits = true;
                if !self.registered.as_ref().is_some_and(|w| w.will_wake(waker)) {
                    self.registered = Some(waker.clone());
                }
            }
            _ => {
                // Nothing registered from here: the next look takes the lock.
                state.reader_waits = false;
                self.registered = None;
            }
        }
        drop(guard);
        if let Some(driver) = driver {
            driver.wake();
        }
        took
    }
}

impl Refill for RingSource {
    fn poll_refill(
        &mut self,
        cx: &mut Context<'_>,
        _need: u64,
        idle: bool,
        into: &mut Fill<'_>,
    ) -> Poll<()> {
        // Nothing delivered since the last take or wait, which registered this very waker: the
        // next delivery wakes it (module docs).
        if !self.shared.ready.load(Ordering::Acquire)
            && self
                .registered
                .as_ref()
                .is_some_and(|w| w.will_wake(cx.waker()))
        {
            self.set_idle(idle);
            return Poll::Pending;
        }
        match self.take(into, Some(cx.waker())) {
            true => {
                self.set_idle(false);
                Poll::Ready(())
            }
            false => {
                self.set_idle(idle);
                Poll::Pending
            }
        }
    }

    fn try_refill(&mut self, into: &mut Fill<'_>) -> bool {
        self.shared.ready.load(Ordering::Acquire) && self.take(into, None)
    }

    fn close(&mut self, _error: Option<&SharedError>, _consumed: u64) {
        let (packets, driver) = {
            let mut state = lock(&self.shared.state);
            if state.closed {
                return;
            }
            state.closed = true;
            state.bytes = 0;
            state.reader = None;
            (std::mem::take(&mut state.packets), state.driver.clone())
        };
        // Dropped outside the lock: their blocks go home.
        drop(packets);
        driver.wake();
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}
