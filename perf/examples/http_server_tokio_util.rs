//! The HTTP/1.1 keep-alive server of `examples/http_server.rs` on tokio-util's `Framed` over
//! `BytesMut`, for comparisons: a `Decoder` that parses the head with `httparse` and splits the
//! body off the buffer, an `Encoder` that writes the head with `BufMut` and then the body, and a
//! loop that feeds every response whose request is already readable and flushes once per burst.
//!
//! ```text
//! cargo run --release -p packetpipe-perf --example http_server_tokio_util -- [ADDR] [--tls CERT KEY]
//! ```
//!
//! Listens on ADDR (default `127.0.0.1:8080`), prints `listening on ADDR` once it accepts, and
//! serves until killed, on one current-thread tokio runtime, with the example's routes, limits
//! and response bytes: `GET /` (and `HEAD /`) `200` with `Hello, World!`, other paths `404`;
//! `POST /echo` the body back, `POST` elsewhere the number of body bytes; other methods `405`;
//! `Connection: close` (or HTTP/1.0 without `Connection: keep-alive`) answered, then the
//! connection closed after a second of draining; `400`, `431` (8 KiB head, 64 headers) and
//! `413` (16 MiB body) as the example. Bodies by `Content-Length` only: a chunked request is
//! refused with `501`, and `Expect: 100-continue` gets no interim response (the paths measured
//! have neither).
//!
//! With `--tls CERT KEY` (PEM files: the certificate chain, then its private key) every
//! connection is TLS over `tokio-rustls` (rustls with its `ring` provider, ALPN `http/1.1`, as
//! the example's `--tls`): a client has 10 s to complete the handshake, and is then served by
//! the same `Framed` loop over the TLS stream.
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures::{FutureExt, SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::rustls;
use tokio_rustls::TlsAcceptor;
use tokio_util::codec::{Decoder, Encoder, Framed};

const MAX_HEAD: usize = 8 << 10;
const MAX_BODY: usize = 16 << 20;
const MAX_HEADERS: usize = 64;
const HELLO: &[u8] = b"Hello, World!";

/// What a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    Hello { head_only: bool },
    NotFound { head_only: bool },
    Echo,
    Count,
    NotAllowed,
}

/// What becomes of the connection after the response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Connection {
    KeepAlive,
    KeepAliveAnnounced,
    Close,
}

impl Connection {
    fn header(self) -> &'static [u8] {
        match self {
            Connection::KeepAlive => b"\r\n\r\n",
            Connection::KeepAliveAnnounced => b"\r\nConnection: keep-alive\r\n\r\n",
            Connection::Close => b"\r\nConnection: close\r\n\r\n",
        }
    }
}

enum Request {
    Complete {
        route: Route,
        body: Bytes,
        connection: Connection,
    },
    Refused(&'static str, &'static [u8]),
}

struct Response {
    status: &'static str,
    body: Bytes,
    /// `Content-Length` when it differs from the body's (a `HEAD` response).
    length: usize,
    connection: Connection,
}

#[derive(Clone, Copy)]
struct Head {
    len: usize,
    route: Route,
    connection: Connection,
    body: usize,
}

/// The codec: a request decoder over `BytesMut`, a response encoder.
#[derive(Default)]
struct Http {
    /// The head of the request whose body is awaited.
    head: Option<Head>,
}

const BAD_REQUEST: Request = Request::Refused("400 Bad Request", b"bad request\n");
const HEAD_TOO_LARGE: Request =
    Request::Refused("431 Request Header Fields Too Large", b"head too large\n");

fn parse_head(src: &[u8]) -> Result<Option<Head>, Request> {
    let bytes = &src[..src.len().min(MAX_HEAD)];
    // Uninitialised, as the packetpipe server's: httparse writes the ones it fills.
    let mut headers = [std::mem::MaybeUninit::<httparse::Header<'_>>::uninit(); MAX_HEADERS];
    let mut request = httparse::Request::new(&mut []);
    let len = match request.parse_with_uninit_headers(bytes, &mut headers) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if bytes.len() == MAX_HEAD => return Err(HEAD_TOO_LARGE),
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(HEAD_TOO_LARGE),
        Err(_) => return Err(BAD_REQUEST),
    };
    let http11 = request.version == Some(1);
    let (mut close, mut announce, mut length, mut hosts) = (!http11, false, None, 0);
    for header in request.headers.iter() {
        let name = header.name;
        if name.eq_ignore_ascii_case("content-length") {
            let n = parse_decimal(header.value).ok_or(BAD_REQUEST)?;
            if length.is_some_and(|m| m != n) {
                return Err(BAD_REQUEST);
            }
            length = Some(n);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(Request::Refused(
                "501 Not Implemented",
                b"transfer coding not supported\n",
            ));
        } else if name.eq_ignore_ascii_case("connection") {
            for token in header.value.split(|&b| b == b',').map(trim) {
                if token.eq_ignore_ascii_case(b"close") {
                    close = true;
                } else if token.eq_ignore_ascii_case(b"keep-alive") && !http11 {
                    (close, announce) = (false, true);
                }
            }
        } else if name.eq_ignore_ascii_case("host") {
            hosts += 1;
        }
    }
    if http11 && hosts != 1 {
        return Err(BAD_REQUEST);
    }
    let body = length.unwrap_or(0);
    if body > MAX_BODY {
        return Err(Request::Refused(
            "413 Content Too Large",
            b"body too large\n",
        ));
    }
    let path = request.path.unwrap_or("/");
    let path = path.split('?').next().unwrap_or(path);
    let route = match request.method.unwrap_or("") {
        method @ ("GET" | "HEAD") => {
            let head_only = method == "HEAD";
            match path {
                "/" => Route::Hello { head_only },
                _ => Route::NotFound { head_only },
            }
        }
        "POST" if path == "/echo" => Route::Echo,
        "POST" => Route::Count,
        _ => Route::NotAllowed,
    };
    let connection = match (close, announce) {
        (true, _) => Connection::Close,
        (false, true) => Connection::KeepAliveAnnounced,
        (false, false) => Connection::KeepAlive,
    };
    Ok(Some(Head {
        len,
        route,
        connection,
        body,
    }))
}

impl Decoder for Http {
    type Item = Request;
    type Error = std::io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Request>, std::io::Error> {
        let head = match self.head {
            Some(head) => head,
            None => match parse_head(src) {
                Ok(Some(head)) => *self.head.insert(head),
                Ok(None) => return Ok(None),
                Err(refused) => return Ok(Some(refused)),
            },
        };
        if src.len() < head.len + head.body {
            return Ok(None);
        }
        self.head = None;
        let _ = src.split_to(head.len);
        Ok(Some(Request::Complete {
            route: head.route,
            body: src.split_to(head.body).freeze(),
            connection: head.connection,
        }))
    }

    /// A client that closes its side mid-request gets no response.
    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Request>, std::io::Error> {
        self.decode(src)
    }
}

impl Encoder<Response> for Http {
    type Error = std::io::Error;

    fn encode(&mut self, response: Response, dst: &mut BytesMut) -> Result<(), std::io::Error> {
        let mut digits = [0; 20];
        dst.put_slice(b"HTTP/1.1 ");
        dst.put_slice(response.status.as_bytes());
        dst.put_slice(b"\r\nContent-Type: text/plain\r\nContent-Length: ");
        dst.put_slice(decimal(response.length, &mut digits));
        dst.put_slice(response.connection.header());
        dst.put_slice(&response.body);
        Ok(())
    }
}

fn handle(request: Request) -> Response {
    let (route, body, connection) = match request {
        Request::Refused(status, text) => {
            return Response {
                status,
                body: Bytes::from_static(text),
                length: text.len(),
                connection: Connection::Close,
            }
        }
        Request::Complete {
            route,
            body,
            connection,
        } => (route, body, connection),
    };
    let fixed = |text: &'static [u8], head_only: bool| match head_only {
        true => (Bytes::new(), text.len()),
        false => (Bytes::from_static(text), text.len()),
    };
    let (status, (body, length)) = match route {
        Route::Hello { head_only } => ("200 OK", fixed(HELLO, head_only)),
        Route::NotFound { head_only } => ("404 Not Found", fixed(b"not found\n", head_only)),
        Route::Echo => {
            let length = body.len();
            ("200 OK", (body, length))
        }
        Route::Count => {
            let mut digits = [0; 20];
            let text = decimal(body.len(), &mut digits);
            ("200 OK", (Bytes::copy_from_slice(text), text.len()))
        }
        Route::NotAllowed => (
            "405 Method Not Allowed",
            fixed(b"method not allowed\n", false),
        ),
    };
    Response {
        status,
        body,
        length,
        connection,
    }
}

/// Serve one TCP connection.
pub async fn serve(socket: TcpStream) -> std::io::Result<()> {
    socket.set_nodelay(true)?;
    serve_stream(socket).await
}

/// Serve one connection over any tokio stream (a `TcpStream`, or a `TlsStream` over one): feed
/// the response of every request that is already readable, flush once none is, until the client
/// closes or a response closes the connection; then shut down the sending side and drain what
/// the client still sends for up to a second.
pub async fn serve_stream<S>(stream: S) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut framed = Framed::new(stream, Http::default());
    'connection: while let Some(request) = framed.next().await {
        let mut request = request?;
        loop {
            let response = handle(request);
            let close = response.connection == Connection::Close;
            framed.feed(response).await?;
            if close {
                break 'connection;
            }
            // The next request, if it can be had without waiting.
            match framed.next().now_or_never() {
                Some(Some(next)) => request = next?,
                Some(None) => break 'connection,
                None => break,
            }
        }
        framed.flush().await?;
    }
    framed.close().await?;
    let mut socket = framed.into_inner();
    let mut sink = [0u8; 4096];
    let drain = async {
        while socket.read(&mut sink).await? > 0 {}
        std::io::Result::Ok(())
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
    Ok(())
}

/// How long a client has to complete the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The TLS acceptor of the PEM certificate chain in `cert` and the PEM private key in `key`,
/// offering `http/1.1` by ALPN.
fn load_tls(cert: &str, key: &str) -> std::io::Result<TlsAcceptor> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    let invalid = |what: &str, e: &dyn std::fmt::Display| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{what}: {e}"))
    };
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| invalid(cert, &e))?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| invalid(key, &e))?;
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| invalid(cert, &e))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Serve one TCP connection over TLS: the handshake (within [`HANDSHAKE_TIMEOUT`]), then the
/// requests as on a plain connection.
pub async fn serve_tls(acceptor: TlsAcceptor, socket: TcpStream) -> std::io::Result<()> {
    socket.set_nodelay(true)?;
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(socket)).await {
        Ok(Ok(tls)) => serve_stream(tls).await,
        Ok(Err(e)) => Err(e),
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "TLS handshake timed out",
        )),
    }
}

fn parse_decimal(text: &[u8]) -> Option<usize> {
    let text = trim(text);
    if text.is_empty() || text.len() > 18 || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(text.iter().fold(0, |n, &d| n * 10 + usize::from(d - b'0')))
}

fn trim(text: &[u8]) -> &[u8] {
    let start = text
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(text.len());
    let end = text
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |i| i + 1);
    &text[start..end]
}

fn decimal(mut n: usize, digits: &mut [u8; 20]) -> &[u8] {
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &digits[at..];
        }
    }
}

fn main() -> std::io::Result<()> {
    let mut addr = "127.0.0.1:8080".to_string();
    let mut acceptor = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--tls" => match (args.next(), args.next()) {
                (Some(cert), Some(key)) => acceptor = Some(load_tls(&cert, &key)?),
                _ => {
                    eprintln!("--tls needs a certificate and a key file (PEM): --tls CERT KEY");
                    std::process::exit(2);
                }
            },
            _ => addr = arg,
        }
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(&addr).await?;
        let scheme = if acceptor.is_some() { " (TLS)" } else { "" };
        println!("listening on {}{scheme}", listener.local_addr()?);
        loop {
            let (socket, _) = listener.accept().await?;
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let served = match acceptor {
                    Some(acceptor) => serve_tls(acceptor, socket).await,
                    None => serve(socket).await,
                };
                if let Err(e) = served {
                    eprintln!("connection ended with {e}");
                }
            });
        }
    })
}
