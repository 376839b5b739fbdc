//! Load generator for newline-delimited request/response servers: packetpipe's `Framed` with
//! `Lines` against tokio-util's `Framed` with `LinesCodec`, client and servers in one process.
//!
//! ```text
//! cargo run --release -p packetpipe-perf --example lines_load -- \
//!     [--connections 4] [--requests 20000] [--batch 64] [--line 32] [--repeats 7] \
//!     [--only packetpipe-loop|packetpipe-forward|tokio-util-loop|tokio-util-forward]
//! ```
//!
//! Each server is a line server (every request line comes back as its reply) on a thread of its
//! own (a current-thread tokio runtime). Four servers, each written the way its library's docs
//! teach:
//!
//! - `packetpipe loop`: `Framed::new(socket, Lines::new())`, `while let Some(line) =
//!   framed.next().await`, `feed` the reply, `flush` when no further request is ready;
//! - `packetpipe forward`: `Framed::new(..).split()`, `FrameWriter::forward` of the lines;
//! - `tokio-util loop` and `tokio-util forward`: the same two shapes over tokio-util's
//!   `Framed::new(socket, LinesCodec::new())` (`StreamExt::forward` into the sink).
//!
//! The client (the main thread, another current-thread runtime) opens `--connections`
//! connections; each sends `--requests` lines of `--line` bytes (newline included) in writes of
//! `--batch` lines, reads the replies of a batch before it sends the next, and checks every reply
//! byte for byte. Per run and server: requests per second (all connections' requests over the
//! time from the first connect to the last reply) and the server thread's CPU time per request
//! (`/proc/self/task/TID/schedstat`, read before and after). Servers alternate within each
//! repeat; one unmeasured warm-up run each comes first. Prints each run, then the medians and the
//! median ratios packetpipe / tokio-util of runs made back to back. `--only SERVER` makes one run
//! of one server, for a profiler.
//!
//! `e2e_count.rs` includes this file for the servers and the client (`pub(crate)`), to count the
//! servers' instructions under callgrind (`scripts/e2e_instructions.sh`).

use std::net::SocketAddr;
use std::time::Instant;

use futures::{FutureExt, SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Server {
    PacketpipeLoop,
    PacketpipeForward,
    TokioUtilLoop,
    TokioUtilForward,
}

const SERVERS: [Server; 4] = [
    Server::PacketpipeLoop,
    Server::PacketpipeForward,
    Server::TokioUtilLoop,
    Server::TokioUtilForward,
];

impl Server {
    fn name(self) -> &'static str {
        match self {
            Server::PacketpipeLoop => "packetpipe loop",
            Server::PacketpipeForward => "packetpipe forward",
            Server::TokioUtilLoop => "tokio-util loop",
            Server::TokioUtilForward => "tokio-util forward",
        }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// packetpipe, one `Framed`: reply to each line, flush once no further line is ready.
pub(crate) async fn packetpipe_loop(socket: TcpStream) -> Result<(), BoxError> {
    use packetpipe::frame::{Framed, Line, Lines};
    socket.set_nodelay(true)?;
    let mut framed = Framed::new(socket, Lines::new());
    loop {
        let line = match framed.next().now_or_never() {
            Some(line) => line,
            None => {
                SinkExt::<Line>::flush(&mut framed).await?; // nothing more to read now: out with the replies
                framed.next().await
            }
        };
        let Some(line) = line else { break };
        framed.feed(line?).await?;
    }
    SinkExt::<Line>::close(&mut framed).await?;
    Ok(())
}

/// packetpipe, split: the lines forwarded into the writer (a flush whenever none is ready).
async fn packetpipe_forward(socket: TcpStream) -> Result<(), BoxError> {
    use packetpipe::frame::{Framed, Lines};
    socket.set_nodelay(true)?;
    let (mut out, lines) = Framed::new(socket, Lines::new()).split();
    out.forward(lines).await?;
    out.close().await?;
    Ok(())
}

/// tokio-util, one `Framed`: the same loop.
pub(crate) async fn tokio_util_loop(socket: TcpStream) -> Result<(), BoxError> {
    use tokio_util::codec::{Framed, LinesCodec};
    socket.set_nodelay(true)?;
    let mut framed = Framed::new(socket, LinesCodec::new());
    loop {
        let line = match framed.next().now_or_never() {
            Some(line) => line,
            None => {
                SinkExt::<String>::flush(&mut framed).await?;
                framed.next().await
            }
        };
        let Some(line) = line else { break };
        framed.feed(line?).await?;
    }
    SinkExt::<String>::close(&mut framed).await?;
    Ok(())
}

/// tokio-util, split: `StreamExt::forward` into the sink (a flush whenever none is ready).
async fn tokio_util_forward(socket: TcpStream) -> Result<(), BoxError> {
    use tokio_util::codec::{Framed, LinesCodec};
    socket.set_nodelay(true)?;
    let (sink, stream) = Framed::new(socket, LinesCodec::new()).split();
    stream.forward(sink).await?;
    Ok(())
}

/// The thread's CPU time so far, in ns (the first field of schedstat).
fn cpu_ns(tid: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

struct ServerThread {
    addr: SocketAddr,
    tid: String,
}

fn start(server: Server) -> ServerThread {
    let socket = TcpSocket::new_v4().expect("a socket");
    socket.bind("127.0.0.1:0".parse().unwrap()).expect("bind");
    let addr = socket.local_addr().unwrap();
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name(server.name().into())
        .spawn(move || {
            // "/proc/thread-self" links to "PID/task/TID".
            let link = std::fs::read_link("/proc/thread-self").expect("/proc/thread-self");
            let tid = link.file_name().unwrap().to_string_lossy().into_owned();
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = socket.listen(1024).unwrap();
                tid_tx.send(tid).unwrap();
                loop {
                    let (stream, _) = listener.accept().await.unwrap();
                    tokio::spawn(async move {
                        let result = match server {
                            Server::PacketpipeLoop => packetpipe_loop(stream).await,
                            Server::PacketpipeForward => packetpipe_forward(stream).await,
                            Server::TokioUtilLoop => tokio_util_loop(stream).await,
                            Server::TokioUtilForward => tokio_util_forward(stream).await,
                        };
                        if let Err(e) = result {
                            eprintln!("{}: connection ended with {e}", server.name());
                        }
                    });
                }
            })
        })
        .unwrap();
    let tid = tid_rx.recv().expect("the server listens");
    ServerThread { addr, tid }
}

struct Options {
    only: Option<Server>,
    connections: usize,
    requests: usize,
    batch: usize,
    line: usize,
    repeats: usize,
}

/// One connection's requests: `requests` lines of `line` bytes, each numbered.
fn requests(connection: usize, options: &Options) -> Vec<u8> {
    let mut all = Vec::with_capacity(options.requests * options.line);
    for i in 0..options.requests {
        let mut line = format!("{connection} {i} ").into_bytes();
        line.resize(options.line - 1, b'x');
        line.push(b'\n');
        all.extend_from_slice(&line);
    }
    all
}

/// One client connection: a batch out, its replies in and checked, until all are answered.
pub(crate) async fn client(
    addr: SocketAddr,
    requests: &[u8],
    line: usize,
    batch: usize,
) -> std::io::Result<()> {
    let mut socket = TcpStream::connect(addr).await?;
    socket.set_nodelay(true)?;
    let mut reply = vec![0u8; batch * line];
    for chunk in requests.chunks(batch * line) {
        socket.write_all(chunk).await?;
        let reply = &mut reply[..chunk.len()];
        socket.read_exact(reply).await?;
        assert!(reply == chunk, "a reply differs from its request");
    }
    socket.shutdown().await?;
    let mut rest = Vec::new();
    socket.read_to_end(&mut rest).await?;
    assert!(rest.is_empty(), "replies to nothing: {} bytes", rest.len());
    Ok(())
}

#[derive(Clone, Copy)]
struct Figures {
    requests_per_s: f64,
    cpu_ns_per_request: f64,
}

fn run(
    runtime: &tokio::runtime::Runtime,
    server: &ServerThread,
    batches: &[Vec<u8>],
    options: &Options,
) -> Figures {
    let before = cpu_ns(&server.tid);
    let start = Instant::now();
    runtime.block_on(async {
        let clients = batches
            .iter()
            .map(|requests| client(server.addr, requests, options.line, options.batch));
        for result in futures::future::join_all(clients).await {
            result.expect("a client failed");
        }
    });
    let elapsed = start.elapsed();
    // The server's last wake (the close) may still be running: let it finish.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let after = cpu_ns(&server.tid);
    let total = (options.connections * options.requests) as f64;
    Figures {
        requests_per_s: total / elapsed.as_secs_f64(),
        cpu_ns_per_request: (after - before) as f64 / total,
    }
}

fn parse_options() -> Result<Options, String> {
    let mut options = Options {
        only: None,
        connections: 4,
        requests: 20_000,
        batch: 64,
        line: 32,
        repeats: 7,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        if flag == "--only" {
            let server = SERVERS
                .into_iter()
                .find(|s| s.name().replace(' ', "-") == value);
            options.only = Some(server.ok_or(format!("--only {value}: packetpipe-loop, packetpipe-forward, tokio-util-loop or tokio-util-forward"))?);
            continue;
        }
        let n: usize = value
            .parse()
            .map_err(|_| format!("{flag} {value}: not a count"))?;
        if n == 0 {
            return Err(format!("{flag} {value}: at least 1"));
        }
        match flag.as_str() {
            "--connections" => options.connections = n,
            "--requests" => options.requests = n,
            "--batch" => options.batch = n,
            "--line" if n >= 24 => options.line = n,
            "--line" => return Err(format!("--line {n}: at least 24 bytes")),
            "--repeats" => options.repeats = n,
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    Ok(options)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}

fn main() {
    let options = parse_options().unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(2);
    });
    let batches: Vec<Vec<u8>> = (0..options.connections)
        .map(|c| requests(c, &options))
        .collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    if let Some(server) = options.only {
        let thread = start(server);
        let f = run(&runtime, &thread, &batches, &options);
        println!(
            "{}: {:.0} requests/s, server CPU {:.0} ns/request",
            server.name(),
            f.requests_per_s,
            f.cpu_ns_per_request
        );
        return;
    }
    let servers = SERVERS.map(|server| (server, start(server)));
    println!(
        "lines_load: {} connections x {} requests of {} bytes, batches of {}, {} repeats",
        options.connections, options.requests, options.line, options.batch, options.repeats
    );
    for (_, thread) in &servers {
        run(&runtime, thread, &batches, &options); // warm-up
    }
    let mut runs: [Vec<Figures>; 4] = Default::default();
    for repeat in 0..options.repeats {
        for (i, (server, thread)) in servers.iter().enumerate() {
            let figures = run(&runtime, thread, &batches, &options);
            println!(
                "run {repeat} {:<18}: {:>9.0} requests/s, server CPU {:>6.0} ns/request",
                server.name(),
                figures.requests_per_s,
                figures.cpu_ns_per_request
            );
            runs[i].push(figures);
        }
    }
    let rate = |f: &Figures| f.requests_per_s;
    let cpu = |f: &Figures| f.cpu_ns_per_request;
    let ratio = |p: usize, t: usize, f: &dyn Fn(&Figures) -> f64| {
        median(
            runs[p]
                .iter()
                .zip(&runs[t])
                .map(|(a, b)| f(a) / f(b))
                .collect(),
        )
    };
    println!();
    println!(
        "Medians over {} runs; ratios packetpipe / tokio-util of the same shape (loop / loop, \
         forward / forward), the median of the ratios of runs made back to back.",
        options.repeats
    );
    println!();
    println!("| server | requests/s | ratio | server CPU ns/request | ratio |");
    println!("|---|---:|---:|---:|---:|");
    for (i, (server, _)) in servers.iter().enumerate() {
        let base = if i < 2 { Some(i + 2) } else { None };
        let show = |f: &dyn Fn(&Figures) -> f64| match base {
            Some(t) => format!("**{:.2}x**", ratio(i, t, f)),
            None => "1".into(),
        };
        println!(
            "| {} | {:.0} | {} | {:.0} | {} |",
            server.name(),
            median(runs[i].iter().map(rate).collect()),
            show(&rate),
            median(runs[i].iter().map(cpu).collect()),
            show(&cpu),
        );
    }
}
