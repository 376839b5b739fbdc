//! Smoke: a line echo over TLS with a rustls client.
#![cfg(feature = "tls")]

use std::io::{BufRead, BufReader, Write};
use std::sync::Arc;

use packetpipe::frame::{Framed, Lines};
use packetpipe::io::tls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use packetpipe::io::tls::{rustls, TlsAcceptor};

fn certs() -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let key = PrivatePkcs8KeyDer::from(cert.key_pair.serialize_der());
    (cert.cert.der().clone(), key.into())
}

fn echo(versions: &[&'static rustls::SupportedProtocolVersion]) {
    let (cert, key) = certs();
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)
        .unwrap();
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    let server = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let (tcp, _) = listener.accept().await.unwrap();
            let tls = acceptor.accept(tcp).await.unwrap();
            let (mut out, mut lines) = Framed::new(tls, Lines::new()).split();
            let mut n = 0;
            while let Some(line) = lines.next().await {
                out.send(line.unwrap()).await.unwrap();
                n += 1;
            }
            out.close().await.unwrap();
            n
        })
    });
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).unwrap();
    let config = rustls::ClientConfig::builder_with_protocol_versions(versions)
        .with_root_certificates(roots)
        .with_no_client_auth();
    let conn =
        rustls::ClientConnection::new(Arc::new(config), "localhost".try_into().unwrap()).unwrap();
    let tcp = std::net::TcpStream::connect(addr).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    for i in 0..100 {
        writeln!(tls, "line {i} {}", "x".repeat(i * 50)).unwrap();
    }
    tls.flush().unwrap();
    let mut reader = BufReader::new(&mut tls);
    for i in 0..100 {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        assert_eq!(line, format!("line {i} {}\n", "x".repeat(i * 50)));
    }
    tls.conn.send_close_notify();
    tls.flush().unwrap();
    let mut rest = Vec::new();
    std::io::Read::read_to_end(&mut tls, &mut rest).unwrap();
    assert!(rest.is_empty());
    assert_eq!(server.join().unwrap(), 100);
}

#[test]
fn tls13_echo() {
    echo(&[&rustls::version::TLS13]);
}

#[test]
fn tls12_echo() {
    echo(&[&rustls::version::TLS12]);
}
