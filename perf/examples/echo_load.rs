//! Load generator for length-delimited echo servers: packetpipe's (`examples/echo_server.rs`,
//! on the epoll transport and, with the `io-uring` feature on Linux, on the io_uring driver)
//! against tokio-util's `Framed` with `LengthDelimitedCodec`, measured in the same run.
//!
//! ```text
//! cargo run --release -p packetpipe-perf --features io-uring --example echo_load -- \
//!     [--connections 1,16,256] [--outstanding 1,16] [--size 64] [--seconds 2] [--warmup 0.5] [--repeats 3] \
//!     [--syscalls] [--tls CERT KEY]
//! ```
//!
//! Each server runs in this process on a thread of its own (a current-thread tokio runtime, as
//! `echo_server` runs it; the io_uring server runs `Driver::run` with `echo_server::serve_pipes`,
//! as `echo_server --transport uring` does, and is stopped with `DriverHandle::shutdown`; where
//! io_uring is unavailable it is left out, with a message); the clients run on the main thread
//! (another current-thread runtime):
//! N connections, each keeping K requests outstanding (a frame of a 4-byte big-endian length and
//! `--size` payload bytes; each echo is checked byte for byte and answered with a new request).
//! Once every connection has been answered, and after a warm-up, for `--seconds`, it measures per
//! configuration and server:
//!
//! - µs per message: the mean round-trip time of a message (sent to echoed);
//! - messages per second;
//! - the server thread's CPU time per message (`/proc/thread-self/schedstat`, read on the server
//!   thread itself: a tokio server answers a request on a channel, the io_uring server on a
//!   control connection, the first it accepts);
//! - the server thread's heap allocations per message (a counting global allocator, per thread:
//!   the clients' allocations are not counted);
//! - with `--syscalls`, the server thread's system calls per message: `perf stat -e
//!   raw_syscalls:sys_enter -t TID` (the tracepoint, counting that thread only), enabled and
//!   disabled through `--control` fifos around the measured interval. It needs `perf` and
//!   tracepoint access (root, or `perf_event_paranoid` <= 1); the tracepoint slows system calls a
//!   little, so measure CPU and time in a run without it.
//!
//! Two tokio-util servers are measured: `forward` (`Framed` split, `StreamExt::forward`: a burst
//! of frames read at once goes out with one write, the batching packetpipe's `FrameWriter::forward`
//! does) and `send` (`framed.send(frame)` per frame, the loop as usually written: a write per
//! frame).
//!
//! With `--tls CERT KEY` (PEM files: the certificate chain, then its private key; build with
//! `--features tls`) every connection is TLS: packetpipe's server accepts with its own
//! `TlsAcceptor` (records opened in place in the reader's blocks) and serves the stream with
//! `echo_server::serve_stream`; the tokio-util servers accept with `tokio-rustls` and serve its
//! stream. Both use the one rustls `ServerConfig` (rustls 0.23, `ring` provider), and the clients
//! `tokio-rustls` with the certificate as their only root. The io_uring servers are left out.
//! The handshakes happen in the warm-up, before the measured interval.
//!
//! It prints one line per run, then a markdown table of the medians over `--repeats` runs
//! (the servers alternate) with the ratios packetpipe / tokio-util (epoll and io_uring). The
//! servers and the clients share the machine's cores; nothing is pinned.

#[path = "../../tests-integration/tests/kit/counting_alloc.rs"]
mod counting_alloc;
#[path = "../../examples/echo_server.rs"]
#[allow(dead_code)] // its `main`
pub mod echo_server;
#[cfg(all(feature = "io-uring", target_os = "linux"))]
#[path = "uring_floor.rs"]
#[allow(dead_code)] // its `main`
mod uring_floor;

use std::cell::Cell;
use std::collections::VecDeque;
use std::io::Read;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use futures::{SinkExt, StreamExt, TryStreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::rustls;
use tokio_util::codec::{Framed, LengthDelimitedCodec};

#[global_allocator]
static GLOBAL: counting_alloc::CountingAlloc = counting_alloc::CountingAlloc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Server {
    /// `examples/echo_server.rs`.
    Packetpipe,
    /// `examples/echo_server.rs --transport uring`: [`echo_server::serve_pipes`] on the io_uring
    /// driver.
    PacketpipeUring,
    /// The least an io_uring echo does (`uring_floor.rs`: no pipe, no codec, the received
    /// buffer sent back), for the driver to be held against.
    UringFloor,
    /// tokio-util, batching as packetpipe does: [`serve_forward`].
    TokioUtilForward,
    /// tokio-util, the common loop: [`serve_send`].
    TokioUtilSend,
}

impl Server {
    fn label(self) -> &'static str {
        match self {
            Server::Packetpipe => "packetpipe",
            Server::PacketpipeUring => "packetpipe io_uring",
            Server::UringFloor => "io_uring floor",
            Server::TokioUtilForward => "`forward`",
            Server::TokioUtilSend => "`send`",
        }
    }
}

pub const SERVERS: [Server; 5] = [
    Server::Packetpipe,
    Server::PacketpipeUring,
    Server::UringFloor,
    Server::TokioUtilForward,
    Server::TokioUtilSend,
];

fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .max_frame_length(1 << 20)
        .new_codec()
}

/// tokio-util's echo with packetpipe's batching: `Framed` split into its stream and sink, every
/// frame forwarded back (`forward` flushes whenever the stream has nothing ready, so a burst of
/// frames read at once goes out with one write, as `FrameWriter::forward` does).
async fn serve_forward<S: AsyncRead + AsyncWrite>(socket: S) -> std::io::Result<()> {
    let (sink, stream) = Framed::new(socket, codec()).split();
    stream.map_ok(BytesMut::freeze).forward(sink).await
}

/// tokio-util's echo as usually written: `send` each frame (a write per frame).
async fn serve_send<S: AsyncRead + AsyncWrite + Unpin>(socket: S) -> std::io::Result<()> {
    let mut framed = Framed::new(socket, codec());
    while let Some(frame) = framed.next().await {
        framed.send(frame?.freeze()).await?;
    }
    Ok(())
}

/// What the server thread has used so far.
#[derive(Clone, Copy, Debug, Default)]
struct Usage {
    allocations: u64,
    cpu_ns: u64,
}

/// The io_uring server's answer on its control connection.
#[cfg(all(feature = "io-uring", target_os = "linux"))]
impl Usage {
    fn to_bytes(self) -> [u8; 16] {
        let mut bytes = [0; 16];
        bytes[..8].copy_from_slice(&self.allocations.to_le_bytes());
        bytes[8..].copy_from_slice(&self.cpu_ns.to_le_bytes());
        bytes
    }

    fn from_bytes(bytes: [u8; 16]) -> Usage {
        Usage {
            allocations: u64::from_le_bytes(bytes[..8].try_into().unwrap()),
            cpu_ns: u64::from_le_bytes(bytes[8..].try_into().unwrap()),
        }
    }
}

fn usage_of_this_thread() -> Usage {
    let allocations = counting_alloc::allocations();
    // The first field of schedstat: nanoseconds on the CPU. Read into a stack buffer, so the
    // reading allocates nothing.
    let mut buf = [0u8; 128];
    let cpu_ns = std::fs::File::open("/proc/thread-self/schedstat")
        .and_then(|mut file| file.read(&mut buf))
        .ok()
        .and_then(|n| {
            std::str::from_utf8(&buf[..n])
                .ok()?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0);
    Usage {
        allocations,
        cpu_ns,
    }
}

/// This thread's id (the `TID` of `/proc/self/task/TID`), for `perf stat -t`.
fn this_thread_id() -> u32 {
    std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|link| link.file_name()?.to_str()?.parse().ok())
        .unwrap_or(0)
}

/// How a server thread is asked for its usage.
enum Control {
    /// A tokio server: a request on a channel, answered by a task on the server's runtime.
    Tokio(mpsc::UnboundedSender<std::sync::mpsc::SyncSender<Usage>>),
    /// The io_uring server: the first connection it accepted; a byte asks, 16 bytes answer
    /// ([`report_usage`]).
    #[cfg(all(feature = "io-uring", target_os = "linux"))]
    Uring {
        stream: std::net::TcpStream,
        stop: Box<dyn FnOnce() + Send>,
        thread: std::thread::JoinHandle<()>,
    },
}

/// A server on its own thread, and a way to ask it for its usage.
pub struct ServerThread {
    addr: SocketAddr,
    /// The server thread's id (`/proc/self/task/TID`).
    tid: u32,
    control: Control,
}

impl ServerThread {
    /// Start `server`, or `None` where it cannot run here (io_uring unavailable).
    pub fn start(server: Server, tls: Option<&Tls>) -> Option<ServerThread> {
        if server == Server::PacketpipeUring {
            return Self::start_uring();
        }
        if server == Server::UringFloor {
            return Self::start_floor();
        }
        let socket = TcpSocket::new_v4().expect("a socket");
        socket.bind("127.0.0.1:0".parse().unwrap()).expect("bind");
        let addr = socket.local_addr().unwrap();
        let (control, mut requests) =
            mpsc::unbounded_channel::<std::sync::mpsc::SyncSender<Usage>>();
        let (listening_tx, listening) = std::sync::mpsc::channel();
        let tls = tls.map(|tls| tls.server.clone());
        std::thread::Builder::new()
            .name(format!("{server:?} echo server"))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                runtime.block_on(async move {
                    tokio::spawn(async move {
                        while let Some(reply) = requests.recv().await {
                            let _ = reply.send(usage_of_this_thread());
                        }
                    });
                    let listener = socket.listen(1024).unwrap();
                    listening_tx.send(this_thread_id()).unwrap();
                    loop {
                        let (stream, _) = listener.accept().await.unwrap();
                        stream.set_nodelay(true).unwrap();
                        if let Some(config) = &tls {
                            drop(tokio::spawn(serve_tls(server, config.clone(), stream)));
                            continue;
                        }
                        match server {
                            Server::Packetpipe => drop(tokio::spawn(echo_server::serve(stream))),
                            Server::TokioUtilForward => drop(tokio::spawn(serve_forward(stream))),
                            Server::TokioUtilSend => drop(tokio::spawn(serve_send(stream))),
                            Server::PacketpipeUring | Server::UringFloor => {
                                unreachable!("started by start_uring and start_floor")
                            }
                        }
                    }
                })
            })
            .unwrap();
        let tid = listening.recv().expect("the server listens");
        Some(ServerThread {
            addr,
            tid,
            control: Control::Tokio(control),
        })
    }

    #[cfg(all(feature = "io-uring", target_os = "linux"))]
    fn start_uring() -> Option<ServerThread> {
        use futures::future::Either;
        use packetpipe::io::uring::Driver;

        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().unwrap();
        let (listening_tx, listening) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("PacketpipeUring echo server".into())
            .spawn(move || {
                // `ECHO_LOAD_URING_TASK_RUN=cooperative|interrupting` measures the driver's
                // fallback modes (default: deferred task work).
                let task_run = match std::env::var("ECHO_LOAD_URING_TASK_RUN").as_deref() {
                    Ok("cooperative") => packetpipe::io::uring::TaskRun::Cooperative,
                    Ok("interrupting") => packetpipe::io::uring::TaskRun::Interrupting,
                    _ => packetpipe::io::uring::TaskRun::Deferred,
                };
                // `ECHO_LOAD_URING_FIXED_FILES=0` accepts into plain descriptors (default: fixed
                // descriptors).
                let fixed_descriptors = !matches!(
                    std::env::var("ECHO_LOAD_URING_FIXED_FILES").as_deref(),
                    Ok("0")
                );
                // `ECHO_LOAD_URING_BUNDLES=0` receives without bundles, a buffer per completion
                // (default: bundles).
                let bundles =
                    !matches!(std::env::var("ECHO_LOAD_URING_BUNDLES").as_deref(), Ok("0"));
                let options = packetpipe::io::uring::DriverOptions {
                    task_run,
                    fixed_descriptors,
                    bundles,
                    ..Default::default()
                };
                let mut driver = match Driver::with_options(options) {
                    Ok(driver) => driver,
                    Err(e) => {
                        eprintln!("io_uring is unavailable ({e}): no io_uring server");
                        listening_tx.send(None).unwrap();
                        return;
                    }
                };
                driver.listen(listener).expect("listen on the driver");
                listening_tx
                    .send(Some((driver.handle(), this_thread_id())))
                    .unwrap();
                let mut first = true;
                driver
                    .run(move |pipe| {
                        if std::mem::take(&mut first) {
                            Either::Left(report_usage(pipe))
                        } else {
                            Either::Right(async {
                                if let Err(e) = echo_server::serve_pipes(pipe).await {
                                    eprintln!("an io_uring echo connection ended with {e}");
                                }
                            })
                        }
                    })
                    .expect("the driver runs");
                let stats = driver.stats();
                eprintln!(
                    "io_uring driver: bundles {}, {} receive completions over {} buffers ({} \
                     spanning several)",
                    stats.bundles,
                    stats.receives,
                    stats.receive_buffers,
                    stats.multi_buffer_receives
                );
            })
            .unwrap();
        let (handle, tid) = listening.recv().expect("the server starts")?;
        Some(Self::with_control_connection(
            addr,
            tid,
            Box::new(move || handle.shutdown()),
            thread,
        ))
    }

    /// The first connection an io_uring server accepts is its control connection: connected,
    /// and answered once, before any client connects.
    #[cfg(all(feature = "io-uring", target_os = "linux"))]
    fn with_control_connection(
        addr: SocketAddr,
        tid: u32,
        stop: Box<dyn FnOnce() + Send>,
        thread: std::thread::JoinHandle<()>,
    ) -> ServerThread {
        let stream = std::net::TcpStream::connect(addr).expect("the control connection");
        stream.set_nodelay(true).unwrap();
        let server = ServerThread {
            addr,
            tid,
            control: Control::Uring {
                stream,
                stop,
                thread,
            },
        };
        server.usage();
        server
    }

    /// The io_uring floor (`uring_floor.rs`) on its own thread.
    #[cfg(all(feature = "io-uring", target_os = "linux"))]
    fn start_floor() -> Option<ServerThread> {
        use std::sync::atomic::{AtomicBool, Ordering};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().unwrap();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let (listening_tx, listening) = std::sync::mpsc::channel();
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("io_uring floor echo server".into())
            .spawn(move || {
                listening_tx.send(this_thread_id()).unwrap();
                if let Err(e) = uring_floor::run(listener, stopped, true, || {
                    usage_of_this_thread().to_bytes()
                }) {
                    eprintln!("the io_uring floor failed: {e}");
                }
            })
            .unwrap();
        let tid = listening.recv().expect("the floor starts");
        Some(Self::with_control_connection(
            addr,
            tid,
            Box::new(move || stop.store(true, Ordering::Relaxed)),
            thread,
        ))
    }

    #[cfg(not(all(feature = "io-uring", target_os = "linux")))]
    fn start_floor() -> Option<ServerThread> {
        None
    }

    #[cfg(not(all(feature = "io-uring", target_os = "linux")))]
    fn start_uring() -> Option<ServerThread> {
        eprintln!("built without the io-uring feature (or not on Linux): no io_uring server");
        None
    }

    /// The server thread's usage so far (blocks this thread for a round trip to the server).
    fn usage(&self) -> Usage {
        match &self.control {
            Control::Tokio(control) => {
                // A bounded channel: its slot is allocated here, so the server's answer allocates
                // nothing on the server thread (an unbounded one allocates on its first send).
                let (tx, rx) = std::sync::mpsc::sync_channel(1);
                control.send(tx).expect("the server thread runs");
                rx.recv().expect("the server thread answers")
            }
            #[cfg(all(feature = "io-uring", target_os = "linux"))]
            Control::Uring { stream, .. } => {
                use std::io::Write;
                let mut stream = stream;
                stream.write_all(&[0]).expect("the control connection");
                let mut answer = [0; 16];
                stream.read_exact(&mut answer).expect("the server answers");
                Usage::from_bytes(answer)
            }
        }
    }

    /// Stop the server (the io_uring driver through `DriverHandle::shutdown`; the tokio servers
    /// end with the process).
    pub fn stop(self) {
        match self.control {
            Control::Tokio(_) => {}
            #[cfg(all(feature = "io-uring", target_os = "linux"))]
            Control::Uring { stop, thread, .. } => {
                stop();
                thread.join().expect("the io_uring server thread");
            }
        }
    }
}

/// The io_uring server's control connection: each byte received is answered with the driver
/// thread's [`Usage`] (measured before anything is written, so the answer's own work is not in
/// it).
#[cfg(all(feature = "io-uring", target_os = "linux"))]
async fn report_usage(mut pipe: packetpipe::io::DuplexPipe) {
    loop {
        let Ok(read) = pipe.reader.read_buffer().await else {
            return;
        };
        let (n, done) = (read.buffer.len(), read.is_completed);
        for _ in 0..n {
            let usage = usage_of_this_thread();
            pipe.writer.write_slice(&usage.to_bytes()).unwrap();
        }
        pipe.reader.advance_to(n, n).unwrap();
        if pipe.writer.flush_pipe().await.is_err() || done {
            return;
        }
    }
}

/// `perf stat` counting one thread's system calls (the `raw_syscalls:sys_enter` tracepoint),
/// started disabled and switched on and off through its control fifo.
struct SyscallCounter {
    perf: std::process::Child,
    control: std::fs::File,
    ack: std::io::BufReader<std::fs::File>,
    dir: std::path::PathBuf,
}

impl SyscallCounter {
    fn start(tid: u32) -> SyscallCounter {
        use std::process::{Command, Stdio};
        let dir = std::env::temp_dir().join(format!("echo_load-perf-{}-{tid}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a directory for perf's fifos");
        for fifo in ["control", "ack"] {
            let status = Command::new("mkfifo")
                .arg(dir.join(fifo))
                .status()
                .expect("mkfifo");
            assert!(status.success(), "mkfifo failed");
        }
        let perf = Command::new("perf")
            .args([
                "stat",
                "-e",
                "raw_syscalls:sys_enter",
                "-x",
                ",",
                "-D",
                "-1",
                "-t",
            ])
            .arg(tid.to_string())
            .arg("--control")
            .arg(format!(
                "fifo:{},{}",
                dir.join("control").display(),
                dir.join("ack").display()
            ))
            .arg("-o")
            .arg(dir.join("out"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("perf (--syscalls needs it)");
        // Opening a fifo waits for its other end: perf's.
        let control = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join("control"))
            .expect("perf's control fifo");
        let ack =
            std::io::BufReader::new(std::fs::File::open(dir.join("ack")).expect("perf's ack fifo"));
        SyscallCounter {
            perf,
            control,
            ack,
            dir,
        }
    }

    fn command(&mut self, command: &str) {
        use std::io::{BufRead, Write};
        writeln!(self.control, "{command}").expect("perf's control fifo");
        let mut line = String::new();
        self.ack.read_line(&mut line).expect("perf's ack");
        // perf writes the string's terminating NUL too.
        let answer = line.trim_matches(|c: char| c == '\0' || c.is_whitespace());
        assert_eq!(answer, "ack", "perf answered {line:?} to {command}");
    }

    /// Stop perf; the system calls it counted while enabled.
    fn finish(mut self) -> u64 {
        let status = std::process::Command::new("kill")
            .args(["-INT", &self.perf.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -INT perf failed");
        self.perf.wait().expect("perf exits");
        let out = std::fs::read_to_string(self.dir.join("out")).expect("perf's output");
        let _ = std::fs::remove_dir_all(&self.dir);
        out.lines()
            .find(|line| line.contains("raw_syscalls:sys_enter"))
            .and_then(|line| line.split(',').next()?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no count in perf's output: {out}"))
    }
}

/// What the clients share.
#[derive(Default)]
struct Tally {
    measuring: Cell<bool>,
    stopping: Cell<bool>,
    messages: Cell<u64>,
    rtt_ns: Cell<u128>,
    /// Connections answered at least once.
    answered: Cell<usize>,
}

/// One connection: keep `k` requests outstanding until told to stop, then collect the rest.
async fn client(
    addr: SocketAddr,
    size: usize,
    k: usize,
    tally: Rc<Tally>,
    tls: Option<tokio_rustls::TlsConnector>,
) -> std::io::Result<()> {
    let socket = TcpStream::connect(addr).await?;
    socket.set_nodelay(true)?;
    match tls {
        None => exchange(socket, size, k, tally).await,
        Some(connector) => {
            let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
            exchange(connector.connect(name, socket).await?, size, k, tally).await
        }
    }
}

/// Keep `k` requests outstanding on `socket` until told to stop, then collect the rest.
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut socket: S,
    size: usize,
    k: usize,
    tally: Rc<Tally>,
) -> std::io::Result<()> {
    let mut frame = (size as u32).to_be_bytes().to_vec();
    frame.extend((0..size).map(|i| (i % 251) as u8));
    let frames = frame.repeat(k);
    let mut sent = VecDeque::with_capacity(k);
    let mut buf = vec![0u8; 64 * 1024];
    let mut offset = 0; // into the frame the next received byte belongs to
    let mut answered = false;
    let now = Instant::now();
    sent.extend(std::iter::repeat(now).take(k));
    socket.write_all(&frames).await?;
    loop {
        if tally.stopping.get() && sent.is_empty() {
            return Ok(());
        }
        let n = socket.read(&mut buf).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let now = Instant::now();
        let mut echoed = 0;
        let mut rest = &buf[..n];
        while !rest.is_empty() {
            let take = rest.len().min(frame.len() - offset);
            assert!(
                rest[..take] == frame[offset..offset + take],
                "the echo differs"
            );
            rest = &rest[take..];
            offset += take;
            if offset == frame.len() {
                offset = 0;
                echoed += 1;
                let sent_at = sent.pop_front().expect("an echo of a request in flight");
                if tally.measuring.get() {
                    tally.messages.set(tally.messages.get() + 1);
                    tally
                        .rtt_ns
                        .set(tally.rtt_ns.get() + (now - sent_at).as_nanos());
                }
            }
        }
        if echoed > 0 && !std::mem::replace(&mut answered, true) {
            tally.answered.set(tally.answered.get() + 1);
        }
        if !tally.stopping.get() && echoed > 0 {
            sent.extend(std::iter::repeat(now).take(echoed));
            socket.write_all(&frames[..echoed * frame.len()]).await?;
        }
    }
}

/// One run's figures.
#[derive(Clone, Copy, Debug)]
pub struct Figures {
    pub us_per_message: f64,
    pub messages_per_s: f64,
    pub cpu_us_per_message: f64,
    pub allocations_per_message: f64,
    /// With `--syscalls`.
    pub syscalls_per_message: Option<f64>,
}

pub fn run(server: &ServerThread, options: &Options, c: usize, k: usize) -> Figures {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut syscalls = options.syscalls.then(|| SyscallCounter::start(server.tid));
    let local = tokio::task::LocalSet::new();
    let (figures, messages) = local.block_on(&runtime, async {
        let tally = Rc::new(Tally::default());
        let clients: Vec<_> = (0..c)
            .map(|_| {
                let tls = options.tls.as_ref().map(|tls| tls.connector.clone());
                tokio::task::spawn_local(client(server.addr, options.size, k, tally.clone(), tls))
            })
            .collect();
        // The warm-up starts once every connection has been answered: a connect whose SYN the
        // listen backlog dropped (256 connections at once overflow std's backlog of 128) is
        // retried a second later, and its set-up (the server's accept and allocations) would
        // otherwise fall into the measured interval.
        let deadline = Instant::now() + Duration::from_secs(30);
        while tally.answered.get() < c {
            assert!(
                Instant::now() < deadline,
                "{} of {c} connections answered after 30 s",
                tally.answered.get()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(options.warmup).await;
        let before = server.usage();
        if let Some(counter) = &mut syscalls {
            counter.command("enable");
        }
        let start = Instant::now();
        tally.measuring.set(true);
        tokio::time::sleep(options.measure).await;
        tally.measuring.set(false);
        let elapsed = start.elapsed();
        if let Some(counter) = &mut syscalls {
            counter.command("disable");
        }
        let after = server.usage();
        tally.stopping.set(true);
        for client in clients {
            client.await.unwrap().expect("a client failed");
        }
        let messages = tally.messages.get().max(1) as f64;
        let figures = Figures {
            us_per_message: tally.rtt_ns.get() as f64 / messages / 1000.0,
            messages_per_s: messages / elapsed.as_secs_f64(),
            cpu_us_per_message: (after.cpu_ns - before.cpu_ns) as f64 / messages / 1000.0,
            allocations_per_message: (after.allocations - before.allocations) as f64 / messages,
            syscalls_per_message: None,
        };
        (figures, messages)
    });
    Figures {
        syscalls_per_message: syscalls.map(|counter| counter.finish() as f64 / messages),
        ..figures
    }
}

pub struct Options {
    pub connections: Vec<usize>,
    pub outstanding: Vec<usize>,
    pub size: usize,
    pub warmup: Duration,
    pub measure: Duration,
    pub repeats: usize,
    /// Count the server thread's system calls (`perf stat`).
    pub syscalls: bool,
    /// `--tls CERT KEY`: every connection over TLS.
    pub tls: Option<Tls>,
}

fn parse_options() -> Result<Options, String> {
    let mut options = Options {
        connections: vec![1, 16, 256],
        outstanding: vec![1, 16],
        size: 64,
        warmup: Duration::from_millis(500),
        measure: Duration::from_secs(2),
        repeats: 3,
        syscalls: false,
        tls: None,
    };
    // Counts of at least 1: 0 connections or 0 outstanding requests measure nothing (and 0
    // outstanding would wait for an echo of nothing).
    let list = |v: &str| -> Result<Vec<usize>, String> {
        v.split(',')
            .map(|n| match n.parse() {
                Ok(0) | Err(_) => Err(format!("not a count of at least 1: {n}")),
                Ok(n) => Ok(n),
            })
            .collect()
    };
    let seconds = |v: &str| -> Result<Duration, String> {
        v.parse::<f64>()
            .map(Duration::from_secs_f64)
            .map_err(|_| format!("not a number of seconds: {v}"))
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "--syscalls" {
            options.syscalls = true;
            continue;
        }
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        if flag == "--tls" {
            let key = args
                .next()
                .ok_or("--tls needs a certificate and a key file (PEM)")?;
            options.tls = Some(Tls::load(&value, &key)?);
            continue;
        }
        match flag.as_str() {
            "--connections" => options.connections = list(&value)?,
            "--outstanding" => options.outstanding = list(&value)?,
            // The echo servers take frames of up to 1 MiB.
            "--size" => match value.parse() {
                Ok(size) if size <= 1 << 20 => options.size = size,
                _ => return Err(format!("--size {value}: 0 to 1048576 bytes")),
            },
            "--seconds" => options.measure = seconds(&value)?,
            "--warmup" => options.warmup = seconds(&value)?,
            "--repeats" => match value.parse() {
                Ok(repeats) if repeats > 0 => options.repeats = repeats,
                _ => return Err(format!("--repeats {value}: at least 1")),
            },
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    Ok(options)
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}

fn main() {
    let options = parse_options().unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(2);
    });
    let servers: Vec<(Server, ServerThread)> = SERVERS
        .into_iter()
        .filter(|server| {
            options.tls.is_none() || !matches!(server, Server::PacketpipeUring | Server::UringFloor)
        })
        .filter_map(|server| Some((server, ServerThread::start(server, options.tls.as_ref())?)))
        .collect();
    println!(
        "echo_load: {}-byte messages{}, {} s measured after {} s warm-up, {} repeats{}",
        options.size,
        if options.tls.is_some() {
            " over TLS (rustls 0.23, ring)"
        } else {
            ""
        },
        options.measure.as_secs_f64(),
        options.warmup.as_secs_f64(),
        options.repeats,
        if options.syscalls {
            ", system calls counted (perf stat -e raw_syscalls:sys_enter -t TID)"
        } else {
            ""
        }
    );
    let mut rows = Vec::new();
    for &c in &options.connections {
        for &k in &options.outstanding {
            let mut runs: Vec<Vec<Figures>> = vec![Vec::new(); servers.len()];
            for repeat in 0..options.repeats {
                for (i, (server, thread)) in servers.iter().enumerate() {
                    let figures = run(thread, &options, c, k);
                    let syscalls = figures
                        .syscalls_per_message
                        .map(|n| format!(", {n:.3} system calls/msg"))
                        .unwrap_or_default();
                    println!(
                        "c={c} K={k} run {repeat} {server:?}: {:.1} us/msg, {:.0} msg/s, \
                         server CPU {:.2} us/msg, {:.3} allocations/msg{syscalls}",
                        figures.us_per_message,
                        figures.messages_per_s,
                        figures.cpu_us_per_message,
                        figures.allocations_per_message
                    );
                    runs[i].push(figures);
                }
            }
            rows.push((c, k, runs));
        }
    }
    let index = |wanted: Server| servers.iter().position(|(server, _)| *server == wanted);
    let baseline = index(Server::TokioUtilForward).expect("the `forward` server runs");
    let send = index(Server::TokioUtilSend).expect("the `send` server runs");
    // The packetpipe servers, each compared with tokio-util's two.
    let ours: Vec<usize> = [
        Server::Packetpipe,
        Server::PacketpipeUring,
        Server::UringFloor,
    ]
    .into_iter()
    .filter_map(index)
    .collect();
    let labels = servers
        .iter()
        .map(|(server, _)| server.label())
        .collect::<Vec<_>>()
        .join(" / ");
    println!();
    println!(
        "Medians over {} runs; ratios are packetpipe / tokio-util, the median of the ratios of \
         runs made back to back. `forward`: tokio-util's `Framed` split, `StreamExt::forward` \
         (one write per burst, as packetpipe); `send`: `framed.send(frame)` per frame. \
         packetpipe: the epoll transport; packetpipe io_uring: the io_uring driver.",
        options.repeats
    );
    println!();
    let mut header = format!("| c | K | µs/msg {labels} |");
    let mut align = String::from("|---:|---:|---:|");
    for &i in &ours {
        let name = servers[i].0.label();
        header += &format!(" µs/msg {name} / `forward` | {name} / `send` |");
        align += "---:|---:|";
    }
    header += &format!(" server CPU µs/msg {labels} |");
    align += "---:|";
    for &i in &ours {
        header += &format!(" CPU {} / `forward` |", servers[i].0.label());
        align += "---:|";
    }
    let floor = index(Server::UringFloor);
    let uring = index(Server::PacketpipeUring);
    if floor.is_some() && uring.is_some() {
        header += " CPU packetpipe io_uring / io_uring floor |";
        align += "---:|";
    }
    header += &format!(" msg/s {labels} | allocations/msg {labels} |");
    align += "---:|---:|";
    if options.syscalls {
        header += &format!(" system calls/msg {labels} |");
        align += "---:|";
    }
    println!("{header}");
    println!("{align}");
    for (c, k, runs) in rows {
        let pick = |i: usize, f: fn(&Figures) -> f64, decimals: usize| -> String {
            let value = median(&mut runs[i].iter().map(f).collect::<Vec<_>>());
            format!("{value:.decimals$}")
        };
        let all = |f: fn(&Figures) -> f64, decimals: usize| -> String {
            (0..servers.len())
                .map(|i| pick(i, f, decimals))
                .collect::<Vec<_>>()
                .join(" / ")
        };
        let ratio = |i: usize, j: usize, f: fn(&Figures) -> f64| -> String {
            let value = median(
                &mut runs[i]
                    .iter()
                    .zip(&runs[j])
                    .map(|(p, t)| f(p) / f(t))
                    .collect::<Vec<_>>(),
            );
            format!("**{value:.2}x**")
        };
        let us = |f: &Figures| f.us_per_message;
        let rate = |f: &Figures| f.messages_per_s;
        let cpu = |f: &Figures| f.cpu_us_per_message;
        let allocs = |f: &Figures| f.allocations_per_message;
        let syscalls = |f: &Figures| f.syscalls_per_message.unwrap_or(f64::NAN);
        let mut row = format!("| {c} | {k} | {} |", all(us, 1));
        for &i in &ours {
            row += &format!(" {} | {} |", ratio(i, baseline, us), ratio(i, send, us));
        }
        row += &format!(" {} |", all(cpu, 2));
        for &i in &ours {
            row += &format!(" {} |", ratio(i, baseline, cpu));
        }
        if let (Some(floor), Some(uring)) = (floor, uring) {
            row += &format!(" {} |", ratio(uring, floor, cpu));
        }
        row += &format!(" {} | {} |", all(rate, 0), all(allocs, 3));
        if options.syscalls {
            row += &format!(" {} |", all(syscalls, 3));
        }
        println!("{row}");
    }
    for (_, thread) in servers {
        thread.stop();
    }
}

/// `--tls CERT KEY`: the servers' rustls configuration and the clients' connector.
pub struct Tls {
    server: Arc<rustls::ServerConfig>,
    connector: tokio_rustls::TlsConnector,
}

impl Tls {
    /// From PEM files: the certificate chain, then its private key.
    pub fn load(cert: &str, key: &str) -> Result<Tls, String> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let certs = CertificateDer::pem_file_iter(cert)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| format!("{cert}: {e}"))?;
        let key = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("{key}: {e}"))?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in &certs {
            roots.add(cert.clone()).map_err(|e| format!("{e}"))?;
        }
        let server = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| format!("{e}"))?;
        let client = rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Tls {
            server: Arc::new(server),
            connector: tokio_rustls::TlsConnector::from(Arc::new(client)),
        })
    }
}

/// A TLS connection to `server`: its own handshake, then the same echo as over TCP.
async fn serve_tls(server: Server, config: Arc<rustls::ServerConfig>, stream: TcpStream) {
    match server {
        #[cfg(feature = "tls")]
        Server::Packetpipe => {
            let acceptor = packetpipe::io::tls::TlsAcceptor::from(config);
            if let Ok(tls) = acceptor.accept(stream).await {
                let _ = echo_server::serve_stream(tls).await;
            }
        }
        #[cfg(not(feature = "tls"))]
        Server::Packetpipe => {
            let _ = (config, stream);
            panic!("packetpipe's TLS server needs the `tls` feature (--features tls)");
        }
        Server::TokioUtilForward | Server::TokioUtilSend => {
            let acceptor = tokio_rustls::TlsAcceptor::from(config);
            if let Ok(tls) = acceptor.accept(stream).await {
                let _ = if server == Server::TokioUtilForward {
                    serve_forward(tls).await
                } else {
                    serve_send(tls).await
                };
            }
        }
        Server::PacketpipeUring | Server::UringFloor => unreachable!("not run over TLS"),
    }
}
