//! Loom models of packetpipe's cross-thread protocols live in `tests-integration/tests/`, one file per protocol.
//!
//! Run them with `scripts/loom.sh` (release build, `LOOM_MAX_PREEMPTIONS=2` unless set), which also
//! checks that each mutant (a patch in `mutants/` that puts a realistic bug back into the library,
//! applied to a scratch copy and built with `--cfg packetpipe_mutant`) makes its model fail.
//! Without `--cfg packetpipe_loom` every test file compiles to nothing, and each is `test = false`
//! in this crate's Cargo.toml, so `cargo test --workspace` neither builds nor runs them (the script
//! selects them with `--test`).
//!
//! This library holds the small helpers the models share.
#![cfg(packetpipe_loom)]

use std::future::Future;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use packetpipe::pipe::{PipeOptions, PipeReader, PipeWriter};
use packetpipe::{ByteSegments, Pool};

/// Wakes a [`block_on`] through a loom `Notify`.
struct NotifyWaker(loom::sync::Notify);

impl Wake for NotifyWaker {
    fn wake(self: Arc<Self>) {
        self.0.notify();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.notify();
    }
}

/// Drive `future` to completion on this model thread, waiting on a loom `Notify` between polls
/// (loom also explores spurious wakeups there).
///
/// Why not the library's `read_blocking`/`flush_blocking`: they park the thread, and loom's
/// `unpark` wakes a thread blocked on anything (a `join`, a lock), not only in `park`, so a late but
/// legitimate wake from a waker registered earlier fails a model where std would just leave an
/// unpark token. Why not `loom::future::block_on`: its waker is a loom `Arc`, whose drop needs the
/// model running, so a model that fails (a deadlock found while a thread waits here) would abort
/// the test process instead of failing it; this waker is a std `Arc`.
pub fn block_on<F: Future>(future: F) -> F::Output {
    let notify = Arc::new(NotifyWaker(loom::sync::Notify::new()));
    let waker = Waker::from(notify.clone());
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        notify.0.wait();
    }
}

/// Owns a value that uses loom when dropped (a pipe end, a pool), and leaks it instead if the
/// thread is unwinding from a failed model.
///
/// After loom reports a failure (a deadlock, an assertion), the panicking thread's values are
/// dropped while loom has no active thread, so their loom operations panic again, and a panic in
/// a destructor during unwinding aborts the process: a mutant's `#[should_panic]` test would crash
/// instead of passing. Dropped normally, the value is dropped as usual, inside the model.
pub struct Hold<T>(ManuallyDrop<T>);

impl<T> Hold<T> {
    pub fn new(value: T) -> Hold<T> {
        Hold(ManuallyDrop::new(value))
    }

    pub fn into_inner(self) -> T {
        let mut this = ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again, so the value is moved out exactly once.
        unsafe { ManuallyDrop::take(&mut this.0) }
    }
}

impl<T> Deref for Hold<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> DerefMut for Hold<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

impl<T> Drop for Hold<T> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            // SAFETY: dropped once, here; `into_inner` forgets `self` instead of reaching this.
            unsafe { ManuallyDrop::drop(&mut self.0) }
        }
    }
}

/// Read until `want` bytes have been seen or the writer completed, advancing past everything read.
/// Returns the bytes and whether completion was seen.
pub fn read_to_end(reader: &mut PipeReader, want: usize) -> (Vec<u8>, bool) {
    let mut got = Vec::new();
    loop {
        let result = block_on(reader.read_buffer()).expect("read");
        let bytes = result.buffer.to_vec();
        let completed = result.is_completed;
        got.extend_from_slice(&bytes);
        let n = bytes.len();
        reader.advance_to(n, n).expect("advance");
        if completed || got.len() >= want {
            return (got, completed);
        }
    }
}

/// A pipe whose ends are [`Hold`]s.
pub fn pipe(options: PipeOptions) -> (Hold<PipeWriter>, Hold<PipeReader>) {
    let (writer, reader) = packetpipe::pipe::pipe_with(options);
    (Hold::new(writer), Hold::new(reader))
}

/// Poll `future` once with a waker that does nothing, as a `select!` would before dropping it.
pub fn poll_once<F: Future>(future: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    struct Nothing;
    impl Wake for Nothing {
        fn wake(self: Arc<Self>) {}
    }
    let waker = Waker::from(Arc::new(Nothing));
    future.poll(&mut Context::from_waker(&waker))
}

/// A pool with one 64-byte class and magazines of one block: a thread's second return in a row
/// fills its spare magazine, the third moves a magazine to the depot, and a rent on an empty cache
/// takes one from it. The pool models use it to reach the depot in few operations.
pub fn tiny_pool() -> Pool {
    Pool::with_options(packetpipe::PoolOptions {
        min_class_size: 64,
        max_class_size: 64,
        thread_cache_depth: 1,
        thread_cache_bytes: 64,
        ..packetpipe::PoolOptions::default()
    })
    .unwrap()
}
