//! An HTTP/1.1 load client for `scripts/e2e_instructions.sh` (a fixed number of requests, each
//! response checked byte for byte) and for the idle-connection memory measurements.
//!
//! ```text
//! cargo build --release -p packetpipe-perf --example http_count
//! target/release/examples/http_count [--tls] ADDR CONNECTIONS REQUESTS DEPTH
//! target/release/examples/http_count idle ADDR CONNECTIONS
//! target/release/examples/http_count idle-tls ADDR CONNECTIONS
//! ```
//!
//! `ADDR CONNECTIONS REQUESTS DEPTH` opens CONNECTIONS keep-alive connections (a thread each);
//! each sends REQUESTS `GET /` requests, DEPTH per write (DEPTH 1: one at a time, each response
//! awaited before the next request; DEPTH 16: 16 pipelined requests in one write, then their
//! 16 responses), checks that every response is `200` with the `Hello, World!` body, in exactly
//! the bytes the three servers write (`examples/http_server.rs`,
//! `perf/examples/http_server_tokio_util.rs`, `perf/examples/http_server_hyper.rs`), and closes.
//! REQUESTS is a multiple of DEPTH.
//!
//! `idle ADDR CONNECTIONS` opens CONNECTIONS connections, sends one `GET /` on each, reads every
//! response, prints `answered`, and keeps the connections open, idle, until its standard input
//! closes. `idle-tls ADDR CONNECTIONS` does the same over TLS: each connection completes its
//! handshake before it sends its request.
//!
//! With `--tls` each connection of the load is TLS: the handshake once, at the start, then the
//! same requests and checks over the TLS stream; at the end the client sends `close_notify` and
//! expects the server's. The TLS client is rustls' blocking one (`rustls::StreamOwned`, the
//! `ring` provider, ALPN `http/1.1`, server name `localhost`, no session resumption: every
//! handshake is a full one). It accepts whatever certificate the server presents (it checks the
//! handshake's signature against the certificate's key, not the certificate's chain): the
//! servers measured use a self-signed certificate made for the run, and this program measures
//! them, it does not authenticate them.
#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConnection, DigitallySignedStruct, SignatureScheme, StreamOwned};
use tokio_rustls::rustls;

/// The response every server gives `GET /`.
pub const RESPONSE: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nHello, World!";

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn request(addr: &str) -> Vec<u8> {
    format!("GET / HTTP/1.1\r\nHost: {addr}\r\n\r\n").into_bytes()
}

/// A certificate verifier that accepts any certificate, and checks the handshake's signature
/// with the certificate's key (see the module's comment for why).
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The TLS client configuration: `ring`, ALPN `http/1.1`, no resumption, any certificate.
fn tls_config() -> Arc<rustls::ClientConfig> {
    // The process's default provider: `ring`, the one rustls is built with here (as the servers').
    let builder = rustls::ClientConfig::builder();
    let provider = builder.crypto_provider().clone();
    let mut config = builder
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config.resumption = rustls::client::Resumption::disabled();
    Arc::new(config)
}

type TlsClient = StreamOwned<ClientConnection, TcpStream>;

/// A TLS connection to `addr`, its handshake completed.
fn connect_tls(addr: &str, config: &Arc<rustls::ClientConfig>) -> Result<TlsClient, BoxError> {
    let mut tcp = TcpStream::connect(addr)?;
    tcp.set_nodelay(true)?;
    let name = ServerName::try_from("localhost")?;
    let mut tls = ClientConnection::new(config.clone(), name)?;
    while tls.is_handshaking() {
        tls.complete_io(&mut tcp)?;
    }
    Ok(StreamOwned::new(tls, tcp))
}

/// A client connection, plain or TLS.
trait Client: Read + Write {
    /// Ends the sending side: TCP's, after `close_notify` on TLS.
    fn finish(&mut self) -> std::io::Result<()>;
    /// The TCP socket underneath.
    fn socket(&self) -> &TcpStream;
}

impl Client for TcpStream {
    fn socket(&self) -> &TcpStream {
        self
    }

    fn finish(&mut self) -> std::io::Result<()> {
        self.shutdown(Shutdown::Write)
    }
}

impl Client for TlsClient {
    fn socket(&self) -> &TcpStream {
        self.get_ref()
    }

    fn finish(&mut self) -> std::io::Result<()> {
        self.conn.send_close_notify();
        self.flush()?;
        self.sock.shutdown(Shutdown::Write)
    }
}

/// One connection: `requests` requests, `depth` per write, every response checked.
fn connection(
    addr: &str,
    tls: Option<&Arc<rustls::ClientConfig>>,
    requests: usize,
    depth: usize,
) -> Result<(), BoxError> {
    let mut client: Box<dyn Client> = match tls {
        Some(config) => Box::new(connect_tls(addr, config)?),
        None => {
            let tcp = TcpStream::connect(addr)?;
            tcp.set_nodelay(true)?;
            Box::new(tcp)
        }
    };
    let tcp = &mut client;
    let burst = request(addr).repeat(depth);
    let expected = RESPONSE.repeat(depth);
    let mut responses = vec![0u8; expected.len()];
    for _ in 0..requests / depth {
        tcp.write_all(&burst)?;
        tcp.flush()?;
        tcp.read_exact(&mut responses)?;
        if responses != expected {
            return Err(format!(
                "unexpected response: {:?}",
                String::from_utf8_lossy(&responses)
            )
            .into());
        }
    }
    tcp.finish()?;
    let mut rest = Vec::new();
    tcp.read_to_end(&mut rest)?;
    if !rest.is_empty() {
        return Err(format!("{} bytes after the last response", rest.len()).into());
    }
    Ok(())
}

fn load(
    addr: &str,
    tls: bool,
    connections: usize,
    requests: usize,
    depth: usize,
) -> Result<(), BoxError> {
    if depth == 0 || requests % depth != 0 {
        return Err("REQUESTS must be a multiple of DEPTH".into());
    }
    let config = tls.then(tls_config);
    let config = config.as_ref();
    std::thread::scope(|scope| {
        let threads: Vec<_> = (0..connections)
            .map(|_| scope.spawn(|| connection(addr, config, requests, depth)))
            .collect();
        threads
            .into_iter()
            .try_for_each(|thread| thread.join().map_err(|_| "a client thread panicked")?)
    })
}

fn idle(addr: &str, tls: bool, connections: usize) -> Result<(), BoxError> {
    let request = request(addr);
    let config = tls.then(tls_config);
    let mut clients: Vec<Box<dyn Client>> = Vec::with_capacity(connections);
    for _ in 0..connections {
        let mut client: Box<dyn Client> = match &config {
            Some(config) => Box::new(connect_tls(addr, config)?),
            None => Box::new(TcpStream::connect(addr)?),
        };
        client.write_all(&request)?;
        client.flush()?;
        clients.push(client);
    }
    for client in clients.iter_mut() {
        client
            .socket()
            .set_read_timeout(Some(Duration::from_secs(60)))?;
        let mut response = [0; RESPONSE.len()];
        client.read_exact(&mut response)?;
        if response != RESPONSE {
            return Err("unexpected response".into());
        }
    }
    println!("answered");
    std::io::stdout().flush()?;
    let mut rest = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut rest);
    for client in clients.iter_mut() {
        let _ = client.finish();
    }
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |v: &str| -> usize {
        v.parse().unwrap_or_else(|_| {
            eprintln!("{v}: not a count");
            std::process::exit(2)
        })
    };
    let result = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["idle", addr, connections] => idle(addr, false, number(connections)),
        ["idle-tls", addr, connections] => idle(addr, true, number(connections)),
        [addr, connections, requests, depth] => load(
            addr,
            false,
            number(connections),
            number(requests),
            number(depth),
        ),
        ["--tls", addr, connections, requests, depth] => load(
            addr,
            true,
            number(connections),
            number(requests),
            number(depth),
        ),
        _ => {
            eprintln!("usage: http_count [--tls] ADDR CONNECTIONS REQUESTS DEPTH");
            eprintln!("       http_count idle ADDR CONNECTIONS");
            eprintln!("       http_count idle-tls ADDR CONNECTIONS");
            std::process::exit(2);
        }
    };
    if let Err(e) = result {
        eprintln!("http_count: {e}");
        std::process::exit(1);
    }
}
