//! A waiting reader does not pin a large block for a few bytes: before it sleeps, unconsumed bytes
//! that are a small part of the blocks holding them move into a fitted block, and the large block
//! (with the writer's parked tail) goes home. Memory is asserted from the pool's own statistics.

use std::sync::Arc;
use std::task::{Context, Wake, Waker};

use super::reader::COMPACT_UP_TO;
use super::{pipe_with, PipeOptions, PipeReader, PipeWriter};
use crate::segments::ByteSegments;
use crate::Pool;

struct NoopWake;

impl Wake for NoopWake {
    fn wake(self: Arc<Self>) {}
}

/// Consume the whole buffer of the last read: `advance_to(len, len)`.
fn consume_all(reader: &mut PipeReader) {
    let len = reader.last_read().map_or(0, |r| r.buffer.len());
    reader.advance_to(len, len).unwrap();
}

const RECEIVE: usize = 256 * 1024;

fn big_segment_pipe(pool: &Pool) -> (PipeWriter, PipeReader) {
    pipe_with(PipeOptions {
        min_segment_size: RECEIVE,
        pool: Some(pool.clone()),
        ..Default::default()
    })
}

fn pool() -> Pool {
    Pool::with_options(crate::PoolOptions {
        max_class_size: 1 << 20,
        ..crate::PoolOptions::default()
    })
    .unwrap()
}

/// Write `bytes` as one receive would: into the writer's (large) buffer, then flush.
fn receive(writer: &mut PipeWriter, bytes: &[u8]) {
    let space = writer.spare_mut(RECEIVE / 2).unwrap();
    space[..bytes.len()].copy_from_slice(bytes);
    writer.commit(bytes.len()).unwrap();
    writer.flush_blocking().unwrap();
}

/// Poll `read_at_least(n)` once; it must wait (the bytes are not all there).
fn wait_for(reader: &mut PipeReader, n: usize) {
    let waker = Waker::from(Arc::new(NoopWake));
    let mut cx = Context::from_waker(&waker);
    assert!(reader.poll_read_at_least(&mut cx, n).is_pending());
}

#[test]
fn a_reader_stalled_after_one_byte_holds_one_small_block() {
    let pool = pool();
    let (mut writer, mut reader) = big_segment_pipe(&pool);
    receive(&mut writer, b"*");
    assert!(pool.stats().outstanding_bytes >= RECEIVE as u64);
    wait_for(&mut reader, 16);
    let stats = pool.stats();
    assert_eq!(reader.compactions(), 1);
    assert_eq!(stats.outstanding, 1, "{stats:?}");
    assert!(stats.outstanding_bytes <= 4096, "{stats:?}");
    // The byte is still there, and more bytes join it.
    receive(&mut writer, b"3\r\n");
    let result = crate::block_on(reader.read_at_least(4)).unwrap();
    assert_eq!(result.buffer.to_vec(), b"*3\r\n");
    consume_all(&mut reader);
    drop((writer, reader));
    assert_eq!(pool.stats().outstanding, 0);
}

#[test]
fn a_partly_received_large_value_holds_memory_in_proportion_to_what_arrived() {
    let pool = pool();
    let (mut writer, mut reader) = big_segment_pipe(&pool);
    let mut arrived = b"$104857600\r\n".to_vec();
    arrived.resize(arrived.len() + 1024, b'x');
    receive(&mut writer, &arrived);
    wait_for(&mut reader, 104_857_600 + 14);
    let stats = pool.stats();
    assert_eq!(stats.outstanding, 1, "{stats:?}");
    assert!(
        stats.outstanding_bytes <= 2 * arrived.len() as u64,
        "{} bytes arrived, {stats:?}",
        arrived.len()
    );
    let result = reader.read_blocking().unwrap();
    assert_eq!(result.buffer.to_vec(), arrived);
}

#[test]
fn a_well_filled_block_is_not_copied() {
    let pool = pool();
    let (mut writer, mut reader) = big_segment_pipe(&pool);
    // More than the copy limit: left where it is.
    receive(&mut writer, &vec![7; COMPACT_UP_TO + 1]);
    wait_for(&mut reader, RECEIVE);
    assert_eq!(reader.compactions(), 0);
    assert!(pool.stats().outstanding_bytes >= RECEIVE as u64);
    // A default pipe's 4 KiB segments are small already: a byte in one stays.
    let (mut writer, mut reader) = pipe_with(PipeOptions {
        pool: Some(pool.clone()),
        ..Default::default()
    });
    writer.write_slice(b"*").unwrap();
    writer.flush_blocking().unwrap();
    wait_for(&mut reader, 2);
    assert_eq!(reader.compactions(), 0);
}

#[test]
fn bytes_spread_over_segments_are_compacted_in_order() {
    let pool = pool();
    let (mut writer, mut reader) = big_segment_pipe(&pool);
    receive(&mut writer, b"hello ");
    // A second segment in another block (a value appended zero-copy by the writer).
    writer
        .append(pool.copy_from_slice(b"big ").unwrap())
        .unwrap();
    receive(&mut writer, b"world");
    wait_for(&mut reader, 100);
    assert_eq!(reader.compactions(), 1);
    assert_eq!(pool.stats().outstanding, 1);
    receive(&mut writer, b"!");
    let result = crate::block_on(reader.read_at_least(16)).unwrap();
    assert_eq!(result.buffer.to_vec(), b"hello big world!");
}
