//! The connection soak's two sides, shared by the soaks over each transport (`soak_uring.rs`,
//! `soak_epoll.rs`): an echo application for the server and the clients that check it.
//!
//! The server's application echoes, reading the connection's seed from its first 8 bytes and,
//! from an RNG seeded with it, consuming a random part of each buffer per turn and, for some
//! connections, dropping the connection after a random number of bytes (a server-side abort).
//! Once it knows the seed it checks every byte it receives. The clients run on a tokio runtime:
//! `conns` connections at once, each replaced by a new one when it ends, until the time is up.
//! Per connection, from an RNG: messages of 1 B to 256 KiB, written in pieces cut at random
//! points; a reader that is sometimes slow (small reads, pauses); and an end: a half-close
//! (`shutdown(Write)`) after the last message, or a reset (`SO_LINGER` 0, the socket closed with
//! no `FIN`) at a random moment.
//!
//! Every connection's bytes are a function of its seed and offset, so the reader checks each byte
//! it gets: what came back is a prefix of what was sent, and all of it when neither side aborted
//! (a half-close, and no server abort). A wrong byte is reported with what was got against what
//! was expected and where the wrong bytes come from (this connection's stream at another offset,
//! the start of another connection's, zeros), and the seed that replays the run.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use packetpipe::io::{ConnectionOptions, DuplexPipe};
use packetpipe::pipe::PipeOptions;
use packetpipe::Pool;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::rng::XorShiftStar as Rng;

/// The soaks' pool: blocks up to 128 KiB pooled, larger ones (a 256 KiB message read at once)
/// plain allocations.
pub fn pool() -> Pool {
    Pool::with_options(packetpipe::PoolOptions {
        max_class_size: 128 * 1024,
        ..packetpipe::PoolOptions::default()
    })
    .expect("pool")
}

/// Both pipes of a soaked connection on `pool`, with small thresholds: a slow reader pauses the
/// connection soon.
pub fn connection_options(pool: &Pool) -> ConnectionOptions {
    let pipe = || PipeOptions {
        pool: Some(pool.clone()),
        pause_threshold: 64 * 1024,
        resume_threshold: 16 * 1024,
        ..Default::default()
    };
    ConnectionOptions {
        input: pipe(),
        output: pipe(),
        ..Default::default()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// The run's seed: `SOAK_SEED` to replay a run, else a new one each run (printed, so that a
/// failure says how to replay it), so that every run explores other interleavings.
pub fn seed() -> u64 {
    match std::env::var("SOAK_SEED") {
        Ok(seed) => seed.parse().expect("SOAK_SEED is a number"),
        Err(_) => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("the clock is after 1970")
                .subsec_nanos();
            Rng::new(u64::from(nanos) ^ u64::from(std::process::id()) << 32).next() >> 33
        }
    }
}

const MAX_MESSAGE: usize = 256 * 1024;

/// Byte `k` of connection `seed`'s stream: the seed (8 bytes, little-endian), then a function
/// of the seed and the offset.
pub fn byte_at(seed: u64, k: u64) -> u8 {
    if k < 8 {
        (seed >> (8 * k)) as u8
    } else {
        let x = (k ^ seed).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (x >> 56) as u8 ^ k as u8
    }
}

/// The first wrong byte a server's application received, if any (it checks every byte once it
/// knows the connection's seed).
static SERVER_MISMATCH: Mutex<Option<String>> = Mutex::new(None);

/// Seeds of the connections under way: a mismatch report says whether the wrong bytes are the
/// start of another connection's stream.
static LIVE_SEEDS: Mutex<Vec<u64>> = Mutex::new(Vec::new());

/// What a mismatch looks like: the bytes got against those expected around it, how many of the
/// read differ, and where else the wrong bytes occur (this connection's stream elsewhere, or the
/// start of another live connection's).
pub fn describe_mismatch(seed: u64, got: u64, read: &[u8], i: usize) -> String {
    let hex = |bytes: &[u8]| -> String { bytes.iter().map(|b| format!("{b:02x}")).collect() };
    let from = i.saturating_sub(8);
    let to = (i + 24).min(read.len());
    let expected: Vec<u8> = (from..to).map(|j| byte_at(seed, got + j as u64)).collect();
    let wrong = (0..read.len())
        .filter(|&j| read[j] != byte_at(seed, got + j as u64))
        .count();
    let tail = &read[i..read.len().min(i + 16)];
    let mut found = Vec::new();
    if tail.iter().all(|&b| b == 0) {
        found.push("zeros".to_string());
    }
    let at = got + i as u64;
    for k in at.saturating_sub(1 << 20)..at + (1 << 20) {
        if k != at && (0..tail.len()).all(|j| byte_at(seed, k + j as u64) == tail[j]) {
            found.push(format!("this connection's byte {k}"));
            break;
        }
    }
    for &other in live_seeds().iter() {
        let start: Vec<u8> = (0..8).map(|k| byte_at(other, k)).collect();
        if other != seed && tail.len() >= 8 && tail[..8] == start[..] {
            found.push(format!("the start of connection {other:#x}"));
        }
    }
    format!(
        "read of {} bytes at offset {got}: {wrong} of them wrong; got [{}] expected [{}] (from byte \
         {}); the wrong bytes are {}",
        read.len(),
        hex(&read[from..to]),
        hex(&expected),
        got + from as u64,
        if found.is_empty() { "from nowhere known".to_string() } else { found.join(", ") }
    )
}

fn live_seeds() -> Vec<u64> {
    lock(&LIVE_SEEDS).clone()
}

/// What the server's application does with connection `seed`: the same RNG on both sides, so
/// the client knows whether (and after how many bytes) the server aborts.
struct ServerPlan {
    seed: u64,
    rng: Rng,
    /// Drop the connection once this many bytes have been echoed.
    abort_after: Option<u64>,
}

impl ServerPlan {
    fn new(seed: u64) -> ServerPlan {
        let mut rng = Rng::new(seed ^ 0x5E4E_4E4E);
        let abort_after = rng.one_in(8).then(|| rng.below(1 << 20));
        ServerPlan {
            seed,
            rng,
            abort_after,
        }
    }
}

/// The application: echo, consuming a random part of each buffer per turn; abort if the plan
/// says so.
pub async fn echo(mut pipe: DuplexPipe) {
    let mut plan: Option<ServerPlan> = None;
    let mut seed_bytes = Vec::with_capacity(8);
    let mut echoed = 0u64;
    loop {
        let Ok(read) = pipe.reader.read_buffer().await else {
            return;
        };
        let (n, done) = (read.buffer.len(), read.is_completed);
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
        let mut offset = echoed;
        for chunk in read.buffer.segments() {
            let part = &chunk[..chunk.len().min(left)];
            if plan.is_none() {
                seed_bytes.extend(part.iter().take(8 - seed_bytes.len()));
            }
            if let Some(seed) = plan.as_ref().map(|p| p.seed) {
                if let Some(i) =
                    (0..part.len()).find(|&i| part[i] != byte_at(seed, offset + i as u64))
                {
                    let report = format!(
                        "the server received a wrong byte {} on connection {seed:#x}: {}",
                        offset + i as u64,
                        describe_mismatch(seed, offset, part, i)
                    );
                    eprintln!("{report}");
                    lock(&SERVER_MISMATCH).get_or_insert(report);
                    return;
                }
            }
            offset += part.len() as u64;
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
pub struct Totals {
    connections: AtomicU64,
    complete: AtomicU64,
    resets: AtomicU64,
    server_aborts: AtomicU64,
    bytes_sent: AtomicU64,
    bytes_checked: AtomicU64,
}

/// One client connection, checked; its outcome in `totals`.
pub async fn client(addr: SocketAddr, seed: u64, deadline: Instant, totals: Arc<Totals>) {
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
    lock(&LIVE_SEEDS).push(seed);
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
                if let Some(i) = (0..n).find(|&i| buf[i] != byte_at(seed, got + i as u64)) {
                    panic!(
                        "connection {seed:#x}: byte {} of the echo differs from the byte sent; {}",
                        got + i as u64,
                        describe_mismatch(seed, got, &buf[..n], i)
                    );
                    // (The server's own check, if it saw a wrong byte first, is printed above.)
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
    lock(&LIVE_SEEDS).retain(|&s| s != seed);
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

/// Run `conns` client slots against `addr` until `secs` have passed (each slot opens connections
/// one after another; the connections under way then finish), on a runtime of its own; the
/// totals. Panics with the first failed check.
pub fn run_clients(addr: SocketAddr, secs: u64, conns: u64, seed: u64) -> Arc<Totals> {
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
            if let Err(e) = slot.await {
                let server = lock(&SERVER_MISMATCH).take();
                match server {
                    Some(report) => panic!("{report}\n(then a client failed: {e})"),
                    None => std::panic::resume_unwind(e.into_panic()),
                }
            }
        }
    });
    totals
}

impl Totals {
    /// One line for the log.
    pub fn summary(&self) -> String {
        let t = |n: &AtomicU64| n.load(Ordering::Relaxed);
        format!(
            "{} connections ({} complete, {} client resets, {} server aborts), {} bytes sent, {} \
             echoed and checked",
            t(&self.connections),
            t(&self.complete),
            t(&self.resets),
            t(&self.server_aborts),
            t(&self.bytes_sent),
            t(&self.bytes_checked),
        )
    }

    /// Connections run to their end.
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }

    /// Connections that sent everything and got all of it back.
    pub fn complete(&self) -> u64 {
        self.complete.load(Ordering::Relaxed)
    }
}

/// Panics with the server's report if its application received a wrong byte.
pub fn assert_server_saw_no_wrong_byte() {
    if let Some(report) = lock(&SERVER_MISMATCH).take() {
        panic!("{report}");
    }
}
