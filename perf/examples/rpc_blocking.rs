//! Blocking length-prefixed RPC over loopback `std::net::TcpStream`: packetpipe's blocking
//! connection against a plain std server on `BufReader`/`BufWriter`, measured in the same run.
//!
//! ```text
//! cargo run --release -p packetpipe-perf --example rpc_blocking -- [--round-trips 100000] [--size 32] [--repeats 7] [--only packetpipe|std]
//! ```
//!
//! Each server runs on a thread of its own and serves one connection; the client, on the main
//! thread, makes `--round-trips` sequential calls (a 4-byte big-endian length and `--size`
//! payload bytes out, the same frame back, checked byte for byte). Per run: the wall time per
//! round trip (the client's) and the server thread's CPU time per round trip
//! (`/proc/thread-self/schedstat`, from the accept to the end of the connection). The two servers
//! alternate; one unmeasured warm-up run each comes first. Prints each run, then the medians and
//! the median ratios packetpipe / std of runs made back to back. `--only SERVER` (after the other
//! options) makes one run of one server, for a profiler.
//!
//! - `packetpipe`: `io::blocking::connection(tcp)`, `Frames<LengthDelimited>::iter_blocking()`,
//!   `block_on(FrameWriter::send)` of each frame (no thread of the connection's own);
//! - `std`: `BufReader` + `read_exact` of header and payload, `BufWriter` + `write_all` +
//!   `flush`.
//!
//! `e2e_count.rs` includes this file for the two servers (`pub(crate)`), to count their
//! instructions under callgrind (`scripts/e2e_instructions.sh`).

use std::io::{BufReader, BufWriter, ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::time::Instant;

use packetpipe::frame::{FrameWriter, Frames, LengthDelimited};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The calling thread's CPU time so far, in ns (the first field of schedstat).
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

pub(crate) fn serve_packetpipe(tcp: TcpStream) -> Result<(), BoxError> {
    let (app, connection) = packetpipe::io::blocking::connection(tcp);
    let mut frames = Frames::new(app.reader, LengthDelimited::new());
    let mut out = FrameWriter::new(app.writer, LengthDelimited::new());
    for frame in frames.iter_blocking() {
        packetpipe::block_on(out.send(frame?))?;
    }
    drop((frames, out)); // the write side closes after the last byte
    packetpipe::block_on(connection)?;
    Ok(())
}

pub(crate) fn serve_std(tcp: TcpStream) -> Result<(), BoxError> {
    let mut reader = BufReader::new(&tcp);
    let mut writer = BufWriter::new(&tcp);
    let mut header = [0u8; 4];
    let mut payload = Vec::new();
    loop {
        match reader.read_exact(&mut header) {
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => break,
            result => result?,
        }
        payload.resize(u32::from_be_bytes(header) as usize, 0);
        reader.read_exact(&mut payload)?;
        writer.write_all(&header)?;
        writer.write_all(&payload)?;
        writer.flush()?;
    }
    tcp.shutdown(Shutdown::Write)?;
    Ok(())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Server {
    Packetpipe,
    Std,
}

#[derive(Clone, Copy)]
struct Figures {
    wall_ns: f64,
    cpu_ns: f64,
}

fn run(server: Server, round_trips: usize, size: usize) -> Figures {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().unwrap();
    let thread = std::thread::spawn(move || -> Result<u64, BoxError> {
        let (tcp, _) = listener.accept()?;
        tcp.set_nodelay(true)?;
        let start = cpu_ns();
        match server {
            Server::Packetpipe => serve_packetpipe(tcp)?,
            Server::Std => serve_std(tcp)?,
        }
        Ok(cpu_ns() - start)
    });
    let mut tcp = TcpStream::connect(addr).expect("connect");
    tcp.set_nodelay(true).unwrap();
    let mut request = (size as u32).to_be_bytes().to_vec();
    request.extend((0..size).map(|i| (i % 251) as u8));
    let mut reply = vec![0u8; request.len()];
    let start = Instant::now();
    for _ in 0..round_trips {
        tcp.write_all(&request).expect("a request written");
        tcp.read_exact(&mut reply).expect("a reply read");
        assert!(reply == request, "the reply differs");
    }
    let wall = start.elapsed();
    tcp.shutdown(Shutdown::Write).unwrap();
    assert_eq!(
        tcp.read(&mut reply).unwrap(),
        0,
        "bytes after the last reply"
    );
    let cpu = thread.join().unwrap().expect("the server failed");
    Figures {
        wall_ns: wall.as_nanos() as f64 / round_trips as f64,
        cpu_ns: cpu as f64 / round_trips as f64,
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}

fn main() {
    let (mut round_trips, mut size, mut repeats) = (100_000usize, 32usize, 7usize);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "--only" {
            // One server alone, one run, for a profiler (`strace -c -f`, `perf stat`).
            let server = match args.next().as_deref() {
                Some("packetpipe") => Server::Packetpipe,
                Some("std") => Server::Std,
                _ => {
                    eprintln!("--only packetpipe|std");
                    std::process::exit(2)
                }
            };
            let f = run(server, round_trips, size);
            println!(
                "{server:?}: wall {:.2} us/round trip, server CPU {:.2} us/round trip",
                f.wall_ns / 1000.0,
                f.cpu_ns / 1000.0
            );
            return;
        }
        let value: usize = args.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
            eprintln!("{flag} needs a count");
            std::process::exit(2)
        });
        match flag.as_str() {
            "--round-trips" if value > 0 => round_trips = value,
            "--size" if value <= 1 << 20 => size = value,
            "--repeats" if value > 0 => repeats = value,
            _ => {
                eprintln!("{flag} {value}: unknown option or out of range");
                std::process::exit(2)
            }
        }
    }
    println!("rpc_blocking: {round_trips} round trips of {size}-byte payloads, {repeats} repeats");
    let servers = [Server::Packetpipe, Server::Std];
    for server in servers {
        run(server, round_trips / 10, size); // warm-up
    }
    let mut runs: [Vec<Figures>; 2] = Default::default();
    for repeat in 0..repeats {
        for (i, &server) in servers.iter().enumerate() {
            let f = run(server, round_trips, size);
            println!(
                "run {repeat} {server:?}: wall {:.2} us/round trip, server CPU {:.2} us/round trip",
                f.wall_ns / 1000.0,
                f.cpu_ns / 1000.0
            );
            runs[i].push(f);
        }
    }
    let ratio = |f: fn(&Figures) -> f64| {
        median(
            runs[0]
                .iter()
                .zip(&runs[1])
                .map(|(p, s)| f(p) / f(s))
                .collect(),
        )
    };
    let pick = |i: usize, f: fn(&Figures) -> f64| median(runs[i].iter().map(f).collect());
    let wall = |f: &Figures| f.wall_ns / 1000.0;
    let cpu = |f: &Figures| f.cpu_ns / 1000.0;
    println!();
    println!("Medians over {repeats} runs; ratio packetpipe / std, the median of the ratios of runs made back to back.");
    println!();
    println!("| | packetpipe | std `BufReader`/`BufWriter` | ratio |");
    println!("|---|---:|---:|---:|");
    println!(
        "| server CPU µs/round trip | {:.2} | {:.2} | **{:.2}x** |",
        pick(0, cpu),
        pick(1, cpu),
        ratio(cpu)
    );
    println!(
        "| wall µs/round trip | {:.2} | {:.2} | **{:.2}x** |",
        pick(0, wall),
        pick(1, wall),
        ratio(wall)
    );
}
