//! Load generator for length-delimited echo servers: packetpipe's (`examples/echo_server.rs`)
//! against tokio-util's `Framed` with `LengthDelimitedCodec`, measured in the same run.
//!
//! ```text
//! cargo run --release --features tokio --example echo_load -- \
//!     [--connections 1,16,256] [--outstanding 1,16] [--size 64] [--seconds 2] [--warmup 0.5] [--repeats 3]
//! ```
//!
//! Each server runs in this process on a thread of its own (a current-thread tokio runtime, as
//! `echo_server` runs it); the clients run on the main thread (another current-thread runtime):
//! N connections, each keeping K requests outstanding (a frame of a 4-byte big-endian length and
//! `--size` payload bytes; each echo is checked byte for byte and answered with a new request).
//! After a warm-up, for `--seconds`, it measures per configuration and server:
//!
//! - µs per message: the mean round-trip time of a message (sent to echoed);
//! - messages per second;
//! - the server thread's CPU time per message (`/proc/thread-self/schedstat`);
//! - the server thread's heap allocations per message (a counting global allocator, per thread:
//!   the clients' allocations are not counted).
//!
//! Two tokio-util servers are measured: `forward` (`Framed` split, `StreamExt::forward`: a burst
//! of frames read at once goes out with one write, the batching packetpipe's `FrameWriter::forward`
//! does) and `send` (`framed.send(frame)` per frame, the loop as usually written: a write per
//! frame). It prints one line per run, then a markdown table of the medians over `--repeats` runs
//! (the servers alternate) with the ratios packetpipe / tokio-util. The servers and the clients
//! share the machine's cores; nothing is pinned.

#[path = "../tests/common/counting_alloc.rs"]
mod counting_alloc;
#[path = "echo_server.rs"]
#[allow(dead_code)] // its `main`
pub mod echo_server;

use std::cell::Cell;
use std::collections::VecDeque;
use std::io::Read;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use futures::{SinkExt, StreamExt, TryStreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::{Framed, LengthDelimitedCodec};

#[global_allocator]
static GLOBAL: counting_alloc::CountingAlloc = counting_alloc::CountingAlloc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Server {
    /// `examples/echo_server.rs`.
    Packetpipe,
    /// tokio-util, batching as packetpipe does: [`serve_forward`].
    TokioUtilForward,
    /// tokio-util, the common loop: [`serve_send`].
    TokioUtilSend,
}

pub const SERVERS: [Server; 3] = [
    Server::Packetpipe,
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
async fn serve_forward(socket: TcpStream) -> std::io::Result<()> {
    socket.set_nodelay(true)?;
    let (sink, stream) = Framed::new(socket, codec()).split();
    stream.map_ok(BytesMut::freeze).forward(sink).await
}

/// tokio-util's echo as usually written: `send` each frame (a write per frame).
async fn serve_send(socket: TcpStream) -> std::io::Result<()> {
    socket.set_nodelay(true)?;
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

/// A server on its own thread, and a way to ask it for its usage.
pub struct ServerThread {
    addr: SocketAddr,
    control: mpsc::UnboundedSender<oneshot::Sender<Usage>>,
}

impl ServerThread {
    pub fn start(server: Server) -> ServerThread {
        let socket = TcpSocket::new_v4().expect("a socket");
        socket.bind("127.0.0.1:0".parse().unwrap()).expect("bind");
        let addr = socket.local_addr().unwrap();
        let (control, mut requests) = mpsc::unbounded_channel::<oneshot::Sender<Usage>>();
        let (listening_tx, listening) = std::sync::mpsc::channel();
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
                    listening_tx.send(()).unwrap();
                    loop {
                        let (stream, _) = listener.accept().await.unwrap();
                        match server {
                            Server::Packetpipe => drop(tokio::spawn(echo_server::serve(stream))),
                            Server::TokioUtilForward => drop(tokio::spawn(serve_forward(stream))),
                            Server::TokioUtilSend => drop(tokio::spawn(serve_send(stream))),
                        }
                    }
                })
            })
            .unwrap();
        listening.recv().expect("the server listens");
        ServerThread { addr, control }
    }

    async fn usage(&self) -> Usage {
        let (tx, rx) = oneshot::channel();
        self.control.send(tx).expect("the server thread runs");
        rx.await.expect("the server thread answers")
    }
}

/// What the clients share.
#[derive(Default)]
struct Tally {
    measuring: Cell<bool>,
    stopping: Cell<bool>,
    messages: Cell<u64>,
    rtt_ns: Cell<u128>,
}

/// One connection: keep `k` requests outstanding until told to stop, then collect the rest.
async fn client(addr: SocketAddr, size: usize, k: usize, tally: Rc<Tally>) -> std::io::Result<()> {
    let mut socket = TcpStream::connect(addr).await?;
    socket.set_nodelay(true)?;
    let mut frame = (size as u32).to_be_bytes().to_vec();
    frame.extend((0..size).map(|i| (i % 251) as u8));
    let frames = frame.repeat(k);
    let mut sent = VecDeque::with_capacity(k);
    let mut buf = vec![0u8; 64 * 1024];
    let mut offset = 0; // into the frame the next received byte belongs to
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
}

pub fn run(server: &ServerThread, options: &Options, c: usize, k: usize) -> Figures {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async {
        let tally = Rc::new(Tally::default());
        let clients: Vec<_> = (0..c)
            .map(|_| tokio::task::spawn_local(client(server.addr, options.size, k, tally.clone())))
            .collect();
        tokio::time::sleep(options.warmup).await;
        let before = server.usage().await;
        let start = Instant::now();
        tally.measuring.set(true);
        tokio::time::sleep(options.measure).await;
        tally.measuring.set(false);
        let elapsed = start.elapsed();
        let after = server.usage().await;
        tally.stopping.set(true);
        for client in clients {
            client.await.unwrap().expect("a client failed");
        }
        let messages = tally.messages.get().max(1) as f64;
        Figures {
            us_per_message: tally.rtt_ns.get() as f64 / messages / 1000.0,
            messages_per_s: messages / elapsed.as_secs_f64(),
            cpu_us_per_message: (after.cpu_ns - before.cpu_ns) as f64 / messages / 1000.0,
            allocations_per_message: (after.allocations - before.allocations) as f64 / messages,
        }
    })
}

pub struct Options {
    pub connections: Vec<usize>,
    pub outstanding: Vec<usize>,
    pub size: usize,
    pub warmup: Duration,
    pub measure: Duration,
    pub repeats: usize,
}

fn parse_options() -> Result<Options, String> {
    let mut options = Options {
        connections: vec![1, 16, 256],
        outstanding: vec![1, 16],
        size: 64,
        warmup: Duration::from_millis(500),
        measure: Duration::from_secs(2),
        repeats: 3,
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
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
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
    let servers = SERVERS.map(|server| (server, ServerThread::start(server)));
    println!(
        "echo_load: {}-byte messages, {} s measured after {} s warm-up, {} repeats",
        options.size,
        options.measure.as_secs_f64(),
        options.warmup.as_secs_f64(),
        options.repeats
    );
    let mut rows = Vec::new();
    for &c in &options.connections {
        for &k in &options.outstanding {
            let mut runs: [Vec<Figures>; 3] = Default::default();
            for repeat in 0..options.repeats {
                for (i, (server, thread)) in servers.iter().enumerate() {
                    let figures = run(thread, &options, c, k);
                    println!(
                        "c={c} K={k} run {repeat} {server:?}: {:.1} us/msg, {:.0} msg/s, \
                         server CPU {:.2} us/msg, {:.3} allocations/msg",
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
    println!();
    println!(
        "Medians over {} runs; ratios are packetpipe / tokio-util, the median of the ratios of \
         runs made back to back. `forward`: tokio-util's `Framed` split, `StreamExt::forward` \
         (one write per burst, as packetpipe); `send`: `framed.send(frame)` per frame.",
        options.repeats
    );
    println!();
    println!("| c | K | µs/msg packetpipe | µs/msg tokio-util `forward` | ratio | µs/msg tokio-util `send` | ratio | msg/s packetpipe / `forward` / `send` | server CPU µs/msg packetpipe / `forward` / `send` | allocations/msg packetpipe / `forward` / `send` |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (c, k, runs) in rows {
        let pick = |i: usize, f: fn(&Figures) -> f64| -> f64 {
            median(&mut runs[i].iter().map(f).collect::<Vec<_>>())
        };
        let ratio = |i: usize, f: fn(&Figures) -> f64| -> f64 {
            median(
                &mut runs[0]
                    .iter()
                    .zip(&runs[i])
                    .map(|(p, t)| f(p) / f(t))
                    .collect::<Vec<_>>(),
            )
        };
        let us = |f: &Figures| f.us_per_message;
        let rate = |f: &Figures| f.messages_per_s;
        let cpu = |f: &Figures| f.cpu_us_per_message;
        let allocs = |f: &Figures| f.allocations_per_message;
        println!(
            "| {c} | {k} | {:.1} | {:.1} | **{:.2}x** | {:.1} | **{:.2}x** | {:.0} / {:.0} / {:.0} | {:.2} / {:.2} / {:.2} | {:.3} / {:.3} / {:.3} |",
            pick(0, us),
            pick(1, us),
            ratio(1, us),
            pick(2, us),
            ratio(2, us),
            pick(0, rate),
            pick(1, rate),
            pick(2, rate),
            pick(0, cpu),
            pick(1, cpu),
            pick(2, cpu),
            pick(0, allocs),
            pick(1, allocs),
            pick(2, allocs),
        );
    }
}
