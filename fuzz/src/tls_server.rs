//! The TLS server side on arbitrary input, over a Unix socket pair (so the connection takes the
//! in-place path a `TcpStream` takes): the first byte picks what the input is.
//!
//! - `0`: the client's bytes of the handshake (a ClientHello to mangle): the handshake fails with
//!   an error or completes, and a completed one serves a connection that ends.
//! - `1`: after a real handshake with the library's client, raw bytes in place of records: the
//!   server's connection ends with an error (or the bytes it opened), never a panic or a hang.
//! - `2`: after a real handshake, the rest is plaintext the client sends in records whose sizes
//!   the input's bytes pick: the server reads exactly that plaintext, then the clean end.
//!
//! Shared by the fuzz target and the replay test (`tests-integration/tests/fuzz_replay.rs`).

use std::sync::{Arc, OnceLock};

use packetpipe::io::tls::rustls::pki_types::{PrivatePkcs8KeyDer, ServerName};
use packetpipe::io::tls::{rustls, TlsAcceptor, TlsConnector};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

fn ends() -> &'static (TlsAcceptor, TlsConnector) {
    static ENDS: OnceLock<(TlsAcceptor, TlsConnector)> = OnceLock::new();
    ENDS.get_or_init(|| {
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let key = PrivatePkcs8KeyDer::from(cert.key_pair.serialize_der());
        let der = cert.cert.der().clone();
        let server = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(vec![der.clone()], key.into())
            .unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(der).unwrap();
        let client = rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        (
            TlsAcceptor::from(Arc::new(server)),
            TlsConnector::from(Arc::new(client)),
        )
    })
}

/// Everything the server's connection reads, and whether it ended cleanly.
async fn serve(tls: packetpipe::io::tls::TlsStream<UnixStream>) -> (Vec<u8>, bool) {
    let (app, connection) = packetpipe::io::tokio::connection(tls);
    let mut reader = app.reader;
    let mut writer = app.writer;
    let read = async {
        let mut plain = Vec::new();
        let result = reader.read_to_end(&mut plain).await;
        drop(writer.shutdown().await);
        (plain, result.is_ok())
    };
    let ((plain, clean), end) = tokio::join!(read, connection);
    assert_eq!(
        clean,
        end.is_ok(),
        "the reader and the connection disagree: {end:?}"
    );
    (plain, clean)
}

pub fn run(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (server, mut client) = UnixStream::pair().unwrap();
        let (acceptor, connector) = ends();
        match mode % 3 {
            0 => {
                let send = async {
                    drop(client.write_all(rest).await);
                    drop(client.shutdown().await);
                    let mut sink = Vec::new();
                    drop(client.read_to_end(&mut sink).await);
                };
                let accept = async {
                    if let Ok(tls) = acceptor.accept(server).await {
                        serve(tls).await;
                    }
                };
                tokio::join!(send, accept);
            }
            1 => {
                let name = ServerName::try_from("localhost").unwrap();
                let (server, client) =
                    tokio::join!(acceptor.accept(server), connector.connect(name, client));
                let (server, client) = (server.unwrap(), client.unwrap());
                let send = async {
                    let tcp = client.get_ref();
                    let mut at = 0;
                    while at < rest.len() {
                        if tcp.writable().await.is_err() {
                            break;
                        }
                        match tcp.try_write(&rest[at..]) {
                            Ok(n) => at += n,
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                            Err(_) => break,
                        }
                    }
                    // The write side's end, without close_notify.
                    drop(nix_shutdown(tcp));
                };
                let (_, (_, clean)) = tokio::join!(send, serve(server));
                assert!(!clean, "raw bytes in place of records ended cleanly");
                drop(client);
            }
            _ => {
                let name = ServerName::try_from("localhost").unwrap();
                let (server, client) =
                    tokio::join!(acceptor.accept(server), connector.connect(name, client));
                let (server, mut client) = (server.unwrap(), client.unwrap());
                let send = async {
                    let mut at = 0;
                    let mut sizes = rest.iter().cycle();
                    while at < rest.len() {
                        let size = 1 + usize::from(*sizes.next().unwrap()) * 67;
                        let end = (at + size).min(rest.len());
                        client.write_all(&rest[at..end]).await.unwrap();
                        at = end;
                    }
                    client.shutdown().await.unwrap();
                    let mut back = Vec::new();
                    client.read_to_end(&mut back).await.unwrap();
                    assert!(back.is_empty());
                };
                let (_, (plain, clean)) = tokio::join!(send, serve(server));
                assert!(clean, "records of plaintext did not end cleanly");
                assert!(
                    plain == rest,
                    "the plaintext read is not the plaintext sent"
                );
            }
        }
    });
}

/// Shut down a Unix stream's write side through a shared reference (the peer sees the end).
fn nix_shutdown(stream: &UnixStream) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: `shutdown` on a descriptor the stream owns and keeps open for the call.
    let rc = unsafe { libc::shutdown(stream.as_raw_fd(), libc::SHUT_WR) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
