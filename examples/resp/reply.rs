//! Writing RESP2 replies: the two servers' output buffers behind one trait, and the reply shapes
//! the commands use.

use super::store::Kept;

/// An output buffer replies are staged in, for values kept as `V` (the packetpipe server's `PipeWriter`, the tokio-util
/// server's `BytesMut`); one flush per batch sends them.
pub trait Reply<V> {
    /// Protocol bytes, copied.
    fn raw(&mut self, bytes: &[u8]);

    /// A bulk string of a stored value: `$<len>\r\n<value>\r\n`.
    fn bulk(&mut self, value: &V);

    /// Several pieces of protocol, copied contiguously.
    fn raw_parts(&mut self, parts: &[&[u8]]) {
        for part in parts {
            self.raw(part);
        }
    }
}

pub const OK: &[u8] = b"+OK\r\n";
pub const NIL: &[u8] = b"$-1\r\n";
pub const EMPTY_ARRAY: &[u8] = b"*0\r\n";

/// `<prefix><n>\r\n` in a stack buffer.
pub struct Header {
    buf: [u8; 24],
    start: usize,
}

impl Header {
    pub fn new(prefix: u8, n: i64) -> Header {
        let mut buf = [0u8; 24];
        let mut i = buf.len() - 2;
        buf[i] = b'\r';
        buf[i + 1] = b'\n';
        let mut value = n.unsigned_abs();
        loop {
            i -= 1;
            buf[i] = b'0' + (value % 10) as u8;
            value /= 10;
            if value == 0 {
                break;
            }
        }
        if n < 0 {
            i -= 1;
            buf[i] = b'-';
        }
        i -= 1;
        buf[i] = prefix;
        Header { buf, start: i }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    /// The digits alone (no prefix, no CRLF).
    pub fn digits(&self) -> &[u8] {
        &self.buf[self.start + 1..self.buf.len() - 2]
    }
}

pub fn integer<V>(out: &mut impl Reply<V>, n: i64) {
    out.raw(Header::new(b':', n).as_bytes());
}

pub fn array<V>(out: &mut impl Reply<V>, len: usize) {
    out.raw(Header::new(b'*', len as i64).as_bytes());
}

pub fn bulk_bytes<V>(out: &mut impl Reply<V>, bytes: &[u8]) {
    out.raw_parts(&[
        Header::new(b'$', bytes.len() as i64).as_bytes(),
        bytes,
        b"\r\n",
    ]);
}

/// `-<message>\r\n`, with any CR or LF in the message turned into spaces (as Redis does).
pub fn error<V>(out: &mut impl Reply<V>, message: &str) {
    if message.bytes().any(|b| b == b'\r' || b == b'\n') {
        let clean: String = message
            .chars()
            .map(|c| if c == '\r' || c == '\n' { ' ' } else { c })
            .collect();
        out.raw_parts(&[b"-", clean.as_bytes(), b"\r\n"]);
    } else {
        out.raw_parts(&[b"-", message.as_bytes(), b"\r\n"]);
    }
}

/// Copy a value's bytes after its header, for outputs that copy.
pub fn copy_value(value: &impl Kept, mut put: impl FnMut(&[u8])) {
    put(Header::new(b'$', value.len() as i64).as_bytes());
    value.for_each_chunk(&mut put);
    put(b"\r\n");
}
