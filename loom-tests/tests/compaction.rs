#![cfg(packetpipe_loom)]
//! A reader about to wait with a few bytes in a large block moves them into a fitted block
//! (replacing its own published packets) and sends the writer's parked block home, while the
//! writer flushes more, reclaims its block or rents another: the bytes arrive in order, none is
//! lost or doubled, and every block goes home exactly once.

use loom::thread;
use packetpipe::pipe::PipeOptions;
use packetpipe::ByteSegments;
use packetpipe::Pool;
use packetpipe_loom_tests::{block_on, pipe};

#[test]
fn compaction_races_flush_and_reclaim() {
    loom::model(|| {
        let pool = Pool::with_options(packetpipe::PoolOptions {
            min_class_size: 64,
            max_class_size: 8192,
            ..packetpipe::PoolOptions::default()
        })
        .unwrap();
        // 8 KiB segments: one byte in one is worth moving (more than 4 x 1 KiB).
        let options = PipeOptions {
            pause_threshold: 0,
            min_segment_size: 8192,
            pool: Some(pool.clone()),
            ..Default::default()
        };
        let (mut writer, mut reader) = pipe(options);
        let producer = thread::spawn(move || {
            for part in [&b"a"[..], b"bc"] {
                writer.write_slice(part).unwrap();
                block_on(writer.flush_pipe()).unwrap();
            }
            writer.complete();
        });
        let got = {
            let result = block_on(reader.read_at_least(3)).unwrap();
            result.buffer.to_vec()
        };
        assert_eq!(got, b"abc");
        producer.join().unwrap();
        drop(reader);
        let stats = pool.stats();
        assert_eq!(stats.rents, stats.returns, "{stats:?}");
        assert_eq!(stats.outstanding, 0, "{stats:?}");
    });
}
