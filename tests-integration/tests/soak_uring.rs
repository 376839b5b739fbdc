//! Soak test over the io_uring driver: many connections on one driver, clients doing random
//! things, for a bounded time.
//!
//! One driver thread serves every connection (a small provided-buffer ring and small pipe
//! thresholds, so that `ENOBUFS` and backpressure happen); its application echoes, reading the
//! connection's seed from its first 8 bytes and, from an RNG seeded with it, consuming a random
//! part of each buffer per turn and, for some connections, dropping the connection after a
//! random number of bytes (a server-side abort). The clients run on a tokio runtime on other
//! threads: `SOAK_URING_CONNS` connections at once (default 128), each replaced by a new one when
//! it ends, until the time is up. Per connection, from an RNG: messages of 1 B to 256 KiB, written
//! in pieces cut at random points; a reader that is sometimes slow (small reads, pauses); and an
//! end: a half-close (`shutdown(Write)`) after the last message, or a reset (`SO_LINGER` 0, the
//! socket closed with no `FIN`) at a random moment.
//!
//! Every connection's bytes are a function of its seed and offset, so the reader checks each byte
//! it gets: what came back is a prefix of what was sent, and all of it when neither side aborted
//! (a half-close, and no server abort). At the end, after `DriverHandle::shutdown`, the driver has
//! no connection left and the pool `stats().outstanding == 0`.
//!
//! Bounds: `SOAK_URING_SECS` seconds (default 10; CI runs the default, the connections under way
//! then finish, a few seconds more), `SOAK_SEED` to replay a run (the seed of a
//! failing connection is in the panic message). Release builds only (`cargo test --release
//! --features io-uring --test soak_uring`). Where io_uring is unavailable the test says so and
//! passes, unless `PACKETPIPE_REQUIRE_URING` is set, which makes that a failure.

#![cfg(all(feature = "io-uring", target_os = "linux"))]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod kit;

use kit::rng::{env_u64 as env, XorShiftStar as Rng};

use packetpipe::io::uring::{Driver, DriverStats};
use packetpipe::io::{ConnectionOptions, DuplexPipe};
use packetpipe::pipe::PipeOptions;
use packetpipe::Pool;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const MAX_MESSAGE: usize = 256 * 1024;

/// Byte `k` of connection `seed`'s stream: the seed (8 bytes, little-endian), then a function
/// of the seed and the offset.
fn byte_at(seed: u64, k: u64) -> u8 {
    if k < 8 {
        (seed >> (8 * k)) as u8
    } else {
        let x = (k ^ seed).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (x >> 56) as u8 ^ k as u8
    }
}

/// What the server's application does with connection `seed`: the same RNG on both sides, so
/// the client knows whether (and after how many bytes) the server aborts.
struct ServerPlan {
    rng: Rng,
    /// Drop the connection once this many bytes have been echoed.
    abort_after: Option<u64>,
}

impl ServerPlan {
    fn new(seed: u64) -> ServerPlan {
        let mut rng = Rng::new(seed ^ 0x5E4E_4E4E);
        let abort_after = rng.one_in(8).then(|| rng.below(1 << 20));
        ServerPlan { rng, abort_after }
    }
}

/// The application: echo, consuming a random part of each buffer per turn; abort if the plan
/// says so.
async fn echo(mut pipe: DuplexPipe) {
    let mut plan: Option<ServerPlan> = None;
    let mut seed_bytes = Vec::with_capacity(8);
    let mut echoed = 0u64;
    loop {
        let Ok(read) = pipe.reader.read_buffer().await else {
            return;
        };
        let (n, done) = (read.buffer().len(), read.is_completed());
        if n == 0 {
            return; // completed, nothing left
        }
        let mut take = n;
        if let Some(plan) = &mut plan {
            if plan.rng.one_in(2) {
                take = 1 + plan.rng.below(n as u64) as usize;
            }
            if let Some(limit) = plan.abort_after {
                if echoed + take as u64 >= limit {
                    return; // the server-side abort: the pipe dropped mid-stream
                }
            }
        }
        let mut left = take;
        for chunk in read.buffer().chunks() {
            let part = &chunk[..chunk.len().min(left)];
            if plan.is_none() {
                seed_bytes.extend(part.iter().take(8 - seed_bytes.len()));
            }
            pipe.writer.write_slice(part).unwrap();
            left -= part.len();
            if left == 0 {
                break;
            }
        }
        echoed += take as u64;
        if plan.is_none() && seed_bytes.len() == 8 {
            plan = Some(ServerPlan::new(u64::from_le_bytes(
                seed_bytes[..].try_into().unwrap(),
            )));
        }
        pipe.reader.advance_to(take, take).unwrap();
        if pipe.writer.flush_pipe().await.is_err() || (done && take == n) {
            return;
        }
    }
}

/// How a client connection ends.
#[derive(Clone, Copy, Debug, PartialEq)]
enum End {
    /// `shutdown(Write)` after the last message, then read the echo to its end.
    HalfClose,
    /// `SO_LINGER` 0 and close after this many bytes written: a reset.
    Reset(u64),
}

/// Totals over the run.
#[derive(Default)]
struct Totals {
    connections: AtomicU64,
    complete: AtomicU64,
    resets: AtomicU64,
    server_aborts: AtomicU64,
    bytes_sent: AtomicU64,
    bytes_checked: AtomicU64,
}

/// One client connection, checked; its outcome in `totals`.
async fn client(addr: SocketAddr, seed: u64, deadline: Instant, totals: Arc<Totals>) {
    let mut rng = Rng::new(seed);
    let messages = 1 + rng.below(12);
    let sizes: Vec<u64> = (0..messages)
        .map(|_| rng.size(MAX_MESSAGE) as u64)
        .collect();
    let total = 8 + sizes.iter().sum::<u64>();
    let end = if rng.one_in(4) {
        End::Reset(rng.below(total))
    } else {
        End::HalfClose
    };
    let slow_reader = rng.one_in(3);
    let server = ServerPlan::new(seed);
    let stream = TcpStream::connect(addr).await.expect("connect");
    stream.set_nodelay(rng.one_in(2)).unwrap();
    if matches!(end, End::Reset(_)) {
        stream.set_zero_linger().unwrap();
    }
    let (mut rx, mut tx) = stream.into_split();
    let reset = Arc::new(AtomicBool::new(false));
    let reset_notify = Arc::new(tokio::sync::Notify::new());

    let reader = {
        let (reset, reset_notify) = (reset.clone(), reset_notify.clone());
        let mut rng = Rng::new(seed ^ 0xEAD);
        tokio::spawn(async move {
            let mut buf = vec![0u8; 64 * 1024];
            let mut got = 0u64;
            loop {
                // Slow until the time is up, so that the last connections end soon after.
                let want = if slow_reader && Instant::now() < deadline {
                    if rng.one_in(4) {
                        tokio::time::sleep(Duration::from_micros(rng.below(2000))).await;
                    }
                    rng.size(512)
                } else {
                    buf.len()
                };
                let n = tokio::select! {
                    read = rx.read(&mut buf[..want]) => match read {
                        Ok(n) => n,
                        Err(e) => {
                            assert!(
                                reset.load(Ordering::SeqCst) || server.abort_after.is_some(),
                                "connection {seed:#x}: read failed with {e} after {got} bytes, \
                                 though neither side aborted"
                            );
                            break;
                        }
                    },
                    _ = reset_notify.notified() => break,
                };
                if n == 0 {
                    break;
                }
                for (i, &b) in buf[..n].iter().enumerate() {
                    let k = got + i as u64;
                    assert!(
                        b == byte_at(seed, k),
                        "connection {seed:#x}: byte {k} of the echo differs from the byte sent"
                    );
                }
                got += n as u64;
                assert!(got <= total, "connection {seed:#x}: more echoed than sent");
            }
            drop(rx); // with a reset: the last handle, so the socket closes with RST
            got
        })
    };

    // The writer: the messages, each cut into writes at random points.
    let mut sent = 0u64;
    let mut write_failed = false;
    let mut pieces = vec![8u64];
    pieces.extend(&sizes);
    'messages: for size in pieces {
        let mut left = size;
        while left > 0 {
            let piece = (rng.size(left as usize) as u64).min(left);
            let piece = match end {
                End::Reset(at) if sent + piece > at => at - sent,
                _ => piece,
            };
            let data: Vec<u8> = (sent..sent + piece).map(|k| byte_at(seed, k)).collect();
            if let Err(e) = tx.write_all(&data).await {
                assert!(
                    server.abort_after.is_some(),
                    "connection {seed:#x}: write failed with {e} after {sent} bytes, though \
                     neither side aborted"
                );
                write_failed = true;
                break 'messages;
            }
            sent += piece;
            left -= piece;
            if matches!(end, End::Reset(at) if sent == at) {
                break 'messages;
            }
            if rng.one_in(16) {
                tokio::task::yield_now().await;
            }
        }
    }
    match end {
        End::Reset(_) if !write_failed => {
            // No FIN: the write half is forgotten, the reader drops the socket's last handle.
            tx.forget();
            reset.store(true, Ordering::SeqCst);
            reset_notify.notify_one();
        }
        _ => drop(tx), // shutdown(Write)
    }
    let got = reader.await.expect("the reader");
    let aborted = matches!(end, End::Reset(_)) || server.abort_after.is_some();
    if !aborted {
        assert_eq!(
            got, total,
            "connection {seed:#x}: a half-close with no abort got back {got} of {total} bytes"
        );
        totals.complete.fetch_add(1, Ordering::Relaxed);
    }
    if matches!(end, End::Reset(_)) {
        totals.resets.fetch_add(1, Ordering::Relaxed);
    }
    if server.abort_after.is_some() {
        totals.server_aborts.fetch_add(1, Ordering::Relaxed);
    }
    totals.connections.fetch_add(1, Ordering::Relaxed);
    totals.bytes_sent.fetch_add(sent, Ordering::Relaxed);
    totals.bytes_checked.fetch_add(got, Ordering::Relaxed);
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "release only: cargo test --release --features io-uring --test soak_uring"
)]
fn soak_many_connections_on_one_driver() {
    let secs = env("SOAK_URING_SECS", 10);
    let conns = env("SOAK_URING_CONNS", 128);
    let seed = env("SOAK_SEED", 0x50A4_5EED);
    eprintln!("soak over io_uring: {secs} s, {conns} connections at once, SOAK_SEED={seed}");
    let pool = Pool::builder()
        .max_class_size(128 * 1024)
        .build()
        .expect("pool");
    // Small thresholds: a slow reader pauses the connection's receive soon.
    let pipe = || {
        PipeOptions::new()
            .pool(pool.clone())
            .pause_threshold(64 * 1024)
            .resume_threshold(16 * 1024)
    };
    let builder = Driver::builder()
        .buffers(64)
        .buffer_size(4096)
        .connection_options(ConnectionOptions::new().input(pipe()).output(pipe()));
    // The driver is not `Send`: built on its own thread, which reports back.
    let (started_tx, started) = std::sync::mpsc::channel();
    let server = std::thread::spawn(move || -> Option<(DriverStats, usize)> {
        let mut driver = match builder.build() {
            Ok(driver) => driver,
            Err(e) if std::env::var_os("PACKETPIPE_REQUIRE_URING").is_none() => {
                eprintln!("io_uring unavailable here ({e}); not soaking the driver");
                started_tx.send(None).unwrap();
                return None;
            }
            Err(e) => {
                panic!("io_uring is required (PACKETPIPE_REQUIRE_URING) but unavailable: {e}")
            }
        };
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        driver.listen(listener).unwrap();
        started_tx.send(Some((addr, driver.handle()))).unwrap();
        driver.run(echo).expect("the driver runs");
        Some((driver.stats(), driver.connections()))
    });
    let Some((addr, handle)) = started.recv().expect("the driver thread starts") else {
        return;
    };

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let totals = Arc::new(Totals::default());
    let deadline = Instant::now() + Duration::from_secs(secs);
    let next = Arc::new(AtomicU64::new(0));
    runtime.block_on(async {
        let slots: Vec<_> = (0..conns)
            .map(|_| {
                let (totals, next) = (totals.clone(), next.clone());
                tokio::spawn(async move {
                    // Each slot opens connections one after another until the time is up.
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let conn_seed =
                            Rng::new(seed ^ i.wrapping_mul(0xA24B_AED4_963E_E407)).next();
                        client(addr, conn_seed, deadline, totals.clone()).await;
                        if Instant::now() >= deadline {
                            return;
                        }
                    }
                })
            })
            .collect();
        for slot in slots {
            slot.await.expect("a client failed");
        }
    });
    drop(runtime);
    handle.shutdown();
    let (stats, left) = server
        .join()
        .expect("the driver thread")
        .expect("the driver ran");
    let t = |n: &AtomicU64| n.load(Ordering::Relaxed);
    eprintln!(
        "soak over io_uring: {} connections ({} complete, {} client resets, {} server aborts), \
         {} bytes sent, {} echoed and checked; driver {stats:?}; pool {:?}",
        t(&totals.connections),
        t(&totals.complete),
        t(&totals.resets),
        t(&totals.server_aborts),
        t(&totals.bytes_sent),
        t(&totals.bytes_checked),
        pool.stats()
    );
    assert_eq!(left, 0, "connections left after the shutdown");
    assert_eq!(
        stats.accepted,
        t(&totals.connections),
        "every connection accepted"
    );
    assert!(t(&totals.complete) > 0, "no connection ran to its end");
    let pool_stats = pool.stats();
    assert_eq!(
        pool_stats.outstanding, 0,
        "blocks not returned: {pool_stats:?}"
    );
}
