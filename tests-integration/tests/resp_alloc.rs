//! The packetpipe RESP server allocates nothing per request in steady state: pipelined GETs, and
//! SETs whose value replaces one of the same size, with 3-byte values (`redis-benchmark`'s
//! default) and 100 KB values (taken out of the socket's pooled blocks and stored zero-copy).
//!
//! The server (`examples/resp/`, as the example runs it) and a client run on this test's thread,
//! on one current-thread runtime, over a loopback socket: a counting global allocator counts this
//! thread's allocations over a run of batches after a warm-up, server and client together (the
//! client allocates nothing after its first batch). The tokio-util server's figures are printed
//! for comparison (`scripts/servers_bench.sh` puts them in BENCHMARKS.md), not asserted.

mod kit;

use kit::counting_alloc;
#[path = "../../examples/resp/mod.rs"]
mod resp;

use std::sync::Arc;
use std::time::Duration;

use resp::parse::encode_request;
use resp::server::Flavor;
use resp::Config;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[global_allocator]
static GLOBAL: counting_alloc::CountingAlloc = counting_alloc::CountingAlloc;

/// One workload: a request pipelined `depth` times per batch, after a setup request.
struct Workload {
    name: &'static str,
    setup: Vec<u8>,
    request: Vec<u8>,
    reply: Vec<u8>,
    depth: usize,
    batches: usize,
}

fn workloads() -> Vec<Workload> {
    let small = b"xxx".to_vec();
    let large = vec![b'v'; 100_000];
    let bulk = |value: &[u8]| {
        let mut reply = format!("${}\r\n", value.len()).into_bytes();
        reply.extend_from_slice(value);
        reply.extend_from_slice(b"\r\n");
        reply
    };
    vec![
        Workload {
            name: "GET, 3 B value, 16 per batch",
            setup: encode_request(&[b"SET", b"key", &small]),
            request: encode_request(&[b"GET", b"key"]),
            reply: bulk(&small),
            depth: 16,
            batches: 400,
        },
        Workload {
            name: "SET replacing a 3 B value, 16 per batch",
            setup: encode_request(&[b"SET", b"key", &small]),
            request: encode_request(&[b"SET", b"key", &small]),
            reply: b"+OK\r\n".to_vec(),
            depth: 16,
            batches: 400,
        },
        Workload {
            name: "GET, 100 KB value, 4 per batch",
            setup: encode_request(&[b"SET", b"key", &large]),
            request: encode_request(&[b"GET", b"key"]),
            reply: bulk(&large),
            depth: 4,
            batches: 60,
        },
        Workload {
            name: "SET replacing a 100 KB value, 4 per batch",
            setup: encode_request(&[b"SET", b"key", &large]),
            request: encode_request(&[b"SET", b"key", &large]),
            reply: b"+OK\r\n".to_vec(),
            depth: 4,
            batches: 60,
        },
    ]
}

/// Run `batches` batches of `batch` (expecting `replies`), and the same again, on one connection:
/// this thread's allocations during the second run, per request.
async fn client(addr: std::net::SocketAddr, workload: &Workload) -> f64 {
    let mut socket = TcpStream::connect(addr).await.unwrap();
    socket.set_nodelay(true).unwrap();
    let batch = workload.request.repeat(workload.depth);
    let replies = workload.reply.repeat(workload.depth);
    let mut received = vec![0u8; replies.len()];
    socket.write_all(&workload.setup).await.unwrap();
    let mut ok = [0u8; 5];
    socket.read_exact(&mut ok).await.unwrap();
    assert_eq!(&ok, b"+OK\r\n");
    // Warm-up (pools, recycled nodes and batches, capacities), checking every reply; then the
    // measured run.
    run(&mut socket, workload, &batch, &replies, &mut received, true).await;
    let before = counting_alloc::allocations();
    run(
        &mut socket,
        workload,
        &batch,
        &replies,
        &mut received,
        false,
    )
    .await;
    let allocations = counting_alloc::allocations() - before;
    allocations as f64 / (workload.batches * workload.depth) as f64
}

async fn run(
    socket: &mut TcpStream,
    workload: &Workload,
    batch: &[u8],
    replies: &[u8],
    received: &mut [u8],
    checked: bool,
) {
    for _ in 0..workload.batches {
        socket.write_all(batch).await.unwrap();
        socket.read_exact(received).await.unwrap();
        if checked {
            assert!(received == replies, "{}: wrong replies", workload.name);
        }
    }
}

/// Allocations per request of each workload against a server of `flavor` on this thread.
fn measure(flavor: Flavor) -> Vec<(&'static str, f64)> {
    let (runtime, local) = resp::server::local_runtime().unwrap();
    local.block_on(&runtime, async move {
        tokio::time::timeout(Duration::from_secs(120), async move {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let shutdown = async move {
                let _ = stopped.await;
            };
            let server = tokio::task::spawn_local(resp::server::serve(
                flavor,
                listener,
                Config::default(),
                Arc::default(),
                shutdown,
            ));
            let mut results = Vec::new();
            for workload in workloads() {
                let per_request = client(addr, &workload).await;
                println!(
                    "{flavor:?} server, {}: {per_request} allocations per request",
                    workload.name
                );
                results.push((workload.name, per_request));
            }
            let _ = stop.send(());
            server.await.unwrap();
            results
        })
        .await
        .expect("the measurement did not finish within two minutes")
    })
}

#[test]
fn packetpipe_server_allocates_nothing_per_request() {
    let results = measure(Flavor::Pipe);
    for (name, per_request) in results {
        assert_eq!(per_request, 0.0, "{name}: allocations per request");
    }
}

#[test]
fn tokio_util_server_allocations_for_comparison() {
    // Printed only (`--nocapture`): what the same server allocates on `Framed` over `BytesMut`.
    let results = measure(Flavor::TokioUtil);
    assert_eq!(results.len(), workloads().len());
}
