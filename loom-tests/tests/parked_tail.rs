#![cfg(packetpipe_loom)]
//! The writer's parked block (`block::ParkingSlot`): between flushes the writer parks its block's
//! reference; a reader about to wait (or completing) sends it home; the writer's next write takes
//! it back or, if the reader won, rents a fresh block. One atomic swap on each side decides. The
//! references the writer counted in advance for its seals travel with the parked block.

use loom::thread;
use packetpipe::pipe::PipeOptions;
use packetpipe::Pool;
use packetpipe_loom_tests::{block_on, pipe};

fn one_block_pool() -> Pool {
    Pool::with_options(packetpipe::PoolOptions {
        min_class_size: 64,
        max_class_size: 64,
        ..packetpipe::PoolOptions::default()
    })
    .unwrap()
}

/// The writer writes each of `parts` and flushes it (parking its block, then reclaiming it at the
/// next write, or renting another if the reader released it meanwhile), then completes; the reader
/// reads to the end, releasing the parked block whenever it waits. The bytes arrive in order, and
/// every block rented goes home exactly once: a reference owned by both sides would return a block
/// twice, a lost one would stay outstanding.
fn flushes_race_release(parts: &'static [&'static [u8]]) {
    loom::model(move || {
        let pool = one_block_pool();
        let options = PipeOptions {
            pause_threshold: 0,
            min_segment_size: 64,
            pool: Some(pool.clone()),
            ..Default::default()
        };
        let (mut writer, mut reader) = pipe(options);
        let producer = thread::spawn(move || {
            for part in parts {
                writer.write_slice(part).unwrap();
                block_on(writer.flush_pipe()).unwrap();
            }
            writer.complete();
        });
        let (got, completed) = packetpipe_loom_tests::read_to_end(&mut reader, usize::MAX);
        assert_eq!(got, parts.concat());
        assert!(completed);
        producer.join().unwrap();
        drop(reader);
        let stats = pool.stats();
        assert_eq!(stats.rents, stats.returns, "{stats:?}");
        assert_eq!(stats.outstanding, 0, "{stats:?}");
    });
}

/// Two flushes: "ab", then "cd" into the reclaimed (or a fresh) block.
fn reclaim_races_release_model() {
    flushes_race_release(&[b"ab", b"cd"]);
}

#[test]
#[cfg(not(packetpipe_mutant))]
fn reclaim_races_release() {
    reclaim_races_release_model();
}

/// Mutant `racy_reclaim`: a reclaim that checks the slot and then empties it in two steps can
/// interleave with the reader's release, and both sides give the same reference back.
#[test]
#[cfg(packetpipe_mutant)]
#[should_panic(expected = "returned to its pool twice")]
fn mutant_racy_reclaim() {
    reclaim_races_release_model();
}

/// Three flushes into one block: the second and third seals take their references from credits
/// counted in advance (2 per batch in loom builds), and the parked block carries the unused credit
/// in its address's low bits. Whoever takes the parked block (the reader about to wait, or the
/// writer's next write, or its completion) gives back the block's reference and the credits
/// together: the pool gets every block back exactly once, with nothing left counted.
#[test]
#[cfg(not(packetpipe_mutant))]
fn seal_credits_travel_with_the_parked_block() {
    flushes_race_release(&[b"ab", b"cd", b"ef"]);
}

/// The reader completes (releasing the parked block and everything unconsumed) while the writer
/// flushes, parks and writes again: nothing is freed twice and nothing stays out of the pool once
/// both ends are gone.
#[test]
#[cfg(not(packetpipe_mutant))]
fn reader_completion_races_park_and_reclaim() {
    loom::model(|| {
        let pool = one_block_pool();
        let options = PipeOptions {
            pause_threshold: 0,
            min_segment_size: 64,
            pool: Some(pool.clone()),
            ..Default::default()
        };
        let (mut writer, mut reader) = pipe(options);
        let producer = thread::spawn(move || {
            writer.write_slice(b"ab").unwrap();
            block_on(writer.flush_pipe()).unwrap();
            writer.write_slice(b"cd").unwrap();
            block_on(writer.flush_pipe()).unwrap();
            writer.into_inner()
        });
        reader.complete();
        let writer = producer.join().unwrap();
        drop(writer);
        drop(reader);
        let stats = pool.stats();
        assert_eq!(stats.rents, stats.returns, "{stats:?}");
        assert_eq!(stats.outstanding, 0, "{stats:?}");
    });
}
