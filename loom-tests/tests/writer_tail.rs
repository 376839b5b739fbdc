#![cfg(packetpipe_loom)]
//! The writer writing into the tail of a block whose sealed head the reader reads and releases.

use loom::thread;
use packetpipe::pipe::PipeOptions;
use packetpipe::Pool;
use packetpipe_loom_tests::{block_on, pipe};

/// The writer writes "ab" into a pooled 64-byte block, flushes (sealing "ab" into a packet that
/// shares the block), writes "cd" into the same block's tail, flushes and completes (dropping its
/// hold on the block), while the reader reads, copies out and releases each sealed packet. The
/// reader gets "abcd", and the block, referenced at once by the writer and the reader's packets,
/// returns to the pool exactly once, after both are done with it (or, when the waiting reader sent
/// the writer's parked block home before the second write, each of the two blocks does).
#[test]
fn writer_tail_vs_reader_head() {
    loom::model(|| {
        let pool = Pool::with_options(packetpipe::PoolOptions {
            min_class_size: 64,
            max_class_size: 64,
            ..packetpipe::PoolOptions::default()
        })
        .unwrap();
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
            writer.complete();
        });
        let (got, _) = packetpipe_loom_tests::read_to_end(&mut reader, usize::MAX);
        assert_eq!(got, b"abcd");
        producer.join().unwrap();
        drop(reader);
        let stats = pool.stats();
        // One block, or two when the reader, waiting for "cd", sent the writer's parked block
        // home first (the writer then rents another): each goes home exactly once.
        assert!(
            matches!(
                (stats.rents, stats.returns, stats.outstanding),
                (1, 1, 0) | (2, 2, 0)
            ),
            "{stats:?}"
        );
    });
}
