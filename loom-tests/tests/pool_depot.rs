#![cfg(packetpipe_loom)]
//! The pool's depot exchange: rent on one thread, return on another.

use loom::thread;
use packetpipe::PacketBuf;
use packetpipe_loom_tests::tiny_pool;

fn address(buf: &mut PacketBuf) -> usize {
    buf.spare_mut().as_ptr() as usize
}

/// The main thread rents three blocks and hands them to a second thread that returns them (its
/// cache spills a magazine to the depot) while the main thread rents two more (from the depot when
/// a magazine is there, fresh otherwise). No block is handed out twice: the blocks alive at once
/// are distinct, and every rent and return is counted once. No block is lost: a block that never
/// goes back (to a cache, the depot, or the allocator when the pool closes) keeps its reference to
/// the pool's shared state alive, and loom fails the execution with "Arc leaked" (see
/// `forgotten_block_is_caught` for that check failing on purpose).
///
/// Loom's `join` returns before the joined thread's thread-locals are dropped (std's waits for
/// them), so the returning thread's cache may still be flushing into the depot when the main thread
/// reads the statistics: the model checks counts, not `retained_bytes`, which can double-count a
/// magazine in flight (documented as "may be a few operations stale" while threads run).
#[test]
fn rent_here_return_there_through_the_depot() {
    loom::model(|| {
        let pool = tiny_pool();
        let sent: Vec<PacketBuf> = (0..3).map(|_| pool.rent(64).unwrap()).collect();
        let returner = thread::spawn(move || drop(sent));
        let mut a = pool.rent(64).unwrap();
        let mut b = pool.rent(64).unwrap();
        assert_ne!(
            address(&mut a),
            address(&mut b),
            "one block handed out twice"
        );
        returner.join().unwrap();
        drop((a, b));
        let stats = pool.stats();
        assert_eq!(
            (stats.rents, stats.returns, stats.outstanding),
            (5, 5, 0),
            "{stats:?}"
        );
        assert!(stats.fresh_allocations <= 5, "{stats:?}");
    });
}

/// The leak check the depot model relies on can fail: a block that never returns (here forgotten
/// on purpose) is reported by loom as a leaked `Arc`.
#[test]
#[should_panic(expected = "Arc leaked")]
fn forgotten_block_is_caught() {
    loom::model(|| {
        let pool = tiny_pool();
        std::mem::forget(pool.rent(64).unwrap());
    });
}
