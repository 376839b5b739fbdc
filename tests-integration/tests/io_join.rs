//! `io::join`: two futures in one task, a wake of one by the other served in the same poll.

use std::cell::{Cell, RefCell};
use std::future::{poll_fn, Future};
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use packetpipe::io::join;

mod kit;

use kit::wake::counting_waker;

#[test]
fn a_wake_of_one_by_the_other_is_served_in_the_same_poll() {
    // `a` waits for a value `b` hands it (the echo's shape: the fill pump's flush wakes the app).
    let slot: RefCell<(Option<u32>, Option<Waker>)> = RefCell::new((None, None));
    let a_polls = Cell::new(0);
    let a = poll_fn(|cx| {
        a_polls.set(a_polls.get() + 1);
        let mut slot = slot.borrow_mut();
        match slot.0.take() {
            Some(value) => Poll::Ready(value),
            None => {
                slot.1 = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    });
    let b = poll_fn(|_| {
        let waker = {
            let mut slot = slot.borrow_mut();
            slot.0 = Some(42);
            slot.1.take()
        };
        waker.expect("a registered first").wake();
        Poll::Ready("sent")
    });
    let (count, waker) = counting_waker();
    let mut joined = pin!(join(a, b));
    let result = joined.as_mut().poll(&mut Context::from_waker(&waker));
    assert_eq!(result, Poll::Ready((42, "sent")));
    assert_eq!(
        a_polls.get(),
        2,
        "a polled again in the same poll, after b woke it"
    );
    assert_eq!(count.get(), 0, "the task was not woken");
}

#[test]
fn only_the_woken_future_is_polled_again() {
    let (a_polls, b_polls) = (Cell::new(0), Cell::new(0));
    let a_waker: RefCell<Option<Waker>> = RefCell::new(None);
    let a = poll_fn(|cx| {
        a_polls.set(a_polls.get() + 1);
        *a_waker.borrow_mut() = Some(cx.waker().clone());
        Poll::<()>::Pending
    });
    let b = poll_fn(|cx| {
        b_polls.set(b_polls.get() + 1);
        if b_polls.get() == 1 {
            a_waker
                .borrow()
                .as_ref()
                .expect("a polled first")
                .wake_by_ref();
        }
        let _ = cx;
        Poll::<()>::Pending
    });
    let (count, waker) = counting_waker();
    let mut joined = pin!(join(a, b));
    assert!(joined
        .as_mut()
        .poll(&mut Context::from_waker(&waker))
        .is_pending());
    assert_eq!((a_polls.get(), b_polls.get()), (2, 1));
    assert_eq!(count.get(), 0);
}

#[test]
fn a_wake_from_another_thread_reaches_the_task() {
    let shared: Arc<std::sync::Mutex<(bool, Option<Waker>)>> = Default::default();
    let a = {
        let shared = shared.clone();
        poll_fn(move |cx| {
            let mut shared = shared.lock().unwrap();
            if shared.0 {
                Poll::Ready(1)
            } else {
                shared.1 = Some(cx.waker().clone());
                Poll::Pending
            }
        })
    };
    let b = poll_fn(|_| Poll::Ready(2));
    let (count, waker) = counting_waker();
    let mut joined = pin!(join(a, b));
    let mut cx = Context::from_waker(&waker);
    assert!(joined.as_mut().poll(&mut cx).is_pending());
    assert_eq!(count.get(), 0);
    let setter = {
        let shared = shared.clone();
        std::thread::spawn(move || {
            let waker = {
                let mut shared = shared.lock().unwrap();
                shared.0 = true;
                shared.1.take()
            };
            waker.expect("registered").wake();
        })
    };
    setter.join().unwrap();
    assert_eq!(count.get(), 1, "forwarded to the task");
    assert_eq!(joined.as_mut().poll(&mut cx), Poll::Ready((1, 2)));
}

#[test]
fn futures_that_keep_waking_each_other_yield_to_the_executor() {
    let polls = Cell::new(0);
    let spin = || {
        poll_fn(|cx| {
            polls.set(polls.get() + 1);
            cx.waker().wake_by_ref();
            Poll::<()>::Pending
        })
    };
    let (count, waker) = counting_waker();
    let mut joined = pin!(join(spin(), spin()));
    assert!(joined
        .as_mut()
        .poll(&mut Context::from_waker(&waker))
        .is_pending());
    assert_eq!(
        polls.get(),
        16,
        "8 passes over both, then back to the executor"
    );
    assert_eq!(count.get(), 1, "the task was woken to come back");
}

#[test]
#[cfg(feature = "tokio")]
fn the_echo_runs_over_a_real_socket() {
    // A connection and its application, joined in one task.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        use packetpipe::frame::{FrameWriter, Frames, LengthDelimited};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (socket, _) = listener.accept().await.unwrap();
            let (app, connection) = packetpipe::io::tokio::connection(socket);
            let echo = async move {
                let mut frames = Frames::new(app.reader, LengthDelimited::new());
                let mut out = FrameWriter::new(app.writer, LengthDelimited::new());
                out.forward(&mut frames).await.unwrap();
                out.into_inner().complete();
            };
            let (connection, ()) = join(connection, echo).await;
            connection.unwrap();
        });
        let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
        for round in 0..100u32 {
            let payload = round.to_le_bytes().repeat(1 + round as usize % 7);
            let mut frame = (payload.len() as u32).to_be_bytes().to_vec();
            frame.extend(&payload);
            client.write_all(&frame).await.unwrap();
            let mut echoed = vec![0; frame.len()];
            client.read_exact(&mut echoed).await.unwrap();
            assert_eq!(echoed, frame);
        }
        client.shutdown().await.unwrap();
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
        server.await.unwrap();
    });
}

#[test]
fn after_a_panic_in_a_poll_wakes_from_outside_reach_the_task_again() {
    let saved: Arc<std::sync::Mutex<Option<Waker>>> = Default::default();
    let mut first = true;
    let a = {
        let saved = saved.clone();
        poll_fn(move |cx| {
            *saved.lock().unwrap() = Some(cx.waker().clone());
            if std::mem::take(&mut first) {
                panic!("a poll that panics");
            }
            Poll::<()>::Pending
        })
    };
    let b = poll_fn(|_| Poll::<()>::Pending);
    let (count, waker) = counting_waker();
    let mut joined = Box::pin(join(a, b));
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = joined.as_mut().poll(&mut Context::from_waker(&waker));
    }));
    assert!(caught.is_err());
    let a_waker = saved
        .lock()
        .unwrap()
        .take()
        .expect("registered before the panic");
    a_waker.wake();
    assert_eq!(count.get(), 1, "forwarded to the task");
}

#[test]
#[should_panic(expected = "io::join polled after it completed")]
fn polling_after_completion_panics_with_a_clear_message() {
    let (_, waker) = counting_waker();
    let mut cx = Context::from_waker(&waker);
    let mut joined = pin!(join(
        poll_fn(|_| Poll::Ready(1)),
        poll_fn(|_| Poll::Ready(2))
    ));
    assert_eq!(joined.as_mut().poll(&mut cx), Poll::Ready((1, 2)));
    let _ = joined.as_mut().poll(&mut cx);
}
