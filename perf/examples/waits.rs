//! The pipe's waits against `event-listener`: what each costs per wait, in the same run.
//!
//! Two threads pass a token back and forth (a ping-pong: each waits for the other's turn, then
//! hands the turn back and wakes it), so every round trip is two waits and two wakes across
//! threads, the pattern of a pipe whose reader and writer take turns. The waiting side is, in turn:
//!
//! - `waker slot`: the shape of the pipe's own waiter (`src/pipe/wait.rs`, crate-private): a waker
//!   slot behind a mutex and a `waiting` flag, so a wake with nobody waiting costs one load;
//! - `event-listener`: `event_listener::Event`, the listener created per wait with `Event::listen`
//!   and kept in the hand-written future across polls (the pipe's futures are named types, so the
//!   stack-pinned `listener!` macro, which needs an `async` block, does not fit them).
//!
//! Both are hand-written futures driven by `packetpipe::block_on` on each thread, which is also
//! how the pipe's blocking forms (`read_blocking`, `flush_blocking`) wait: spin, yield, then park.
//! A third row is `event-listener`'s own blocking wait (`Listener::wait`). Printed per round trip:
//! nanoseconds (median of the repeats, the rows alternated within each repeat) and heap
//! allocations (counted by the test kit's allocator, exact). Timings move with the machine; the
//! allocation counts do not.
//!
//! `cargo run --release -p packetpipe-perf --example waits [ROUND_TRIPS] [REPEATS]`

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use event_listener::{Event, EventListener, Listener};

#[path = "../../tests-integration/tests/kit/counting_alloc.rs"]
mod counting_alloc;

#[global_allocator]
static GLOBAL: counting_alloc::CountingAlloc = counting_alloc::CountingAlloc;

/// Whose turn it is: even for the first thread, odd for the second. Each thread waits until the
/// count has its parity, then adds one.
#[derive(Default)]
struct Turn(AtomicU64);

impl Turn {
    fn is_mine(&self, parity: u64) -> bool {
        self.0.load(Ordering::SeqCst) % 2 == parity
    }
    fn pass(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// The pipe's waiter shape: a waker (or thread) slot and a flag that says someone waits.
#[derive(Default)]
struct Slot {
    waiting: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl Slot {
    fn register(&self, waker: &Waker) {
        {
            let mut slot = self.waker.lock().unwrap();
            match &*slot {
                Some(current) if current.will_wake(waker) => {}
                _ => *slot = Some(waker.clone()),
            }
        }
        self.waiting.store(true, Ordering::SeqCst);
    }
    fn wake(&self) {
        if self.waiting.load(Ordering::SeqCst) && self.waiting.swap(false, Ordering::SeqCst) {
            if let Some(waker) = self.waker.lock().unwrap().take() {
                waker.wake();
            }
        }
    }
}

/// Wait for a turn on a `Slot` (register, re-check, sleep).
struct SlotWait<'a> {
    turn: &'a Turn,
    slot: &'a Slot,
    parity: u64,
}

impl Future for SlotWait<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.turn.is_mine(self.parity) {
            return Poll::Ready(());
        }
        self.slot.register(cx.waker());
        if self.turn.is_mine(self.parity) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

/// Wait for a turn on an `Event`: a listener made when the first check fails, kept across polls.
struct EventWait<'a> {
    turn: &'a Turn,
    event: &'a Event,
    parity: u64,
    listener: Option<EventListener>,
}

impl Future for EventWait<'_> {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            if self.turn.is_mine(self.parity) {
                self.listener = None;
                return Poll::Ready(());
            }
            match &mut self.listener {
                None => {
                    let listener = self.event.listen();
                    self.listener = Some(listener);
                }
                Some(listener) => {
                    if Pin::new(listener).poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    self.listener = None;
                }
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Waiter {
    /// `SlotWait` under `packetpipe::block_on`.
    Slot,
    /// `EventWait` under `packetpipe::block_on`.
    EventListener,
    /// `Event::listen` then `Listener::wait`.
    EventListenerWait,
}

impl Waiter {
    fn name(self) -> &'static str {
        match self {
            Waiter::Slot => "waker slot (the pipe's), `block_on`",
            Waiter::EventListener => "event-listener future, `block_on`",
            Waiter::EventListenerWait => "event-listener `Listener::wait`",
        }
    }
}

/// One side's wake channel: both kinds are built, one is used.
#[derive(Default)]
struct Side {
    slot: Slot,
    event: Event,
}

/// `round_trips` ping-pongs; returns nanoseconds and allocations per round trip (both threads).
fn run(waiter: Waiter, round_trips: u64) -> (f64, f64) {
    let turn = Arc::new(Turn::default());
    let sides = Arc::new([Side::default(), Side::default()]);
    let player = |parity: u64| {
        let (turn, sides) = (turn.clone(), sides.clone());
        move || {
            let before = counting_alloc::allocations();
            let (mine, other) = (&sides[parity as usize], &sides[1 - parity as usize]);
            for _ in 0..round_trips {
                match waiter {
                    Waiter::Slot => packetpipe::block_on(SlotWait {
                        turn: &turn,
                        slot: &mine.slot,
                        parity,
                    }),
                    Waiter::EventListener => packetpipe::block_on(EventWait {
                        turn: &turn,
                        event: &mine.event,
                        parity,
                        listener: None,
                    }),
                    Waiter::EventListenerWait => {
                        while !turn.is_mine(parity) {
                            let listener = mine.event.listen();
                            if turn.is_mine(parity) {
                                break;
                            }
                            listener.wait();
                        }
                    }
                }
                turn.pass();
                match waiter {
                    Waiter::Slot => other.slot.wake(),
                    Waiter::EventListener | Waiter::EventListenerWait => {
                        other.event.notify(1);
                    }
                }
            }
            counting_alloc::allocations() - before
        }
    };
    let start = Instant::now();
    let first = std::thread::spawn(player(0));
    let second = std::thread::spawn(player(1));
    let allocations = first.join().unwrap() + second.join().unwrap();
    let elapsed = start.elapsed();
    assert_eq!(turn.0.load(Ordering::SeqCst), 2 * round_trips);
    (
        elapsed.as_nanos() as f64 / round_trips as f64,
        allocations as f64 / round_trips as f64,
    )
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let round_trips: u64 = args
        .next()
        .map_or(200_000, |a| a.parse().expect("ROUND_TRIPS"));
    let repeats: usize = args.next().map_or(5, |a| a.parse().expect("REPEATS"));
    println!("waits: {round_trips} round trips (two cross-thread waits and wakes each), medians of {repeats}");
    println!("| waiter | ns per round trip | allocations per round trip | ns ratio to the slot |");
    println!("|---|---:|---:|---:|");
    let waiters = [
        Waiter::Slot,
        Waiter::EventListener,
        Waiter::EventListenerWait,
    ];
    let mut ns = vec![Vec::new(); waiters.len()];
    let mut allocations = vec![0.0; waiters.len()];
    for _ in 0..repeats {
        for (k, &waiter) in waiters.iter().enumerate() {
            let (n, a) = run(waiter, round_trips);
            ns[k].push(n);
            allocations[k] = a;
        }
    }
    let medians: Vec<f64> = ns.into_iter().map(median).collect();
    for (k, waiter) in waiters.iter().enumerate() {
        println!(
            "| {} | {:.0} | {:.3} | {:.2}x |",
            waiter.name(),
            medians[k],
            allocations[k],
            medians[k] / medians[0]
        );
    }
}
