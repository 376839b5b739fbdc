//! An io_uring driver: one ring serves many TCP connections on one thread, and the kernel
//! receives straight into pooled blocks.
//!
//! - **Accept**: one multishot accept per listener, into fixed (direct) descriptors where the
//!   kernel has them ([`DriverOptions::fixed_descriptors`]): each accepted socket lives in a slot
//!   of a table registered with the ring, and every later operation names the slot, so no
//!   process descriptor is made per connection and the kernel looks no descriptor up per
//!   operation.
//! - **Receive**: one multishot receive per connection, from a provided-buffer ring whose
//!   buffers are pooled blocks (`buf_ring.rs`): each completion's bytes are sealed into a
//!   [`Packet`] per buffer and handed to the connection's reader, no copy (`inbox.rs`). With receive
//!   bundles ([`DriverOptions::bundles`]) one completion may fill several buffers, when more is
//!   waiting in the socket than one buffer holds.
//! - **Send**: one `SENDMSG` per connection at a time. A flush with nothing published still
//!   unsent hands its bytes to the connection's outbox as one packet, no pipe publication
//!   between the application's flush and the send (`outbox.rs`); packets the application
//!   appends go through the output pipe. A send names the outbox's packets first, then the
//!   pipe's flushed segments, and what the socket took is dropped (or consumed) at its
//!   completion.
//! - **One system call per loop turn**: every submission of a turn (sends, re-armed receives,
//!   cancellations) goes to the kernel in the `io_uring_enter` that also waits for the next
//!   completions.
//! - **Task work in batches**: the ring is set up for one issuer with deferred task work
//!   ([`TaskRun::Deferred`]) where the kernel has it, so the kernel's completion work (posting
//!   completions, moving received bytes into buffers) runs inside that wait, in one batch, instead
//!   of interrupting the thread while it serves connections.
//!
//! Each accepted connection gives the application a [`DuplexPipe`], and `serve` (the closure
//! given to [`Driver::run`]) turns it into a future that the driver polls on its own thread,
//! woken by the pipes: serve the connection there (inline: no thread hop between the kernel's
//! completion and the parser), or send the pipe to another thread or task and return at once
//! (the inbox's and the outbox's locks and the output pipe's cross-thread path then carry the
//! bytes, and their wakes reach this thread through an eventfd the ring reads).
//!
//! ```no_run
//! use packetpipe::io::uring::Driver;
//!
//! let mut driver = Driver::new()?; // an error if io_uring is unavailable
//! driver.listen(std::net::TcpListener::bind("127.0.0.1:7000")?)?;
//! driver.run(|mut pipe| async move {
//!     // Echo: hand every received segment to the output, without copying it.
//!     while let Ok(read) = pipe.reader.read_buffer().await {
//!         let (n, done) = (read.buffer.len(), read.is_completed);
//!         for chunk in read.buffer.segments() {
//!             pipe.writer.write_slice(chunk).unwrap();
//!         }
//!         pipe.reader.advance_to(n, n).unwrap();
//!         if pipe.writer.flush_pipe().await.is_err() || done {
//!             break;
//!         }
//!     }
//! })?;
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! # Flow control and faults
//!
//! | event | effect |
//! |---|---|
//! | the bytes the reader has not taken reach the input's pause threshold (a slow application) | that connection's receive is cancelled; it is re-armed once the reader has taken the input down to the resume threshold |
//! | the fixed-descriptor table is full (`ENFILE`; or the process's table, `EMFILE`, with plain descriptors) | counted ([`DriverStats::table_full`]); the listener accepts again once a connection closes (or after a backoff), while new clients wait in the listen backlog |
//! | an accept fails otherwise | counted ([`DriverStats::accept_errors`]); the listener accepts again after a backoff (1 ms, doubling up to 1 s while it keeps failing), never in a loop |
//! | the buffer ring is empty (`ENOBUFS`) | the receive is re-armed once buffers are offered again; the bytes wait in the socket, none is lost |
//! | the peer closes | the application's reader completes after the last byte |
//! | a receive error (a reset) | the application's reader gets it after the bytes before it |
//! | a send error | the application's writer gets it on its next flush |
//! | the application completes (or drops) its writer | the last bytes are sent, then the write side is shut down |
//! | [`DriverHandle::shutdown`] | every operation is cancelled, every pipe completes with `ConnectionAborted`, every socket is closed, every block goes back to its pool, and [`Driver::run`] returns |
//!
//! A connection is closed once its input has ended (the peer's end, an error, or the
//! application dropping its reader), its output has been sent and shut down, and `serve`'s
//! future has returned.
//!
//! Where io_uring is unavailable (an old kernel, a seccomp filter, `kernel.io_uring_disabled`),
//! [`Driver::new`] returns the setup's error; fall back to the epoll transports
//! ([`io::tokio::connection`](crate::io::tokio::connection)).

mod buf_ring;
mod inbox;
mod outbox;
mod ring;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use self::buf_ring::BufRing;
use self::inbox::{Inbox, Receive, WakeReader};
use self::outbox::Outbox;
use self::ring::Enter;
pub use self::ring::TaskRun;
use super::connection::{ConnectionOptions, DuplexPipe};
use crate::packet::Packet;
use crate::pipe::{local_reader, pipe_with, PipeReader};

/// Settings of a [`Driver`]: plain data, built with struct update syntax so that a configuration
/// keeps compiling when fields are added.
///
/// ```no_run
/// use packetpipe::io::uring::{Driver, DriverOptions};
///
/// let driver = Driver::with_options(DriverOptions {
///     ring_entries: 1024,
///     buffers: 512,
///     buffer_size: 16 * 1024,
///     ..Default::default()
/// })?;
/// # drop(driver);
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// `task_run`, `register_ring`, `incremental`, `bundles` and `fixed_descriptors` ask for kernel
/// features the driver falls back from where the kernel lacks them; setting them lower forces the
/// fallback (CI runs the driver's tests on each). Under a tool that serializes threads and may
/// delay the eventfd wakes of other threads (valgrind), set the environment variable
/// `PACKETPIPE_UNDER_VALGRIND`: each wait for completions is then bounded to 1 ms, so the driver
/// still looks at its wake queue.
#[derive(Clone, Debug)]
pub struct DriverOptions {
    /// Submission queue entries (the completion queue has four times as many): at least what
    /// one loop turn submits, about one per active connection. Default 1024.
    pub ring_entries: u32,
    /// How the kernel runs the ring's completion work: the most the driver asks for, falling
    /// back to the next where the kernel lacks it ([`DriverStats::task_run`] says what it got).
    /// Default [`TaskRun::Deferred`].
    pub task_run: TaskRun,
    /// Register the ring's descriptor for the driver's thread (`IORING_REGISTER_RING_FDS`, Linux
    /// 5.18), so that each `io_uring_enter` names it by index and the kernel does not look the
    /// descriptor up every time. Default `true`, used where the kernel has it
    /// ([`DriverStats::registered_ring`] says whether it is in use).
    pub register_ring: bool,
    /// Receive buffers in the provided-buffer ring, shared by every connection of the driver (a
    /// power of two up to 32768). Default 256. A ring that runs empty slows receiving down
    /// (`ENOBUFS`: the receive is re-armed once buffers are back); it never loses bytes.
    pub buffers: u16,
    /// Bytes of each receive buffer: a pooled block of at least this size. Default 16 KiB.
    pub buffer_size: usize,
    /// Incremental buffer consumption (`IOU_PBUF_RING_INC`, Linux 6.12): the kernel packs
    /// consecutive receives into one buffer. Without it, the driver offers the rest of a buffer
    /// again after each receive, which packs them too, at one ring entry per receive. Default
    /// `true`, used where the kernel has it ([`DriverStats::incremental`] says which).
    pub incremental: bool,
    /// Receive bundles (`IORING_RECVSEND_BUNDLE`, Linux 6.10): one receive completion may carry
    /// bytes spanning several consecutive buffers of the ring, when more is waiting in the socket
    /// than the buffer at the ring's head holds, instead of one completion (and one pass through
    /// the socket's receive path) per buffer. Each buffer's bytes still become a packet of their
    /// own, in order. Default `true`, used where the kernel has it ([`DriverStats::bundles`] says
    /// which; [`DriverStats::receive_buffers`] counts the buffers the completions spanned): with
    /// small messages, where a receive seldom needs a second buffer, bundles cost no more CPU per
    /// message than one buffer per completion, and with 64 KiB messages on 16 KiB buffers they
    /// take about 7x fewer receive completions for a few percent less CPU per message.
    /// `false` gives each completion one buffer.
    pub bundles: bool,
    /// Accepted sockets as fixed (direct) descriptors: a sparse table of
    /// [`fixed_files`](Self::fixed_files) slots is registered with the ring at start
    /// (`IORING_REGISTER_FILES2`, Linux 5.19), the multishot accept puts each socket in a free
    /// slot (`IORING_FILE_INDEX_ALLOC`), and its receives, sends, shutdown and close name the
    /// slot. The kernel then takes no reference on a process descriptor per operation, and the
    /// process's descriptor table holds no connection at all. Default `true`, used where the
    /// kernel has it ([`DriverStats::fixed_files`] says how many slots, 0 for plain
    /// descriptors); `false` accepts into plain descriptors.
    pub fixed_descriptors: bool,
    /// Slots of the fixed-descriptor table: the most connections one driver has open at once.
    /// 0 (the default) takes the soft limit of `RLIMIT_NOFILE`, clamped to 64..=65536. The
    /// kernel keeps 8 bytes and a bit per slot. It refuses a table larger than `RLIMIT_NOFILE`'s
    /// soft limit (the driver then uses plain descriptors). With the table full, the kernel
    /// accepts a new connection and closes it at once (`ENFILE`, counted in
    /// [`DriverStats::table_full`]); the driver accepts again once a connection closes, and the
    /// clients that came meanwhile wait in the listen backlog. Unused with
    /// `fixed_descriptors: false`.
    pub fixed_files: u32,
    /// `TCP_NODELAY` on accepted sockets: set on the listener given to [`Driver::listen`], from
    /// which Linux copies it to every socket it accepts (a fixed descriptor has no process
    /// descriptor to set it on). Default `true`: request/response traffic should not wait for
    /// Nagle's algorithm.
    pub nodelay: bool,
    /// The pipes of each connection. The input's pool also provides the receive buffers,
    /// and `max_write_segments` bounds a send's iovecs; the input's `min_segment_size` does not
    /// size the receives (`buffer_size` does). `pumped` and `keep_blocks_idle` do not apply: the
    /// kernel receives into the ring's buffers and the driver sends with its own submissions, so
    /// an idle connection holds no block either way; [`Driver::with_options`] rejects `pumped`.
    pub connection: ConnectionOptions,
}

impl Default for DriverOptions {
    fn default() -> DriverOptions {
        DriverOptions {
            ring_entries: 1024,
            task_run: TaskRun::Deferred,
            register_ring: true,
            buffers: 256,
            buffer_size: 16 * 1024,
            incremental: true,
            bundles: true,
            fixed_descriptors: true,
            fixed_files: 0,
            nodelay: true,
            connection: ConnectionOptions::default(),
        }
    }
}

/// What a driver has done, for tests and monitoring.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DriverStats {
    /// How the ring runs its completion work (the best the kernel and the settings allow).
    pub task_run: TaskRun,
    /// Whether `io_uring_enter` names the ring by a registered index.
    pub registered_ring: bool,
    /// Whether the receive buffers are consumed incrementally.
    pub incremental: bool,
    /// Whether receives are bundles (a completion may span several buffers).
    pub bundles: bool,
    /// Slots of the fixed-descriptor table the accepted sockets go into; 0 when they are plain
    /// descriptors (turned off, or the kernel refused the table).
    pub fixed_files: u32,
    /// Accepts refused because the descriptor table was full: the fixed table (`ENFILE`: the
    /// kernel accepted the connection and closed it), or with plain descriptors the process's or
    /// the system's (`EMFILE`, `ENFILE`: the connection waits in the backlog).
    pub table_full: u64,
    /// Accepts that failed otherwise (each followed by a backoff before the next).
    pub accept_errors: u64,
    /// Connections accepted.
    pub accepted: u64,
    /// Connections closed (their sockets closed, their pipes completed).
    pub closed: u64,
    /// Receive completions that carried bytes.
    pub receives: u64,
    /// Buffers those completions' bytes went to: one per completion without bundles; with them,
    /// more than `receives` when completions spanned several buffers.
    pub receive_buffers: u64,
    /// Receive completions whose bytes spanned more than one buffer (bundles).
    pub multi_buffer_receives: u64,
    /// Send completions.
    pub sends: u64,
    /// Receives stopped by an empty buffer ring (`ENOBUFS`) and re-armed.
    pub enobufs: u64,
    /// Times a connection's receive was paused because its application lagged behind its
    /// input (backpressure).
    pub paused: u64,
    /// `io_uring_enter` calls.
    pub enters: u64,
    /// Connections open now (accepted and not yet closed).
    pub open: u64,
}

/// A handle that stops a running [`Driver`] from any thread.
#[derive(Clone, Debug)]
pub struct DriverHandle {
    wake: Arc<WakeQueue>,
}

impl DriverHandle {
    /// Ask the driver to shut down: [`Driver::run`] cancels everything, closes every socket and
    /// returns.
    pub fn shutdown(&self) {
        self.wake.stop.store(true, Ordering::SeqCst);
        self.wake.kick();
    }
}

/// One ring serving many connections on the calling thread; see the [module docs](self).
pub struct Driver {
    // Field order is drop order: the ring's fd closes (the kernel tearing down what is left)
    // before the buffers and connections it could still write into are freed; `Drop` makes sure
    // nothing is in flight by then.
    /// How `io_uring_enter` names the ring: first, so that a registration is given back before
    /// the ring's descriptor closes.
    enter: Enter,
    ring: IoUring,
    bufs: BufRing,
    listeners: Vec<Listener>,
    conns: Vec<Slot>,
    free: Vec<u32>,
    live: usize,
    /// Operations submitted and not yet completed for good (a multishot counts until its last
    /// completion).
    in_flight: usize,
    wake: Arc<WakeQueue>,
    /// The eventfd read's buffer, written by the kernel while that read is in flight.
    wake_buf: Box<u64>,
    wake_armed: bool,
    /// Connections to look at this turn (woken, or with new completions).
    ready: VecDeque<u64>,
    /// A connection's receive waits for a buffer the pool did not give: each turn retries.
    starving: bool,
    cqes: Vec<(u64, i32, u32)>,
    /// The packets of one receive completion (one per buffer it spanned), kept for its capacity.
    spanned: Vec<Packet>,
    /// Receives are bundles.
    bundles: bool,
    options: ConnectionOptions,
    /// Accepted sockets are fixed descriptors (a table is registered).
    fixed: bool,
    nodelay: bool,
    wait_timeout: Option<Duration>,
    stats: DriverStats,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("connections", &self.live)
            .field("in_flight", &self.in_flight)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

struct Listener {
    socket: TcpListener,
    armed: bool,
    /// Accepts failed in a row: the backoff before the next doubles with each.
    failures: u32,
    /// After a failed accept: not re-armed before this instant...
    retry_at: Option<Instant>,
    /// ...unless the descriptor table was full and a connection has closed since (the
    /// driver's `stats.closed` then passes this count).
    retry_on_close: Option<u64>,
}

/// The longest wait before re-arming an accept that keeps failing.
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// How a connection's socket is named to the kernel.
enum Socket {
    /// A process descriptor, closed when dropped.
    Plain(OwnedFd),
    /// A slot of the ring's fixed-descriptor table, closed with an `IORING_OP_CLOSE` on it.
    Fixed(u32),
}

/// Build an operation on a connection's socket, which names it by descriptor or by slot
/// (`types::Fd` and `types::Fixed` are different types).
macro_rules! on_socket {
    ($socket:expr, |$target:ident| $build:expr) => {
        match $socket {
            Socket::Plain(ref fd) => {
                let $target = types::Fd(fd.as_raw_fd());
                $build
            }
            Socket::Fixed(slot) => {
                let $target = types::Fixed(slot);
                $build
            }
        }
    };
}

/// A connection's place in the table; `generation` tells a late completion for an earlier
/// occupant from one for this connection.
struct Slot {
    generation: u32,
    conn: Option<Box<Conn>>,
}

type AppFuture = Pin<Box<dyn Future<Output = ()>>>;

/// `serve` of [`Driver::run`], boxing its futures.
type Serve<'a> = dyn FnMut(DuplexPipe) -> AppFuture + 'a;

/// One connection's state. Boxed: the kernel holds pointers into `send` while a send is in
/// flight, and the box does not move when the table grows.
struct Conn {
    socket: Socket,
    /// Where received packets go: the application's reader takes them when it needs more.
    inbox: Inbox,
    /// What the receive completions brought since the connection was last serviced: the
    /// service delivers it to the inbox (packets, their bytes, the input's end).
    arrived: VecDeque<Packet>,
    arrived_bytes: usize,
    arrived_end: Option<Option<io::Error>>,
    /// What to send: the packets the application's flushes handed over (`outbox.rs`), then what
    /// it published into the output pipe (the application holds the writer).
    outbox: Outbox,
    output: PipeReader,
    /// The output pipe's last read found nothing (its wake registered): until it has news
    /// (`PipeReader::is_quiet`), it is not read again.
    output_waits: bool,
    app: Option<AppFuture>,
    /// Wakes the application's future: the waker it is polled with.
    app_wake: Arc<ConnWaker>,
    app_waker: Waker,
    /// Wakes the driver's own interest in this connection: the input's flush (the application
    /// read input) and the output's read (the application flushed output).
    io_wake: Arc<ConnWaker>,
    io_waker: Waker,
    /// The connection is in the driver's ready list (queued once per turn at most).
    ready: bool,
    /// The current receive (tagged `recv_tag` in its user data) is queued or running: the
    /// connection receives, or will once the kernel takes the submission.
    recv_armed: bool,
    /// Tag of the current receive; a receive cancelled and replaced keeps its old tag, so its
    /// last completion does not end the receive armed after it.
    recv_tag: u8,
    /// Tags of the receives queued or in flight, cancelled ones included, each until its last
    /// completion (one bit per tag, so every receive in flight has a tag of its own). The
    /// socket is closed only when this is empty and no send (nor shutdown) is in flight: a
    /// submission names the descriptor or fixed slot by its number, which the kernel looks up
    /// when it takes the submission, and which the next socket opened (or accepted into the
    /// table) gets once it is closed. A receive still queued when its connection closed would
    /// receive another connection's bytes.
    recvs: u32,
    /// The reader lags by the input's pause threshold: do not receive until it catches up.
    recv_paused: bool,
    /// The receive was stopped by `ENOBUFS`: re-arm when buffers are back.
    recv_starved: bool,
    input_done: bool,
    /// A send is in flight: `send` and the output's buffered segments belong to it. Also set
    /// while the write side's shutdown of a fixed descriptor is in flight (it names the slot).
    sending: bool,
    output_done: bool,
    /// Made at the first send (a connection that never sent holds none), then reused.
    send: Option<Box<SendBuf>>,
    /// iovecs per send.
    segments: usize,
}

/// A connection's sends: the message header and iovecs, which the kernel reads until a send's
/// completion, and what the sends took from the outbox.
struct SendBuf {
    msg: libc::msghdr,
    iov: Box<[libc::iovec]>,
    /// Packets taken from the outbox and not sent yet; while a send of them is in flight
    /// (`from_outbox`), it names the first of them, which stay here until its completion.
    unsent: VecDeque<Packet>,
    /// The send in flight is of `unsent` (else of the output pipe's segments).
    from_outbox: bool,
    /// Bytes of handed-over packets sent and not yet reported to the outbox.
    outbox_sent: usize,
    /// Bytes of the output pipe sent (consumed) in all.
    pipe_sent: u64,
}

impl SendBuf {
    fn new(segments: usize) -> Box<SendBuf> {
        let empty = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        Box::new(SendBuf {
            // SAFETY: `msghdr` is plain data; all zeros is a header with no address, no control
            // data and no iovecs.
            msg: unsafe { std::mem::zeroed() },
            iov: vec![empty; segments].into_boxed_slice(),
            unsent: VecDeque::new(),
            from_outbox: false,
            outbox_sent: 0,
            pipe_sent: 0,
        })
    }

    /// The socket took `n` bytes of the send that completed.
    fn sent(&mut self, mut n: usize) {
        if !self.from_outbox {
            self.pipe_sent += n as u64;
            return;
        }
        // The iovecs named the first unsent packets.
        self.outbox_sent += n;
        while n > 0 {
            let Some(first) = self.unsent.front_mut() else {
                break;
            };
            if first.len() > n {
                bytes::Buf::advance(first, n);
                break;
            }
            n -= first.len();
            self.unsent.pop_front();
        }
    }
}

/// How long a turn waits before retrying the pool for a starving connection's buffer.
const STARVED_RETRY: Duration = Duration::from_millis(1);

/// Operation kinds in the low 3 bits of a completion's user data (a receive's tag in the 5 bits
/// above them, [`recv_op`]).
const OP_ACCEPT: u64 = 1;
const OP_RECV: u64 = 2;
const OP_SEND: u64 = 3;
const OP_WAKE: u64 = 4;
const OP_CANCEL: u64 = 5;
/// The write side's shutdown of a fixed descriptor.
const OP_SHUTDOWN: u64 = 6;
/// The close of a fixed descriptor's slot.
const OP_CLOSE: u64 = 7;

/// Mask of the operation kind in the low byte.
const OP_MASK: u64 = 0x7;
/// Receive tags: 5 bits, one bit each in [`Conn::recvs`].
const RECV_TAGS: u8 = 32;

/// The low byte of receive `tag`'s user data.
fn recv_op(tag: u8) -> u64 {
    OP_RECV | (u64::from(tag) << 3)
}

/// The tag in a receive's user data.
fn recv_tag_of(user_data: u64) -> u8 {
    ((user_data & 0xff) >> 3) as u8
}

fn user_data(index: u32, generation: u32, op: u64) -> u64 {
    (u64::from(index) << 32) | (u64::from(generation & 0xff_ffff) << 8) | op
}

fn key_of(user_data: u64) -> u64 {
    user_data & !0xff
}

fn index_of(key: u64) -> usize {
    (key >> 32) as usize
}

fn generation_of(key: u64) -> u32 {
    ((key >> 8) & 0xff_ffff) as u32
}

impl Driver {
    /// A driver with the default settings ([`DriverOptions::default()`]): the kernel's error if
    /// io_uring is unavailable.
    pub fn new() -> io::Result<Driver> {
        Driver::with_options(DriverOptions::default())
    }

    /// A driver with the given settings: the kernel's error if io_uring is unavailable.
    ///
    /// # Panics
    ///
    /// If `options.connection.pumped` is set: the driver moves the bytes itself (see
    /// [`DriverOptions::connection`]).
    #[track_caller]
    pub fn with_options(options: DriverOptions) -> io::Result<Driver> {
        assert!(
            !options.connection.pumped,
            "ConnectionOptions::pumped is true, but the io_uring driver moves the bytes itself \
             (the pumped transport needs io::tokio or io::futures)"
        );
        let builder = options;
        let wait_timeout =
            std::env::var_os("PACKETPIPE_UNDER_VALGRIND").map(|_| Duration::from_millis(1));
        let (ring, task_run) = ring::build(builder.ring_entries, builder.task_run)?;
        // A kernel without sparse tables (before 5.19), or a table larger than RLIMIT_NOFILE
        // allows: plain descriptors, and `DriverStats::fixed_files` says 0.
        let fixed_files = match builder.fixed_descriptors {
            true => {
                let slots = match builder.fixed_files {
                    0 => default_fixed_files(),
                    n => n,
                };
                match ring.submitter().register_files_sparse(slots) {
                    Ok(()) => slots,
                    Err(_) => 0,
                }
            }
            false => 0,
        };
        let enter = Enter::new(&ring, builder.register_ring);
        let registered_ring = enter.is_registered();
        let cq_entries = ring.params().cq_entries() as usize;
        let pool = builder.connection.input.resolved_pool();
        let mut bufs = BufRing::new(
            builder.buffers,
            0,
            builder.buffer_size,
            builder.incremental,
            pool,
        )?;
        bufs.register(&ring)?;
        let incremental = bufs.is_incremental();
        // Bundles came with this feature flag (Linux 6.10); a kernel without it would fail each
        // bundle receive with `EINVAL`.
        let bundles = builder.bundles && ring.params().is_feature_recvsend_bundle();
        // SAFETY: `eventfd` takes no pointers; the result is checked before it is owned.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a new descriptor nothing else owns.
        let eventfd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Driver {
            enter,
            ring,
            bufs,
            listeners: Vec::new(),
            conns: Vec::new(),
            free: Vec::new(),
            live: 0,
            in_flight: 0,
            wake: Arc::new(WakeQueue {
                queue: Mutex::new(Vec::new()),
                pending: AtomicBool::new(false),
                sleeping: AtomicBool::new(false),
                stop: AtomicBool::new(false),
                eventfd,
            }),
            wake_buf: Box::new(0),
            wake_armed: false,
            ready: VecDeque::new(),
            starving: false,
            // As many as the completion queue holds, so that reaping a full queue never grows it
            // (an allocation mid-stream whenever a turn saw more completions than any before).
            cqes: Vec::with_capacity(cq_entries),
            // A completion spans at most every buffer of the ring: up to 1024 buffers, this never
            // grows.
            spanned: Vec::with_capacity(usize::from(builder.buffers).min(1024)),
            bundles,
            options: builder.connection,
            fixed: fixed_files > 0,
            nodelay: builder.nodelay,
            wait_timeout,
            stats: DriverStats {
                task_run,
                registered_ring,
                incremental,
                bundles,
                fixed_files,
                ..DriverStats::default()
            },
        })
    }

    /// Accept connections from `listener` (one multishot accept). Several drivers may accept
    /// from clones of one listener (`TcpListener::try_clone`), one per core. With
    /// [`DriverOptions::nodelay`], sets `TCP_NODELAY` on the listener (its accepted sockets
    /// inherit it).
    pub fn listen(&mut self, listener: TcpListener) -> io::Result<()> {
        listener.set_nonblocking(true)?;
        if self.nodelay {
            set_nodelay(listener.as_raw_fd())?;
        }
        self.listeners.push(Listener {
            socket: listener,
            armed: false,
            failures: 0,
            retry_at: None,
            retry_on_close: None,
        });
        Ok(())
    }

    /// A handle that stops [`run`](Self::run) from another thread.
    pub fn handle(&self) -> DriverHandle {
        DriverHandle {
            wake: self.wake.clone(),
        }
    }

    /// What the driver has done so far, and the connections open now.
    pub fn stats(&self) -> DriverStats {
        DriverStats {
            open: self.live as u64,
            ..self.stats
        }
    }

    /// Serve connections until [`DriverHandle::shutdown`]: `serve` gets each accepted
    /// connection's pipes and returns the future that serves them, polled on this thread.
    /// Returns once every operation is cancelled and every socket closed; an error of the ring
    /// itself ends it early (the connections are shut down the same way).
    pub fn run<F, Fut>(&mut self, mut serve: F) -> io::Result<()>
    where
        F: FnMut(DuplexPipe) -> Fut,
        Fut: Future<Output = ()> + 'static,
    {
        let result = self.serve_until_stopped(&mut |pipe| -> AppFuture { Box::pin(serve(pipe)) });
        let teardown = self.shut_down();
        result.and(teardown)
    }

    fn serve_until_stopped(&mut self, serve: &mut Serve<'_>) -> io::Result<()> {
        while !self.wake.stop.load(Ordering::SeqCst) {
            self.arm_listeners()?;
            self.arm_wake()?;
            self.turn(Some(serve))?;
        }
        Ok(())
    }

    /// One loop turn: submit and wait, then handle every completion and every woken connection.
    fn turn(&mut self, serve: Option<&mut Serve<'_>>) -> io::Result<()> {
        self.take_wakes();
        self.submit_and_wait()?;
        self.take_wakes();
        self.reap();
        let mut serve = serve;
        // `complete` may reap more (a full submission queue), so the length is read each time.
        let mut i = 0;
        while i < self.cqes.len() {
            let (data, res, flags) = self.cqes[i];
            self.complete(data, res, flags, serve.as_deref_mut());
            i += 1;
        }
        self.cqes.clear();
        self.bufs.refill();
        self.retry_starved();
        // Connections woken while this turn serves them (an application that flushed, or woke
        // itself) are served again before the next submission, up to a few rounds.
        for _ in 0..4 {
            if self.ready.is_empty() {
                break;
            }
            while let Some(key) = self.ready.pop_front() {
                self.service(key)?;
            }
            self.take_wakes();
        }
        self.retry_starved();
        Ok(())
    }

    /// Submit what this turn queued; wait for a completion unless there is work already.
    fn submit_and_wait(&mut self) -> io::Result<()> {
        self.stats.enters += 1;
        let want = if self.ready.is_empty() && !self.wake_pending() {
            1
        } else {
            0
        };
        // Starving connections: wake up to retry the pool even if nothing completes.
        let mut timeout = match self.starving {
            true => Some(STARVED_RETRY.min(self.wait_timeout.unwrap_or(STARVED_RETRY))),
            false => self.wait_timeout,
        };
        // A listener backing off after a failed accept: wake up to re-arm it.
        if let Some(at) = self.listeners.iter().filter_map(|l| l.retry_at).min() {
            let until = at.saturating_duration_since(Instant::now());
            timeout = Some(timeout.map_or(until, |t| t.min(until)));
        }
        let result = self.enter(want, timeout.filter(|_| want > 0));
        self.wake.sleeping.store(false, Ordering::SeqCst);
        match result {
            Ok(_) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ETIME) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => Ok(()),
            // The completion queue is full: reap first, submit on the next turn.
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Submit the queued entries and wait for `want` completions or `timeout` ([`Enter::enter`]).
    fn enter(&mut self, want: u32, timeout: Option<Duration>) -> io::Result<usize> {
        let queued = self.ring.submission().len() as u32;
        self.enter.enter(queued, want, timeout)
    }

    /// Whether a wake is queued; if not, the next wake writes the eventfd (the driver sleeps).
    fn wake_pending(&self) -> bool {
        self.wake.sleeping.store(true, Ordering::SeqCst);
        let pending =
            self.wake.pending.load(Ordering::SeqCst) || self.wake.stop.load(Ordering::SeqCst);
        if pending {
            self.wake.sleeping.store(false, Ordering::SeqCst);
        }
        pending
    }

    /// Move the cross-thread wake queue into this turn's ready list.
    fn take_wakes(&mut self) {
        if !self.wake.pending.swap(false, Ordering::SeqCst) {
            return;
        }
        let mut queue = lock(&self.wake.queue);
        for key in queue.drain(..) {
            let slot = self.conns.get_mut(index_of(key));
            let Some(slot) = slot.filter(|slot| slot.generation == generation_of(key)) else {
                continue;
            };
            if let Some(conn) = slot.conn.as_deref_mut() {
                if !conn.ready {
                    conn.ready = true;
                    self.ready.push_back(key);
                }
            }
        }
    }

    fn reap(&mut self) {
        for cqe in self.ring.completion() {
            self.cqes.push((cqe.user_data(), cqe.result(), cqe.flags()));
        }
    }

    /// Queue `entry`, submitting first if the submission queue is full; the ring's error if that
    /// submission fails (other than by a full completion queue or a signal).
    fn push(&mut self, entry: squeue::Entry) -> io::Result<()> {
        loop {
            // SAFETY: every entry pushed here points only to memory that stays valid until its
            // completion: a connection's `SendBuf` and the output segments it names (kept until
            // the send completes, see `start_send`), `wake_buf` (boxed, alive while the driver is,
            // which waits for every operation before it is dropped), or nothing. (Receives name
            // buffers by group; `buf_ring.rs` says who owns each.) An entry that names a
            // descriptor or fixed slot names one that stays open until the operation's last
            // completion: a connection is closed only with no receive (`Conn::recvs`) and no
            // send or shutdown (`sending`) queued or in flight, so a number is never reused
            // while an entry names it.
            if unsafe { self.ring.submission().push(&entry) }.is_ok() {
                self.in_flight += 1;
                return Ok(());
            }
            match self.ring.submit() {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                // The completion queue is full: take completions off it (their handling waits
                // for the next turn) so the kernel can post again.
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => self.reap(),
                Err(e) => return Err(e),
            }
        }
    }

    /// Arm the accept of every listener that has none, unless it backs off after a failure.
    fn arm_listeners(&mut self) -> io::Result<()> {
        let mut now = None;
        for i in 0..self.listeners.len() {
            let listener = &mut self.listeners[i];
            if listener.armed {
                continue;
            }
            if listener.retry_at.is_some() || listener.retry_on_close.is_some() {
                let closed_since = listener
                    .retry_on_close
                    .is_some_and(|closed| self.stats.closed > closed);
                let due = listener
                    .retry_at
                    .is_some_and(|at| *now.get_or_insert_with(Instant::now) >= at);
                if !closed_since && !due {
                    continue;
                }
                listener.retry_at = None;
                listener.retry_on_close = None;
            }
            let fd = types::Fd(listener.socket.as_raw_fd());
            // A fixed descriptor has no close-on-exec flag (the kernel refuses one): it is
            // no process descriptor.
            let entry = match self.fixed {
                true => opcode::AcceptMulti::new(fd).allocate_file_index(true),
                false => opcode::AcceptMulti::new(fd).flags(libc::SOCK_CLOEXEC),
            };
            let entry = entry.build().user_data(user_data(i as u32, 0, OP_ACCEPT));
            self.push(entry)?;
            self.listeners[i].armed = true;
        }
        Ok(())
    }

    /// An accept ended with `-errno`: count it and decide when the listener accepts again. A
    /// full descriptor table frees up when a connection closes; any other error backs off, so
    /// that one that persists (the socket no longer listening) does not fail again every turn.
    fn accept_failed(&mut self, index: usize, errno: i32) {
        let listener = &mut self.listeners[index];
        listener.failures = listener.failures.saturating_add(1);
        let backoff = Duration::from_millis(1)
            .saturating_mul(1 << (listener.failures - 1).min(10))
            .min(ACCEPT_BACKOFF_MAX);
        listener.retry_at = Some(Instant::now() + backoff);
        listener.retry_on_close = None;
        let full = errno == libc::ENFILE || errno == libc::EMFILE;
        if !full {
            self.stats.accept_errors += 1;
            return;
        }
        self.stats.table_full += 1;
        listener.retry_on_close = Some(self.stats.closed);
        // The fixed table holds this driver's connections only: while all of them are open, no
        // slot frees but by a close, and an accept armed earlier would only take (and drop)
        // another client from the backlog. With a slot free already (a close queued when the
        // accept failed), the backoff re-arms it.
        if self.fixed && self.live >= self.stats.fixed_files as usize {
            listener.retry_at = None;
        }
    }

    fn arm_wake(&mut self) -> io::Result<()> {
        if !self.wake_armed {
            let buf: *mut u64 = &mut *self.wake_buf;
            let entry = opcode::Read::new(types::Fd(self.wake.eventfd.as_raw_fd()), buf.cast(), 8)
                .build()
                .user_data(OP_WAKE);
            self.push(entry)?;
            self.wake_armed = true;
        }
        Ok(())
    }

    /// Handle one completion.
    fn complete(&mut self, data: u64, res: i32, flags: u32, serve: Option<&mut Serve<'_>>) {
        let more = cqueue::more(flags);
        if !more {
            self.in_flight -= 1;
        }
        match data & OP_MASK {
            OP_ACCEPT => {
                let index = index_of(data);
                self.listeners[index].armed = more;
                if res >= 0 {
                    self.listeners[index].failures = 0;
                    let socket = match self.fixed {
                        // The slot the kernel put the socket in.
                        true => Socket::Fixed(res as u32),
                        // SAFETY: a successful accept's result is a new descriptor that nothing
                        // else owns.
                        false => Socket::Plain(unsafe { OwnedFd::from_raw_fd(res) }),
                    };
                    match serve {
                        Some(serve) => self.open(socket, serve),
                        None => self.close_socket(socket), // shutting down
                    }
                } else if res != -libc::ECANCELED {
                    self.accept_failed(index, -res);
                }
            }
            OP_WAKE => {
                self.wake_armed = false;
            }
            OP_CANCEL | OP_CLOSE => {}
            OP_SHUTDOWN => self.shut(key_of(data)),
            OP_RECV => self.received(data, res, flags, more),
            OP_SEND => self.sent(key_of(data), res),
            _ => {}
        }
    }

    /// Set up an accepted connection and give its pipes to the application.
    fn open(&mut self, socket: Socket, serve: &mut Serve<'_>) {
        self.stats.accepted += 1;
        let index = match self.free.pop() {
            Some(index) => index,
            None => {
                self.conns.push(Slot {
                    generation: 0,
                    conn: None,
                });
                (self.conns.len() - 1) as u32
            }
        };
        let slot = &mut self.conns[index as usize];
        slot.generation = slot.generation.wrapping_add(1) & 0xff_ffff;
        let key = user_data(index, slot.generation, 0);
        let (mut writer, output) = pipe_with(self.options.output.clone());
        // The application's first poll is due: its waker starts notified.
        let app_wake = ConnWaker::new(key, NOTIFIED, &self.wake);
        let app_waker = Waker::from(app_wake.clone());
        let io_wake = ConnWaker::new(key, IDLE, &self.wake);
        let io_waker = Waker::from(io_wake.clone());
        // The reader owns its segments and takes the received packets from the inbox itself.
        let input = &self.options.input;
        let (inbox, source) = Inbox::new(
            io_waker.clone(),
            output.tail_probe().expect("the output pipe is shared"),
            input.pause_threshold,
            input.resume_threshold,
        );
        let mut reader = local_reader(input.clone(), false);
        reader.set_source(Box::new(source));
        // The writer's flushes hand their packets to the outbox while the pipe holds nothing
        // unsent.
        let (outbox, sink) = Outbox::new(self.options.output.pause_threshold, inbox.handle());
        writer.set_sink(Box::new(sink));
        let segments = self
            .options
            .max_write_segments
            .clamp(1, super::MAX_WRITE_SEGMENTS);
        let app = serve(DuplexPipe { reader, writer });
        slot.conn = Some(Box::new(Conn {
            socket,
            inbox,
            arrived: VecDeque::new(),
            arrived_bytes: 0,
            arrived_end: None,
            outbox,
            output,
            output_waits: false,
            app: Some(app),
            app_wake,
            app_waker,
            io_wake,
            io_waker,
            ready: true,
            recv_armed: false,
            recv_tag: 0,
            recvs: 0,
            recv_paused: false,
            recv_starved: false,
            input_done: false,
            sending: false,
            output_done: false,
            send: None,
            segments,
        }));
        self.live += 1;
        self.ready.push_back(key);
    }

    fn conn_mut(&mut self, key: u64) -> Option<&mut Conn> {
        let slot = self.conns.get_mut(index_of(key))?;
        if slot.generation != generation_of(key) {
            return None;
        }
        slot.conn.as_deref_mut()
    }

    /// A receive completion: packets for the connection's reader, or the receive's end.
    fn received(&mut self, data: u64, res: i32, flags: u32, more: bool) {
        let key = key_of(data);
        let mut packets = std::mem::take(&mut self.spanned);
        let taken = match (res, cqueue::buffer_select(flags)) {
            (n, Some(bid)) if n > 0 => {
                self.stats.receives += 1;
                let more = cqueue::buffer_more(flags);
                let taken = self.bufs.take(bid, n as usize, more, &mut packets);
                if let Ok(buffers) = taken {
                    self.stats.receive_buffers += buffers as u64;
                    self.stats.multi_buffer_receives += u64::from(buffers > 1);
                }
                Some(taken)
            }
            _ => None,
        };
        let mut enobufs = false;
        let mut queue = false;
        if let Some(conn) = self.conn_mut(key) {
            if !more {
                // This receive is over. Only the current one's end stops the connection
                // receiving; a cancelled one ends after its replacement may have been armed.
                let tag = recv_tag_of(data);
                conn.recvs &= !(1 << tag);
                if tag == conn.recv_tag {
                    conn.recv_armed = false;
                }
            }
            match taken {
                // After the input's end (the application closed its reader, or a receive
                // failed) they are dropped below.
                Some(Ok(_)) if !conn.input_done => {
                    for packet in packets.drain(..) {
                        conn.arrived_bytes += packet.len();
                        conn.arrived.push_back(packet);
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => fail_input(conn, e),
                None if res == 0 => {
                    conn.arrived_end.get_or_insert(None);
                    conn.input_done = true;
                }
                None if res == -libc::ENOBUFS => {
                    conn.recv_starved = true;
                    enobufs = true;
                }
                None if res == -libc::ECANCELED => {}
                None if res < 0 => fail_input(conn, io::Error::from_raw_os_error(-res)),
                None => {}
            }
            queue = !std::mem::replace(&mut conn.ready, true);
        }
        // Packets of a connection that is gone (or of a failed completion) go back here.
        packets.clear();
        self.spanned = packets;
        if enobufs {
            self.stats.enobufs += 1;
        }
        if queue {
            self.ready.push_back(key);
        }
    }

    /// A send completion: consume what the socket took.
    fn sent(&mut self, key: u64, res: i32) {
        self.stats.sends += 1;
        let Some(conn) = self.conn_mut(key) else {
            return;
        };
        conn.sending = false;
        if res >= 0 {
            let n = res as usize;
            let send = conn.send.as_deref_mut().expect("made by the send");
            send.sent(n);
            // Else the iovecs named the output pipe's first bytes.
            if !send.from_outbox && conn.output.advance_to(n, n).is_err() {
                conn.output_done = true;
            }
        } else {
            let error = io::Error::from_raw_os_error(-res);
            conn.output.complete_with_error(error);
            conn.outbox.close();
            conn.output_done = true;
        }
        if !std::mem::replace(&mut conn.ready, true) {
            self.ready.push_back(key);
        }
    }

    /// The completion of a fixed descriptor's shutdown: the output has ended (an error there
    /// means the peer is gone, which the input learns by itself).
    fn shut(&mut self, key: u64) {
        let Some(conn) = self.conn_mut(key) else {
            return;
        };
        conn.sending = false;
        conn.output_done = true;
        if !std::mem::replace(&mut conn.ready, true) {
            self.ready.push_back(key);
        }
    }

    /// Look at a connection: poll its application if it was woken, deliver input, start a send,
    /// re-arm its receive, close it once everything has ended.
    fn service(&mut self, key: u64) -> io::Result<()> {
        let group = self.bufs.group();
        let bundles = self.bundles;
        let has_buffers = self.bufs.has_buffers();
        let index = index_of(key);
        let Some(conn) = self.conn_mut(key) else {
            return Ok(());
        };
        conn.ready = false;
        // Until the application's poll below, its wakes are recorded, not queued: that poll sees
        // them. Until the driver's own polls after it, the same holds for the driver's wakes (the
        // application flushing its output, or taking what paused the receive).
        let mut app_notified = conn.app_wake.begin();
        let io_notified = conn.io_wake.begin();
        // This service looks at the outbox after the application's poll (or a send in flight
        // brings another): the application's hand-overs need not wake the driver.
        conn.outbox.begin_service();
        // Deliver what the receives brought: the application is polled if its reader waits for
        // it (a reader elsewhere is woken). Packets the reader has not taken at the pause
        // threshold mean the application lags: stop receiving until it takes them (its taking
        // wakes the driver's waker).
        let mut paused = false;
        if conn.arrived_bytes > 0 || conn.arrived_end.is_some() {
            let bytes = std::mem::take(&mut conn.arrived_bytes);
            let end = conn.arrived_end.take();
            let (receive, wake) =
                conn.inbox
                    .deliver(&mut conn.arrived, bytes, end, &conn.app_waker);
            if !conn.input_done {
                paused = conn.follow(receive);
            }
            match wake {
                WakeReader::No => {}
                WakeReader::App => app_notified = true,
                WakeReader::Other(waker) => waker.wake(),
            }
        }
        // From here on the application's wakes queue the connection again (it may wake itself).
        if conn.app_wake.end() || app_notified {
            if let Some(app) = conn.app.as_mut() {
                let mut cx = Context::from_waker(&conn.app_waker);
                if app.as_mut().poll(&mut cx).is_ready() {
                    conn.app = None;
                }
            }
        }
        // And the driver's: every registration they answer is polled again below (the output's
        // read unless a send's completion will bring us back). Its inbox wakes it when the
        // reader took packets the driver paused on, or closed: the application may have done
        // either just now, here or on another thread.
        if (conn.io_wake.end() || io_notified) && !conn.input_done {
            paused |= conn.follow(conn.inbox.receive_state());
        }
        let mut entries: [Option<squeue::Entry>; 2] = [None, None];
        let mut starving = false;
        if conn.input_done || conn.recv_paused {
            if conn.recv_armed {
                let current = user_data(index as u32, generation_of(key), recv_op(conn.recv_tag));
                entries[0] = Some(
                    opcode::AsyncCancel::new(current)
                        .build()
                        .user_data(OP_CANCEL),
                );
                // Completions of the cancelled receive still carry bytes; they are appended.
                conn.recv_armed = false;
            }
        } else if !conn.recv_armed {
            if conn.recv_starved && !has_buffers {
                // Nothing completes for this connection until it receives again: the turns
                // retry the pool until a buffer is offered, then queue it (`retry_starved`).
                starving = true;
            } else if let Some(tag) = conn.free_recv_tag() {
                conn.recv_starved = false;
                conn.recv_armed = true;
                conn.recv_tag = tag;
                conn.recvs |= 1 << tag;
                let data = user_data(index as u32, generation_of(key), recv_op(tag));
                entries[0] = Some(match bundles {
                    true => on_socket!(conn.socket, |socket| opcode::RecvMultiBundle::new(
                        socket, group
                    )
                    .build()
                    .user_data(data)),
                    false => {
                        on_socket!(conn.socket, |socket| opcode::RecvMulti::new(socket, group)
                            .build()
                            .user_data(data))
                    }
                });
            }
            // Else every tag is in flight (cancelled receives end at the submission after their
            // cancel, so this does not happen); the next one's last completion queues the
            // connection again.
        }
        if !conn.sending && !conn.output_done {
            entries[1] = conn.start_send(index as u32, generation_of(key));
        }
        // The reader waits holding nothing: a write buffer the application parked goes home, so
        // that an idle connection holds no block (`inbox.rs`).
        if conn.inbox.reader_idle() && conn.output.writer_block_parked() {
            conn.output.release_writer_block();
        }
        let finished = conn.input_done
            && conn.output_done
            && conn.app.is_none()
            && !conn.sending
            && conn.recvs == 0;
        if paused {
            self.stats.paused += 1;
        }
        self.starving |= starving;
        for entry in entries.into_iter().flatten() {
            self.push(entry)?;
        }
        if finished {
            self.close(index);
        }
        Ok(())
    }

    /// Connections whose receive waits for a buffer: once the pool gives one (the applications
    /// have let go of blocks), queue them to receive again.
    fn retry_starved(&mut self) {
        if !self.starving {
            return;
        }
        self.bufs.refill();
        if !self.bufs.has_buffers() {
            return;
        }
        self.starving = false;
        for (index, slot) in self.conns.iter_mut().enumerate() {
            if let Some(conn) = slot.conn.as_deref_mut() {
                if conn.recv_starved && !conn.ready {
                    conn.ready = true;
                    self.ready
                        .push_back(user_data(index as u32, slot.generation, 0));
                }
            }
        }
    }

    fn close(&mut self, index: usize) {
        if let Some(conn) = self.conns[index].conn.take() {
            let Conn { socket, .. } = *conn; // the pipes complete
            self.close_socket(socket);
            self.live -= 1;
            self.stats.closed += 1;
            self.free.push(index as u32);
        }
    }

    /// Close a socket no operation names any more: a plain descriptor at once; a fixed slot with
    /// a close on the ring, which frees the slot when the kernel takes it (before any accept
    /// submitted after it). Should that submission fail, the ring's teardown closes the slot.
    fn close_socket(&mut self, socket: Socket) {
        match socket {
            Socket::Plain(fd) => drop(fd),
            Socket::Fixed(slot) => {
                let entry = opcode::Close::new(types::Fixed(slot))
                    .build()
                    .user_data(OP_CLOSE);
                let _ = self.push(entry);
            }
        }
    }

    /// Wait until no operation is in flight (shutting down: completions open no connection).
    fn drain(&mut self) -> io::Result<()> {
        while self.in_flight > 0 {
            if let Err(e) = self.enter(1, None) {
                if e.raw_os_error() != Some(libc::EINTR) {
                    return Err(e);
                }
            }
            self.reap();
            let mut i = 0;
            while i < self.cqes.len() {
                let (data, res, flags) = self.cqes[i];
                self.complete(data, res, flags, None);
                i += 1;
            }
            self.cqes.clear();
            self.ready.clear();
        }
        Ok(())
    }

    /// Cancel everything, complete every pipe, close every socket, take the buffer ring back.
    fn shut_down(&mut self) -> io::Result<()> {
        self.wake.stop.store(true, Ordering::SeqCst);
        let aborted = || {
            io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "the io_uring driver shut down",
            )
        };
        for slot in &mut self.conns {
            if let Some(conn) = slot.conn.as_deref_mut() {
                conn.app = None;
                conn.arrived_bytes = 0;
                conn.arrived.clear();
                let end = Some(Some(aborted()));
                let (_, wake) = conn
                    .inbox
                    .deliver(&mut conn.arrived, 0, end, &conn.app_waker);
                if let WakeReader::Other(waker) = wake {
                    waker.wake();
                }
                conn.input_done = true;
            }
        }
        let mut result = Ok(());
        if self.in_flight > 0 {
            let cancel = opcode::AsyncCancel2::new(types::CancelBuilder::any())
                .build()
                .user_data(OP_CANCEL);
            result = self.push(cancel);
        }
        if result.is_ok() {
            result = self.drain();
        }
        if result.is_ok() {
            // No send is in flight now: the output pipes may let go of their segments.
            for index in 0..self.conns.len() {
                if let Some(conn) = self.conns[index].conn.as_deref_mut() {
                    conn.output.complete_with_error(aborted());
                }
                self.close(index);
            }
            // The closes of fixed slots.
            result = self.drain();
        }
        if result.is_ok() {
            result = self.bufs.unregister(&self.ring);
        }
        // Otherwise operations may still be in flight: the connections' send buffers and the
        // ring's blocks stay allocated (`BufRing` and `Drop` leak them rather than free memory
        // the kernel may still use).
        result
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        if self.in_flight > 0 || self.live > 0 {
            if self.shut_down().is_err() {
                // Operations may still be in flight: leak what they could touch.
                std::mem::forget(std::mem::take(&mut self.conns));
                std::mem::forget(std::mem::replace(&mut self.wake_buf, Box::new(0)));
            }
        } else {
            let _ = self.bufs.unregister(&self.ring);
        }
    }
}

impl Conn {
    /// Follow the inbox: pause the receive while the reader lags (packets it has not taken at
    /// the pause threshold; its taking them wakes the driver), stop it once the reader is gone.
    /// Whether the receive pauses now.
    fn follow(&mut self, receive: Receive) -> bool {
        match receive {
            Receive::Open => {
                self.recv_paused = false;
                false
            }
            Receive::Paused => !std::mem::replace(&mut self.recv_paused, true),
            Receive::Closed => {
                self.input_done = true;
                false
            }
        }
    }

    /// The tag after the current one that no receive in flight has.
    fn free_recv_tag(&self) -> Option<u8> {
        (1..=RECV_TAGS)
            .map(|step| (self.recv_tag + step) % RECV_TAGS)
            .find(|&tag| self.recvs & (1 << tag) == 0)
    }

    /// Start a send of the output: the packets the application handed over first, else the
    /// output pipe's flushed segments, if there are any (or shut the write side down once the
    /// output has ended and everything is sent).
    fn start_send(&mut self, index: u32, generation: u32) -> Option<squeue::Entry> {
        // The pipe before the outbox (`outbox.rs`: a packet handed over before bytes this poll
        // sees is in the outbox by the take below). A pipe that found nothing and has no news is
        // not read again: the application's flushes usually hand their bytes to the outbox, and
        // a publication wakes this connection.
        let pipe = if self.output_waits && self.output.is_quiet() {
            Poll::Pending
        } else {
            let mut cx = Context::from_waker(&self.io_waker);
            let pipe = self.output.poll_read_buffer(&mut cx);
            self.output_waits = pipe.is_pending();
            pipe
        };
        if self
            .send
            .as_ref()
            .map_or(true, |send| send.unsent.is_empty())
        {
            let (sent, pipe_sent) = match self.send.as_deref_mut() {
                Some(send) => (std::mem::take(&mut send.outbox_sent), send.pipe_sent),
                None => (0, 0),
            };
            let (send, segments) = (&mut self.send, self.segments);
            // The first packets handed over make the connection's send state.
            self.outbox.take(sent, pipe_sent, || {
                &mut send.get_or_insert_with(|| SendBuf::new(segments)).unsent
            });
        }
        if self
            .send
            .as_ref()
            .is_some_and(|send| !send.unsent.is_empty())
        {
            return Some(self.send_unsent(index, generation));
        }
        self.send_pipe(pipe, index, generation)
    }

    /// A send of the output pipe's flushed segments, if `pipe` (its read) has any (or the
    /// write side's shutdown once the output has ended).
    fn send_pipe(
        &mut self,
        pipe: Poll<Result<(), crate::Error>>,
        index: u32,
        generation: u32,
    ) -> Option<squeue::Entry> {
        match pipe {
            Poll::Pending => None,
            Poll::Ready(Err(_)) => {
                self.output_done = true;
                None
            }
            Poll::Ready(Ok(())) => {
                let read = self.output.last_read()?;
                let buffer = read.buffer;
                if buffer.is_empty() {
                    if read.is_completed {
                        return self.shut_down_writes(index, generation);
                    }
                    return None;
                }
                let segments = self.segments;
                let send = self.send.get_or_insert_with(|| SendBuf::new(segments));
                point_iov(&mut send.msg, &mut send.iov, buffer.segments());
                // The kernel reads `send.msg`, `send.iov` and the segments they name until the
                // send's completion: the segments are the output's unconsumed bytes, which stay
                // in the pipe until `sent` consumes them.
                send.from_outbox = false;
                Some(self.send_msg(index, generation))
            }
        }
    }

    /// A send of the first unsent packets taken from the outbox.
    fn send_unsent(&mut self, index: u32, generation: u32) -> squeue::Entry {
        let send = self.send.as_deref_mut().expect("holds the unsent packets");
        let chunks = send.unsent.iter().map(Packet::as_slice);
        point_iov(&mut send.msg, &mut send.iov, chunks);
        // The kernel reads `send.msg`, `send.iov` and the packets' bytes they name until the
        // send's completion: the packets stay in `unsent` (moved with the deque, their bytes do
        // not move) until `sent` drops what the socket took.
        send.from_outbox = true;
        self.send_msg(index, generation)
    }

    /// The `SENDMSG` of `send`'s message, marking the send in flight.
    fn send_msg(&mut self, index: u32, generation: u32) -> squeue::Entry {
        self.sending = true;
        // `send` is boxed in this connection, which is not freed (nor its `send` replaced) while
        // `sending` is set.
        let send = self.send.as_deref().expect("filled by the caller");
        let msg: *const libc::msghdr = &send.msg;
        let data = user_data(index, generation, OP_SEND);
        on_socket!(self.socket, |socket| opcode::SendMsg::new(socket, msg)
            .flags(libc::MSG_NOSIGNAL as u32)
            .build()
            .user_data(data))
    }

    /// Everything is sent and the output has ended: shut the write side down.
    fn shut_down_writes(&mut self, index: u32, generation: u32) -> Option<squeue::Entry> {
        match self.socket {
            Socket::Plain(ref fd) => {
                // SAFETY: `shutdown` on a descriptor this connection owns.
                unsafe { libc::shutdown(fd.as_raw_fd(), libc::SHUT_WR) };
                self.output_done = true;
                None
            }
            Socket::Fixed(slot) => {
                // The slot has no process descriptor: the ring shuts it down, and the connection
                // stays open until that completes.
                self.sending = true;
                Some(
                    opcode::Shutdown::new(types::Fixed(slot), libc::SHUT_WR)
                        .build()
                        .user_data(user_data(index, generation, OP_SHUTDOWN)),
                )
            }
        }
    }
}

/// Point `msg` at `iov`, and `iov`'s first entries at `chunks` (as many as it holds).
fn point_iov<'a>(
    msg: &mut libc::msghdr,
    iov: &mut [libc::iovec],
    chunks: impl Iterator<Item = &'a [u8]>,
) {
    let mut n = 0;
    for (slot, chunk) in iov.iter_mut().zip(chunks) {
        slot.iov_base = chunk.as_ptr() as *mut libc::c_void;
        slot.iov_len = chunk.len();
        n += 1;
    }
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = n as _;
}

fn fail_input(conn: &mut Conn, error: io::Error) {
    conn.arrived_end.get_or_insert(Some(error));
    conn.input_done = true;
}

/// `TCP_NODELAY` on socket `fd` (a listener: the sockets it accepts inherit it).
fn set_nodelay(fd: RawFd) -> io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: `on` outlives the call and its size is passed; `fd` is a socket we own.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    match rc {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// Slots of a fixed-descriptor table when [`DriverOptions::fixed_files`] is 0: the soft limit of
/// `RLIMIT_NOFILE` (what the process may have open as plain descriptors), clamped to
/// 64..=65536.
fn default_fixed_files() -> u32 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` outlives the call, which writes it.
    let soft = match unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } {
        0 => limit.rlim_cur,
        _ => 1024,
    };
    soft.clamp(64, 65536) as u32
}

/// Wakes from the pipes (on this thread or any other) into the driver's next turn.
#[derive(Debug)]
struct WakeQueue {
    queue: Mutex<Vec<u64>>,
    /// Set after a push: whether the driver should look at `queue` (it skips the lock if not).
    pending: AtomicBool,
    /// The driver is about to wait in `io_uring_enter`: a wake writes the eventfd.
    sleeping: AtomicBool,
    stop: AtomicBool,
    eventfd: OwnedFd,
}

impl WakeQueue {
    /// Queue a connection for the driver's next turn; wake the driver if it sleeps.
    fn push(&self, key: u64) {
        lock(&self.queue).push(key);
        self.pending.store(true, Ordering::SeqCst);
        if self.sleeping.swap(false, Ordering::SeqCst) {
            self.kick();
        }
    }

    fn kick(&self) {
        let one: u64 = 1;
        // SAFETY: writes the 8 bytes of `one`, which outlives the call, to our eventfd.
        unsafe {
            libc::write(
                self.eventfd.as_raw_fd(),
                (&one as *const u64).cast(),
                std::mem::size_of::<u64>(),
            );
        }
    }
}

/// A connection's waker is idle: its next wake queues the connection.
const IDLE: u8 = 0;
/// Woken since the driver last looked (the connection is queued, or its service is under way).
const NOTIFIED: u8 = 1;
/// The driver is servicing the connection and polls what this waker answers afterwards: a wake
/// is recorded (`NOTIFIED`), not queued.
const SERVICING: u8 = 2;

/// A connection's waker (one for its application, one for the driver's registrations on its
/// pipes): queues the connection for the driver's next turn, once until the driver looks at it,
/// and wakes a sleeping driver.
struct ConnWaker {
    key: u64,
    state: AtomicU8,
    queue: Arc<WakeQueue>,
}

impl ConnWaker {
    fn new(key: u64, state: u8, queue: &Arc<WakeQueue>) -> Arc<ConnWaker> {
        Arc::new(ConnWaker {
            key,

            state: AtomicU8::new(state),
            queue: queue.clone(),
        })
    }

    /// The driver starts a service that polls what this waker answers later: wakes from now
    /// until [`end`](Self::end) are recorded only. Whether it was woken before.
    fn begin(&self) -> bool {
        self.state.swap(SERVICING, Ordering::SeqCst) & NOTIFIED != 0
    }

    /// The driver is about to poll what this waker answers: wakes from now on queue the
    /// connection again. Whether a wake came since [`begin`](Self::begin).
    ///
    /// No wake is lost: one that came before this swap is seen by the polls that follow it (the
    /// pipes' state is published before their wake), and one after it queues the connection.
    fn end(&self) -> bool {
        self.state.swap(IDLE, Ordering::SeqCst) & NOTIFIED != 0
    }
}

impl Wake for ConnWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Already notified, or being serviced (the driver polls again): nothing to queue.
        if self.state.fetch_or(NOTIFIED, Ordering::SeqCst) == IDLE {
            self.queue.push(self.key);
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
