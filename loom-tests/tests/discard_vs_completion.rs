#![cfg(packetpipe_loom)]
//! The writer staging, flushing and discarding while the reader completes.

use loom::thread;
use packetpipe::pipe::PipeOptions;
use packetpipe::Pool;
use packetpipe_loom_tests::{block_on, pipe};

/// The writer stages bytes in a pooled buffer and an appended pooled packet, flushes, stages more
/// and completes, while the reader completes at any point. Whatever the interleaving, every block
/// goes home exactly once when both ends are gone (staged, published, parked or discarded).
#[test]
#[cfg(not(packetpipe_mutant))]
fn writer_discards_while_reader_completes() {
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
        let packet = pool.copy_from_slice(b"pk").unwrap();
        let producer = thread::spawn(move || {
            writer.write_slice(b"ab").unwrap();
            writer.append(packet).unwrap();
            let _ = block_on(writer.flush_pipe());
            writer.write_slice(b"cd").unwrap();
            writer.complete();
            writer
        });
        reader.complete();
        drop(producer.join().unwrap());
        drop(reader);
        let stats = pool.stats();
        assert_eq!(stats.rents, stats.returns, "{stats:?}");
        assert_eq!(stats.outstanding, 0, "{stats:?}");
    });
}
