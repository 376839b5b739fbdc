//! Drive a pipe future to completion on the calling thread, for thread-based users.
//!
//! Waiting spins briefly, then yields, then parks, the habit of crossbeam's `Backoff`: a wait that
//! the other thread ends within a few microseconds (the next flush of a streaming writer, the
//! reader catching up under backpressure) costs no futex sleep and no context switch, and a long
//! wait still sleeps. The waker sets a flag before it unparks, so the spinning thread sees the wake
//! without any syscall (`unpark` of a thread that is not parked is an atomic swap).
//!
//! Adaptive: each thread keeps a spin budget (in steps of the backoff) that grows when spinning
//! ended a wait, or when a wait that went on to sleep was short anyway (a longer spin would have
//! caught it), and shrinks when the sleep was long, so a thread whose waits are long (an idle
//! connection, a slow peer) stops burning CPU on them.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use crate::sync::{thread, thread_local};

/// Wakes a waiting thread: the flag for a thread that spins, the unpark for one that sleeps.
struct Unparker {
    thread: thread::Thread,
    notified: AtomicBool,
}

impl Wake for Unparker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.notified.store(true, Ordering::Release);
        self.thread.unpark();
    }
}

/// One thread's waker and its adaptive spin budget.
struct ThreadWaiter {
    unparker: Arc<Unparker>,
    waker: Waker,
    /// Backoff steps spent spinning and yielding before parking: `MIN_STEPS..=MAX_STEPS`.
    budget: std::cell::Cell<u32>,
}

/// Steps that spin: step `s` spins `2^s` times (1 + 2 + ... + 64 = 127 spin-loop hints, a few
/// microseconds in all).
const SPIN_STEPS: u32 = 7;
/// The budget never drops below this: even a thread that usually parks spins a little.
const MIN_STEPS: u32 = 2;
/// Spin steps, then up to 100 `yield_now`s (about a microsecond or less each when the other core is
/// free): long enough to cover the other side copying and parsing a 64 KiB frame. Measured with
/// `perf/examples/peers_stream.rs` under `perf stat` (BENCHMARKS.md, "Waiting without context
/// switches"): with 20 yields, 4 KiB frames slept up to once per 40 frames and 64 KiB frames
/// about once per 2-3; with 100, 4 KiB frames about once per 10,000. A thread whose waits are
/// long loses one step per long sleep, so it soon parks after a short spin again.
const MAX_STEPS: u32 = SPIN_STEPS + 100;
/// A sleep shorter than this was worth spinning through (about what the full budget spins).
const SHORT_SLEEP: std::time::Duration = std::time::Duration::from_micros(50);

thread_local! {
    // Made on first use: blocking calls allocate nothing afterwards.
    static WAITER: ThreadWaiter = {
        let unparker = Arc::new(Unparker {
            thread: thread::current(),
            notified: AtomicBool::new(false),
        });
        ThreadWaiter {
            waker: Waker::from(unparker.clone()),
            unparker,
            budget: std::cell::Cell::new(MAX_STEPS),
        }
    };
}

impl ThreadWaiter {
    /// Wait until woken: spin and yield within the budget, then park. A spurious return only
    /// costs another poll.
    fn wait(&self) {
        // Loom explores park/unpark itself; spinning would only multiply its interleavings.
        if cfg!(packetpipe_loom) {
            thread::park();
            return;
        }
        let budget = self.budget.get();
        for step in 0..budget {
            if self.unparker.notified.load(Ordering::Acquire) {
                // Woken while spinning: spin a little longer next time, up to the maximum.
                self.budget.set((budget + 1).min(MAX_STEPS));
                return;
            }
            if step < SPIN_STEPS {
                for _ in 0..1u32 << step {
                    std::hint::spin_loop();
                }
            } else {
                thread::yield_now();
            }
        }
        if self.unparker.notified.load(Ordering::Acquire) {
            return;
        }
        // The wait outlasted the budget: sleep. A sleep the other side ended soon says a longer
        // spin would have caught it (spin more next time); a long one says spinning was wasted
        // (spin less). Without this feedback, a few long waits would shrink the budget for good
        // and the thread would sleep on every short wait after them.
        let slept_from = std::time::Instant::now();
        thread::park();
        let next = if slept_from.elapsed() < SHORT_SLEEP {
            budget + 1
        } else {
            budget - 1
        };
        self.budget.set(next.clamp(MIN_STEPS, MAX_STEPS));
    }
}

/// Run `future` to completion on the calling thread: poll it, and between polls wait (spin
/// briefly, then yield, then park) until its waker is woken.
///
/// The one way to use any of the crate's futures from a thread without an async runtime
/// ([`PipeReader::read_until`](crate::PipeReader::read_until),
/// [`FrameWriter::send`](crate::frame::FrameWriter::send), a blocking connection, ...). The waits
/// that matter most have their own methods, which do more than this:
/// [`PipeReader::read_blocking`](crate::PipeReader::read_blocking) coalesces small reads, and
/// [`PipeWriter::flush_blocking`](crate::PipeWriter::flush_blocking). It allocates once per thread
/// (its waker), on first use.
///
/// ```
/// use packetpipe::{block_on, pipe};
///
/// let (mut writer, mut reader) = pipe();
/// writer.write_slice(b"GET / HTTP/1.1\r\n\r\n")?;
/// writer.flush_blocking()?;
/// let head = block_on(reader.read_until(b"\r\n\r\n", 8192))?;
/// assert_eq!(head.found, Some(14));
/// # Ok::<(), packetpipe::Error>(())
/// ```
#[inline]
pub fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    WAITER.with(|waiter| {
        let mut cx = Context::from_waker(&waiter.waker);
        loop {
            // Cleared before the poll: a wake that comes during or after it is seen by `wait`.
            waiter.unparker.notified.store(false, Ordering::Relaxed);
            if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
                return output;
            }
            waiter.wait();
        }
    })
}

/// A blocking read that brings fewer new bytes than this is small: the reader may be taking a
/// streaming writer's flushes one at a time. Below a 4 KiB frame, so streams of larger frames
/// (which reach the pause threshold, where the spin-then-park wait matters) are not delayed.
pub(crate) const SMALL_READ: u64 = 1024;

/// Read coalescing, for a blocking reader whose last read was small and that finds few new bytes
/// now: wait a few hundred nanoseconds, touching no shared memory, before reading.
///
/// Why: two threads streaming small frames (a flush each) otherwise trade them one at a time:
/// the reader catches every flush, and every frame moves the published count, the queue node, the
/// block's reference count and the data between the two cores while both sides use them. Letting
/// a few flushes accumulate moves those lines once per batch instead (a runtime's reader gets the
/// same from its wake-up latency). A reader whose data is not coming yet (a request/response
/// reader) loses nothing, it would wait anyway; one that reads small pieces that are already
/// there pays the delay once per read (the cost of not knowing whether more is coming: about
/// 190 ns per read of under 1 KiB). It is not limited to reads after one that had to wait: in
/// the streaming case most reads find a frame there without waiting, and so limited it loses the
/// gain (98-117 ns per 64-byte frame against 65-72).
/// Measured on the peers workload (BENCHMARKS.md, "Read coalescing"): 64-byte frames over two
/// threads 106-113 -> 65-72 ns per frame; 4 KiB and 64 KiB frames do not coalesce.
#[inline]
pub(crate) fn coalesce() {
    // Loom explores interleavings, not time: a delay only adds steps.
    if cfg!(packetpipe_loom) {
        return;
    }
    for _ in 0..COALESCE_SPINS {
        std::hint::spin_loop();
    }
}

/// Spin-loop hints of one coalescing delay: about 190 ns on the AMD EPYC VM this was tuned on (a
/// hint is about 23 ns there), time for two or three 64-byte flushes of a streaming writer. 4
/// hints gave 68-70 ns per 64-byte frame, 8 and 16 gave 62-72, 32 made `Frames` slower (its reads
/// need one frame) and costs more latency.
const COALESCE_SPINS: u32 = 8;
