//! One client's session, the same for both servers: answer every complete request in the
//! buffer (the decoders hand them over as one batch), then flush the replies once; repeat until
//! the client leaves, sends QUIT, or sends a request larger than the maximum.

use std::cell::RefCell;
use std::future::poll_fn;
use std::io;
use std::rc::Rc;
use std::task::{Context, Poll};

use super::command::{self, Args, Flow};
use super::reply::{self, Reply};
use super::store::{Store, Value};
use super::RespError;

/// The key space, shared by the connections of one server thread.
pub type Shared<V> = Rc<RefCell<Store<V>>>;

/// Replies staged beyond this are flushed before more requests are answered, so a client that
/// pipelines without reading cannot grow the output without bound.
pub const BATCH_BYTES: usize = 256 * 1024;

/// The requests a decoder found complete at once; the [`Args`] methods read the selected one.
pub trait Batch: Args {
    /// Requests in the batch (malformed ones included: they are answered with their error).
    fn requests(&self) -> usize;

    /// Make request `request` the one the [`Args`] methods read.
    fn select(&mut self, request: usize);
}

/// A connection as the session sees it: batches of requests in, an output buffer, a flush.
pub trait Transport {
    type Value: Value;
    type Batch: Batch<Value = Self::Value>;
    type Output: Reply<<Self::Value as Value>::Kept>;

    /// Every request complete in the buffer, if any is; reads more from the socket otherwise.
    #[allow(clippy::type_complexity)]
    fn poll_batch(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Self::Batch, RespError>>>;

    /// Give an executed batch back for reuse.
    fn recycle(&mut self, batch: Self::Batch);

    fn output(&mut self) -> &mut Self::Output;

    /// Bytes of replies staged and not yet flushed.
    fn staged(&self) -> usize;

    /// Send the staged replies.
    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;

    /// No more replies: close the write side once everything staged is sent.
    fn close(&mut self);
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Next {
    /// Flush, then answer more.
    More,
    /// Flush, then close.
    Close,
}

/// Serve the client behind `transport` until it leaves.
pub async fn run<T: Transport>(mut transport: T, store: Shared<T::Value>) {
    loop {
        let next = poll_fn(|cx| poll_batch(cx, &mut transport, &store)).await;
        if poll_fn(|cx| transport.poll_flush(cx)).await.is_err() || next == Next::Close {
            break;
        }
    }
    transport.close();
}

/// Answer every request that is complete (at least one: wait for it), staging the replies.
fn poll_batch<T: Transport>(
    cx: &mut Context<'_>,
    transport: &mut T,
    store: &RefCell<Store<T::Value>>,
) -> Poll<Next> {
    let mut store = store.borrow_mut();
    let mut answered = 0;
    let next = loop {
        match transport.poll_batch(cx) {
            Poll::Ready(Some(Ok(mut batch))) => {
                let mut flow = Flow::Continue;
                for request in 0..batch.requests() {
                    batch.select(request);
                    answered += 1;
                    flow = command::execute(&mut store, &mut batch, transport.output());
                    if flow == Flow::Close {
                        break;
                    }
                }
                transport.recycle(batch);
                if flow == Flow::Close {
                    break Next::Close;
                }
                if transport.staged() >= BATCH_BYTES {
                    break Next::More;
                }
            }
            Poll::Ready(Some(Err(RespError::Fatal(message)))) => {
                answered += 1;
                reply::error(transport.output(), &message);
                break Next::Close;
            }
            // The client left (mid-request, or with an I/O error).
            Poll::Ready(Some(Err(_)) | None) => break Next::Close,
            Poll::Pending if answered > 0 => break Next::More,
            Poll::Pending => return Poll::Pending,
        }
    };
    store.answered(answered);
    Poll::Ready(next)
}
