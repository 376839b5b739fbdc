//! What a buffer costs: allocation versus pool rent+return, and copying, at sizes from 64 B to 1 MiB.
//!
//! One criterion group per size (`buffer_cost/64B`, ..., `buffer_cost/1MiB`) so the ratios within a
//! size read off directly:
//!
//! - `vec_zeroed`: `vec![0u8; n]` + drop (`calloc` + `free`).
//! - `vec_with_capacity`: `Vec::with_capacity(n)` + drop (`malloc` + `free`), the baseline for the
//!   pool rows.
//! - `pool_global_rent_return` / `pool_new_rent_return`: warm `rent(n)` + drop on `Pool::global()`
//!   and on a `Pool::new()`.
//! - `copy_from_slice`: copy between two preallocated buffers, the baseline for the copy rows.
//! - `to_vec_alloc_copy`: `slice.to_vec()` (allocate + copy + free).
//! - `pool_rent_copy_return`: rent + `extend_from_slice` + drop.
//!
//! Times are CPU time of the benchmarking thread (`ThreadCpuTime` below), so that time spent
//! descheduled on a shared machine does not count.
//!
//! Copy speed on glibc 2.36 / AMD EPYC depends on `GLIBC_TUNABLES` (see
//! BENCHMARKS.md); run the `copy` rows both with and without
//! `GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=2000000`.
//!
//! ```text
//! CARGO_TARGET_DIR=/work/target-bench GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=2000000 \
//!     cargo bench -p packetpipe-perf --bench buffer_cost -- --warm-up-time 1 --measurement-time 2
//! ```

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use packetpipe::Pool;

#[path = "common/cpu_time.rs"]
mod cpu_time;

use cpu_time::ThreadCpuTime;

const SIZES: [(usize, &str); 7] = [
    (64, "64B"),
    (512, "512B"),
    (4 << 10, "4KiB"),
    (16 << 10, "16KiB"),
    (64 << 10, "64KiB"),
    (128 << 10, "128KiB"),
    (1 << 20, "1MiB"),
];

fn buffer_cost(c: &mut Criterion<ThreadCpuTime>) {
    let own_pool = Pool::new();
    let global = Pool::global();
    for (size, label) in SIZES {
        let mut group = c.benchmark_group(format!("buffer_cost/{label}"));

        group.bench_function("vec_zeroed", |b| {
            b.iter(|| drop(black_box(vec![0u8; black_box(size)])))
        });
        group.bench_function("vec_with_capacity", |b| {
            b.iter(|| drop(black_box(Vec::<u8>::with_capacity(black_box(size)))))
        });

        for (name, pool) in [
            ("pool_global_rent_return", global),
            ("pool_new_rent_return", &own_pool),
        ] {
            // Warm: the first rent of a class allocates; every later one is served by the cache.
            drop(pool.rent(size).expect("rent"));
            group.bench_function(name, |b| {
                b.iter(|| drop(black_box(pool.rent(black_box(size)).expect("rent"))))
            });
        }

        let src: Vec<u8> = (0..size).map(|i| i as u8).collect();
        let mut dst = vec![0u8; size];
        group.bench_function("copy_from_slice", |b| {
            b.iter(|| {
                let dst: &mut [u8] = black_box(&mut dst[..]);
                dst.copy_from_slice(black_box(&src[..]));
                black_box(dst);
            })
        });
        group.bench_function("to_vec_alloc_copy", |b| {
            b.iter(|| drop(black_box(black_box(&src[..]).to_vec())))
        });
        group.bench_function("pool_rent_copy_return", |b| {
            b.iter(|| {
                let mut buf = own_pool.rent(black_box(size)).expect("rent");
                buf.extend_from_slice(black_box(&src[..])).expect("fits");
                drop(black_box(buf));
            })
        });
        group.finish();
    }
    let stats = own_pool.stats();
    assert_eq!(stats.outstanding, 0, "buffer_cost leaked blocks: {stats:?}");
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(ThreadCpuTime::default());
    targets = buffer_cost
}
criterion_main!(benches);
