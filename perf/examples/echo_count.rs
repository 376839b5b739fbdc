//! Instructions per echoed message, for `scripts/echo_instructions.sh`: one echo server alone in a
//! process (to run under `valgrind --tool=callgrind`), and a client that sends a fixed number of
//! messages and exits.
//!
//! ```text
//! cargo build --release -p packetpipe-perf --example echo_count
//! target/release/examples/echo_count serve packetpipe 127.0.0.1:7001   # or `forward`
//! target/release/examples/echo_count client 127.0.0.1:7001 16 1 2000   # connections, outstanding, messages each
//! target/release/examples/echo_count serve packetpipe 127.0.0.1:7001 --tls CERT KEY   # build with --features tls
//! target/release/examples/echo_count client 127.0.0.1:7001 16 1 2000 --tls CERT --size 16384
//! ```
//!
//! `serve packetpipe` is `examples/echo_server.rs` (`serve packetpipe-keep`: the same on a
//! connection that keeps its blocks while idle); `serve forward` is tokio-util's `Framed` split
//! and forwarded (a burst of frames read at once goes out with one write, as packetpipe's
//! `FrameWriter::forward` does), as in `examples/echo_load.rs`. Both run on a current-thread tokio
//! runtime and print `listening on ADDR`. The client keeps `outstanding` frames in flight
//! on each connection (64 bytes of payload, or `--size`), checks every echo byte for byte, and
//! prints how many came back.
//!
//! With `--tls CERT KEY` (PEM files) the server accepts TLS: `packetpipe` with its own
//! `TlsAcceptor` (records opened in place in the reader's blocks), `forward` with `tokio-rustls`,
//! one rustls configuration (0.23, `ring`) for both; the client's `--tls CERT` connects with
//! `tokio-rustls`, the certificate its only root.
#![forbid(unsafe_code)]

use std::sync::Arc;

#[path = "../../examples/echo_server.rs"]
#[allow(dead_code)] // its `main` is not this one's
mod echo_server;

use bytes::BytesMut;
use futures::{StreamExt, TryStreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_util::codec::{Framed, LengthDelimitedCodec};

async fn serve_forward<S: AsyncRead + AsyncWrite>(socket: S) -> std::io::Result<()> {
    let codec = LengthDelimitedCodec::builder()
        .max_frame_length(1 << 20)
        .new_codec();
    let (sink, stream) = Framed::new(socket, codec).split();
    stream.map_ok(BytesMut::freeze).forward(sink).await
}

/// `examples/echo_server.rs`'s echo on a connection that keeps its blocks while idle
/// (`ConnectionOptions::keep_blocks_idle`).
async fn serve_keep(socket: TcpStream) -> Result<(), packetpipe::frame::FrameError> {
    let _ = socket.set_nodelay(true);
    let options = packetpipe::io::ConnectionOptions {
        keep_blocks_idle: true,
        ..Default::default()
    };
    let (app, connection) = packetpipe::io::tokio::connection_with(socket, options);
    let codec = packetpipe::frame::LengthDelimited::builder()
        .max_frame_length(1 << 20)
        .new_codec();
    let (mut out, mut frames) =
        packetpipe::frame::Framed::from_connection(app, connection, codec).split();
    out.forward(&mut frames).await?;
    out.close().await
}

async fn serve(
    kind: &str,
    addr: &str,
    tls: Option<Arc<rustls::ServerConfig>>,
) -> std::io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    println!("listening on {}", listener.local_addr()?);
    loop {
        let (socket, _) = listener.accept().await?;
        socket.set_nodelay(true)?;
        match (kind, &tls) {
            ("packetpipe", None) => drop(tokio::spawn(echo_server::serve(socket))),
            ("packetpipe-keep", None) => drop(tokio::spawn(serve_keep(socket))),
            (_, None) => drop(tokio::spawn(serve_forward(socket))),
            #[cfg(feature = "tls")]
            ("packetpipe", Some(config)) => {
                let acceptor = packetpipe::io::tls::TlsAcceptor::from(config.clone());
                drop(tokio::spawn(async move {
                    let tls = acceptor.accept(socket).await.expect("a TLS handshake");
                    echo_server::serve_stream(tls).await
                }));
            }
            ("forward", Some(config)) => {
                let acceptor = tokio_rustls::TlsAcceptor::from(config.clone());
                drop(tokio::spawn(async move {
                    let tls = acceptor.accept(socket).await.expect("a TLS handshake");
                    serve_forward(tls).await
                }));
            }
            _ => panic!("{kind} over TLS: `packetpipe` (built with --features tls) or `forward`"),
        }
    }
}

/// The server's TLS configuration from PEM files: the certificate chain, then its key.
fn server_config(cert: &str, key: &str) -> Arc<rustls::ServerConfig> {
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .expect("the certificate (PEM)");
    let key = PrivateKeyDer::from_pem_file(key).expect("the private key (PEM)");
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("a certificate and its key");
    Arc::new(config)
}

/// A client's TLS connector that trusts the certificate in `cert` (PEM).
fn connector(cert: &str) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(cert).expect("the certificate (PEM)") {
        roots.add(cert.expect("a certificate")).expect("a root");
    }
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// One connection: `outstanding` frames of `size` payload bytes in flight until `messages` have
/// come back.
async fn client(
    addr: String,
    outstanding: usize,
    messages: usize,
    size: usize,
    tls: Option<tokio_rustls::TlsConnector>,
) -> usize {
    let socket = TcpStream::connect(&addr).await.expect("connect");
    socket.set_nodelay(true).expect("nodelay");
    match tls {
        None => exchange(socket, outstanding, messages, size).await,
        Some(connector) => {
            let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
            let tls = connector
                .connect(name, socket)
                .await
                .expect("a TLS handshake");
            exchange(tls, outstanding, messages, size).await
        }
    }
}

async fn exchange<S: AsyncRead + AsyncWrite>(
    socket: S,
    outstanding: usize,
    messages: usize,
    size: usize,
) -> usize {
    let (mut rx, mut tx) = tokio::io::split(socket);
    let mut frame = (size as u32).to_be_bytes().to_vec();
    frame.extend((0..size).map(|i| (i % 251) as u8));
    let mut sent = 0;
    while sent < outstanding.min(messages) {
        tx.write_all(&frame).await.expect("send");
        sent += 1;
    }
    let mut echo = vec![0u8; frame.len()];
    for _ in 0..messages {
        rx.read_exact(&mut echo).await.expect("echo");
        assert_eq!(echo, frame, "the echo differs from the message");
        if sent < messages {
            tx.write_all(&frame).await.expect("send");
            sent += 1;
        }
    }
    messages
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    // Options after the positional arguments: `--tls CERT [KEY]`, `--size N`.
    let mut positional = Vec::new();
    let (mut cert, mut key, mut size) = (None, None, 64);
    let mut rest = args.iter().map(String::as_str);
    while let Some(arg) = rest.next() {
        match arg {
            "--tls" => {
                cert = rest.next();
                if positional.first() == Some(&"serve") {
                    key = rest.next();
                }
            }
            "--size" => size = rest.next().and_then(|v| v.parse().ok()).expect("--size N"),
            _ => positional.push(arg),
        }
    }
    match positional[..] {
        ["serve", kind @ ("packetpipe" | "packetpipe-keep" | "forward"), addr] => {
            let tls = cert.map(|cert| server_config(cert, key.expect("--tls CERT KEY")));
            runtime.block_on(serve(kind, addr, tls)).expect("serve");
        }
        ["client", addr, connections, outstanding, messages] => {
            let parse = |v: &str| v.parse::<usize>().expect("a number");
            let (c, k, m) = (parse(connections), parse(outstanding), parse(messages));
            if k == 0 {
                eprintln!("OUTSTANDING must be at least 1");
                std::process::exit(2);
            }
            let echoed: usize = runtime.block_on(async {
                let clients: Vec<_> = (0..c)
                    .map(|_| {
                        let tls = cert.map(connector);
                        tokio::spawn(client(addr.to_string(), k, m, size, tls))
                    })
                    .collect();
                let mut total = 0;
                for client in clients {
                    total += client.await.expect("client");
                }
                total
            });
            println!("{echoed} messages echoed");
        }
        _ => {
            eprintln!(
                "usage: echo_count serve packetpipe|packetpipe-keep|forward ADDR [--tls CERT KEY]"
            );
            eprintln!(
                "       echo_count client ADDR CONNECTIONS OUTSTANDING MESSAGES [--tls CERT] \
                 [--size N]"
            );
            std::process::exit(2);
        }
    }
}
