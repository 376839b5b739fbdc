//! Memory per idle keep-alive HTTP/1.1 connection of the three HTTP servers: the example's
//! (`examples/http_server.rs`, packetpipe `Framed`), its tokio-util twin
//! (`http_server_tokio_util.rs`) and its hyper twin (`http_server_hyper.rs`); and over TLS, of
//! the example's TLS serving (`packetpipe-tls`: packetpipe's `TlsAcceptor`, records decrypted in
//! pooled blocks) and of the tokio-util twin's (`tokio-rustls`: its `Framed` loop over a
//! tokio-rustls `TlsStream`).
//!
//! ```text
//! cargo build --release -p packetpipe-perf --features tls --example http_idle_memory --example http_count
//! ulimit -n 20000   # CONNECTIONS and a few more, in this process and in the client's
//! target/release/examples/http_idle_memory packetpipe|tokio-util|hyper|packetpipe-tls|tokio-rustls [CONNECTIONS]
//! ```
//!
//! The two TLS servers need the `tls` feature. They share one rustls server configuration: a
//! self-signed certificate for `localhost` made in this process (rcgen: ECDSA P-256), rustls'
//! default provider (`ring`, the one built here), ALPN `http/1.1`, everything else rustls'
//! defaults (two TLS 1.3 session tickets per connection, kept in rustls' in-memory session cache
//! of 256 entries, which this process shares between its connections). Their clients are
//! `http_count idle-tls` (rustls' blocking client, full handshakes, no resumption).
//!
//! The named server runs in this process on a current-thread tokio runtime (its own connection
//! code, included by path). CONNECTIONS clients (default 10,000; `http_count idle`, a child
//! process, so that the two ends do not share a descriptor limit) each send one `GET /`, read its
//! response and stay connected. Once all are answered and have settled, prints per connection:
//! the heap bytes live (a counting global allocator, from just before the server accepts its
//! first client: the sockets' registrations, the connection tasks and what they hold), the
//! pooled blocks and bytes outstanding (`Pool::global().stats()`, after `trim`: free blocks kept
//! for reuse are the pool's, not the connections'), and the growth of this process's resident
//! memory (`VmRSS`, which counts the pooled blocks and the allocator's slack as well).

#[path = "../../tests-integration/tests/kit/counting_alloc.rs"]
mod counting_alloc;
#[path = "../../examples/http_server.rs"]
#[allow(dead_code)] // its `main` and io_uring entry are not this program's
mod http_server;
#[path = "http_server_hyper.rs"]
#[allow(dead_code)]
mod http_server_hyper;
#[path = "http_server_tokio_util.rs"]
#[allow(dead_code)]
mod http_server_tokio_util;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

#[cfg(feature = "tls")]
use tokio_rustls::rustls;

use packetpipe::Pool;

#[global_allocator]
static GLOBAL: counting_alloc::CountingAlloc = counting_alloc::CountingAlloc;

/// Resident bytes of this process.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kib * 1024
}

/// The TLS server configuration both TLS servers use: a self-signed certificate for `localhost`,
/// ALPN `http/1.1`, as the example's `load_tls` makes from PEM files.
#[cfg(feature = "tls")]
fn tls_config() -> std::sync::Arc<rustls::ServerConfig> {
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

    let generated =
        rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("a certificate");
    let key = PrivateKeyDer::from(PrivatePkcs8KeyDer::from(generated.key_pair.serialize_der()));
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(vec![generated.cert.der().clone()], key)
        .expect("the certificate and its key");
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    std::sync::Arc::new(config)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let server = args.first().map(String::as_str).unwrap_or("");
    let tls = matches!(server, "packetpipe-tls" | "tokio-rustls");
    if !tls && !matches!(server, "packetpipe" | "tokio-util" | "hyper") {
        eprintln!(
            "usage: http_idle_memory packetpipe|tokio-util|hyper|packetpipe-tls|tokio-rustls \
             [CONNECTIONS]"
        );
        std::process::exit(2);
    }
    if tls && cfg!(not(feature = "tls")) {
        eprintln!("built without feature tls: {server} needs `--features tls`");
        std::process::exit(2);
    }
    let n: usize = args.get(1).map_or(10_000, |v| v.parse().expect("a count"));
    let client = std::env::current_exe()
        .expect("this program's path")
        .with_file_name("http_count");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async move {
        let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
        socket
            .bind("127.0.0.1:0".parse().expect("an address"))
            .expect("bind");
        let listener = socket.listen(4096).expect("listen");
        let addr = listener.local_addr().expect("the address");
        let hyper = http_server_hyper::builder();
        #[cfg(feature = "tls")]
        let (packetpipe_tls, tokio_rustls) = {
            let config = tls_config();
            (
                packetpipe::io::tls::TlsAcceptor::from(config.clone()),
                tokio_rustls::TlsAcceptor::from(config),
            )
        };
        let (heap0, rss0) = (counting_alloc::live_bytes(), rss());
        let kind = server.to_string();
        let accept = tokio::spawn(async move {
            loop {
                let (socket, _) = listener.accept().await.expect("accept");
                match kind.as_str() {
                    "packetpipe" => drop(tokio::spawn(http_server::serve_tcp(
                        socket,
                        http_server::Limits::default(),
                    ))),
                    "tokio-util" => drop(tokio::spawn(async move {
                        let _ = http_server_tokio_util::serve(socket).await;
                    })),
                    #[cfg(feature = "tls")]
                    "packetpipe-tls" => drop(tokio::spawn(http_server::serve_tls(
                        packetpipe_tls.clone(),
                        socket,
                        http_server::Limits::default(),
                    ))),
                    #[cfg(feature = "tls")]
                    "tokio-rustls" => {
                        let acceptor = tokio_rustls.clone();
                        drop(tokio::spawn(async move {
                            let _ = http_server_tokio_util::serve_tls(acceptor, socket).await;
                        }))
                    }
                    _ => drop(tokio::spawn(http_server_hyper::serve(&hyper, socket))),
                }
            }
        });
        let mut child = Command::new(&client)
            .args([
                if tls { "idle-tls" } else { "idle" },
                &addr.to_string(),
                &n.to_string(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e} (build the http_count example)", client.display()));
        let out = BufReader::new(child.stdout.take().expect("the child's output"));
        let (answered_tx, answered_rx) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let answered = out.lines().any(|line| line.is_ok_and(|l| l == "answered"));
            let _ = answered_tx.send(answered);
        });
        let answered = tokio::time::timeout(Duration::from_secs(300), answered_rx)
            .await
            .expect("the clients did not finish within five minutes");
        assert!(
            answered.unwrap_or(false),
            "the clients did not all get their response"
        );
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Pool::global().trim();
        let stats = Pool::global().stats();
        let heap = (counting_alloc::live_bytes() - heap0) as f64 / n as f64;
        let resident = rss().saturating_sub(rss0) as f64 / n as f64;
        println!(
            "{server}: {n} idle connections: heap {heap:.0} B each, pooled blocks outstanding {} \
             ({} B), RSS growth {resident:.0} B each",
            stats.outstanding, stats.outstanding_bytes
        );
        drop(child.stdin.take());
        let _ = child.wait();
        accept.abort();
    });
}
