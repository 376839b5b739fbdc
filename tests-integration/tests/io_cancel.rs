//! Cancel safety: each pump and each adapter future is dropped at random points while it waits,
//! 10,000 times (override with `CANCEL_DROPS`), inside `tokio::select!`, then the transfer is
//! finished: the bytes must arrive exactly, nothing lost, nothing repeated.
//!
//! The other branch of each `select!` is a "timer": usually a random number of scheduler yields
//! (tokio's timers have millisecond resolution, which would make 10,000 drops take minutes), every
//! tenth time a real `tokio::time::sleep` of a few microseconds.

#![cfg(all(feature = "tokio", feature = "futures-io"))]

use packetpipe::ByteSegments;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use packetpipe::pipe::{pipe_with, PipeOptions, PipeReader, PipeWriter};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

mod kit;

use kit::rng::XorShift64 as Rng;

fn drops_wanted() -> usize {
    std::env::var("CANCEL_DROPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

/// The stream every test moves: the byte at offset `i` is a hash of `i`.
fn byte_at(i: u64) -> u8 {
    (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8 ^ (i >> 11) as u8
}

fn chunk_at(offset: u64, len: usize) -> Vec<u8> {
    (offset..offset + len as u64).map(byte_at).collect()
}

/// Check `bytes` against the stream at `offset`.
fn check(offset: u64, bytes: &[u8]) {
    for (i, &b) in bytes.iter().enumerate() {
        assert_eq!(
            b,
            byte_at(offset + i as u64),
            "byte {} lost, repeated or wrong",
            offset + i as u64
        );
    }
}

async fn yields(n: usize) {
    for _ in 0..n {
        tokio::task::yield_now().await;
    }
}

/// Races futures against a random "timer" and counts the drops.
struct Racer {
    rng: Rng,
    drops: usize,
    /// Set once enough drops happened: the producers stop and the transfer finishes.
    enough: Arc<AtomicBool>,
}

impl Racer {
    fn new(seed: u64) -> Racer {
        Racer {
            rng: Rng(seed),
            drops: 0,
            enough: Arc::new(AtomicBool::new(false)),
        }
    }

    /// `Some(output)` if `future` finished first, `None` if it was dropped while pending.
    async fn race<F: Future>(&mut self, future: F) -> Option<F::Output> {
        let timer = async {
            if self.rng.below(10) == 0 {
                tokio::time::sleep(Duration::from_micros(self.rng.below(50) as u64)).await;
            } else {
                yields(self.rng.below(6)).await;
            }
        };
        let output = tokio::select! {
            biased;
            output = future => Some(output),
            _ = timer => None,
        };
        if output.is_none() {
            self.drops += 1;
            if self.drops >= drops_wanted() {
                self.enough.store(true, Ordering::Relaxed);
            }
        }
        output
    }

    fn finish(&self) {
        assert!(
            self.drops >= drops_wanted(),
            "only {} drops while the future waited",
            self.drops
        );
    }
}

fn run<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
        .block_on(async move {
            tokio::time::timeout(Duration::from_secs(300), future)
                .await
                .expect("the transfer did not finish")
        })
}

fn small_pipe() -> (PipeWriter, PipeReader) {
    pipe_with(PipeOptions {
        pause_threshold: 512,
        resume_threshold: 128,
        min_segment_size: 256,
        ..Default::default()
    })
}

/// tokio's `read`, `fill_buf` (the reader) and `write`, `flush` (the writer), each raced.
#[test]
fn tokio_adapter_futures_dropped_while_waiting_lose_and_repeat_nothing() {
    run(async {
        let mut racer = Racer::new(4);
        let (mut writer, mut reader) = small_pipe();
        let stop = racer.enough.clone();
        // The writer side, raced: write (partial writes count), sometimes flush.
        let mut writer_racer = Racer::new(5);
        let produce = async move {
            let mut rng = Rng(15);
            let mut offset = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let chunk = chunk_at(offset, 1 + rng.below(700));
                let mut done = 0;
                while done < chunk.len() {
                    if let Some(n) = writer_racer.race(writer.write(&chunk[done..])).await {
                        done += n.unwrap();
                    }
                }
                offset += chunk.len() as u64;
                if rng.below(4) == 0 {
                    while writer_racer.race(writer.flush()).await.is_none() {}
                }
            }
            writer.shutdown().await.unwrap();
            (offset, writer_racer.drops)
        };
        // The reader side, raced: read and fill_buf in turns.
        let consume = async {
            let mut offset = 0u64;
            let mut buf = [0; 300];
            let mut turn = 0;
            loop {
                turn += 1;
                let n = if turn % 2 == 0 {
                    match racer.race(reader.read(&mut buf)).await {
                        Some(n) => {
                            let n = n.unwrap();
                            check(offset, &buf[..n]);
                            n
                        }
                        None => continue,
                    }
                } else {
                    match racer.race(reader.fill_buf()).await {
                        Some(chunk) => {
                            let chunk = chunk.unwrap();
                            check(offset, chunk);
                            let n = chunk.len();
                            reader.consume(n);
                            n
                        }
                        None => continue,
                    }
                };
                if n == 0 {
                    return (offset, racer);
                }
                offset += n as u64;
            }
        };
        let ((sent, writer_drops), (received, racer)) = tokio::join!(produce, consume);
        assert_eq!(received, sent);
        racer.finish();
        assert!(
            writer_drops > 0,
            "the writer's futures were never dropped while waiting"
        );
    });
}

/// futures-io's `read` and `write`, raced.
#[test]
fn futures_adapter_futures_dropped_while_waiting_lose_and_repeat_nothing() {
    use futures::io::AsyncWriteExt as _;
    run(async {
        let mut racer = Racer::new(6);
        let mut writer_racer = Racer::new(7);
        let stop = racer.enough.clone();
        let (mut writer, mut reader) = small_pipe();
        let produce = async move {
            let mut rng = Rng(17);
            let mut offset = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let chunk = chunk_at(offset, 1 + rng.below(700));
                let mut done = 0;
                while done < chunk.len() {
                    if let Some(n) = writer_racer
                        .race(futures::AsyncWriteExt::write(&mut writer, &chunk[done..]))
                        .await
                    {
                        done += n.unwrap();
                    }
                }
                offset += chunk.len() as u64;
            }
            writer.close().await.unwrap();
            offset
        };
        let consume = async {
            let mut offset = 0u64;
            let mut buf = [0; 300];
            loop {
                let Some(n) = racer
                    .race(futures::AsyncReadExt::read(&mut reader, &mut buf))
                    .await
                else {
                    continue;
                };
                let n = n.unwrap();
                if n == 0 {
                    return offset;
                }
                check(offset, &buf[..n]);
                offset += n as u64;
            }
        };
        let (sent, received) = tokio::join!(produce, consume);
        assert_eq!(received, sent);
        racer.finish();
    });
}

/// The pipe's own futures: `read_buffer`, `read_at_least` and `flush_pipe`, raced.
#[test]
fn native_read_and_flush_futures_dropped_while_waiting_lose_and_repeat_nothing() {
    run(async {
        let mut racer = Racer::new(8);
        let mut writer_racer = Racer::new(9);
        let stop = racer.enough.clone();
        let (mut writer, mut reader) = small_pipe();
        let produce = async move {
            let mut rng = Rng(19);
            let mut offset = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let chunk = chunk_at(offset, 1 + rng.below(400));
                writer.write_slice(&chunk).unwrap();
                offset += chunk.len() as u64;
                // A dropped flush leaves its bytes staged: the next flush publishes them.
                let _ = writer_racer.race(writer.flush_pipe()).await;
            }
            writer.complete();
            offset
        };
        let consume = async {
            let mut rng = Rng(21);
            let mut offset = 0u64;
            loop {
                let want = rng.below(600);
                let read = if want % 2 == 0 {
                    racer.race(reader.read_buffer()).await
                } else {
                    racer.race(reader.read_at_least(want)).await
                };
                let Some(result) = read else { continue };
                let result = result.unwrap();
                let bytes = result.buffer.to_vec();
                let done = result.is_completed;
                check(offset, &bytes);
                // Consume a random part, examine all of it: the rest comes again, unchanged.
                let consumed = rng.below(bytes.len() + 1);
                reader.advance_to(consumed, bytes.len()).unwrap();
                offset += consumed as u64;
                if done && consumed == bytes.len() {
                    return offset;
                }
            }
        };
        let (sent, received) = tokio::join!(produce, consume);
        assert_eq!(received, sent);
        racer.finish();
    });
}

/// `Frames::next()` raced: frames of random sizes, some larger than the pause threshold (the
/// stream waits with `read_at_least`), arrive whole, in order, exactly once.
#[test]
fn frames_next_dropped_while_waiting_loses_and_repeats_nothing() {
    race_frames_next(false);
}

/// The same through the `Stream` (`StreamExt::next`), a separate path: `frames.next()` is its own
/// future and does not call it.
#[test]
fn stream_next_dropped_while_waiting_loses_and_repeats_nothing() {
    race_frames_next(true);
}

fn race_frames_next(through_stream: bool) {
    use packetpipe::frame::{FrameWriter, Frames, LengthDelimited};
    run(async {
        let mut racer = Racer::new(10);
        let stop = racer.enough.clone();
        let (writer, reader) = small_pipe();
        let produce = async move {
            let mut rng = Rng(23);
            let mut out = FrameWriter::new(writer, LengthDelimited::new());
            let mut sent = 0u64;
            let mut offset = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let frame = chunk_at(offset, rng.below(1500));
                offset += frame.len() as u64;
                out.send(&frame[..]).await.unwrap();
                sent += 1;
                yields(rng.below(3)).await;
            }
            out.into_inner().complete();
            sent
        };
        let consume = async {
            let mut frames = Frames::new(reader, LengthDelimited::new());
            let (mut received, mut offset) = (0u64, 0u64);
            loop {
                let raced = if through_stream {
                    racer.race(futures::StreamExt::next(&mut frames)).await
                } else {
                    racer.race(frames.next()).await
                };
                let Some(next) = raced else {
                    continue;
                };
                let Some(frame) = next else {
                    return received;
                };
                let frame = frame.unwrap();
                check(offset, &frame);
                offset += frame.len() as u64;
                received += 1;
            }
        };
        let (sent, received) = tokio::join!(produce, consume);
        assert_eq!(received, sent);
        racer.finish();
    });
}
