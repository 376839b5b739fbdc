//! The inline transport from outside, over real sockets: the application's reads read the
//! socket and its flushes write it; the connection's future reports how it ended.
#![cfg(feature = "tokio")]

use packetpipe::ByteSegments;
use std::io::{Read, Write};
use std::time::Duration;

use futures::SinkExt;
use packetpipe::frame::{FrameWriter, Framed, Frames, LengthDelimited, Lines};
use packetpipe::io::{ConnectionOptions, ErrorOrigin};
use packetpipe::pipe::PipeOptions;
use packetpipe::Pool;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod kit;

use kit::net::socket_pair;

fn run<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

#[test]
fn framed_echoes_lines_through_sink_and_stream_and_closes() {
    run(async {
        let (mut client, server) = socket_pair().await;
        let mut framed = Framed::new(server, Lines::new());
        let peer = tokio::spawn(async move {
            for i in 0..100 {
                client.write_all(format!("line {i}\n").as_bytes()).await?;
            }
            client.shutdown().await?;
            let mut echo = String::new();
            client.read_to_string(&mut echo).await?;
            Ok::<_, std::io::Error>(echo)
        });
        let mut n = 0;
        while let Some(line) = framed.next().await {
            let line = line.unwrap();
            assert_eq!(&*line, format!("line {n}"));
            SinkExt::<String>::send(&mut framed, line.to_uppercase())
                .await
                .unwrap();
            n += 1;
        }
        assert_eq!(n, 100);
        SinkExt::<String>::close(&mut framed).await.unwrap();
        let echo = peer.await.unwrap().unwrap();
        let expected: String = (0..100).map(|i| format!("LINE {i}\n")).collect();
        assert_eq!(echo, expected);
    });
}

#[test]
fn a_trickling_peer_is_read_in_the_readers_own_poll_and_every_byte_arrives() {
    run(async {
        let (mut client, server) = socket_pair().await;
        let (app, connection) = packetpipe::io::tokio::connection(server);
        let connection = tokio::spawn(connection);
        let message: Vec<u8> = (0..200u8).collect();
        let sent = message.clone();
        let peer = tokio::spawn(async move {
            for byte in sent {
                client.write_all(&[byte]).await.unwrap();
                tokio::time::sleep(Duration::from_micros(50)).await;
            }
            client.shutdown().await.unwrap();
            client
        });
        let mut reader = app.reader;
        let got = {
            let result = reader.read_at_least(message.len()).await.unwrap();
            result.buffer.to_vec()
        };
        assert_eq!(got, message);
        reader.advance_to(got.len(), got.len()).unwrap();
        let end = reader.read_buffer().await.unwrap();
        assert!(end.is_completed);
        drop(reader);
        drop(app.writer);
        let _client = peer.await.unwrap();
        let end = connection.await.unwrap().expect("a clean end");
        assert!(end.peer_closed);
        assert_eq!(end.received, 200);
        assert_eq!(end.sent, 0);
    });
}

#[test]
fn a_slow_peer_gets_every_byte_while_the_flushes_wait_at_the_pause_threshold() {
    run(async {
        let (mut client, server) = socket_pair().await;
        let pool = Pool::new();
        let options = ConnectionOptions {
            input: PipeOptions {
                pool: Some(pool.clone()),
                ..Default::default()
            },
            output: PipeOptions {
                pool: Some(pool.clone()),
                pause_threshold: 64 * 1024,
                resume_threshold: 32 * 1024,
                ..Default::default()
            },
            ..Default::default()
        };
        let (app, connection) = packetpipe::io::tokio::connection_with(server, options);
        let connection = tokio::spawn(connection);
        const TOTAL: usize = 8 << 20;
        let peer = tokio::spawn(async move {
            let mut got = Vec::with_capacity(TOTAL);
            let mut buf = vec![0; 4096];
            loop {
                let n = client.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
                if got.len() % (256 * 1024) < 4096 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
            got
        });
        let mut writer = app.writer;
        let chunk: Vec<u8> = (0..=255u8).cycle().take(16 * 1024).collect();
        for _ in 0..TOTAL / chunk.len() {
            writer.write_slice(&chunk).unwrap();
            writer.flush_pipe().await.unwrap();
            // The socket's send buffer plus the pause threshold bound what waits here.
            assert!(
                pool.stats().outstanding_bytes <= 1 << 20,
                "{:?}",
                pool.stats()
            );
        }
        writer.complete();
        let got = peer.await.unwrap();
        assert_eq!(got.len(), TOTAL);
        assert!(got.chunks(chunk.len()).all(|c| c == &chunk[..]));
        drop(app.reader);
        let end = connection.await.unwrap().expect("a clean end");
        assert_eq!(end.sent, TOTAL as u64);
        assert_eq!(pool.stats().outstanding, 0);
    });
}

#[test]
fn a_peer_reset_mid_frame_ends_the_connection_with_a_read_error_at_its_position() {
    run(async {
        let (mut client, server) = socket_pair().await;
        let (app, connection) = packetpipe::io::tokio::connection(server);
        let connection = tokio::spawn(connection);
        // Half a frame, then a reset (SO_LINGER 0 makes close send RST).
        client.write_all(b"\x00\x00\x00\x10half").await.unwrap();
        client.flush().await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        let std = client.into_std().unwrap();
        socket_linger_zero(&std);
        drop(std);
        let mut frames = Frames::new(app.reader, LengthDelimited::new());
        let item = frames.next().await.expect("an error item");
        assert!(item.is_err(), "{item:?}");
        drop(frames);
        drop(app.writer);
        let e = connection.await.unwrap().unwrap_err();
        assert_eq!(e.origin(), ErrorOrigin::Read, "{e}");
        assert_eq!(e.position(), 8);
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset);
    });
}

fn socket_linger_zero(stream: &std::net::TcpStream) {
    use std::os::fd::AsRawFd;
    #[repr(C)]
    struct Linger {
        l_onoff: i32,
        l_linger: i32,
    }
    extern "C" {
        fn setsockopt(fd: i32, level: i32, name: i32, value: *const Linger, len: u32) -> i32;
    }
    const SOL_SOCKET: i32 = 1;
    const SO_LINGER: i32 = 13;
    let linger = Linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a valid open socket descriptor and a pointer to a live, correctly sized `linger`.
    let rc = unsafe {
        setsockopt(
            stream.as_raw_fd(),
            SOL_SOCKET,
            SO_LINGER,
            &linger,
            std::mem::size_of::<Linger>() as u32,
        )
    };
    assert_eq!(rc, 0);
}

#[test]
fn framed_next_dropped_while_waiting_loses_and_repeats_nothing() {
    run(async {
        let (mut client, server) = socket_pair().await;
        let mut framed = Framed::new(server, LengthDelimited::new());
        let peer = tokio::spawn(async move {
            for i in 0..200u32 {
                let payload = i.to_be_bytes();
                client.write_all(&4u32.to_be_bytes()).await.unwrap();
                tokio::task::yield_now().await;
                client.write_all(&payload[..2]).await.unwrap();
                tokio::task::yield_now().await;
                client.write_all(&payload[2..]).await.unwrap();
            }
            client.shutdown().await.unwrap();
            client
        });
        let mut next = 0u32;
        loop {
            // Each wait is cut short once, then awaited again.
            let cut = tokio::time::timeout(Duration::from_micros(10), framed.next()).await;
            let item = match cut {
                Ok(item) => item,
                Err(_) => framed.next().await,
            };
            let Some(frame) = item else { break };
            assert_eq!(&frame.unwrap()[..], &next.to_be_bytes());
            next += 1;
        }
        assert_eq!(next, 200);
        drop(peer.await.unwrap());
    });
}

#[test]
fn a_blocking_rpc_server_runs_on_its_own_thread_with_no_other() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (tcp, _) = listener.accept().unwrap();
        let (app, connection) = packetpipe::io::blocking::connection(tcp);
        let mut frames = Frames::new(app.reader, LengthDelimited::new());
        let mut out = FrameWriter::new(app.writer, LengthDelimited::new());
        let mut served = 0;
        for frame in frames.iter_blocking() {
            packetpipe::block_on(out.send(frame.unwrap())).unwrap();
            served += 1;
        }
        packetpipe::block_on(out.close()).unwrap();
        drop((frames, out));
        (served, packetpipe::block_on(connection).unwrap())
    });
    let mut tcp = std::net::TcpStream::connect(addr).unwrap();
    for i in 0..1000u32 {
        let payload = vec![i as u8; (i % 300) as usize + 1];
        let mut request = (payload.len() as u32).to_be_bytes().to_vec();
        request.extend_from_slice(&payload);
        tcp.write_all(&request).unwrap();
        let mut header = [0; 4];
        tcp.read_exact(&mut header).unwrap();
        let mut reply = vec![0; u32::from_be_bytes(header) as usize];
        tcp.read_exact(&mut reply).unwrap();
        assert_eq!(reply, payload);
    }
    tcp.shutdown(std::net::Shutdown::Write).unwrap();
    let mut rest = Vec::new();
    tcp.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());
    let (served, end) = server.join().unwrap();
    assert_eq!(served, 1000);
    assert!(end.peer_closed);
    assert_eq!(end.received, end.sent);
}

#[test]
fn dropping_the_connection_future_cuts_a_reader_waiting_on_the_socket() {
    run(async {
        let (_client, server) = socket_pair().await;
        let (mut app, connection) = packetpipe::io::tokio::connection(server);
        let waiting = tokio::spawn(async move {
            let e = std::io::Error::from(app.reader.read_buffer().await.unwrap_err());
            assert_eq!(e.kind(), std::io::ErrorKind::ConnectionAborted, "{e}");
            app
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(connection);
        let mut app = tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("the waiting reader was woken")
            .unwrap();
        app.writer.write_slice(b"late").unwrap();
        assert!(app.writer.flush_pipe().await.is_err());
    });
}

#[test]
fn a_decoder_error_given_to_the_reader_ends_the_connection_at_its_position() {
    run(async {
        let (mut client, server) = socket_pair().await;
        let (app, connection) = packetpipe::io::tokio::connection(server);
        let connection = tokio::spawn(connection);
        client.write_all(b"short\n").await.unwrap();
        client.write_all(&[b'x'; 100]).await.unwrap();
        let mut lines = Frames::new(app.reader, Lines::with_max_length(64));
        let mut out = FrameWriter::new(app.writer, Lines::new());
        let e = out.forward(&mut lines).await.unwrap_err();
        lines.into_inner().complete_with_error(e);
        drop(out);
        let mut echo = Vec::new();
        client.read_to_end(&mut echo).await.unwrap();
        assert_eq!(echo, b"short\n");
        let e = connection.await.unwrap().unwrap_err();
        assert_eq!(e.origin(), ErrorOrigin::Input, "{e}");
        assert_eq!(e.position(), 6, "{e}");
        // The decoder's error is down the chain, said once.
        let mut chain = vec![e.to_string()];
        let mut source = std::error::Error::source(&e);
        while let Some(cause) = source {
            chain.push(cause.to_string());
            source = cause.source();
        }
        assert_eq!(
            chain.iter().filter(|m| m.contains("maximum")).count(),
            1,
            "{chain:?}"
        );
    });
}

#[test]
fn a_peer_reset_while_writes_are_partly_taken_fails_the_flush_and_ends_with_a_write_error() {
    run(async {
        let (mut client, server) = socket_pair().await;
        let (app, connection) = packetpipe::io::tokio::connection(server);
        let connection = tokio::spawn(connection);
        let peer = tokio::spawn(async move {
            let mut buf = vec![0; 64 * 1024];
            let mut got = 0;
            while got < 256 * 1024 {
                got += client.read(&mut buf).await.unwrap();
            }
            let std = client.into_std().unwrap();
            socket_linger_zero(&std);
            drop(std); // a reset, with the server's replies still coming
        });
        let mut writer = app.writer;
        let chunk = vec![7u8; 64 * 1024];
        let mut failed = None;
        for _ in 0..(64 << 20) / chunk.len() {
            writer.write_slice(&chunk).unwrap();
            if let Err(e) = writer.flush_pipe().await {
                failed = Some(e);
                break;
            }
        }
        let e = std::io::Error::from(failed.expect("a flush failed after the reset"));
        assert!(
            matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
            ),
            "{e}"
        );
        peer.await.unwrap();
        drop(app.reader);
        let e = connection.await.unwrap().unwrap_err();
        assert_eq!(e.origin(), ErrorOrigin::Write, "{e}");
        assert!(e.position() >= 256 * 1024, "{e}");
    });
}

#[test]
fn framed_forward_finishes_writing_a_reply_the_socket_took_in_parts() {
    run(async {
        let (client, server) = socket_pair().await;
        let codec = LengthDelimited::builder()
            .max_frame_length(32 << 20)
            .new_codec();
        let (mut out, mut frames) = Framed::new(server, codec).split();
        let echo = tokio::spawn(async move {
            out.forward(&mut frames).await.unwrap();
            out.close().await.unwrap();
        });
        // One request at a time, each waiting for its whole reply: a reply the socket took only
        // in part must still be finished by the server's own task (nothing else runs there).
        let (mut read, mut write) = client.into_split();
        for round in 0..3u8 {
            let payload = vec![round; 8 << 20];
            let writer = tokio::spawn(async move {
                write
                    .write_all(&(payload.len() as u32).to_be_bytes())
                    .await
                    .unwrap();
                write.write_all(&payload).await.unwrap();
                write
            });
            let mut header = [0; 4];
            tokio::time::timeout(Duration::from_secs(30), read.read_exact(&mut header))
                .await
                .expect("the reply started")
                .unwrap();
            let mut reply = vec![0; u32::from_be_bytes(header) as usize];
            tokio::time::timeout(Duration::from_secs(30), read.read_exact(&mut reply))
                .await
                .expect("the whole reply came")
                .unwrap();
            assert_eq!(reply.len(), 8 << 20);
            assert!(reply.iter().all(|&b| b == round));
            write = writer.await.unwrap();
        }
        write.shutdown().await.unwrap();
        let mut rest = Vec::new();
        read.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
        echo.await.unwrap();
    });
}

/// A blocking connection has the inline transport only: asking it for the pumped one is a
/// programmer error, not an option silently ignored.
#[test]
#[should_panic(expected = "ConnectionOptions::pumped is true, but a blocking connection")]
fn a_blocking_connection_rejects_the_pumped_transport() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let options = ConnectionOptions {
        pumped: true,
        ..Default::default()
    };
    let _ = packetpipe::io::blocking::connection_with(client, options);
}
