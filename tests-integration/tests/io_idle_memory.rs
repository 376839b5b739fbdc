//! Memory of idle duplex connections over loopback: after one message each, 10,000 connections
//! hold at most 2 KiB of heap apiece (pipes, pumps, their tasks, blocks; the socket itself
//! excluded) and no pooled block at all.
//!
//! The clients run in a child process (this test binary again, with `IDLE_CLIENT_ADDR` set): the
//! two ends of 10,000 connections in one process would need more file descriptors than a default
//! limit allows. Live heap bytes are counted by a counting global allocator; this file holds one
//! measuring test so nothing else allocates in parallel.

#![cfg(feature = "tokio")]

mod kit;

use kit::counting_alloc;
use packetpipe::ByteSegments;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use futures::FutureExt;
use packetpipe::io::{ConnectionOptions, DuplexPipe};
use packetpipe::pipe::PipeOptions;
use packetpipe::Pool;

#[global_allocator]
static GLOBAL: counting_alloc::CountingAlloc = counting_alloc::CountingAlloc;

/// Connections to hold idle (override with `IDLE_CONNECTIONS`).
fn connections() -> usize {
    std::env::var("IDLE_CONNECTIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

const MESSAGE: &[u8] = b"hello, idle server";
/// Measured 2,245 bytes with the inline transport (release build, 10,000 connections; 2,277 in a
/// debug build under valgrind with 200): the output pipe's state, 384 bytes in three cache-line
/// groups, and its queue nodes, three at least, 56 bytes each with the count a segment grows by;
/// the input reader's own segments (boxed, so that readers of shared pipes stay small) and its
/// cancellation and error state (384 bytes); each reader's shared copy block state (40 bytes);
/// the reader's refill; the output's shared state with its reader; tokio's split of the socket;
/// the task of the connection's future. The guard leaves about 2% over the larger figure.
const BUDGET_PER_CONNECTION: isize = 2330;

#[test]
fn idle_duplex_connections_hold_little_heap_and_no_pooled_block() {
    let n = connections();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let listener = socket.listen(4096).unwrap();
        let addr = listener.local_addr().unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "idle_client_process", "--ignored", "--nocapture"])
            .args(["--test-threads", "1"])
            .env("IDLE_CLIENT_ADDR", addr.to_string())
            .env("IDLE_CLIENT_CONNECTIONS", n.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let child_out = BufReader::new(child.stdout.take().unwrap());

        // The sockets first: what they cost is not the library's.
        let mut sockets = Vec::with_capacity(n);
        while sockets.len() < n {
            let (socket, _) = tokio::time::timeout(Duration::from_secs(60), listener.accept())
                .await
                .expect("the client process stopped connecting")
                .unwrap();
            sockets.push(socket);
        }
        let pool = Pool::new();
        let options = ConnectionOptions {
            input: PipeOptions {
                pool: Some(pool.clone()),
                ..Default::default()
            },
            output: PipeOptions {
                pool: Some(pool.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        let mut apps: Vec<DuplexPipe> = Vec::with_capacity(n);
        let before = counting_alloc::live_bytes();

        for socket in sockets.drain(..) {
            let (app, connection) = packetpipe::io::tokio::connection_with(socket, options.clone());
            tokio::spawn(connection);
            apps.push(app);
        }
        // One message each way per connection, as a request/response application would.
        for app in apps.iter_mut() {
            let len = {
                let result = app.reader.read_at_least(MESSAGE.len()).await.unwrap();
                assert_eq!(result.buffer.to_vec(), MESSAGE);
                result.buffer.len()
            };
            app.reader.advance_to(len, len).unwrap();
            app.writer.write_slice(MESSAGE).unwrap();
            app.writer.flush_pipe().await.unwrap();
            // The application goes back to waiting for the next request (polled once here, as
            // its task would be): a waiting reader sends the input pipe's parked block home.
            assert!(app.reader.read_buffer().now_or_never().is_none());
        }
        // The child's stdout also carries the test harness's lines: wait for ours, on another
        // thread (this one runs every connection task meanwhile).
        let (echoed_tx, echoed_rx) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let mut echoed_tx = Some(echoed_tx);
            for line in child_out.lines() {
                let line = line.unwrap_or_default();
                if line.contains("IDLE-CLIENT-ECHOED") {
                    if let Some(tx) = echoed_tx.take() {
                        let _ = tx.send(true);
                    }
                }
                // Keep reading to the end: a closed pipe would fail the child's last output.
            }
            if let Some(tx) = echoed_tx {
                let _ = tx.send(false);
            }
        });
        assert!(
            echoed_rx.await.unwrap(),
            "the client process ended without getting every echo"
        );
        // Let every connection task settle into waiting (the last drains, the fill pumps' probes).
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        // Free blocks the pool keeps for reuse are the pool's cache, not the connections': give
        // them back first (the idle connections hold none, which `outstanding` checks below).
        let retained = pool.stats().retained_bytes;
        pool.trim();
        let held = counting_alloc::live_bytes() - before;
        // The sockets moved into the connection futures; their own bytes are not the library's.
        let sockets_inline = (n * std::mem::size_of::<tokio::net::TcpStream>()) as isize;
        let per_connection = (held - sockets_inline) / n as isize;
        let stats = pool.stats();
        println!(
            "{n} idle duplex connections: {per_connection} heap bytes each (pipes, pumps, tasks, \
             blocks; socket excluded), pool outstanding {} (free blocks retained before trim: \
             {retained} bytes)",
            stats.outstanding
        );
        assert_eq!(
            stats.outstanding, 0,
            "idle connections hold pooled blocks: {stats:?}"
        );
        assert!(
            per_connection <= BUDGET_PER_CONNECTION,
            "{per_connection} bytes per idle connection, budget {BUDGET_PER_CONNECTION}"
        );

        drop(child.stdin.take()); // the client process exits
        assert!(child.wait().unwrap().success());
        drop(apps);
    });
}

/// The client side, run as a child process by the test above (does nothing when run directly).
#[test]
#[ignore = "run by idle_duplex_connections_hold_little_heap_and_no_pooled_block"]
fn idle_client_process() {
    let Ok(addr) = std::env::var("IDLE_CLIENT_ADDR") else {
        return;
    };
    let n: usize = std::env::var("IDLE_CLIENT_CONNECTIONS")
        .unwrap()
        .parse()
        .unwrap();
    let mut clients = Vec::with_capacity(n);
    for _ in 0..n {
        let mut client = std::net::TcpStream::connect(&addr).unwrap();
        client.write_all(MESSAGE).unwrap();
        clients.push(client);
    }
    for client in clients.iter_mut() {
        client
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let mut echo = [0; MESSAGE.len()];
        client.read_exact(&mut echo).unwrap();
        assert_eq!(echo, MESSAGE);
    }
    println!("\nIDLE-CLIENT-ECHOED");
    std::io::stdout().flush().unwrap();
    // Stay connected (idle) until the parent is done measuring and closes our stdin.
    let mut rest = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut rest);
}
