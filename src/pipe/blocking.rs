//! Drive a pipe future to completion on the calling thread, for thread-based users.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use crate::sync::{thread, thread_local};

/// Wakes a parked thread.
struct Unparker(thread::Thread);

impl Wake for Unparker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

thread_local! {
    // One waker per thread, made on first use: blocking calls allocate nothing afterwards.
    static THREAD_WAKER: Waker = Waker::from(Arc::new(Unparker(thread::current())));
}

/// Poll `future` on this thread, parking between polls until its waker is woken.
#[inline]
pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    THREAD_WAKER.with(|waker| {
        let mut cx = Context::from_waker(waker);
        loop {
            if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
                return output;
            }
            // A spurious unpark only costs another poll.
            thread::park();
        }
    })
}
