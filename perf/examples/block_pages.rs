//! Pages that large pooled blocks keep resident: 200 blocks of 256 KiB rented from a pool that
//! caches nothing (every return frees the block, every rent allocates a zeroed one), one byte
//! written into each, all freed; three rounds, RSS from `/proc/self/status`.
//!
//! ```text
//! cargo run --release -p packetpipe-perf --example block_pages
//! ```
//!
//! Large blocks are mapped on their own (`src/block.rs`): a fresh mapping is zero without being
//! written, so a rented block costs only the pages its bytes use, and freeing it unmaps them. A
//! block from the heap that reuses a freed chunk is zeroed by `calloc` page by page, so every one
//! of its pages is touched (BENCHMARKS.md, "Memory under attack").
#![forbid(unsafe_code)]

fn rss_kib() -> i64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("Linux /proc");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .expect("a VmRSS line")
}

fn main() {
    let pool = packetpipe::Pool::with_options(packetpipe::PoolOptions {
        max_class_size: 1 << 20,
        max_thread_cache_bytes: 0,
        max_retained_bytes: 0,
        ..packetpipe::PoolOptions::default()
    })
    .expect("a pool");
    // glibc raises its mmap threshold when a large mapped chunk is freed, as a server's first
    // frees do: later large allocations come from the heap.
    drop(vec![1u8; 1 << 20]);
    let start = rss_kib();
    for round in 1..=3 {
        let mut blocks: Vec<_> = (0..200)
            .map(|_| pool.rent(256 * 1024).expect("a block"))
            .collect();
        for block in &mut blocks {
            block.extend_from_slice(b"x").expect("room");
        }
        let held = rss_kib() - start;
        drop(blocks);
        let freed = rss_kib() - start;
        println!("round {round}: 200 x 256 KiB held +{held} KiB, freed +{freed} KiB");
    }
}
