//! Wakers for polling futures by hand: one that counts its wakes (so "waits", "is woken" and
//! "wakes nobody" are exact checks), one that does nothing, and small executors that park the
//! thread until woken.
//!
//! The pipe model (`pipe_model/`) uses the counting waker too; the fuzz target, which includes the
//! model by path, includes this file beside it.

use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread;

/// A waker that counts its wakes.
#[derive(Default)]
pub struct CountWaker(pub AtomicUsize);

impl Wake for CountWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl CountWaker {
    /// Wakes so far.
    pub fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }

    pub fn reset(&self) {
        self.0.store(0, Ordering::SeqCst);
    }
}

/// A counting waker and its counter.
pub fn counting_waker() -> (Arc<CountWaker>, Waker) {
    let counter = Arc::new(CountWaker::default());
    let waker = Waker::from(counter.clone());
    (counter, waker)
}

/// A waker that does nothing when woken.
pub struct NoopWake;

impl Wake for NoopWake {
    fn wake(self: Arc<Self>) {}
}

/// Poll `future` once with `waker`.
pub fn poll_once<F: Future>(future: Pin<&mut F>, waker: &Waker) -> Poll<F::Output> {
    future.poll(&mut Context::from_waker(waker))
}

/// Wakes a parked thread and counts the wakes.
pub struct CountingUnpark {
    pub wakes: AtomicUsize,
    pub thread: thread::Thread,
}

impl Wake for CountingUnpark {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
        self.thread.unpark();
    }
}

/// Poll `future` on this thread until it completes, parking while it is pending; returns its
/// output, how often it returned `Pending` and how often its waker was woken.
fn run_to_completion<F: Future>(future: F) -> (F::Output, usize, usize) {
    let counter = Arc::new(CountingUnpark {
        wakes: AtomicUsize::new(0),
        thread: thread::current(),
    });
    let waker = Waker::from(counter.clone());
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    let mut pending = 0;
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return (output, pending, counter.wakes.load(Ordering::SeqCst));
        }
        pending += 1;
        thread::park();
    }
}

/// Poll `future` to completion on this thread; also says whether it ever returned `Pending`.
pub fn block_on<F: Future>(future: F) -> (F::Output, bool) {
    let (output, pending, _) = run_to_completion(future);
    (output, pending > 0)
}

/// Poll `future` to completion on this thread; returns its output and how often its waker was
/// woken.
pub fn run_counting_wakes<F: Future>(future: F) -> (F::Output, usize) {
    let (output, _, wakes) = run_to_completion(future);
    (output, wakes)
}
