//! Run a connection future and its application in one task, passing wakes between them in place.
//!
//! Bytes cross the task twice per request: the reading pump's flush wakes the application, whose
//! flush wakes the writing pump. Under `tokio::join!` each of those wakes is the task waking
//! itself, so the executor queues it and polls it again, once per hop. [`join`] polls both futures
//! with a waker of its own instead: a wake that happens while it is polling them is a second pass of
//! this poll; a wake from anywhere else (the socket's readiness, another task) goes to the task's
//! waker as usual.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use crate::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use crate::sync::{lock, Mutex};

/// Passes over the futures in one poll before yielding to the executor (the task's waker is woken
/// then, so it comes back): bounds the time one poll can take when they keep waking each other, as
/// the executor's own budget would.
const MAX_PASSES: usize = 8;

const A: u8 = 1;
const B: u8 = 2;

/// Poll `a` and `b` together until both are done, like `tokio::join!` or `futures::join!`, with
/// the outputs in a tuple. Made for a duplex connection and its application (`join(connection,
/// app)`), whose wakes of each other it turns into passes of one poll.
///
/// In every pass `a` is polled before `b` (no rotation, unlike `tokio::join!`): put the side
/// whose output the other consumes first, the connection before the application. A finished
/// future is not polled again; the join itself panics if polled after it returned `Ready`.
///
/// Cancel safety: as cancel safe as `a` and `b` are. Dropping the join drops both futures where
/// they stand (and the output of one that finished first); it holds nothing of its own beyond
/// their wakers. For `join(connection, app)` that is the connection's drop: both pipes complete
/// with `ConnectionAborted`.
///
/// ```
/// # use packetpipe::ByteSegments;
/// # fn main() {
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let (mut writer, mut reader) = packetpipe::pipe::pipe();
/// let produce = async move {
///     writer.write_slice(b"ping").unwrap();
///     writer.flush_pipe().await.unwrap();
/// };
/// let consume = async move {
///     let read = reader.read_buffer().await.unwrap();
///     read.buffer.to_vec()
/// };
/// let ((), bytes) = packetpipe::io::join(produce, consume).await;
/// assert_eq!(bytes, b"ping");
/// # })
/// # }
/// ```
pub fn join<A: Future, B: Future>(a: A, b: B) -> Join<A, B> {
    Join {
        a,
        b,
        a_output: None,
        b_output: None,
        wakers: None,
        task: None,
        done: false,
    }
}

pin_project_lite::pin_project! {
    /// Future of [`join`].
    #[must_use = "futures do nothing unless polled"]
    pub struct Join<A: Future, B: Future> {
        #[pin]
        a: A,
        #[pin]
        b: B,
        a_output: Option<A::Output>,
        b_output: Option<B::Output>,
        // Made at the first poll (three allocations per join): the state the wakers share, and a
        // waker per future.
        wakers: Option<(Arc<Relay>, Waker, Waker)>,
        // The task's waker last handed to the relay, to compare without taking its lock.
        task: Option<Waker>,
        // Both outputs were returned.
        done: bool,
    }
}

impl<A: Future, B: Future> std::fmt::Debug for Join<A, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Join")
            .field("a_done", &(self.done || self.a_output.is_some()))
            .field("b_done", &(self.done || self.b_output.is_some()))
            .finish()
    }
}

/// What the two wakers share.
///
/// Protocol (a Dekker handshake on SeqCst operations, as in `pipe::wait`):
/// - the poller sets `polling`; before each pass it takes (swaps out) the bits in `woken` and
///   polls the futures they name; after the last pass it clears `polling`, then loads `woken` and
///   wakes the task if a bit is set;
/// - a wake sets its future's bit in `woken`, then loads `polling`, and wakes the task only if it
///   is clear.
///
/// In the single order of SeqCst operations either the wake's bit comes before the poller's final
/// load (the poller sees it: another pass, or the task's waker), or the poller's `polling = false`
/// comes before the wake's load (the wake goes to the task). A wake is never lost; at worst the
/// task is woken once for nothing.
#[derive(Default)]
struct Relay {
    polling: AtomicBool,
    woken: AtomicU8,
    task: Mutex<Option<Waker>>,
}

impl Relay {
    fn wake(&self, bit: u8) {
        self.woken.fetch_or(bit, Ordering::SeqCst);
        crate::sync::loom_seq_cst_point();
        if !self.polling.load(Ordering::SeqCst) {
            // Woken outside the lock: an executor that polls at once on a wake must not find it
            // held (the poll takes it to hand over a new task waker).
            let task = lock(&self.task).clone();
            if let Some(task) = task {
                task.wake();
            }
        }
    }
}

/// Ends a poll's passes on every exit, a panic in a future's poll included (so that later wakes
/// from outside go to the task again): clears `polling`, then wakes the task if a wake came after
/// the last pass or the passes ran out with wakes pending.
struct EndOfPoll<'a> {
    relay: &'a Relay,
    task: &'a Waker,
    passes_ran_out: bool,
}

impl Drop for EndOfPoll<'_> {
    fn drop(&mut self) {
        self.relay.polling.store(false, Ordering::SeqCst);
        crate::sync::loom_seq_cst_point();
        let late = self.relay.woken.load(Ordering::SeqCst) != 0;
        if self.passes_ran_out || late {
            // Back through the executor, which polls both again.
            self.task.wake_by_ref();
        }
    }
}

/// The waker one of the two futures is polled with.
struct BranchWaker {
    relay: Arc<Relay>,
    bit: u8,
}

impl Wake for BranchWaker {
    fn wake(self: Arc<Self>) {
        self.relay.wake(self.bit);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.relay.wake(self.bit);
    }
}

impl<A: Future, B: Future> Future for Join<A, B> {
    type Output = (A::Output, B::Output);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        assert!(!*this.done, "io::join polled after it completed");
        let (relay, waker_a, waker_b) = this.wakers.get_or_insert_with(|| {
            let relay = Arc::new(Relay::default());
            let branch = |bit| {
                Waker::from(Arc::new(BranchWaker {
                    relay: relay.clone(),
                    bit,
                }))
            };
            let (a, b) = (branch(A), branch(B));
            (relay, a, b)
        });
        if !this.task.as_ref().is_some_and(|t| t.will_wake(cx.waker())) {
            *this.task = Some(cx.waker().clone());
            *lock(&relay.task) = Some(cx.waker().clone());
        }
        relay.polling.store(true, Ordering::SeqCst);
        let mut end = EndOfPoll {
            relay,
            task: cx.waker(),
            passes_ran_out: false,
        };
        // Polled by the executor: poll both (why the task was woken is not known here). Then,
        // before each future's poll, take the wakes noted so far: the wakes for it are served by
        // that poll (the one `a` makes of `b` in the same pass included), the others carry on.
        let mut due = A | B;
        for _ in 0..MAX_PASSES {
            due |= relay.woken.swap(0, Ordering::SeqCst);
            poll_if_due(this.a.as_mut(), this.a_output, &mut due, A, waker_a);
            due |= relay.woken.swap(0, Ordering::SeqCst);
            poll_if_due(this.b.as_mut(), this.b_output, &mut due, B, waker_b);
            if this.a_output.is_some() && this.b_output.is_some() {
                *this.done = true;
                let a = this.a_output.take().expect("checked");
                let b = this.b_output.take().expect("checked");
                return Poll::Ready((a, b));
            }
            // Woken during the pass (`b` waking `a`, typically): another pass for those; a
            // finished future's wakes need none.
            due |= relay.woken.swap(0, Ordering::SeqCst);
            due &= unfinished(this.a_output, A) | unfinished(this.b_output, B);
            if due == 0 {
                break;
            }
        }
        end.passes_ran_out = due != 0;
        Poll::Pending
    }
}

/// Poll `future` with `waker` if `due` names it (clearing its bit) and it has not finished; keep
/// its output.
fn poll_if_due<F: Future>(
    future: Pin<&mut F>,
    output: &mut Option<F::Output>,
    due: &mut u8,
    bit: u8,
    waker: &Waker,
) {
    if *due & bit == 0 || output.is_some() {
        return;
    }
    *due &= !bit;
    if let Poll::Ready(done) = future.poll(&mut Context::from_waker(waker)) {
        *output = Some(done);
    }
}

/// `bit` while the future whose output this is has not finished, else nothing.
fn unfinished<T>(output: &Option<T>, bit: u8) -> u8 {
    if output.is_none() {
        bit
    } else {
        0
    }
}
