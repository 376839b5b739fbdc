#![cfg(packetpipe_loom)]
//! pooled `Packet` shared across threads: the block's reference count and its return to the pool.

use loom::thread;
use packetpipe::{Packet, Pool};

fn packet(pool: &Pool) -> Packet {
    let mut buf = pool.rent(64).unwrap();
    buf.extend_from_slice(b"abcd").unwrap();
    buf.freeze()
}

/// Three holders (a clone, a slice and the original) drop at the same time on three threads: the
/// block goes back to the pool exactly once (one return, nothing outstanding), and each holder read
/// its bytes intact before that.
#[test]
fn last_of_concurrent_drops_returns_block_once() {
    loom::model(|| {
        let pool = Pool::new();
        let original = packet(&pool);
        let clone = original.clone();
        let slice = original.slice(1..3);
        let a = thread::spawn(move || assert_eq!(&clone[..], b"abcd"));
        let b = thread::spawn(move || assert_eq!(&slice[..], b"bc"));
        assert_eq!(&original[..], b"abcd");
        drop(original);
        a.join().unwrap();
        b.join().unwrap();
        let stats = pool.stats();
        assert_eq!(
            (stats.rents, stats.returns, stats.outstanding),
            (1, 1, 0),
            "{stats:?}"
        );
    });
}

/// Holders on two threads drop while the original outlives them: the block is not returned while
/// a reference is alive (no early return), and is returned exactly once by the last drop.
#[test]
fn block_returns_only_after_last_drop() {
    loom::model(|| {
        let pool = Pool::new();
        let original = packet(&pool);
        let clones = (original.clone(), original.clone());
        let a = thread::spawn(move || drop(clones.0));
        let b = thread::spawn(move || drop(clones.1));
        a.join().unwrap();
        b.join().unwrap();
        let stats = pool.stats();
        assert_eq!(
            (stats.returns, stats.outstanding),
            (0, 1),
            "returned early: {stats:?}"
        );
        let mut original = original;
        assert!(original.get_mut().is_some(), "the only handle left");
        drop(original);
        let stats = pool.stats();
        assert_eq!((stats.returns, stats.outstanding), (1, 0), "{stats:?}");
    });
}
