#![cfg(packetpipe_loom)]
//! `io::join`'s waker relay: a wake from another thread, racing the end of a poll, must reach the
//! task, whether it lands during a pass, between the last pass and the end, or after.

use std::future::{poll_fn, Future};
use std::sync::Arc;
use std::task::{Poll, Waker};

use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Mutex;
use loom::thread;
use packetpipe_loom_tests::block_on;

/// A one-shot signal between threads, with the usual handshake: the waiter stores its waker, then
/// checks the flag; the signaler sets the flag, then takes the waker and wakes it.
#[derive(Default)]
struct Signal {
    set: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl Signal {
    fn set(&self) {
        self.set.store(true, Ordering::SeqCst);
        let waker = self.waker.lock().unwrap().take();
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    fn wait(&self) -> impl Future<Output = ()> + '_ {
        poll_fn(move |cx| {
            if self.set.load(Ordering::SeqCst) {
                return Poll::Ready(());
            }
            *self.waker.lock().unwrap() = Some(cx.waker().clone());
            if self.set.load(Ordering::SeqCst) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
    }
}

/// One future waits for a signal from another thread, the other is ready after one poll that
/// wakes itself (a wake during the pass). A lost wake is a loom deadlock.
fn wake_from_another_thread_reaches_the_task_model() {
    loom::model(|| {
        let signal = Arc::new(Signal::default());
        let signaler = {
            let signal = signal.clone();
            thread::spawn(move || signal.set())
        };
        let mut polled = false;
        let other = poll_fn(|cx| {
            if polled {
                return Poll::Ready(7);
            }
            polled = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        });
        let ((), seven) = block_on(packetpipe::io::join(signal.wait(), other));
        assert_eq!(seven, 7);
        signaler.join().unwrap();
    });
}

#[test]
#[cfg(not(packetpipe_mutant))]
fn wake_from_another_thread_reaches_the_task() {
    wake_from_another_thread_reaches_the_task_model();
}

/// Mutant `join_no_recheck`: a wake that saw the poll still running, after its last pass, is lost.
#[test]
#[cfg(packetpipe_mutant)]
#[should_panic(expected = "deadlock")]
fn mutant_join_no_recheck() {
    wake_from_another_thread_reaches_the_task_model();
}

/// Mutant `join_wake_no_forward`: a wake from outside the poll never reaches the task.
#[test]
#[cfg(packetpipe_mutant)]
#[should_panic(expected = "deadlock")]
fn mutant_join_wake_no_forward() {
    wake_from_another_thread_reaches_the_task_model();
}
