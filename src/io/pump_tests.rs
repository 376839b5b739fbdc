//! The pumps behind the pumped transport, run standalone over tokio, futures-io and blocking
//! std I/O: byte-exact over sockets, and cancel safe (a pump future dropped while it waits loses
//! and repeats nothing).

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ::tokio::io::{AsyncReadExt, AsyncWriteExt};
use ::tokio::net::{TcpListener, TcpStream};

use crate::pipe::{pipe_with, PipeOptions, PipeReader, PipeWriter};

/// A connected pair of loopback TCP sockets: (client, server).
async fn socket_pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (client, server) =
        ::futures::future::join(TcpStream::connect(addr), listener.accept()).await;
    (client.unwrap(), server.unwrap().0)
}

/// A tokio I/O object as a futures-io one (what tokio-util's `compat` does).
struct Compat<T>(T);

impl<T: ::tokio::io::AsyncRead + Unpin> futures_io::AsyncRead for Compat<T> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut [u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let mut buf = ::tokio::io::ReadBuf::new(buf);
        std::task::ready!(std::pin::Pin::new(&mut self.0).poll_read(cx, &mut buf))?;
        std::task::Poll::Ready(Ok(buf.filled().len()))
    }
}

impl<T: ::tokio::io::AsyncWrite + Unpin> futures_io::AsyncWrite for Compat<T> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_close(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// xorshift64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform-ish in `0..n`.
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

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
    async fn send(&self, sink: &mut (impl ::tokio::io::AsyncWrite + Unpin), total: usize) {
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
    async fn check(&self, source: &mut (impl ::tokio::io::AsyncRead + Unpin)) -> usize {
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

fn runtime() -> ::tokio::runtime::Runtime {
    ::tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

async fn within_a_minute<F: std::future::Future>(future: F) -> F::Output {
    ::tokio::time::timeout(Duration::from_secs(120), future)
        .await
        .expect("the copy did not finish within two minutes")
}

/// The pumps move 64 MiB byte-exact too: `fill` from a socket, `drain` into another.
#[test]
fn tokio_fill_and_drain_pumps_move_the_stream_byte_exact() {
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
        let send = ::tokio::spawn(async move {
            p.send(&mut source_client, total).await;
            source_client.shutdown().await.unwrap();
        });
        let fill = ::tokio::spawn(async move {
            super::tokio::fill(&mut writer, &mut source_server)
                .await
                .unwrap()
        });
        let drain = ::tokio::spawn(async move {
            let n = super::tokio::drain(&mut reader, &mut sink_server)
                .max_segments(8)
                .await
                .unwrap();
            sink_server.shutdown().await.unwrap();
            n
        });
        let received = pattern.check(&mut sink_client).await;
        send.await.unwrap();
        assert_eq!(fill.await.unwrap(), total as u64);
        assert_eq!(drain.await.unwrap(), total as u64);
        assert_eq!(received, total);
    }));
}

/// The futures-io pumps and the blocking ones, on a smaller stream.
#[test]
fn futures_and_blocking_pumps_move_the_stream_byte_exact() {
    let total = copy_bytes() / 8;
    let pattern = Pattern::new();
    let data: Vec<u8> = pattern.at(0, total.min(pattern.block.len())).collect();

    // blocking: a slice source, a Vec sink, two threads.
    let (mut writer, mut reader) = pipe_with(PipeOptions {
        pause_threshold: 64 << 10,
        ..Default::default()
    });
    let source = data.clone();
    let fill = std::thread::spawn(move || {
        super::fill::fill_blocking(&mut writer, &mut &source[..]).unwrap()
    });
    let mut sink = Vec::new();
    assert_eq!(
        super::drain::drain_blocking(&mut reader, &mut sink).unwrap(),
        data.len() as u64
    );
    assert_eq!(fill.join().unwrap(), data.len() as u64);
    assert_eq!(sink, data);

    // futures-io: cursors, one executor.
    ::futures::executor::block_on(async {
        let (mut writer, mut reader) = pipe_with(PipeOptions {
            pause_threshold: 64 << 10,
            ..Default::default()
        });
        let mut source = ::futures::io::Cursor::new(data.clone());
        let mut sink = ::futures::io::Cursor::new(Vec::new());
        let (filled, drained) = ::futures::future::join(
            super::futures::fill(&mut writer, &mut source),
            super::futures::drain(&mut reader, &mut sink),
        )
        .await;
        assert_eq!(filled.unwrap(), data.len() as u64);
        assert_eq!(drained.unwrap(), data.len() as u64);
        assert_eq!(sink.into_inner(), data);
    });
}

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
        ::tokio::task::yield_now().await;
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
                ::tokio::time::sleep(Duration::from_micros(self.rng.below(50) as u64)).await;
            } else {
                yields(self.rng.below(6)).await;
            }
        };
        // The future first (a biased select): `None` only if it was still pending.
        let output = match ::futures::future::select(pin!(future), pin!(timer)).await {
            ::futures::future::Either::Left((output, _)) => Some(output),
            ::futures::future::Either::Right(((), _)) => None,
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
            ::tokio::time::timeout(Duration::from_secs(300), future)
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

/// Writes the stream into `sink` in random chunks until told to stop, then shuts it down.
async fn produce_into(
    mut sink: impl ::tokio::io::AsyncWrite + Unpin,
    stop: Arc<AtomicBool>,
    seed: u64,
) -> u64 {
    let mut rng = Rng(seed);
    let mut offset = 0;
    while !stop.load(Ordering::Relaxed) {
        let chunk = chunk_at(offset, 1 + rng.below(300));
        sink.write_all(&chunk).await.unwrap();
        offset += chunk.len() as u64;
        yields(rng.below(3)).await;
    }
    sink.shutdown().await.unwrap();
    offset
}

/// Reads `source` to its end, checking the stream; returns the length.
async fn consume_from(mut source: impl ::tokio::io::AsyncRead + Unpin) -> u64 {
    let mut offset = 0;
    let mut buf = [0; 777];
    loop {
        let n = source.read(&mut buf).await.unwrap();
        if n == 0 {
            return offset;
        }
        check(offset, &buf[..n]);
        offset += n as u64;
    }
}

#[test]
fn tokio_fill_dropped_while_waiting_loses_and_repeats_nothing() {
    run(async {
        let mut racer = Racer::new(1);
        let (source_tx, mut source) = ::tokio::io::duplex(64);
        let (mut writer, reader) = small_pipe();
        let producer = ::tokio::spawn(produce_into(source_tx, racer.enough.clone(), 11));
        let consumer = ::tokio::spawn(consume_from(reader));
        loop {
            if let Some(result) = racer
                .race(super::tokio::fill(&mut writer, &mut source))
                .await
            {
                result.unwrap();
                break;
            }
        }
        drop(writer);
        let sent = producer.await.unwrap();
        assert_eq!(consumer.await.unwrap(), sent);
        racer.finish();
    });
}

#[test]
fn tokio_drain_dropped_while_waiting_loses_and_repeats_nothing() {
    run(async {
        let mut racer = Racer::new(2);
        let (mut sink, sink_rx) = ::tokio::io::duplex(64);
        let (writer, mut reader) = small_pipe();
        let producer = ::tokio::spawn(produce_into(writer, racer.enough.clone(), 12));
        let consumer = ::tokio::spawn(consume_from(sink_rx));
        loop {
            if let Some(result) = racer
                .race(super::tokio::drain(&mut reader, &mut sink))
                .await
            {
                result.unwrap();
                break;
            }
        }
        sink.shutdown().await.unwrap();
        let sent = producer.await.unwrap();
        assert_eq!(consumer.await.unwrap(), sent);
        racer.finish();
    });
}

#[test]
fn futures_fill_and_drain_dropped_while_waiting_lose_and_repeat_nothing() {
    run(async {
        let mut racer = Racer::new(3);
        let (source_tx, source) = ::tokio::io::duplex(64);
        let mut source = Compat(source);
        let (sink, sink_rx) = ::tokio::io::duplex(64);
        let mut sink = Compat(sink);
        let (mut writer, mut reader) = small_pipe();
        let producer = ::tokio::spawn(produce_into(source_tx, racer.enough.clone(), 13));
        let consumer = ::tokio::spawn(consume_from(sink_rx));
        let (mut filled, mut drained) = (false, false);
        while !(filled && drained) {
            if !filled {
                if let Some(result) = racer
                    .race(super::futures::fill(&mut writer, &mut source))
                    .await
                {
                    result.unwrap();
                    filled = true;
                    writer.complete();
                }
            }
            if !drained {
                if let Some(result) = racer
                    .race(super::futures::drain(&mut reader, &mut sink))
                    .await
                {
                    result.unwrap();
                    drained = true;
                }
            }
        }
        ::futures::AsyncWriteExt::close(&mut sink).await.unwrap();
        let sent = producer.await.unwrap();
        assert_eq!(consumer.await.unwrap(), sent);
        racer.finish();
    });
}
