//! The TLS handshake, run by rustls' unbuffered API over a tokio stream.
//!
//! rustls is given one more complete record at a time, so it never reads past the record that
//! completes the handshake: what the peer sent after it (a request right behind its `Finished`)
//! stays ciphertext, and the record layer ([`records`](super::records)) opens it in place like
//! every later record. Then rustls hands over the keys (`dangerous_into_kernel_connection`).

use std::future::poll_fn;
use std::io;
use std::ops::DerefMut;
use std::pin::Pin;
use std::task::{ready, Poll};

use rustls::client::{ClientConnectionData, UnbufferedClientConnection};
use rustls::kernel::KernelConnection;
use rustls::server::{ServerConnectionData, UnbufferedServerConnection};
use rustls::unbuffered::{
    ConnectionState, EncodeError, EncodeTlsData, UnbufferedConnectionCommon, UnbufferedStatus,
};
use rustls::ExtractedSecrets;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::records::{record_len, tls_error, Kernel, Keys, MAX_RECORD};
use super::TlsStream;

/// Largest handshake buffer: rustls joins a handshake message (a long certificate chain) in it.
const MAX_HANDSHAKE_BUFFER: usize = 256 * 1024;

/// A client or server connection of rustls' unbuffered API.
pub(crate) trait Unbuffered:
    DerefMut<Target = UnbufferedConnectionCommon<Self::Data>> + Send + Sized
{
    type Data;

    fn process<'c, 'i>(
        &'c mut self,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, Self::Data>;

    fn into_kernel(self) -> Result<(ExtractedSecrets, Kernel), rustls::Error>;
}

impl Unbuffered for UnbufferedServerConnection {
    type Data = ServerConnectionData;

    fn process<'c, 'i>(
        &'c mut self,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, ServerConnectionData> {
        self.process_tls_records(incoming)
    }

    fn into_kernel(self) -> Result<(ExtractedSecrets, Kernel), rustls::Error> {
        let (secrets, kernel): (_, KernelConnection<ServerConnectionData>) =
            self.dangerous_into_kernel_connection()?;
        Ok((secrets, Kernel::Server(kernel)))
    }
}

impl Unbuffered for UnbufferedClientConnection {
    type Data = ClientConnectionData;

    fn process<'c, 'i>(
        &'c mut self,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, ClientConnectionData> {
        self.process_tls_records(incoming)
    }

    fn into_kernel(self) -> Result<(ExtractedSecrets, Kernel), rustls::Error> {
        let (secrets, kernel): (_, KernelConnection<ClientConnectionData>) =
            self.dangerous_into_kernel_connection()?;
        Ok((secrets, Kernel::Client(kernel)))
    }
}

/// What the handshake does after one state.
#[derive(PartialEq, Eq)]
enum Step {
    /// Ask rustls again.
    Continue,
    /// rustls needs the next record.
    Receive,
    /// rustls may send application data: done if the handshake is.
    Traffic,
}

/// Run the handshake of `conn` over `stream`.
pub(crate) async fn handshake<C, S>(mut conn: C, mut stream: S) -> io::Result<TlsStream<S>>
where
    C: Unbuffered,
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut buf = vec![0; 2 * MAX_RECORD];
    // `buf[..limit]` is given to rustls, `buf[..filled]` was received.
    let (mut filled, mut limit) = (0, 0);
    let mut out = Vec::new();
    loop {
        let status = conn.process(&mut buf[..limit]);
        let discard = status.discard;
        let step = match status.state {
            Err(e) => {
                // The alert rustls queued for the peer, asked for over the same buffer (rustls
                // keeps positions into it), less what it said to discard.
                buf.copy_within(discard..filled, 0);
                limit -= discard;
                drop(send_alert(&mut conn, &mut stream, &mut out, &mut buf[..limit]).await);
                return Err(tls_error(e));
            }
            Ok(ConnectionState::EncodeTlsData(mut data)) => {
                encode(&mut data, &mut out)?;
                Step::Continue
            }
            Ok(ConnectionState::TransmitTlsData(data)) => {
                write_all(&mut stream, &out).await?;
                out.clear();
                data.done();
                Step::Continue
            }
            Ok(ConnectionState::BlockedHandshake) => Step::Receive,
            Ok(ConnectionState::WriteTraffic(_)) => Step::Traffic,
            Ok(ConnectionState::PeerClosed | ConnectionState::Closed) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the TLS peer closed the connection during the handshake",
                ))
            }
            Ok(other) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("unexpected TLS state during the handshake: {other:?}"),
                ))
            }
        };
        buf.copy_within(discard..filled, 0);
        filled -= discard;
        limit -= discard;
        if step == Step::Traffic && !conn.is_handshaking() {
            break;
        }
        if step != Step::Continue {
            // The next complete record, received first if need be.
            loop {
                if let Some(len) = record_len(&buf[limit..filled])? {
                    if limit + len <= filled {
                        limit += len;
                        break;
                    }
                }
                if filled == buf.len() {
                    if buf.len() >= MAX_HANDSHAKE_BUFFER {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("a TLS handshake message is over {MAX_HANDSHAKE_BUFFER} bytes"),
                        ));
                    }
                    buf.resize(buf.len() * 2, 0);
                }
                let n = read_some(&mut stream, &mut buf[filled..]).await?;
                if n == 0 {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the TLS peer closed the connection during the handshake",
                    ));
                }
                filled += n;
            }
        }
    }
    if limit != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "the TLS handshake ended inside a record",
        ));
    }
    let alpn = conn.alpn_protocol().map(<[u8]>::to_vec);
    let version = conn
        .protocol_version()
        .expect("a completed handshake has a version");
    let (secrets, kernel) = conn.into_kernel().map_err(tls_error)?;
    let (opener, sealer) = Keys::split(
        kernel,
        secrets.tx,
        secrets.rx,
        crate::Pool::global().clone(),
    )?;
    buf.truncate(filled);
    if filled == 0 {
        buf = Vec::new();
    }
    Ok(TlsStream::new(stream, opener, sealer, buf, alpn, version))
}

/// Encode a handshake record at the end of `out`, growing it as rustls asks.
fn encode<Data>(data: &mut EncodeTlsData<'_, Data>, out: &mut Vec<u8>) -> io::Result<()> {
    let start = out.len();
    loop {
        match data.encode(&mut out[start..]) {
            Ok(n) => {
                out.truncate(start + n);
                return Ok(());
            }
            Err(EncodeError::InsufficientSize(size)) => out.resize(start + size.required_size, 0),
            Err(EncodeError::AlreadyEncoded) => return Ok(()),
        }
    }
}

/// After a failed handshake, send the alert rustls queued for the peer (best effort).
async fn send_alert<C, S>(
    conn: &mut C,
    stream: &mut S,
    out: &mut Vec<u8>,
    incoming: &mut [u8],
) -> io::Result<()>
where
    C: Unbuffered,
    S: AsyncWrite + Unpin,
{
    out.clear();
    // Only while rustls holds records to send: asked again with none, it would process the
    // refused input again.
    while conn.wants_write() {
        match conn.process(incoming).state {
            Ok(ConnectionState::EncodeTlsData(mut data)) => encode(&mut data, out)?,
            _ => break,
        }
    }
    if !out.is_empty() {
        write_all(stream, out).await?;
    }
    Ok(())
}

pub(crate) async fn read_some<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut [u8],
) -> io::Result<usize> {
    poll_fn(|cx| {
        let mut read = ReadBuf::new(buf);
        ready!(Pin::new(&mut *stream).poll_read(cx, &mut read))?;
        Poll::Ready(Ok(read.filled().len()))
    })
    .await
}

async fn write_all<S: AsyncWrite + Unpin>(stream: &mut S, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        let n = poll_fn(|cx| Pin::new(&mut *stream).poll_write(cx, bytes)).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        bytes = &bytes[n..];
    }
    poll_fn(|cx| Pin::new(&mut *stream).poll_flush(cx)).await
}
