//! Soak test over the epoll transports: the io_uring soak's workload (`kit/soak.rs`) against the
//! same echo application on tokio's `connection`, inline and pumped.
//!
//! One current-thread runtime on its own thread serves every connection, as a single-threaded
//! server would: each accepted socket becomes `io::tokio::connection_with` (every other one on
//! the pumped transport), joined with the kit's echo application in one task, with small pipe
//! thresholds so that backpressure happens. Once the clients are done, every connection ends by
//! itself (the clients half-closed or reset, or the server aborted), and then the pool
//! `stats().outstanding == 0`.
//!
//! Bounds: `SOAK_EPOLL_SECS` seconds (default 10), `SOAK_EPOLL_CONNS` connections at once
//! (default 128). The seed is new each run unless `SOAK_SEED` replays one. Release builds only
//! (`cargo test --release --features tokio --test soak_epoll`).

#![cfg(feature = "tokio")]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod kit;

use kit::rng::env_u64 as env;
use kit::soak;

use packetpipe::io::{join, tokio::connection_with, ConnectionOptions};

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "release only: cargo test --release --features tokio --test soak_epoll"
)]
fn soak_many_connections_on_one_runtime_thread() {
    let secs = env("SOAK_EPOLL_SECS", 10);
    let conns = env("SOAK_EPOLL_CONNS", 128);
    let seed = soak::seed();
    eprintln!("soak over epoll: {secs} s, {conns} connections at once, SOAK_SEED={seed}");
    let pool = soak::pool();
    let options = soak::connection_options(&pool);
    let live = Arc::new(AtomicU64::new(0));
    let (stop_tx, stop) = tokio::sync::oneshot::channel::<()>();
    let (started_tx, started) = std::sync::mpsc::channel();
    let server = {
        let live = live.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                started_tx.send(listener.local_addr().unwrap()).unwrap();
                let mut stop = stop;
                let mut accepted = 0u64;
                loop {
                    // Accepts first: every client connected before the stop is accepted.
                    let socket = tokio::select! {
                        biased;
                        accept = listener.accept() => accept.expect("accept").0,
                        _ = &mut stop => break,
                    };
                    accepted += 1;
                    let options = ConnectionOptions {
                        pumped: accepted % 2 == 0,
                        ..options.clone()
                    };
                    let (pipe, connection) = connection_with(socket, options);
                    live.fetch_add(1, Ordering::SeqCst);
                    let live = live.clone();
                    tokio::spawn(async move {
                        // Resets and server aborts end connections with errors: expected here.
                        let _ = join(connection, soak::echo(pipe)).await;
                        live.fetch_sub(1, Ordering::SeqCst);
                    });
                }
                // Every connection ends once its client has: wait for them on this runtime.
                let deadline = Instant::now() + Duration::from_secs(30);
                while live.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                accepted
            })
        })
    };
    let addr = started.recv().expect("the server thread starts");

    let totals = soak::run_clients(addr, secs, conns, seed);
    stop_tx.send(()).unwrap();
    let accepted = server.join().expect("the server thread");
    eprintln!(
        "soak over epoll: {}; pool {:?}",
        totals.summary(),
        pool.stats()
    );
    soak::assert_server_saw_no_wrong_byte();
    assert_eq!(
        live.load(Ordering::SeqCst),
        0,
        "connections still open 30 s after their clients ended"
    );
    assert_eq!(accepted, totals.connections(), "every connection accepted");
    assert!(totals.complete() > 0, "no connection ran to its end");
    let pool_stats = pool.stats();
    assert_eq!(
        pool_stats.outstanding, 0,
        "blocks not returned: {pool_stats:?}"
    );
}
