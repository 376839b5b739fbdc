//! The HTTP and RESP servers of `examples/` over TLS (`--tls`, the library's `TlsAcceptor`) with
//! clients from outside: `curl` (TLS 1.2 and 1.3, keep-alive, a 1 MiB body echoed), `openssl
//! s_client` (the handshake, the certificate verified, ALPN), `redis-cli --tls`, and rustls
//! clients driven by hand (16 pipelined requests in one record, every byte its own TCP segment,
//! every split point of a record, TLS 1.3 key updates, corrupted, truncated, oversized and
//! unencrypted records, alerts, a stalled handshake); and the library's own `TlsConnector`
//! against its own TLS server, each end closing cleanly.
//!
//! The servers run in-process as the examples' `main` runs them (a current-thread runtime on a
//! thread of its own, a free loopback port, a fresh self-signed certificate for `localhost` and
//! `127.0.0.1` written as PEM files, loaded as `--tls CERT KEY` loads them). A connection task
//! that panics fails the test that owns the server.
//!
//! Needs `curl`, `openssl` and `redis-cli` (Debian's curl, openssl and redis-tools; `.ci/run`
//! installs them): without the binaries those tests fail and say so. Every child process and
//! socket read has a deadline.
#![cfg(feature = "tls")]

#[path = "../../examples/http_server.rs"]
#[allow(dead_code)] // its `main`
mod http_server;
#[path = "../../examples/resp/mod.rs"]
mod resp;

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use http_server::Limits;
use packetpipe::frame::{FrameWriter, Framed, Frames, Lines};
use packetpipe::io::tls::rustls::pki_types::{CertificateDer, ServerName};
use packetpipe::io::tls::{rustls, TlsAcceptor, TlsConnector};

/// How long a client waits for any one read before the test fails.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

const HELLO_RESPONSE: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nHello, World!";

const TLS12: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS12];
const TLS13: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13];

fn show(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

// ---------------------------------------------------------------------------------------------
// Certificates

/// A self-signed certificate for `localhost` and `127.0.0.1`, as PEM files in a directory of its
/// own (removed on drop).
struct Pki {
    dir: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    der: CertificateDer<'static>,
}

impl Pki {
    fn new() -> Pki {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "packetpipe-tls-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let generated =
            rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()])
                .unwrap();
        let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        std::fs::write(&cert, generated.cert.pem()).unwrap();
        std::fs::write(&key, generated.key_pair.serialize_pem()).unwrap();
        Pki {
            dir,
            cert,
            key,
            der: generated.cert.der().clone(),
        }
    }

    /// The HTTP example's acceptor, from the PEM files (`--tls CERT KEY`).
    fn http_acceptor(&self) -> TlsAcceptor {
        http_server::load_tls(&self.cert, &self.key).expect("the example loads the PEM files")
    }

    /// The RESP example's acceptor, from the PEM files (`--tls CERT KEY`).
    fn resp_acceptor(&self) -> TlsAcceptor {
        resp::server::load_tls(&resp::TlsFiles {
            cert: self.cert.to_str().unwrap().into(),
            key: self.key.to_str().unwrap().into(),
        })
        .expect("the example loads the PEM files")
    }

    /// A rustls client configuration trusting the certificate, for `versions`.
    fn client_config(
        &self,
        versions: &[&'static rustls::SupportedProtocolVersion],
    ) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.der.clone()).unwrap();
        let config = rustls::ClientConfig::builder_with_protocol_versions(versions)
            .with_root_certificates(roots)
            .with_no_client_auth();
        Arc::new(config)
    }

    fn cert_path(&self) -> &str {
        self.cert.to_str().unwrap()
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

// ---------------------------------------------------------------------------------------------
// The HTTP server over TLS

/// The HTTP example's TLS server on its own thread (`serve_tls` per connection, as `main --tls`
/// runs it); dropping it stops the server and checks that no connection task panicked.
struct Server {
    addr: SocketAddr,
    panics: Arc<AtomicUsize>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Server {
    fn start(acceptor: TlsAcceptor) -> Server {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let addr = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        let panics = Arc::new(AtomicUsize::new(0));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let counter = panics.clone();
        let thread = thread::Builder::new()
            .name("https server".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                    tokio::select! {
                        _ = accept_loop(listener, acceptor, counter) => {}
                        _ = stopped => {}
                    }
                });
            })
            .unwrap();
        Server {
            addr,
            panics,
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let joined = self.thread.take().map(thread::JoinHandle::join);
        if !thread::panicking() {
            assert!(
                joined.map_or(true, |result| result.is_ok()),
                "the server thread panicked"
            );
            assert_eq!(
                self.panics.load(Ordering::Relaxed),
                0,
                "connection tasks panicked"
            );
        }
    }
}

/// Accept connections and serve each over TLS in a task of its own, counting the tasks that
/// panic.
async fn accept_loop(
    listener: tokio::net::TcpListener,
    acceptor: TlsAcceptor,
    panics: Arc<AtomicUsize>,
) {
    loop {
        let Ok((socket, _)) = listener.accept().await else {
            continue;
        };
        let served = http_server::serve_tls(acceptor.clone(), socket, Limits::default());
        let connection = tokio::spawn(served);
        let panics = panics.clone();
        tokio::spawn(async move {
            if connection.await.is_err_and(|e| e.is_panic()) {
                panics.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
}

fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").into_bytes()
}

fn post(path: &str, body: &[u8]) -> Vec<u8> {
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    request
}

fn echoed(body: &[u8]) -> Vec<u8> {
    let mut response = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    response.extend_from_slice(body);
    response
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// A rustls client driven by hand: what it sends is in the test's hands, byte by byte

struct Client {
    conn: rustls::ClientConnection,
    tcp: TcpStream,
    /// Every byte sent in a TCP segment of its own, with a pause every few bytes, so the
    /// server reads records in pieces.
    trickle: bool,
    /// The server's `close_notify` was received.
    close_notify: bool,
}

impl Client {
    /// A TCP connection to `addr` and a TLS client not started yet.
    fn connect(addr: SocketAddr, config: Arc<rustls::ClientConfig>) -> Client {
        let tcp = TcpStream::connect(addr).expect("connect to the server");
        tcp.set_nodelay(true).unwrap();
        tcp.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
        let conn = rustls::ClientConnection::new(config, "localhost".try_into().unwrap()).unwrap();
        Client {
            conn,
            tcp,
            trickle: false,
            close_notify: false,
        }
    }

    /// [`connect`](Client::connect) and the handshake.
    fn handshaken(addr: SocketAddr, config: Arc<rustls::ClientConfig>) -> Client {
        let mut client = Client::connect(addr, config);
        client.handshake();
        client
    }

    /// The TLS bytes rustls has to send.
    fn take_tls(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        while self.conn.wants_write() {
            self.conn.write_tls(&mut out).unwrap();
        }
        out
    }

    fn send_raw(&mut self, bytes: &[u8]) {
        if !self.trickle {
            return self.tcp.write_all(bytes).expect("send to the server");
        }
        for (i, byte) in bytes.iter().enumerate() {
            self.tcp
                .write_all(std::slice::from_ref(byte))
                .expect("send to the server");
            if i % 7 == 6 {
                thread::sleep(Duration::from_micros(50));
            }
        }
    }

    fn flush_tls(&mut self) {
        let out = self.take_tls();
        if !out.is_empty() {
            self.send_raw(&out);
        }
    }

    /// One read from the socket, its records processed and their plaintext appended to
    /// `plain`: the bytes read (0 at the server's end of stream).
    fn pump_in(&mut self, plain: &mut Vec<u8>) -> usize {
        let mut buf = vec![0; 64 << 10];
        let n = self
            .tcp
            .read(&mut buf)
            .unwrap_or_else(|e| panic!("reading from the server (deadline {READ_TIMEOUT:?}): {e}"));
        let mut rest = &buf[..n];
        while !rest.is_empty() {
            self.conn.read_tls(&mut rest).unwrap();
            self.conn
                .process_new_packets()
                .expect("the server's records are valid");
            self.drain_plain(plain);
        }
        n
    }

    fn drain_plain(&mut self, plain: &mut Vec<u8>) {
        let mut chunk = [0; 16 << 10];
        loop {
            match self.conn.reader().read(&mut chunk) {
                Ok(0) => {
                    self.close_notify = true;
                    return;
                }
                Ok(n) => plain.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) => panic!("reading the plaintext: {e}"),
            }
        }
    }

    fn handshake(&mut self) {
        while self.conn.is_handshaking() {
            self.flush_tls();
            if self.conn.is_handshaking() {
                let n = self.pump_in(&mut Vec::new());
                assert!(
                    n > 0,
                    "the server closed the connection during the handshake"
                );
            }
        }
        self.flush_tls();
    }

    /// The records of `plaintext` (one per write: rustls seals each write at once).
    fn seal(&mut self, plaintext: &[u8]) -> Vec<u8> {
        self.conn.writer().write_all(plaintext).unwrap();
        self.take_tls()
    }

    /// Exactly `n` bytes of plaintext from the server.
    fn read_plain(&mut self, n: usize) -> Vec<u8> {
        let mut plain = Vec::new();
        self.drain_plain(&mut plain);
        while plain.len() < n {
            let read = self.pump_in(&mut plain);
            assert!(
                read > 0,
                "the server closed after {} of {n} bytes",
                plain.len()
            );
        }
        assert_eq!(plain.len(), n, "more than the expected response");
        plain
    }

    /// Send `request`, read a response of `expected`'s length and check it.
    fn exchange(&mut self, request: &[u8], expected: &[u8]) {
        let records = self.seal(request);
        self.send_raw(&records);
        let got = self.read_plain(expected.len());
        assert!(
            got == expected,
            "response: {:?}",
            show(&got[..got.len().min(200)])
        );
    }

    /// Wait for the server to end the connection (end of stream or a reset) within the
    /// deadline, and process what it sent before: no plaintext may come. Says how it ended.
    fn expect_end(&mut self) -> String {
        let deadline = Instant::now() + READ_TIMEOUT;
        let mut received = Vec::new();
        let mut buf = [0; 16 << 10];
        let end = loop {
            assert!(
                Instant::now() < deadline,
                "the server did not end the connection within {READ_TIMEOUT:?}"
            );
            match self.tcp.read(&mut buf) {
                Ok(0) => break "end of stream".to_string(),
                Ok(n) => received.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    panic!("the server did not end the connection within {READ_TIMEOUT:?}")
                }
                Err(e) => break format!("{e}"),
            }
        };
        let mut rest = &received[..];
        let mut plain = Vec::new();
        let mut tls = String::from("no alert");
        while !rest.is_empty() {
            if self.conn.read_tls(&mut rest).is_err() {
                break;
            }
            if let Err(e) = self.conn.process_new_packets() {
                tls = format!("{e}");
                break;
            }
            self.drain_plain(&mut plain);
        }
        assert!(
            plain.is_empty(),
            "the server answered instead of ending: {:?}",
            show(&plain)
        );
        let close = if self.close_notify {
            ", close_notify"
        } else {
            ""
        };
        format!("{end} ({} bytes before it: {tls}{close})", received.len())
    }
}

/// A fresh client gets `GET /` answered: the server goes on serving.
fn served(server: &Server, pki: &Pki, versions: &[&'static rustls::SupportedProtocolVersion]) {
    let mut client = Client::handshaken(server.addr, pki.client_config(versions));
    client.exchange(&get("/"), HELLO_RESPONSE);
}

/// A raw TCP connection to `addr` with the read deadline.
fn raw(addr: SocketAddr) -> TcpStream {
    let tcp = TcpStream::connect(addr).expect("connect to the server");
    tcp.set_nodelay(true).unwrap();
    tcp.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
    tcp
}

/// Read until the server ends the connection; what it sent before.
fn read_until_end(tcp: &mut TcpStream, limit: Duration) -> Vec<u8> {
    tcp.set_read_timeout(Some(limit)).unwrap();
    let started = Instant::now();
    let mut received = Vec::new();
    let mut buf = [0; 4096];
    loop {
        match tcp.read(&mut buf) {
            Ok(0) => return received,
            Ok(n) => received.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                panic!("the server did not end the connection within {limit:?}")
            }
            Err(_) => return received, // a reset
        }
        assert!(
            started.elapsed() < limit,
            "the server did not end the connection within {limit:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Child processes

fn require(binary: &str, package: &str, version_arg: &str) {
    let found = Command::new(binary)
        .arg(version_arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    assert!(
        found,
        "`{binary}` is missing: install Debian's {package} (apt-get install -y {package}) to run \
         the TLS client tests"
    );
}

/// Run `command` with `input` on its stdin to completion within `limit`, killing it past that.
fn run_bounded(mut command: Command, input: &[u8], limit: Duration) -> Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn a client");
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let id = child.id();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let waiter = thread::spawn(move || {
        let output = child.wait_with_output();
        let _ = done_tx.send(());
        output
    });
    if done_rx.recv_timeout(limit).is_err() {
        // Past the deadline: kill it (by its id; the waiter thread owns the handle).
        let _ = Command::new("kill").arg("-9").arg(id.to_string()).status();
        let output = waiter.join().unwrap().unwrap();
        panic!(
            "{command:?} did not finish within {limit:?}; output so far:\n{}\n{}",
            show(&output.stdout),
            show(&output.stderr)
        );
    }
    let _ = writer.join();
    waiter.join().unwrap().expect("the client ran")
}

fn curl(args: &[&str]) -> Output {
    let mut command = Command::new("curl");
    command.args(["-sS", "--max-time", "20"]).args(args);
    let output = run_bounded(command, b"", Duration::from_secs(30));
    assert!(
        output.status.success(),
        "curl {args:?}: {}\n{}",
        show(&output.stdout),
        show(&output.stderr)
    );
    output
}

// ---------------------------------------------------------------------------------------------
// curl

#[test]
fn curl_over_tls() {
    require("curl", "curl", "--version");
    let pki = Pki::new();
    let server = Server::start(pki.http_acceptor());
    let port = server.addr.port();
    let resolve = format!("localhost:{port}:127.0.0.1");
    let url = format!("https://localhost:{port}/");
    let common = [
        "--http1.1",
        "--cacert",
        pki.cert_path(),
        "--resolve",
        &resolve,
    ];
    for (version, args, name) in [
        ("1.2", &["--tlsv1.2", "--tls-max", "1.2"][..], "TLSv1.2"),
        ("1.3", &["--tlsv1.3"][..], "TLSv1.3"),
    ] {
        // The certificate verified for the name, ALPN agreed, the protocol version asked for.
        let output = curl(&[&common[..], args, &["-v", &url]].concat());
        assert_eq!(show(&output.stdout), "Hello, World!", "TLS {version}");
        let log = show(&output.stderr);
        assert!(
            log.contains(&format!("SSL connection using {name}")),
            "TLS {version}: {log}"
        );
        assert!(log.contains("accepted http/1.1"), "TLS {version}: {log}");

        // Keep-alive: two URLs, one connection.
        let output = curl(&[&common[..], args, &["-w", "|%{num_connects}\n", &url, &url]].concat());
        assert_eq!(
            show(&output.stdout),
            "Hello, World!|1\nHello, World!|0\n",
            "TLS {version}: the second request reuses the connection"
        );
    }

    // A 1 MiB body echoed back byte for byte (many records each way).
    let dir = &pki.dir;
    let body = pattern(1 << 20, 7);
    let (sent, received) = (dir.join("body"), dir.join("echoed"));
    std::fs::write(&sent, &body).unwrap();
    let upload = format!("@{}", sent.display());
    for args in [&["--tls-max", "1.2"][..], &["--tlsv1.3"][..]] {
        let _ = std::fs::remove_file(&received);
        curl(
            &[
                &common[..],
                args,
                &[
                    "--data-binary",
                    &upload,
                    "-H",
                    "Content-Type: application/octet-stream",
                    "-o",
                    received.to_str().unwrap(),
                    &format!("{url}echo"),
                ],
            ]
            .concat(),
        );
        assert!(
            std::fs::read(&received).unwrap() == body,
            "{args:?}: the echo differs"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// openssl s_client

#[test]
fn openssl_s_client_handshakes() {
    require("openssl", "openssl", "version");
    let pki = Pki::new();
    let server = Server::start(pki.http_acceptor());
    let connect = format!("127.0.0.1:{}", server.addr.port());
    let request = b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    for (flag, name) in [("-tls1_2", "TLSv1.2"), ("-tls1_3", "TLSv1.3")] {
        let mut command = Command::new("openssl");
        command.args([
            "s_client",
            "-connect",
            &connect,
            "-CAfile",
            pki.cert_path(),
            "-servername",
            "localhost",
            "-verify_hostname",
            "localhost",
            "-verify_return_error",
            "-alpn",
            "http/1.1",
            // Wait for the server to close (after the response) rather than leave at the
            // end of the request.
            "-ign_eof",
            flag,
        ]);
        let output = run_bounded(command, request, Duration::from_secs(20));
        let (out, err) = (show(&output.stdout), show(&output.stderr));
        assert!(output.status.success(), "{flag}: {out}\n{err}");
        assert!(out.contains("Verify return code: 0 (ok)"), "{flag}: {out}");
        assert!(
            out.contains(&format!("Protocol  : {name}")),
            "{flag}: {out}"
        );
        assert!(out.contains("ALPN protocol: http/1.1"), "{flag}: {out}");
        assert!(
            out.contains("Connection: close\r\n\r\nHello, World!"),
            "{flag}: {out}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// redis-cli

#[test]
fn redis_cli_over_tls() {
    require("redis-cli", "redis-tools", "--version");
    let help = Command::new("redis-cli").arg("--help").output().unwrap();
    if !show(&help.stdout).contains("--tls") && !show(&help.stderr).contains("--tls") {
        eprintln!("this redis-cli is built without TLS (no --tls in --help): not tested");
        return;
    }
    let pki = Pki::new();
    let server =
        resp::server::ServerHandle::start_tls(resp::Config::default(), pki.resp_acceptor());
    let port = server.addr.port().to_string();
    let cli = |args: &[&str]| {
        let mut command = Command::new("redis-cli");
        command
            .args(["--tls", "--cacert", pki.cert_path(), "--sni", "localhost"])
            .args(["-h", "127.0.0.1", "-p", &port])
            .args(args);
        let output = run_bounded(command, b"", Duration::from_secs(20));
        assert!(
            output.status.success(),
            "redis-cli {args:?}: {}",
            show(&output.stderr)
        );
        show(&output.stdout)
    };
    assert_eq!(cli(&["SET", "k", "v"]), "OK\n");
    assert_eq!(cli(&["GET", "k"]), "v\n");
    // A hundred commands on one connection, then a value spanning several records.
    assert_eq!(cli(&["-r", "100", "INCR", "counter"]).lines().count(), 100);
    assert_eq!(cli(&["GET", "counter"]), "100\n");
    let big = "x".repeat(100_000);
    assert_eq!(cli(&["SET", "big", &big]), "OK\n");
    assert_eq!(cli(&["GET", "big"]), format!("{big}\n"));
}

// ---------------------------------------------------------------------------------------------
// rustls clients: pipelining, records in pieces, key updates

#[test]
fn pipelined_requests_in_one_record() {
    let pki = Pki::new();
    let server = Server::start(pki.http_acceptor());
    for versions in [TLS12, TLS13] {
        let mut client = Client::handshaken(server.addr, pki.client_config(versions));
        let requests = get("/").repeat(16);
        let records = client.seal(&requests);
        assert!(records.len() < requests.len() + 64, "one record");
        client.send_raw(&records);
        let responses = client.read_plain(16 * HELLO_RESPONSE.len());
        assert!(
            responses == HELLO_RESPONSE.repeat(16),
            "{:?}",
            show(&responses)
        );
    }
}

/// Every byte of the session (the handshake too) a TCP segment of its own, then every split
/// point of two records: the server reassembles whatever the reads give it.
fn records_in_pieces(versions: &[&'static rustls::SupportedProtocolVersion]) {
    let pki = Pki::new();
    let server = Server::start(pki.http_acceptor());
    let mut client = Client::connect(server.addr, pki.client_config(versions));
    client.trickle = true;
    client.handshake();
    // Three records of request body, byte by byte.
    let body = pattern(40_000, 3);
    client.exchange(&post("/echo", &body), &echoed(&body));
    client.exchange(&get("/"), HELLO_RESPONSE);

    client.trickle = false;
    let request = get("/");
    let (head, tail) = request.split_at(request.len() / 2);
    let mut at = 1;
    loop {
        // Sealed afresh each time: every record has its own sequence number.
        let mut records = client.seal(head);
        records.extend(client.seal(tail));
        if at == records.len() {
            // Past the last split point: the two records whole.
            client.send_raw(&records);
            assert_eq!(client.read_plain(HELLO_RESPONSE.len()), HELLO_RESPONSE);
            break;
        }
        client.send_raw(&records[..at]);
        thread::sleep(Duration::from_millis(1));
        client.send_raw(&records[at..]);
        assert_eq!(client.read_plain(HELLO_RESPONSE.len()), HELLO_RESPONSE);
        at += 1;
    }
}

#[test]
fn records_in_pieces_tls12() {
    records_in_pieces(TLS12);
}

#[test]
fn records_in_pieces_tls13() {
    records_in_pieces(TLS13);
}

/// TLS 1.3 key updates asked by the client mid-stream: the server takes the client's new keys
/// and (asked to) updates its own; every echo after each update comes back right.
#[test]
fn key_updates() {
    let pki = Pki::new();
    let server = Server::start(pki.http_acceptor());
    let mut client = Client::handshaken(server.addr, pki.client_config(TLS13));
    for round in 0..8u8 {
        let body = pattern(5000 + usize::from(round) * 3000, round);
        client.exchange(&post("/echo", &body), &echoed(&body));
        client.conn.refresh_traffic_keys().unwrap();
        // The key update alone, then a request under the new keys.
        client.flush_tls();
        client.exchange(&get("/"), HELLO_RESPONSE);
        // The key update in the same write as the next request.
        client.conn.refresh_traffic_keys().unwrap();
        client.exchange(&post("/echo", &body), &echoed(&body));
    }
}

// ---------------------------------------------------------------------------------------------
// Malformed input: each ends its connection, and the server goes on serving

#[test]
fn corrupted_record_ends_the_connection() {
    let pki = Pki::new();
    let server = Server::start(pki.http_acceptor());
    for versions in [TLS12, TLS13] {
        for flip in [0, 1] {
            let mut client = Client::handshaken(server.addr, pki.client_config(versions));
            client.exchange(&get("/"), HELLO_RESPONSE);
            let mut records = client.seal(&get("/"));
            // A byte of the ciphertext, then one of the tag (the record's last bytes).
            let at = if flip == 0 { 10 } else { records.len() - 1 };
            records[at] ^= 0x40;
            client.send_raw(&records);
            let end = client.expect_end();
            eprintln!("{versions:?}, byte {at} flipped: {end}");
            served(&server, &pki, versions);
        }
    }
}

#[test]
fn truncated_record_then_close_ends_the_connection() {
    let pki = Pki::new();
    let server = Server::start(pki.http_acceptor());
    for versions in [TLS12, TLS13] {
        let mut client = Client::handshaken(server.addr, pki.client_config(versions));
        let records = client.seal(&get("/"));
        client.send_raw(&records[..records.len() / 2]);
        client.tcp.shutdown(Shutdown::Write).unwrap();
        let end = client.expect_end();
        eprintln!("{versions:?}, half a record then FIN: {end}");
        served(&server, &pki, versions);
    }
}

#[test]
fn oversized_record_header_ends_the_connection() {
    let pki = Pki::new();
    let server = Server::start(pki.http_acceptor());
    for versions in [TLS12, TLS13] {
        let mut client = Client::handshaken(server.addr, pki.client_config(versions));
        client.exchange(&get("/"), HELLO_RESPONSE);
        // Application data of 65,535 bytes: over any TLS record's limit (2^14 + 2,048). The
        // server must refuse it from its header, not wait for the 64 KiB.
        let mut record = vec![0x17, 0x03, 0x03, 0xff, 0xff];
        record.extend_from_slice(&[0x5a; 64]);
        client.send_raw(&record);
        let end = client.expect_end();
        eprintln!("{versions:?}, a 0xFFFF record header: {end}");
        served(&server, &pki, versions);
    }
}

#[test]
fn plaintext_instead_of_a_client_hello_ends_the_connection() {
    let pki = Pki::new();
    let server = Server::start(pki.http_acceptor());
    let mut tcp = raw(server.addr);
    tcp.write_all(&get("/")).unwrap();
    let sent = read_until_end(&mut tcp, READ_TIMEOUT);
    assert!(
        !sent.starts_with(b"HTTP"),
        "no plaintext answer: {:?}",
        show(&sent)
    );
    served(&server, &pki, TLS13);
}

#[test]
fn alerts_end_the_connection() {
    let pki = Pki::new();
    let server = Server::start(pki.http_acceptor());
    // A fatal alert (handshake_failure), unencrypted, before any handshake.
    let mut tcp = raw(server.addr);
    tcp.write_all(&[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x28])
        .unwrap();
    read_until_end(&mut tcp, READ_TIMEOUT);
    served(&server, &pki, TLS13);

    // A fatal alert mid-handshake: the client's hello, then the alert.
    let mut client = Client::connect(server.addr, pki.client_config(TLS13));
    client.flush_tls();
    client.send_raw(&[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x28]);
    read_until_end(&mut client.tcp, READ_TIMEOUT);
    served(&server, &pki, TLS13);

    // close_notify after the handshake: the clean end; the server answers with its own and
    // closes.
    for versions in [TLS12, TLS13] {
        let mut client = Client::handshaken(server.addr, pki.client_config(versions));
        client.exchange(&get("/"), HELLO_RESPONSE);
        client.conn.send_close_notify();
        client.flush_tls();
        let mut plain = Vec::new();
        while client.pump_in(&mut plain) > 0 {}
        assert!(plain.is_empty(), "{:?}", show(&plain));
        assert!(
            client.close_notify,
            "{versions:?}: the server's close_notify"
        );
        served(&server, &pki, versions);
    }
}

/// A client that sends the first bytes of a hello and stalls holds no one up, and is dropped
/// at the example's handshake deadline.
#[test]
fn stalled_handshake_is_dropped() {
    let pki = Pki::new();
    let server = Server::start(pki.http_acceptor());
    let started = Instant::now();
    let mut stalled = raw(server.addr);
    stalled.write_all(&[0x16, 0x03, 0x01]).unwrap();
    for versions in [TLS12, TLS13] {
        served(&server, &pki, versions);
    }
    let limit = http_server::HANDSHAKE_TIMEOUT + Duration::from_secs(5);
    read_until_end(&mut stalled, limit);
    let waited = started.elapsed();
    assert!(
        waited >= http_server::HANDSHAKE_TIMEOUT - Duration::from_millis(500),
        "closed after {waited:?}: before the handshake deadline"
    );
}

// ---------------------------------------------------------------------------------------------
// The library's own client against its own server

const LINES: usize = 1000;

fn line(i: usize) -> String {
    format!("line {i} {}", "y".repeat(i % 97))
}

/// The library's TLS server: every line echoed, then (at the client's `close_notify`) its own
/// close. Gives the lines echoed.
async fn line_server(listener: tokio::net::TcpListener, acceptor: TlsAcceptor) -> usize {
    let (tcp, _) = listener.accept().await.unwrap();
    let tls = acceptor.accept(tcp).await.unwrap();
    let (mut out, mut lines) = Framed::new(tls, Lines::new()).split();
    let mut n = 0;
    while let Some(line) = lines.next().await {
        out.send(line.expect("a clean stream of lines"))
            .await
            .unwrap();
        n += 1;
    }
    out.close().await.expect("a clean close");
    n
}

async fn own_client_and_server(pki: &Pki, versions: &[&'static rustls::SupportedProtocolVersion]) {
    let acceptor = pki.http_acceptor();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(line_server(listener, acceptor));
    let connector = TlsConnector::from(pki.client_config(versions));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap().to_owned();
    let tls = connector.connect(name, tcp).await.unwrap();
    assert_eq!(
        tls.negotiated().alpn_protocol.as_deref(),
        None,
        "the client offered none"
    );
    let version = tls.negotiated().protocol_version;
    let (mut out, mut lines) = Framed::new(tls, Lines::new()).split();
    for i in 0..LINES {
        out.feed(line(i)).unwrap();
    }
    out.flush().await.unwrap();
    for i in 0..LINES {
        let echoed = lines.next().await.expect("an echo").unwrap();
        assert_eq!(&*echoed, line(i), "{version:?}");
    }
    out.close().await.expect("the client's clean close");
    assert!(
        lines.next().await.is_none(),
        "{version:?}: the server's close_notify ends the stream cleanly"
    );
    assert_eq!(server.await.unwrap(), LINES);
}

#[test]
fn own_client_against_own_server() {
    let pki = Pki::new();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        for versions in [TLS12, TLS13] {
            tokio::time::timeout(
                Duration::from_secs(20),
                own_client_and_server(&pki, versions),
            )
            .await
            .expect("done within 20 s");
        }
    });
}

/// The same over `io::tokio::connection` at both ends, where each end's `ConnectionEnd` is
/// visible: both directions ended cleanly, the peer's close seen by each.
#[test]
fn own_client_against_own_server_connection_ends() {
    let pki = Pki::new();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        for versions in [TLS12, TLS13] {
            let acceptor = pki.http_acceptor();
            let connector = TlsConnector::from(pki.client_config(versions));
            let run = async {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                let addr = listener.local_addr().unwrap();
                let server = tokio::spawn(async move {
                    let (tcp, _) = listener.accept().await.unwrap();
                    let tls = acceptor.accept(tcp).await.unwrap();
                    let (app, connection) = packetpipe::io::tokio::connection(tls);
                    let connection = tokio::spawn(connection);
                    let mut lines = Frames::new(app.reader, Lines::new());
                    let mut out = FrameWriter::new(app.writer, Lines::new());
                    let mut n = 0;
                    while let Some(line) = lines.next().await {
                        out.send(line.unwrap()).await.unwrap();
                        n += 1;
                    }
                    out.close().await.unwrap();
                    drop(lines);
                    (n, connection.await.unwrap())
                });
                let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
                let name = ServerName::try_from("localhost").unwrap().to_owned();
                let tls = connector.connect(name, tcp).await.unwrap();
                let (app, connection) = packetpipe::io::tokio::connection(tls);
                let connection = tokio::spawn(connection);
                let mut lines = Frames::new(app.reader, Lines::new());
                let mut out = FrameWriter::new(app.writer, Lines::new());
                let mut sent = 0;
                for i in 0..LINES {
                    let text = line(i);
                    sent += text.len() + 1;
                    out.feed(text).unwrap();
                }
                out.flush().await.unwrap();
                for i in 0..LINES {
                    assert_eq!(&*lines.next().await.unwrap().unwrap(), line(i));
                }
                out.close().await.unwrap();
                assert!(lines.next().await.is_none(), "a clean end of the echoes");
                drop(lines);
                let client_end = connection.await.unwrap().expect("the client's clean end");
                let (n, server_end) = server.await.unwrap();
                let server_end = server_end.expect("the server's clean end");
                assert_eq!(n, LINES);
                assert!(client_end.peer_closed, "{client_end:?}");
                assert!(server_end.peer_closed, "{server_end:?}");
                eprintln!("{versions:?}: {sent} bytes of lines each way; client {client_end:?}, server {server_end:?}");
            };
            tokio::time::timeout(Duration::from_secs(20), run)
                .await
                .expect("done within 20 s");
        }
    });
}

/// A record that fails authentication must end the connection with a fatal `bad_record_mac`
/// alert (RFC 8446 5.2, RFC 5246 7.2.2), and an oversized one with `record_overflow`: a
/// `close_notify` would tell the peer that the stream ended cleanly.
#[test]
fn bad_records_get_a_fatal_alert() {
    let pki = Pki::new();
    let server = Server::start(pki.http_acceptor());
    for versions in [TLS12, TLS13] {
        let mut client = Client::handshaken(server.addr, pki.client_config(versions));
        client.exchange(&get("/"), HELLO_RESPONSE);
        let mut records = client.seal(&get("/"));
        let last = records.len() - 1;
        records[last] ^= 0x40;
        client.send_raw(&records);
        let end = client.expect_end();
        assert!(!client.close_notify, "{versions:?}, a bad tag: {end}");
        assert!(
            end.contains("BadRecordMac"),
            "{versions:?}, a bad tag: {end}"
        );

        let mut client = Client::handshaken(server.addr, pki.client_config(versions));
        client.send_raw(&[0x17, 0x03, 0x03, 0xff, 0xff]);
        let end = client.expect_end();
        assert!(!client.close_notify, "{versions:?}, a 0xFFFF header: {end}");
        assert!(
            end.contains("RecordOverflow"),
            "{versions:?}, a 0xFFFF header: {end}"
        );
    }
}
