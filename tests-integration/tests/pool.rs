//! The buffer pool: cross-thread steady state, plain allocations above the largest class, request
//! errors, trimming, the retained-bytes bound, clear-on-return, blocks outliving their pool, and
//! statistics that stay exact after threads exit.
//!
//! Statistics are read after the threads that wrote them were joined (or signalled through a
//! channel), so every figure is exact and asserted with `assert_eq!`.

use std::cell::RefCell;
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::thread;

use bytes::BufMut;
use packetpipe::{Error, Packet, PacketBuf, Pool, PoolStats};

/// Rent/drop pairs of the cross-thread tests (Miri runs a shorter version).
const PAIRS: u64 = if cfg!(miri) { 150 } else { 100_000 };
const WARM_UP: u64 = PAIRS / 10;

/// Every block rented was returned exactly once (a double return would make `returns > rents`,
/// which `outstanding`, a saturating difference, would hide).
#[track_caller]
fn assert_all_returned(stats: PoolStats) {
    assert_eq!(stats.rents, stats.returns, "{stats:?}");
    assert_eq!(stats.outstanding, 0, "{stats:?}");
}

/// After `trim` on a pool no live thread caches for: nothing retained, every allocation freed.
#[track_caller]
fn assert_trimmed(pool: &Pool) {
    pool.trim();
    let stats = pool.stats();
    assert_all_returned(stats);
    assert_eq!(stats.retained_bytes, 0, "{stats:?}");
    assert_eq!(
        stats.frees,
        stats.fresh_allocations + stats.unpooled_allocations,
        "{stats:?}"
    );
}

// ------------------------------------------------------------------------------------------------
// Cross-thread steady state

/// In-flight capacity of the channel between the renting and the dropping thread.
const CHANNEL: usize = 16;

/// Rent on thread A, drop on thread B, `total` times, the packets going through a bounded channel.
///
/// If `burst` is non-zero, A first rents `burst` blocks at once and sends them all, so the pool
/// owns at least `burst` blocks before the loop starts.
///
/// Returns the fresh allocations counted after `warm_up` iterations of the loop (read by A, the
/// only thread that allocates) and at the end.
fn rent_here_drop_there(
    pool: &Pool,
    size: usize,
    burst: usize,
    total: u64,
    warm_up: u64,
) -> (u64, u64) {
    let (tx, rx) = mpsc::sync_channel::<Packet>(CHANNEL);
    let dropper = thread::spawn(move || {
        let mut count = 0u64;
        for packet in rx {
            if !packet.is_empty() {
                assert_eq!(u64::from_le_bytes(packet[..8].try_into().unwrap()), count);
                count += 1;
            }
        }
        count
    });
    let renter = thread::spawn({
        let pool = pool.clone();
        move || {
            let burst: Vec<Packet> = (0..burst)
                .map(|_| pool.rent(size).unwrap().freeze())
                .collect();
            for packet in burst {
                tx.send(packet).unwrap();
            }
            let mut after_warm_up = 0;
            for i in 0..total {
                if i == warm_up {
                    after_warm_up = pool.stats().fresh_allocations;
                }
                let mut buf = pool.rent(size).unwrap();
                buf.put_u64_le(i);
                tx.send(buf.freeze()).unwrap();
            }
            after_warm_up
        }
    });
    let after_warm_up = renter.join().unwrap();
    assert_eq!(dropper.join().unwrap(), total);
    (after_warm_up, pool.stats().fresh_allocations)
}

/// Blocks per thread-cache magazine of the default pool for a class.
/// The capacity a pool with the default smallest class (64 B) and largest class `max` gives a
/// request of `size` bytes, or `None` if it is not pooled: the powers of two and three sizes evenly
/// between each two (the pool's documented size classes).
fn class_size_for(max: usize, size: usize) -> Option<usize> {
    const MIN_CLASS: usize = 64;
    let size = size.max(1);
    if size <= MIN_CLASS {
        return Some(MIN_CLASS);
    }
    let power = 1usize << (usize::BITS - 1 - (size - 1).leading_zeros());
    let class = (1..=4)
        .map(|k| power + k * power / 4)
        .find(|&class| class >= size)
        .expect("twice the power of two below is at least the size");
    (class <= max).then_some(class)
}

fn magazine(class: usize) -> usize {
    (256 * 1024 / class).clamp(1, 32)
}

/// After the pool owns more blocks than can ever be away from the renting thread (the dropping
/// thread's cache, two magazines, plus one being spilled, plus the channel and one block in each
/// thread's hand), the renter always finds a block in its cache or the depot: no fresh
/// allocation, ever, over 100,000 cross-thread rent/drop pairs.
#[test]
fn rent_on_one_thread_drop_on_another_stops_allocating() {
    for size in [64, 4096, 64 * 1024] {
        // No idle eviction: this is about what the depot keeps; under valgrind's slowdown the
        // default 5 s would free magazines of the working set between the phases.
        let pool = Pool::with_options(packetpipe::PoolOptions {
            idle_eviction: None,
            ..packetpipe::PoolOptions::default()
        })
        .unwrap();
        let class = class_size_for(1 << 20, size).unwrap();
        let burst = 3 * magazine(class) + CHANNEL + 2 + 16;
        let (after_warm_up, at_end) = rent_here_drop_there(&pool, size, burst, PAIRS, 0);
        assert!(after_warm_up >= burst as u64);
        assert_eq!(
            after_warm_up, at_end,
            "{size} B: fresh allocations grew after warm-up: {after_warm_up} -> {at_end}"
        );
        let stats = pool.stats();
        assert_all_returned(stats);
        assert_eq!(stats.rents, PAIRS + burst as u64);
        // Both threads exited: every block sits in the depot (nothing was over the bound).
        assert_eq!(stats.frees, 0, "{stats:?}");
        assert_eq!(
            stats.retained_bytes,
            stats.fresh_allocations * class as u64,
            "{stats:?}"
        );
        assert_trimmed(&pool);
    }
}

/// Without a burst, the pool grows on demand while the dropping thread's cache fills, up to the
/// same bound, and then stops. (It can still take one more block late in the run: reaching the
/// bound needs the renter to run dry exactly when the dropper's cache is at its fullest.)
#[test]
fn rent_on_one_thread_drop_on_another_allocates_a_bounded_number_of_blocks() {
    for size in [64, 4096, 64 * 1024] {
        // No idle eviction, as in the test above: the bound is about what the caches and the
        // depot keep, and under Miri's slowdown (minutes for this test) the default 5 s evicts
        // magazines of the working set mid-run, which then costs a fresh block or two.
        let pool = Pool::with_options(packetpipe::PoolOptions {
            idle_eviction: None,
            ..packetpipe::PoolOptions::default()
        })
        .unwrap();
        let class = class_size_for(1 << 20, size).unwrap();
        let bound = (3 * magazine(class) + CHANNEL + 2) as u64;
        let (after_warm_up, at_end) = rent_here_drop_there(&pool, size, 0, PAIRS, WARM_UP);
        assert!(after_warm_up <= at_end);
        assert!(
            at_end <= bound,
            "{size} B: {at_end} fresh allocations, bound {bound}"
        );
        let stats = pool.stats();
        assert_all_returned(stats);
        assert_eq!(stats.rents, PAIRS);
        assert_trimmed(&pool);
    }
}

// ------------------------------------------------------------------------------------------------
// Requests above the largest class, and requests no allocation can serve

#[test]
fn over_max_requests_are_plain_allocations_and_not_retained() {
    let pool = Pool::with_options(packetpipe::PoolOptions {
        max_class_size: 4096,
        ..packetpipe::PoolOptions::default()
    })
    .unwrap();
    // The largest class is 4096 B: a request of it is pooled, one byte more is not (a probe pool
    // of the same settings, so that this pool's counts stay the test's).
    let probe = Pool::with_options(packetpipe::PoolOptions {
        max_class_size: 4096,
        ..packetpipe::PoolOptions::default()
    })
    .unwrap();
    assert_eq!(probe.rent(4096).unwrap().capacity(), 4096);
    assert_eq!(probe.rent(4097).unwrap().capacity(), 4097);
    assert_eq!(probe.stats().unpooled_allocations, 1);

    for round in 1..=3u64 {
        let mut held = Vec::new();
        for size in [4097, 5000, 1 << 20] {
            let mut buf = pool.rent(size).unwrap();
            assert!(buf.capacity() >= size);
            buf.extend_from_slice(&[round as u8; 4097]).unwrap();
            held.push(buf.freeze());
        }
        // Headroom counts toward the size: 4000 + 100 is over the largest class.
        let mut buf = pool.rent_with_headroom(100, 4000).unwrap();
        assert_eq!(buf.headroom(), 100);
        buf.extend_from_slice(&[1; 4000]).unwrap();
        buf.prepend(&[2; 100]).unwrap();
        held.push(buf.freeze());

        let stats = pool.stats();
        assert_eq!(stats.unpooled_allocations, 4 * round, "{stats:?}");
        assert_eq!(stats.fresh_allocations, 0, "{stats:?}");
        assert_eq!(stats.outstanding, 4, "{stats:?}");
        assert!(held[0].iter().all(|&b| b == round as u8));
        drop(held);

        let stats = pool.stats();
        assert_all_returned(stats);
        assert_eq!(
            stats.retained_bytes, 0,
            "unpooled blocks are never retained: {stats:?}"
        );
        assert_eq!(
            stats.frees,
            4 * round,
            "every unpooled block is freed: {stats:?}"
        );
    }

    // Dropped on another thread: still freed, not cached there.
    let packet = pool.copy_from_slice(&[9; 10_000]).unwrap();
    thread::spawn(move || drop(packet)).join().unwrap();
    let stats = pool.stats();
    assert_all_returned(stats);
    assert_eq!(
        (
            stats.unpooled_allocations,
            stats.frees,
            stats.retained_bytes
        ),
        (13, 13, 0)
    );
}

#[test]
fn zero_and_impossible_sizes_are_errors_not_aborts() {
    let pool = Pool::new();
    let err = pool.rent(0).unwrap_err();
    assert_eq!(err, Error::ZeroSizeRequest);
    assert_eq!(
        err.to_string(),
        "cannot rent a buffer of 0 bytes: the size must be at least 1"
    );

    let err = pool.rent(usize::MAX).unwrap_err();
    let Error::RequestTooLarge {
        requested: usize::MAX,
        headroom: 0,
        limit,
    } = err
    else {
        panic!("expected RequestTooLarge, got {err:?}");
    };
    assert_eq!(
        err.to_string(),
        format!(
            "cannot rent a buffer of {} bytes: the largest possible request is {limit} bytes",
            usize::MAX
        )
    );
    // Just above the limit, and the sum of headroom and size overflowing.
    for err in [
        pool.rent(limit + 1).unwrap_err(),
        pool.rent(isize::MAX as usize).unwrap_err(),
        pool.rent_with_headroom(usize::MAX, 1).unwrap_err(),
        pool.rent_with_headroom(limit, limit).unwrap_err(),
    ] {
        assert!(
            matches!(err, Error::RequestTooLarge { limit: l, .. } if l == limit),
            "{err:?}"
        );
    }

    // Representable but far beyond any machine: the allocator refuses, which is an error too.
    // (Miri stops the program on such a request instead of failing it.)
    let huge: &[usize] = if cfg!(miri) { &[] } else { &[1 << 60] };
    for &size in huge {
        match pool.rent(size).unwrap_err() {
            Error::AllocationFailed { size: refused } => {
                assert!(
                    refused > size,
                    "the refused size includes the header: {refused}"
                );
                let err = Error::AllocationFailed { size: refused };
                assert_eq!(
                    err.to_string(),
                    format!("the system allocator refused {refused} bytes")
                );
            }
            Error::RequestTooLarge { requested, .. } => assert_eq!(requested, size),
            other => panic!("unexpected error for {size} bytes: {other:?}"),
        }
    }
    let err = pool.copy_from_slice(b"").map(|p| p.len());
    assert_eq!(err, Ok(0), "copying an empty slice gives an empty packet");

    // No failed request was counted, and the pool still works.
    let stats = pool.stats();
    assert_eq!(
        (
            stats.rents,
            stats.unpooled_allocations,
            stats.fresh_allocations
        ),
        (1, 0, 1)
    );
    assert_eq!(&pool.copy_from_slice(b"fine").unwrap()[..], b"fine");
    assert_all_returned(pool.stats());
}

// ------------------------------------------------------------------------------------------------
// Trim and the retained-bytes bound

#[test]
fn trim_frees_the_depot_and_this_threads_cache() {
    let pool = Pool::with_options(packetpipe::PoolOptions {
        max_class_size: 64 * 1024,
        ..packetpipe::PoolOptions::default()
    })
    .unwrap();
    let held: Vec<PacketBuf> = [64, 100, 4096, 5000, 65536]
        .iter()
        .flat_map(|&size| (0..10).map(move |_| size))
        .map(|size| pool.rent(size).unwrap())
        .collect();
    let expected: u64 = held.iter().map(|b| b.capacity() as u64).sum();
    drop(held);
    let stats = pool.stats();
    assert_all_returned(stats);
    assert_eq!(stats.retained_bytes, expected, "{stats:?}");

    // Some blocks returned on another thread, which exits: its cache goes to the depot. (4000 B
    // is in the 4096 B class, which the first rents cached.)
    let packets: Vec<Packet> = (0..10)
        .map(|_| pool.copy_from_slice(&[1; 4000]).unwrap())
        .collect();
    thread::spawn(move || drop(packets)).join().unwrap();
    let stats = pool.stats();
    assert_all_returned(stats);
    assert_eq!(
        stats.retained_bytes, expected,
        "the rents reused cached blocks: {stats:?}"
    );

    let freed = pool.trim();
    assert_eq!(freed as u64, expected);
    let stats = pool.stats();
    assert_eq!(stats.retained_bytes, 0, "{stats:?}");
    assert_eq!(stats.frees, stats.fresh_allocations, "{stats:?}");
    assert_eq!(pool.trim(), 0);

    // The pool works after a trim, with fresh blocks.
    let before = pool.stats().fresh_allocations;
    drop(pool.rent(64).unwrap());
    assert_eq!(pool.stats().fresh_allocations, before + 1);
    assert_trimmed(&pool);
}

#[test]
fn max_retained_bytes_bounds_the_depot() {
    const BOUND: usize = 16 * 1024;
    let pool = Pool::with_options(packetpipe::PoolOptions {
        min_class_size: 1024,
        max_class_size: 1024,
        thread_cache_depth: 4,
        max_retained_bytes: BOUND,
        ..packetpipe::PoolOptions::default()
    })
    .unwrap();
    for round in 0..3 {
        let before = pool.stats();
        assert_eq!(
            before.retained_bytes,
            if round == 0 { 0 } else { BOUND as u64 }
        );
        let packets: Vec<Packet> = (0..100)
            .map(|_| pool.copy_from_slice(&[7; 1000]).unwrap())
            .collect();
        // Every retained block was reused before any fresh allocation.
        let stats = pool.stats();
        assert_eq!(
            stats.fresh_allocations - before.fresh_allocations,
            100 - before.retained_bytes / 1024
        );
        assert_eq!(stats.retained_bytes, 0);
        thread::spawn(move || drop(packets)).join().unwrap();
        let stats = pool.stats();
        assert_all_returned(stats);
        assert_eq!(
            stats.retained_bytes, BOUND as u64,
            "the depot keeps up to its bound: {stats:?}"
        );
        assert_eq!(
            stats.frees + stats.retained_bytes / 1024,
            stats.fresh_allocations,
            "{stats:?}"
        );
    }
    assert_trimmed(&pool);
}

// ------------------------------------------------------------------------------------------------
// The per-thread cache cap (`max_thread_cache_bytes`)

/// The cap tests' pools: the default classes (64 B to 1 MiB, 256 KiB magazines of up to 32
/// blocks), or under Miri, which zeroes every fresh block byte by byte and takes a while over
/// every return, classes up to 4 KiB and 8 KiB magazines of up to 8 blocks (the same magazine,
/// grant and eviction paths, over fewer blocks).
const CAP_MAX_CLASS: usize = if cfg!(miri) { 4096 } else { 1 << 20 };
const CAP_MAGAZINE: usize = if cfg!(miri) { 8192 } else { 256 * 1024 };
const CAP_DEPTH: usize = if cfg!(miri) { 8 } else { 32 };

fn cap_pool(cap: usize) -> packetpipe::PoolOptions {
    packetpipe::PoolOptions {
        max_class_size: CAP_MAX_CLASS,
        thread_cache_bytes: CAP_MAGAZINE,
        thread_cache_depth: CAP_DEPTH,
        max_thread_cache_bytes: cap,
        ..packetpipe::PoolOptions::default()
    }
}

/// Request sizes that hit every class (64 B to `CAP_MAX_CLASS`), about five per doubling (under
/// Miri about two: most classes).
fn sizes_of_every_class() -> Vec<usize> {
    let mut sizes = Vec::new();
    let mut n = 1;
    let step = if cfg!(miri) { 3 } else { 7 };
    while n <= CAP_MAX_CLASS {
        sizes.push(n);
        n += n / step + 1;
    }
    sizes.push(CAP_MAX_CLASS);
    sizes
}

/// One thread rents blocks of every class, then returns them one by one: with no depot (bound 0)
/// what the pool retains is what this thread caches, and after every single return it is within
/// the cap. Without the cap the same returns would leave it caching two magazines of each class
/// (about 22 MiB at the default settings).
#[test]
fn max_thread_cache_bytes_bounds_what_one_thread_caches() {
    // Under Miri two caps (each return and rent takes a while there; the statistics read after
    // it is a small part).
    let caps: &[usize] = if cfg!(miri) {
        &[0, CAP_MAGAZINE * 2]
    } else {
        &[0, CAP_MAGAZINE * 2 / 5, CAP_MAGAZINE * 4, CAP_MAGAZINE * 16]
    };
    let rounds = if cfg!(miri) { 1 } else { 3 };
    for &cap in caps {
        let pool = Pool::with_options(packetpipe::PoolOptions {
            max_retained_bytes: 0,
            ..cap_pool(cap)
        })
        .unwrap();
        let mut sizes = sizes_of_every_class();
        if cfg!(miri) {
            // One size per class there: the sizes below 64 B, a third of the list, all fall in
            // the 64 B class, and each costs two magazines of rents and returns; the
            // size-to-class rounding is safe code the native run covers.
            sizes.dedup_by_key(|n| class_size_for(CAP_MAX_CLASS, *n));
        }
        let (mut most, mut returned) = (0, 0);
        for round in 0..rounds {
            // Enough blocks of each class to fill both of its magazines, and one more.
            let count = |n: usize| 2 * (CAP_MAGAZINE / n.max(64)).clamp(1, CAP_DEPTH) + 1;
            let held: Vec<PacketBuf> = sizes
                .iter()
                .flat_map(|&n| (0..count(n)).map(move |_| n))
                .map(|n| pool.rent(n).unwrap())
                .collect();
            returned += held.len() as u64;
            // Returned in an order that interleaves the classes.
            let mut held: Vec<Option<PacketBuf>> = held.into_iter().map(Some).collect();
            let len = held.len();
            for i in 0..len {
                drop(held[(i * 7919 + round) % len].take());
                let retained = pool.stats().retained_bytes;
                assert!(
                    retained <= cap as u64,
                    "cap {cap}: {retained} bytes cached after {i} returns"
                );
                most = most.max(retained);
            }
            assert!(held.iter().all(Option::is_none));
        }
        let stats = pool.stats();
        assert_all_returned(stats);
        assert_eq!(stats.returns, returned);
        if cap == 0 {
            assert_eq!(most, 0, "cap 0: nothing cached");
        } else {
            assert!(most > 0, "cap {cap}: nothing cached");
        }
        assert_trimmed(&pool);
    }
}

/// The default cap: 4 MiB, below the 6.5 MiB a thread could cache with power-of-two classes.
#[test]
#[cfg_attr(
    miri,
    ignore = "rents about 200 MiB of blocks; the test above covers the same paths"
)]
fn the_default_thread_cache_cap_is_4_mib() {
    let pool = Pool::with_options(packetpipe::PoolOptions {
        max_retained_bytes: 0,
        ..packetpipe::PoolOptions::default()
    })
    .unwrap();
    let held: Vec<PacketBuf> = sizes_of_every_class()
        .iter()
        .flat_map(|&n| (0..64).map(move |_| n))
        .map(|n| pool.rent(n).unwrap())
        .collect();
    drop(held);
    let retained = pool.stats().retained_bytes;
    assert!(retained <= 4 << 20, "{retained}");
    assert!(retained >= 2 << 20, "{retained}");
    assert_trimmed(&pool);
}

/// A thread cycling through more classes than its cap holds evicts magazines to the depot and
/// gets them back from there: after the first round, no fresh allocation.
#[test]
fn evicted_magazines_come_back_from_the_depot() {
    let pool = Pool::with_options(cap_pool(CAP_MAGAZINE * 2)).unwrap();
    // Eight classes of a quarter to about two thirds of the largest, two magazines each: far
    // over the cap of two magazines.
    let sizes: Vec<usize> = (0..8).map(|i| CAP_MAX_CLASS / 16 * (4 + i)).collect();
    let mut after_first_round = 0;
    for round in 0..if cfg!(miri) { 3 } else { 5 } {
        for &n in &sizes {
            let held: Vec<PacketBuf> = (0..8).map(|_| pool.rent(n).unwrap()).collect();
            drop(held);
        }
        if round == 0 {
            after_first_round = pool.stats().fresh_allocations;
        }
    }
    let stats = pool.stats();
    assert_eq!(stats.fresh_allocations, after_first_round, "{stats:?}");
    assert_eq!(stats.frees, 0, "{stats:?}");
    assert_all_returned(stats);
    assert_trimmed(&pool);
}

/// A class whose one magazine is over the cap is not cached by the thread: its blocks go through
/// the depot, and are still reused.
#[test]
fn a_class_over_the_thread_cache_cap_goes_through_the_depot() {
    // The largest class's magazine holds at least one block, so it is over this cap.
    let pool = Pool::with_options(cap_pool(CAP_MAX_CLASS / 10)).unwrap();
    for _ in 0..10 {
        drop(pool.rent(CAP_MAX_CLASS).unwrap());
    }
    let stats = pool.stats();
    assert_eq!(stats.fresh_allocations, 1, "{stats:?}");
    assert_eq!(
        stats.retained_bytes, CAP_MAX_CLASS as u64,
        "in the depot: {stats:?}"
    );
    assert_all_returned(stats);
    assert_trimmed(&pool);
}

/// Threads returning blocks of different classes at the same moment must not together push the
/// depot over its bound.
#[test]
fn max_retained_bytes_holds_under_concurrent_returns() {
    const THREADS: usize = 3;
    const MAGAZINE: usize = 4096;
    let pool = Pool::with_options(packetpipe::PoolOptions {
        min_class_size: 1024,
        max_class_size: 4096,
        thread_cache_depth: 64,
        thread_cache_bytes: MAGAZINE,
        max_retained_bytes: MAGAZINE,
        ..packetpipe::PoolOptions::default()
    })
    .unwrap();
    let rounds = if cfg!(miri) { 3 } else { 300 };
    for round in 0..rounds {
        // Thread t gets blocks of class 1024 << t: 12 magazines' worth.
        let barrier = Arc::new(Barrier::new(THREADS));
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let size = 1024 << t;
                let blocks: Vec<PacketBuf> = (0..12 * MAGAZINE / size)
                    .map(|_| pool.rent(size).unwrap())
                    .collect();
                let barrier = barrier.clone();
                thread::spawn(move || {
                    barrier.wait();
                    drop(blocks);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let stats = pool.stats();
        assert_all_returned(stats);
        assert!(
            stats.retained_bytes <= MAGAZINE as u64,
            "round {round}: retained {} bytes with a bound of {MAGAZINE}: {stats:?}",
            stats.retained_bytes
        );
        pool.trim();
    }
    assert_trimmed(&pool);
}

// ------------------------------------------------------------------------------------------------
// Clear on return

/// Rent 256 B, fill the whole block with 0xab, return it; rent again: the same block comes back
/// (no fresh allocation). Returns the second renter's view of the free bytes.
fn reuse_after_dirty_return(pool: &Pool, drop_elsewhere: bool) -> Vec<u8> {
    let mut buf = pool.rent(256).unwrap();
    assert_eq!(buf.capacity(), 256);
    buf.extend_from_slice(&[0xab; 100]).unwrap();
    let sealed = buf.seal();
    buf.spare_mut().fill(0xab);
    buf.commit(156).unwrap();
    let rest = buf.freeze();
    if drop_elsewhere {
        thread::spawn(move || drop((sealed, rest))).join().unwrap();
    } else {
        drop((sealed, rest));
    }
    let fresh = pool.stats().fresh_allocations;
    let mut again = pool.rent(250).unwrap(); // the same (256 B) class
    assert_eq!(
        pool.stats().fresh_allocations,
        fresh,
        "the returned block was reused"
    );
    assert_eq!(again.capacity(), 256);
    again.spare_mut().to_vec()
}

#[test]
fn clear_on_return_zeroes_returned_blocks() {
    for drop_elsewhere in [false, true] {
        // Control: without the setting, the old bytes are still there (so the check below means
        // something).
        let dirty = Pool::new();
        let spare = reuse_after_dirty_return(&dirty, drop_elsewhere);
        assert!(
            spare.iter().all(|&b| b == 0xab),
            "control, dropped elsewhere: {drop_elsewhere}"
        );

        let clean = Pool::with_options(packetpipe::PoolOptions {
            clear_on_return: true,
            ..packetpipe::PoolOptions::default()
        })
        .unwrap();
        let spare = reuse_after_dirty_return(&clean, drop_elsewhere);
        assert_eq!(spare.len(), 256);
        assert!(
            spare.iter().all(|&b| b == 0),
            "dropped elsewhere: {drop_elsewhere}: {spare:x?}"
        );
    }
}

/// A packet dropped by a thread-local destructor after the pool's thread cache was torn down takes
/// the pool's no-cache path; that path must clear the block too.
#[test]
fn clear_on_return_zeroes_blocks_returned_during_thread_exit() {
    struct Holder(Option<Packet>, Option<Pool>);
    impl Drop for Holder {
        fn drop(&mut self) {
            drop(self.0.take());
            // Renting and returning while the thread cache is gone works too.
            if let Some(pool) = self.1.take() {
                let mut buf = pool.rent(256).unwrap();
                buf.extend_from_slice(b"late").unwrap();
                assert_eq!(&buf.freeze()[..], b"late");
            }
        }
    }
    thread_local! {
        static HELD: RefCell<Holder> = const { RefCell::new(Holder(None, None)) };
    }

    let pool = Pool::with_options(packetpipe::PoolOptions {
        clear_on_return: true,
        ..packetpipe::PoolOptions::default()
    })
    .unwrap();
    let worker_pool = pool.clone();
    thread::spawn(move || {
        // Touch the holder first, so that its destructor is registered before the pool's thread
        // cache and runs after it (thread-local destructors run in reverse order).
        HELD.with(|_| {});
        let mut buf = worker_pool.rent(256).unwrap();
        buf.spare_mut().fill(0xcd);
        buf.commit(256).unwrap();
        let packet = buf.freeze();
        HELD.with(|h| *h.borrow_mut() = Holder(Some(packet), Some(worker_pool)));
    })
    .join()
    .unwrap();

    let stats = pool.stats();
    assert_all_returned(stats);
    assert_eq!(stats.rents, 2, "{stats:?}");
    // Take every retained block and check each is clean.
    let retained = (stats.retained_bytes / 256) as usize;
    assert!(retained >= 1, "{stats:?}");
    let bufs: Vec<PacketBuf> = (0..retained).map(|_| pool.rent(256).unwrap()).collect();
    assert_eq!(
        pool.stats().fresh_allocations,
        stats.fresh_allocations,
        "all reused"
    );
    for mut buf in bufs {
        assert!(
            buf.spare_mut().iter().all(|&b| b == 0),
            "a returned block kept its old bytes"
        );
    }
    assert_trimmed(&pool);
}

// ------------------------------------------------------------------------------------------------
// Blocks outlive the pool handle

#[test]
fn blocks_stay_valid_after_the_pool_is_dropped() {
    let pool = Pool::with_options(packetpipe::PoolOptions {
        max_class_size: 4096,
        ..packetpipe::PoolOptions::default()
    })
    .unwrap();
    let mut buf = pool.rent(1024).unwrap();
    buf.extend_from_slice(b"sealed before the drop").unwrap();
    let early = buf.seal();
    let big = pool.copy_from_slice(&[3; 10_000]).unwrap();
    let cached_elsewhere = pool.copy_from_slice(b"x").unwrap();
    // Another thread that keeps a block of this pool in its cache while the pool goes away.
    let (to_worker, from_main) = mpsc::channel::<Option<Packet>>();
    let (to_main, from_worker) = mpsc::channel::<()>();
    let worker = thread::spawn(move || {
        for packet in from_main {
            let Some(packet) = packet else { break };
            assert!(!packet.is_empty());
            drop(packet);
            to_main.send(()).unwrap();
        }
    });
    to_worker.send(Some(cached_elsewhere)).unwrap();
    from_worker.recv().unwrap();
    drop(pool);

    // Everything still reads, clones, slices, and the buffer still writes.
    assert_eq!(&early[..], b"sealed before the drop");
    let clone = early.slice(7..13);
    assert_eq!(&clone[..], b"before");
    buf.extend_from_slice(b" and after").unwrap();
    let late = buf.seal();
    assert_eq!(&late[..], b" and after");
    assert!(big.iter().all(|&b| b == 3));

    // Dropped on another thread, after the pool is gone.
    to_worker.send(Some(early)).unwrap();
    from_worker.recv().unwrap();
    to_worker.send(Some(big)).unwrap();
    from_worker.recv().unwrap();
    let bytes = late.into_bytes();
    let other = thread::spawn(move || {
        assert_eq!(&bytes[..], b" and after");
        let mut buf = buf;
        buf.extend_from_slice(b"!").unwrap();
        drop(buf.freeze());
        drop(bytes);
    });
    other.join().unwrap();
    assert_eq!(&clone[..], b"before");
    drop(clone);
    to_worker.send(None).unwrap();
    worker.join().unwrap();
}

#[test]
fn dropping_one_pool_handle_keeps_the_pool() {
    let pool = Pool::new();
    let other = pool.clone();
    let packet = other.copy_from_slice(b"abc").unwrap();
    drop(other);
    drop(packet);
    let stats = pool.stats();
    assert_all_returned(stats);
    assert_eq!(stats.retained_bytes, 64, "still caching: {stats:?}");
    // A pool dropped on another thread than the one that used it.
    let packet = pool.copy_from_slice(b"abc").unwrap();
    thread::spawn(move || drop(pool)).join().unwrap();
    assert_eq!(&packet[..], b"abc");
}

// ------------------------------------------------------------------------------------------------
// Statistics

#[test]
fn outstanding_counts_blocks_held_on_other_threads() {
    let pool = Pool::new();
    let (ready_tx, ready_rx) = mpsc::channel::<()>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let worker = thread::spawn({
        let pool = pool.clone();
        move || {
            let held: Vec<PacketBuf> = (0..10).map(|i| pool.rent(64 << i).unwrap()).collect();
            ready_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            drop(held);
            ready_tx.send(()).unwrap();
            go_rx.recv().unwrap();
        }
    });
    ready_rx.recv().unwrap();
    let stats = pool.stats();
    assert_eq!(
        (stats.rents, stats.returns, stats.outstanding),
        (10, 0, 10),
        "{stats:?}"
    );
    go_tx.send(()).unwrap();
    ready_rx.recv().unwrap();
    let stats = pool.stats();
    assert_all_returned(stats);
    let cached: u64 = (0..10).map(|i| 64u64 << i).sum();
    assert_eq!(
        stats.retained_bytes, cached,
        "in the live worker's cache: {stats:?}"
    );
    go_tx.send(()).unwrap();
    worker.join().unwrap();
    let stats = pool.stats();
    assert_eq!(
        stats.retained_bytes, cached,
        "moved to the depot at thread exit: {stats:?}"
    );
    assert_trimmed(&pool);
}

#[test]
fn stats_stay_exact_after_threads_exit() {
    let pool = Pool::with_options(packetpipe::PoolOptions {
        max_class_size: 8192,
        thread_cache_depth: 4,
        ..packetpipe::PoolOptions::default()
    })
    .unwrap();
    let mut expected_rents = 0u64;
    let mut expected_unpooled = 0u64;
    // Generations of threads, so later ones reuse the statistics slots of earlier ones.
    let generations = if cfg!(miri) { 2 } else { 5 };
    // Packets per thread per generation (a multiple of 15: a third go to the main thread, a fifth
    // are unpooled). Miri runs a smaller version.
    let per_thread: u64 = if cfg!(miri) { 45 } else { 510 };
    let to_main = per_thread.div_ceil(3);
    for generation in 0..generations {
        let (tx, rx) = mpsc::channel::<Packet>();
        let renters: Vec<_> = (0..4u64)
            .map(|t| {
                let pool = pool.clone();
                let tx = tx.clone();
                thread::spawn(move || {
                    for i in 0..per_thread {
                        let size = [10, 64, 700, 5000, 9000][((i + t) % 5) as usize];
                        let packet = pool.copy_from_slice(&vec![i as u8; size]).unwrap();
                        if i % 3 == 0 {
                            tx.send(packet).unwrap(); // dropped by the main thread
                        } else {
                            drop(packet.clone());
                        }
                    }
                })
            })
            .collect();
        drop(tx);
        for t in renters {
            t.join().unwrap();
        }
        let on_main: Vec<Packet> = rx.iter().collect();
        assert_eq!(on_main.len() as u64, 4 * to_main);
        expected_rents += 4 * per_thread;
        expected_unpooled += 4 * (per_thread / 5);
        let stats = pool.stats();
        assert_eq!(
            stats.rents, expected_rents,
            "generation {generation}: {stats:?}"
        );
        assert_eq!(
            stats.outstanding,
            4 * to_main,
            "generation {generation}: {stats:?}"
        );
        assert_eq!(stats.unpooled_allocations, expected_unpooled, "{stats:?}");
        drop(on_main);
        let stats = pool.stats();
        assert_all_returned(stats);
        assert_eq!(stats.rents, expected_rents);
    }
    assert_trimmed(&pool);
}

// ------------------------------------------------------------------------------------------------
// Outstanding bytes

/// `outstanding_bytes` is the capacity of the blocks rented and not returned, pooled or not, on
/// this thread and others; it goes back to 0 when they are dropped, trimmed or not.
#[test]
fn outstanding_bytes_are_the_capacities_of_live_blocks() {
    let pool = Pool::with_options(packetpipe::PoolOptions {
        max_class_size: 64 * 1024,
        ..packetpipe::PoolOptions::default()
    })
    .unwrap();
    let mut held: Vec<PacketBuf> = [1, 64, 100, 4096, 5000, 65536, 100_000]
        .iter()
        .map(|&size| pool.rent(size).unwrap())
        .collect();
    let capacity = |held: &[PacketBuf]| held.iter().map(|b| b.capacity() as u64).sum::<u64>();
    assert_eq!(pool.stats().outstanding_bytes, capacity(&held));
    assert_eq!(pool.stats().unpooled_allocations, 1); // the 100,000 B one

    // A packet sealed from a buffer shares its block: the block counts once, until both go.
    let mut first = held.remove(0);
    first.put_slice(b"abc");
    let packet = first.seal();
    let first_capacity = first.capacity() as u64;
    drop(first);
    assert_eq!(
        pool.stats().outstanding_bytes,
        capacity(&held) + first_capacity
    );
    // Dropped on another thread: counted there, summed here.
    thread::spawn(move || drop(packet)).join().unwrap();
    assert_eq!(pool.stats().outstanding_bytes, capacity(&held));

    drop(held);
    let stats = pool.stats();
    assert_eq!(
        (stats.outstanding, stats.outstanding_bytes),
        (0, 0),
        "{stats:?}"
    );
    assert!(stats.retained_bytes > 0, "{stats:?}");
    assert_trimmed(&pool);
    assert_eq!(pool.stats().outstanding_bytes, 0);
}

#[test]
fn unlimited_thread_cache_settings_do_not_overflow_the_cache_accounting() {
    // A cap of usize::MAX must not make the cache's "reserved + bytes" overflow (a panic in
    // debug builds, wrapped accounting in release): the sum is a checked add.
    let pool = Pool::with_options(packetpipe::PoolOptions {
        thread_cache_depth: usize::MAX,
        thread_cache_bytes: usize::MAX,
        max_thread_cache_bytes: usize::MAX,
        ..packetpipe::PoolOptions::default()
    })
    .unwrap();
    for size in [64, 80, 96, 4096, 1 << 20] {
        drop(pool.rent(size).unwrap());
        drop(pool.rent(size).unwrap());
    }
    let stats = pool.stats();
    assert_eq!(stats.outstanding, 0);
    assert_eq!(stats.rents, 10);
    // Every block came back and is cached for reuse: renting them again allocates nothing new.
    let allocated = stats.fresh_allocations;
    for size in [64, 80, 96, 4096, 1 << 20] {
        drop(pool.rent(size).unwrap());
    }
    assert_eq!(pool.stats().fresh_allocations, allocated);
}
