//! The inline transport: the application's pipe ends move the bytes themselves.
//!
//! - Input: the application's [`PipeReader`] reads its own segments (no input pipe) and carries
//!   an [`Inbound`] (its `Refill`): a read that finds nothing beyond its examined point reads the
//!   stream into the reader's receive block (`pipe::Fill`) and sees the bytes in the same poll or
//!   call. Readiness first, then a block: a stream that can say when it is readable is asked
//!   first, so a connection waiting for its peer holds no pooled block, except by a read after a
//!   wait (no block held, nothing unconsumed), which reads straight into a rented block and gives
//!   it back if it finds nothing; a blocking stream is read into a per-thread scratch while the
//!   application holds no byte, for the same reason (unless the connection keeps its blocks while
//!   idle, or the reader's block has room for the read: then no block is rented for it and no
//!   byte copied).
//! - Output: the application's [`PipeWriter`] carries an [`Outbound`] (its `Deliver`): a flush
//!   with nothing published still unwritten writes the staged bytes straight from the writer's
//!   block (`write_now`); otherwise, and for what the stream did not take, the flush publishes
//!   into the output pipe and its segments are written at once with vectored writes; what the
//!   stream still did not take (and the write side's shutdown, if the stream cannot do it at
//!   once) is left to the connection's future, which the stream's write readiness wakes.
//!   Backpressure stays the output pipe's: a flush waits while the untaken bytes reach its pause
//!   threshold.
//!
//! The stream's two halves (one flavor's [`ReadSide`] and [`WriteSide`]) are the only things a
//! flavor supplies. The output half and the output pipe's reader sit behind one mutex, taken by
//! flushes and by the connection's future, each for writes that never wait (async streams) or
//! for the write itself (blocking ones): on one task it is never contended. Nothing called under
//! it calls back into the application's pipe ends.

use std::cell::RefCell;
use std::io::{self, IoSlice};
use std::sync::{Arc, PoisonError};
use std::task::{Context, Poll, RawWaker, RawWakerVTable, Waker};

use super::byte_stream::io_error;
use super::connection::{
    Connection, ConnectionEnd, ConnectionError, ConnectionOptions, DuplexPipe, ErrorOrigin,
    InlineState, MAX_WRITE_SEGMENTS,
};
use crate::error::SharedError;
use crate::pipe::transport::{Deliver, Refill};
use crate::pipe::{local_reader, pipe_with, Fill, PipeCanceler, PipeReader, TailProbe};
// The connection's locks and flags are the crate's (loom's in model builds: the model in
// loom-tests/tests/inline_output.rs checks the output's hand-over between a flush and the
// connection's future on another thread).
use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::{Mutex, MutexGuard};

/// One flavor's read half of a stream.
pub(crate) trait ReadSide: Send + Sync + 'static {
    /// Whether a read blocks the thread until bytes come (std's `Read`): such a side is read
    /// into a per-thread scratch while the application holds no byte (and the reader's block, if
    /// it holds one, has no room for the read).
    const BLOCKING: bool = false;

    /// `Ready` once a read may find bytes (or the end, or an error); sides that cannot tell
    /// return `Ready` at once. Not asked by a read after a wait (see `Inbound::poll_refill`).
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// Read into `buf` (never empty): `Ok(0)` is the end of the stream; `Pending` when nothing
    /// is there now, `cx` to be woken when there is.
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>>;
}

/// One flavor's write half of a stream.
pub(crate) trait WriteSide: Send + Sync + 'static {
    /// Write without waiting; `WouldBlock` when the stream takes nothing now. Blocking sides
    /// simply write.
    fn try_write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let waker = noop_waker();
        match self.poll_write_vectored(&mut Context::from_waker(&waker), bufs) {
            Poll::Ready(result) => result,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    /// Write, `cx` woken when the stream can take more.
    fn poll_write_vectored(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>>;

    /// Flush the stream's own buffers, if it has any.
    fn poll_flush(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// Shut down the write side (the peer sees the end of the stream).
    fn poll_shutdown(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
}

/// A stream that cannot be split, shared by its two halves behind a mutex (each half takes it
/// for one poll; the stream keeps its read and write wakers apart, as tokio's and futures-io's
/// streams do).
/// `Flavor` says whose I/O traits the stream is driven through.
#[cfg(any(feature = "tokio", feature = "futures-io"))]
pub(crate) struct SharedStream<S, Flavor>(
    Arc<Mutex<std::pin::Pin<Box<S>>>>,
    std::marker::PhantomData<Flavor>,
);

#[cfg(any(feature = "tokio", feature = "futures-io"))]
impl<S, Flavor> SharedStream<S, Flavor> {
    /// The two halves of `stream`.
    pub(crate) fn split(stream: S) -> (Self, Self) {
        let shared = Arc::new(Mutex::new(Box::pin(stream)));
        let half = |shared| SharedStream(shared, std::marker::PhantomData);
        (half(shared.clone()), half(shared))
    }

    /// Run `f` on the stream.
    pub(crate) fn with<T>(&mut self, f: impl FnOnce(std::pin::Pin<&mut S>) -> T) -> T {
        f(lock(&self.0).as_mut())
    }
}

/// A waker that does nothing: for writes that must not wait (a pending one is left to the
/// connection's future, which polls again with its own waker). Made without allocating.
fn noop_waker() -> Waker {
    fn clone(_: *const ()) -> RawWaker {
        RawWaker::new(std::ptr::null(), &NOOP)
    }
    fn noop(_: *const ()) {}
    static NOOP: RawWakerVTable = RawWakerVTable::new(clone, noop, noop, noop);
    // SAFETY: every function of the vtable ignores the data pointer (null, never dereferenced)
    // and does nothing, `clone` returns the same waker, and all of them may run on any thread:
    // the `RawWaker` contract holds.
    unsafe { Waker::from_raw(RawWaker::new(std::ptr::null(), &NOOP)) }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the bytes of a stream are to the reader: themselves ([`Plain`]), or records of a
/// protocol layered on the stream (TLS) that become readable in place once complete.
pub(crate) trait Layer: Send + Sync + 'static {
    /// Whether every byte read is readable as it is: then a blocking stream may be read into the
    /// per-thread scratch while the application holds no byte.
    const PLAIN: bool;

    /// Bytes the layer held before the stream was handed over (received during a handshake):
    /// made readable first, before the stream is read, with their count (they are bytes
    /// received); `hint` as for [`space`](Self::space). `None` when there are none.
    fn take_buffered(
        &mut self,
        _into: &mut Fill<'_>,
        _hint: usize,
    ) -> Option<(usize, io::Result<Received>)> {
        None
    }

    /// Where the next read goes: at least `hint` bytes of the receive block's free tail.
    fn space<'f>(
        &mut self,
        into: &'f mut Fill<'_>,
        hint: usize,
    ) -> Result<&'f mut [u8], crate::Error>;

    /// `n` bytes were read into that space.
    fn received(&mut self, into: &mut Fill<'_>, n: usize) -> io::Result<Received>;

    /// The stream ended: `Ok` where that is the peer's clean end.
    fn end_of_stream(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// What a read brought the reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Received {
    /// Readable bytes (or the layer's own messages, which the reader need not see).
    Readable,
    /// Nothing readable yet (the front of a record): read again.
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    Partial,
    /// The peer's clean end inside the layer (TLS `close_notify`).
    Closed,
}

/// The stream's bytes, readable as read.
pub(crate) struct Plain;

impl Layer for Plain {
    const PLAIN: bool = true;

    #[inline]
    fn space<'f>(
        &mut self,
        into: &'f mut Fill<'_>,
        hint: usize,
    ) -> Result<&'f mut [u8], crate::Error> {
        into.buffer_mut(hint)
    }

    #[inline]
    fn received(&mut self, into: &mut Fill<'_>, n: usize) -> io::Result<Received> {
        into.advance(n).map_err(io_error)?;
        Ok(Received::Readable)
    }
}

/// An inline connection over `read` and `write`, the halves of one stream.
pub(crate) fn connect(
    read: impl ReadSide,
    write: impl WriteSide,
    options: ConnectionOptions,
) -> (DuplexPipe, Connection) {
    connect_layered(read, Plain, write, options)
}

/// [`connect`] with the reader's bytes coming through `layer`.
pub(crate) fn connect_layered(
    read: impl ReadSide,
    layer: impl Layer,
    write: impl WriteSide,
    options: ConnectionOptions,
) -> (DuplexPipe, Connection) {
    let mut reader = local_reader(options.input, options.keep_blocks_idle);
    let (mut writer, output) = pipe_with(options.output);
    let output_tail = output
        .tail_probe()
        .expect("an output pipe's reader reads the shared queue");
    let shared = Arc::new(Shared {
        output_tail,
        output: Mutex::new(Output {
            reader: output,
            write: Box::new(write),
            max_segments: options.max_write_segments.clamp(1, MAX_WRITE_SEGMENTS),
            sent: 0,
            from_pipe: 0,
            unflushed: false,
            shut_down: false,
        }),
        driver: Mutex::new(None),
        reader: reader.canceler(),
        input_idle: AtomicBool::new(false),
        input_done: AtomicBool::new(false),
        output_done: AtomicBool::new(false),
        aborted: AtomicBool::new(false),
        end: Mutex::new(EndState::default()),
    });
    reader.set_source(Box::new(Inbound {
        read,
        layer,
        shared: shared.clone(),
        received: 0,
        ended: false,
    }));
    writer.set_sink(Box::new(Outbound {
        shared: shared.clone(),
    }));
    (DuplexPipe { reader, writer }, Connection::inline(shared))
}

/// What both directions share with the connection's future.
pub(crate) struct Shared {
    output: Mutex<Output>,
    /// Whether the output pipe's reader would find a parked block to send home (see `idle`),
    /// without taking `output`.
    output_tail: TailProbe,
    /// The connection future's waker.
    driver: Mutex<Option<Waker>>,
    /// Wakes the application's reader if it waits (an abort).
    reader: PipeCanceler,
    /// The application's reader waits for the stream with nothing unconsumed: a flush that
    /// writes everything gives its block back (Relaxed: both ends run on the application's
    /// task, or the block is merely kept one flush longer).
    input_idle: AtomicBool,
    input_done: AtomicBool,
    output_done: AtomicBool,
    /// The connection's future was dropped before the end.
    aborted: AtomicBool,
    end: Mutex<EndState>,
}

#[derive(Default)]
struct EndState {
    error: Option<ConnectionError>,
    peer_closed: bool,
    received: u64,
    sent: u64,
}

impl Shared {
    fn wake_driver(&self) {
        if let Some(waker) = lock(&self.driver).take() {
            waker.wake();
        }
    }

    /// Keep the first error of the connection.
    fn record(&self, origin: ErrorOrigin, position: u64, error: io::Error) {
        let mut end = lock(&self.end);
        if end.error.is_none() {
            end.error = Some(ConnectionError::new(origin, position, error));
        }
    }

    fn input_ended(&self, peer_closed: bool, received: u64) {
        {
            let mut end = lock(&self.end);
            end.peer_closed = peer_closed;
            end.received = received;
        }
        self.input_done.store(true, Ordering::Release);
        self.wake_driver();
    }

    fn output_ended(&self, sent: u64) {
        lock(&self.end).sent = sent;
        self.output_done.store(true, Ordering::Release);
        self.wake_driver();
    }

    fn register_driver(&self, cx: &mut Context<'_>) {
        let mut slot = lock(&self.driver);
        match &*slot {
            Some(waker) if waker.will_wake(cx.waker()) => {}
            _ => *slot = Some(cx.waker().clone()),
        }
    }

    /// A flush's write: what the stream takes now; the rest (and a shutdown that cannot be done
    /// at once) is left to the connection's future, which is woken for it.
    fn deliver(&self, finish: bool) {
        let pending = lock(&self.output).drive(self, None).is_pending();
        if pending || finish {
            self.wake_driver();
        }
    }
}

impl InlineState for Shared {
    fn poll_output(&self, cx: &mut Context<'_>, closed: bool) -> Poll<()> {
        self.register_driver(cx);
        let drained = if self.output_done.load(Ordering::Acquire) {
            Poll::Ready(())
        } else {
            lock(&self.output).drive(self, Some(cx))
        };
        if self.output_done.load(Ordering::Acquire) || (!closed && drained.is_ready()) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    fn poll_drive(&self, cx: &mut Context<'_>) -> Poll<Result<ConnectionEnd, ConnectionError>> {
        self.register_driver(cx);
        if !self.output_done.load(Ordering::Acquire) {
            let _ = lock(&self.output).drive(self, Some(cx));
        }
        if self.input_done.load(Ordering::Acquire) && self.output_done.load(Ordering::Acquire) {
            let mut end = lock(&self.end);
            return Poll::Ready(match end.error.take() {
                Some(error) => Err(error),
                None => Ok(ConnectionEnd {
                    peer_closed: end.peer_closed,
                    received: end.received,
                    sent: end.sent,
                }),
            });
        }
        Poll::Pending
    }

    fn abort(&self) {
        if self.input_done.load(Ordering::Acquire) && self.output_done.load(Ordering::Acquire) {
            return;
        }
        self.aborted.store(true, Ordering::SeqCst);
        let aborted = SharedError::new(aborted_error());
        {
            let mut output = lock(&self.output);
            if !output.shut_down {
                output.shut_down = true;
                output.reader.complete_inner(Some(aborted));
            }
        }
        self.reader.wake_reader();
    }
}

fn aborted_error() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "the connection future was dropped before the stream ended",
    )
}

/// The output direction: the output pipe's reader and the stream's write half.
struct Output {
    reader: PipeReader,
    write: Box<dyn WriteSide>,
    max_segments: usize,
    /// Bytes written to the stream: those of the output pipe and those flushes wrote directly.
    sent: u64,
    /// Bytes of the output pipe written (consumed from it): when this is all the application's
    /// writer published, a flush may write its bytes directly.
    from_pipe: u64,
    /// Bytes were written since the stream was last flushed.
    unflushed: bool,
    /// The write side is shut down (or failed, or cut): nothing more is written.
    shut_down: bool,
}

impl Output {
    /// Write what is published; with `cx`, wait (register) for the stream, else stop at the first
    /// write it does not take. After the application's last byte, flush and shut down. `Ready`
    /// when nothing is left to write now (or the direction ended).
    fn drive(&mut self, shared: &Shared, mut cx: Option<&mut Context<'_>>) -> Poll<()> {
        if self.shut_down {
            return Poll::Ready(());
        }
        loop {
            let (completed, written) = match self.reader.try_read() {
                Ok(None) => return Poll::Ready(()),
                Ok(Some(read)) => {
                    let completed = read.is_completed;
                    let buffer = read.buffer;
                    if buffer.is_empty() {
                        (completed, None)
                    } else if self.max_segments <= SMALL_WRITE {
                        let result = write_segments::<SMALL_WRITE>(
                            &buffer,
                            self.max_segments,
                            &mut *self.write,
                            cx.as_deref_mut(),
                        );
                        (completed, Some(result))
                    } else {
                        let result = write_segments::<MAX_WRITE_SEGMENTS>(
                            &buffer,
                            self.max_segments,
                            &mut *self.write,
                            cx.as_deref_mut(),
                        );
                        (completed, Some(result))
                    }
                }
                Err(e) => {
                    // The application completed its writer with an error, after every byte
                    // before it: the peer still sees the end of the stream.
                    shared.record(ErrorOrigin::Output, self.sent, io_error(e));
                    return self.shut_down_write(shared, cx);
                }
            };
            match written {
                None if completed => return self.shut_down_write(shared, cx),
                None => {
                    let _ = self.reader.advance_to(0, 0);
                    return Poll::Ready(());
                }
                Some((Ok(n), offered)) if n == 0 || n > offered => {
                    let e = if n == 0 {
                        io::Error::new(
                            io::ErrorKind::WriteZero,
                            "the stream accepted 0 bytes of a non-empty write",
                        )
                    } else {
                        io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!(
                                "the stream reported {n} bytes written, of {offered} it was given"
                            ),
                        )
                    };
                    self.fail(shared, e);
                    return Poll::Ready(());
                }
                Some((Ok(n), _)) => {
                    self.sent += n as u64;
                    self.from_pipe += n as u64;
                    self.unflushed = true;
                    let _ = self.reader.advance_to(n, n);
                }
                Some((Err(e), _)) if e.kind() == io::ErrorKind::WouldBlock => {
                    let _ = self.reader.advance_to(0, 0);
                    return Poll::Pending;
                }
                Some((Err(e), _)) if e.kind() == io::ErrorKind::Interrupted => {
                    let _ = self.reader.advance_to(0, 0);
                }
                Some((Err(e), _)) => {
                    self.fail(shared, e);
                    return Poll::Ready(());
                }
            }
        }
    }

    /// Flush and shut down the write side after the application's last byte.
    fn shut_down_write(&mut self, shared: &Shared, cx: Option<&mut Context<'_>>) -> Poll<()> {
        match cx {
            Some(cx) => self.shut_down_with(shared, cx),
            None => {
                let waker = noop_waker();
                self.shut_down_with(shared, &mut Context::from_waker(&waker))
            }
        }
    }

    fn shut_down_with(&mut self, shared: &Shared, cx: &mut Context<'_>) -> Poll<()> {
        if self.unflushed {
            match self.write.poll_flush(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(())) => self.unflushed = false,
                Poll::Ready(Err(e)) => {
                    self.fail(shared, e);
                    return Poll::Ready(());
                }
            }
        }
        match self.write.poll_shutdown(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(result) => {
                self.shut_down = true;
                // A peer that already closed the connection leaves nothing to shut down.
                if let Err(e) = result {
                    if e.kind() != io::ErrorKind::NotConnected {
                        shared.record(ErrorOrigin::Write, self.sent, e);
                    }
                }
                self.reader.complete();
                shared.output_ended(self.sent);
                Poll::Ready(())
            }
        }
    }

    /// A write failed: the application's writer gets the error on its next flush.
    fn fail(&mut self, shared: &Shared, error: io::Error) {
        let error = SharedError::new(error);
        shared.record(ErrorOrigin::Write, self.sent, error.to_io_error());
        self.shut_down = true;
        self.reader.complete_inner(Some(error));
        shared.output_ended(self.sent);
    }
}

/// Segments of the vectored writes of most connections (the default limit): the slices live on
/// the stack, and a smaller array is less to set up per write.
const SMALL_WRITE: usize = super::DEFAULT_MAX_WRITE_SEGMENTS;

/// One vectored write of up to `max` (at most `N`) segments of `buffer`: what the stream took, and
/// how many bytes it was offered.
#[inline]
fn write_segments<const N: usize>(
    buffer: &crate::pipe::ReadBuffer<'_>,
    max: usize,
    write: &mut dyn WriteSide,
    cx: Option<&mut Context<'_>>,
) -> (io::Result<usize>, usize) {
    let mut slices = [IoSlice::new(&[]); N];
    let n = buffer.io_slices(&mut slices[..max.min(N)]);
    let slices = &slices[..n];
    let offered: usize = slices.iter().map(|s| s.len()).sum();
    let result = match cx {
        None => write.try_write_vectored(slices),
        Some(cx) => match write.poll_write_vectored(cx, slices) {
            Poll::Ready(result) => result,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        },
    };
    (result, offered)
}

/// The application writer's hook: its flushes write the stream.
struct Outbound {
    shared: Arc<Shared>,
}

impl Deliver for Outbound {
    #[inline]
    fn write_now(&mut self, bytes: &[u8], published: u64) -> Option<usize> {
        // Uncontended on one task; a connection future writing at this moment (on another
        // thread) means published bytes are being written: publish behind them.
        let mut output = self.shared.output.try_lock().ok()?;
        if output.shut_down || output.from_pipe != published {
            return None;
        }
        match output.write.try_write_vectored(&[IoSlice::new(bytes)]) {
            Ok(n) if n > 0 && n <= bytes.len() => {
                output.sent += n as u64;
                output.unflushed = true;
                Some(n)
            }
            // Refused (`WouldBlock`), interrupted or failed: published, the output's own drive
            // meets the same condition and handles it (waits for readiness, records the error).
            _ => None,
        }
    }

    #[inline]
    fn reader_idle(&self) -> bool {
        self.shared.input_idle.load(Ordering::Relaxed)
    }

    #[inline]
    fn deliver(&mut self) {
        self.shared.deliver(false);
    }

    fn finish(&mut self) {
        self.shared.deliver(true);
    }
}

/// Bytes of the per-thread scratch a blocking stream is read into while the application holds
/// no byte.
const SCRATCH: usize = 16 * 1024;

thread_local! {
    static SCRATCH_BUF: RefCell<Box<[u8]>> = RefCell::new(vec![0; SCRATCH].into_boxed_slice());
}

/// Most bytes one read asks for when the application waits for a large frame: its own block up
/// to this size, so a big frame arrives in few reads.
const MAX_READ: u64 = 1 << 20;

/// How many bytes the next read should have room for when the reader needs `need` more: the
/// current block's tail is reused if at least half a segment is left; a large frame gets a block
/// its size.
#[inline]
fn read_hint(into: &Fill<'_>, need: u64) -> usize {
    ((into.min_segment_size() / 2).max(1) as u64).max(need.min(MAX_READ)) as usize
}

/// The application reader's hook: its reads read the stream into the reader's own block.
struct Inbound<R, L> {
    read: R,
    layer: L,
    shared: Arc<Shared>,
    received: u64,
    /// The stream ended (or failed): the reader's input is completed.
    ended: bool,
}

impl<R: ReadSide, L: Layer> Inbound<R, L> {
    fn fail(&mut self, into: &mut Fill<'_>, error: io::Error) {
        let shared = SharedError::new(error);
        self.shared
            .record(ErrorOrigin::Read, self.received, shared.to_io_error());
        into.complete_with_shared(shared);
        self.end(false);
    }

    fn end(&mut self, peer_closed: bool) {
        if !self.ended {
            self.ended = true;
            self.shared.input_ended(peer_closed, self.received);
        }
    }

    /// A read brought bytes (or the layer's clean end).
    #[inline]
    fn brought(&mut self, into: &mut Fill<'_>, received: Received) -> Poll<()> {
        if received == Received::Closed {
            into.complete();
            self.end(true);
            return Poll::Ready(());
        }
        if self.shared.input_idle.load(Ordering::Relaxed) {
            self.shared.input_idle.store(false, Ordering::Relaxed);
        }
        Poll::Ready(())
    }

    /// Waiting on the stream: release what an idle connection need not hold.
    fn idle(&mut self, into: &mut Fill<'_>, idle: bool) {
        if into.keeps_blocks_idle() {
            return;
        }
        into.release_unused_buffer();
        if idle {
            self.shared.input_idle.store(true, Ordering::Relaxed);
            // Nothing unconsumed in and (once written) nothing out: the output writer's partly
            // used block goes home too, so a connection waiting for its peer holds none. A
            // writer that parked nothing and never published (its flushes wrote straight to the
            // stream) leaves nothing to release, and the lock is not taken.
            if !self.shared.output_tail.holds_nothing() {
                if let Ok(mut output) = self.shared.output.try_lock() {
                    output.reader.release_writer_block();
                }
            }
        }
    }
}

impl<R: ReadSide, L: Layer> Refill for Inbound<R, L> {
    fn poll_refill(
        &mut self,
        cx: &mut Context<'_>,
        need: u64,
        idle: bool,
        into: &mut Fill<'_>,
    ) -> Poll<()> {
        if self.ended {
            return Poll::Ready(());
        }
        if self.shared.aborted.load(Ordering::SeqCst) {
            into.complete_with_shared(SharedError::new(aborted_error()));
            self.end(false);
            return Poll::Ready(());
        }
        if let Some((n, result)) = self.layer.take_buffered(into, read_hint(into, need)) {
            self.received += n as u64;
            match result {
                Ok(Received::Partial) => {}
                Ok(received) => return self.brought(into, received),
                Err(e) => {
                    self.fail(into, e);
                    return Poll::Ready(());
                }
            }
        }
        loop {
            let hint = read_hint(into, need);
            // A blocking read with nothing unconsumed goes into the scratch unless the reader
            // already holds a block with room: then it reads there and copies nothing.
            let result =
                if L::PLAIN && R::BLOCKING && idle && !into.keeps_blocks_idle() && !into.fits(hint)
                {
                    SCRATCH_BUF.with(|scratch| {
                        let mut scratch = scratch.borrow_mut();
                        match self.read.poll_read(cx, &mut scratch) {
                            Poll::Ready(Ok(n)) if n > 0 && n <= SCRATCH => {
                                match into.write_slice(&scratch[..n]) {
                                    Ok(()) => Poll::Ready(Ok((n, SCRATCH, false))),
                                    Err(e) => Poll::Ready(Err(io_error(e))),
                                }
                            }
                            other => other.map_ok(|n| (n, SCRATCH, false)),
                        }
                    })
                } else {
                    // Readiness first, unless the reader holds no block and nothing unconsumed (a
                    // read after a wait, which gave the block back): then the read goes straight into
                    // a rented block (its own readiness check is the only one), and one that finds
                    // nothing gives the block back before the wait (`idle`). Either way a connection
                    // waiting for its peer holds no block, nor one waiting for the rest of a frame
                    // an empty one.
                    if !R::BLOCKING && (!idle || into.has_block()) {
                        match self.read.poll_ready(cx) {
                            Poll::Ready(Ok(())) => {}
                            Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {
                                continue
                            }
                            Poll::Ready(Err(e)) => {
                                self.fail(into, e);
                                return Poll::Ready(());
                            }
                            Poll::Pending => {
                                self.idle(into, idle);
                                return Poll::Pending;
                            }
                        }
                    }
                    let space = match self.layer.space(into, hint) {
                        Ok(space) => space,
                        Err(e) => {
                            self.fail(into, io_error(e));
                            return Poll::Ready(());
                        }
                    };
                    let len = space.len();
                    self.read.poll_read(cx, space).map_ok(|n| (n, len, true))
                };
            match result {
                Poll::Pending => {
                    self.idle(into, idle);
                    return Poll::Pending;
                }
                Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Poll::Ready(Err(e)) => {
                    self.fail(into, e);
                    return Poll::Ready(());
                }
                Poll::Ready(Ok((0, _, _))) => {
                    match self.layer.end_of_stream() {
                        Ok(()) => {
                            into.complete();
                            self.end(true);
                        }
                        Err(e) => self.fail(into, e),
                    }
                    return Poll::Ready(());
                }
                Poll::Ready(Ok((n, len, in_place))) => {
                    if n > len {
                        self.fail(
                            into,
                            io::Error::new(
                                io::ErrorKind::InvalidData,
                                format!(
                                    "the stream reported {n} bytes read into a {len}-byte buffer"
                                ),
                            ),
                        );
                        return Poll::Ready(());
                    }
                    let received = if in_place {
                        self.layer.received(into, n)
                    } else {
                        Ok(Received::Readable)
                    };
                    self.received += n as u64;
                    match received {
                        Ok(Received::Partial) => continue,
                        Ok(received) => return self.brought(into, received),
                        Err(e) => {
                            self.fail(into, e);
                            return Poll::Ready(());
                        }
                    }
                }
            }
        }
    }

    fn close(&mut self, error: Option<&SharedError>, consumed: u64) {
        if let Some(error) = error {
            self.shared
                .record(ErrorOrigin::Input, consumed, error.to_io_error());
        }
        self.end(false);
    }
}

impl<R, L> Drop for Inbound<R, L> {
    fn drop(&mut self) {
        if !self.ended {
            self.ended = true;
            self.shared.input_ended(false, self.received);
        }
    }
}
