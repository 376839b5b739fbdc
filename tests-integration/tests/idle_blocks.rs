//! The memory contract's "an idle connection holds no pooled block" and "every block goes home
//! once nothing can use it", at the moments the other tests do not look:
//!
//! - a server that echoes with `FrameWriter::forward` over `Framed` reads (and finds nothing) before
//!   it flushes its replies, so its frame stream goes idle while the reply is still being written:
//!   once the reply is out and the server waits, it holds no block, after one frame and after a
//!   burst;
//! - a pipe whose writer completed, and whose reader consumed everything, holds no block while the
//!   reader lives (System.IO.Pipelines returns every segment then).

use std::time::Duration;

use packetpipe::pipe::{pipe_with, PipeOptions};
use packetpipe::Pool;

/// After consuming everything a completed writer sent, nothing is outstanding, whether the reader
/// consumed before or after the writer completed, and before or after it read the completion.
#[test]
fn a_completed_and_consumed_pipe_holds_no_block() {
    for flushes in [1usize, 2, 5] {
        for complete_first in [false, true] {
            let pool = Pool::new();
            let (mut writer, mut reader) = pipe_with(PipeOptions {
                pool: Some(pool.clone()),
                ..Default::default()
            });
            for _ in 0..flushes {
                writer.write_slice(b"hello").unwrap();
                writer.flush_blocking().unwrap();
            }
            if complete_first {
                writer.complete();
            }
            let read = reader.read_blocking().unwrap();
            let n = read.buffer.len();
            assert_eq!(n, 5 * flushes);
            reader.advance_to(n, n).unwrap();
            if !complete_first {
                writer.complete();
            }
            let read = reader.read_blocking().unwrap();
            assert!(read.is_completed && read.buffer.is_empty());
            assert_eq!(
                pool.stats().outstanding,
                0,
                "{flushes} flushes, writer completed {} the reader consumed: a block is still out",
                if complete_first { "before" } else { "after" }
            );
            drop((writer, reader));
        }
    }
}

#[cfg(feature = "tokio")]
mod forward {
    use super::*;
    use packetpipe::frame::{Framed, LengthDelimited};
    use packetpipe::io::ConnectionOptions;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A length-delimited echo over `forward`, the README's server, on a pool of its own; the
    /// client sends `frames` frames in one write per round, reads every echo, and after each round
    /// the server, waiting for the next request, holds no pooled block (or, keeping its blocks
    /// while idle, its receive and its send block).
    fn echo_rounds(frames: usize) {
        echo_rounds_with(frames, false);
    }

    fn echo_rounds_with(frames: usize, keep: bool) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let pool = Pool::with_options(packetpipe::PoolOptions {
                ..packetpipe::PoolOptions::default()
            })
            .unwrap();
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let options = ConnectionOptions {
                input: PipeOptions {
                    pool: Some(pool.clone()),
                    ..Default::default()
                },
                output: PipeOptions {
                    pool: Some(pool.clone()),
                    ..Default::default()
                },
                keep_blocks_idle: keep,
                ..Default::default()
            };
            let server = tokio::spawn(async move {
                let (socket, _) = listener.accept().await.unwrap();
                let (app, connection) = packetpipe::io::tokio::connection_with(socket, options);
                let (mut out, mut frames) =
                    Framed::from_connection(app, connection, LengthDelimited::new()).split();
                out.forward(&mut frames).await.unwrap();
                out.close().await.unwrap();
            });
            let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
            let mut request = Vec::new();
            for i in 0..frames {
                let payload = vec![i as u8; 64];
                request.extend((payload.len() as u32).to_be_bytes());
                request.extend(payload);
            }
            for round in 0..3 {
                client.write_all(&request).await.unwrap();
                let mut echo = vec![0; request.len()];
                client.read_exact(&mut echo).await.unwrap();
                assert_eq!(echo, request);
                // Let the server's task run until it waits for the next request.
                for _ in 0..20 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                assert_eq!(
                    pool.stats().outstanding,
                    if keep { 2 } else { 0 },
                    "round {round} of {frames} frames (blocks kept while idle: {keep}): the \
                     waiting server's blocks"
                );
            }
            drop(client);
            server.await.unwrap();
            assert_eq!(pool.stats().outstanding, 0);
        });
    }

    #[test]
    fn forward_over_framed_holds_no_block_while_waiting_after_one_frame() {
        echo_rounds(1);
    }

    #[test]
    fn forward_over_framed_holds_no_block_while_waiting_after_a_burst() {
        echo_rounds(16);
    }

    #[test]
    fn blocks_kept_while_idle_are_the_two_a_connection_uses_and_go_home_at_its_end() {
        echo_rounds_with(1, true);
        echo_rounds_with(16, true);
    }
}
