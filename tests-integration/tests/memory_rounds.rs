//! Memory under attack, from the pool's own statistics: the RESP and echo example servers over
//! loopback, in rounds of hundreds of connections that each send one byte and stall, then
//! rounds of partial requests (a large value announced, 1 KiB of it sent), every round closed
//! before the next. Each stalled or partial connection holds at most 4 KiB of pooled memory (the
//! RESP server receives into 256 KiB blocks: a waiting reader moves its few bytes into a fitted
//! block), every block comes back after the close, and idle eviction gives the retained blocks
//! back to the system.
//!
//! Both servers use the global pool; this file holds one test so nothing else rents from it in
//! parallel. Waits have deadlines (a failure says what the pool held); no timing is asserted.

#[path = "../../examples/echo_server.rs"]
#[allow(dead_code)] // its `main`
// It takes the RESP example's `ready_probe` as a module of its own, as `resp` does.
#[allow(clippy::duplicate_mod)]
mod echo_server;
#[path = "../../examples/resp/mod.rs"]
mod resp;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use packetpipe::{Pool, PoolProbe, PoolStats};
use resp::server::{Flavor, ServerHandle};
use resp::Config;

/// Connections per round (hundreds, so the test stays quick).
const CONNECTIONS: usize = 200;
const ROUNDS: usize = 3;
/// What one stalled or partial connection may hold.
const PER_CONNECTION: u64 = 4096;

/// Wait (up to a deadline) until the global pool's statistics satisfy `ok`; fail with `what`
/// and the last statistics otherwise.
fn wait_for_pool(what: &str, ok: impl Fn(&PoolStats) -> bool) -> PoolStats {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let stats = Pool::global().stats();
        if ok(&stats) {
            return stats;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: the pool holds {stats:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Open `CONNECTIONS` connections to `addr`, each sending `bytes` and nothing more; check what the
/// pool holds for them while they stall, close them, check that it all comes back.
fn round(server: &str, addr: SocketAddr, bytes: &[u8], base: &PoolStats) {
    let clients: Vec<TcpStream> = (0..CONNECTIONS)
        .map(|_| {
            let mut client = TcpStream::connect(addr).unwrap();
            client.write_all(bytes).unwrap();
            client
        })
        .collect();
    // Every connection's bytes arrive in one block each; the server parks them (a stalled
    // request keeps one block, in a fitted size).
    let n = CONNECTIONS as u64;
    let held = wait_for_pool(
        &format!("{server}: {n} connections sent {}", bytes.len()),
        |s| {
            s.outstanding >= base.outstanding + n
                && s.outstanding_bytes <= base.outstanding_bytes + n * PER_CONNECTION
        },
    );
    let per_connection = (held.outstanding_bytes - base.outstanding_bytes) / n;
    println!(
        "{server}: {n} connections of {} bytes hold {per_connection} pooled bytes each",
        bytes.len()
    );
    assert!(per_connection <= PER_CONNECTION);
    drop(clients);
    wait_for_pool(&format!("{server}: after the close"), |s| {
        s.outstanding == base.outstanding && s.outstanding_bytes == base.outstanding_bytes
    });
}

/// A RESP SET announcing a 100 MB value, and 1 KiB of it.
fn partial_resp_set() -> Vec<u8> {
    let mut request = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$104857600\r\n".to_vec();
    request.resize(request.len() + 1024, b'x');
    request
}

/// An echo frame announcing 1 MiB (the server's maximum), and 1 KiB of it.
fn partial_echo_frame() -> Vec<u8> {
    let mut frame = (1u32 << 20).to_be_bytes().to_vec();
    frame.resize(frame.len() + 1024, b'x');
    frame
}

/// The echo server of `examples/echo_server.rs` on its own thread and runtime.
fn start_echo_server() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let (socket, _) = listener.accept().await.unwrap();
                tokio::spawn(echo_server::serve(socket));
            }
        })
    });
    addr
}

#[test]
fn stalled_and_partial_connections_hold_a_few_kib_each_and_give_it_all_back() {
    let base = Pool::global().stats();
    {
        let server = ServerHandle::start(Flavor::Pipe, Config::default());
        for _ in 0..ROUNDS {
            round("resp_server", server.addr, b"*", &base);
        }
        round("resp_server", server.addr, &partial_resp_set(), &base);
    }
    let echo = start_echo_server();
    for _ in 0..ROUNDS {
        round("echo_server", echo, &[0], &base);
    }
    round("echo_server", echo, &partial_echo_frame(), &base);

    // What the pool kept for reuse can go back: the shared depot is emptied (by `trim`, which
    // frees what idle eviction would once the idle time passed, and this thread's cache), and
    // what is left is at most what the threads' caches may hold.
    Pool::global().trim();
    let stats = Pool::global().stats();
    let caches = Pool::global().thread_caches() as u64;
    println!("after idle eviction: {stats:?}, {caches} thread caches");
    assert!(
        stats.retained_bytes <= caches * (4 << 20),
        "{stats:?} with {caches} thread caches"
    );
}
