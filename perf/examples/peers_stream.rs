//! One row of the peers bench (`benches/peers.rs`), run once for a given number of frames: for a
//! quick look at a row and for `perf stat`, which gives the context switches per frame.
//!
//! ```text
//! cargo build --release -p packetpipe-perf --example peers_stream
//! GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=2000000 \
//!     perf stat -e context-switches target/release/examples/peers_stream threads 4096 packetpipe_write 200000
//! ```
//!
//! Context switches per frame for several rows, 3 runs each (issue 10, item 1's targets: < 0.05
//! at 4 KiB and 64 KiB on threads; at 64 B on tasks no more than piper's):
//!
//! ```text
//! export GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=2000000
//! for mode in threads tasks; do for size in 64 4096 65536; do
//!   n=$((size == 64 ? 1000000 : size == 4096 ? 200000 : 20000))
//!   for row in packetpipe_write packetpipe_buffer_mut duplex piper; do for rep in 1 2 3; do
//!     perf stat -e context-switches -x, -o /tmp/cs.txt \
//!         target/release/examples/peers_stream $mode $size $row $n
//!     echo "  $(cut -d, -f1 /tmp/cs.txt | grep -E '^[0-9]+$') context switches / $n frames"
//!   done; done; done; done
//! ```
//!
//! Arguments: mode (`threads` or `tasks`), frame size (bytes, or `64B` / `4KiB` / `64KiB`), row
//! (`packetpipe_write`, `packetpipe_buffer_mut`, `packetpipe_frames`, `duplex`, `piper`,
//! `mpsc_bytes`, `rtrb` (threads only), `memcpy`) and frame count (default 100,000). Prints the frames, the time
//! per frame and the checksum verdict (a mismatch panics and exits non-zero). The tasks mode's
//! runtime is built before the clock starts; perf's count covers the whole process (runtime
//! start-up included), so use enough frames that the stream dominates.

// The bench's own settings (sizes, frames per iteration) are unused here.
#[allow(dead_code)]
#[path = "../../benches/peers/workloads.rs"]
mod workloads;

use workloads::{Mode, ROWS};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = || -> ! {
        eprintln!(
            "usage: peers_stream <threads|tasks> <size> <row> [frames]\n  rows: {} (rtrb: threads only)",
            ROWS.join(", ")
        );
        std::process::exit(2)
    };
    if args.len() < 3 || args.len() > 4 {
        usage();
    }
    let mode = Mode::parse(&args[0]).unwrap_or_else(|| usage());
    let size = workloads::parse_size(&args[1]).unwrap_or_else(|| usage());
    let row = workloads::rows(mode)
        .find(|r| *r == args[2])
        .unwrap_or_else(|| usage());
    let frames: u64 = match args.get(3) {
        Some(n) => n.parse().unwrap_or_else(|_| usage()),
        None => 100_000,
    };
    // Threads mode does not use the runtime: give it one without worker threads, so perf counts
    // no context switches of idle workers.
    let runtime = match mode {
        Mode::Tasks => workloads::runtime(),
        Mode::Threads => tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime"),
    };
    // `run` panics if the consumer's digest differs from the producer's.
    let elapsed = workloads::run(mode, row, size, frames, &runtime);
    println!(
        "peers/{}/{}/{row}: {frames} frames, {:.1} ns/frame, checksum OK",
        mode.name(),
        workloads::size_label(size),
        elapsed.as_nanos() as f64 / frames as f64
    );
}
