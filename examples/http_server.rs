//! An HTTP/1.1 keep-alive server on packetpipe's `Framed`: requests parsed in place with
//! `httparse`, bodies taken out of the socket's pooled blocks (zero-copy above the copy
//! threshold, whichever segments they span), pipelined requests answered in order with one flush per burst.
//!
//! ```text
//! cargo run --release --features tokio --example http_server -- [ADDR] [--transport epoll|uring]
//!     [--max-head BYTES] [--max-body BYTES] [--tls CERT KEY]
//! ```
//!
//! Listens on ADDR (default `127.0.0.1:8080`), prints `listening on ADDR` once it accepts, and
//! serves until killed:
//!
//! - `GET /` (and `HEAD /`): `200`, a fixed `Hello, World!` body; other paths `404`;
//! - `POST /echo`: the request body back as the response body; `POST` to another path: `200`
//!   with the number of body bytes read; other methods `405`;
//! - bodies by `Content-Length` or `Transfer-Encoding: chunked` (decoded; chunk extensions and
//!   trailers are read and dropped; any other transfer coding is refused with `501`, a request
//!   with both framings with `400`); `Expect: 100-continue` is answered with `100 Continue` when
//!   the body has not arrived with the head;
//! - keep-alive by default in HTTP/1.1, `Connection: close` (or HTTP/1.0 without
//!   `Connection: keep-alive`) answered and then the connection closed;
//! - `400` for a malformed request (and an HTTP/1.1 request without exactly one `Host`), `431`
//!   for a head over `--max-head` (default 8 KiB) or with more than 64 header lines, `413` for a
//!   body over `--max-body` (default 16 MiB); each followed by a close. Before closing, the
//!   server shuts down its side and reads what the client still sends for up to a second, so
//!   the client gets the response instead of a reset.
//!
//! With `--tls CERT KEY` (feature `tls`; PEM files: the certificate chain, then its private key)
//! every connection is TLS (rustls, ALPN `http/1.1`), on the epoll transport only: a client has
//! 10 s to complete the handshake, and is then served as on a plain connection.
//!
//! ```text
//! $ curl -i http://127.0.0.1:8080/
//! $ curl --data-binary @file http://127.0.0.1:8080/echo
//! $ wrk -t1 -c64 -d10s http://127.0.0.1:8080/
//! $ cargo run --release --features tls --example http_server -- --tls cert.pem key.pem
//! $ curl --cacert cert.pem https://localhost:8080/
//! ```
//!
//! How it is built: `Framed::new(socket, Http)` makes the socket an inline connection (reading a
//! request reads the socket into a pooled block, flushing writes it, in this task). `Http` is the
//! codec: its `Decoder` hands `httparse` the head as one slice (`DecodeBuf::contiguous`:
//! borrowed from the block when it lies in one segment, copied into the stream's reusable scratch
//! buffer when it spans two), takes the body out as packets, and ends the stream after a request
//! that closes the connection (`DecodeBuf::end_stream`); its `Encoder` writes a response's head
//! and appends the body's packets. `FrameWriter::forward` answers every request that is already
//! in the buffer, then flushes once, and ends after the response that closes the connection. `--transport uring` (feature `io-uring`) serves the same codec on the io_uring driver.
//! A connection in steady state allocates nothing per request (a body spread over more than four
//! receive segments, a few MiB, allocates its chain's list).
#![forbid(unsafe_code)]

use std::mem::MaybeUninit;
use std::time::Duration;

use futures::StreamExt;
use packetpipe::frame::{DecodeBuf, Decoded, Decoder, Encoder, FrameError, FrameWriter, Frames};
use packetpipe::pipe::{PipeWriter, DEFAULT_COPY_THRESHOLD};
use packetpipe::{ByteSegments, PacketChain};

/// The limits a request is held to.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// The longest request head (request line and headers, with the blank line): `431` above.
    pub max_head: usize,
    /// The longest request body: `413` above.
    pub max_body: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_head: 8 << 10,
            max_body: 16 << 20,
        }
    }
}

/// Header lines a request may have (`431` above).
const MAX_HEADERS: usize = 64;
/// The longest chunk-size line of a chunked body, extensions included (`400` above).
const MAX_CHUNK_LINE: usize = 1024;

/// What a request asks for, decided from its head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// `GET /`, or `HEAD /` (`head_only`).
    Hello { head_only: bool },
    /// `GET` or `HEAD` of another path.
    NotFound { head_only: bool },
    /// `POST /echo`.
    Echo,
    /// `POST` to another path: the body is read and counted.
    Count,
    /// Another method.
    NotAllowed,
}

/// A request as the decoder hands it on.
#[derive(Debug)]
pub enum Request {
    /// A whole request: its route, its body (the packets taken out of the pipe: shared above the
    /// copy threshold, copied below it) and what becomes of the connection after the response.
    Complete {
        route: Route,
        body: PacketChain,
        connection: Connection,
    },
    /// The client sent `Expect: 100-continue` and waits for an interim response before it
    /// sends the body.
    Continue,
    /// A request that is refused with this status; the connection closes after the response.
    Refused(Status),
}

/// The error statuses the decoder refuses a request with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// `400 Bad Request`: the request does not parse, or its framing is contradictory.
    BadRequest,
    /// `413 Content Too Large`: the body is over the limit.
    TooLarge,
    /// `431 Request Header Fields Too Large`: the head is over the limit.
    HeadTooLarge,
    /// `501 Not Implemented`: a transfer coding other than `chunked`.
    NotImplemented,
}

/// A response, as the handler makes it and the encoder writes it.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // moved once, into the encoder; a box would allocate per response
pub enum Response {
    /// `100 Continue`.
    Continue,
    /// A final response: status line, `Content-Type: text/plain`, `Content-Length`, the
    /// `Connection` header if any, the body.
    Final {
        /// The status line's code and reason, as `"200 OK"`.
        status: &'static str,
        /// The body; `None` for a `HEAD` request (the length is still sent).
        body: Body,
        /// What becomes of the connection after this response.
        connection: Connection,
    },
}

/// A response body.
#[derive(Debug)]
pub enum Body {
    /// Fixed text.
    Static(&'static [u8]),
    /// The packets of a request body, appended to the output without copying.
    Packets(PacketChain),
    /// A number, written as decimal text.
    Count(usize),
    /// A `HEAD` response: no body, this `Content-Length`.
    Head(usize),
}

/// What a response says about its connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Connection {
    /// It stays open (HTTP/1.1's default: no header).
    KeepAlive,
    /// It stays open, and the response says so (`Connection: keep-alive`), as an HTTP/1.0
    /// client that asked for it needs.
    KeepAliveAnnounced,
    /// It closes after the response (`Connection: close`).
    Close,
}

impl Connection {
    /// The end of the response head.
    fn header(self) -> &'static [u8] {
        match self {
            Connection::KeepAlive => b"\r\n\r\n",
            Connection::KeepAliveAnnounced => b"\r\nConnection: keep-alive\r\n\r\n",
            Connection::Close => b"\r\nConnection: close\r\n\r\n",
        }
    }
}

/// The codec: an HTTP/1.1 request decoder and response encoder.
#[derive(Clone, Debug, Default)]
pub struct Http {
    limits: Limits,
    /// The head of the request whose body is awaited, once parsed.
    head: Option<Head>,
    /// Chunked body: the data spans found so far (offset, length) and where scanning resumes.
    chunks: Vec<(usize, usize)>,
    scan: usize,
    /// `100 Continue` has been sent for the awaited body.
    continued: bool,
}

/// What the decoder keeps of a parsed head.
#[derive(Clone, Copy, Debug)]
struct Head {
    len: usize,
    route: Route,
    connection: Connection,
    body: Framing,
    expect_continue: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Framing {
    Length(usize),
    Chunked,
}

impl Http {
    /// A codec holding requests to `limits`.
    pub fn new(limits: Limits) -> Http {
        Http {
            limits,
            ..Http::default()
        }
    }

    /// Parse the head at the start of `buf`: `Ok(None)` while it is incomplete.
    fn parse_head(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<Head>, Status> {
        let len = buf.len().min(self.limits.max_head);
        // httparse wants one slice: borrowed from the receive block when the bytes lie in one
        // segment (the common case), else copied once into the stream's scratch buffer.
        let bytes = buf.contiguous(len).map_err(|_| Status::BadRequest)?;
        // Left uninitialised: httparse writes the ones it fills (a 64-entry array of empty
        // headers would be set up on every call).
        let mut headers = [MaybeUninit::<httparse::Header<'_>>::uninit(); MAX_HEADERS];
        let mut request = httparse::Request::new(&mut []);
        let head_len = match request.parse_with_uninit_headers(bytes, &mut headers) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) if len == self.limits.max_head => {
                return Err(Status::HeadTooLarge)
            }
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(httparse::Error::TooManyHeaders) => return Err(Status::HeadTooLarge),
            Err(_) => return Err(Status::BadRequest),
        };
        let http11 = request.version == Some(1);
        let (mut close, mut announce, mut length, mut chunked) = (false, false, None, false);
        let (mut hosts, mut expect_continue) = (0, false);
        for header in request.headers.iter() {
            let name = header.name;
            if name.eq_ignore_ascii_case("content-length") {
                let n = parse_decimal(header.value)?;
                if length.is_some_and(|m| m != n) {
                    return Err(Status::BadRequest);
                }
                length = Some(n);
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                if !trim(header.value).eq_ignore_ascii_case(b"chunked") {
                    return Err(Status::NotImplemented);
                }
                chunked = true;
            } else if name.eq_ignore_ascii_case("connection") {
                for token in header.value.split(|&b| b == b',').map(trim) {
                    if token.eq_ignore_ascii_case(b"close") {
                        close = true;
                    } else if token.eq_ignore_ascii_case(b"keep-alive") && !http11 {
                        announce = true;
                    }
                }
            } else if name.eq_ignore_ascii_case("host") {
                hosts += 1;
            } else if name.eq_ignore_ascii_case("expect") {
                expect_continue = trim(header.value).eq_ignore_ascii_case(b"100-continue");
            }
        }
        if (http11 && hosts != 1) || (chunked && length.is_some()) {
            return Err(Status::BadRequest);
        }
        let body = match length {
            _ if chunked => Framing::Chunked,
            Some(n) if n > self.limits.max_body => return Err(Status::TooLarge),
            n => Framing::Length(n.unwrap_or(0)),
        };
        // The origin form (`/echo?x`), or the absolute form (`http://host/echo`) a server must
        // also accept: the path without the query.
        let target = request.path.unwrap_or("/");
        let path = match target.starts_with('/') {
            true => target,
            false => target.split_once("://").map_or(target, |(_, rest)| {
                rest.find('/').map_or("/", |i| &rest[i..])
            }),
        };
        let path = path.split('?').next().unwrap_or(path);
        let route = match request.method.unwrap_or("") {
            method @ ("GET" | "HEAD") => {
                let head_only = method == "HEAD";
                if path == "/" {
                    Route::Hello { head_only }
                } else {
                    Route::NotFound { head_only }
                }
            }
            "POST" if path == "/echo" => Route::Echo,
            "POST" => Route::Count,
            _ => Route::NotAllowed,
        };
        // `close` wins; HTTP/1.0 closes unless the client asked to keep the connection.
        let connection = match (close || (!http11 && !announce), announce) {
            (true, _) => Connection::Close,
            (false, true) => Connection::KeepAliveAnnounced,
            (false, false) => Connection::KeepAlive,
        };
        Ok(Some(Head {
            len: head_len,
            route,
            connection,
            body,
            expect_continue,
        }))
    }

    /// Find the chunks of a chunked body that starts at `self.scan`: `Ok(Some(end))` once the last
    /// chunk and the trailers are in the buffer (`end` is where the request ends), `Ok(None)`
    /// while more bytes are needed (the spans found so far are kept).
    fn scan_chunks(&mut self, buf: &DecodeBuf<'_>) -> Result<Option<usize>, Status> {
        let buffer = buf.buffer();
        let mut total: usize = self.chunks.iter().map(|&(_, n)| n).sum();
        loop {
            let Some(line_end) = buffer.find_from(self.scan, b"\r\n") else {
                return match buffer.len() - self.scan > MAX_CHUNK_LINE {
                    true => Err(Status::BadRequest),
                    false => Ok(None),
                };
            };
            if line_end - self.scan > MAX_CHUNK_LINE {
                return Err(Status::BadRequest);
            }
            let mut line = [0u8; MAX_CHUNK_LINE];
            let line = &mut line[..line_end - self.scan];
            buffer
                .slice(self.scan..line_end)
                .copy_prefix_to(line)
                .map_err(|_| Status::BadRequest)?;
            let size_text = line.split(|&b| b == b';').next().unwrap_or_default();
            let size = parse_hex(trim(size_text)).ok_or(Status::BadRequest)?;
            if size == 0 {
                // The last chunk: trailer lines up to an empty one.
                let mut at = line_end + 2;
                loop {
                    let Some(end) = buffer.find_from(at, b"\r\n") else {
                        return match buffer.len() - at > self.limits.max_head {
                            true => Err(Status::HeadTooLarge),
                            false => Ok(None),
                        };
                    };
                    if end == at {
                        return Ok(Some(end + 2));
                    }
                    at = end + 2;
                }
            }
            total = total.checked_add(size).ok_or(Status::TooLarge)?;
            if total > self.limits.max_body {
                return Err(Status::TooLarge);
            }
            let data = line_end + 2;
            if buffer.len() < data + size + 2 {
                return Ok(None);
            }
            if buffer.peek_be::<u8>(data + size) != Some(b'\r')
                || buffer.peek_be::<u8>(data + size + 1) != Some(b'\n')
            {
                return Err(Status::BadRequest);
            }
            self.chunks.push((data, size));
            self.scan = data + size + 2;
        }
    }

    /// The request whose head is parsed, if its body is all there; else how many bytes to wait
    /// for, or `Continue`.
    fn take_body(
        &mut self,
        buf: &mut DecodeBuf<'_>,
        head: Head,
    ) -> Result<Decoded<Request>, FrameError> {
        let mut body = PacketChain::new();
        let end = match head.body {
            Framing::Length(n) if buf.len() >= head.len + n => {
                buf.skip(head.len)?;
                if n > DEFAULT_COPY_THRESHOLD {
                    // Shared, never copied, whichever segments it spans.
                    body = buf.take_frame_chain(n)?;
                } else if n > 0 {
                    body.push(buf.take_frame(n)?); // copied out of the receive block
                }
                0
            }
            Framing::Length(n) => return Ok(self.wait(head, head.len + n)),
            Framing::Chunked => match self.scan_chunks(buf) {
                Ok(Some(end)) => end,
                Ok(None) => return Ok(self.wait(head, buf.len() + 1)),
                Err(status) => return Ok(refuse(buf, status)),
            },
        };
        // Chunked: take each chunk's data out, skipping the size lines and trailers around it.
        let mut at = 0;
        for &(offset, len) in &self.chunks {
            buf.skip(offset - at)?;
            if len > DEFAULT_COPY_THRESHOLD {
                let mut chunk = buf.take_frame_chain(len)?;
                while let Some(packet) = chunk.pop_front() {
                    body.push(packet);
                }
            } else {
                body.push(buf.take_frame(len)?);
            }
            at = offset + len;
        }
        buf.skip(end.saturating_sub(at))?;
        self.chunks.clear();
        self.head = None;
        self.continued = false;
        if head.connection == Connection::Close {
            // Its response is the connection's last: no request after it is read.
            buf.end_stream();
        }
        Ok(Decoded::Frame(Request::Complete {
            route: head.route,
            body,
            connection: head.connection,
        }))
    }

    /// Wait for `need` bytes, first telling a client that expects it to send the body.
    fn wait(&mut self, head: Head, need: usize) -> Decoded<Request> {
        if head.expect_continue && !self.continued {
            self.continued = true;
            return Decoded::Frame(Request::Continue);
        }
        Decoded::NeedAtLeast(need)
    }
}

/// A refused request: its response closes the connection, so the stream of requests ends with it.
fn refuse(buf: &mut DecodeBuf<'_>, status: Status) -> Decoded<Request> {
    buf.end_stream();
    Decoded::Frame(Request::Refused(status))
}

impl Decoder for Http {
    type Item = Request;
    type Error = FrameError;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Decoded<Request>, FrameError> {
        let head = match self.head {
            Some(head) => head,
            None => match self.parse_head(buf) {
                Ok(Some(head)) => {
                    self.scan = head.len;
                    *self.head.insert(head)
                }
                Ok(None) => return Ok(Decoded::NeedAtLeast(buf.len() + 1)),
                Err(status) => return Ok(refuse(buf, status)),
            },
        };
        self.take_body(buf, head)
    }

    /// A client that closes its side mid-request gets no response: there is nothing to answer.
    fn decode_eof(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<Request>, FrameError> {
        match self.decode(buf)? {
            Decoded::Frame(request) => Ok(Some(request)),
            Decoded::NeedAtLeast(_) => Ok(None),
        }
    }
}

impl Encoder<Response> for Http {
    type Error = FrameError;

    fn encode(&mut self, response: Response, dst: &mut PipeWriter) -> Result<(), FrameError> {
        let (status, body, connection) = match response {
            Response::Continue => return Ok(dst.write_slice(b"HTTP/1.1 100 Continue\r\n\r\n")?),
            Response::Final {
                status,
                body,
                connection,
            } => (status, body, connection),
        };
        let mut count = [0; 20];
        let (len, text): (usize, &[u8]) = match &body {
            Body::Static(text) => (text.len(), text),
            Body::Packets(packets) => (packets.len(), b""),
            Body::Count(n) => {
                let text = decimal(*n, &mut count);
                (text.len(), text)
            }
            Body::Head(n) => (*n, b""),
        };
        // The head (and a short text body) assembled on the stack, then one copy into the pipe.
        let mut head = ResponseHead::default();
        head.put(b"HTTP/1.1 ");
        head.put(status.as_bytes());
        head.put(b"\r\nContent-Type: text/plain\r\nContent-Length: ");
        head.put(decimal(len, &mut [0; 20]));
        head.put(connection.header());
        if head.fits(text) {
            head.put(text);
            dst.write_slice(head.bytes())?;
        } else {
            dst.write_slice(head.bytes())?;
            dst.write_slice(text)?;
        }
        if let Body::Packets(mut packets) = body {
            while let Some(packet) = packets.pop_front() {
                dst.append(packet)?; // zero-copy: the request's own packets
            }
        }
        Ok(())
    }
}

/// A response head being assembled (at most 256 bytes: the longest head is under 150).
struct ResponseHead {
    bytes: [u8; 256],
    len: usize,
}

impl Default for ResponseHead {
    fn default() -> ResponseHead {
        ResponseHead {
            bytes: [0; 256],
            len: 0,
        }
    }
}

impl ResponseHead {
    fn fits(&self, more: &[u8]) -> bool {
        more.len() <= self.bytes.len() - self.len
    }

    fn put(&mut self, more: &[u8]) {
        self.bytes[self.len..self.len + more.len()].copy_from_slice(more);
        self.len += more.len();
    }

    fn bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

const HELLO: &[u8] = b"Hello, World!";

/// The application: the response to a request.
pub fn handle(request: Request) -> Response {
    let (route, body, connection) = match request {
        Request::Continue => return Response::Continue,
        Request::Refused(status) => {
            let (status, text): (_, &[u8]) = match status {
                Status::BadRequest => ("400 Bad Request", b"bad request\n"),
                Status::TooLarge => ("413 Content Too Large", b"body too large\n"),
                Status::HeadTooLarge => {
                    ("431 Request Header Fields Too Large", b"head too large\n")
                }
                Status::NotImplemented => {
                    ("501 Not Implemented", b"transfer coding not supported\n")
                }
            };
            return Response::Final {
                status,
                body: Body::Static(text),
                connection: Connection::Close,
            };
        }
        Request::Complete {
            route,
            body,
            connection,
        } => (route, body, connection),
    };
    let (status, body) = match route {
        Route::Hello { head_only: false } => ("200 OK", Body::Static(HELLO)),
        Route::Hello { head_only: true } => ("200 OK", Body::Head(HELLO.len())),
        Route::NotFound { head_only: false } => ("404 Not Found", Body::Static(b"not found\n")),
        Route::NotFound { head_only: true } => ("404 Not Found", Body::Head(10)),
        Route::Echo => ("200 OK", Body::Packets(body)),
        Route::Count => ("200 OK", Body::Count(body.len())),
        Route::NotAllowed => (
            "405 Method Not Allowed",
            Body::Static(b"method not allowed\n"),
        ),
    };
    Response::Final {
        status,
        body,
        connection,
    }
}

/// Serve one connection's requests: answer every request already in the buffer, then flush
/// once (`forward`), until the client closes or a response closes the connection (the decoder
/// ends the stream of requests after that request); then shut down the sending side.
pub async fn serve(
    out: &mut FrameWriter<Http>,
    requests: &mut Frames<Http>,
) -> Result<(), FrameError> {
    out.forward(requests.map(|request| request.map(handle)))
        .await?;
    out.close().await
}

/// Read and drop what the client still sends, until it closes: closing a socket with unread
/// input makes the kernel send a reset, which can make the client lose the last response.
pub async fn drain(requests: Frames<Http>) -> Result<(), FrameError> {
    let mut reader = requests.into_inner();
    loop {
        let read = reader.read_buffer().await?;
        let (len, done) = (read.buffer.len(), read.is_completed);
        reader.advance_to(len, len)?;
        if done {
            return Ok(());
        }
    }
}

/// Serve one TCP connection on the inline transport.
pub async fn serve_tcp(socket: tokio::net::TcpStream, limits: Limits) {
    let _ = socket.set_nodelay(true);
    serve_stream(socket, limits).await;
}

/// Serve one connection over any tokio stream (a `TcpStream`, or a `TlsStream` over one) on the
/// inline transport.
pub async fn serve_stream<S>(stream: S, limits: Limits)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
{
    let (mut out, mut requests) = packetpipe::frame::Framed::new(stream, Http::new(limits)).split();
    match serve(&mut out, &mut requests).await {
        Ok(()) => drop(tokio::time::timeout(Duration::from_secs(1), drain(requests)).await),
        Err(e) => eprintln!("connection ended with {}", with_causes(&e)),
    }
}

/// How long a client has to complete the TLS handshake: one that stalls it is dropped, so it
/// holds a socket and a task for no longer than this.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The TLS server configuration of the PEM certificate chain in `cert` and the PEM private key
/// in `key`, offering `http/1.1` by ALPN.
#[cfg(feature = "tls")]
pub fn load_tls(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> std::io::Result<packetpipe::io::tls::TlsAcceptor> {
    use packetpipe::io::tls::rustls;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    let invalid = |what: &std::path::Path, e: &dyn std::fmt::Display| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{}: {e}", what.display()),
        )
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
    Ok(packetpipe::io::tls::TlsAcceptor::from(std::sync::Arc::new(
        config,
    )))
}

/// Serve one TCP connection over TLS: the handshake (within [`HANDSHAKE_TIMEOUT`]), then the
/// requests as on a plain connection. A failed or stalled handshake closes the connection.
#[cfg(feature = "tls")]
pub async fn serve_tls(
    acceptor: packetpipe::io::tls::TlsAcceptor,
    socket: tokio::net::TcpStream,
    limits: Limits,
) {
    let _ = socket.set_nodelay(true);
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(socket)).await {
        Ok(Ok(tls)) => serve_stream(tls, limits).await,
        Ok(Err(e)) => eprintln!("TLS handshake failed: {e}"),
        Err(_) => eprintln!("TLS handshake timed out"),
    }
}

/// Serve one connection's pipes on the io_uring driver (which has no timer: the reads after the
/// close last until the client closes).
#[cfg(all(feature = "io-uring", target_os = "linux"))]
pub async fn serve_pipe(pipe: packetpipe::io::DuplexPipe, limits: Limits) {
    let mut requests = Frames::new(pipe.reader, Http::new(limits));
    let mut out = FrameWriter::new(pipe.writer, Http::new(limits));
    match serve(&mut out, &mut requests).await {
        Ok(()) => drop(drain(requests).await),
        Err(e) => eprintln!("connection ended with {}", with_causes(&e)),
    }
}

/// A `Content-Length` value: `400` unless it is all digits, `413` if it has more than fit.
fn parse_decimal(text: &[u8]) -> Result<usize, Status> {
    let text = trim(text);
    if text.is_empty() || !text.iter().all(u8::is_ascii_digit) {
        return Err(Status::BadRequest);
    }
    text.iter().try_fold(0usize, |n, &d| {
        n.checked_mul(10)
            .and_then(|n| n.checked_add(usize::from(d - b'0')))
            .ok_or(Status::TooLarge)
    })
}

fn parse_hex(text: &[u8]) -> Option<usize> {
    if text.is_empty() || text.len() > 15 {
        return None;
    }
    text.iter()
        .try_fold(0, |n, &d| Some(n * 16 + (d as char).to_digit(16)? as usize))
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
    let mut args = std::env::args().skip(1);
    let (mut addr, mut uring, mut limits) =
        ("127.0.0.1:8080".to_string(), false, Limits::default());
    let mut tls: Option<(String, String)> = None;
    while let Some(arg) = args.next() {
        let mut number = || {
            args.next()
                .and_then(|n| n.parse().ok())
                .expect("a number of bytes")
        };
        match arg.as_str() {
            "--transport" => uring = args.next().as_deref() == Some("uring"),
            "--max-head" => limits.max_head = number(),
            "--max-body" => limits.max_body = number(),
            "--tls" => match (args.next(), args.next()) {
                (Some(cert), Some(key)) => tls = Some((cert, key)),
                _ => {
                    eprintln!("--tls needs a certificate and a key file (PEM): --tls CERT KEY");
                    std::process::exit(2);
                }
            },
            _ => addr = arg,
        }
    }
    if tls.is_some() && uring {
        eprintln!("--tls is served on the epoll transport only, not with --transport uring");
        std::process::exit(2);
    }
    #[cfg(not(feature = "tls"))]
    if tls.is_some() {
        eprintln!("built without feature tls: --tls needs `--features tls`");
        std::process::exit(2);
    }
    #[cfg(feature = "tls")]
    let acceptor = match &tls {
        Some((cert, key)) => match load_tls(cert.as_ref(), key.as_ref()) {
            Ok(acceptor) => Some(acceptor),
            Err(e) => {
                eprintln!("cannot load the TLS certificate and key: {e}");
                std::process::exit(2);
            }
        },
        None => None,
    };
    if uring {
        #[cfg(all(feature = "io-uring", target_os = "linux"))]
        match packetpipe::io::uring::Driver::new() {
            Ok(mut driver) => {
                let listener = std::net::TcpListener::bind(&addr)?;
                println!("listening on {} (io_uring)", listener.local_addr()?);
                driver.listen(listener)?;
                return driver.run(move |pipe| serve_pipe(pipe, limits));
            }
            Err(e) => eprintln!("io_uring is unavailable ({e}): serving on epoll"),
        }
        #[cfg(not(all(feature = "io-uring", target_os = "linux")))]
        eprintln!("built without the io-uring feature: serving on epoll");
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(&addr).await?;
        let scheme = if tls.is_some() { " (TLS)" } else { "" };
        println!("listening on {}{scheme}", listener.local_addr()?);
        loop {
            let (socket, _) = listener.accept().await?;
            #[cfg(feature = "tls")]
            if let Some(acceptor) = &acceptor {
                tokio::spawn(serve_tls(acceptor.clone(), socket, limits));
                continue;
            }
            tokio::spawn(serve_tcp(socket, limits));
        }
    })
}

/// An error with the errors it wraps (`source()`), which its own text leaves out: "the reader
/// completed with an error: the TLS peer sent an alert: ...".
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(error) = cause {
        text += &format!(": {error}");
        cause = error.source();
    }
    text
}
