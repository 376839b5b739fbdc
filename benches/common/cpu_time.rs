//! Shared by the benches: a criterion measurement of the benchmarking thread's CPU time.

use std::time::{Duration, Instant};

use criterion::measurement::{Measurement, ValueFormatter, WallTime};

/// A criterion measurement: CPU time of the benchmarking thread. On a shared machine the time a
/// thread spends descheduled would otherwise land in the figures; CPU time leaves it out and is
/// the same as wall time for a thread that runs undisturbed. Falls back to wall time where the
/// platform gives no thread CPU clock.
pub struct ThreadCpuTime {
    wall: WallTime,
}

impl Default for ThreadCpuTime {
    fn default() -> ThreadCpuTime {
        ThreadCpuTime { wall: WallTime }
    }
}

impl Measurement for ThreadCpuTime {
    type Intermediate = (Option<Duration>, Instant);
    type Value = Duration;

    fn start(&self) -> Self::Intermediate {
        (thread_cpu_time(), Instant::now())
    }

    fn end(&self, (cpu, wall): Self::Intermediate) -> Duration {
        match (cpu, thread_cpu_time()) {
            (Some(start), Some(end)) => end - start,
            _ => wall.elapsed(),
        }
    }

    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }

    fn zero(&self) -> Duration {
        Duration::ZERO
    }

    fn to_f64(&self, value: &Duration) -> f64 {
        value.as_nanos() as f64
    }

    fn formatter(&self) -> &dyn ValueFormatter {
        self.wall.formatter()
    }
}

/// CPU time of the calling thread, where the platform gives it.
#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
pub fn thread_cpu_time() -> Option<Duration> {
    #[repr(C)]
    struct Timespec {
        tv_sec: i64,
        tv_nsec: i64,
    }
    extern "C" {
        fn clock_gettime(clock: i32, time: *mut Timespec) -> i32;
    }
    const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
    let mut time = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `clock_gettime` (glibc, linked by std) writes one `struct timespec`, which on 64-bit
    // Linux is two `i64`s, into the valid, exclusively borrowed `time`.
    let rc = unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut time) };
    (rc == 0).then(|| Duration::new(time.tv_sec as u64, time.tv_nsec as u32))
}

#[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
pub fn thread_cpu_time() -> Option<Duration> {
    None
}
