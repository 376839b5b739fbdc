//! Memory of idle RESP connections: 10,000 clients each send PING, get `+PONG` and stay
//! connected; the packetpipe server holds at most half the heap per idle connection that the
//! tokio-util server (`Framed`, default buffers) holds, and no pooled block.
//!
//! Both servers are the examples' (`examples/resp/`), run on this test's thread; heap bytes are
//! counted by a counting global allocator from just before the server accepts its first client
//! (so the accepted sockets' registrations, the connection tasks and everything they hold count,
//! the listener and the runtime do not). The clients run in a child process (this test binary
//! again, with `RESP_IDLE_CLIENT_ADDR` set): both ends of 10,000 connections in one process would
//! need more file descriptors than the default limit allows. This file holds one measuring test
//! so nothing else allocates in parallel.

mod kit;

use kit::counting_alloc;
#[path = "../../examples/resp/mod.rs"]
mod resp;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use packetpipe::Pool;
use resp::server::Flavor;
use resp::store::Stats;
use resp::Config;

#[global_allocator]
static GLOBAL: counting_alloc::CountingAlloc = counting_alloc::CountingAlloc;

/// Connections to hold idle (override with `IDLE_CONNECTIONS`, as `scripts/valgrind.sh` does).
fn connections() -> usize {
    std::env::var("IDLE_CONNECTIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";
const PONG: &[u8] = b"+PONG\r\n";

/// Heap bytes per idle connection of a server of `flavor` holding `n` of them, and the pooled
/// blocks outstanding then.
fn idle_heap_per_connection(flavor: Flavor, n: usize) -> (isize, u64) {
    let (runtime, local) = resp::server::local_runtime().unwrap();
    local.block_on(&runtime, async move {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let listener = socket.listen(4096).unwrap();
        let addr = listener.local_addr().unwrap();
        let stats = Arc::new(Stats::default());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let shutdown = async move {
            let _ = stopped.await;
        };
        let before = counting_alloc::live_bytes();
        let server = tokio::task::spawn_local(resp::server::serve(
            flavor,
            listener,
            Config::default(),
            stats.clone(),
            shutdown,
        ));
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "resp_idle_client_process",
                "--ignored",
                "--nocapture",
            ])
            .args(["--test-threads", "1"])
            .env("RESP_IDLE_CLIENT_ADDR", addr.to_string())
            .env("RESP_IDLE_CLIENT_CONNECTIONS", n.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let child_out = BufReader::new(child.stdout.take().unwrap());
        // The child's stdout also carries the test harness's lines: wait for ours on another
        // thread (this one runs the server meanwhile).
        let (answered_tx, answered_rx) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let mut answered_tx = Some(answered_tx);
            for line in child_out.lines() {
                if line
                    .unwrap_or_default()
                    .contains("RESP-IDLE-CLIENTS-ANSWERED")
                {
                    if let Some(tx) = answered_tx.take() {
                        let _ = tx.send(true);
                    }
                }
            }
            if let Some(tx) = answered_tx {
                let _ = tx.send(false);
            }
        });
        let answered = tokio::time::timeout(Duration::from_secs(300), answered_rx)
            .await
            .expect("the clients did not finish within five minutes");
        assert!(
            answered.unwrap(),
            "the client process ended without every PONG"
        );
        assert_eq!(
            stats.requests.load(std::sync::atomic::Ordering::Relaxed),
            n as u64
        );
        // Let every connection settle into waiting (the last writes, the pumps' probes).
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Free blocks kept for reuse are the pool's cache, not the connections'.
        Pool::global().trim();
        let per_connection = (counting_alloc::live_bytes() - before) / n as isize;
        let outstanding = Pool::global().stats().outstanding;

        drop(child.stdin.take()); // the clients disconnect
        assert!(child.wait().unwrap().success());
        let _ = stop.send(());
        server.await.unwrap();
        (per_connection, outstanding)
    })
}

#[test]
fn idle_packetpipe_connections_hold_at_most_half_the_heap_of_tokio_util_ones() {
    let n = connections();
    let (pipe, outstanding) = idle_heap_per_connection(Flavor::Pipe, n);
    let (tokio_util, _) = idle_heap_per_connection(Flavor::TokioUtil, n);
    let ratio = pipe as f64 / tokio_util as f64;
    println!(
        "{n} idle RESP connections: packetpipe server {pipe} heap bytes each, tokio-util server \
         {tokio_util} each ({ratio:.2}x); pooled blocks outstanding {outstanding}"
    );
    assert_eq!(outstanding, 0, "idle connections hold pooled blocks");
    assert!(
        ratio <= 0.5,
        "packetpipe {pipe} B per idle connection, tokio-util {tokio_util} B: {ratio:.2}x > 0.5x"
    );
}

/// The clients, run as a child process by the test above (does nothing when run directly).
#[test]
#[ignore = "run by idle_packetpipe_connections_hold_at_most_half_the_heap_of_tokio_util_ones"]
fn resp_idle_client_process() {
    let Ok(addr) = std::env::var("RESP_IDLE_CLIENT_ADDR") else {
        return;
    };
    let n: usize = std::env::var("RESP_IDLE_CLIENT_CONNECTIONS")
        .unwrap()
        .parse()
        .unwrap();
    let mut clients = Vec::with_capacity(n);
    for _ in 0..n {
        let mut client = std::net::TcpStream::connect(&addr).unwrap();
        client.write_all(PING).unwrap();
        clients.push(client);
    }
    for client in clients.iter_mut() {
        client
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let mut reply = [0; PONG.len()];
        client.read_exact(&mut reply).unwrap();
        assert_eq!(reply, PONG);
    }
    println!("\nRESP-IDLE-CLIENTS-ANSWERED");
    std::io::stdout().flush().unwrap();
    // Stay connected (idle) until the parent is done measuring and closes our stdin.
    let mut rest = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut rest);
}
