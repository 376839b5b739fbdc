//! The HTTP/1.1 server of `examples/http_server.rs` with clients from outside: a raw
//! `TcpStream` (keep-alive, pipelining, heads split at every byte, trickled and large bodies,
//! chunked bodies, `Expect: 100-continue`, `Connection: close`, HTTP/1.0, every refusal and its
//! close, half-close), `curl` (status, keep-alive, large and chunked uploads, `HEAD`), `wrk`
//! (plain and 16-deep pipelined, every response checked by a Lua hook), hostile inputs (random
//! bytes, resets mid-head and mid-body, a slowloris), and zero allocations per request in steady
//! state.
//!
//! The server runs in-process, as the example's `main` runs it: a current-thread runtime on a
//! thread of its own, on a free loopback port (on the io_uring driver too, feature `io-uring`:
//! where io_uring is unavailable that part says so and passes, unless `PACKETPIPE_REQUIRE_URING`
//! is set). A connection task that panics fails the test that owns the server.
//!
//! Needs `curl` and `wrk` (Debian's packages; `.ci/run` installs them): without the binaries
//! those tests fail and say so. Every child process and socket read has a deadline.
#![cfg(feature = "tokio")]

#[path = "../../examples/http_server.rs"]
#[allow(dead_code)] // its `main`
mod http_server;
mod kit;

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use http_server::Limits;
use kit::counting_alloc;
use kit::rng::XorShift64;

#[global_allocator]
static GLOBAL: counting_alloc::CountingAlloc = counting_alloc::CountingAlloc;

/// How long a client waits for any one read before the test fails.
const READ_TIMEOUT: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------------------------
// The server

/// The example's server on its own thread; dropping it stops the server and checks that no
/// connection task panicked.
struct Server {
    addr: SocketAddr,
    panics: Arc<AtomicUsize>,
    stop: Option<Box<dyn FnOnce() + Send>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Server {
    /// The server on tokio's epoll reactor (`serve_tcp` per connection, as `main` runs it).
    fn start(limits: Limits) -> Server {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let addr = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        let panics = Arc::new(AtomicUsize::new(0));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let counter = panics.clone();
        let thread = thread::Builder::new()
            .name("http server".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                    tokio::select! {
                        _ = accept_loop(listener, limits, counter) => {}
                        _ = stopped => {}
                    }
                });
            })
            .unwrap();
        Server {
            addr,
            panics,
            stop: Some(Box::new(move || {
                let _ = stop.send(());
            })),
            thread: Some(thread),
        }
    }

    /// The server on an io_uring driver (`serve_pipe` per connection, as `main --transport
    /// uring` runs it); `None` where io_uring is unavailable and not required.
    #[cfg(all(feature = "io-uring", target_os = "linux"))]
    fn start_uring(limits: Limits) -> Option<Server> {
        // Under valgrind (scripts/valgrind.sh) the example's driver waits unbounded for
        // completions, which valgrind's one-thread-at-a-time scheduling can stall: the native run
        // covers it.
        if std::env::var_os("PACKETPIPE_UNDER_VALGRIND").is_some() {
            return None;
        }
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = thread::Builder::new()
            .name("http server (io_uring)".into())
            .spawn(move || {
                let mut driver = match packetpipe::io::uring::Driver::new() {
                    Ok(driver) => driver,
                    Err(e) => return tx.send(Err(e)).unwrap(),
                };
                driver.listen(listener).unwrap();
                tx.send(Ok(driver.handle())).unwrap();
                driver
                    .run(move |pipe| http_server::serve_pipe(pipe, limits))
                    .unwrap();
            })
            .unwrap();
        match rx.recv().unwrap() {
            Ok(handle) => Some(Server {
                addr,
                panics: Arc::default(),
                stop: Some(Box::new(move || handle.shutdown())),
                thread: Some(thread),
            }),
            Err(e) if std::env::var_os("PACKETPIPE_REQUIRE_URING").is_none() => {
                eprintln!("io_uring unavailable here ({e}); the io_uring server is not tested");
                thread.join().unwrap();
                None
            }
            Err(e) => {
                panic!("io_uring is required (PACKETPIPE_REQUIRE_URING) but unavailable: {e}")
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            stop();
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

/// Accept connections and serve each in a task of its own, counting the tasks that panic.
async fn accept_loop(listener: tokio::net::TcpListener, limits: Limits, panics: Arc<AtomicUsize>) {
    loop {
        let Ok((socket, _)) = listener.accept().await else {
            continue;
        };
        let connection = tokio::spawn(http_server::serve_tcp(socket, limits));
        let panics = panics.clone();
        tokio::spawn(async move {
            if connection.await.is_err_and(|e| e.is_panic()) {
                panics.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
}

fn small_limits() -> Limits {
    Limits {
        max_head: 1024,
        max_body: 1 << 20,
    }
}

// ---------------------------------------------------------------------------------------------
// Requests and the responses they must get, byte for byte

const HELLO: &[u8] = b"Hello, World!";

fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").into_bytes()
}

fn head(path: &str) -> Vec<u8> {
    format!("HEAD {path} HTTP/1.1\r\nHost: test\r\n\r\n").into_bytes()
}

fn post(path: &str, body: &[u8]) -> Vec<u8> {
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nHost: test\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    request
}

/// A chunked `POST`: each chunk (empty ones left out) with its size in hex (`;ext` extensions on odd chunks), a last
/// chunk, and `trailers` before the final blank line.
fn post_chunked(path: &str, chunks: &[&[u8]], trailers: &str) -> Vec<u8> {
    let mut request =
        format!("POST {path} HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n")
            .into_bytes();
    // An empty chunk would be the last one: there are none.
    for (i, chunk) in chunks.iter().filter(|c| !c.is_empty()).enumerate() {
        let size = match i % 2 {
            0 => format!("{:x}\r\n", chunk.len()),
            _ => format!("{:X};name=value;flag\r\n", chunk.len()),
        };
        request.extend_from_slice(size.as_bytes());
        request.extend_from_slice(chunk);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"0\r\n");
    request.extend_from_slice(trailers.as_bytes());
    request.extend_from_slice(b"\r\n");
    request
}

/// A response as the server writes it: `connection` is `""` (no header), `"close"` or
/// `"keep-alive"`.
fn response(status: &str, body: &[u8], connection: &str) -> Vec<u8> {
    let mut bytes = head_response(status, body.len(), connection);
    bytes.extend_from_slice(body);
    bytes
}

/// A response's head without its body (a `HEAD` response).
fn head_response(status: &str, len: usize, connection: &str) -> Vec<u8> {
    let mut bytes =
        format!("HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {len}\r\n");
    if !connection.is_empty() {
        bytes += &format!("Connection: {connection}\r\n");
    }
    bytes += "\r\n";
    bytes.into_bytes()
}

fn hello() -> Vec<u8> {
    response("200 OK", HELLO, "")
}

fn echoed(body: &[u8]) -> Vec<u8> {
    response("200 OK", body, "")
}

fn counted(len: usize) -> Vec<u8> {
    response("200 OK", len.to_string().as_bytes(), "")
}

fn not_found() -> Vec<u8> {
    response("404 Not Found", b"not found\n", "")
}

/// The refusals, each followed by a close.
fn bad_request() -> Vec<u8> {
    response("400 Bad Request", b"bad request\n", "close")
}

fn too_large() -> Vec<u8> {
    response("413 Content Too Large", b"body too large\n", "close")
}

fn head_too_large() -> Vec<u8> {
    response(
        "431 Request Header Fields Too Large",
        b"head too large\n",
        "close",
    )
}

fn not_implemented() -> Vec<u8> {
    response(
        "501 Not Implemented",
        b"transfer coding not supported\n",
        "close",
    )
}

const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// `len` bytes of a pattern that differs from `seed` to `seed`.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = XorShift64(seed | 1);
    let mut bytes = vec![0; len];
    for chunk in bytes.chunks_mut(8) {
        let word = rng.next().to_le_bytes();
        chunk.copy_from_slice(&word[..chunk.len()]);
    }
    bytes
}

// ---------------------------------------------------------------------------------------------
// The raw client

/// A blocking client that checks what it reads against exact expectations.
struct Client {
    stream: TcpStream,
    /// Bytes read and not yet checked.
    buf: Vec<u8>,
}

impl Client {
    fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_nodelay(true).unwrap();
        stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
        stream.set_write_timeout(Some(READ_TIMEOUT)).unwrap();
        Client {
            stream,
            buf: Vec::new(),
        }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("send");
    }

    /// Read once more into the buffer; `false` at the end of the stream.
    fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 64 * 1024];
        match self.stream.read(&mut chunk) {
            Ok(0) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
            Err(e) => panic!(
                "read failed ({e}) after {:?}",
                show(&self.buf[..self.buf.len().min(300)])
            ),
        }
    }

    /// The next `want.len()` bytes are `want`.
    fn expect(&mut self, want: &[u8]) {
        while self.buf.len() < want.len() {
            if !self.fill() {
                panic!(
                    "the connection ended after {:?}, expecting {:?}",
                    show(&self.buf),
                    show(&want[..want.len().min(300)])
                );
            }
        }
        let got: Vec<u8> = self.buf.drain(..want.len()).collect();
        if got != want {
            let at = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(0);
            let from = at.saturating_sub(100);
            panic!(
                "wrong response bytes from offset {at} of {}: got {:?}, want {:?}",
                want.len(),
                show(&got[from..(at + 200).min(got.len())]),
                show(&want[from..(at + 200).min(want.len())]),
            );
        }
    }

    /// The server closes the connection with nothing more to read.
    fn expect_eof(&mut self) {
        while self.fill() {}
        assert!(
            self.buf.is_empty(),
            "bytes before the close: {:?}",
            show(&self.buf)
        );
    }

    /// Everything until the server closes the connection (or resets it).
    fn until_closed(&mut self) -> Vec<u8> {
        let mut chunk = [0u8; 64 * 1024];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => return std::mem::take(&mut self.buf),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::ConnectionReset => {
                    return std::mem::take(&mut self.buf)
                }
                Err(e) => panic!("the server did not close the connection: {e}"),
            }
        }
    }
}

fn show(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Close `stream` with a reset (`SO_LINGER` 0).
fn reset(stream: TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: `linger` outlives the call and its size is passed; the fd is the stream's.
    let rc = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&stream),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0);
    drop(stream);
}

/// A fresh connection is served (the server survived whatever came before).
fn still_serving(addr: SocketAddr) {
    let mut client = Client::connect(addr);
    client.send(&get("/"));
    client.expect(&hello());
    client.send(&post("/echo", b"still here"));
    client.expect(&echoed(b"still here"));
}

// ---------------------------------------------------------------------------------------------
// Raw-client cases (run against both transports where noted)

fn keep_alive(addr: SocketAddr) {
    let mut client = Client::connect(addr);
    for i in 0..20 {
        client.send(&get("/"));
        client.expect(&hello());
        client.send(&head("/"));
        client.expect(&head_response("200 OK", HELLO.len(), ""));
        let body = pattern(i * 37, i as u64);
        client.send(&post("/echo", &body));
        client.expect(&echoed(&body));
        client.send(&post("/upload", &body));
        client.expect(&counted(body.len()));
        client.send(&get("/missing?x=1"));
        client.expect(&not_found());
        client.send(&head("/missing"));
        client.expect(&head_response("404 Not Found", 10, ""));
        client.send(b"DELETE / HTTP/1.1\r\nHost: test\r\n\r\n");
        client.expect(&response(
            "405 Method Not Allowed",
            b"method not allowed\n",
            "",
        ));
        client.send(&get("/?query=string"));
        client.expect(&hello());
    }
}

/// 100 requests of every kind in one write; the responses in order, byte for byte.
fn pipelining(addr: SocketAddr) {
    let mut client = Client::connect(addr);
    let (mut requests, mut responses) = (Vec::new(), Vec::new());
    for i in 0..100 {
        let body = pattern(i * 53 % 3000, i as u64);
        let (request, reply) = match i % 7 {
            0 => (get("/"), hello()),
            1 => (head("/"), head_response("200 OK", HELLO.len(), "")),
            2 => (post("/echo", &body), echoed(&body)),
            3 => (post("/count", &body), counted(body.len())),
            4 => (get("/nowhere"), not_found()),
            5 => (
                post_chunked(
                    "/echo",
                    &[&body[..body.len() / 3], &body[body.len() / 3..]],
                    "",
                ),
                echoed(&body),
            ),
            _ => (
                b"PUT /echo HTTP/1.1\r\nHost: test\r\nContent-Length: 3\r\n\r\nabc".to_vec(),
                response("405 Method Not Allowed", b"method not allowed\n", ""),
            ),
        };
        requests.extend_from_slice(&request);
        responses.extend_from_slice(&reply);
    }
    client.send(&requests);
    client.expect(&responses);
    // Nothing more came, and the connection is still open.
    client.send(&get("/"));
    client.expect(&hello());
    assert!(client.buf.is_empty());
}

/// Every request split in two at every byte offset, on one keep-alive connection: a head, a
/// head with a body, and a chunked body.
fn split_at_every_byte(addr: SocketAddr) {
    let mut client = Client::connect(addr);
    let body = pattern(100, 7);
    let cases = [
        (
            b"GET /?a=b HTTP/1.1\r\nHost: test\r\nUser-Agent: split\r\nAccept: */*\r\n\r\n"
                .to_vec(),
            hello(),
        ),
        (post("/echo", &body), echoed(&body)),
        (
            post_chunked(
                "/echo",
                &[&body[..40], &body[40..41], &body[41..]],
                "X-Sum: 1\r\n",
            ),
            echoed(&body),
        ),
    ];
    for (request, reply) in &cases {
        for at in 1..request.len() {
            client.send(&request[..at]);
            thread::sleep(Duration::from_micros(300));
            client.send(&request[at..]);
            client.expect(reply);
        }
    }
}

/// A large body, above the copy threshold, echoed byte for byte (and counted).
fn large_body(addr: SocketAddr) {
    let body = Arc::new(pattern(6 << 20, 11));
    let mut client = Client::connect(addr);
    for path in ["/echo", "/count"] {
        let mut writer = client.stream.try_clone().unwrap();
        let request = post(path, &body);
        let sending = thread::spawn(move || {
            // In uneven pieces, so the body spans blocks at odd places.
            for piece in request.chunks(100_003) {
                writer.write_all(piece).unwrap();
            }
        });
        match path {
            "/echo" => client.expect(&echoed(&body)),
            _ => client.expect(&counted(body.len())),
        }
        sending.join().unwrap();
    }
}

fn chunked_bodies(addr: SocketAddr) {
    let mut client = Client::connect(addr);
    // Several chunks, extensions, trailers.
    client.send(&post_chunked(
        "/echo",
        &[b"Hello", b", ", b"chunked ", b"World!"],
        "X-Trailer: one\r\nX-Other: two\r\n",
    ));
    client.expect(&echoed(b"Hello, chunked World!"));
    // No chunk but the last one.
    client.send(&post_chunked("/echo", &[], ""));
    client.expect(&echoed(b""));
    // A chunked body counted, then a request behind it in the same write.
    let mut both = post_chunked("/count", &[b"abc", b"defg"], "");
    both.extend_from_slice(&get("/"));
    client.send(&both);
    client.expect(&counted(7));
    client.expect(&hello());
    // A large chunked body of uneven chunks, sent in pieces that cut the size lines.
    let body = pattern(3 << 20, 5);
    let mut rng = XorShift64(99);
    let mut chunks = Vec::new();
    let mut at = 0;
    while at < body.len() {
        let len = (1 + rng.below(200_000)).min(body.len() - at);
        chunks.push(&body[at..at + len]);
        at += len;
    }
    let request = post_chunked("/echo", &chunks, "");
    let mut writer = client.stream.try_clone().unwrap();
    let sending = thread::spawn(move || {
        for piece in request.chunks(65_521) {
            writer.write_all(piece).unwrap();
        }
    });
    client.expect(&echoed(&body));
    sending.join().unwrap();
}

/// The client waits for `100 Continue` before it sends the body.
fn expect_continue(addr: SocketAddr) {
    let mut client = Client::connect(addr);
    let body = pattern(5000, 3);
    for _ in 0..3 {
        client.send(
            format!(
                "POST /echo HTTP/1.1\r\nHost: test\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n",
                body.len()
            )
            .as_bytes(),
        );
        client.expect(CONTINUE);
        client.send(&body);
        client.expect(&echoed(&body));
    }
    // Chunked.
    client.send(
        b"POST /echo HTTP/1.1\r\nHost: test\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n",
    );
    client.expect(CONTINUE);
    client.send(b"3\r\nabc\r\n0\r\n\r\n");
    client.expect(&echoed(b"abc"));
    // Behind another request in the same write.
    let mut requests = get("/");
    requests.extend_from_slice(
        b"POST /count HTTP/1.1\r\nHost: test\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n",
    );
    client.send(&requests);
    client.expect(&hello());
    client.expect(CONTINUE);
    client.send(b"12345");
    client.expect(&counted(5));
    // A body that came with its head needs no interim response.
    client.send(
        b"POST /echo HTTP/1.1\r\nHost: test\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi",
    );
    client.expect(&echoed(b"hi"));
}

/// `Connection: close`: the response says so, then the connection ends, even with another
/// request behind it.
fn connection_close(addr: SocketAddr) {
    let mut client = Client::connect(addr);
    client.send(&get("/"));
    client.expect(&hello());
    let mut requests = b"GET / HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n".to_vec();
    requests.extend_from_slice(&get("/"));
    client.send(&requests);
    client.expect(&response("200 OK", HELLO, "close"));
    client.expect_eof();
    // With a body, and among other tokens.
    let mut client = Client::connect(addr);
    client.send(b"POST /echo HTTP/1.1\r\nHost: test\r\nConnection: upgrade, Close\r\nContent-Length: 4\r\n\r\nbody");
    client.expect(&response("200 OK", b"body", "close"));
    client.expect_eof();
}

/// A head over the limit gets `431` and a close, though the client goes on sending: the server
/// reads what follows instead of resetting the connection.
fn head_over_limit(addr: SocketAddr, max_head: usize) {
    let mut client = Client::connect(addr);
    let mut request = b"GET / HTTP/1.1\r\nHost: test\r\n".to_vec();
    while request.len() < 1 << 20 {
        request.extend_from_slice(b"X-Filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
    }
    assert!(request.len() > max_head);
    let mut writer = client.stream.try_clone().unwrap();
    let sending = thread::spawn(move || writer.write_all(&request));
    client.expect(&head_too_large());
    client.expect_eof();
    sending
        .join()
        .unwrap()
        .expect("the server read everything the client sent");
}

fn malformed(addr: SocketAddr) {
    for request in [
        &b"GET /\r\n\r\n"[..],
        b"GET / HTTP/1.1 extra\r\nHost: test\r\n\r\n",
        b"G\x01T / HTTP/1.1\r\nHost: test\r\n\r\n",
        b"GET / HTTP/9.9\r\nHost: test\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost test\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: test\r\n folded\r\n\r\n",
        b"\0",
    ] {
        eprintln!("malformed request {:?}", show(request));
        let mut client = Client::connect(addr);
        client.send(request);
        // Whatever the client sends after a refusal is read and dropped.
        client.send(&get("/"));
        client.expect(&bad_request());
        client.expect_eof();
    }
    // Empty lines before a request line are ignored (RFC 9112, section 2.2).
    let mut client = Client::connect(addr);
    client.send(b"\r\n\r\nGET / HTTP/1.1\r\nHost: test\r\n\r\n");
    client.expect(&hello());
}

// ---------------------------------------------------------------------------------------------
// Raw-client tests

#[test]
fn keep_alive_requests_on_one_connection() {
    let server = Server::start(Limits::default());
    keep_alive(server.addr);
}

#[test]
fn a_hundred_pipelined_requests_answered_in_order() {
    let server = Server::start(Limits::default());
    pipelining(server.addr);
}

#[test]
fn heads_and_chunk_lines_across_block_boundaries() {
    let server = Server::start(Limits::default());
    across_block_boundaries(server.addr);
}

fn across_block_boundaries(addr: SocketAddr) {
    // Thousands of pipelined requests of lengths that step through every offset, so heads (parsed
    // from a copy when they span segments), bodies and chunk-size lines straddle the receive
    // blocks' ends at many places.
    let mut client = Client::connect(addr);
    let (mut requests, mut responses) = (Vec::new(), Vec::new());
    for i in 0..6000 {
        let pad = "p".repeat(i % 97);
        let (request, reply) = match i % 3 {
            0 => (
                format!("GET / HTTP/1.1\r\nHost: test\r\nX-Pad: {pad}\r\n\r\n").into_bytes(),
                hello(),
            ),
            1 => (post("/echo", pad.as_bytes()), echoed(pad.as_bytes())),
            _ => {
                let body = pattern(i % 89, i as u64);
                let (a, b) = body.split_at(body.len() / 2);
                (
                    post_chunked("/echo", &[a, b], &format!("X-Pad: {pad}\r\n")),
                    echoed(&body),
                )
            }
        };
        requests.extend_from_slice(&request);
        responses.extend_from_slice(&reply);
    }
    let mut writer = client.stream.try_clone().unwrap();
    let sending = thread::spawn(move || writer.write_all(&requests).unwrap());
    client.expect(&responses);
    sending.join().unwrap();
}

#[test]
fn requests_split_at_every_byte() {
    let server = Server::start(Limits::default());
    split_at_every_byte(server.addr);
}

#[test]
fn a_request_trickled_one_byte_per_write() {
    let server = Server::start(Limits::default());
    let mut client = Client::connect(server.addr);
    let body = pattern(2500, 1);
    for request in [
        post("/echo", &body),
        post_chunked("/echo", &[&body[..1000], &body[1000..]], "T: 1\r\n"),
    ] {
        for (i, byte) in request.iter().enumerate() {
            client.send(&[*byte]);
            if i % 16 == 0 {
                thread::sleep(Duration::from_micros(200));
            }
        }
        client.expect(&echoed(&body));
    }
}

#[test]
fn a_body_of_several_mebibytes_echoed_exactly() {
    let server = Server::start(Limits::default());
    large_body(server.addr);
}

#[test]
fn chunked_bodies_decoded() {
    let server = Server::start(Limits::default());
    chunked_bodies(server.addr);
}

#[test]
fn expect_100_continue_before_the_body() {
    let server = Server::start(Limits::default());
    expect_continue(server.addr);
}

#[test]
fn connection_close_answers_then_closes() {
    let server = Server::start(Limits::default());
    connection_close(server.addr);
}

#[test]
fn http_1_0_with_and_without_keep_alive() {
    let server = Server::start(Limits::default());
    // Without: answered, then closed. No Host needed.
    let mut client = Client::connect(server.addr);
    client.send(b"GET / HTTP/1.0\r\n\r\n");
    client.expect(&response("200 OK", HELLO, "close"));
    client.expect_eof();
    // With: the response says keep-alive, and the connection serves more.
    let mut client = Client::connect(server.addr);
    for _ in 0..3 {
        client.send(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n");
        client.expect(&response("200 OK", HELLO, "keep-alive"));
        client
            .send(b"POST /echo HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 3\r\n\r\nxyz");
        client.expect(&response("200 OK", b"xyz", "keep-alive"));
    }
    client.send(b"GET / HTTP/1.0\r\n\r\n");
    client.expect(&response("200 OK", HELLO, "close"));
    client.expect_eof();
    // `close` wins over `keep-alive`, in either order (RFC 9112, section 9.3).
    for request in [
        &b"GET / HTTP/1.0\r\nConnection: close, keep-alive\r\n\r\n"[..],
        b"GET / HTTP/1.0\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n",
        b"GET / HTTP/1.0\r\nConnection: close\r\nConnection: keep-alive\r\n\r\n",
    ] {
        let mut client = Client::connect(server.addr);
        client.send(request);
        client.expect(&response("200 OK", HELLO, "close"));
        client.expect_eof();
    }
}

#[test]
fn a_malformed_request_gets_400_and_a_close() {
    let server = Server::start(Limits::default());
    malformed(server.addr);
    // A good request first: answered, then the bad one refused.
    let mut client = Client::connect(server.addr);
    let mut requests = get("/");
    requests.extend_from_slice(b"GET\r\n\r\n");
    client.send(&requests);
    client.expect(&hello());
    client.expect(&bad_request());
    client.expect_eof();
    still_serving(server.addr);
}

#[test]
fn a_missing_or_repeated_host_gets_400() {
    let server = Server::start(Limits::default());
    for request in [
        &b"GET / HTTP/1.1\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi",
    ] {
        let mut client = Client::connect(server.addr);
        client.send(request);
        client.expect(&bad_request());
        client.expect_eof();
    }
}

#[test]
fn a_head_over_the_limit_gets_431_though_the_client_sends_more() {
    let server = Server::start(small_limits());
    head_over_limit(server.addr, small_limits().max_head);
    // A head of exactly the limit is served, one byte more is refused, whether it arrives whole
    // or with the limit's worth first.
    let exactly = |len: usize| {
        let mut request = b"GET / HTTP/1.1\r\nHost: test\r\nX-Pad: ".to_vec();
        request.resize(len - 4, b'p');
        request.extend_from_slice(b"\r\n\r\n");
        request
    };
    let max_head = small_limits().max_head;
    let mut client = Client::connect(server.addr);
    for split in [false, true] {
        let request = exactly(max_head);
        if split {
            client.send(&request[..max_head - 1]);
            thread::sleep(Duration::from_millis(5));
        }
        client.send(&request[usize::from(split) * (max_head - 1)..]);
        client.expect(&hello());
    }
    let mut client = Client::connect(server.addr);
    client.send(&exactly(max_head + 1)[..max_head]);
    client.expect(&head_too_large());
    client.expect_eof();
    // More than 64 header lines, within the size limit: 431; 64 of them: served.
    let server = Server::start(Limits::default());
    let with_headers = |n: usize| {
        let mut request = b"GET / HTTP/1.1\r\nHost: test\r\n".to_vec();
        for i in 1..n {
            request.extend_from_slice(format!("X-H{i}: v\r\n").as_bytes());
        }
        request.extend_from_slice(b"\r\n");
        request
    };
    let mut client = Client::connect(server.addr);
    client.send(&with_headers(64));
    client.expect(&hello());
    client.send(&with_headers(65));
    client.expect(&head_too_large());
    client.expect_eof();
}

#[test]
fn a_body_over_the_limit_gets_413() {
    let limits = small_limits();
    let server = Server::start(limits);
    // By Content-Length: refused at the head, while the client sends the body.
    let body = pattern(limits.max_body + 1, 2);
    let mut client = Client::connect(server.addr);
    let mut writer = client.stream.try_clone().unwrap();
    let request = post("/echo", &body);
    let sending = thread::spawn(move || writer.write_all(&request));
    client.expect(&too_large());
    client.expect_eof();
    sending
        .join()
        .unwrap()
        .expect("the server read the body it refused");
    // Chunked: refused once the chunks pass the limit.
    let mut client = Client::connect(server.addr);
    let mut writer = client.stream.try_clone().unwrap();
    let request = post_chunked("/echo", &[&body[..1000], &body[1000..]], "");
    let sending = thread::spawn(move || writer.write_all(&request));
    client.expect(&too_large());
    client.expect_eof();
    sending
        .join()
        .unwrap()
        .expect("the server read the body it refused");
    // At the limit: served.
    let mut client = Client::connect(server.addr);
    client.send(&post("/count", &body[..limits.max_body]));
    client.expect(&counted(limits.max_body));
    // A length with more digits than any body can have.
    let mut client = Client::connect(server.addr);
    client.send(
        b"POST /echo HTTP/1.1\r\nHost: test\r\nContent-Length: 99999999999999999999999\r\n\r\n",
    );
    client.expect(&too_large());
    client.expect_eof();
}

#[test]
fn absolute_form_targets_are_routed_by_their_path() {
    let server = Server::start(Limits::default());
    let mut client = Client::connect(server.addr);
    client.send(b"GET http://test/ HTTP/1.1\r\nHost: test\r\n\r\n");
    client.expect(&hello());
    client.send(b"GET http://test HTTP/1.1\r\nHost: test\r\n\r\n");
    client.expect(&hello());
    client.send(
        b"POST http://test:8080/echo?x=1 HTTP/1.1\r\nHost: test\r\nContent-Length: 2\r\n\r\nhi",
    );
    client.expect(&echoed(b"hi"));
    client.send(b"GET https://test/elsewhere HTTP/1.1\r\nHost: test\r\n\r\n");
    client.expect(&not_found());
}

#[test]
fn other_transfer_codings_get_501_and_both_framings_400() {
    let server = Server::start(Limits::default());
    for (request, reply) in [
        (
            &b"POST /echo HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: gzip\r\n\r\n"[..],
            not_implemented(),
        ),
        (
            b"POST /echo HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            not_implemented(),
        ),
        (
            b"POST /echo HTTP/1.1\r\nHost: test\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
            bad_request(),
        ),
        (
            b"POST /echo HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
            bad_request(),
        ),
        (
            b"POST /echo HTTP/1.1\r\nHost: test\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
            bad_request(),
        ),
        (
            b"POST /echo HTTP/1.1\r\nHost: test\r\nContent-Length: -3\r\n\r\n",
            bad_request(),
        ),
        (
            b"POST /echo HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            bad_request(),
        ),
        (
            b"POST /echo HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n",
            bad_request(),
        ),
    ] {
        let mut client = Client::connect(server.addr);
        client.send(request);
        client.expect(&reply);
        client.expect_eof();
    }
    // The same length twice is one length.
    let mut client = Client::connect(server.addr);
    client.send(
        b"POST /echo HTTP/1.1\r\nHost: test\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
    );
    client.expect(&echoed(b"abc"));
}

#[test]
fn a_half_closed_client_gets_its_responses_then_the_end() {
    let server = Server::start(Limits::default());
    let mut client = Client::connect(server.addr);
    client.send(&get("/"));
    client.stream.shutdown(Shutdown::Write).unwrap();
    client.expect(&hello());
    client.expect_eof();
    // Three pipelined, the last with a body.
    let mut client = Client::connect(server.addr);
    let mut requests = get("/");
    requests.extend_from_slice(&head("/"));
    requests.extend_from_slice(&post("/echo", b"last"));
    client.send(&requests);
    client.stream.shutdown(Shutdown::Write).unwrap();
    client.expect(&hello());
    client.expect(&head_response("200 OK", HELLO.len(), ""));
    client.expect(&echoed(b"last"));
    client.expect_eof();
}

#[test]
fn a_request_cut_off_by_the_client_gets_no_response() {
    let server = Server::start(Limits::default());
    for partial in [
        &b"GET / HTTP/1.1\r\nHost: te"[..],
        b"POST /echo HTTP/1.1\r\nHost: test\r\nContent-Length: 100\r\n\r\nonly some",
        b"POST /echo HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nabc",
    ] {
        // Closed after the part: nothing to answer.
        let mut client = Client::connect(server.addr);
        client.send(partial);
        client.stream.shutdown(Shutdown::Write).unwrap();
        client.expect_eof();
        // Dropped (a plain close), with the server waiting for the rest.
        let mut client = Client::connect(server.addr);
        client.send(partial);
        thread::sleep(Duration::from_millis(20));
        drop(client);
        still_serving(server.addr);
    }
}

// ---------------------------------------------------------------------------------------------
// curl

fn require(binary: &str, package: &str) {
    let found = Command::new(binary)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    assert!(
        found,
        "`{binary}` is missing: install Debian's {package} (apt-get install -y {package}) to run \
         the HTTP client tests"
    );
}

/// Run `command` to completion within `limit`, killing it past that.
fn run_bounded(mut command: Command, limit: Duration) -> Output {
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn a client");
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
    waiter.join().unwrap().expect("the client ran")
}

/// `curl` with `args`, successful, within 60 s.
fn curl(args: &[&str]) -> Output {
    let mut command = Command::new("curl");
    command.args(["-sS", "--max-time", "50"]).args(args);
    let output = run_bounded(command, Duration::from_secs(60));
    assert!(
        output.status.success(),
        "curl {args:?}: {}\n{}",
        show(&output.stdout),
        show(&output.stderr)
    );
    output
}

/// A directory of this process's own, removed on drop.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    fn file(&self, name: &str) -> String {
        self.0.join(name).to_str().unwrap().to_string()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn curl_get_and_head() {
    require("curl", "curl");
    let server = Server::start(Limits::default());
    let url = format!("http://{}/", server.addr);
    let output = curl(&["-i", &url]);
    assert_eq!(show(&output.stdout), show(&hello()));
    let output = curl(&["-I", &url]);
    assert_eq!(
        show(&output.stdout),
        show(&head_response("200 OK", HELLO.len(), ""))
    );
    let output = curl(&[
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        &format!("{url}missing"),
    ]);
    assert_eq!(show(&output.stdout), "404");
    let output = curl(&[
        "-X",
        "DELETE",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        &url,
    ]);
    assert_eq!(show(&output.stdout), "405");
    let output = curl(&["--http1.0", "-i", &url]);
    assert_eq!(
        show(&output.stdout),
        show(&response("200 OK", HELLO, "close"))
    );
}

#[test]
fn curl_reuses_the_connection() {
    require("curl", "curl");
    let server = Server::start(Limits::default());
    let url = format!("http://{}/", server.addr);
    let output = curl(&[
        "-v",
        "-w",
        "[%{http_code} %{num_connects}]",
        &url,
        &format!("{url}?second"),
        &url,
    ]);
    let hello = show(HELLO);
    assert_eq!(
        show(&output.stdout),
        format!("{hello}[200 1]{hello}[200 0]{hello}[200 0]")
    );
    let log = show(&output.stderr);
    assert_eq!(
        log.matches("Re-using existing connection").count(),
        2,
        "{log}"
    );
}

#[test]
fn curl_uploads_several_mebibytes() {
    require("curl", "curl");
    let server = Server::start(Limits::default());
    let dir = TempDir::new("http-clients-curl");
    let (upload, echoed_file) = (dir.file("upload"), dir.file("echoed"));
    let body = pattern(5 << 20, 13);
    std::fs::write(&upload, &body).unwrap();
    let url = format!("http://{}/echo", server.addr);
    // By Content-Length: curl asks for `100 Continue` on a body this large.
    let output = curl(&[
        "-v",
        "--data-binary",
        &format!("@{upload}"),
        "-o",
        &echoed_file,
        &url,
    ]);
    assert!(
        std::fs::read(&echoed_file).unwrap() == body,
        "the body came back changed"
    );
    let log = show(&output.stderr);
    assert!(log.contains("Expect: 100-continue"), "{log}");
    assert!(log.contains("HTTP/1.1 100 Continue"), "{log}");
    // Chunked.
    std::fs::remove_file(&echoed_file).unwrap();
    let output = curl(&[
        "-v",
        "-H",
        "Transfer-Encoding: chunked",
        "--data-binary",
        &format!("@{upload}"),
        "-o",
        &echoed_file,
        &url,
    ]);
    assert!(
        std::fs::read(&echoed_file).unwrap() == body,
        "the chunked body came back changed"
    );
    let log = show(&output.stderr);
    assert!(log.contains("Transfer-Encoding: chunked"), "{log}");
    // Counted.
    let output = curl(&[
        "--data-binary",
        &format!("@{upload}"),
        &format!("http://{}/count", server.addr),
    ]);
    assert_eq!(show(&output.stdout), body.len().to_string());
}

// ---------------------------------------------------------------------------------------------
// wrk

/// Counts the responses whose status is 200 and whose body is `Hello, World!` in each thread,
/// and prints the totals and wrk's error counts in `done`. `PIPELINE` is replaced by the
/// requests per write (0: wrk's own single request).
const WRK_SCRIPT: &str = r#"
local threads = {}
local depth = PIPELINE

function setup(thread)
   table.insert(threads, thread)
end

function init(args)
   good, bad = 0, 0
   if depth > 0 then
      local r = {}
      for i = 1, depth do
         if i % 2 == 0 then
            r[i] = wrk.format("POST", "/echo", nil, "Hello, World!")
         else
            r[i] = wrk.format("GET", "/")
         end
      end
      pipelined = table.concat(r)
   end
end

if depth > 0 then
   request = function()
      return pipelined
   end
end

function response(status, headers, body)
   if status == 200 and body == "Hello, World!" then
      good = good + 1
   else
      bad = bad + 1
   end
end

function done(summary, latency, requests)
   local good, bad = 0, 0
   for _, thread in ipairs(threads) do
      good = good + thread:get("good")
      bad = bad + thread:get("bad")
   end
   local e = summary.errors
   io.write(string.format("checked: good %d bad %d\n", good, bad))
   io.write(string.format("errors: connect %d read %d write %d status %d timeout %d\n",
      e.connect, e.read, e.write, e.status, e.timeout))
   io.write(string.format("requests: %d\n", summary.requests))
end
"#;

fn wrk(depth: usize) {
    require("wrk", "wrk");
    let server = Server::start(Limits::default());
    let dir = TempDir::new(&format!("http-clients-wrk-{depth}"));
    let script = dir.file("check.lua");
    std::fs::write(&script, WRK_SCRIPT.replace("PIPELINE", &depth.to_string())).unwrap();
    let mut command = Command::new("wrk");
    command
        .args(["-t1", "-c16", "-d1s", "--timeout", "10s", "-s", &script])
        .arg(format!("http://{}/", server.addr));
    let output = run_bounded(command, Duration::from_secs(60));
    let text = show(&output.stdout);
    assert!(output.status.success(), "{text}\n{}", show(&output.stderr));
    assert!(!text.contains("Non-2xx or 3xx responses"), "{text}");
    assert!(!text.contains("Socket errors"), "{text}");
    assert!(
        text.contains("errors: connect 0 read 0 write 0 status 0 timeout 0\n"),
        "{text}"
    );
    let number = |label: &str| -> u64 {
        let line = text
            .lines()
            .find_map(|line| line.strip_prefix(label))
            .unwrap_or_else(|| panic!("no {label:?} line: {text}"));
        line.split_whitespace().next().unwrap().parse().unwrap()
    };
    let (good, requests) = (number("checked: good "), number("requests: "));
    println!("{text}");
    assert!(requests > 0, "{text}");
    assert!(
        text.contains("checked: good ") && text.contains(" bad 0\n"),
        "{text}"
    );
    // Every response wrk counted was checked (and a connection's last, unfinished responses
    // were neither).
    assert_eq!(good, requests, "{text}");
    if depth > 0 {
        assert!(requests >= depth as u64, "{text}");
    }
}

#[test]
fn wrk_plain_every_response_200() {
    wrk(0);
}

#[test]
fn wrk_pipelined_16_every_response_200() {
    wrk(16);
}

// ---------------------------------------------------------------------------------------------
// Hostile inputs

/// Does `bytes` hold zero or more whole responses, each one the server can give?
fn only_whole_responses(mut bytes: &[u8]) -> Result<usize, String> {
    let mut count = 0;
    while !bytes.is_empty() {
        let mut headers = [httparse::EMPTY_HEADER; 8];
        let mut parsed = httparse::Response::new(&mut headers);
        let len = match parsed.parse(bytes) {
            Ok(httparse::Status::Complete(len)) => len,
            other => return Err(format!("not a response ({other:?}): {:?}", show(bytes))),
        };
        if ![200, 400, 404, 405, 413, 431, 501].contains(&parsed.code.unwrap()) {
            return Err(format!("unexpected status: {:?}", show(bytes)));
        }
        let body: usize = parsed
            .headers
            .iter()
            .find(|h| h.name == "Content-Length")
            .and_then(|h| std::str::from_utf8(h.value).ok()?.parse().ok())
            .ok_or_else(|| format!("no length: {:?}", show(bytes)))?;
        if bytes.len() < len + body {
            return Err(format!("cut short: {:?}", show(bytes)));
        }
        bytes = &bytes[len + body..];
        count += 1;
    }
    Ok(count)
}

#[test]
fn random_bytes_are_refused_and_the_server_goes_on() {
    let server = Server::start(small_limits());
    let mut rng = XorShift64(0x5eed_1234_abcd_0001);
    let mut refused = 0;
    for i in 0..60 {
        let mut input = match i % 3 {
            0 => Vec::new(),
            1 => b"GET / HTTP/1.1\r\nHost: test\r\n".to_vec(),
            _ => get("/"),
        };
        let len = 1 + rng.below(4000);
        input.extend(rng.bytes(len));
        let mut client = Client::connect(server.addr);
        client.send(&input);
        client.stream.shutdown(Shutdown::Write).unwrap();
        let received = client.until_closed();
        let count = only_whole_responses(&received)
            .unwrap_or_else(|e| panic!("input {i} ({len} random bytes): {e}"));
        if i % 3 == 2 {
            assert!(
                received.starts_with(&hello()),
                "input {i}: {:?}",
                show(&received)
            );
        }
        refused += usize::from(count > 0 && !received.ends_with(&hello()));
    }
    assert!(
        refused >= 30,
        "only {refused} of 60 random inputs were refused"
    );
    still_serving(server.addr);
}

#[test]
fn resets_mid_head_and_mid_body() {
    let server = Server::start(Limits::default());
    let big = pattern(4 << 20, 17);
    for round in 0..5 {
        // Mid-head.
        let mut client = Client::connect(server.addr);
        client.send(b"GET / HTTP/1.1\r\nHost: test\r\nX-Partial: abc");
        thread::sleep(Duration::from_millis(10));
        reset(client.stream);
        // Mid-body, by length and chunked.
        let mut client = Client::connect(server.addr);
        client.send(&post("/echo", &big)[..100_000 + round * 1000]);
        thread::sleep(Duration::from_millis(10));
        reset(client.stream);
        let mut client = Client::connect(server.addr);
        client.send(&post_chunked("/echo", &[&big[..50_000], &big[50_000..]], "")[..70_000]);
        thread::sleep(Duration::from_millis(10));
        reset(client.stream);
        // While the server writes a large response.
        let mut client = Client::connect(server.addr);
        client.send(&post("/echo", &big));
        thread::sleep(Duration::from_millis(10));
        reset(client.stream);
        // After pipelined requests whose responses are not read.
        let mut client = Client::connect(server.addr);
        client.send(&get("/").repeat(50));
        reset(client.stream);
        still_serving(server.addr);
    }
}

#[test]
fn a_slowloris_does_not_hold_up_other_clients() {
    const SLOW: usize = 8;
    let server = Server::start(Limits::default());
    let addr = server.addr;
    let finished = Arc::new(AtomicUsize::new(0));
    let slow: Vec<_> = (0..SLOW)
        .map(|i| {
            let finished = finished.clone();
            thread::spawn(move || {
                let request = format!(
                    "POST /echo HTTP/1.1\r\nHost: slow\r\nX-Client: {i}\r\nContent-Length: 4\r\n\r\nslow"
                );
                let mut client = Client::connect(addr);
                // About two seconds for the whole request.
                for byte in request.as_bytes() {
                    client.send(&[*byte]);
                    thread::sleep(Duration::from_millis(2000 / request.len() as u64));
                }
                client.expect(&echoed(b"slow"));
                finished.fetch_add(1, Ordering::Relaxed);
            })
        })
        .collect();
    let mut client = Client::connect(addr);
    let (mut served, mut served_while_all_slow) = (0, 0);
    while finished.load(Ordering::Relaxed) < SLOW {
        let body = pattern(served % 5000, served as u64);
        client.send(&post("/echo", &body));
        client.expect(&echoed(&body));
        let mut fresh = Client::connect(addr);
        fresh.send(&get("/"));
        fresh.expect(&hello());
        served += 1;
        if finished.load(Ordering::Relaxed) == 0 {
            served_while_all_slow = served;
        }
        thread::sleep(Duration::from_millis(5));
    }
    for thread in slow {
        thread.join().unwrap();
    }
    assert!(
        served_while_all_slow > 0,
        "no request was served while the slow heads were incomplete"
    );
}

// ---------------------------------------------------------------------------------------------
// Allocations

/// Write `batch`, read `replies.len()` bytes, `rounds` times; check the replies if `checked`.
async fn rounds(
    socket: &mut tokio::net::TcpStream,
    batch: &[u8],
    replies: &[u8],
    received: &mut [u8],
    rounds: usize,
    checked: bool,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    for _ in 0..rounds {
        socket.write_all(batch).await.unwrap();
        socket.read_exact(received).await.unwrap();
        if checked {
            assert!(received == replies, "wrong responses: {:?}", show(received));
        }
    }
}

#[test]
fn steady_state_requests_allocate_nothing() {
    // One request at a time; 16 of every kind per write; large bodies (above the copy
    // threshold, echoed zero-copy), 4 per write.
    let small = pattern(300, 1);
    let large = pattern(100_000, 2);
    let mut mixed = (Vec::new(), Vec::new());
    for i in 0..16 {
        let (request, reply) = match i % 6 {
            0 => (get("/"), hello()),
            1 => (head("/"), head_response("200 OK", HELLO.len(), "")),
            2 => (post("/echo", &small), echoed(&small)),
            3 => (post("/count", &small), counted(small.len())),
            4 => (get("/nowhere"), not_found()),
            _ => (
                post_chunked("/echo", &[&small[..100], &small[100..]], "T: 1\r\n"),
                echoed(&small),
            ),
        };
        mixed.0.extend_from_slice(&request);
        mixed.1.extend_from_slice(&reply);
    }
    let workloads = [
        ("one GET at a time", get("/"), hello(), 1000),
        ("16 mixed requests per write", mixed.0, mixed.1, 200),
        (
            "4 echoes of 100 KB per write",
            post("/echo", &large).repeat(4),
            echoed(&large).repeat(4),
            40,
        ),
    ];
    // Server and client on this thread, on one current-thread runtime: this thread's
    // allocations are all the server's and the client's (which allocates nothing per round).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let panics = Arc::new(AtomicUsize::new(0));
    let results = runtime.block_on(async {
        tokio::time::timeout(Duration::from_secs(120), async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let server = tokio::spawn(accept_loop(listener, Limits::default(), panics.clone()));
            let mut results = Vec::new();
            for (name, batch, replies, count) in &workloads {
                let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
                socket.set_nodelay(true).unwrap();
                let mut received = vec![0; replies.len()];
                rounds(&mut socket, batch, replies, &mut received, *count, true).await;
                let before = counting_alloc::allocations();
                rounds(&mut socket, batch, replies, &mut received, *count, false).await;
                let allocations = counting_alloc::allocations() - before;
                assert!(received == *replies, "{name}: wrong responses");
                println!("{name}: {allocations} allocations in {count} rounds");
                results.push((*name, allocations));
            }
            server.abort();
            results
        })
        .await
        .expect("the measurement did not finish within two minutes")
    });
    assert_eq!(panics.load(Ordering::Relaxed), 0);
    for (name, allocations) in results {
        assert_eq!(allocations, 0, "{name}: allocations in steady state");
    }
}

// ---------------------------------------------------------------------------------------------
// io_uring

#[cfg(all(feature = "io-uring", target_os = "linux"))]
#[test]
fn the_io_uring_transport_serves_the_same() {
    let Some(server) = Server::start_uring(Limits::default()) else {
        return;
    };
    keep_alive(server.addr);
    pipelining(server.addr);
    across_block_boundaries(server.addr);
    split_at_every_byte(server.addr);
    large_body(server.addr);
    chunked_bodies(server.addr);
    expect_continue(server.addr);
    connection_close(server.addr);
    malformed(server.addr);
    drop(server);
    let Some(server) = Server::start_uring(small_limits()) else {
        return;
    };
    head_over_limit(server.addr, small_limits().max_head);
    still_serving(server.addr);
}
