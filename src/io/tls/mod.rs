//! TLS over the inline transport, with rustls: records decrypted in place in the reader's pooled
//! receive block, the plaintext handed to the parser without a copy.
//!
//! [`TlsAcceptor::accept`] and [`TlsConnector::connect`] run the handshake (rustls, its default
//! provider) and give a [`TlsStream`]. [`Framed::new`](crate::frame::Framed::new) and
//! [`io::tokio::connection`](crate::io::tokio::connection) take a `TlsStream<TcpStream>` as
//! they take a `TcpStream`:
//!
//! - Receiving: ciphertext is read straight into the reader's receive block, each record is
//!   authenticated and decrypted in the block, its plaintext written over the header and tag
//!   before it, so that records received back to back give one contiguous run of plaintext: what
//!   the reader sees, as a segment of that block (a frame above the copy threshold taken out of
//!   it, records spanned included, shares the block: no plaintext byte is copied). A record split
//!   across reads is made contiguous once, at the start of a fresh block, when the block it began
//!   in has no room for the rest (records are at most 16 KiB and 2 KiB of overhead); a read for
//!   a large frame asks for room for the records that bring it. A connection
//!   waiting for its peer holds no block, as a plain one does (unless a record is half there).
//! - Sending: each flush seals what the writer staged into records (up to 16 KiB of plaintext
//!   each), each encrypted in place in a pooled block, and writes them with one vectored write.
//! - Ending: the peer's `close_notify` is the end of the stream (`ConnectionEnd::peer_closed`);
//!   a TCP end without it is an `UnexpectedEof` error (a truncation attack looks like that).
//!   After the application's last byte the connection sends `close_notify`, then shuts TCP's
//!   write side down. A TLS alert from the peer ends the connection with an error naming it
//!   (`ConnectionAborted`), a record that fails authentication with `InvalidData`; both carry the
//!   byte position of the stream where it happened (`ConnectionError::position`).
//! - After the handshake: TLS 1.3 key updates (answered when the peer asks) and session tickets
//!   (for a client) are handled; TLS 1.2 renegotiation is refused with an error.
//!
//! A `TlsStream` is also a tokio `AsyncRead + AsyncWrite` of its own (decrypting into a buffer
//! and copying out, as other TLS streams do), for any other use; a `TlsStream` over something
//! else than a `TcpStream` (or a `UnixStream`) goes through that when handed to a connection.
//!
//! The handshake has no deadline of its own: wrap `accept` in `tokio::time::timeout` to drop
//! peers that stall it, as with any TLS acceptor.
//!
//! ```no_run
//! use std::sync::Arc;
//! use packetpipe::frame::{Framed, Lines};
//! use packetpipe::io::tls::{rustls, TlsAcceptor};
//!
//! # fn main() -> std::io::Result<()> {
//! # let certs: Vec<rustls::pki_types::CertificateDer<'static>> = Vec::new();
//! # let key: rustls::pki_types::PrivateKeyDer<'static> = unimplemented!();
//! let config = rustls::ServerConfig::builder()
//!     .with_no_client_auth()
//!     .with_single_cert(certs, key)
//!     .map_err(std::io::Error::other)?;
//! let acceptor = TlsAcceptor::from(Arc::new(config));
//! # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8443").await?;
//! loop {
//!     let (tcp, _) = listener.accept().await?;
//!     let acceptor = acceptor.clone();
//!     tokio::spawn(async move {
//!         let tls = acceptor.accept(tcp).await?;
//!         let (mut out, mut lines) = Framed::new(tls, Lines::new()).split();
//!         while let Some(line) = lines.next().await {
//!             out.send(line?.to_uppercase()).await?;
//!         }
//!         out.close().await?; // close_notify, then TCP's end
//!         Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
//!     });
//! }
//! # })
//! # }
//! ```

mod handshake;
pub(crate) mod inline;
mod records;

use std::fmt;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

pub use rustls;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ProtocolVersion, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use records::{Opened, Opener, Sealer, MAX_PLAINTEXT};

/// Accepts TLS connections with one rustls server configuration (cheap to clone).
#[derive(Clone)]
pub struct TlsAcceptor {
    config: Arc<ServerConfig>,
}

impl From<Arc<ServerConfig>> for TlsAcceptor {
    /// An acceptor for `config`. The connections' record layer runs outside rustls' buffers, on
    /// the keys rustls hands over after the handshake: a configuration without
    /// `enable_secret_extraction` is copied once here with it set.
    fn from(config: Arc<ServerConfig>) -> TlsAcceptor {
        if config.enable_secret_extraction {
            return TlsAcceptor { config };
        }
        let mut copy = ServerConfig::clone(&config);
        copy.enable_secret_extraction = true;
        TlsAcceptor {
            config: Arc::new(copy),
        }
    }
}

impl TlsAcceptor {
    /// Run the server side of the handshake over `stream`.
    ///
    /// # Errors
    /// The handshake's: rustls' (`InvalidData`, after the alert it sends the peer), the
    /// stream's, and `UnexpectedEof` when the peer closes before the handshake is done.
    pub async fn accept<S>(&self, stream: S) -> io::Result<TlsStream<S>>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let conn = rustls::server::UnbufferedServerConnection::new(self.config.clone())
            .map_err(records::tls_error)?;
        handshake::handshake(conn, stream).await
    }
}

/// Connects over TLS with one rustls client configuration (cheap to clone).
#[derive(Clone)]
pub struct TlsConnector {
    config: Arc<ClientConfig>,
}

impl From<Arc<ClientConfig>> for TlsConnector {
    /// A connector for `config` (copied once with `enable_secret_extraction` set, as for
    /// [`TlsAcceptor`]).
    fn from(config: Arc<ClientConfig>) -> TlsConnector {
        if config.enable_secret_extraction {
            return TlsConnector { config };
        }
        let mut copy = ClientConfig::clone(&config);
        copy.enable_secret_extraction = true;
        TlsConnector {
            config: Arc::new(copy),
        }
    }
}

impl TlsConnector {
    /// Run the client side of the handshake over `stream`, for the server `name`.
    ///
    /// # Errors
    /// As [`TlsAcceptor::accept`]'s (a certificate that does not verify among them).
    pub async fn connect<S>(&self, name: ServerName<'static>, stream: S) -> io::Result<TlsStream<S>>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let conn = rustls::client::UnbufferedClientConnection::new(self.config.clone(), name)
            .map_err(records::tls_error)?;
        handshake::handshake(conn, stream).await
    }
}

impl fmt::Debug for TlsAcceptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsAcceptor").finish_non_exhaustive()
    }
}

impl fmt::Debug for TlsConnector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConnector").finish_non_exhaustive()
    }
}

/// A TLS connection over `S` whose handshake is done: hand it to
/// [`Framed::new`](crate::frame::Framed::new) or
/// [`io::tokio::connection`](crate::io::tokio::connection) (the module docs say how it is
/// served), or use it as a tokio stream.
pub struct TlsStream<S> {
    stream: S,
    opener: Opener,
    sealer: Sealer,
    /// Ciphertext received and not opened yet (`received[opened..filled]`); the bytes after
    /// `filled` are room for the next read, zeroed once when the buffer grew.
    received: Vec<u8>,
    filled: usize,
    /// `received[..opened]` holds opened records; `plain` the plaintext not yet read of the
    /// last one.
    opened: usize,
    plain: std::ops::Range<usize>,
    /// The peer's `close_notify` was opened.
    read_closed: bool,
    out: Outgoing,
    negotiated: Negotiated,
}

/// What the handshake agreed on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    /// The application protocol agreed by ALPN, if any.
    pub alpn_protocol: Option<Vec<u8>>,
    /// The TLS version.
    pub protocol_version: ProtocolVersion,
}

impl<S> TlsStream<S> {
    fn new(
        stream: S,
        opener: Opener,
        sealer: Sealer,
        received: Vec<u8>,
        alpn: Option<Vec<u8>>,
        version: ProtocolVersion,
    ) -> TlsStream<S> {
        TlsStream {
            stream,
            opener,
            sealer,
            filled: received.len(),
            received,
            opened: 0,
            plain: 0..0,
            read_closed: false,
            out: Outgoing::default(),
            negotiated: Negotiated {
                alpn_protocol: alpn,
                protocol_version: version,
            },
        }
    }

    /// The underlying stream.
    pub fn get_ref(&self) -> &S {
        &self.stream
    }

    /// What the handshake agreed on (ALPN, version).
    pub fn negotiated(&self) -> &Negotiated {
        &self.negotiated
    }

    /// Whether nothing was read or written through the stream's own `AsyncRead`/`AsyncWrite`
    /// that it still holds: then a connection may take its parts over.
    pub(crate) fn is_fresh(&self) -> bool {
        self.opened == 0 && self.plain.is_empty() && !self.read_closed && self.out.is_empty()
    }
}

impl<S> fmt::Debug for TlsStream<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsStream")
            .field("negotiated", &self.negotiated)
            .finish_non_exhaustive()
    }
}

/// Bytes a read of the stream's own `AsyncRead` asks for.
const READ: usize = 16 * 1024;

impl<S: AsyncRead + Unpin> AsyncRead for TlsStream<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if !this.plain.is_empty() {
                let n = this.plain.len().min(buf.remaining());
                buf.put_slice(&this.received[this.plain.start..this.plain.start + n]);
                this.plain.start += n;
                return Poll::Ready(Ok(()));
            }
            if this.read_closed {
                return Poll::Ready(Ok(()));
            }
            if this.opened > 0 {
                this.received.copy_within(this.opened..this.filled, 0);
                this.filled -= this.opened;
                this.opened = 0;
            }
            if let Some(len) = this.opener.record_len(&this.received[..this.filled])? {
                if len <= this.filled {
                    match this.opener.open(&mut this.received[..len], 0)? {
                        Opened::Data { len } => this.plain = 0..len,
                        Opened::Control => {}
                        Opened::CloseNotify => this.read_closed = true,
                    }
                    this.opened = len;
                    continue;
                }
            }
            let had = this.filled;
            if this.received.len() < had + READ {
                this.received.resize(had + READ, 0);
            }
            let mut read = ReadBuf::new(&mut this.received[had..had + READ]);
            let result = Pin::new(&mut this.stream).poll_read(cx, &mut read);
            let n = read.filled().len();
            this.filled += n;
            ready!(result)?;
            if n == 0 {
                return Poll::Ready(Err(inline::unexpected_end(had)));
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for TlsStream<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let stream = &mut this.stream;
        ready!(this
            .out
            .poll_write(|bufs| Pin::new(&mut *stream).poll_write_vectored(cx, bufs)))?;
        let n = seal_slices(&mut this.sealer, bufs, &mut this.out)?;
        // Written now if the stream takes it; else by the next write or flush.
        let _ = this
            .out
            .poll_write(|bufs| Pin::new(&mut *stream).poll_write_vectored(cx, bufs))?;
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let stream = &mut this.stream;
        ready!(this
            .out
            .poll_write(|bufs| Pin::new(&mut *stream).poll_write_vectored(cx, bufs)))?;
        Pin::new(stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.sealer.seal_close_notify(&mut this.out.records)?;
        let stream = &mut this.stream;
        ready!(this
            .out
            .poll_write(|bufs| Pin::new(&mut *stream).poll_write_vectored(cx, bufs)))?;
        Pin::new(stream).poll_shutdown(cx)
    }
}

/// Seal up to one record's worth of `bufs` (at most [`MAX_PLAINTEXT`] bytes): how many bytes.
fn seal_slices(sealer: &mut Sealer, bufs: &[IoSlice<'_>], out: &mut Outgoing) -> io::Result<usize> {
    let mut pieces: [&[u8]; 16] = [&[]; 16];
    let (mut count, mut total) = (0, 0);
    for buf in bufs {
        if count == pieces.len() || total == MAX_PLAINTEXT {
            break;
        }
        let take = buf.len().min(MAX_PLAINTEXT - total);
        if take == 0 {
            continue;
        }
        pieces[count] = &buf[..take];
        count += 1;
        total += take;
    }
    if total > 0 {
        sealer.seal_data(&pieces[..count], &mut out.records)?;
    }
    Ok(total)
}

/// Sealed records not written yet.
#[derive(Default)]
struct Outgoing {
    records: Vec<crate::Packet>,
    /// Bytes of the first record written.
    written: usize,
}

impl Outgoing {
    fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Write the records with `write` until they are all written (`Ready(Ok)`), the stream takes
    /// no more (`Pending`) or fails.
    fn poll_write(
        &mut self,
        mut write: impl FnMut(&[IoSlice<'_>]) -> Poll<io::Result<usize>>,
    ) -> Poll<io::Result<()>> {
        while !self.records.is_empty() {
            let mut slices = [IoSlice::new(&[]); 16];
            let mut count = 0;
            for (i, record) in self.records.iter().take(slices.len()).enumerate() {
                let from = if i == 0 { self.written } else { 0 };
                slices[count] = IoSlice::new(&record[from..]);
                count += 1;
            }
            let mut n = match ready!(write(&slices[..count])) {
                Ok(0) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Poll::Ready(Err(e)),
            };
            let mut done = 0;
            for record in &self.records {
                let left = record.len() - if done == 0 { self.written } else { 0 };
                if n < left {
                    break;
                }
                n -= left;
                done += 1;
                if n == 0 {
                    break;
                }
            }
            if done > 0 {
                self.records.drain(..done);
                self.written = 0;
            }
            self.written += n;
        }
        Poll::Ready(Ok(()))
    }
}
