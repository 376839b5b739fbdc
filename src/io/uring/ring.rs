//! The ring itself: how it is set up (task-run mode, probed from the best down), and how the
//! driver enters the kernel with it (always asking for completions, by a registered index where
//! the kernel has one).

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use io_uring::IoUring;

/// How the kernel runs a ring's completion work (its "task work": posting a completion, moving
/// received bytes), set up once per ring.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TaskRun {
    /// `IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN` (Linux 6.1): the work waits
    /// until the driver asks for completions, and runs in one batch inside that
    /// `io_uring_enter`, never interrupting the driver while it serves connections.
    #[default]
    Deferred,
    /// `IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG` (Linux 5.19): the work runs at the
    /// driver's next system call, without an interrupt.
    Cooperative,
    /// The kernel's default: the work interrupts the driver's thread as it arrives.
    Interrupting,
}

// From `include/uapi/linux/io_uring.h`.
const IORING_ENTER_GETEVENTS: u32 = 1;
const IORING_ENTER_EXT_ARG: u32 = 8;
const IORING_ENTER_REGISTERED_RING: u32 = 16;
const IORING_REGISTER_RING_FDS: u32 = 20;
const IORING_UNREGISTER_RING_FDS: u32 = 21;

/// `struct io_uring_rsrc_update`.
#[repr(C)]
struct RsrcUpdate {
    offset: u32,
    resv: u32,
    data: u64,
}

/// `struct io_uring_getevents_arg`.
#[repr(C)]
struct GetEventsArg {
    sigmask: u64,
    sigmask_sz: u32,
    min_wait_usec: u32,
    ts: u64,
}

/// Set up a ring of `entries` submissions (and four times as many completions) with the task-run
/// mode `wanted`, or the best one below it that the kernel accepts (an older kernel refuses an
/// unknown setup flag with `EINVAL`).
pub(super) fn build(entries: u32, wanted: TaskRun) -> io::Result<(IoUring, TaskRun)> {
    let mut mode = wanted;
    loop {
        let mut builder = IoUring::builder();
        builder.setup_cqsize(entries.saturating_mul(4));
        match mode {
            TaskRun::Deferred => {
                builder.setup_single_issuer().setup_defer_taskrun();
            }
            TaskRun::Cooperative => {
                builder.setup_coop_taskrun().setup_taskrun_flag();
            }
            TaskRun::Interrupting => {}
        }
        match (builder.build(entries), mode) {
            (Ok(ring), mode) => return Ok((ring, mode)),
            (Err(e), TaskRun::Deferred) if e.raw_os_error() == Some(libc::EINVAL) => {
                mode = TaskRun::Cooperative;
            }
            (Err(e), TaskRun::Cooperative) if e.raw_os_error() == Some(libc::EINVAL) => {
                mode = TaskRun::Interrupting;
            }
            (Err(e), _) => return Err(e),
        }
    }
}

/// How the driver names its ring to `io_uring_enter`: by the ring's descriptor, or by the index
/// it is registered at for this thread (`IORING_REGISTER_RING_FDS`, Linux 5.18), which spares the
/// kernel looking the descriptor up and counting a reference to it on every call.
///
/// A registration belongs to the thread that made it, and only that thread may use the index:
/// the driver is not `Send`, so the thread that builds it is the one that runs and drops it.
/// Dropping it gives the index back; it must be dropped before the ring's descriptor is closed
/// (the driver holds it in its first field): the registration holds a reference to the ring,
/// which would otherwise outlive the driver until the thread exits.
#[derive(Debug)]
pub(super) struct Enter {
    fd: RawFd,
    registered: Option<u32>,
}

impl Enter {
    /// Enter through `ring`, registered for this thread if `register` and the kernel allows it.
    pub(super) fn new(ring: &IoUring, register: bool) -> Enter {
        let fd = ring.as_raw_fd();
        let registered = register.then(|| register_ring(fd)).and_then(Result::ok);
        Enter { fd, registered }
    }

    /// Whether the ring is named by a registered index.
    pub(super) fn is_registered(&self) -> bool {
        self.registered.is_some()
    }

    /// Submit `queued` entries and wait for `want` completions, or until `timeout` passes. Always
    /// with `GETEVENTS`: a ring with deferred task work posts completions only inside such a
    /// call, so this is also what brings a busy turn's completions in.
    pub(super) fn enter(
        &self,
        queued: u32,
        want: u32,
        timeout: Option<Duration>,
    ) -> io::Result<usize> {
        let (fd, mut flags) = match self.registered {
            Some(index) => (
                index as RawFd,
                IORING_ENTER_GETEVENTS | IORING_ENTER_REGISTERED_RING,
            ),
            None => (self.fd, IORING_ENTER_GETEVENTS),
        };
        let ts = timeout.map(|t| libc::timespec {
            tv_sec: t.as_secs() as libc::time_t,
            tv_nsec: t.subsec_nanos().into(),
        });
        let arg = ts.as_ref().map(|ts| GetEventsArg {
            sigmask: 0,
            sigmask_sz: 0,
            min_wait_usec: 0,
            ts: ts as *const libc::timespec as u64,
        });
        let (argp, argsz) = match &arg {
            Some(arg) => {
                flags |= IORING_ENTER_EXT_ARG;
                (
                    arg as *const GetEventsArg as *const libc::c_void,
                    std::mem::size_of::<GetEventsArg>(),
                )
            }
            None => (std::ptr::null(), 0),
        };
        // SAFETY: `argp` is null or points to `arg` (and through it `ts`), both alive on this
        // stack frame for the whole call, and `argsz` is its size; the kernel reads no other
        // memory of ours but the rings the `IoUring` maps and the entries queued there (checked
        // when pushed: `Driver::push`).
        let ret = unsafe {
            libc::syscall(
                libc::SYS_io_uring_enter,
                fd,
                queued,
                want,
                flags,
                argp,
                argsz,
            )
        };
        if ret < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(ret as usize)
        }
    }
}

impl Drop for Enter {
    /// Give the registered index back (on the thread that registered it).
    fn drop(&mut self) {
        if let Some(index) = self.registered.take() {
            let mut update = RsrcUpdate {
                offset: index,
                resv: 0,
                data: 0,
            };
            // SAFETY: `update` is alive for the call, and one entry is passed.
            unsafe {
                libc::syscall(
                    libc::SYS_io_uring_register,
                    self.fd,
                    IORING_UNREGISTER_RING_FDS,
                    &mut update as *mut RsrcUpdate,
                    1,
                )
            };
        }
    }
}

/// Register ring `fd` for this thread at the first free index.
fn register_ring(fd: RawFd) -> io::Result<u32> {
    let mut update = RsrcUpdate {
        offset: u32::MAX, // any free index
        resv: 0,
        data: fd as u64,
    };
    // SAFETY: `update` is alive for the call, and one entry is passed; the kernel writes the
    // index it chose into `update.offset`.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_io_uring_register,
            fd,
            IORING_REGISTER_RING_FDS,
            &mut update as *mut RsrcUpdate,
            1,
        )
    };
    match ret {
        1 => Ok(update.offset),
        r if r < 0 => Err(io::Error::last_os_error()),
        _ => Err(io::Error::other("the ring's descriptor was not registered")),
    }
}
