//! A RESP2 (Redis protocol) server, twice: on packetpipe's duplex connection
//! ([`pipe_server`]) and on tokio-util's `Framed` ([`tokio_util_server`]), sharing everything
//! but the buffer layer:
//!
//! - [`parse`]: the request parser, in place over segments or a slice;
//! - [`command`]: command execution; [`reply`]: reply encoding; [`store`]: the key space;
//! - [`session`]: one client's loop (answer every complete request, one flush per batch);
//! - [`server`]: the accept loop on a current-thread runtime, and a handle that runs a server
//!   on its own thread (for tests and benchmarks).
//!
//! Used by `examples/resp_server.rs`, `perf/examples/resp_server_tokio_util.rs` and the `tests-integration/tests/resp_*`
//! tests (`#[path]` modules), so every piece is tested as the examples run it.
#![allow(dead_code)] // each user takes what it needs

pub mod command;
pub mod parse;
pub mod pipe_server;
pub mod reply;
pub mod server;
pub mod session;
pub mod store;
pub mod tokio_util_server;

use std::fmt;
use std::io;

use packetpipe::frame::FrameError;

/// Settings of a server.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// A bulk argument larger than this, or a request larger than twice this, closes the
    /// connection with an error (default 512 MiB, Redis's `proto-max-bulk-len`; twice that is
    /// Redis's `client-query-buffer-limit`, 1 GiB).
    pub max_request: usize,
    /// Serve the connections on an io_uring driver (`--transport uring`, feature `io-uring`)
    /// instead of tokio's epoll reactor.
    pub uring: bool,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            max_request: parse::DEFAULT_MAX_REQUEST,
            uring: false,
        }
    }
}

impl Config {
    /// `[ADDR] [--max-request BYTES] [--transport epoll|uring] [--tls CERT KEY]` from the
    /// command line: the address (default `127.0.0.1:6380`), the settings, and the PEM
    /// certificate chain and key files to serve TLS with.
    pub fn from_args() -> Result<(String, Config, Option<TlsFiles>), String> {
        let mut addr = None;
        let mut config = Config::default();
        let mut tls = None;
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            if arg == "--max-request" {
                config.max_request = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .ok_or("--max-request needs a number of bytes")?;
            } else if arg == "--transport" {
                config.uring = match args.next().as_deref() {
                    Some("uring") => true,
                    Some("epoll") => false,
                    _ => return Err("--transport needs epoll or uring".into()),
                };
            } else if arg == "--tls" {
                match (args.next(), args.next()) {
                    (Some(cert), Some(key)) => tls = Some(TlsFiles { cert, key }),
                    _ => return Err("--tls needs a certificate and a key file (PEM)".into()),
                }
            } else if arg.starts_with('-') || addr.is_some() {
                return Err(format!(
                    "unexpected argument {arg:?}; usage: [ADDR] [--max-request BYTES] [--transport epoll|uring] [--tls CERT KEY]"
                ));
            } else {
                addr = Some(arg);
            }
        }
        Ok((addr.unwrap_or_else(|| "127.0.0.1:6380".into()), config, tls))
    }
}

/// The PEM files a TLS server is configured with (`--tls CERT KEY`).
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// The certificate chain, the server's own certificate first.
    pub cert: String,
    /// The certificate's private key.
    pub key: String,
}

/// Why a connection's requests ended.
#[derive(Debug)]
pub enum RespError {
    /// A request larger than the maximum: the reply is this message, then the connection closes.
    Fatal(String),
    /// The pipe's (packetpipe server): the client left mid-request, or a socket error.
    Frame(FrameError),
    /// The socket's (tokio-util server).
    Io(io::Error),
}

impl RespError {
    pub fn into_io(self) -> io::Error {
        match self {
            RespError::Io(e) => e,
            RespError::Frame(e) => e.into(),
            RespError::Fatal(message) => io::Error::new(io::ErrorKind::InvalidData, message),
        }
    }
}

impl From<FrameError> for RespError {
    fn from(e: FrameError) -> RespError {
        RespError::Frame(e)
    }
}

impl From<packetpipe::Error> for RespError {
    fn from(e: packetpipe::Error) -> RespError {
        RespError::Frame(e.into())
    }
}

impl From<io::Error> for RespError {
    fn from(e: io::Error) -> RespError {
        RespError::Io(e)
    }
}

impl fmt::Display for RespError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RespError::Fatal(message) => f.write_str(message),
            RespError::Frame(e) => e.fmt(f),
            RespError::Io(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for RespError {}
