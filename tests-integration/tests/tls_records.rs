//! TLS records through the inline transport, against rustls' own client (its record layer, not
//! the library's): every cipher suite of both versions, frames from one byte to several records
//! long (records spanning receive blocks, frames spanning records), the library's own client,
//! and how each end of a connection is reported.
#![cfg(feature = "tls")]

mod kit;

use std::io::{BufRead, BufReader, Read, Write};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use packetpipe::frame::{FrameWriter, Framed, Frames, Lines};
use packetpipe::io::tls::rustls::crypto::ring as provider;
use packetpipe::io::tls::rustls::pki_types::{
    CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName,
};
use packetpipe::io::tls::{rustls, TlsAcceptor, TlsConnector};
use packetpipe::io::{ConnectionEnd, ConnectionError};

#[global_allocator]
static GLOBAL: kit::counting_alloc::CountingAlloc = kit::counting_alloc::CountingAlloc;

fn certificate() -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let key = PrivatePkcs8KeyDer::from(cert.key_pair.serialize_der());
    (cert.cert.der().clone(), key.into())
}

fn acceptor(cert: &CertificateDer<'static>, key: PrivateKeyDer<'static>) -> TlsAcceptor {
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)
        .unwrap();
    TlsAcceptor::from(Arc::new(config))
}

fn client_config(
    cert: &CertificateDer<'static>,
    suite: Option<rustls::SupportedCipherSuite>,
) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.clone()).unwrap();
    #[allow(deprecated)] // the ring provider's suites, listed to pick one
    let mut provider = provider::default_provider();
    let versions: Vec<&'static rustls::SupportedProtocolVersion> = match suite {
        Some(suite) => {
            provider.cipher_suites = vec![suite];
            vec![suite.version()]
        }
        None => rustls::ALL_VERSIONS.to_vec(),
    };
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    Arc::new(config)
}

/// The echo server's result: lines echoed and how its connection ended.
type Echoed = thread::JoinHandle<(usize, Result<ConnectionEnd, ConnectionError>)>;

fn echo_server(acceptor: TlsAcceptor) -> (std::net::SocketAddr, Echoed) {
    serve_one(acceptor, |tls| async move {
        let (app, connection) = packetpipe::io::tokio::connection(tls);
        let connection = tokio::spawn(connection);
        let mut lines = Frames::new(app.reader, Lines::new());
        let mut out = FrameWriter::new(app.writer, Lines::new());
        let mut n = 0;
        while let Some(line) = lines.next().await {
            let Ok(line) = line else { break };
            if out.send(line).await.is_err() {
                break;
            }
            n += 1;
        }
        let _ = out.close().await;
        (n, connection.await.unwrap())
    })
}

/// A server for one TLS connection on its own thread (a current-thread runtime): `serve` gets
/// the stream once the handshake is done; its result is the thread's.
fn serve_one<T, F, Fut>(
    acceptor: TlsAcceptor,
    serve: F,
) -> (std::net::SocketAddr, thread::JoinHandle<T>)
where
    T: Send + 'static,
    F: FnOnce(packetpipe::io::tls::TlsStream<tokio::net::TcpStream>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = T>,
{
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    let server = thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let (tcp, _) = listener.accept().await.unwrap();
            let tls = acceptor.accept(tcp).await.unwrap();
            serve(tls).await
        })
    });
    (addr, server)
}

fn connect(
    addr: std::net::SocketAddr,
    config: Arc<rustls::ClientConfig>,
) -> rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream> {
    let conn = rustls::ClientConnection::new(config, "localhost".try_into().unwrap()).unwrap();
    let tcp = std::net::TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    rustls::StreamOwned::new(conn, tcp)
}

/// Lines of every length from 0 to a few records, with a marker per line.
fn lines() -> Vec<String> {
    let mut lines = Vec::new();
    for (i, len) in [
        0, 1, 2, 15, 16, 17, 100, 4000, 4096, 5000, 16_383, 16_384, 16_385, 40_000,
    ]
    .into_iter()
    .enumerate()
    {
        let fill: String = (0..len)
            .map(|j| char::from(b'a' + ((i + j) % 26) as u8))
            .collect();
        lines.push(format!("{i}:{fill}"));
    }
    lines
}

/// Echo every line of [`lines`] through a rustls client, written one by one and then all at
/// once, and close with close_notify: the server's end is the peer's clean close.
fn echo_with(config: Arc<rustls::ClientConfig>) {
    let (cert, key) = cert();
    let (addr, server) = echo_server(acceptor(&cert, key));
    let mut tls = connect(addr, config);
    let lines = lines();
    let mut reader_lines = 0;
    for line in &lines {
        writeln!(tls, "{line}").unwrap();
        tls.flush().unwrap();
        let mut echoed = String::new();
        BufReader::new(&mut tls).read_line(&mut echoed).unwrap();
        assert_eq!(echoed.trim_end_matches('\n'), line);
        reader_lines += 1;
    }
    let all: String = lines.iter().map(|l| format!("{l}\n")).collect();
    tls.write_all(all.as_bytes()).unwrap();
    tls.flush().unwrap();
    let mut echoed = vec![0; all.len()];
    tls.read_exact(&mut echoed).unwrap();
    assert!(echoed == all.as_bytes(), "the burst came back changed");
    tls.conn.send_close_notify();
    tls.flush().unwrap();
    let mut rest = Vec::new();
    tls.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "bytes after the echo: {}", rest.len());
    let (echoed_lines, end) = server.join().unwrap();
    assert_eq!(echoed_lines, reader_lines + lines.len());
    let end = end.expect("a clean end");
    assert!(end.peer_closed, "{end:?}");
    assert!(end.sent >= 2 * all.len() as u64, "{end:?}");
}

/// One certificate for the whole file (made once: key generation is the slow part).
fn cert() -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
    static CERT: std::sync::OnceLock<(CertificateDer<'static>, PrivateKeyDer<'static>)> =
        std::sync::OnceLock::new();
    let (cert, key) = CERT.get_or_init(certificate);
    (cert.clone(), key.clone_key())
}

#[test]
fn every_cipher_suite_of_both_versions_echoes_frames_of_every_size() {
    #[allow(deprecated)]
    let suites = provider::default_provider().cipher_suites;
    let cert = cert().0;
    let mut versions = std::collections::BTreeSet::new();
    for suite in suites {
        // The certificate is ECDSA: TLS 1.2's RSA suites cannot be negotiated with it.
        if format!("{:?}", suite.suite()).contains("_RSA_") {
            continue;
        }
        versions.insert(format!("{:?}", suite.version().version));
        echo_with(client_config(&cert, Some(suite)));
    }
    assert_eq!(versions.len(), 2, "{versions:?}");
}

/// A TCP end without `close_notify` after one echoed line, the line written before the handshake
/// finished (`early`: then it travels with the client's last handshake flight) or after it.
fn end_without_close_notify(early: bool) {
    let (cert, key) = cert();
    let (addr, server) = echo_server(acceptor(&cert, key));
    let mut tls = connect(addr, client_config(&cert, None));
    if early {
        tls.conn.writer().write_all(b"one\n").unwrap();
    } else {
        while tls.conn.is_handshaking() {
            tls.conn.complete_io(&mut tls.sock).unwrap();
        }
        writeln!(tls, "one").unwrap();
    }
    tls.flush().unwrap();
    let mut echoed = String::new();
    BufReader::new(&mut tls).read_line(&mut echoed).unwrap();
    assert_eq!(echoed, "one\n");
    tls.sock.shutdown(std::net::Shutdown::Write).unwrap();
    let (lines, end) = server.join().unwrap();
    assert_eq!(lines, 1);
    let error = end.expect_err("a TCP end without close_notify");
    assert_eq!(error.kind(), std::io::ErrorKind::UnexpectedEof, "{error}");
    // The one record the client sent after its handshake: 5 header bytes, the line, its content
    // type and the 16-byte tag (TLS 1.3).
    assert_eq!(error.position(), 5 + 4 + 1 + 16, "{error}");
}

#[test]
fn a_tcp_end_without_close_notify_is_an_unexpected_eof_at_its_position() {
    end_without_close_notify(false);
}

#[test]
fn records_that_come_with_the_handshake_count_as_received() {
    end_without_close_notify(true);
}

#[test]
fn the_librarys_client_and_server_talk_both_ways_and_close_cleanly() {
    let (cert, key) = cert();
    let (addr, server) = echo_server(acceptor(&cert, key));
    let connector = TlsConnector::from(client_config(&cert, None));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let end = runtime.block_on(async move {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let name = ServerName::try_from("localhost").unwrap();
        let tls = connector.connect(name, tcp).await.unwrap();
        assert_eq!(
            tls.negotiated().protocol_version,
            rustls::ProtocolVersion::TLSv1_3
        );
        let (app, connection) = packetpipe::io::tokio::connection(tls);
        let connection = tokio::spawn(connection);
        let mut lines = Frames::new(app.reader, Lines::new());
        let mut out = FrameWriter::new(app.writer, Lines::new());
        for i in 0..1000 {
            out.feed(format!("line {i}")).unwrap();
        }
        out.flush().await.unwrap();
        for i in 0..1000 {
            assert_eq!(&*lines.next().await.unwrap().unwrap(), format!("line {i}"));
        }
        out.close().await.unwrap();
        assert!(
            lines.next().await.is_none(),
            "the server's close_notify ends the stream"
        );
        connection.await.unwrap()
    });
    let end = end.expect("the client's clean end");
    assert!(end.peer_closed, "{end:?}");
    let (lines, server_end) = server.join().unwrap();
    assert_eq!(lines, 1000);
    assert!(server_end.expect("the server's clean end").peer_closed);
}

/// Records received back to back are opened into one run of plaintext in the receive block (each
/// record's plaintext written over the header and tag before it): a frame spanning records is one
/// segment, and `take_frame` shares it instead of copying it together.
#[test]
fn a_frame_spanning_records_is_one_segment_shared_not_copied() {
    const FRAME: usize = 40_000; // three records: 16,384 + 16,384 + 7,232 bytes of plaintext
    let (cert, key) = cert();
    let (addr, server) = serve_one(acceptor(&cert, key), |tls| async move {
        let (mut app, connection) = packetpipe::io::tokio::connection(tls);
        let connection = tokio::spawn(connection);
        let read = app.reader.read_at_least(FRAME).await.unwrap();
        let segments: Vec<(usize, usize)> = read
            .buffer
            .segments()
            .map(|s| (s.as_ptr() as usize, s.len()))
            .collect();
        let frame = app.reader.take_frame(FRAME).unwrap();
        drop(app);
        let _ = connection.await.unwrap();
        (segments, frame)
    });
    let payload: Vec<u8> = (0..FRAME).map(|i| (i % 251) as u8).collect();
    let mut tls = connect(addr, client_config(&cert, None));
    tls.write_all(&payload).unwrap();
    tls.flush().unwrap();
    let (segments, frame) = server.join().unwrap();
    assert_eq!(&frame[..], &payload[..], "the frame's bytes");
    assert_eq!(segments.len(), 1, "one run of plaintext: {segments:?}");
    assert_eq!(segments[0].1, FRAME, "{segments:?}");
    assert_eq!(
        frame.as_ptr() as usize,
        segments[0].0,
        "the frame is the segment itself, not a copy"
    );
}

/// An idle TLS connection holds no pooled block, as a plain one does: after each echo, while the
/// server waits for the next line (a line at a time, and a burst), its pool has nothing
/// outstanding; the connection then goes on.
#[test]
fn an_idle_tls_connection_holds_no_pooled_block() {
    let pool = packetpipe::Pool::new();
    let options = packetpipe::io::ConnectionOptions {
        input: packetpipe::pipe::PipeOptions {
            pool: Some(pool.clone()),
            ..Default::default()
        },
        output: packetpipe::pipe::PipeOptions {
            pool: Some(pool.clone()),
            ..Default::default()
        },
        ..Default::default()
    };
    let (cert, key) = cert();
    let (addr, server) = serve_one(acceptor(&cert, key), move |tls| async move {
        let (app, connection) = packetpipe::io::tokio::connection_with(tls, options);
        let (mut out, mut lines) = Framed::from_connection(app, connection, Lines::new()).split();
        out.forward(&mut lines).await.unwrap();
        out.close().await.unwrap();
    });
    let mut tls = connect(addr, client_config(&cert, None));
    for batch in ["one line\n".to_string(), "a burst\n".repeat(64)] {
        tls.write_all(batch.as_bytes()).unwrap();
        tls.flush().unwrap();
        let mut echoed = vec![0; batch.len()];
        tls.read_exact(&mut echoed).unwrap();
        assert_eq!(echoed, batch.as_bytes());
        // The server's last step after the echo (giving its blocks back as it waits) may still be
        // running: give it up to 5 s.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while pool.stats().outstanding > 0 && std::time::Instant::now() < deadline {
            thread::sleep(Duration::from_millis(5));
        }
        let stats = pool.stats();
        assert_eq!(
            (stats.outstanding, stats.outstanding_bytes),
            (0, 0),
            "an idle TLS connection after {} bytes echoed",
            batch.len()
        );
        assert!(
            stats.rents > 0,
            "the connection's blocks come from this pool"
        );
    }
    tls.conn.send_close_notify();
    tls.flush().unwrap();
    server.join().unwrap();
}

#[test]
fn a_framed_takes_a_tls_stream_as_it_takes_a_tcp_stream() {
    let (cert, key) = cert();
    let (addr, server) = serve_one(acceptor(&cert, key), |tls| async move {
        let (mut out, mut lines) = Framed::new(tls, Lines::new()).split();
        while let Some(line) = lines.next().await {
            out.send(line.unwrap().to_uppercase()).await.unwrap();
        }
        out.close().await.unwrap();
    });
    let mut tls = connect(addr, client_config(&cert, None));
    tls.write_all(b"hello\nworld\n").unwrap();
    tls.conn.send_close_notify();
    tls.flush().unwrap();
    let mut echoed = String::new();
    tls.read_to_string(&mut echoed).unwrap();
    assert_eq!(echoed, "HELLO\nWORLD\n");
    server.join().unwrap();
}

#[test]
fn an_echo_in_steady_state_allocates_nothing_on_either_side() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (cert, key) = cert();
    let acceptor = acceptor(&cert, key);
    let connector = TlsConnector::from(client_config(&cert, None));
    let line = format!("{}\n", "x".repeat(63));
    let burst = line.repeat(16);
    let large = format!("{}\n", "y".repeat(100_000));
    // Server and client on this thread, on one current-thread runtime: this thread's
    // allocations are all of both.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let results = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let tls = acceptor.accept(tcp).await.unwrap();
            let (mut out, mut lines) = Framed::new(tls, Lines::with_max_length(200_000)).split();
            out.forward(&mut lines).await.unwrap();
        });
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        tcp.set_nodelay(true).unwrap();
        let name = ServerName::try_from("localhost").unwrap();
        let mut tls = connector.connect(name, tcp).await.unwrap();
        let mut received = vec![0; large.len()];
        let mut results = Vec::new();
        for (name, batch, rounds) in [
            ("one 64-byte line at a time", &line, 2000),
            ("16 lines per write", &burst, 500),
            ("a 100 KB line", &large, 50),
        ] {
            for _ in 0..rounds / 2 {
                tls.write_all(batch.as_bytes()).await.unwrap();
                tls.read_exact(&mut received[..batch.len()]).await.unwrap();
            }
            let before = kit::counting_alloc::allocations();
            for _ in 0..rounds {
                tls.write_all(batch.as_bytes()).await.unwrap();
                tls.read_exact(&mut received[..batch.len()]).await.unwrap();
                assert!(&received[..batch.len()] == batch.as_bytes());
            }
            let allocations = kit::counting_alloc::allocations() - before;
            println!("{name}: {allocations} allocations in {rounds} rounds");
            results.push((name, allocations));
        }
        tls.shutdown().await.unwrap();
        server.await.unwrap();
        results
    });
    for (name, allocations) in results {
        assert_eq!(allocations, 0, "{name}: allocations in steady state");
    }
}
