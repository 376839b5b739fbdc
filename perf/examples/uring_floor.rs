//! The io_uring floor: the least an echo server on io_uring does per message on this kernel, to
//! hold packetpipe's driver against. No pipe, no codec, no pool: a multishot accept, a multishot
//! receive per connection from a provided-buffer ring, and the received buffer itself sent back,
//! with the ring set up as the driver sets up its own (`SINGLE_ISSUER | DEFER_TASKRUN`, 256
//! buffers of 16 KiB, completion queue four times the 1024 submission entries) and every turn's
//! submissions and wait in one `io_uring_enter`.
//!
//! ```text
//! cargo run --release -p packetpipe-perf --features io-uring --example uring_floor -- [ADDR]
//! ```
//!
//! It echoes bytes, not frames (a length-delimited echo's replies are its requests byte for byte,
//! so a frame client sees the same stream), one send in flight per connection so replies keep
//! their order, and a buffer goes back to the ring when its send completes. `echo_load` runs it
//! beside the driver's echo (`Server::UringFloor`); the first connection a floor accepts may be
//! a control connection: each byte it sends is answered with `control(byte)`'s 16 bytes.

use std::collections::VecDeque;
use std::io;
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use io_uring::types::{BufRingEntry, Fd, SubmitArgs, Timespec};
use io_uring::{cqueue, opcode, IoUring};

const ENTRIES: u32 = 1024;
const BUFFERS: u16 = 256;
const BUFFER_SIZE: usize = 16 * 1024;
const GROUP: u16 = 0;

const OP_ACCEPT: u64 = 1;
const OP_RECV: u64 = 2;
const OP_SEND: u64 = 3;

/// A connection: its socket and the buffers waiting to be sent back, in order (buffer id,
/// bytes, bytes already sent); the first is in flight when `sending`.
struct Conn {
    fd: i32,
    queue: VecDeque<(u16, usize, usize)>,
    sending: bool,
    receiving: bool,
    closed: bool,
    control: bool,
}

/// The provided buffers: one allocation of `BUFFERS x BUFFER_SIZE` bytes and the page-aligned
/// ring of entries naming them, both alive until the ring is unregistered (`run` returns only
/// after that).
struct Buffers {
    ring: *mut BufRingEntry,
    ring_layout: std::alloc::Layout,
    data: Vec<u8>,
    tail: u16,
}

impl Buffers {
    fn new() -> Buffers {
        let ring_layout = std::alloc::Layout::from_size_align(
            usize::from(BUFFERS) * std::mem::size_of::<BufRingEntry>(),
            4096,
        )
        .unwrap();
        // SAFETY: the layout's size is not zero; the result is checked for null.
        let ring = unsafe { std::alloc::alloc_zeroed(ring_layout) }.cast::<BufRingEntry>();
        assert!(!ring.is_null(), "out of memory");
        let mut buffers = Buffers {
            ring,
            ring_layout,
            data: vec![0; usize::from(BUFFERS) * BUFFER_SIZE],
            tail: 0,
        };
        for bid in 0..BUFFERS {
            buffers.give_back(bid);
        }
        buffers
    }

    fn ptr(&mut self, bid: u16) -> *mut u8 {
        // SAFETY: `bid < BUFFERS`, so the offset is inside `data`.
        unsafe { self.data.as_mut_ptr().add(usize::from(bid) * BUFFER_SIZE) }
    }

    /// Offer buffer `bid` to the kernel again (it is neither being received into nor sent).
    fn give_back(&mut self, bid: u16) {
        let addr = self.ptr(bid) as u64;
        let index = usize::from(self.tail & (BUFFERS - 1));
        // SAFETY: `index < BUFFERS` entries of the ring's allocation; the kernel reads an entry
        // only once the tail below publishes it, and never writes entries.
        let entry = unsafe { &mut *self.ring.add(index) };
        entry.set_addr(addr);
        entry.set_len(BUFFER_SIZE as u32);
        entry.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
        // SAFETY: the tail lives in the first entry's reserved field (`BufRingEntry::tail`); the
        // release store publishes the entry written above to the kernel.
        unsafe {
            let tail = BufRingEntry::tail(self.ring).cast_mut();
            (*tail.cast::<std::sync::atomic::AtomicU16>()).store(self.tail, Ordering::Release);
        }
    }
}

impl Drop for Buffers {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout; the ring is unregistered by now.
        unsafe { std::alloc::dealloc(self.ring.cast(), self.ring_layout) };
    }
}

/// Echo on `listener` until `stop` is set; `control(byte)` answers the control connection (the
/// first accepted, when `has_control`).
pub fn run(
    listener: TcpListener,
    stop: Arc<AtomicBool>,
    has_control: bool,
    mut control: impl FnMut() -> [u8; 16],
) -> io::Result<()> {
    let mut ring = IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_cqsize(ENTRIES * 4)
        .build(ENTRIES)?;
    let mut buffers = Buffers::new();
    // SAFETY: the ring of entries stays allocated until after `unregister_buf_ring` below.
    unsafe {
        ring.submitter()
            .register_buf_ring_with_flags(buffers.ring as u64, BUFFERS, GROUP, 0)?
    };
    let mut conns: Vec<Option<Conn>> = Vec::new();
    let mut cqes: Vec<(u64, i32, u32)> = Vec::with_capacity((ENTRIES * 4) as usize);
    let mut pending: Vec<io_uring::squeue::Entry> = Vec::new();
    pending.push(
        opcode::AcceptMulti::new(Fd(listener.as_raw_fd()))
            .build()
            .user_data(OP_ACCEPT),
    );
    // Each wait bounded (to 1 ms under valgrind, as the driver's: `PACKETPIPE_UNDER_VALGRIND`,
    // since valgrind delivers a signal such as the SIGTERM that ends a measurement only between
    // system calls, and has been seen not to within a 100 ms wait).
    let tick = match std::env::var_os("PACKETPIPE_UNDER_VALGRIND") {
        Some(_) => Timespec::from(Duration::from_millis(1)),
        None => Timespec::from(Duration::from_millis(100)),
    };
    let mut first = has_control;
    while !stop.load(Ordering::Relaxed) {
        for entry in pending.drain(..) {
            // SAFETY: a receive names buffers by group (owned by `buffers`); a send names a
            // buffer that is out of the ring (not offered) until the send's completion.
            while unsafe { ring.submission().push(&entry) }.is_err() {
                ring.submit()?;
            }
        }
        match ring
            .submitter()
            .submit_with_args(1, &SubmitArgs::new().timespec(&tick))
        {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR)) => {}
            Err(e) => return Err(e),
        }
        cqes.extend(
            ring.completion()
                .map(|c: cqueue::Entry| (c.user_data(), c.result(), c.flags())),
        );
        for (data, res, flags) in cqes.drain(..) {
            let fd = (data >> 8) as i32 & 0xff_ffff;
            match data & 0xff {
                OP_ACCEPT => {
                    if res >= 0 {
                        // As the driver does for each accepted socket (its `nodelay` default).
                        let on: libc::c_int = 1;
                        // SAFETY: `on` is a live c_int for the duration of the call.
                        unsafe {
                            libc::setsockopt(
                                res,
                                libc::IPPROTO_TCP,
                                libc::TCP_NODELAY,
                                (&on as *const libc::c_int).cast(),
                                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                            )
                        };
                        let conn = Conn {
                            fd: res,
                            queue: VecDeque::new(),
                            sending: false,
                            receiving: true,
                            closed: false,
                            control: std::mem::take(&mut first),
                        };
                        let index = res as usize;
                        if conns.len() <= index {
                            conns.resize_with(index + 1, || None);
                        }
                        conns[index] = Some(conn);
                        pending.push(recv(res));
                    }
                    if !cqueue::more(flags) {
                        pending.push(
                            opcode::AcceptMulti::new(Fd(listener.as_raw_fd()))
                                .build()
                                .user_data(OP_ACCEPT),
                        );
                    }
                }
                OP_RECV => {
                    let Some(conn) = conns.get_mut(fd as usize).and_then(Option::as_mut) else {
                        continue;
                    };
                    if res > 0 {
                        let bid = cqueue::buffer_select(flags).expect("a buffer id");
                        let mut len = res as usize;
                        if conn.control {
                            // The answer goes out of the request's own buffer.
                            let answer = control();
                            // SAFETY: buffer `bid` is out of the ring (this completion handed it
                            // over) and holds `BUFFER_SIZE >= 16` bytes.
                            unsafe {
                                std::ptr::copy_nonoverlapping(answer.as_ptr(), buffers.ptr(bid), 16)
                            };
                            len = 16;
                        }
                        conn.queue.push_back((bid, len, 0));
                        if !conn.sending {
                            conn.sending = true;
                            pending.push(send(conn, &mut buffers));
                        }
                    }
                    if !cqueue::more(flags) {
                        if res == -libc::ENOBUFS || res > 0 {
                            pending.push(recv(conn.fd));
                        } else {
                            conn.receiving = false;
                        }
                    }
                }
                OP_SEND => {
                    let Some(conn) = conns.get_mut(fd as usize).and_then(Option::as_mut) else {
                        continue;
                    };
                    conn.sending = false;
                    if res < 0 {
                        conn.closed = true;
                    } else if let Some(front) = conn.queue.front_mut() {
                        front.2 += res as usize;
                        if front.2 == front.1 {
                            buffers.give_back(front.0);
                            conn.queue.pop_front();
                        }
                    }
                    if !conn.closed && !conn.queue.is_empty() {
                        conn.sending = true;
                        pending.push(send(conn, &mut buffers));
                    }
                }
                _ => {}
            }
            // A connection whose peer closed, with nothing left to send, is closed.
            if let Some(slot) = conns.get_mut(fd as usize) {
                if let Some(conn) = slot {
                    if !conn.receiving && !conn.sending {
                        for (bid, _, _) in conn.queue.drain(..) {
                            buffers.give_back(bid);
                        }
                        // SAFETY: closing the connection's own descriptor, named by no
                        // operation any more (its receive ended and no send is in flight).
                        unsafe { libc::close(conn.fd) };
                        *slot = None;
                    }
                }
            }
        }
    }
    for conn in conns.iter().flatten() {
        // SAFETY: the descriptors are the connections' own; closing them ends their receives.
        unsafe { libc::close(conn.fd) };
    }
    drop(ring);
    // The kernel tears a ring down asynchronously after its descriptor is closed, and may still
    // complete a cancelled receive into a buffer: the buffers are left allocated (this runs once,
    // at the end of a measurement).
    std::mem::forget(buffers);
    Ok(())
}

fn recv(fd: i32) -> io_uring::squeue::Entry {
    opcode::RecvMulti::new(Fd(fd), GROUP)
        .build()
        .user_data(((fd as u64) << 8) | OP_RECV)
}

/// Send the rest of `conn`'s first queued buffer.
fn send(conn: &Conn, buffers: &mut Buffers) -> io_uring::squeue::Entry {
    let (bid, len, sent) = *conn.queue.front().expect("a buffer to send");
    // SAFETY: `sent < len <= BUFFER_SIZE`, inside buffer `bid`.
    let ptr = unsafe { buffers.ptr(bid).add(sent) };
    opcode::Send::new(Fd(conn.fd), ptr, (len - sent) as u32)
        .build()
        .user_data(((conn.fd as u64) << 8) | OP_SEND)
}

#[allow(dead_code)] // `echo_load` includes this file as a module
fn main() -> io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:7001".into());
    let listener = TcpListener::bind(&addr)?;
    println!("listening on {} (io_uring floor)", listener.local_addr()?);
    run(listener, Arc::new(AtomicBool::new(false)), false, || {
        [0; 16]
    })
}
