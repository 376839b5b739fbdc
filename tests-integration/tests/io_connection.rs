//! The duplex connection over real loopback sockets: an echo with random chunk sizes (tokio and
//! futures-io flavors), half-close both ways, a peer reset mid-stream, and the application dropping
//! its ends mid-stream.

#![cfg(all(feature = "tokio", feature = "futures-io"))]

use packetpipe::ByteSegments;
use std::time::Duration;

use packetpipe::io::{ConnectionOptions, DuplexPipe};
use packetpipe::pipe::PipeOptions;
use packetpipe::{Error, Pool};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use kit::net::socket_pair;

mod kit;

use kit::rng::XorShift64 as Rng;

fn run<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(async move {
            tokio::time::timeout(Duration::from_secs(120), future)
                .await
                .expect("the test did not finish within two minutes")
        })
}

fn options(pool: &Pool) -> ConnectionOptions {
    ConnectionOptions {
        input: PipeOptions {
            pool: Some(pool.clone()),
            pause_threshold: 64 << 10,
            ..Default::default()
        },
        output: PipeOptions {
            pool: Some(pool.clone()),
            pause_threshold: 64 << 10,
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The application of the echo tests: every byte read goes back out, straight from the input's
/// segments (read_buffer, write_slice per segment, flush, advance), until the peer's end.
async fn echo_app(mut app: DuplexPipe) -> u64 {
    let mut echoed = 0;
    loop {
        let result = app.reader.read_buffer().await.unwrap();
        let buffer = result.buffer;
        for chunk in buffer.segments() {
            app.writer.write_slice(chunk).unwrap();
        }
        let (len, done) = (buffer.len(), result.is_completed);
        app.reader.advance_to(len, len).unwrap();
        app.writer.flush_pipe().await.unwrap();
        echoed += len as u64;
        if done {
            app.writer.complete(); // half-close back: the socket's write side shuts down
            return echoed;
        }
    }
}

/// The client of the echo tests: sends `total` random bytes in random chunks (1 B to 64 KiB) while
/// reading the echo concurrently, half-closes, and checks the echo is byte-exact and ends.
async fn echo_client(client: TcpStream, total: usize, seed: u64) {
    let (mut read_half, mut write_half) = client.into_split();
    let mut rng = Rng(seed);
    let data = rng.bytes(total);
    let expected = data.clone();
    let sender = tokio::spawn(async move {
        let mut sent = 0;
        while sent < data.len() {
            let len = (1 + rng.below(64 << 10)).min(data.len() - sent);
            write_half.write_all(&data[sent..sent + len]).await.unwrap();
            sent += len;
        }
        write_half.shutdown().await.unwrap();
    });
    let mut echo = Vec::with_capacity(total);
    read_half.read_to_end(&mut echo).await.unwrap();
    sender.await.unwrap();
    assert_eq!(echo.len(), expected.len());
    assert!(echo == expected, "the echo differs from what was sent");
}

#[test]
fn pumped_tokio_connection_echoes_random_chunks_byte_exact_and_half_closes() {
    run(async {
        let pool = Pool::new();
        for seed in 1..=2u64 {
            let (client, server) = socket_pair().await;
            let options = ConnectionOptions {
                pumped: true,
                ..options(&pool)
            };
            let (app, connection) = packetpipe::io::tokio::connection_with(server, options);
            // The transport shows in the connection's `Debug`.
            assert!(
                format!("{connection:?}").contains("\"pumped\""),
                "{connection:?}"
            );
            let connection = tokio::spawn(connection);
            let app = tokio::spawn(echo_app(app));
            echo_client(client, 4 << 20, seed).await;
            assert_eq!(app.await.unwrap(), 4 << 20);
            let end = connection.await.unwrap().expect("a clean close both ways");
            assert!(end.peer_closed);
            assert_eq!((end.received, end.sent), (4 << 20, 4 << 20));
        }
        assert_eq!(pool.stats().outstanding, 0, "{:?}", pool.stats());
    });
}

#[test]
fn tokio_connection_echoes_random_chunks_byte_exact_and_half_closes() {
    run(async {
        let pool = Pool::new();
        for seed in 1..=4u64 {
            let (client, server) = socket_pair().await;
            let (app, connection) = packetpipe::io::tokio::connection_with(server, options(&pool));
            let connection = tokio::spawn(connection);
            let app = tokio::spawn(echo_app(app));
            echo_client(client, 4 << 20, seed).await;
            assert_eq!(app.await.unwrap(), 4 << 20);
            connection.await.unwrap().expect("a clean close both ways");
        }
        assert_eq!(pool.stats().outstanding, 0, "{:?}", pool.stats());
    });
}

#[test]
fn futures_connection_echoes_random_chunks_byte_exact() {
    use tokio_util::compat::TokioAsyncReadCompatExt;
    run(async {
        let pool = Pool::new();
        let (client, server) = socket_pair().await;
        let (app, connection) =
            packetpipe::io::futures::connection_with(server.compat(), options(&pool));
        let connection = tokio::spawn(connection);
        let app = tokio::spawn(echo_app(app));
        echo_client(client, 4 << 20, 99).await;
        assert_eq!(app.await.unwrap(), 4 << 20);
        connection.await.unwrap().expect("a clean close both ways");
        assert_eq!(pool.stats().outstanding, 0, "{:?}", pool.stats());
    });
}

/// Half-close in each direction: the client's EOF completes the application's reader while the
/// application can still answer; the application's completion shuts down the socket's write side.
#[test]
fn half_close_propagates_both_ways() {
    run(async {
        let (mut client, server) = socket_pair().await;
        let (mut app, connection) = packetpipe::io::tokio::connection(server);
        let connection = tokio::spawn(connection);
        client.write_all(b"question").await.unwrap();
        client.shutdown().await.unwrap(); // the client is done sending
        let result = app.reader.read_at_least(usize::MAX).await.unwrap();
        assert_eq!(result.buffer.to_vec(), b"question");
        assert!(result.is_completed, "the peer's EOF completes the reader");
        app.writer.write_slice(b"answer after your EOF").unwrap();
        app.writer.complete();
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).await.unwrap();
        assert_eq!(answer, b"answer after your EOF");
        connection.await.unwrap().unwrap();
    });
}

/// A peer reset mid-stream: the application's reader gets every byte that arrived before it, then
/// the reset as an error of kind `ConnectionReset`; the connection future returns it.
#[test]
fn a_peer_reset_reaches_the_reader_after_the_bytes_before_it() {
    run(async {
        let (mut client, server) = socket_pair().await;
        let (mut app, connection) = packetpipe::io::tokio::connection(server);
        let connection = tokio::spawn(connection);
        let payload = Rng(7).bytes(200_000);
        client.write_all(&payload).await.unwrap();
        let result = app.reader.read_at_least(payload.len()).await.unwrap();
        assert_eq!(result.buffer.to_vec(), payload);
        let len = result.buffer.len();
        app.reader.advance_to(len, len).unwrap();
        // Every byte is in; now the peer resets (SO_LINGER 0, then close: an RST, not a FIN).
        client.set_zero_linger().unwrap();
        drop(client);
        let error = app.reader.read_buffer().await.unwrap_err();
        assert_eq!(
            error.io_kind(),
            std::io::ErrorKind::ConnectionReset,
            "{error:?}"
        );
        assert!(
            matches!(
                error,
                Error::Peer {
                    side: packetpipe::Side::Writer,
                    ..
                }
            ),
            "{error:?}"
        );
        drop(app);
        let result = connection.await.unwrap();
        assert_eq!(
            result.unwrap_err().kind(),
            std::io::ErrorKind::ConnectionReset
        );
    });
}

/// The application drops its ends mid-stream while the peer keeps sending: both pumps end, the
/// connection future returns, the peer sees the connection close, and every block goes home.
#[test]
fn dropping_the_application_ends_mid_stream_stops_the_pumps_and_frees_every_block() {
    run(async {
        let pool = Pool::new();
        let (client, server) = socket_pair().await;
        let (mut app, connection) = packetpipe::io::tokio::connection_with(server, options(&pool));
        let connection = tokio::spawn(connection);
        let (mut client_read, mut client_write) = client.into_split();
        let sender = tokio::spawn(async move {
            let chunk = vec![5u8; 16 << 10];
            // Keeps sending until the server side goes away.
            while client_write.write_all(&chunk).await.is_ok() {}
        });
        let mut got = 0;
        while got < 1 << 20 {
            let len = app.reader.read_buffer().await.unwrap().buffer.len();
            app.reader.advance_to(len, len).unwrap();
            got += len;
        }
        app.writer.write_slice(b"partial answer").unwrap();
        app.writer.flush_pipe().await.unwrap();
        drop(app); // mid-stream: the reader and the writer go
        connection.await.unwrap().expect("the pumps end cleanly");
        // The peer gets the answer flushed before the drop, then the end of the stream.
        let mut answer = Vec::new();
        let _ = client_read.read_to_end(&mut answer).await;
        assert_eq!(answer, b"partial answer");
        sender.abort();
        let _ = sender.await;
        assert_eq!(pool.stats().outstanding, 0, "{:?}", pool.stats());
    });
}

/// Dropping the connection future itself (the caller cancels it) completes both pipes with a
/// `ConnectionAborted` error: the application never mistakes the cut for a clean end.
#[test]
fn dropping_the_connection_future_aborts_both_pipes() {
    run(async {
        let (_client, server) = socket_pair().await;
        let (mut app, connection) = packetpipe::io::tokio::connection(server);
        drop(connection);
        let error = app.reader.read_buffer().await.unwrap_err();
        assert_eq!(error.io_kind(), std::io::ErrorKind::ConnectionAborted);
        app.writer.write_slice(b"too late").unwrap();
        let error = app.writer.flush_pipe().await.unwrap_err();
        assert_eq!(error.io_kind(), std::io::ErrorKind::ConnectionAborted);
    });
}

#[test]
fn an_application_writer_completed_with_an_error_still_ends_the_peers_stream() {
    // The write side is shut down after an error completion too: otherwise a peer reading to the
    // end of the reply would wait forever (and the connection with it).
    run(async {
        let (mut client, server) = socket_pair().await;
        let (mut app, connection) = packetpipe::io::tokio::connection(server);
        let connection = tokio::spawn(connection);
        app.writer.write_slice(b"partial reply").unwrap();
        app.writer
            .complete_with_error(std::io::Error::other("application failed"));
        let mut reply = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut reply))
            .await
            .expect("the peer saw the end of the stream")
            .unwrap();
        assert_eq!(reply, b"partial reply");
        // The peer closes too and the application reads that end: the connection ends, with the
        // application's error, where it was given.
        drop(client);
        let end = app.reader.read_buffer().await.unwrap();
        assert!(end.is_completed && end.buffer.is_empty());
        let e = tokio::time::timeout(Duration::from_secs(10), connection)
            .await
            .expect("the connection ended")
            .unwrap()
            .unwrap_err();
        // Each message once, down the chain: the connection's, then the application's error.
        let mut chain = vec![e.to_string()];
        let mut source = std::error::Error::source(&e);
        while let Some(cause) = source {
            chain.push(cause.to_string());
            source = cause.source();
        }
        assert!(
            chain.iter().any(|m| m.contains("application failed")),
            "{chain:?}"
        );
        assert!(!chain[0].contains("application failed"), "{chain:?}");
        assert_eq!(e.origin(), packetpipe::io::ErrorOrigin::Output);
        assert_eq!(e.position(), 13);
    });
}
