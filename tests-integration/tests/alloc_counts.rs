//! Allocation counts, asserted with a counting global allocator (counts are deterministic, unlike
//! times, so tests assert them exactly).
//!
//! Allocations are counted per thread (a `const`-initialized thread-local, which itself never
//! allocates), so the tests of this binary may run in parallel without seeing each other's
//! allocations. Each measurement runs the operation a few times first, to warm the pool's
//! thread cache, and then counts a batch of repetitions.
//!
//! The same allocator can refuse large requests on one thread, to check that an allocation
//! failure comes back as `Error::AllocationFailed` and leaves the pool's statistics untouched.

use std::cell::RefCell;
use std::fmt::Write as _;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use packetpipe::{ByteSegments, Error, Packet, PacketChain, Pool, PoolStats};

mod kit;

use kit::counting_alloc;

use counting_alloc::allocations;

#[global_allocator]
static GLOBAL: counting_alloc::CountingAlloc = counting_alloc::CountingAlloc;

/// Measured repetitions of each operation (fewer under Miri, which is slow).
const RUNS: u64 = if cfg!(miri) { 20 } else { 200 };

/// Allocations made by this thread while running `f` (after `WARM_UP` unmeasured runs) `RUNS`
/// times.
fn allocations_in(mut f: impl FnMut()) -> u64 {
    const WARM_UP: usize = 8;
    for _ in 0..WARM_UP {
        f();
    }
    let before = allocations();
    for _ in 0..RUNS {
        f();
    }
    allocations() - before
}

/// Run `f` once and count its allocations.
fn allocations_once<R>(f: impl FnOnce() -> R) -> (u64, R) {
    let before = allocations();
    let r = f();
    (allocations() - before, r)
}

#[test]
fn the_counter_counts() {
    let (n, v) = allocations_once(|| std::hint::black_box(vec![1u8; 100]));
    assert_eq!(n, 1);
    drop(v);
    let (n, _) = allocations_once(|| drop(std::hint::black_box(Box::new(5u64))));
    assert_eq!(n, 1);
    assert_eq!(
        allocations_in(|| drop(std::hint::black_box(Vec::<u8>::with_capacity(64)))),
        RUNS
    );
}

#[test]
fn rent_and_return_allocate_nothing() {
    let pool = Pool::new();
    for size in [1, 64, 100, 4096, 64 * 1024, 1 << 20] {
        let n = allocations_in(|| drop(std::hint::black_box(pool.rent(size).unwrap())));
        assert_eq!(n, 0, "rent+return of {size} bytes");
    }
    let n = allocations_in(|| drop(pool.rent_with_headroom(16, 48).unwrap()));
    assert_eq!(n, 0, "rent+return with headroom");
    // Several outstanding at once (crossing magazine boundaries), then all returned.
    for size in [64, 4096, 64 * 1024] {
        let mut held = Vec::with_capacity(100);
        let n = allocations_in(|| {
            for _ in 0..100 {
                held.push(pool.rent(size).unwrap());
            }
            held.clear();
        });
        assert_eq!(n, 0, "100 rents then 100 returns of {size} bytes");
    }
    // The global pool too.
    let n = allocations_in(|| drop(Pool::global().rent(4096).unwrap()));
    assert_eq!(n, 0, "global pool rent+return");
    assert_eq!(pool.stats().outstanding, 0);
}

#[test]
fn over_max_requests_are_plain_allocations() {
    let pool = Pool::with_options(packetpipe::PoolOptions {
        max_class_size: 4096,
        ..packetpipe::PoolOptions::default()
    })
    .unwrap();
    let n = allocations_in(|| drop(pool.rent(5000).unwrap()));
    assert_eq!(n, RUNS, "one allocation per unpooled rent");
}

#[test]
fn owned_packet_create_clone_slice_split_allocate_nothing() {
    let pool = Pool::new();
    let data = [0x5a_u8; 1500];

    let n = allocations_in(|| drop(std::hint::black_box(pool.copy_from_slice(&data).unwrap())));
    assert_eq!(n, 0, "OwnedPacket create (copy_from_slice) + drop");

    let packet = pool.copy_from_slice(&data).unwrap();
    let n = allocations_in(|| drop(std::hint::black_box(packet.clone())));
    assert_eq!(n, 0, "clone + drop");
    let n = allocations_in(|| drop(std::hint::black_box(packet.slice(10..1000))));
    assert_eq!(n, 0, "slice + drop");
    let n = allocations_in(|| {
        let mut p = packet.clone();
        let head = p.split_to(100);
        let tail = p.split_off(200);
        p.advance(50);
        p.truncate(10);
        std::hint::black_box((head, tail, p));
    });
    assert_eq!(n, 0, "split_to/split_off/advance/truncate");
    let n = allocations_in(|| {
        let p = packet.clone();
        drop(std::hint::black_box(p.slice(1..2)));
    });
    assert_eq!(n, 0, "OwnedPacket into Packet");

    // Documented cost: one small box for `Bytes::from_owner`.
    let (n, bytes) = allocations_once(|| packet.clone().into_bytes());
    assert_eq!(n, 1, "into_bytes costs one allocation");
    let n = allocations_in(|| drop(bytes.slice(3..9)));
    assert_eq!(n, 0);
    drop(bytes);

    drop(packet);
    assert_eq!(pool.stats().outstanding, 0);
}

#[test]
fn seal_and_freeze_allocate_nothing() {
    let pool = Pool::new();
    let n = allocations_in(|| {
        let mut buf = pool.rent(4096).unwrap();
        buf.put_slice(b"first frame");
        let first = buf.seal();
        buf.extend_from_slice(b"second").unwrap();
        let second = buf.seal();
        buf.spare_mut()[..3].copy_from_slice(b"end");
        buf.commit(3).unwrap();
        let third: Packet = buf.freeze();
        std::hint::black_box((first, second, third));
    });
    assert_eq!(n, 0, "rent, write, seal twice, freeze, drop");

    let n = allocations_in(|| {
        let mut buf = pool.rent_with_headroom(8, 64).unwrap();
        buf.extend_from_slice(b"body").unwrap();
        buf.prepend(b"hdr:").unwrap();
        let mut packet = buf.freeze();
        packet.prepend(b"1234").unwrap();
        std::hint::black_box(packet);
    });
    assert_eq!(n, 0, "headroom and prepend");
    assert_eq!(pool.stats().outstanding, 0);
}

/// Every kind of `Packet`, each holding `data`. Building them may allocate; slicing must not.
fn variants(pool: &Pool, data: &'static [u8]) -> Vec<(&'static str, Packet)> {
    let mut bytes_mut = BytesMut::with_capacity(data.len());
    bytes_mut.extend_from_slice(data);
    vec![
        ("OwnedPacket", pool.copy_from_slice(data).unwrap()),
        ("Bytes from Vec", Packet::from(Bytes::from(data.to_vec()))),
        ("Vec", Packet::from(data.to_vec())),
        ("Bytes from static", Packet::from(Bytes::from_static(data))),
        ("BytesMut::freeze", Packet::from(bytes_mut)),
        (
            "Bytes from OwnedPacket",
            Packet::from(pool.copy_from_slice(data).unwrap().into_bytes()),
        ),
        ("&'static [u8]", Packet::from(data)),
    ]
}

#[test]
fn packet_slicing_allocates_nothing_for_any_variant() {
    static DATA: [u8; 256] = {
        let mut data = [0u8; 256];
        let mut i = 0;
        while i < 256 {
            data[i] = i as u8;
            i += 1;
        }
        data
    };
    let pool = Pool::new();
    for (kind, packet) in variants(&pool, &DATA) {
        let n = allocations_in(|| drop(std::hint::black_box(packet.clone())));
        assert_eq!(n, 0, "{kind}: clone");
        let n = allocations_in(|| drop(std::hint::black_box(packet.slice(10..100))));
        assert_eq!(n, 0, "{kind}: slice");
        let n = allocations_in(|| drop(std::hint::black_box(packet.slice(5..5))));
        assert_eq!(n, 0, "{kind}: empty slice");
        let n = allocations_in(|| {
            let mut p = packet.clone();
            let head = p.split_to(16);
            let tail = p.split_off(100);
            p.advance(4);
            p.truncate(20);
            let rest = p.slice(1..);
            assert_eq!(rest[0], 21);
            std::hint::black_box((head, tail, p, rest));
        });
        assert_eq!(n, 0, "{kind}: split_to/split_off/advance/truncate/slice");
        let n = allocations_in(|| {
            let mut p = packet.clone();
            let bytes = p.copy_to_bytes(8);
            std::hint::black_box((bytes, p));
        });
        if kind == "OwnedPacket" {
            assert_eq!(n, RUNS, "{kind}: copy_to_bytes boxes the owner once");
        } else {
            assert_eq!(n, 0, "{kind}: copy_to_bytes");
        }
    }
    assert_eq!(pool.stats().outstanding, 0);
}

#[test]
fn chain_append_up_to_inline_capacity_allocates_nothing() {
    let pool = Pool::new();
    let segments = [
        pool.copy_from_slice(b"GET / HT").unwrap(),
        Packet::from(Bytes::from(b"TP/1.1\r\n".to_vec())),
        Packet::from_static(b"Host: x\r\n"),
        pool.copy_from_slice(b"\r\n").unwrap(),
    ];
    let total: usize = segments.iter().map(Packet::len).sum();

    let n = allocations_in(|| {
        let mut chain = PacketChain::new();
        for segment in &segments {
            chain.push(segment.clone());
        }
        assert_eq!(chain.len(), total);
        assert_eq!(chain.iter().len(), 4);
        // Read through it with `Buf`, crossing every boundary.
        assert_eq!(chain.get_u32(), u32::from_be_bytes(*b"GET "));
        chain.advance(4);
        assert_eq!(chain.chunk(), b"TP/1.1\r\n");
        let mut four = [0u8; 4];
        chain.copy_to_slice(&mut four);
        assert_eq!(&four, b"TP/1");
        chain.advance(chain.remaining() - 2);
        assert_eq!(chain.get_u16(), 0x0d0a);
        assert!(!chain.has_remaining());
        assert_eq!(chain.iter().len(), 0);
    });
    assert_eq!(n, 0, "push 4 segments, read and advance through them");

    let n = allocations_in(|| {
        let mut chain = PacketChain::new();
        chain.extend(segments.iter().cloned());
        let head = chain.split_to(10);
        assert_eq!((head.iter().len(), chain.iter().len()), (2, 3));
        chain.push_front(Packet::from_static(b"GET / HTTP"));
        assert_eq!(chain.iter().len(), 4);
        let found = chain.find(b"\r\n\r\n");
        assert_eq!(found, Some(total - 4));
        let _ = chain.pop_front();
        chain.push(Packet::from_static(b"x"));
        std::hint::black_box((head, chain));
    });
    assert_eq!(
        n, 0,
        "split_to, push_front, find, pop_front within 4 segments"
    );

    // The fifth segment spills to the heap: this proves the counter sees the chain's allocations.
    let mut chain: PacketChain = segments.iter().cloned().collect();
    let (n, ()) = allocations_once(|| chain.push(Packet::from_static(b"5th")));
    assert!(n >= 1, "a 5th push must allocate, counted {n}");
    assert_eq!(chain.iter().len(), 5);
    drop(chain);
    drop(segments);
    assert_eq!(pool.stats().outstanding, 0);
}

/// A `fmt::Write` sink that keeps only a length and a checksum.
#[derive(Default)]
struct Sink {
    len: usize,
    sum: u64,
}

impl std::fmt::Write for Sink {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.len += s.len();
        self.sum = s.bytes().fold(self.sum, |acc, b| {
            acc.wrapping_mul(31).wrapping_add(b.into())
        });
        Ok(())
    }
}

#[test]
fn display_helpers_stream_without_allocating() {
    let pool = Pool::new();
    let text = "héllo wörld € 😀 ".repeat(20);
    let bytes = text.as_bytes();
    // Cut inside multi-byte characters on purpose.
    let chain: PacketChain = bytes
        .chunks(7)
        .map(|c| pool.copy_from_slice(c).unwrap())
        .collect();
    let mut expected = Sink::default();
    expected.write_str(&text).unwrap();

    let mut sink = Sink::default();
    let n = allocations_in(|| {
        sink = Sink::default();
        write!(sink, "{}", chain.display_lossy()).unwrap();
    });
    assert_eq!(n, 0, "display_lossy streams");
    assert_eq!((sink.len, sink.sum), (expected.len, expected.sum));

    let n = allocations_in(|| {
        let mut sink = Sink::default();
        write!(sink, "{}", chain.hex_dump(256)).unwrap();
        assert!(sink.len > 0);
    });
    assert_eq!(n, 0, "hex_dump streams");

    let n = allocations_in(|| assert_eq!(chain.find("😀".as_bytes()), text.find('😀')));
    assert_eq!(n, 0, "find");
    let mut out = [0u8; 100];
    let n = allocations_in(|| chain.copy_prefix_to(&mut out).unwrap());
    assert_eq!(n, 0, "copy_prefix_to");
    assert_eq!(&out[..], &bytes[..100]);
}

// ------------------------------------------------------------------------------------------------
// Allocation failure

/// Run `f` with allocations of `bytes` or more refused on this thread.
fn refusing_from<R>(bytes: usize, f: impl FnOnce() -> R) -> R {
    counting_alloc::refuse_allocations_from(bytes);
    let result = f();
    counting_alloc::refuse_allocations_from(usize::MAX);
    result
}

/// A pool whose blocks all come from the global allocator (the counting one here, which refuses
/// on request): large blocks are otherwise mapped on their own.
fn heap_pool() -> Pool {
    Pool::with_options(packetpipe::PoolOptions {
        max_class_size: 256 << 10,
        map_large_blocks: false,
        ..packetpipe::PoolOptions::default()
    })
    .unwrap()
}

#[test]
fn refused_allocations_are_errors_and_are_not_counted() {
    let pool = heap_pool();
    for size in [128 << 10, 512 << 10] {
        let err = refusing_from(64 << 10, || pool.rent(size)).unwrap_err();
        let Error::AllocationFailed { size: refused } = err else {
            panic!("expected AllocationFailed, got {err:?}");
        };
        assert!(refused > size, "{refused} includes the block header");
        let io: std::io::Error = err.into();
        assert_eq!(io.kind(), std::io::ErrorKind::OutOfMemory);
        let data = vec![1; size];
        let err = refusing_from(64 << 10, || pool.copy_from_slice(&data)).unwrap_err();
        assert!(matches!(err, Error::AllocationFailed { .. }), "{err:?}");
    }
    assert_eq!(pool.stats(), PoolStats::default(), "nothing was rented");
    // The same requests succeed once the allocator gives the memory.
    drop((pool.rent(128 << 10).unwrap(), pool.rent(512 << 10).unwrap()));
    let stats = pool.stats();
    assert_eq!((stats.rents, stats.returns, stats.outstanding), (2, 2, 0));
}

/// A rent from a thread-local destructor, after the pool's thread cache is gone, takes the pool's
/// no-cache path; a refused allocation there must not count a rent either.
#[test]
fn refused_allocation_without_a_thread_cache_is_not_counted() {
    struct RentOnExit(Option<Pool>);
    impl Drop for RentOnExit {
        fn drop(&mut self) {
            let pool = self.0.take().expect("a pool");
            let err = refusing_from(64 << 10, || pool.rent(128 << 10)).unwrap_err();
            assert!(matches!(err, Error::AllocationFailed { .. }), "{err:?}");
            let buf = pool.rent(128 << 10).unwrap();
            assert_eq!(buf.capacity(), 128 << 10);
        }
    }
    thread_local! {
        static ON_EXIT: RefCell<RentOnExit> = const { RefCell::new(RentOnExit(None)) };
    }

    let pool = heap_pool();
    let worker_pool = pool.clone();
    std::thread::spawn(move || {
        // Registered before the pool's thread cache, so destroyed after it.
        ON_EXIT.with(|_| {});
        drop(worker_pool.rent(64).unwrap());
        ON_EXIT.with(|h| h.borrow_mut().0 = Some(worker_pool));
    })
    .join()
    .unwrap();
    let stats = pool.stats();
    assert_eq!(
        (stats.rents, stats.returns, stats.outstanding),
        (2, 2, 0),
        "{stats:?}"
    );
    assert_eq!(stats.fresh_allocations, 2, "{stats:?}");
}
