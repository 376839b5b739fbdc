//! Interleavings of the driver's own steps that a test over sockets reaches only by chance,
//! forced by calling the steps one at a time.

use std::cell::RefCell;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::rc::Rc;

use super::*;
use crate::pipe::PipeWriter;

/// A driver with `options`, or `None` where io_uring is unavailable (a failure under
/// `PACKETPIPE_REQUIRE_URING`). `PACKETPIPE_URING_BUNDLES=0` (or `off`) turns receive bundles
/// off, as for the integration tests.
fn driver(options: DriverOptions) -> Option<Driver> {
    let bundles_off = matches!(
        std::env::var("PACKETPIPE_URING_BUNDLES").as_deref(),
        Ok("0") | Ok("off")
    );
    let options = DriverOptions {
        bundles: options.bundles && !bundles_off,
        ..options
    };
    match Driver::with_options(options) {
        Ok(mut driver) => {
            // Bounded waits, so that a step waiting on a wake the test never sends returns.
            driver.wait_timeout = Some(Duration::from_millis(10));
            Some(driver)
        }
        Err(e) if std::env::var_os("PACKETPIPE_REQUIRE_URING").is_none() => {
            eprintln!("io_uring unavailable here ({e}); skipped");
            None
        }
        Err(e) => panic!("io_uring is required (PACKETPIPE_REQUIRE_URING) but unavailable: {e}"),
    }
}

/// The socket a descriptor number refers to now: (device, inode), or `None` if it is closed.
fn socket_at(fd: RawFd) -> Option<(u64, u64)> {
    // SAFETY: `stat` is plain data, written by `fstat` before it is read; `fd` is only a number
    // here (a closed one makes `fstat` fail with EBADF).
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `stat` outlives the call.
    if unsafe { libc::fstat(fd, &mut stat) } != 0 {
        return None;
    }
    Some((stat.st_dev, stat.st_ino))
}

/// Take every completion of one wait into the driver (accepts open connections through `serve`).
fn complete_one_wait(driver: &mut Driver, serve: &mut Serve<'_>) {
    driver.submit_and_wait().expect("submit");
    driver.reap();
    let cqes = std::mem::take(&mut driver.cqes);
    for &(data, res, flags) in &cqes {
        driver.complete(data, res, flags, Some(&mut *serve));
    }
}

/// A receive queued in one service and a close in the next one, before the kernel has taken the
/// receive: the descriptor must stay open until the receive has ended. Closed earlier, its number
/// goes to the next socket the process opens (the kernel's next accept, typically), and the
/// queued receive, submitted after, takes that socket's first bytes: they reach no application.
#[test]
fn a_descriptor_outlives_every_submission_that_names_it() {
    // Process descriptors: their numbers are what the next socket opened reuses.
    let Some(mut driver) = driver(DriverOptions {
        fixed_descriptors: false,
        ..Default::default()
    }) else {
        return;
    };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    driver.listen(listener).unwrap();
    // The application hands its pipes to the test and returns at once, so the test decides when
    // the connection's application lets go of them.
    let pipes: Rc<RefCell<Vec<DuplexPipe>>> = Rc::default();
    let mut serve = {
        let pipes = pipes.clone();
        move |pipe| -> AppFuture {
            pipes.borrow_mut().push(pipe);
            Box::pin(async {})
        }
    };
    let mut client = TcpStream::connect(addr).unwrap();
    driver.arm_listeners().unwrap();
    while driver.live == 0 {
        complete_one_wait(&mut driver, &mut serve);
    }
    let key = driver
        .ready
        .pop_front()
        .expect("the new connection is ready");
    let index = index_of(key);
    let fd = match &driver.conns[index].conn.as_ref().unwrap().socket {
        Socket::Plain(fd) => fd.as_raw_fd(),
        Socket::Fixed(_) => panic!("a fixed descriptor with fixed_descriptors: false"),
    };
    let socket = socket_at(fd).expect("the connection's descriptor is open");

    // First service: the application runs (and returns); the receive is queued, not submitted.
    driver.service(key).unwrap();
    assert!(
        driver.conns[index].conn.as_ref().unwrap().recv_armed,
        "the first service arms the receive"
    );
    let queued = driver.ring.submission().len();
    assert!(queued >= 1, "the receive is queued");

    // Another connection, to stand for the next socket the process opens.
    let other = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut other_client = TcpStream::connect(other.local_addr().unwrap()).unwrap();
    let (other_server, _) = other.accept().unwrap();

    // The application drops its pipes before the kernel has taken the receive; the next service
    // (the same turn, as when the application's drop wakes the driver) cancels the receive.
    pipes.borrow_mut().clear();
    driver.service(key).unwrap();

    if socket_at(fd) != Some(socket) {
        // The bug this test is for. Show its effect: the next socket opened gets the number
        // (as the kernel's next accept would), and the queued receive, once submitted, takes
        // that socket's bytes.
        // SAFETY: `dup2` onto a number no handle in this process owns any more (the driver
        // closed it); the duplicate is closed below through that number.
        assert_eq!(unsafe { libc::dup2(other_server.as_raw_fd(), fd) }, fd);
        let sent = b"another connection's first bytes";
        other_client.write_all(sent).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        for _ in 0..5 {
            driver.turn(Some(&mut serve)).unwrap();
        }
        other_server.set_nonblocking(true).unwrap();
        let mut got = [0u8; 64];
        let n = (&other_server).read(&mut got).unwrap_or(0);
        // SAFETY: the duplicate made above, which nothing else owns.
        unsafe { libc::close(fd) };
        panic!(
            "descriptor {fd} was closed while a receive naming it was queued; submitted \
             afterwards, that receive took {} of the {} bytes sent to the socket that got the \
             number next (its reader got {:?})",
            sent.len() - n,
            sent.len(),
            String::from_utf8_lossy(&got[..n])
        );
    }

    // The connection closes once the kernel has ended the cancelled receive, and the client
    // sees the end of the stream.
    for _ in 0..100 {
        if driver.live == 0 {
            break;
        }
        driver.turn(Some(&mut serve)).unwrap();
    }
    assert_eq!(driver.live, 0, "the connection closed");
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut rest = Vec::new();
    client
        .read_to_end(&mut rest)
        .expect("the end of the stream");
    assert!(rest.is_empty());
}

/// An accept that keeps failing (here a listener shut down, no longer listening: `EINVAL`) is
/// counted and re-armed after a backoff that doubles, not at every turn: the driver does not spin
/// on it.
#[test]
fn a_failing_accept_backs_off_instead_of_spinning() {
    let Some(mut driver) = driver(DriverOptions::default()) else {
        return;
    };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    // SAFETY: `shutdown` on the listener's own descriptor, which stays open; no pointers.
    let rc = unsafe { libc::shutdown(listener.as_raw_fd(), libc::SHUT_RDWR) };
    assert_eq!(rc, 0);
    driver.listen(listener).unwrap();
    let mut serve = |_pipe| -> AppFuture { Box::pin(async {}) };
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(300) {
        driver.arm_listeners().unwrap();
        driver.turn(Some(&mut serve)).unwrap();
    }
    let stats = driver.stats();
    // Backoffs of 1, 2, 4, ... 128 ms fit in 300 ms: 9 failures at most.
    assert!(
        (3..=10).contains(&stats.accept_errors),
        "failed accepts in 300 ms: {stats:?}"
    );
    assert_eq!(stats.table_full, 0, "{stats:?}");
    // Each turn waits (for a completion, the backoff's end or the test's 10 ms bound).
    assert!(stats.enters < 100, "turns in 300 ms: {stats:?}");
}

/// The fixed-descriptor twin of the test above: the application drops its input while a receive
/// naming the slot is in flight. The slot must stay the connection's (not closed, so not given to
/// the next accept) until the receive has ended; then it is closed.
#[test]
fn a_fixed_slot_outlives_every_submission_that_names_it() {
    let Some(mut driver) = driver(DriverOptions {
        fixed_descriptors: true,
        fixed_files: 64,
        ..Default::default()
    }) else {
        return;
    };
    assert_eq!(driver.stats().fixed_files, 64);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    driver.listen(listener).unwrap();
    // The application hands its pipe ends to the test, which drops them one at a time.
    let readers: Rc<RefCell<Vec<PipeReader>>> = Rc::default();
    let writers: Rc<RefCell<Vec<PipeWriter>>> = Rc::default();
    let mut serve = {
        let (readers, writers) = (readers.clone(), writers.clone());
        move |pipe: DuplexPipe| -> AppFuture {
            readers.borrow_mut().push(pipe.reader);
            writers.borrow_mut().push(pipe.writer);
            Box::pin(async {})
        }
    };
    let mut client = TcpStream::connect(addr).unwrap();
    driver.arm_listeners().unwrap();
    while driver.live == 0 {
        complete_one_wait(&mut driver, &mut serve);
    }
    let key = driver
        .ready
        .pop_front()
        .expect("the new connection is ready");
    let index = index_of(key);
    assert!(matches!(
        driver.conns[index].conn.as_ref().unwrap().socket,
        Socket::Fixed(_)
    ));

    // First service: the receive is queued. The application ends its output, and the turns
    // that follow submit the receive and shut the write side down (an operation on the slot
    // too, which the connection waits for).
    driver.service(key).unwrap();
    assert!(
        !driver.ring.submission().is_empty(),
        "the receive is queued"
    );
    writers.borrow_mut().clear();
    for _ in 0..100 {
        if driver.conns[index].conn.as_ref().unwrap().output_done {
            break;
        }
        driver.turn(Some(&mut serve)).unwrap();
    }
    let conn = driver.conns[index].conn.as_ref().unwrap();
    assert!(conn.output_done && conn.recv_armed && conn.recvs != 0);
    // The application drops its input: the service cancels the receive, which is still in
    // flight, so the slot stays the connection's (closed, the next accept could get it).
    readers.borrow_mut().clear();
    driver.service(key).unwrap();
    assert_eq!(
        driver.live, 1,
        "closed while a receive naming its slot was in flight"
    );
    assert!(driver.conns[index].conn.is_some());

    // The connection closes once the kernel has ended the cancelled receive; the client sees the
    // end of the stream.
    for _ in 0..100 {
        if driver.live == 0 {
            break;
        }
        driver.turn(Some(&mut serve)).unwrap();
    }
    assert_eq!(driver.live, 0, "the connection closed");
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut rest = Vec::new();
    client
        .read_to_end(&mut rest)
        .expect("the end of the stream");
    assert!(rest.is_empty());
    let stats = driver.stats();
    assert_eq!((stats.accepted, stats.closed), (1, 1), "{stats:?}");
}
