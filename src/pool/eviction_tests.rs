//! Idle eviction: blocks the depot has kept unused for the pool's idle time are freed, and the
//! statistics say how much went back. The clock is passed in (`Pool::evict_idle_at`, a test-only
//! hook), never slept on.

use std::time::{Duration, Instant};

use crate::{Pool, PoolOptions};

const IDLE: Duration = Duration::from_secs(5);

/// A pool whose returns all go to the shared depot (no thread caching), so what is retained is
/// what eviction can see.
fn depot_pool() -> Pool {
    Pool::with_options(PoolOptions {
        max_thread_cache_bytes: 0,
        idle_eviction: Some(IDLE),
        ..PoolOptions::default()
    })
    .unwrap()
}

#[test]
fn blocks_unused_for_the_idle_time_are_freed_and_counted() {
    let pool = depot_pool();
    let start = Instant::now();
    let held: Vec<_> = (0..8).map(|_| pool.rent(256 * 1024).unwrap()).collect();
    drop(held);
    let stats = pool.stats();
    assert_eq!(stats.retained_bytes, 8 * 256 * 1024);
    assert_eq!((stats.evictions, stats.evicted_bytes), (0, 0));

    // Not idle long enough: nothing goes.
    assert_eq!(pool.evict_idle_at(start + IDLE / 2), 0);
    assert_eq!(pool.stats().retained_bytes, 8 * 256 * 1024);

    // Past the idle time: everything goes back, and the statistics say so.
    let freed = pool.evict_idle_at(Instant::now() + IDLE + Duration::from_millis(1));
    assert_eq!(freed, 8 * 256 * 1024);
    let stats = pool.stats();
    assert_eq!(stats.retained_bytes, 0);
    assert_eq!(stats.evictions, 8);
    assert_eq!(stats.evicted_bytes, 8 * 256 * 1024);
    assert_eq!(stats.frees, 8);
    assert_eq!(stats.outstanding, 0);
}

#[test]
fn blocks_in_use_again_are_kept() {
    let pool = depot_pool();
    drop(pool.rent(4096).unwrap());
    let later = Instant::now() + IDLE + Duration::from_secs(1);
    // Rented and returned again: it is the newest magazine, so it stays while the old one goes.
    let a = pool.rent(4096).unwrap();
    drop(pool.rent(8192).unwrap()); // another class, returned now
    drop(a);
    let freed = pool.evict_idle_at(later - IDLE); // now-ish: both were returned just now
    assert_eq!(freed, 0);
    assert_eq!(pool.stats().retained_bytes, 4096 + 8192);
    // Blocks held by packets are never touched.
    let held = pool.rent(100 * 1024).unwrap();
    pool.evict_idle_at(later);
    assert_eq!(pool.stats().retained_bytes, 0);
    assert_eq!(pool.stats().outstanding, 1);
    drop(held);
}

#[test]
fn eviction_off_keeps_blocks_until_trimmed() {
    let pool = Pool::with_options(PoolOptions {
        max_thread_cache_bytes: 0,
        idle_eviction: None,
        ..PoolOptions::default()
    })
    .unwrap();
    drop(pool.rent(4096).unwrap());
    assert_eq!(
        pool.evict_idle_at(Instant::now() + Duration::from_secs(3600)),
        0
    );
    assert_eq!(pool.stats().retained_bytes, 4096);
    assert_eq!(pool.trim(), 4096);
}

#[test]
fn large_blocks_are_freed_to_the_system_on_eviction() {
    // Large blocks are mapped on their own (Unix): the pool frees them like any other; the
    // figure of what the process gives back is in BENCHMARKS.md ("Memory under attack").
    let pool = depot_pool();
    let mut buf = pool.rent(1 << 20).unwrap();
    assert!(buf.spare_mut().iter().all(|&b| b == 0));
    buf.extend_from_slice(&[1; 1 << 20]).unwrap();
    drop(buf);
    let freed = pool.evict_idle_at(Instant::now() + 2 * IDLE);
    assert_eq!(freed, 1 << 20);
    assert_eq!(pool.stats().frees, pool.stats().fresh_allocations);
}
