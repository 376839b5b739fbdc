//! Instructions per request of the blocking RPC and line servers, for
//! `scripts/e2e_instructions.sh`: one server alone in a process (to run under
//! `valgrind --tool=callgrind`), and a client, run natively in another process, that sends a fixed
//! number of requests, checks every reply byte for byte, and exits.
//!
//! ```text
//! cargo build --release -p packetpipe-perf --example e2e_count
//! target/release/examples/e2e_count serve rpc-packetpipe 127.0.0.1:0      # or rpc-std
//! target/release/examples/e2e_count rpc ADDR ROUND_TRIPS SIZE
//! target/release/examples/e2e_count serve lines-packetpipe 127.0.0.1:0    # or lines-tokio-util
//! target/release/examples/e2e_count lines ADDR CONNECTIONS REQUESTS BATCH LINE
//! ```
//!
//! The servers are those `rpc_blocking.rs` and `lines_load.rs` measure by the clock (their modules
//! are included here): `rpc-packetpipe` (a blocking connection) and `rpc-std` (`BufReader` and
//! `BufWriter`) serve one connection on the main thread and exit when it ends; `lines-packetpipe`
//! and `lines-tokio-util` are the `loop` shape of `lines_load.rs` (one `Framed`, `feed` each
//! reply, `flush` when no further line is ready) on a current-thread tokio runtime, a task per
//! connection, serving until killed. Every server prints `listening on ADDR` once bound (port 0:
//! a free one).
//!
//! `rpc` makes ROUND_TRIPS sequential calls of SIZE-byte payloads over one connection (a 4-byte
//! big-endian length and the payload, the same frame back). `lines` opens CONNECTIONS
//! connections on a current-thread runtime; each sends REQUESTS lines of LINE bytes (newline
//! included) in writes of BATCH lines and reads a batch's replies before it sends the next.
#![forbid(unsafe_code)]

#[path = "lines_load.rs"]
#[allow(dead_code)] // its `main` and clock measurements are not this one's
mod lines_load;
#[path = "rpc_blocking.rs"]
#[allow(dead_code)]
mod rpc_blocking;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Serve one connection of the blocking RPC, then return.
fn serve_rpc(kind: &str, addr: &str) -> Result<(), BoxError> {
    let listener = TcpListener::bind(addr)?;
    println!("listening on {}", listener.local_addr()?);
    let (tcp, _) = listener.accept()?;
    tcp.set_nodelay(true)?;
    match kind {
        "rpc-packetpipe" => rpc_blocking::serve_packetpipe(tcp),
        _ => rpc_blocking::serve_std(tcp),
    }
}

/// Serve line connections, each a task, until killed.
async fn serve_lines(kind: &str, addr: &str) -> Result<(), BoxError> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!("listening on {}", listener.local_addr()?);
    let packetpipe = kind == "lines-packetpipe";
    let kind = kind.to_string();
    loop {
        let (socket, _) = listener.accept().await?;
        let kind = kind.clone();
        tokio::spawn(async move {
            let result = if packetpipe {
                lines_load::packetpipe_loop(socket).await
            } else {
                lines_load::tokio_util_loop(socket).await
            };
            if let Err(e) = result {
                eprintln!("{kind}: connection ended with {e}");
            }
        });
    }
}

/// `round_trips` sequential calls of `size`-byte payloads, each reply checked.
fn rpc_client(addr: &str, round_trips: usize, size: usize) -> Result<(), BoxError> {
    let mut tcp = TcpStream::connect(addr)?;
    tcp.set_nodelay(true)?;
    let mut request = u32::try_from(size)?.to_be_bytes().to_vec();
    request.extend((0..size).map(|i| (i % 251) as u8));
    let mut reply = vec![0u8; request.len()];
    for _ in 0..round_trips {
        tcp.write_all(&request)?;
        tcp.read_exact(&mut reply)?;
        assert!(reply == request, "the reply differs from the request");
    }
    tcp.shutdown(Shutdown::Write)?;
    assert_eq!(tcp.read(&mut reply)?, 0, "bytes after the last reply");
    Ok(())
}

/// `connections` connections of `requests` numbered lines of `line` bytes, `batch` at a time.
fn lines_client(
    addr: &str,
    connections: usize,
    requests: usize,
    batch: usize,
    line: usize,
) -> Result<(), BoxError> {
    let addr: SocketAddr = addr.parse()?;
    let all: Vec<Vec<u8>> = (0..connections)
        .map(|c| {
            let mut all = Vec::with_capacity(requests * line);
            for i in 0..requests {
                let mut text = format!("{c} {i} ").into_bytes();
                text.resize(line - 1, b'x');
                text.push(b'\n');
                all.extend_from_slice(&text);
            }
            all
        })
        .collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let clients = all
            .iter()
            .map(|requests| lines_load::client(addr, requests, line, batch));
        for result in futures::future::join_all(clients).await {
            result?;
        }
        Ok(())
    })
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |v: &str| -> usize {
        v.parse().unwrap_or_else(|_| {
            eprintln!("{v}: not a count");
            std::process::exit(2)
        })
    };
    let result = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["serve", kind @ ("rpc-packetpipe" | "rpc-std"), addr] => serve_rpc(kind, addr),
        ["serve", kind @ ("lines-packetpipe" | "lines-tokio-util"), addr] => {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(BoxError::from)
                .and_then(|runtime| runtime.block_on(serve_lines(kind, addr)))
        }
        ["rpc", addr, round_trips, size] => rpc_client(addr, number(round_trips), number(size)),
        ["lines", addr, connections, requests, batch, line] if number(line) >= 24 => lines_client(
            addr,
            number(connections),
            number(requests),
            number(batch),
            number(line),
        ),
        _ => {
            eprintln!("usage: e2e_count serve rpc-packetpipe|rpc-std|lines-packetpipe|lines-tokio-util ADDR");
            eprintln!("       e2e_count rpc ADDR ROUND_TRIPS SIZE");
            eprintln!(
                "       e2e_count lines ADDR CONNECTIONS REQUESTS BATCH LINE   (LINE at least 24)"
            );
            std::process::exit(2);
        }
    };
    if let Err(e) = result {
        eprintln!("e2e_count: {e}");
        std::process::exit(1);
    }
}
