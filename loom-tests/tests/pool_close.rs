#![cfg(packetpipe_loom)]
//! The pool closing (its last handle dropped) on one thread while another returns blocks.

use loom::thread;
use packetpipe::{PacketBuf, PoolProbe};
use packetpipe_loom_tests::{tiny_pool, Hold};

/// The main thread rents four blocks of a `tiny_pool` (magazines of one block); a second thread
/// drops the last pool handle while the main thread returns three of them (into its cache, the
/// third one spilling a magazine to the depot, or freed if it sees the pool closed). After the
/// join the main thread returns the fourth block, its first operation after the close: its cache
/// of the closed pool goes then. At that point everything must be back: every block freed exactly
/// once (`frees == fresh_allocations`; a double free would also fail loom's leak and access
/// checks), nothing retained in a depot or a cache, no cache registered. A magazine stranded in
/// the closed pool's depot would show as retained bytes here and as "Arc leaked" at the end of the
/// execution (the stranded blocks keep the pool's shared state alive).
fn close_while_returning() {
    let pool = tiny_pool();
    let monitor = Hold::new(pool.monitor());
    let mut blocks: Vec<PacketBuf> = (0..4).map(|_| pool.rent(64).unwrap()).collect();
    let last = blocks.pop().unwrap();
    let closer = thread::spawn(move || drop(pool));
    drop(blocks);
    closer.join().unwrap();
    drop(last);
    let stats = monitor.stats();
    assert!(stats.closed);
    assert_eq!(
        (stats.rents, stats.returns, stats.outstanding),
        (4, 4, 0),
        "{stats:?}"
    );
    assert_eq!(
        (stats.retained_bytes, monitor.thread_caches()),
        (0, 0),
        "memory of the closed pool still held: {stats:?}"
    );
    assert_eq!(stats.frees, stats.fresh_allocations, "{stats:?}");
    drop(monitor.into_inner());
}

#[test]
fn pool_closing_while_another_thread_returns_blocks() {
    loom::model(close_while_returning);
}

/// `put_magazine` reading "closed" before taking the depot lock: the close can drain the depot in
/// between, and the magazine is stranded there.
#[cfg(packetpipe_mutant)]
#[test]
#[should_panic(expected = "memory of the closed pool still held")]
fn mutant_close_check_unlocked() {
    loom::model(close_while_returning);
}
