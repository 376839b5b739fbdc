//! One side's parking spot: a waker slot plus a "waiting" flag, so the other side can skip the
//! lock and the notify entirely when nobody waits (the hot path).
//!
//! Protocol (a Dekker-style handshake on SeqCst operations, which the loom models check):
//!
//! - Waiter: store its waker and `waiting.store(true, SeqCst)` (both under the slot's lock), then
//!   re-check its condition with a SeqCst load. If the condition now holds it proceeds; otherwise
//!   it returns `Pending`. A waiter whose last registration still stands (the flag still set, the
//!   same waker) loads the flag instead of storing it.
//! - Notifier: change the state the waiter checks with a SeqCst read-modify-write or store, then
//!   `waiting.load(SeqCst)`; only if it is set does it take the lock, clear the flag and take the
//!   waker, and wake.
//!
//! In the single total order of SeqCst operations either the notifier's state change comes before
//! the waiter's re-check (the waiter sees it and does not sleep), or the waiter's flag store (or
//! load of its own set flag) comes before the notifier's flag load (the notifier, or one that
//! cleared the flag in between, wakes it). No wakeup is lost either way.

use std::task::Waker;

use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::{lock, Mutex};

#[derive(Default)]
pub(crate) struct WaitCell {
    waiting: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl WaitCell {
    /// Announce that the caller is about to sleep until woken; the caller must re-check its
    /// condition afterwards. Clones the waker only if it changed (cloning never allocates for
    /// ordinary wakers; `will_wake` avoids even the refcount increment).
    ///
    /// The flag is set, and cleared by a wake, under the slot's lock together with the slot: set,
    /// it means the slot holds the waker registered last (what `register_once` relies on).
    pub(crate) fn register(&self, waker: &Waker) {
        let mut slot = lock(&self.waker);
        match &*slot {
            Some(current) if current.will_wake(waker) => {}
            _ => *slot = Some(waker.clone()),
        }
        self.waiting.store(true, Ordering::SeqCst);
    }

    /// [`register`](Self::register) for the cell's one waiter, which keeps in `last` the waker it
    /// registered last (every registration of this cell goes through here with the same `last`).
    /// When that registration still stands (the flag is still set, so the slot still holds that
    /// waker: they change together under the lock) and `waker` wakes the same task, registering
    /// again would change nothing: only the flag is loaded, and that SeqCst load stands for the
    /// store in the handshake above (a notifier whose state change comes after it in the total
    /// order still sees the flag set, or another notifier took the waker after it and wakes this
    /// task). The caller re-checks its condition afterwards either way.
    #[inline]
    pub(crate) fn register_once(&self, waker: &Waker, last: &mut Option<Waker>) {
        let same = last.as_ref().is_some_and(|w| w.will_wake(waker));
        if same && self.is_waiting() {
            return;
        }
        self.register(waker);
        if !same {
            *last = Some(waker.clone());
        }
    }

    /// Wake the waiter, if one announced itself. Call after a SeqCst change of the state the waiter
    /// checks. Costs one SeqCst load when nobody waits.
    #[inline]
    pub(crate) fn wake(&self) {
        crate::sync::loom_seq_cst_point();
        if self.waiting.load(Ordering::SeqCst) {
            // The flag is cleared with the slot taken, under the lock (see `register`); the swap
            // leaves the waker to one notifier.
            let waker = {
                let mut slot = lock(&self.waker);
                if self.waiting.swap(false, Ordering::SeqCst) {
                    slot.take()
                } else {
                    None
                }
            };
            if let Some(waker) = waker {
                waker.wake();
            }
        }
    }

    /// Whether a waiter has announced itself and not been woken since.
    #[inline]
    pub(crate) fn is_waiting(&self) -> bool {
        crate::sync::loom_seq_cst_point();
        self.waiting.load(Ordering::SeqCst)
    }
}
