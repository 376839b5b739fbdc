#![cfg(packetpipe_loom)]
//! Consecutive flushes into one block grow the pipe's last segment in place: the writer seals
//! each flush's bytes after the last packet and counts them in that node; the reader grows its
//! last packet over them once they are published, keeps that node (empty) when it has consumed
//! it while it may still grow, and moves past it once a node is linked after it, its count is
//! final, or it took the writer's parked block. Raced here: growth against consumption, against
//! the reader taking the parked block while waiting, and against a node linked after a growth.
//! The bytes arrive in order, each once, and every block goes home.

use loom::thread;
use packetpipe::pipe::PipeOptions;
use packetpipe::Pool;
use packetpipe_loom_tests::{block_on, pipe, read_to_end};

fn pool() -> Pool {
    Pool::with_options(packetpipe::PoolOptions {
        min_class_size: 64,
        max_class_size: 64,
        ..packetpipe::PoolOptions::default()
    })
    .unwrap()
}

/// The writer runs `write` and completes; the reader reads to the end, consuming whatever it sees
/// each time. The bytes arrive in order, each once, and every block goes home.
fn model(write: fn(&mut packetpipe::pipe::PipeWriter)) {
    loom::model(move || {
        let pool = pool();
        let options = PipeOptions {
            pause_threshold: 0,
            min_segment_size: 64,
            pool: Some(pool.clone()),
            ..Default::default()
        };
        let (mut writer, mut reader) = pipe(options);
        let producer = thread::spawn(move || {
            write(&mut writer);
            writer.complete();
        });
        let (got, completed) = read_to_end(&mut reader, usize::MAX);
        assert_eq!(got, b"abc");
        assert!(completed);
        producer.join().unwrap();
        drop(reader);
        let stats = pool.stats();
        assert_eq!(stats.outstanding, 0, "{stats:?}");
    });
}

/// Three one-byte flushes into one block.
fn flushes_grow_the_read_segment_model() {
    model(|writer| {
        for part in [b"a", b"b", b"c"] {
            writer.write_slice(part).unwrap();
            block_on(writer.flush_pipe()).unwrap();
        }
    });
}

#[test]
#[cfg(not(packetpipe_mutant))]
fn flushes_grow_the_read_segment() {
    flushes_grow_the_read_segment_model();
}

/// Mutant `pop_growing_last`: the reader moves past its last node once consumed, although the
/// writer's next flush grows it.
#[test]
#[cfg(packetpipe_mutant)]
#[should_panic(expected = "growth of a node consumed while it could grow")]
fn mutant_pop_growing_last() {
    flushes_grow_the_read_segment_model();
}

/// A flush, then a write that grows the segment in the same flush as an appended packet is linked
/// after it: the reader, consuming the first byte meanwhile, must see the growth as final only
/// together with the link.
fn growth_then_link_model() {
    model(|writer| {
        writer.write_slice(b"a").unwrap();
        block_on(writer.flush_pipe()).unwrap();
        writer.write_slice(b"b").unwrap();
        writer.append(&b"c"[..]).unwrap();
        block_on(writer.flush_pipe()).unwrap();
    });
}

#[test]
#[cfg(not(packetpipe_mutant))]
fn growth_then_link() {
    growth_then_link_model();
}

/// Mutant `grown_before_link`: the reader loads the count before the link, sees the link, takes
/// the stale count as final and moves past the node before its growth arrives.
#[test]
#[cfg(packetpipe_mutant)]
#[should_panic(expected = "growth of a node consumed while it could grow")]
fn mutant_grown_before_link() {
    growth_then_link_model();
}
