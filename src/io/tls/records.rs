//! The TLS record layer once the handshake is done: records opened (authenticated and
//! decrypted) in place, in the buffer they were received into, and sealed for sending.
//!
//! rustls runs the handshake and keeps the key schedule (`rustls::kernel::KernelConnection`, the
//! interface it offers for kernel TLS); this layer runs the negotiated suite's AEADs, rustls' own
//! `MessageDecrypter`/`MessageEncrypter`, on the connection's buffers. The two directions share
//! the key schedule: a peer's key update is answered by the sending side (RFC 8446 4.6.3).

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use rustls::client::ClientConnectionData;
use rustls::crypto::cipher::{
    InboundOpaqueMessage, MessageDecrypter, MessageEncrypter, OutboundChunks, OutboundPlainMessage,
};
use rustls::kernel::KernelConnection;
use rustls::server::ServerConnectionData;
use rustls::{
    AlertDescription, ConnectionTrafficSecrets, ContentType, ProtocolVersion, SupportedCipherSuite,
};

/// Bytes of a record's header: content type, version, length.
pub(crate) const HEADER: usize = 5;
/// Most plaintext one record carries (RFC 8446 5.1, RFC 5246 6.2.1).
pub(crate) const MAX_PLAINTEXT: usize = 1 << 14;
/// Most ciphertext one record may carry: TLS 1.2's bound (RFC 5246 6.2.3), above TLS 1.3's.
pub(crate) const MAX_CIPHERTEXT: usize = MAX_PLAINTEXT + 2048;
/// Longest record: header and ciphertext.
pub(crate) const MAX_RECORD: usize = HEADER + MAX_CIPHERTEXT;

/// The length of the record starting `bytes` (header included), once its header is there;
/// an error for a header no TLS peer sends.
pub(crate) fn record_len(bytes: &[u8]) -> io::Result<Option<usize>> {
    let Some(header) = bytes.get(..HEADER) else {
        return Ok(None);
    };
    if !(20..=24).contains(&header[0]) || header[1] != 3 {
        return Err(invalid(format!(
            "received bytes that are not a TLS record: header {header:02x?}"
        )));
    }
    let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
    if len > MAX_CIPHERTEXT {
        return Err(invalid(format!(
            "received a TLS record of {len} bytes, over the {MAX_CIPHERTEXT}-byte limit"
        )));
    }
    Ok(Some(HEADER + len))
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

/// A rustls error as an I/O error (`InvalidData`, as tokio-rustls reports them).
pub(crate) fn tls_error(error: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, error)
}

/// rustls' view of the connection after the handshake: the key schedule.
pub(crate) enum Kernel {
    Server(KernelConnection<ServerConnectionData>),
    Client(KernelConnection<ClientConnectionData>),
}

impl Kernel {
    fn suite(&self) -> SupportedCipherSuite {
        match self {
            Kernel::Server(k) => k.negotiated_cipher_suite(),
            Kernel::Client(k) => k.negotiated_cipher_suite(),
        }
    }

    fn update_rx(&mut self) -> Result<(u64, ConnectionTrafficSecrets), rustls::Error> {
        match self {
            Kernel::Server(k) => k.update_rx_secret(),
            Kernel::Client(k) => k.update_rx_secret(),
        }
    }

    fn update_tx(&mut self) -> Result<(u64, ConnectionTrafficSecrets), rustls::Error> {
        match self {
            Kernel::Server(k) => k.update_tx_secret(),
            Kernel::Client(k) => k.update_tx_secret(),
        }
    }
}

/// What both directions share: the key schedule, and whether the peer asked for new sending
/// keys.
pub(crate) struct Keys {
    kernel: Mutex<Kernel>,
    suite: SupportedCipherSuite,
    /// The peer's key update asked for ours: the sealer sends one before its next record.
    update_tx: AtomicBool,
}

impl Keys {
    /// The two directions of a connection whose handshake is done: `secrets` are
    /// `(sequence number, secrets)` for sending and receiving.
    pub(crate) fn split(
        kernel: Kernel,
        tx: (u64, ConnectionTrafficSecrets),
        rx: (u64, ConnectionTrafficSecrets),
    ) -> (Opener, Sealer) {
        let suite = kernel.suite();
        let keys = Arc::new(Keys {
            kernel: Mutex::new(kernel),
            suite,
            update_tx: AtomicBool::new(false),
        });
        let opener = Opener {
            decrypter: decrypter(suite, rx.1),
            seq: rx.0,
            tls13: is_tls13(suite),
            keys: keys.clone(),
        };
        let sealer = Sealer {
            encrypter: encrypter(suite, tx.1),
            seq: tx.0,
            version: ProtocolVersion::TLSv1_2,
            keys,
            closed: false,
        };
        (opener, sealer)
    }
}

fn is_tls13(suite: SupportedCipherSuite) -> bool {
    suite.version().version == ProtocolVersion::TLSv1_3
}

fn decrypter(
    suite: SupportedCipherSuite,
    secrets: ConnectionTrafficSecrets,
) -> Box<dyn MessageDecrypter> {
    let (key, iv, gcm) = match secrets {
        ConnectionTrafficSecrets::Aes128Gcm { key, iv }
        | ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (key, iv, true),
        ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => (key, iv, false),
        _ => unreachable!("rustls' ring provider negotiates only AES-GCM and ChaCha20-Poly1305"),
    };
    match suite {
        SupportedCipherSuite::Tls13(suite) => suite.aead_alg.decrypter(key, iv),
        // TLS 1.2's GCM nonce is a 4-byte salt and the record's explicit 8 bytes.
        SupportedCipherSuite::Tls12(suite) if gcm => {
            suite.aead_alg.decrypter(key, &iv.as_ref()[..4])
        }
        SupportedCipherSuite::Tls12(suite) => suite.aead_alg.decrypter(key, iv.as_ref()),
    }
}

fn encrypter(
    suite: SupportedCipherSuite,
    secrets: ConnectionTrafficSecrets,
) -> Box<dyn MessageEncrypter> {
    let (key, iv, gcm) = match secrets {
        ConnectionTrafficSecrets::Aes128Gcm { key, iv }
        | ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (key, iv, true),
        ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => (key, iv, false),
        _ => unreachable!("rustls' ring provider negotiates only AES-GCM and ChaCha20-Poly1305"),
    };
    match suite {
        SupportedCipherSuite::Tls13(suite) => suite.aead_alg.encrypter(key, iv),
        SupportedCipherSuite::Tls12(suite) if gcm => {
            suite
                .aead_alg
                .encrypter(key, &iv.as_ref()[..4], &iv.as_ref()[4..])
        }
        SupportedCipherSuite::Tls12(suite) => suite.aead_alg.encrypter(key, iv.as_ref(), &[]),
    }
}

/// What one received record held.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Opened {
    /// Application data: `len` plaintext bytes at `start` of the record's bytes (possibly none).
    Data { start: usize, len: usize },
    /// A message for the record layer itself (a session ticket, a key update): nothing to read.
    Control,
    /// The peer's `close_notify`: its last byte was sent.
    CloseNotify,
}

/// The receiving direction: opens records in place.
pub(crate) struct Opener {
    decrypter: Box<dyn MessageDecrypter>,
    seq: u64,
    tls13: bool,
    keys: Arc<Keys>,
}

impl Opener {
    /// Open the complete record `record` (header included, [`record_len`] bytes) in place.
    pub(crate) fn open(&mut self, record: &mut [u8]) -> io::Result<Opened> {
        let typ = ContentType::from(record[0]);
        let version = ProtocolVersion::from(u16::from_be_bytes([record[1], record[2]]));
        if self.tls13 && typ != ContentType::ApplicationData {
            return Err(invalid(format!(
                "received an unprotected TLS 1.3 record of type {typ:?} after the handshake"
            )));
        }
        let base = record.as_ptr() as usize;
        let seq = self.seq;
        self.seq = seq
            .checked_add(1)
            .ok_or_else(|| invalid("TLS record sequence numbers ran out".into()))?;
        let message = InboundOpaqueMessage::new(typ, version, &mut record[HEADER..]);
        let plain = self.decrypter.decrypt(message, seq).map_err(tls_error)?;
        let start = plain.payload.as_ptr() as usize - base;
        let len = plain.payload.len();
        if len > MAX_PLAINTEXT {
            return Err(tls_error(rustls::Error::PeerSentOversizedRecord));
        }
        match plain.typ {
            ContentType::ApplicationData => Ok(Opened::Data { start, len }),
            ContentType::Alert => match *plain.payload {
                [_, 0] => Ok(Opened::CloseNotify),
                // A warning that the peer gives up; its close_notify follows (RFC 8446 6.1).
                [1, 90] => Ok(Opened::Control),
                [_, description] => Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    format!(
                        "the TLS peer sent an alert: {:?}",
                        AlertDescription::from(description)
                    ),
                )),
                _ => Err(invalid(format!(
                    "received a malformed TLS alert of {len} bytes"
                ))),
            },
            ContentType::Handshake => {
                let (start, end) = (start, start + len);
                self.handshake(&record[start..end])?;
                Ok(Opened::Control)
            }
            other => Err(invalid(format!(
                "received a TLS record of type {other:?} after the handshake"
            ))),
        }
    }

    /// Handshake messages after the handshake: session tickets (clients) and TLS 1.3 key
    /// updates; TLS 1.2 renegotiation is refused.
    fn handshake(&mut self, mut messages: &[u8]) -> io::Result<()> {
        while !messages.is_empty() {
            let [typ, a, b, c, ref rest @ ..] = *messages else {
                return Err(invalid(
                    "received a fragmented TLS handshake message after the handshake".into(),
                ));
            };
            let len = u32::from_be_bytes([0, a, b, c]) as usize;
            if rest.len() < len {
                return Err(invalid(
                    "received a fragmented TLS handshake message after the handshake".into(),
                ));
            }
            let (body, after) = rest.split_at(len);
            match (typ, self.tls13) {
                // NewSessionTicket, for a client to resume with.
                (4, true) => {
                    let mut kernel = lock(&self.keys.kernel);
                    match &mut *kernel {
                        Kernel::Client(kernel) => {
                            kernel.handle_new_session_ticket(body).map_err(tls_error)?
                        }
                        Kernel::Server(_) => {
                            return Err(invalid("a TLS client sent a session ticket".into()))
                        }
                    }
                }
                // KeyUpdate: new receiving keys from here on; ours too if asked.
                (24, true) => {
                    let requested = match body {
                        [0] => false,
                        [1] => true,
                        _ => return Err(invalid("received a malformed TLS key update".into())),
                    };
                    if !after.is_empty() {
                        return Err(invalid(
                            "a TLS key update was not at the end of its record".into(),
                        ));
                    }
                    let (seq, secrets) = lock(&self.keys.kernel).update_rx().map_err(tls_error)?;
                    self.decrypter = decrypter(self.keys.suite, secrets);
                    self.seq = seq;
                    if requested {
                        self.keys.update_tx.store(true, Ordering::Release);
                    }
                }
                (typ, _) => {
                    return Err(invalid(format!(
                        "received TLS handshake message {typ} after the handshake (renegotiation is not supported)"
                    )))
                }
            }
            messages = after;
        }
        Ok(())
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The sending direction: seals plaintext into records.
pub(crate) struct Sealer {
    encrypter: Box<dyn MessageEncrypter>,
    seq: u64,
    /// The record header's version: TLS 1.2's for both versions (RFC 8446 5.1).
    version: ProtocolVersion,
    keys: Arc<Keys>,
    /// `close_notify` was sealed: nothing more is.
    closed: bool,
}

impl Sealer {
    /// Seal `plaintext` (at most [`MAX_PLAINTEXT`] bytes, in pieces) as one application-data
    /// record, after a key update if the peer asked for one; each record is pushed to `out`.
    pub(crate) fn seal_data(
        &mut self,
        plaintext: &[&[u8]],
        out: &mut Vec<Vec<u8>>,
    ) -> io::Result<()> {
        if self.keys.update_tx.load(Ordering::Acquire) {
            self.update_keys(out)?;
        }
        self.seal(ContentType::ApplicationData, plaintext, out)
    }

    /// Seal a `close_notify` alert (once).
    pub(crate) fn seal_close_notify(&mut self, out: &mut Vec<Vec<u8>>) -> io::Result<()> {
        if !self.closed {
            self.seal(ContentType::Alert, &[&[1, 0]], out)?;
            self.closed = true;
        }
        Ok(())
    }

    fn update_keys(&mut self, out: &mut Vec<Vec<u8>>) -> io::Result<()> {
        // KeyUpdate, update_not_requested, under the old keys; the new ones from here on.
        self.seal(ContentType::Handshake, &[&[24, 0, 0, 1, 0]], out)?;
        let (seq, secrets) = lock(&self.keys.kernel).update_tx().map_err(tls_error)?;
        self.encrypter = encrypter(self.keys.suite, secrets);
        self.seq = seq;
        self.keys.update_tx.store(false, Ordering::Release);
        Ok(())
    }

    fn seal(
        &mut self,
        typ: ContentType,
        plaintext: &[&[u8]],
        out: &mut Vec<Vec<u8>>,
    ) -> io::Result<()> {
        if self.closed {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the TLS connection's sending side was closed (close_notify sent)",
            ));
        }
        let seq = self.seq;
        self.seq = seq
            .checked_add(1)
            .ok_or_else(|| invalid("TLS record sequence numbers ran out".into()))?;
        let message = OutboundPlainMessage {
            typ,
            version: self.version,
            payload: OutboundChunks::new(plaintext),
        };
        let sealed = self.encrypter.encrypt(message, seq).map_err(tls_error)?;
        out.push(sealed.encode());
        Ok(())
    }
}
