//! What the packet types cost: create, clone, slice, split, convert, display; under threads; and
//! rented on one thread, released on another.
//!
//! Groups:
//!
//! - `owned_packet`: 64 B pooled `Packet` lifecycles, next to `Vec`/`Bytes` baselines from the same run
//!   (`vec_with_capacity_64` is the baseline for clone + release).
//! - `packet_slice`: `Packet::slice` + drop per variant (pooled, `Bytes`, static).
//! - `display/{64B,1KiB,8KiB}`: hex dump and lossy UTF-8 written into a reused `String`.
//! - `threads/{wall,cpu}/T`: create + release (`copy_from_slice` of 64 B + drop) on T = 1, 2, 4, 8
//!   threads, each doing the same number of operations. `wall` is wall time / (ops * T) (aggregate
//!   throughput, bounded by the core count); `cpu` is the summed thread CPU time / (ops * T), the
//!   cost of one operation whatever the core count. Compare each with its T = 1 row.
//! - `cross_thread/{wall,cpu}`: a producer rents and sends through a `sync_channel` to a consumer
//!   that drops, per item (`wall`: wall time; `cpu`: producer + consumer CPU time);
//!   `channel_u64` and `vec_*` are the baselines. The std channel's blocking and waking dominate
//!   these rows.
//! - `cross_thread_batched/{wall,cpu}`: the same with items sent 1024 to a message, which spreads
//!   the channel's cost and shows the cost of renting here and releasing there.
//!
//! Single-thread rows are CPU time of the benchmarking thread (`ThreadCpuTime` below), so that
//! time spent descheduled on a shared machine does not count; `threads` and `cross_thread` report
//! what their `iter_custom` measures (named above).
//!
//! Before the benches, a steady-state check prints the pool's `fresh_allocations` delta for the
//! cross-thread pattern (`steady state: ...`).
//!
//! ```text
//! CARGO_TARGET_DIR=/work/target-bench GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=2000000 \
//!     cargo bench -p packetpipe-perf --bench packet -- --warm-up-time 1 --measurement-time 2
//! ```

use std::fmt::Write as _;
use std::hint::black_box;
use std::sync::mpsc::sync_channel;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{criterion_group, BatchSize, Criterion};
use packetpipe::{ByteSegments, Packet, Pool};

#[path = "common/cpu_time.rs"]
mod cpu_time;

use cpu_time::{thread_cpu_time, ThreadCpuTime};

const PAYLOAD_64: [u8; 64] = [0xab; 64];

fn owned_packet(c: &mut Criterion<ThreadCpuTime>) {
    let pool = Pool::new();
    let mut group = c.benchmark_group("owned_packet");

    // Baselines.
    group.bench_function("vec_with_capacity_64", |b| {
        b.iter(|| drop(black_box(Vec::<u8>::with_capacity(black_box(64)))))
    });
    group.bench_function("vec_to_vec_64", |b| {
        b.iter(|| drop(black_box(black_box(&PAYLOAD_64[..]).to_vec())))
    });
    group.bench_function("bytes_copy_from_slice_64", |b| {
        b.iter(|| {
            drop(black_box(Bytes::copy_from_slice(black_box(
                &PAYLOAD_64[..],
            ))))
        })
    });

    // Create + release.
    group.bench_function("create_release_copy_from_slice_64", |b| {
        b.iter(|| {
            drop(black_box(
                pool.copy_from_slice(black_box(&PAYLOAD_64[..]))
                    .expect("rent"),
            ))
        })
    });
    group.bench_function("create_release_rent_seal_64", |b| {
        b.iter(|| {
            let mut buf = pool.rent(black_box(64)).expect("rent");
            buf.extend_from_slice(black_box(&PAYLOAD_64[..]))
                .expect("fits");
            let packet = buf.seal();
            drop(black_box(packet));
            drop(black_box(buf));
        })
    });
    group.bench_function("create_release_rent_freeze_64", |b| {
        b.iter(|| {
            let mut buf = pool.rent(black_box(64)).expect("rent");
            buf.extend_from_slice(black_box(&PAYLOAD_64[..]))
                .expect("fits");
            drop(black_box(buf.freeze()));
        })
    });

    // Sharing an existing packet.
    let packet = pool.copy_from_slice(&PAYLOAD_64).expect("rent");
    group.bench_function("clone_release", |b| {
        b.iter(|| drop(black_box(black_box(&packet).clone())))
    });
    group.bench_function("slice_release", |b| {
        b.iter(|| drop(black_box(black_box(&packet).slice(8..56))))
    });
    group.bench_function("clone_split_to_release_both", |b| {
        b.iter(|| {
            let mut tail = black_box(&packet).clone();
            let head = tail.split_to(black_box(16));
            drop(black_box(head));
            drop(black_box(tail));
        })
    });
    group.bench_function("clone_into_bytes_release", |b| {
        b.iter(|| drop(black_box(black_box(&packet).clone().into_bytes())))
    });

    // The block's own release included: a fresh packet per iteration (made outside the timing, in
    // batches that fit the thread cache), then clone, release the clone and the original.
    group.bench_function("clone_release_both_64", |b| {
        b.iter_batched(
            || pool.copy_from_slice(&PAYLOAD_64).expect("rent"),
            |first| {
                let second = black_box(&first).clone();
                drop(black_box(first));
                drop(black_box(second));
            },
            BatchSize::NumIterations(64),
        )
    });

    // Full lifecycle: create, share once, release both (the .NET "shared slice + both released").
    group.bench_function("create_clone_release_both_64", |b| {
        b.iter(|| {
            let first = pool
                .copy_from_slice(black_box(&PAYLOAD_64[..]))
                .expect("rent");
            let second = black_box(&first).clone();
            drop(black_box(first));
            drop(black_box(second));
        })
    });
    group.bench_function("create_slice_release_both_64", |b| {
        b.iter(|| {
            let first = pool
                .copy_from_slice(black_box(&PAYLOAD_64[..]))
                .expect("rent");
            let second = black_box(&first).slice(8..56);
            drop(black_box(first));
            drop(black_box(second));
        })
    });
    group.finish();
    drop(packet);
    assert_eq!(pool.stats().outstanding, 0, "owned_packet leaked blocks");
}

fn packet_slice(c: &mut Criterion<ThreadCpuTime>) {
    let pool = Pool::new();
    let variants = [
        ("pooled", pool.copy_from_slice(&PAYLOAD_64).expect("rent")),
        ("bytes", Packet::from(Bytes::from(PAYLOAD_64.to_vec()))),
        ("static", Packet::from_static(&PAYLOAD_64)),
    ];
    let mut group = c.benchmark_group("packet_slice");
    for (name, packet) in &variants {
        group.bench_function(*name, |b| {
            b.iter(|| drop(black_box(black_box(packet).slice(8..56))))
        });
    }
    group.finish();
}

/// Text for the lossy UTF-8 rows: mostly ASCII with two- and three-byte characters.
fn text(size: usize) -> Vec<u8> {
    "GET /caf\u{e9}/\u{20ac}uro HTTP/1.1\r\nHost: example.org\r\n"
        .bytes()
        .cycle()
        .take(size)
        .collect()
}

/// Like `text`, with one invalid byte every 64 (the replacement-character path).
fn text_with_invalid(size: usize) -> Vec<u8> {
    let mut bytes = text(size);
    for b in bytes.iter_mut().step_by(64) {
        *b = 0xff;
    }
    bytes
}

fn display(c: &mut Criterion<ThreadCpuTime>) {
    let pool = Pool::new();
    for (size, label) in [(64, "64B"), (1 << 10, "1KiB"), (8 << 10, "8KiB")] {
        let binary: Vec<u8> = (0..size).map(|i| (i * 7) as u8).collect();
        let hex = pool.copy_from_slice(&binary).expect("rent");
        let utf8 = pool.copy_from_slice(&text(size)).expect("rent");
        let invalid = pool
            .copy_from_slice(&text_with_invalid(size))
            .expect("rent");
        let mut out = String::with_capacity(128 * size);
        let mut group = c.benchmark_group(format!("display/{label}"));
        group.bench_function("hex_dump", |b| {
            b.iter(|| {
                out.clear();
                write!(out, "{}", black_box(&hex).hex_dump(size)).expect("write");
                black_box(out.len());
            })
        });
        group.bench_function("utf8_lossy", |b| {
            b.iter(|| {
                out.clear();
                write!(out, "{}", black_box(&utf8).display_lossy()).expect("write");
                black_box(out.len());
            })
        });
        group.bench_function("utf8_lossy_invalid", |b| {
            b.iter(|| {
                out.clear();
                write!(out, "{}", black_box(&invalid).display_lossy()).expect("write");
                black_box(out.len());
            })
        });
        group.finish();
    }
}

/// Wall time (first start to last end) and summed CPU time of `threads` threads each doing `ops`
/// create + release operations on `pool`.
fn run_threads(pool: &Pool, threads: usize, ops: u64) -> (Duration, Duration) {
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let pool = pool.clone();
            let barrier = barrier.clone();
            thread::spawn(move || {
                // Warm this thread's cache before the clock starts.
                drop(pool.copy_from_slice(&PAYLOAD_64).expect("rent"));
                barrier.wait();
                let cpu_start = thread_cpu_time();
                let start = Instant::now();
                for _ in 0..ops {
                    drop(black_box(
                        pool.copy_from_slice(black_box(&PAYLOAD_64[..]))
                            .expect("rent"),
                    ));
                }
                let end = Instant::now();
                let cpu = match (cpu_start, thread_cpu_time()) {
                    (Some(a), Some(b)) => b - a,
                    _ => end - start,
                };
                (start, end, cpu)
            })
        })
        .collect();
    let results: Vec<_> = handles
        .into_iter()
        .map(|h| h.join().expect("worker"))
        .collect();
    let start = results.iter().map(|r| r.0).min().expect("threads");
    let end = results.iter().map(|r| r.1).max().expect("threads");
    let cpu = results.iter().map(|r| r.2).sum();
    (end - start, cpu)
}

fn threads(c: &mut Criterion<ThreadCpuTime>) {
    let pool = Pool::new();
    let mut group = c.benchmark_group("threads");
    for threads in [1usize, 2, 4, 8] {
        // Criterion divides by `iters`; dividing by the thread count too gives time per operation.
        group.bench_function(format!("wall/{threads}"), |b| {
            b.iter_custom(|iters| run_threads(&pool, threads, iters).0 / threads as u32)
        });
        group.bench_function(format!("cpu/{threads}"), |b| {
            b.iter_custom(|iters| run_threads(&pool, threads, iters).1 / threads as u32)
        });
    }
    group.finish();
    assert_eq!(pool.stats().outstanding, 0, "threads leaked blocks");
}

/// Channel depth for the cross-thread rows.
const DEPTH: usize = 256;

/// The calling thread makes `items` items with `make` and sends them to a consumer thread that
/// drops them. Returns the wall time until the consumer has dropped the last, and the CPU time of
/// both threads added up (time spent blocked on the channel is in the first, not the second).
fn produce_consume<T: Send + 'static>(
    items: u64,
    mut make: impl FnMut() -> T,
) -> (Duration, Duration) {
    let (tx, rx) = sync_channel::<T>(DEPTH);
    let consumer = thread::spawn(move || {
        let start = thread_cpu_time();
        for item in rx {
            drop(black_box(item));
        }
        start.zip(thread_cpu_time()).map(|(a, b)| b - a)
    });
    let cpu_start = thread_cpu_time();
    let start = Instant::now();
    for _ in 0..items {
        tx.send(make()).expect("consumer alive");
    }
    drop(tx);
    let producer_cpu = cpu_start.zip(thread_cpu_time()).map(|(a, b)| b - a);
    let consumer_cpu = consumer.join().expect("consumer");
    let wall = start.elapsed();
    let cpu = match (producer_cpu, consumer_cpu) {
        (Some(p), Some(c)) => p + c,
        _ => wall,
    };
    (wall, cpu)
}

fn make_packet(pool: &Pool, size: usize) -> Packet {
    let mut buf = pool.rent(size).expect("rent");
    buf.extend_from_slice(&PAYLOAD_64).expect("fits");
    buf.freeze()
}

fn cross_thread(c: &mut Criterion<ThreadCpuTime>) {
    let pool = Pool::new();
    let mut group = c.benchmark_group("cross_thread");
    // `wall`: wall time per item; `cpu`: producer + consumer CPU time per item.
    for (kind, pick) in [("wall", 0usize), ("cpu", 1)] {
        let pick = move |(wall, cpu): (Duration, Duration)| if pick == 0 { wall } else { cpu };
        group.bench_function(format!("{kind}/channel_u64"), |b| {
            b.iter_custom(|iters| pick(produce_consume(iters, || black_box(7u64))))
        });
        for (size, label) in [(64usize, "64B"), (4096, "4KiB")] {
            group.bench_function(format!("{kind}/vec_{label}"), |b| {
                b.iter_custom(|iters| {
                    pick(produce_consume(iters, || {
                        let mut v = Vec::<u8>::with_capacity(size);
                        v.extend_from_slice(&PAYLOAD_64);
                        black_box(v)
                    }))
                })
            });
            let pool = pool.clone();
            group.bench_function(format!("{kind}/packet_{label}"), move |b| {
                b.iter_custom(|iters| {
                    pick(produce_consume(iters, || {
                        black_box(make_packet(&pool, size))
                    }))
                })
            });
        }
    }
    group.finish();
    assert_eq!(pool.stats().outstanding, 0, "cross_thread leaked blocks");
}

/// Items per message in the batched cross-thread rows, and messages the channel holds. Each
/// message can cost a futex wake and a context switch (microseconds in a VM), so batches are big.
const BATCH: usize = 1024;
const BATCH_DEPTH: usize = 2;

/// As [`produce_consume`], but the items travel in batches of [`BATCH`] (one channel message per
/// batch), so the channel's cost and its blocking and waking are spread over many items and the
/// figures show mostly the cost of making an item on one thread and dropping it on the other.
fn produce_consume_batched<T: Send + 'static>(
    items: u64,
    mut make: impl FnMut() -> T,
) -> (Duration, Duration) {
    let (tx, rx) = sync_channel::<Vec<T>>(BATCH_DEPTH);
    let consumer = thread::spawn(move || {
        let start = thread_cpu_time();
        for batch in rx {
            for item in batch {
                drop(black_box(item));
            }
        }
        start.zip(thread_cpu_time()).map(|(a, b)| b - a)
    });
    let cpu_start = thread_cpu_time();
    let start = Instant::now();
    let mut left = items;
    while left > 0 {
        let n = left.min(BATCH as u64);
        let mut batch = Vec::with_capacity(BATCH);
        for _ in 0..n {
            batch.push(make());
        }
        tx.send(batch).expect("consumer alive");
        left -= n;
    }
    drop(tx);
    let producer_cpu = cpu_start.zip(thread_cpu_time()).map(|(a, b)| b - a);
    let consumer_cpu = consumer.join().expect("consumer");
    let wall = start.elapsed();
    let cpu = match (producer_cpu, consumer_cpu) {
        (Some(p), Some(c)) => p + c,
        _ => wall,
    };
    (wall, cpu)
}

fn cross_thread_batched(c: &mut Criterion<ThreadCpuTime>) {
    let pool = Pool::new();
    let mut group = c.benchmark_group("cross_thread_batched");
    // `wall`: wall time per item; `cpu`: producer + consumer CPU time per item.
    for (kind, pick) in [("wall", 0usize), ("cpu", 1)] {
        let pick = move |(wall, cpu): (Duration, Duration)| if pick == 0 { wall } else { cpu };
        group.bench_function(format!("{kind}/u64"), |b| {
            b.iter_custom(|iters| pick(produce_consume_batched(iters, || black_box(7u64))))
        });
        for (size, label) in [(64usize, "64B"), (4096, "4KiB")] {
            group.bench_function(format!("{kind}/vec_{label}"), |b| {
                b.iter_custom(|iters| {
                    pick(produce_consume_batched(iters, || {
                        let mut v = Vec::<u8>::with_capacity(size);
                        v.extend_from_slice(&PAYLOAD_64);
                        black_box(v)
                    }))
                })
            });
            let pool = pool.clone();
            group.bench_function(format!("{kind}/packet_{label}"), move |b| {
                b.iter_custom(|iters| {
                    pick(produce_consume_batched(iters, || {
                        black_box(make_packet(&pool, size))
                    }))
                })
            });
        }
    }
    group.finish();
    assert_eq!(
        pool.stats().outstanding,
        0,
        "cross_thread_batched leaked blocks"
    );
}

/// Rent here, release there: after a warm-up, the pool must allocate nothing new. Prints the
/// `fresh_allocations` delta of each of several rounds, so convergence shows.
///
/// The number of blocks the pattern needs is bounded: the items in the channel, plus the
/// consumer's two magazines (it spills the older one to the depot when both are full), plus the
/// one item in each thread's hands. Once that many exist, the producer always finds a magazine in
/// the depot when its own runs empty.
fn steady_state_check() {
    const WARM_UP: u64 = 1_000_000;
    const ROUND: u64 = 500_000;
    const ROUNDS: usize = 4;
    const MAGAZINE: usize = 32;
    const BOUND: u64 = (DEPTH + 2 * MAGAZINE + 2) as u64;
    for (size, label) in [(64usize, "64B"), (4096, "4KiB")] {
        let pool = Pool::with_options(packetpipe::PoolOptions {
            thread_cache_depth: MAGAZINE,
            ..packetpipe::PoolOptions::default()
        })
        .expect("pool");
        let make = || make_packet(&pool, size);
        produce_consume(WARM_UP, make);
        let mut deltas = Vec::new();
        let mut elapsed = Duration::ZERO;
        for _ in 0..ROUNDS {
            let before = pool.stats().fresh_allocations;
            elapsed += produce_consume(ROUND, make).0;
            deltas.push(pool.stats().fresh_allocations - before);
        }
        let stats = pool.stats();
        println!(
            "steady state: rent on one thread, release on another, {label}, channel depth {DEPTH}: \
             fresh_allocations delta per {ROUND}-item round after {WARM_UP} warm-up: {deltas:?} \
             (blocks ever allocated {} of at most {BOUND}, outstanding {}, retained {} B), {:.1} ns/item \
             -> {}",
            stats.fresh_allocations,
            stats.outstanding,
            stats.retained_bytes,
            elapsed.as_nanos() as f64 / (ROUND as usize * ROUNDS) as f64,
            if stats.fresh_allocations <= BOUND {
                "OK"
            } else {
                "FRESH ALLOCATIONS IN STEADY STATE"
            },
        );
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(ThreadCpuTime::default());
    targets = owned_packet, packet_slice, display, threads, cross_thread, cross_thread_batched
}

fn main() {
    steady_state_check();
    benches();
    Criterion::default().configure_from_args().final_summary();
}
