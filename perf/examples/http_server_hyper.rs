//! The HTTP/1.1 keep-alive server of `examples/http_server.rs` on hyper 1.x (`http1` server
//! connections, `hyper-util`'s `TokioIo`, `http-body-util`'s `Full<Bytes>`), for comparisons.
//!
//! ```text
//! cargo run --release -p packetpipe-perf --example http_server_hyper -- [ADDR]
//! ```
//!
//! Listens on ADDR (default `127.0.0.1:8080`), prints `listening on ADDR` once it accepts, and
//! serves until killed, on one current-thread tokio runtime, with the example's routes and
//! response bytes: `GET /` (and `HEAD /`) `200` with `Hello, World!`, other paths `404`;
//! `POST /echo` the body back (collected, up to 16 MiB: `413` above), `POST` elsewhere the number
//! of body bytes; other methods `405`. Headers are written title-cased and without `Date`, so a
//! `200` is the same bytes as the other servers' (`Content-Type: text/plain`, `Content-Length`).
//! Keep-alive, `Connection: close`, malformed and oversized heads are hyper's own handling;
//! pipelined requests are answered one write per response (hyper's default: its
//! `pipeline_flush` is experimental).
#![forbid(unsafe_code)]

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

const MAX_BODY: usize = 16 << 20;
const HELLO: &[u8] = b"Hello, World!";

fn respond(status: StatusCode, body: Bytes, length: usize) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    headers.insert(CONTENT_LENGTH, HeaderValue::from(length));
    response
}

async fn handle(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let fixed = |status, text: &'static [u8], head_only: bool| match head_only {
        true => respond(status, Bytes::new(), text.len()),
        false => respond(status, Bytes::from_static(text), text.len()),
    };
    let head_only = request.method() == Method::HEAD;
    Ok(match (request.method(), request.uri().path()) {
        (&Method::GET | &Method::HEAD, "/") => fixed(StatusCode::OK, HELLO, head_only),
        (&Method::GET | &Method::HEAD, _) => {
            fixed(StatusCode::NOT_FOUND, b"not found\n", head_only)
        }
        (&Method::POST, path) => {
            let echo = path == "/echo";
            match Limited::new(request.into_body(), MAX_BODY).collect().await {
                Ok(body) => {
                    let body = body.to_bytes();
                    if echo {
                        let length = body.len();
                        respond(StatusCode::OK, body, length)
                    } else {
                        let text = Bytes::from(body.len().to_string());
                        let length = text.len();
                        respond(StatusCode::OK, text, length)
                    }
                }
                Err(_) => fixed(StatusCode::PAYLOAD_TOO_LARGE, b"body too large\n", false),
            }
        }
        _ => fixed(
            StatusCode::METHOD_NOT_ALLOWED,
            b"method not allowed\n",
            false,
        ),
    })
}

/// The connection settings: title-cased headers, no `Date`, at most 64 header lines, no timer.
pub fn builder() -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder
        .title_case_headers(true)
        .auto_date_header(false)
        .max_headers(64)
        .header_read_timeout(None);
    builder
}

/// Serve one TCP connection until it ends.
pub fn serve(
    builder: &http1::Builder,
    socket: tokio::net::TcpStream,
) -> impl std::future::Future<Output = ()> + 'static {
    let _ = socket.set_nodelay(true);
    let connection =
        builder.serve_connection(TokioIo::new(socket), hyper::service::service_fn(handle));
    async move {
        if let Err(e) = connection.await {
            eprintln!("connection ended with {e}");
        }
    }
}

fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8080".to_string());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let builder = builder();
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(&addr).await?;
        println!("listening on {}", listener.local_addr()?);
        loop {
            let (socket, _) = listener.accept().await?;
            tokio::spawn(serve(&builder, socket));
        }
    })
}
