//! The same server on tokio-util: `Framed<TcpStream, RespCodec>` over `BytesMut`, the same
//! parser, commands, store and session; only the buffer layer differs.
//!
//! - Requests: [`RespCodec`] parses the `BytesMut` with the same
//!   [`parse_batch`](super::parse::parse_batch) (one contiguous slice), splits every complete
//!   request off as one `Bytes`, and reserves room for the rest of an incomplete request (as
//!   `LengthDelimitedCodec` does for a frame).
//! - Store: values are `Bytes`, with the same copy-small / share-large rule as the packetpipe
//!   server: a value up to 2 KiB is copied (`Bytes::copy_from_slice`), a larger one is a slice of
//!   the request (zero-copy, pinning the read buffer it arrived in).
//! - Replies are copied into `Framed`'s write buffer and written with one `write` per batch.

use std::borrow::Cow;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use futures::{Sink, Stream};
use packetpipe::pipe::DEFAULT_COPY_THRESHOLD;
use tokio::net::TcpStream;
use tokio_util::codec::{Decoder, Encoder, Framed};

use super::command::Args;
use super::parse::{parse_batch, Requests, Span, Stop};
use super::reply::{self, Reply};
use super::session::{self, Batch, Shared, Transport};
use super::store::{Kept, Value};
use super::{Config, RespError};

/// Serve one client on `Framed` (tokio-util's default 8 KiB read and write buffers).
pub async fn serve(socket: TcpStream, store: Shared<Bytes>, config: Config) {
    let _ = socket.set_nodelay(true);
    let framed = Framed::new(socket, RespCodec::new(config));
    session::run(framed, store).await;
}

/// The codec: one [`BytesBatch`] of every complete request in the buffer.
#[derive(Debug)]
pub struct RespCodec {
    max_request: usize,
    spare: Option<BytesBatch>,
}

impl RespCodec {
    pub fn new(config: Config) -> RespCodec {
        RespCodec {
            max_request: config.max_request,
            spare: None,
        }
    }

    /// Give an executed batch back, for its capacity.
    pub fn recycle(&mut self, mut batch: BytesBatch) {
        batch.frame = Bytes::new();
        batch.args.clear();
        batch.requests.clear();
        self.spare = Some(batch);
    }
}

impl Decoder for RespCodec {
    type Item = BytesBatch;
    type Error = RespError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<BytesBatch>, RespError> {
        let mut batch = self.spare.take().unwrap_or_default();
        let (end, stop) = parse_batch(
            |pos| std::iter::once(&src[pos..]),
            src.len(),
            self.max_request,
            &mut batch.args,
            &mut batch.requests.entries,
        );
        if batch.requests.len() == 0 {
            match stop {
                Stop::Incomplete { need } => {
                    // Empty requests before it are consumed unanswered; room is made for the
                    // rest of the incomplete one, as `LengthDelimitedCodec` does for a frame.
                    let missing = need - src.len();
                    src.advance(end);
                    src.reserve(missing);
                    self.spare = Some(batch);
                    return Ok(None);
                }
                Stop::Fatal { message } => return Err(RespError::Fatal(message)),
                Stop::Full => {}
            }
        }
        batch.frame = src.split_to(end).freeze();
        Ok(Some(batch))
    }
}

/// Raw protocol bytes (the session writes replies straight into the write buffer; `Framed`'s
/// `Sink` needs an item type to flush through).
impl Encoder<Bytes> for RespCodec {
    type Error = RespError;

    fn encode(&mut self, item: Bytes, dst: &mut BytesMut) -> Result<(), RespError> {
        dst.extend_from_slice(&item);
        Ok(())
    }
}

/// Every complete request that was in the buffer, split off as one `Bytes`, the arguments as
/// spans of it; the [`Args`] methods read the selected request.
#[derive(Debug, Default)]
pub struct BytesBatch {
    frame: Bytes,
    args: Vec<Span>,
    requests: Requests,
}

impl BytesBatch {
    fn span(&self, i: usize) -> Span {
        self.args[self.requests.arg_index(i)]
    }
}

impl Batch for BytesBatch {
    fn requests(&self) -> usize {
        self.requests.len()
    }

    fn select(&mut self, request: usize) {
        self.requests.select(request);
    }
}

impl Args for BytesBatch {
    type Value = Bytes;

    fn argc(&self) -> usize {
        self.requests.argc()
    }

    fn arg(&self, i: usize) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.frame[self.span(i).range()])
    }

    fn take_value(&mut self, i: usize) -> Bytes {
        let span = self.span(i);
        if span.len() > DEFAULT_COPY_THRESHOLD {
            self.frame.slice(span.range())
        } else {
            Bytes::copy_from_slice(&self.frame[span.range()])
        }
    }

    fn protocol_error(&self) -> Option<&str> {
        self.requests.error()
    }
}

impl Value for Bytes {
    type Kept = Bytes;

    fn copy_from(bytes: &[u8]) -> Bytes {
        Bytes::copy_from_slice(bytes)
    }

    fn keep(self) -> Bytes {
        self
    }
}

impl Kept for Bytes {
    fn len(&self) -> usize {
        Bytes::len(self)
    }

    fn for_each_chunk(&self, mut f: impl FnMut(&[u8])) {
        f(self);
    }
}

impl Reply<Bytes> for BytesMut {
    fn raw(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }

    fn bulk(&mut self, value: &Bytes) {
        reply::copy_value(value, |bytes| self.extend_from_slice(bytes));
    }
}

impl Transport for Framed<TcpStream, RespCodec> {
    type Value = Bytes;
    type Batch = BytesBatch;
    type Output = BytesMut;

    fn poll_batch(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<BytesBatch, RespError>>> {
        Pin::new(self).poll_next(cx)
    }

    fn recycle(&mut self, batch: BytesBatch) {
        self.codec_mut().recycle(batch);
    }

    fn output(&mut self) -> &mut BytesMut {
        self.write_buffer_mut()
    }

    fn staged(&self) -> usize {
        self.write_buffer().len()
    }

    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Sink::<Bytes>::poll_flush(Pin::new(self), cx).map_err(RespError::into_io)
    }

    fn close(&mut self) {
        // Dropping `Framed` after the last flush closes the socket; nothing is left staged.
    }
}
