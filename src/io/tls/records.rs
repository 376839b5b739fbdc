//! The TLS record layer once the handshake is done: records opened (authenticated and
//! decrypted) in place, in the buffer they were received into, and sealed into pooled blocks.
//!
//! rustls runs the handshake and keeps the key schedule (`rustls::kernel::KernelConnection`, the
//! interface it offers for kernel TLS); this layer runs the record protection of RFC 8446 5.2
//! and RFC 5288 / RFC 7905 (TLS 1.2's AES-GCM and ChaCha20-Poly1305) with `ring`'s AEADs on the
//! connection's own buffers, as the kernel does for kernel TLS. Not rustls' record encrypters:
//! they seal into a vector they allocate per record, and a provider may tie its keys' nonces to a
//! sequence that starts at 0 (aws-lc-rs' TLS 1.3 sealing keys do), where the keys handed over
//! after the handshake continue the handshake's sequence. The two directions share the key
//! schedule: a peer's key update is answered by the sending side (RFC 8446 4.6.3).

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use rustls::client::ClientConnectionData;
use rustls::kernel::KernelConnection;
use rustls::server::ServerConnectionData;
use rustls::{AlertDescription, ConnectionTrafficSecrets, ProtocolVersion, SupportedCipherSuite};

use crate::packet::Packet;
use crate::pool::Pool;

/// Bytes of a record's header: content type, version, length.
pub(crate) const HEADER: usize = 5;
/// Most plaintext one record carries (RFC 8446 5.1, RFC 5246 6.2.1).
pub(crate) const MAX_PLAINTEXT: usize = 1 << 14;
/// Most ciphertext one record may carry: TLS 1.2's bound (RFC 5246 6.2.3), above TLS 1.3's.
pub(crate) const MAX_CIPHERTEXT: usize = MAX_PLAINTEXT + 2048;
/// Longest record: header and ciphertext.
pub(crate) const MAX_RECORD: usize = HEADER + MAX_CIPHERTEXT;

/// The ciphertext that brings `plaintext` bytes, as records of the suites this layer opens send
/// them (full records, no padding): the plaintext with each record's header, explicit nonce,
/// TLS 1.3 content type and tag.
pub(crate) fn ciphertext_for(plaintext: usize) -> usize {
    plaintext + plaintext.div_ceil(MAX_PLAINTEXT).max(1) * (HEADER + EXPLICIT + 1 + TAG)
}

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

/// Bytes of an AEAD tag (all three AEADs').
const TAG: usize = 16;
/// Bytes of TLS 1.2 AES-GCM's explicit nonce, in front of each record's ciphertext.
const EXPLICIT: usize = 8;

/// One direction's key: the AEAD key and the IV the nonces derive from.
struct Key {
    key: LessSafeKey,
    iv: [u8; aead::NONCE_LEN],
    /// TLS 1.2 AES-GCM: a 4-byte salt and an explicit nonce per record.
    explicit: bool,
}

impl Key {
    fn new(tls13: bool, secrets: ConnectionTrafficSecrets) -> io::Result<Key> {
        let (algorithm, key, iv) = match &secrets {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (&aead::AES_128_GCM, key, iv),
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (&aead::AES_256_GCM, key, iv),
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => {
                (&aead::CHACHA20_POLY1305, key, iv)
            }
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    "the negotiated TLS cipher suite's AEAD is not one the record layer runs",
                ))
            }
        };
        let unbound = UnboundKey::new(algorithm, key.as_ref()).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                "a TLS traffic key of the wrong length",
            )
        })?;
        let iv: [u8; aead::NONCE_LEN] = iv.as_ref().try_into().map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                "a TLS traffic IV of the wrong length",
            )
        })?;
        Ok(Key {
            key: LessSafeKey::new(unbound),
            iv,
            explicit: !tls13 && !std::ptr::eq(algorithm, &aead::CHACHA20_POLY1305),
        })
    }

    /// The nonce of record `seq`: the IV with the sequence number XORed into its last 8 bytes
    /// (TLS 1.3, TLS 1.2 ChaCha20-Poly1305; for TLS 1.2 AES-GCM the same bytes make the salt and
    /// the explicit nonce sent, as rustls and OpenSSL send it).
    fn nonce(&self, seq: u64) -> [u8; aead::NONCE_LEN] {
        let mut nonce = self.iv;
        for (n, s) in nonce[4..].iter_mut().zip(seq.to_be_bytes()) {
            *n ^= s;
        }
        nonce
    }
}

/// TLS 1.2's additional data: sequence number, type, version, plaintext length.
fn tls12_aad(seq: u64, typ: u8, plain: usize) -> [u8; 13] {
    let mut aad = [0; 13];
    aad[..8].copy_from_slice(&seq.to_be_bytes());
    aad[8] = typ;
    aad[9..11].copy_from_slice(&[3, 3]);
    aad[11..].copy_from_slice(&(plain as u16).to_be_bytes());
    aad
}

/// What both directions share: the key schedule, and whether the peer asked for new sending
/// keys.
pub(crate) struct Keys {
    kernel: Mutex<Kernel>,
    tls13: bool,
    /// The peer's key update asked for ours: the sealer sends one before its next record.
    update_tx: AtomicBool,
    /// The alert (description) the receiving side failed with, 0 if none: the sending side
    /// sends it instead of `close_notify` (RFC 8446 6.2).
    failed: AtomicU8,
}

impl Keys {
    /// The two directions of a connection whose handshake is done: `tx` and `rx` are
    /// `(sequence number, secrets)` for sending and receiving; sealed records go into blocks of
    /// `pool`.
    pub(crate) fn split(
        kernel: Kernel,
        tx: (u64, ConnectionTrafficSecrets),
        rx: (u64, ConnectionTrafficSecrets),
        pool: Pool,
    ) -> io::Result<(Opener, Sealer)> {
        let tls13 = kernel.suite().version().version == ProtocolVersion::TLSv1_3;
        let keys = Arc::new(Keys {
            kernel: Mutex::new(kernel),
            tls13,
            update_tx: AtomicBool::new(false),
            failed: AtomicU8::new(0),
        });
        let opener = Opener {
            key: Key::new(tls13, rx.1)?,
            seq: rx.0,
            keys: keys.clone(),
        };
        let sealer = Sealer {
            key: Key::new(tls13, tx.1)?,
            seq: tx.0,
            keys,
            pool,
            closed: false,
        };
        Ok((opener, sealer))
    }
}

/// What one received record held.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Opened {
    /// Application data: `len` plaintext bytes (possibly none) at the front of the buffer the
    /// record was opened in.
    Data { len: usize },
    /// A message for the record layer itself (a session ticket, a key update): nothing to read.
    Control,
    /// The peer's `close_notify`: its last byte was sent.
    CloseNotify,
}

const APPLICATION_DATA: u8 = 23;
/// Alert descriptions sent when a received record is refused (RFC 8446 6.2).
const UNEXPECTED_MESSAGE: u8 = 10;
const BAD_RECORD_MAC: u8 = 20;
const RECORD_OVERFLOW: u8 = 22;
const DECODE_ERROR: u8 = 50;
const ALERT: u8 = 21;
const HANDSHAKE: u8 = 22;

/// The receiving direction: opens records in place.
pub(crate) struct Opener {
    key: Key,
    seq: u64,
    keys: Arc<Keys>,
}

impl Opener {
    /// The length of the record at the front of `bytes` ([`record_len`]), noting the alert to
    /// send the peer if its header is not a record's.
    pub(crate) fn record_len(&self, bytes: &[u8]) -> io::Result<Option<usize>> {
        record_len(bytes).map_err(|e| {
            let oversized = bytes.len() >= HEADER
                && usize::from(u16::from_be_bytes([bytes[3], bytes[4]])) > MAX_CIPHERTEXT;
            self.fail_with(if oversized {
                RECORD_OVERFLOW
            } else {
                DECODE_ERROR
            });
            e
        })
    }

    /// Open the complete record at `buf[at..]` (header included, [`record_len`] bytes) within
    /// `buf`: its plaintext is written to the front of `buf`, over the bytes before the record
    /// (those of records opened before it, which left their plaintext further front) and its own
    /// header, in the one pass of the decryption. So records received back to back give
    /// plaintext back to back, one contiguous run. The plaintext, or the error to end the
    /// connection with (after which the sending side sends the peer the matching alert, unless
    /// the error is the peer's own alert).
    pub(crate) fn open(&mut self, buf: &mut [u8], at: usize) -> io::Result<Opened> {
        let opened = self.open_record(buf, at);
        // A failed authentication noted its own alert already (the first one noted stays).
        if let Err(e) = &opened {
            if e.kind() != io::ErrorKind::ConnectionAborted {
                self.fail_with(UNEXPECTED_MESSAGE);
            }
        }
        opened
    }

    /// A record that failed authentication: its alert noted, its error.
    fn bad_record_mac(&self) -> io::Error {
        self.fail_with(BAD_RECORD_MAC);
        invalid("a received TLS record failed authentication (bad record MAC)".into())
    }

    fn fail_with(&self, alert: u8) {
        let _ = self
            .keys
            .failed
            .compare_exchange(0, alert, Ordering::AcqRel, Ordering::Acquire);
    }

    fn open_record(&mut self, buf: &mut [u8], at: usize) -> io::Result<Opened> {
        let tls13 = self.keys.tls13;
        let header: [u8; HEADER] = buf[at..at + HEADER].try_into().expect("a record's header");
        let outer = header[0];
        if tls13 && outer != APPLICATION_DATA {
            return Err(invalid(format!(
                "received an unprotected TLS 1.3 record of type {outer} after the handshake"
            )));
        }
        let seq = self.seq;
        self.seq = seq
            .checked_add(1)
            .ok_or_else(|| invalid("TLS record sequence numbers ran out".into()))?;
        let payload = &buf[at + HEADER..];
        let explicit = if self.key.explicit { EXPLICIT } else { 0 };
        if payload.len() < explicit + TAG {
            return Err(self.bad_record_mac());
        }
        let plain_len = payload.len() - explicit - TAG;
        let mut nonce = self.key.nonce(seq);
        if explicit > 0 {
            nonce[4..].copy_from_slice(&payload[..EXPLICIT]);
        }
        let nonce = Nonce::assume_unique_for_key(nonce);
        let sealed = at + HEADER + explicit..;
        let opened = if tls13 {
            self.key
                .key
                .open_within(nonce, Aad::from(header), buf, sealed)
        } else {
            let aad = tls12_aad(seq, outer, plain_len);
            self.key.key.open_within(nonce, Aad::from(aad), buf, sealed)
        };
        let mut len = match opened {
            Ok(plain) => plain.len(),
            Err(_) => return Err(self.bad_record_mac()),
        };
        let typ = if tls13 {
            // The inner content type is the last non-zero byte; zeros after it are padding.
            let plain = &buf[..len];
            let Some(at) = plain.iter().rposition(|&b| b != 0) else {
                return Err(invalid(
                    "received a TLS 1.3 record with no content type".into(),
                ));
            };
            len = at;
            plain[at]
        } else {
            outer
        };
        if len > MAX_PLAINTEXT {
            return Err(invalid(format!(
                "received a TLS record of {len} plaintext bytes, over the {MAX_PLAINTEXT}-byte limit"
            )));
        }
        match typ {
            APPLICATION_DATA => Ok(Opened::Data { len }),
            ALERT => match buf[..len] {
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
            HANDSHAKE => {
                self.handshake(&buf[..len])?;
                Ok(Opened::Control)
            }
            other => Err(invalid(format!(
                "received a TLS record of type {other} after the handshake"
            ))),
        }
    }

    /// Handshake messages after the handshake: session tickets (clients) and TLS 1.3 key
    /// updates; TLS 1.2 renegotiation is refused.
    fn handshake(&mut self, mut messages: &[u8]) -> io::Result<()> {
        while !messages.is_empty() {
            let fragmented = || {
                invalid("received a fragmented TLS handshake message after the handshake".into())
            };
            let [typ, a, b, c, ref rest @ ..] = *messages else {
                return Err(fragmented());
            };
            let len = u32::from_be_bytes([0, a, b, c]) as usize;
            if rest.len() < len {
                return Err(fragmented());
            }
            let (body, after) = rest.split_at(len);
            match (typ, self.keys.tls13) {
                // NewSessionTicket, for a client to resume with.
                (4, true) => match &mut *lock(&self.keys.kernel) {
                    Kernel::Client(kernel) => {
                        kernel.handle_new_session_ticket(body).map_err(tls_error)?
                    }
                    Kernel::Server(_) => {
                        return Err(invalid("a TLS client sent a session ticket".into()))
                    }
                },
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
                    self.key = Key::new(true, secrets)?;
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

/// The sending direction: seals plaintext into records, each in a pooled block.
pub(crate) struct Sealer {
    key: Key,
    seq: u64,
    keys: Arc<Keys>,
    pool: Pool,
    /// `close_notify` was sealed: nothing more is.
    closed: bool,
}

impl Sealer {
    /// Seal `plaintext` (at most [`MAX_PLAINTEXT`] bytes, in pieces) as one application-data
    /// record, after a key update if the peer asked for one; each record is pushed to `out`.
    pub(crate) fn seal_data(
        &mut self,
        plaintext: &[&[u8]],
        out: &mut Vec<Packet>,
    ) -> io::Result<()> {
        if self.keys.update_tx.load(Ordering::Acquire) {
            self.update_keys(out)?;
        }
        self.seal(APPLICATION_DATA, plaintext, out)
    }

    /// Seal the last record (once): `close_notify`, or the fatal alert the receiving side
    /// failed with.
    pub(crate) fn seal_close_notify(&mut self, out: &mut Vec<Packet>) -> io::Result<()> {
        if !self.closed {
            match self.keys.failed.load(Ordering::Acquire) {
                0 => self.seal(ALERT, &[&[1, 0]], out)?,
                alert => self.seal(ALERT, &[&[2, alert]], out)?,
            }
            self.closed = true;
        }
        Ok(())
    }

    /// Seal into blocks of `pool` from here on.
    pub(crate) fn set_pool(&mut self, pool: Pool) {
        self.pool = pool;
    }

    fn update_keys(&mut self, out: &mut Vec<Packet>) -> io::Result<()> {
        // KeyUpdate, update_not_requested, under the old keys; the new ones from here on.
        self.seal(HANDSHAKE, &[&[24, 0, 0, 1, 0]], out)?;
        let (seq, secrets) = lock(&self.keys.kernel).update_tx().map_err(tls_error)?;
        self.key = Key::new(true, secrets)?;
        self.seq = seq;
        self.keys.update_tx.store(false, Ordering::Release);
        Ok(())
    }

    fn seal(&mut self, typ: u8, plaintext: &[&[u8]], out: &mut Vec<Packet>) -> io::Result<()> {
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
        let tls13 = self.keys.tls13;
        let plain: usize = plaintext.iter().map(|p| p.len()).sum();
        let explicit = if self.key.explicit { EXPLICIT } else { 0 };
        let inner = usize::from(tls13);
        let payload = explicit + plain + inner + TAG;
        let mut buf = self
            .pool
            .rent(HEADER + payload)
            .map_err(|e| io::Error::new(io::ErrorKind::OutOfMemory, e))?;
        let nonce = self.key.nonce(seq);
        let record = &mut buf.spare_mut()[..HEADER + payload];
        let outer = if tls13 { APPLICATION_DATA } else { typ };
        record[..HEADER].copy_from_slice(&[outer, 3, 3, (payload >> 8) as u8, payload as u8]);
        let (header, body) = record.split_at_mut(HEADER);
        body[..explicit].copy_from_slice(&nonce[4..4 + explicit]);
        let mut at = explicit;
        for piece in plaintext {
            body[at..at + piece.len()].copy_from_slice(piece);
            at += piece.len();
        }
        if tls13 {
            body[at] = typ;
        }
        let (sealed, tag) = body[explicit..].split_at_mut(plain + inner);
        let nonce = Nonce::assume_unique_for_key(nonce);
        let result = if tls13 {
            self.key
                .key
                .seal_in_place_separate_tag(nonce, Aad::from(&*header), sealed)
        } else {
            let aad = tls12_aad(seq, typ, plain);
            self.key
                .key
                .seal_in_place_separate_tag(nonce, Aad::from(aad), sealed)
        };
        let computed = result.map_err(|_| invalid("a TLS record could not be sealed".into()))?;
        tag.copy_from_slice(computed.as_ref());
        buf.commit(HEADER + payload).map_err(io::Error::other)?;
        out.push(buf.freeze());
        Ok(())
    }
}
