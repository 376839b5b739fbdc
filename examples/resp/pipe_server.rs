//! The packetpipe server: the duplex connection (the `PipeReader`'s reads read the socket into
//! pooled blocks, the `PipeWriter`'s flushes write the socket with vectored writes), requests
//! decoded in place by a [`Decoder`] over the segment chain, replies staged in the `PipeWriter`
//! and flushed once per batch.
//!
//! - Requests: [`RespDecoder`] finds every complete request at hand with
//!   [`parse_batch`](super::parse::parse_batch) over the segments (never joining them) and takes
//!   the batch out at once: up to the pipe's copy threshold (2 KiB) it is copied into a fitted
//!   pooled block, so it pins no receive block; a larger one lying in one segment is shared
//!   without copying; a larger one across segments is taken argument by argument, each large
//!   argument (a value) as a `PacketChain` of the segments' packets, never copied. While a
//!   request is incomplete, [`Frames`] waits with `read_at_least(n)`: one wake per large value,
//!   not one per segment.
//! - Store: a value above the copy threshold is stored as the packets taken out (zero-copy from
//!   the socket's pooled block into the store); a smaller one is copied, inline in the packet
//!   or into an allocation of its size ([`Stored`]). A GET of a large value `append`s those
//!   packets to the output (zero-copy out); a small one is copied in behind its header.
//! - Pipelining: every complete request in the buffer is answered, then one `flush_pipe` (see
//!   [`session`](super::session)); the drain pump writes the batch with vectored writes.

use std::borrow::Cow;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use packetpipe::frame::{DecodeBuf, Decoded, Decoder, FrameError, Frames};
use packetpipe::io::{ConnectionOptions, DuplexPipe};
use packetpipe::pipe::{PipeOptions, PipeWriter, DEFAULT_COPY_THRESHOLD};
use packetpipe::{ByteSegments, Packet, PacketChain};
use tokio::net::TcpStream;

use super::command::Args;
use super::parse::{parse_batch, Requests, Span, Stop};
use super::reply::{self, Header, Reply};
use super::session::{self, Batch, Shared, Transport};
use super::store::{Kept, Value};
use super::{Config, RespError};

/// Size of each socket read (the input pipe's segment size): a 100 KB value lies in one or two
/// segments, which a `PacketChain` holds without allocating. Measured with `redis-benchmark -t
/// set -d 100000 -P 4`: 61-65 k SETs/s with 256 KiB reads, 33-40 k with 64 KiB, the same as
/// 256 KiB with 1 MiB. An idle connection holds no block whatever the size.
pub const READ_SEGMENT: usize = 256 * 1024;

/// Values up to this size are copied into the reply with their bulk header; larger ones are
/// appended as the stored packets.
pub const COPY_OUT_UP_TO: usize = 1024;

/// The duplex connection's settings: [`READ_SEGMENT`] socket reads, input backpressure beyond
/// 1 MiB unparsed (a larger value is waited for with `read_at_least`, which lifts it), output
/// backpressure beyond 1 MiB of unwritten replies (a batch of large GETs flushes without
/// waiting), up to 64 segments per vectored write.
pub fn connection_options() -> ConnectionOptions {
    ConnectionOptions {
        input: PipeOptions {
            min_segment_size: READ_SEGMENT,
            pause_threshold: 1 << 20,
            resume_threshold: 512 << 10,
            ..Default::default()
        },
        output: PipeOptions {
            pause_threshold: 1 << 20,
            resume_threshold: 512 << 10,
            ..Default::default()
        },
        max_write_segments: 64,
        ..Default::default()
    }
}

/// Serve one client: the duplex connection (inline: the session's reads read the socket and its
/// flushes write it) and the session, joined in one task (`io::join`: the connection's future
/// only writes what a full socket did not take).
pub async fn serve(socket: TcpStream, store: Shared<PacketChain>, config: Config) {
    let _ = socket.set_nodelay(true);
    serve_stream(socket, store, config).await;
}

/// [`serve`] over any tokio stream (a `TcpStream`, or a `TlsStream` over one).
pub async fn serve_stream<S>(stream: S, store: Shared<PacketChain>, config: Config)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
{
    let (app, connection) = packetpipe::io::tokio::connection_with(stream, connection_options());
    let _ = packetpipe::io::join(connection, serve_pipe(app, store, config)).await;
}

/// Serve one client over TLS: the handshake within
/// [`HANDSHAKE_TIMEOUT`](super::server::HANDSHAKE_TIMEOUT), then the session as on a plain
/// connection (the records opened in the connection's receive blocks). A failed or stalled
/// handshake closes the connection.
#[cfg(feature = "tls")]
pub async fn serve_tls(
    acceptor: packetpipe::io::tls::TlsAcceptor,
    socket: TcpStream,
    store: Shared<PacketChain>,
    config: Config,
) {
    let _ = socket.set_nodelay(true);
    let handshake = acceptor.accept(socket);
    match tokio::time::timeout(super::server::HANDSHAKE_TIMEOUT, handshake).await {
        Ok(Ok(tls)) => serve_stream(tls, store, config).await,
        Ok(Err(e)) => eprintln!("TLS handshake failed: {e}"),
        Err(_) => eprintln!("TLS handshake timed out"),
    }
}

/// Serve one client's pipes, whichever transport fills and drains them (the tokio connection
/// above, or the io_uring driver).
pub async fn serve_pipe(app: DuplexPipe, store: Shared<PacketChain>, config: Config) {
    let DuplexPipe { reader, writer } = app;
    let transport = PipeTransport {
        requests: Frames::new(reader, RespDecoder::new(config)),
        out: PipeOut::new(writer),
    };
    session::run(transport, store).await;
}

/// The decoder: one [`PipeBatch`] of every complete request in the pipe.
#[derive(Debug)]
pub struct RespDecoder {
    max_request: usize,
    copy_threshold: usize,
    /// A batch given back by [`recycle`](Self::recycle), reused with its capacity.
    spare: Option<PipeBatch>,
}

impl RespDecoder {
    pub fn new(config: Config) -> RespDecoder {
        RespDecoder {
            max_request: config.max_request,
            copy_threshold: DEFAULT_COPY_THRESHOLD,
            spare: None,
        }
    }

    /// Give an executed batch back: its buffers are reused by the next one, so a connection in
    /// steady state allocates nothing per request.
    pub fn recycle(&mut self, mut batch: PipeBatch) {
        batch.frame = Packet::new();
        batch.spans.clear();
        batch.taken.clear();
        batch.chains.clear();
        batch.requests.clear();
        self.spare = Some(batch);
    }

    /// Take the batch's `end` bytes out of the pipe.
    fn take(
        &self,
        buf: &mut DecodeBuf<'_>,
        end: usize,
        batch: &mut PipeBatch,
    ) -> Result<(), FrameError> {
        let threshold = self.copy_threshold;
        let in_first_segment = buf.buffer().segments().next().map_or(0, <[u8]>::len) >= end;
        if in_first_segment || batch.spans.iter().all(|span| span.len() <= threshold) {
            // Copied into a fitted block up to the threshold (or when small arguments span
            // segments), shared zero-copy above it when it lies in one segment.
            batch.frame = buf.take_frame(end)?;
            return Ok(());
        }
        // A large argument across segments: take each argument out on its own, sharing the
        // large ones' packets, and drop the headers in between.
        let mut consumed = 0;
        for &span in &batch.spans {
            buf.skip(span.start - consumed)?;
            if span.len() > threshold {
                batch.chains.push(buf.take_frame_chain(span.len())?);
                batch.taken.push(Taken::Chain(batch.chains.len() - 1));
            } else {
                batch.taken.push(Taken::Packet(buf.take_frame(span.len())?));
            }
            consumed = span.end;
        }
        buf.skip(end - consumed)?;
        Ok(())
    }
}

impl Decoder for RespDecoder {
    type Item = PipeBatch;
    type Error = RespError;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Decoded<PipeBatch>, RespError> {
        let mut batch = self.spare.take().unwrap_or_default();
        batch.copy_threshold = self.copy_threshold;
        let buffer = buf.buffer();
        let first = buffer.segments().next().unwrap_or(&[]);
        let (spans, entries) = (&mut batch.spans, &mut batch.requests.entries);
        let (end, stop) = if first.len() == buffer.len() {
            // One segment (the common case): parse it as a slice.
            let chunks_from = |pos| std::iter::once(&first[pos..]);
            parse_batch(chunks_from, first.len(), self.max_request, spans, entries)
        } else {
            let chunks_from = |pos| buffer.slice(pos..).segments();
            parse_batch(chunks_from, buffer.len(), self.max_request, spans, entries)
        };
        if batch.requests.len() == 0 {
            match stop {
                Stop::Incomplete { need } => {
                    // Empty requests before it (blank lines, `*0`) are consumed unanswered.
                    buf.skip(end)?;
                    self.spare = Some(batch);
                    return Ok(Decoded::NeedAtLeast(need - end));
                }
                Stop::Fatal { message } => return Err(RespError::Fatal(message)),
                Stop::Full => {}
            }
        }
        // The requests before a fatal one are answered first; the next call meets it again.
        self.take(buf, end, &mut batch)?;
        Ok(Decoded::Frame(batch))
    }
}

/// Every complete request that was in the pipe, taken out: the arguments, each where it ended
/// up, and the request the [`Args`] methods read ([`Batch::select`]).
#[derive(Debug, Default)]
pub struct PipeBatch {
    /// The whole batch when it was taken at once (`taken` is empty then).
    frame: Packet,
    /// Every argument's span in the batch.
    spans: Vec<Span>,
    /// Otherwise: each argument, taken out on its own.
    taken: Vec<Taken>,
    /// Large arguments taken as chains of the segments' packets.
    chains: Vec<PacketChain>,
    requests: Requests,
    copy_threshold: usize,
}

#[derive(Debug)]
enum Taken {
    /// A small argument (copied).
    Packet(Packet),
    /// A large argument: `chains[i]`.
    Chain(usize),
}

impl Batch for PipeBatch {
    fn requests(&self) -> usize {
        self.requests.len()
    }

    fn select(&mut self, request: usize) {
        self.requests.select(request);
    }
}

impl Args for PipeBatch {
    type Value = PacketChain;

    fn argc(&self) -> usize {
        self.requests.argc()
    }

    fn arg(&self, i: usize) -> Cow<'_, [u8]> {
        let index = self.requests.arg_index(i);
        if self.taken.is_empty() {
            return Cow::Borrowed(&self.frame[self.spans[index].range()]);
        }
        match &self.taken[index] {
            Taken::Packet(packet) => Cow::Borrowed(packet),
            Taken::Chain(c) => {
                let chain = &self.chains[*c];
                match chain.iter().len() {
                    1 => Cow::Borrowed(chain.iter().next().expect("one segment")),
                    _ => Cow::Owned(packetpipe::ByteSegments::to_vec(chain)),
                }
            }
        }
    }

    fn take_value(&mut self, i: usize) -> PacketChain {
        let index = self.requests.arg_index(i);
        if self.taken.is_empty() {
            let span = self.spans[index];
            // Above the threshold the frame was shared from the socket's block: so is the value.
            // A smaller one is a view of the frame, copied once where it is kept.
            return PacketChain::from(self.frame.slice(span.range()));
        }
        match &mut self.taken[index] {
            Taken::Packet(packet) => PacketChain::from(std::mem::take(packet)),
            Taken::Chain(c) => std::mem::take(&mut self.chains[*c]),
        }
    }

    fn protocol_error(&self) -> Option<&str> {
        self.requests.error()
    }
}

/// A value as the key space keeps it, at a packet's size (40 bytes) whatever its length.
///
/// Up to the copy threshold a value is copied: inline in the packet when it fits (37 bytes), else
/// into an allocation of exactly its size. A pooled block would do, but a kept value pays its
/// 32-byte header and its size class's rounding for as long as it lives: 160 bytes of heap for a
/// 100-byte value against 112 (`scripts/resp_memory.sh`: 287 against 239 bytes per key with the
/// key and the entry). The pool is for the bytes in flight; the store keeps small values.
#[derive(Debug)]
pub enum Stored {
    /// One packet: a small value inline, a large one the share of the socket's block it was
    /// received in.
    One(Packet),
    /// A value too long for inline and at most the copy threshold.
    Copied(Box<[u8]>),
    /// The packets of a large value received across blocks, boxed: a `PacketChain` holds its
    /// first packets inline and is four times a packet's size.
    Spanning(Box<PacketChain>),
}

impl Stored {
    fn packets(&self) -> impl Iterator<Item = &Packet> {
        let (one, spanning) = match self {
            Stored::One(packet) => (Some(packet), None),
            Stored::Spanning(chain) => (None, Some(chain.iter())),
            Stored::Copied(_) => (None, None),
        };
        one.into_iter().chain(spanning.into_iter().flatten())
    }
}

/// A copy of a small value's `chunks` (`len` bytes in all): inline, or in a box of its size.
fn copy_small<'a>(len: usize, chunks: impl Iterator<Item = &'a [u8]>) -> Stored {
    if len <= Packet::INLINE_CAPACITY {
        let mut bytes = [0u8; Packet::INLINE_CAPACITY];
        let mut at = 0;
        for chunk in chunks {
            bytes[at..at + chunk.len()].copy_from_slice(chunk);
            at += chunk.len();
        }
        return Stored::One(Packet::copy_from_slice(&bytes[..len]));
    }
    let mut boxed = Vec::with_capacity(len);
    chunks.for_each(|chunk| boxed.extend_from_slice(chunk));
    Stored::Copied(boxed.into_boxed_slice())
}

impl Value for PacketChain {
    type Kept = Stored;

    fn copy_from(bytes: &[u8]) -> PacketChain {
        // Inline when it fits the packet value, else a block of the global pool.
        PacketChain::from(Packet::copy_from_slice(bytes))
    }

    fn keep(mut self) -> Stored {
        if self.len() <= DEFAULT_COPY_THRESHOLD {
            return copy_small(self.len(), self.iter().map(|packet| &packet[..]));
        }
        match self.iter().len() {
            1 => Stored::One(self.pop_front().expect("one segment")),
            _ => Stored::Spanning(Box::new(self)),
        }
    }

    fn keep_in(self, slot: &mut Stored) {
        match slot {
            // A value replacing one of its kind and size reuses the slot's allocation, so a SET
            // that replaces a value allocates nothing (a large value in one segment replacing
            // one that spanned segments stays boxed).
            Stored::Spanning(chain) if self.len() > DEFAULT_COPY_THRESHOLD => **chain = self,
            Stored::Copied(bytes) if bytes.len() == self.len() => {
                let mut at = 0;
                for packet in self.iter() {
                    bytes[at..at + packet.len()].copy_from_slice(packet);
                    at += packet.len();
                }
            }
            _ => *slot = self.keep(),
        }
    }
}

impl Kept for Stored {
    fn len(&self) -> usize {
        match self {
            Stored::One(packet) => packet.len(),
            Stored::Copied(bytes) => bytes.len(),
            Stored::Spanning(chain) => chain.len(),
        }
    }

    fn for_each_chunk(&self, mut f: impl FnMut(&[u8])) {
        if let Stored::Copied(bytes) = self {
            f(bytes);
        }
        for packet in self.packets() {
            f(packet);
        }
    }
}

/// The output: replies staged in the output pipe.
///
/// Small replies are gathered in a reused `Vec` and written into the pipe with one
/// `write_slice` per batch (or before a large value): a `write_slice` per reply costs about 130
/// instructions for a 5-byte reply (its checks of the writer's state, `spare_mut` and
/// `commit`), `Vec::extend_from_slice` about 20 (callgrind, `BENCHMARKS.md`). Large values are
/// `append`ed as the stored packets (zero-copy out).
#[derive(Debug)]
pub struct PipeOut {
    writer: PipeWriter,
    small: Vec<u8>,
}

/// The gathering buffer keeps at most this much capacity between batches.
const SMALL_REPLIES_KEPT: usize = 16 * 1024;

impl PipeOut {
    pub fn new(writer: PipeWriter) -> PipeOut {
        PipeOut {
            writer,
            small: Vec::new(),
        }
    }

    /// Write the gathered small replies into the pipe. The writer's methods fail only once it
    /// has completed (the session completes it last) or when the pool cannot allocate; the
    /// flush that ends the batch reports a broken connection.
    fn commit(&mut self) {
        if !self.small.is_empty() {
            let _ = self.writer.write_slice(&self.small);
            self.small.clear();
            if self.small.capacity() > SMALL_REPLIES_KEPT {
                self.small = Vec::new();
            }
        }
    }
}

impl Reply<Stored> for PipeOut {
    fn raw(&mut self, bytes: &[u8]) {
        self.small.extend_from_slice(bytes);
    }

    fn bulk(&mut self, value: &Stored) {
        // A copied value is copied out whatever its size (it has no packets to append).
        if value.len() <= COPY_OUT_UP_TO || matches!(value, Stored::Copied(_)) {
            reply::copy_value(value, |bytes| self.small.extend_from_slice(bytes));
        } else {
            // Zero-copy out: the stored packets themselves go to the socket.
            self.raw(Header::new(b'$', value.len() as i64).as_bytes());
            self.commit();
            for packet in value.packets() {
                let _ = self.writer.append(packet.clone());
            }
            self.raw(b"\r\n");
        }
    }
}

/// The session's view of a packetpipe connection.
pub struct PipeTransport {
    pub requests: Frames<RespDecoder>,
    pub out: PipeOut,
}

impl Transport for PipeTransport {
    type Value = PacketChain;
    type Batch = PipeBatch;
    type Output = PipeOut;

    fn poll_batch(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<PipeBatch, RespError>>> {
        Pin::new(&mut self.requests).poll_next(cx)
    }

    fn recycle(&mut self, batch: PipeBatch) {
        self.requests.decoder_mut().recycle(batch);
    }

    fn output(&mut self) -> &mut PipeOut {
        &mut self.out
    }

    fn staged(&self) -> usize {
        self.out.small.len() + self.out.writer.unflushed_len()
    }

    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.out.commit();
        self.out
            .writer
            .poll_flush_pipe(cx)
            .map(|result| match result {
                Ok(flushed) if flushed.is_completed => Err(io::ErrorKind::BrokenPipe.into()),
                Ok(_) => Ok(()),
                Err(e) => Err(e.into()),
            })
    }

    fn close(&mut self) {
        // The drain pump writes what is left, then shuts the socket's write side down.
        self.out.commit();
        self.out.writer.complete();
    }
}
