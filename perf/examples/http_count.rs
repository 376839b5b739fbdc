//! An HTTP/1.1 load client for `scripts/e2e_instructions.sh` (a fixed number of requests, each
//! response checked byte for byte) and for the idle-connection memory measurements.
//!
//! ```text
//! cargo build --release -p packetpipe-perf --example http_count
//! target/release/examples/http_count ADDR CONNECTIONS REQUESTS DEPTH
//! target/release/examples/http_count idle ADDR CONNECTIONS
//! ```
//!
//! `ADDR CONNECTIONS REQUESTS DEPTH` opens CONNECTIONS keep-alive connections (a thread each);
//! each sends REQUESTS `GET /` requests, DEPTH per write (DEPTH 1: one at a time, each response
//! awaited before the next request; DEPTH 16: 16 pipelined requests in one write, then their
//! 16 responses), checks that every response is `200` with the `Hello, World!` body, in exactly
//! the bytes the three servers write (`examples/http_server.rs`,
//! `perf/examples/http_server_tokio_util.rs`, `perf/examples/http_server_hyper.rs`), and closes.
//! REQUESTS is a multiple of DEPTH.
//!
//! `idle ADDR CONNECTIONS` opens CONNECTIONS connections, sends one `GET /` on each, reads every
//! response, prints `answered`, and keeps the connections open, idle, until its standard input
//! closes.
#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::Duration;

/// The response every server gives `GET /`.
pub const RESPONSE: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nHello, World!";

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn request(addr: &str) -> Vec<u8> {
    format!("GET / HTTP/1.1\r\nHost: {addr}\r\n\r\n").into_bytes()
}

/// One connection: `requests` requests, `depth` per write, every response checked.
fn connection(addr: &str, requests: usize, depth: usize) -> Result<(), BoxError> {
    let mut tcp = TcpStream::connect(addr)?;
    tcp.set_nodelay(true)?;
    let burst = request(addr).repeat(depth);
    let expected = RESPONSE.repeat(depth);
    let mut responses = vec![0u8; expected.len()];
    for _ in 0..requests / depth {
        tcp.write_all(&burst)?;
        tcp.read_exact(&mut responses)?;
        if responses != expected {
            return Err(format!(
                "unexpected response: {:?}",
                String::from_utf8_lossy(&responses)
            )
            .into());
        }
    }
    tcp.shutdown(Shutdown::Write)?;
    let mut rest = Vec::new();
    tcp.read_to_end(&mut rest)?;
    if !rest.is_empty() {
        return Err(format!("{} bytes after the last response", rest.len()).into());
    }
    Ok(())
}

fn load(addr: &str, connections: usize, requests: usize, depth: usize) -> Result<(), BoxError> {
    if depth == 0 || requests % depth != 0 {
        return Err("REQUESTS must be a multiple of DEPTH".into());
    }
    std::thread::scope(|scope| {
        let threads: Vec<_> = (0..connections)
            .map(|_| scope.spawn(|| connection(addr, requests, depth)))
            .collect();
        threads
            .into_iter()
            .try_for_each(|thread| thread.join().map_err(|_| "a client thread panicked")?)
    })
}

fn idle(addr: &str, connections: usize) -> Result<(), BoxError> {
    let request = request(addr);
    let mut clients = Vec::with_capacity(connections);
    for _ in 0..connections {
        let mut client = TcpStream::connect(addr)?;
        client.write_all(&request)?;
        clients.push(client);
    }
    for client in clients.iter_mut() {
        client.set_read_timeout(Some(Duration::from_secs(60)))?;
        let mut response = [0; RESPONSE.len()];
        client.read_exact(&mut response)?;
        if response != RESPONSE {
            return Err("unexpected response".into());
        }
    }
    println!("answered");
    std::io::stdout().flush()?;
    let mut rest = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut rest);
    Ok(())
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
        ["idle", addr, connections] => idle(addr, number(connections)),
        [addr, connections, requests, depth] => {
            load(addr, number(connections), number(requests), number(depth))
        }
        _ => {
            eprintln!("usage: http_count ADDR CONNECTIONS REQUESTS DEPTH");
            eprintln!("       http_count idle ADDR CONNECTIONS");
            std::process::exit(2);
        }
    };
    if let Err(e) = result {
        eprintln!("http_count: {e}");
        std::process::exit(1);
    }
}
