//! Soak test over the io_uring driver: many connections on one driver, clients doing random
//! things, for a bounded time (the workload and its checks: `kit/soak.rs`).
//!
//! One driver thread serves every connection with the kit's echo application, with a small
//! provided-buffer ring and small pipe thresholds, so that `ENOBUFS` and backpressure happen. At
//! the end, after `DriverHandle::shutdown`, the driver has no connection left and the pool
//! `stats().outstanding == 0`.
//!
//! Bounds: `SOAK_URING_SECS` seconds (default 10; CI runs the default, the connections under way
//! then finish, a few seconds more), `SOAK_URING_CONNS` connections at once (default 128),
//! `SOAK_URING_BUFFERS` and `SOAK_URING_BUFFER_SIZE` for the ring (default 64 of 4 KiB),
//! `SOAK_URING_BUNDLES=0` to receive without bundles (default: the driver's, on). The seed
//! is new each run unless `SOAK_SEED` replays one (a failure prints it, and the seed of the
//! failing connection). Release builds only (`cargo test --release --features io-uring --test
//! soak_uring`). Where io_uring is unavailable the test says so and passes, unless
//! `PACKETPIPE_REQUIRE_URING` is set, which makes that a failure.

#![cfg(all(feature = "io-uring", target_os = "linux"))]

mod kit;

use kit::rng::env_u64 as env;
use kit::soak;

use packetpipe::io::uring::{Driver, DriverOptions, DriverStats};

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "release only: cargo test --release --features io-uring --test soak_uring"
)]
fn soak_many_connections_on_one_driver() {
    let secs = env("SOAK_URING_SECS", 10);
    let conns = env("SOAK_URING_CONNS", 128);
    let seed = soak::seed();
    eprintln!("soak over io_uring: {secs} s, {conns} connections at once, SOAK_SEED={seed}");
    let pool = soak::pool();
    let options = DriverOptions {
        buffers: env("SOAK_URING_BUFFERS", 64) as u16,
        buffer_size: env("SOAK_URING_BUFFER_SIZE", 4096) as usize,
        bundles: env("SOAK_URING_BUNDLES", 1) != 0,
        connection: soak::connection_options(&pool),
        ..Default::default()
    };
    // The driver is not `Send`: built on its own thread, which reports back.
    let (started_tx, started) = std::sync::mpsc::channel();
    let server = std::thread::spawn(move || -> Option<(DriverStats, u64)> {
        let mut driver = match Driver::with_options(options) {
            Ok(driver) => driver,
            Err(e) if std::env::var_os("PACKETPIPE_REQUIRE_URING").is_none() => {
                eprintln!("io_uring unavailable here ({e}); not soaking the driver");
                started_tx.send(None).unwrap();
                return None;
            }
            Err(e) => {
                panic!("io_uring is required (PACKETPIPE_REQUIRE_URING) but unavailable: {e}")
            }
        };
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        driver.listen(listener).unwrap();
        started_tx.send(Some((addr, driver.handle()))).unwrap();
        driver.run(soak::echo).expect("the driver runs");
        Some((driver.stats(), driver.stats().open))
    });
    let Some((addr, handle)) = started.recv().expect("the driver thread starts") else {
        return;
    };

    let totals = soak::run_clients(addr, secs, conns, seed);
    handle.shutdown();
    let (stats, left) = server
        .join()
        .expect("the driver thread")
        .expect("the driver ran");
    eprintln!(
        "soak over io_uring: {}; driver {stats:?}; pool {:?}",
        totals.summary(),
        pool.stats()
    );
    soak::assert_server_saw_no_wrong_byte();
    assert_eq!(left, 0, "connections left after the shutdown");
    assert_eq!(
        stats.accepted,
        totals.connections(),
        "every connection accepted"
    );
    assert!(totals.complete() > 0, "no connection ran to its end");
    let pool_stats = pool.stats();
    assert_eq!(
        pool_stats.outstanding, 0,
        "blocks not returned: {pool_stats:?}"
    );
}
