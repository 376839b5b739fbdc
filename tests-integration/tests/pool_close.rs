//! Closing a pool (dropping its last `Pool` handle) while other threads still cache its blocks or
//! still hold its packets: the memory goes back promptly, nothing registers a cache for a closed
//! pool, and a `PoolMonitor` shows what is still held.
//!
//! Allocation counts are per thread (a `const`-initialized thread-local counter), so the tests of
//! this binary may run in parallel; statistics are read after the threads that wrote them were
//! joined or signalled through a channel, so every figure is exact.

use std::sync::mpsc;
use std::thread;

use packetpipe::{Packet, Pool};
use packetpipe::{PoolMonitor, PoolProbe};

mod kit;

use kit::counting_alloc;

use counting_alloc::allocations_in;

#[global_allocator]
static GLOBAL: counting_alloc::CountingAlloc = counting_alloc::CountingAlloc;

/// Initialize this thread's pool cache list (a thread-local whose first use registers a
/// destructor, which allocates) without registering a cache for any pool.
fn touch_thread_caches() {
    Pool::new().trim();
}

/// Bytes cached by threads, and how many threads hold a cache.
fn held(monitor: &PoolMonitor) -> (u64, usize) {
    (monitor.stats().retained_bytes, monitor.thread_caches())
}

/// A closed pool that nothing holds any more: every block freed, no cache left anywhere.
#[track_caller]
fn assert_fully_released(monitor: &PoolMonitor) {
    let stats = monitor.stats();
    assert!(stats.closed, "{stats:?}");
    assert_eq!(stats.rents, stats.returns, "{stats:?}");
    assert_eq!(stats.outstanding, 0, "{stats:?}");
    assert_eq!(stats.retained_bytes, 0, "{stats:?}");
    assert_eq!(monitor.thread_caches(), 0, "{stats:?}");
    assert_eq!(
        stats.frees,
        stats.fresh_allocations + stats.unpooled_allocations,
        "{stats:?}"
    );
}

/// What a worker thread is told to do next.
enum Job {
    /// Rent and return blocks of these sizes (they stay in the worker's cache).
    Cache(Pool, Vec<usize>),
    /// Drop this packet (its block goes back to a possibly closed pool).
    Drop(Packet),
    /// Rent and return one block of an unrelated pool.
    TouchOther,
    /// Rent one block of the unrelated pool and keep it (a thread that only rents).
    RentOther,
    Exit,
}

/// A thread that caches blocks and then stays alive, idle, until told what to do next.
fn worker() -> (
    mpsc::Sender<Job>,
    mpsc::Receiver<()>,
    thread::JoinHandle<()>,
) {
    let (job_tx, job_rx) = mpsc::channel::<Job>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let handle = thread::spawn(move || {
        // Magazines of 4 blocks: a thread that only rents leaves the fast path within a few rents.
        let other = Pool::with_options(packetpipe::PoolOptions {
            thread_cache_depth: MAGAZINE,
            ..packetpipe::PoolOptions::default()
        })
        .unwrap();
        let mut kept = Vec::new();
        for job in job_rx {
            match job {
                Job::Cache(pool, sizes) => {
                    let held: Vec<_> = sizes.iter().map(|&n| pool.rent(n).unwrap()).collect();
                    drop(held);
                }
                Job::Drop(packet) => drop(packet),
                Job::TouchOther => drop(other.rent(64).unwrap()),
                Job::RentOther => kept.push(other.rent(64).unwrap()),
                Job::Exit => break,
            }
            done_tx.send(()).unwrap();
        }
    });
    (job_tx, done_rx, handle)
}

fn run(jobs: &mpsc::Sender<Job>, done: &mpsc::Receiver<()>, job: Job) {
    jobs.send(job).unwrap();
    done.recv().unwrap();
}

/// Let the worker exit (its thread-locals, the caches, are dropped before `join` returns).
fn finish(jobs: mpsc::Sender<Job>, handle: thread::JoinHandle<()>) {
    jobs.send(Job::Exit).unwrap();
    handle.join().unwrap();
}

/// The worker's unrelated pool's magazine length.
const MAGAZINE: usize = 4;

const SIZES: [usize; 6] = [64, 64, 1000, 4096, 4096, 60_000];
const CACHED: u64 = 64 + 64 + 1024 + 4096 + 4096 + 65536;

// ------------------------------------------------------------------------------------------------
// Other threads' caches go back promptly

/// A thread that cached blocks of a pool frees them, and lets go of the pool's shared state, at its
/// next rent or return on any other pool after the pool closed; until then the monitor shows the
/// bytes it still holds.
#[test]
fn dropping_the_last_handle_frees_other_threads_caches_at_their_next_operation_on_any_pool() {
    let pool = Pool::new();
    let monitor = pool.monitor();
    let (jobs, done, handle) = worker();
    run(&jobs, &done, Job::Cache(pool.clone(), SIZES.to_vec()));
    assert_eq!(held(&monitor), (CACHED, 1));

    drop(pool);
    let stats = monitor.stats();
    assert!(stats.closed);
    assert_eq!(stats.outstanding, 0);
    assert_eq!(
        held(&monitor),
        (CACHED, 1),
        "the idle worker still holds its cache, and the monitor shows it"
    );

    run(&jobs, &done, Job::TouchOther);
    assert_fully_released(&monitor);
    finish(jobs, handle);
    assert_fully_released(&monitor);
}

/// A thread that only rents from another pool takes the fast rent, which does not look at the
/// close notice (only returns and the slow paths do), but it leaves the fast path when its loaded
/// magazine (and then its spare) runs empty, and frees the closed pool's cache there: within
/// two magazines and one rent.
#[test]
fn a_thread_that_only_rents_frees_a_closed_pools_cache_within_two_magazines() {
    let pool = Pool::new();
    let monitor = pool.monitor();
    let (jobs, done, handle) = worker();
    // The worker's cache of the other pool: loaded and spare magazines full.
    for _ in 0..2 * MAGAZINE {
        run(&jobs, &done, Job::RentOther);
    }
    run(&jobs, &done, Job::TouchOther);
    run(&jobs, &done, Job::Cache(pool.clone(), SIZES.to_vec()));
    drop(pool);
    assert_eq!(held(&monitor), (CACHED, 1));

    let mut rents = 0;
    while held(&monitor) != (0, 0) {
        assert!(
            rents <= 2 * MAGAZINE,
            "{rents} rents on another pool and the closed pool's cache is still held: {:?}",
            monitor.stats()
        );
        run(&jobs, &done, Job::RentOther);
        rents += 1;
    }
    assert!(rents >= 1, "a rent was needed to sweep");
    assert_fully_released(&monitor);
    finish(jobs, handle);
}

/// The same when the worker's next operation is returning a block of the closed pool itself: the
/// cache goes and the block is freed, not cached.
#[test]
fn dropping_the_last_handle_frees_other_threads_caches_when_they_return_a_block_of_it() {
    let pool = Pool::new();
    let monitor = pool.monitor();
    let packet = pool.copy_from_slice(b"returned after the close").unwrap();
    let (jobs, done, handle) = worker();
    run(&jobs, &done, Job::Cache(pool.clone(), SIZES.to_vec()));
    drop(pool);
    assert_eq!(monitor.stats().outstanding, 1);
    run(&jobs, &done, Job::Drop(packet));
    assert_fully_released(&monitor);
    finish(jobs, handle);
}

/// The closing thread's own cache and the depot go at once, with no other operation needed.
#[test]
fn dropping_the_last_handle_frees_this_threads_cache_and_the_depot_at_once() {
    let pool = Pool::new();
    let monitor = pool.monitor();
    let held = SIZES.map(|n| pool.rent(n).unwrap());
    // Into the depot: a thread that cached blocks and exited.
    let (jobs, done, handle) = worker();
    run(&jobs, &done, Job::Cache(pool.clone(), SIZES.to_vec()));
    finish(jobs, handle);
    // Into this thread's cache.
    drop(held);
    assert_eq!(monitor.stats().retained_bytes, 2 * CACHED);
    drop(pool);
    assert_fully_released(&monitor);
}

// ------------------------------------------------------------------------------------------------
// No cache for a closed pool

/// Dropping the last handle on a thread that never used the pool allocates nothing and leaves no
/// cache behind (a cache registered for the pool it closes would be kept until the thread
/// exits).
#[test]
fn dropping_the_last_handle_registers_no_cache_for_the_pool_it_closes() {
    let pool = Pool::new();
    let monitor = pool.monitor();
    let (jobs, done, handle) = worker();
    run(&jobs, &done, Job::Cache(pool.clone(), SIZES.to_vec()));
    finish(jobs, handle);
    assert_eq!(monitor.thread_caches(), 0);

    let closer = thread::spawn(move || {
        touch_thread_caches();
        let (allocations, ()) = allocations_in(|| drop(pool));
        assert_eq!(allocations, 0, "closing allocated");
        // Checked before this thread exits: no cache was registered for the closed pool.
        assert_fully_released(&monitor);
    });
    closer.join().unwrap();
}

/// `trim` on a thread that never used the pool does not register a cache either.
#[test]
fn trim_on_a_thread_that_never_used_the_pool_registers_no_cache() {
    let pool = Pool::new();
    let monitor = pool.monitor();
    drop(pool.rent(128).unwrap());
    let (allocations, freed) = thread::spawn({
        let pool = pool.clone();
        move || {
            touch_thread_caches();
            allocations_in(|| pool.trim())
        }
    })
    .join()
    .unwrap();
    assert_eq!((allocations, freed), (0, 0));
    assert_eq!(held(&monitor), (128, 1), "only this thread's cache");
}

/// Returning blocks of two closed pools alternately on one thread frees each block and allocates
/// nothing (registering a cache per return, each registration dropping the other pool's, would
/// allocate on every return).
#[test]
fn returning_blocks_of_two_closed_pools_alternately_allocates_nothing() {
    const BLOCKS: usize = 100;
    let (a, b) = (Pool::new(), Pool::new());
    let (monitor_a, monitor_b) = (a.monitor(), b.monitor());
    let rent_all = |pool: &Pool| -> Vec<Packet> {
        (0..BLOCKS)
            .map(|i| pool.copy_from_slice(&[i as u8; 100]).unwrap())
            .collect()
    };
    let (from_a, from_b) = (rent_all(&a), rent_all(&b));
    drop((a, b));
    let mut alternating = Vec::with_capacity(2 * BLOCKS);
    for (x, y) in from_a.into_iter().zip(from_b) {
        alternating.push(x);
        alternating.push(y);
    }
    // Dropped one at a time, front to back: a, b, a, b, ...
    let (allocations, ()) = allocations_in(|| alternating.into_iter().for_each(drop));
    assert_eq!(allocations, 0);
    for monitor in [&monitor_a, &monitor_b] {
        assert_eq!(monitor.stats().fresh_allocations, BLOCKS as u64);
        assert_fully_released(monitor);
    }
}

/// The same on a thread that had caches for both pools when they closed elsewhere.
#[test]
fn returning_blocks_of_two_pools_closed_on_another_thread_allocates_nothing() {
    const BLOCKS: usize = 50;
    let (a, b) = (Pool::new(), Pool::new());
    let (monitor_a, monitor_b) = (a.monitor(), b.monitor());
    let mut alternating = Vec::with_capacity(2 * BLOCKS);
    for i in 0..BLOCKS {
        alternating.push(a.copy_from_slice(&[i as u8; 10]).unwrap());
        alternating.push(b.copy_from_slice(&[i as u8; 5000]).unwrap());
    }
    // Both pools cached on this thread too.
    drop((a.rent(64).unwrap(), b.rent(64).unwrap()));
    thread::spawn(move || drop((a, b))).join().unwrap();
    for monitor in [&monitor_a, &monitor_b] {
        assert_eq!(
            held(monitor),
            (64, 1),
            "this thread's caches, until its next operation"
        );
    }
    let (allocations, ()) = allocations_in(|| alternating.into_iter().for_each(drop));
    assert_eq!(allocations, 0);
    assert_fully_released(&monitor_a);
    assert_fully_released(&monitor_b);
}

// ------------------------------------------------------------------------------------------------
// What the monitor shows

/// A monitor reads the same statistics as the pool while it is open, and after the close shows the
/// packets still alive and the bytes still cached; it keeps no block alive itself.
#[test]
fn monitor_shows_what_a_closed_pool_still_holds() {
    let pool = Pool::with_options(packetpipe::PoolOptions {
        max_class_size: 4096,
        ..packetpipe::PoolOptions::default()
    })
    .unwrap();
    let monitor = pool.monitor();
    let live = [
        pool.copy_from_slice(&[1; 100]).unwrap(),
        pool.copy_from_slice(&[2; 10_000]).unwrap(), // unpooled
    ];
    drop(pool.rent(4096).unwrap());
    assert_eq!(monitor.stats(), pool.stats());
    assert!(!monitor.stats().closed);
    assert!(format!("{monitor:?}").contains("outstanding: 2"));
    drop(pool);
    assert_eq!(monitor.stats().outstanding, 2);
    assert_eq!(held(&monitor), (0, 0));
    drop(live);
    assert_fully_released(&monitor);
}
