//! The pipe's ends as std, tokio and futures-io byte streams, tested with other people's code:
//! `tokio::io::copy`, `futures::io::copy` and `std::io::copy` over real loopback sockets (64 MiB
//! byte-exact), `lines()`, `BufMut`, and the error and backpressure behaviour of the adapters.

#![cfg(all(feature = "tokio", feature = "futures-io"))]

use packetpipe::ByteSegments;
use std::io::{BufRead, Read, Write};
use std::time::Duration;

use bytes::BufMut;
use packetpipe::pipe::{pipe, pipe_with, PipeOptions, PipeReader, PipeWriter};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

mod kit;

use kit::net::socket_pair;

/// Bytes moved end to end by each copy test (override with `IO_COPY_BYTES`).
fn copy_bytes() -> usize {
    std::env::var("IO_COPY_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64 << 20)
}

/// The test stream: a pseudo-random block of a prime length, repeated, so that no read or segment
/// boundary lines up with it.
struct Pattern {
    block: Vec<u8>,
}

impl Pattern {
    fn new() -> Pattern {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let block = (0..1_048_583)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 56) as u8
            })
            .collect();
        Pattern { block }
    }

    /// The stream's bytes at `offset..offset + len` (len <= block length).
    fn at(&self, offset: usize, len: usize) -> impl Iterator<Item = u8> + '_ {
        let start = offset % self.block.len();
        self.block[start..]
            .iter()
            .chain(self.block.iter())
            .take(len)
            .copied()
    }

    /// Write `total` bytes of the stream in chunks of varying size.
    async fn send(&self, sink: &mut (impl tokio::io::AsyncWrite + Unpin), total: usize) {
        let mut sent = 0;
        let mut chunk = Vec::with_capacity(70_000);
        while sent < total {
            let len = (1 + (sent * 7919) % 65_536).min(total - sent);
            chunk.clear();
            chunk.extend(self.at(sent, len));
            sink.write_all(&chunk).await.unwrap();
            sent += len;
        }
    }

    /// Read the whole stream and check it byte for byte; returns the length.
    async fn check(&self, source: &mut (impl tokio::io::AsyncRead + Unpin)) -> usize {
        let mut got = 0;
        let mut buf = vec![0; 50_000];
        loop {
            let n = AsyncReadExt::read(source, &mut buf).await.unwrap();
            if n == 0 {
                return got;
            }
            assert!(
                self.at(got, n).eq(buf[..n].iter().copied()),
                "bytes differ in {got}..{}",
                got + n
            );
            got += n;
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn within_a_minute<F: std::future::Future>(future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(120), future)
        .await
        .expect("the copy did not finish within two minutes")
}

/// socket -> `tokio::io::copy` -> pipe -> `tokio::io::copy` -> socket, 64 MiB, byte-exact.
#[test]
fn tokio_io_copy_into_the_writer_and_out_of_the_reader_is_byte_exact() {
    let total = copy_bytes();
    runtime().block_on(within_a_minute(async move {
        let pattern = std::sync::Arc::new(Pattern::new());
        let (mut source_client, mut source_server) = socket_pair().await;
        let (mut sink_server, mut sink_client) = socket_pair().await;
        let (mut writer, mut reader) = pipe_with(PipeOptions {
            pause_threshold: 256 << 10,
            ..Default::default()
        });
        let p = pattern.clone();
        let send = tokio::spawn(async move {
            p.send(&mut source_client, total).await;
            source_client.shutdown().await.unwrap();
        });
        let into_pipe = tokio::spawn(async move {
            let n = tokio::io::copy(&mut source_server, &mut writer)
                .await
                .unwrap();
            writer.shutdown().await.unwrap();
            n
        });
        let out_of_pipe = tokio::spawn(async move {
            let n = tokio::io::copy(&mut reader, &mut sink_server)
                .await
                .unwrap();
            sink_server.shutdown().await.unwrap();
            n
        });
        let received = pattern.check(&mut sink_client).await;
        send.await.unwrap();
        assert_eq!(into_pipe.await.unwrap(), total as u64);
        assert_eq!(out_of_pipe.await.unwrap(), total as u64);
        assert_eq!(received, total);
    }));
}

/// The same chain with futures-io's `copy` (tokio sockets through tokio-util's compat layer).
#[test]
fn futures_io_copy_into_the_writer_and_out_of_the_reader_is_byte_exact() {
    let total = copy_bytes();
    runtime().block_on(within_a_minute(async move {
        let pattern = std::sync::Arc::new(Pattern::new());
        let (mut source_client, source_server) = socket_pair().await;
        let (sink_server, mut sink_client) = socket_pair().await;
        let (mut writer, mut reader) = pipe_with(PipeOptions {
            pause_threshold: 256 << 10,
            ..Default::default()
        });
        let p = pattern.clone();
        let send = tokio::spawn(async move {
            p.send(&mut source_client, total).await;
            source_client.shutdown().await.unwrap();
        });
        let into_pipe = tokio::spawn(async move {
            let mut source = source_server.compat();
            let n = futures::io::copy(&mut source, &mut writer).await.unwrap();
            futures::AsyncWriteExt::close(&mut writer).await.unwrap();
            n
        });
        let out_of_pipe = tokio::spawn(async move {
            let mut sink = sink_server.compat_write();
            let n = futures::io::copy(&mut reader, &mut sink).await.unwrap();
            futures::AsyncWriteExt::close(&mut sink).await.unwrap();
            n
        });
        let received = pattern.check(&mut sink_client).await;
        send.await.unwrap();
        assert_eq!(into_pipe.await.unwrap(), total as u64);
        assert_eq!(out_of_pipe.await.unwrap(), total as u64);
        assert_eq!(received, total);
    }));
}

/// `std::io::copy` into the writer on one thread and out of the reader on another, over blocking
/// loopback sockets.
#[test]
fn std_io_copy_across_two_threads_is_byte_exact() {
    let total = copy_bytes();
    let pattern = std::sync::Arc::new(Pattern::new());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let mut source_client = std::net::TcpStream::connect(addr).unwrap();
    let (mut source_server, _) = listener.accept().unwrap();
    let mut sink_client = std::net::TcpStream::connect(addr).unwrap();
    let (mut sink_server, _) = listener.accept().unwrap();
    for s in [&source_server, &sink_client] {
        s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    }
    let (mut writer, mut reader) = pipe_with(PipeOptions {
        pause_threshold: 256 << 10,
        ..Default::default()
    });

    let p = pattern.clone();
    let send = std::thread::spawn(move || {
        let mut sent = 0;
        let mut chunk = Vec::new();
        while sent < total {
            let len = (1 + (sent * 104_729) % 65_536).min(total - sent);
            chunk.clear();
            chunk.extend(p.at(sent, len));
            source_client.write_all(&chunk).unwrap();
            sent += len;
        }
    }); // dropping the socket ends the stream
    let into_pipe = std::thread::spawn(move || {
        std::io::copy(&mut source_server, &mut writer).unwrap()
        // dropping the writer completes the pipe
    });
    let out_of_pipe = std::thread::spawn(move || {
        let n = std::io::copy(&mut reader, &mut sink_server).unwrap();
        sink_server.shutdown(std::net::Shutdown::Write).unwrap();
        n
    });
    let mut got = 0;
    let mut buf = vec![0; 64 << 10];
    loop {
        let n = sink_client.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        assert!(
            pattern.at(got, n).eq(buf[..n].iter().copied()),
            "bytes differ at {got}"
        );
        got += n;
    }
    send.join().unwrap();
    assert_eq!(into_pipe.join().unwrap(), total as u64);
    assert_eq!(out_of_pipe.join().unwrap(), total as u64);
    assert_eq!(got, total);
}

/// tokio's `AsyncBufReadExt::lines` over the reader: lines split across segments come out whole.
#[test]
fn tokio_lines_over_the_reader() {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(async {
            let (mut writer, reader) = pipe();
            let text = "first line\nsecond, split\nacross segments\nlast without newline";
            let producer = tokio::spawn(async move {
                for piece in text.as_bytes().chunks(5) {
                    writer.append(bytes::Bytes::copy_from_slice(piece)).unwrap();
                    writer.flush_pipe().await.unwrap();
                }
            });
            let mut lines = AsyncBufReadExt::lines(reader);
            let mut got = Vec::new();
            while let Some(line) = lines.next_line().await.unwrap() {
                got.push(line);
            }
            producer.await.unwrap();
            assert_eq!(got, text.lines().collect::<Vec<_>>());
        });
}

/// std's `BufRead` over the reader: `fill_buf` hands out one segment at a time (the first
/// unconsumed one), `consume` releases bytes, and the end is an empty buffer.
#[test]
fn std_fill_buf_hands_out_segments_and_consume_releases_them() {
    let (mut writer, mut reader) = pipe();
    writer.append(bytes::Bytes::from_static(b"abc")).unwrap();
    writer.append(bytes::Bytes::from_static(b"defg")).unwrap();
    writer.complete();
    assert_eq!(BufRead::fill_buf(&mut reader).unwrap(), b"abc");
    BufRead::consume(&mut reader, 2);
    assert_eq!(BufRead::fill_buf(&mut reader).unwrap(), b"c");
    BufRead::consume(&mut reader, 1);
    assert_eq!(BufRead::fill_buf(&mut reader).unwrap(), b"defg");
    BufRead::consume(&mut reader, 100); // clamped to what is there, as std's BufReader does
    assert_eq!(BufRead::fill_buf(&mut reader).unwrap(), b"");
    let mut rest = Vec::new();
    assert_eq!(Read::read_to_end(&mut reader, &mut rest).unwrap(), 0);
}

/// `BufMut` on the writer: `put_*` go straight into pooled blocks, across block boundaries.
#[test]
fn buf_mut_puts_go_into_pooled_blocks_across_boundaries() {
    let pool = packetpipe::Pool::new();
    let (mut writer, mut reader) = pipe_with(PipeOptions {
        min_segment_size: 64,
        pool: Some(pool.clone()),
        ..Default::default()
    });
    for i in 0..100u32 {
        writer.put_u32_le(i);
        writer.put_u8(b'|');
    }
    writer.flush_blocking().unwrap();
    let result = reader.read_blocking().unwrap();
    let bytes = result.buffer.to_vec();
    assert!(
        result.buffer.segments().count() > 1,
        "the puts crossed blocks"
    );
    let expected: Vec<u8> = (0..100u32)
        .flat_map(|i| i.to_le_bytes().into_iter().chain([b'|']))
        .collect();
    assert_eq!(bytes, expected);
    assert_eq!(pool.stats().unpooled_allocations, 0);
    writer.complete();
    assert_eq!(
        writer.remaining_mut(),
        0,
        "a completed writer takes no puts"
    );
}

/// A writer whose caller never flushes still holds at most the pause threshold plus one write:
/// an I/O write that would go past it publishes and waits for the reader first.
#[test]
fn io_writes_without_flushes_stay_bounded_by_the_pause_threshold() {
    let pause = 4096;
    let (mut writer, mut reader) = pipe_with(PipeOptions {
        pause_threshold: pause,
        resume_threshold: 1024,
        ..Default::default()
    });
    let total = 1 << 20;
    let producer = std::thread::spawn(move || {
        let chunk = [7u8; 1000];
        let mut written = 0;
        while written < total {
            written += Write::write(&mut writer, &chunk[..(total - written).min(1000)]).unwrap();
            // never flushed
        }
    });
    let mut got = 0;
    let mut max_unconsumed = 0;
    loop {
        let result = reader.read_blocking().unwrap();
        let len = result.buffer.len();
        max_unconsumed = max_unconsumed.max(len);
        let done = result.is_completed;
        reader.advance_to(len, len).unwrap();
        got += len;
        if done {
            break;
        }
    }
    producer.join().unwrap();
    assert_eq!(got, total);
    assert!(
        max_unconsumed <= pause + 1000,
        "{max_unconsumed} bytes were buffered with a pause threshold of {pause}"
    );
}

/// Errors through the adapters: a writer's I/O error keeps its kind and message; a completed
/// reader makes writes fail with `BrokenPipe`; a canceled read is an error of kind `Other`.
#[test]
fn adapter_errors_keep_their_kind_and_message() {
    let (mut writer, mut reader) = pipe();
    writer.write_slice(b"before").unwrap();
    writer.complete_with_error(std::io::Error::new(
        std::io::ErrorKind::ConnectionReset,
        "peer reset",
    ));
    let mut buf = [0; 16];
    assert_eq!(
        Read::read(&mut reader, &mut buf).unwrap(),
        6,
        "the bytes before the error come first"
    );
    let e = Read::read(&mut reader, &mut buf).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset);
    assert_eq!(e.to_string(), "peer reset");

    let (mut writer, reader) = pipe();
    drop(reader);
    let e = Write::write(&mut writer, b"nobody reads").unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");

    let (_writer, mut reader) = pipe();
    reader.canceler().cancel();
    let e = Read::read(&mut reader, &mut buf).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::Other);
    assert!(
        e.to_string().contains("canceled by its end's PipeCanceler"),
        "{e}"
    );
}

/// Generic code over the traits sees ordinary behaviour from the pipe's ends.
#[test]
fn pipe_ends_work_in_generic_io_code() {
    fn copy_generic(r: &mut impl Read, w: &mut impl Write) -> std::io::Result<u64> {
        std::io::copy(r, w)
    }
    let (mut writer, mut reader): (PipeWriter, PipeReader) = pipe();
    Write::write_all(&mut writer, b"generic").unwrap();
    Write::flush(&mut writer).unwrap();
    drop(writer);
    let mut out = Vec::new();
    assert_eq!(copy_generic(&mut reader, &mut out).unwrap(), 7);
    assert_eq!(out, b"generic");
}
