//! Inline packets: a small frame taken from a pipe, or copied with `Packet::copy_from_slice`, is
//! held in the `Packet` value itself, so keeping it allocates nothing; and an inline packet
//! behaves as a `Bytes` of the same bytes under every operation.

use bytes::{Buf, Bytes};
use packetpipe::pipe::{pipe_with, PipeOptions};
use packetpipe::{Packet, Pool};
use proptest::prelude::*;

mod kit;

use kit::counting_alloc;

use counting_alloc::allocations;

#[global_allocator]
static GLOBAL: counting_alloc::CountingAlloc = counting_alloc::CountingAlloc;

/// Whether `packet`'s bytes are held in the value itself: a clone of such a packet is a copy, which
/// owns its bytes alone (`get_mut` is `Some`), where a clone of a pooled one shares its block.
fn is_inline(packet: &Packet) -> bool {
    packet.clone().get_mut().is_some()
}

#[test]
fn packet_size_and_inline_capacity() {
    // A `Bytes` held as it is (no box, no allocation to convert an already shared `Bytes`) takes
    // 32 bytes and the enum's tag 8 more; the inline variant uses all of the 39 bytes after the
    // tag: two position bytes and the payload.
    assert_eq!(std::mem::size_of::<Bytes>(), 32);
    assert_eq!(std::mem::size_of::<Packet>(), 40);
    assert_eq!(Packet::INLINE_CAPACITY, 37);
    assert_eq!(std::mem::size_of::<Option<Packet>>(), 40);
}

/// Frames of every size up to `max_len`, written into one pipe and taken with `take_frame`, kept
/// in a vector: the allocations that made, per frame.
fn allocations_per_kept_frame(max_len: usize, frames_per_len: usize) -> Vec<(usize, u64)> {
    let pool = Pool::new();
    let (mut writer, mut reader) = pipe_with(PipeOptions {
        pool: Some(pool.clone()),
        pause_threshold: 1 << 30,
        ..Default::default()
    });
    let mut counts = Vec::new();
    for len in 1..=max_len {
        let frame: Vec<u8> = (0..len as u8).collect();
        for _ in 0..frames_per_len {
            writer.write_slice(&frame).unwrap();
        }
        writer.flush_blocking().unwrap();
        reader.read_blocking().unwrap();
        let mut kept = Vec::with_capacity(frames_per_len);
        let before = allocations();
        for _ in 0..frames_per_len {
            kept.push(reader.take_frame(len).unwrap());
        }
        let n = allocations() - before;
        assert!(kept.iter().all(|p| p[..] == frame[..]));
        reader.advance_to(0, 0).unwrap();
        counts.push((len, n));
    }
    drop((writer, reader));
    assert_eq!(pool.stats().outstanding, 0);
    counts
}

#[test]
fn kept_small_frames_allocate_nothing() {
    const FRAMES: usize = 1000;
    for (len, n) in allocations_per_kept_frame(Packet::INLINE_CAPACITY, FRAMES) {
        assert_eq!(
            n, 0,
            "{FRAMES} kept frames of {len} bytes: {n} allocations (inline: none expected)"
        );
    }
    // One past the inline capacity, kept frames are copied side by side into shared 1 KiB blocks:
    // one allocation per block (the pool's thread cache is cold for kept frames: nothing comes
    // back to it).
    let len = Packet::INLINE_CAPACITY + 1;
    let (_, n) = allocations_per_kept_frame(len, FRAMES).pop().unwrap();
    let blocks = FRAMES.div_ceil(1024 / len) as u64;
    assert_eq!(
        n, blocks,
        "{FRAMES} kept frames of {len} bytes: {n} allocations, expected one per shared block"
    );
}

#[test]
fn frames_taken_are_inline_up_to_the_capacity_even_across_segments() {
    let pool = Pool::new();
    let (mut writer, mut reader) = pipe_with(PipeOptions {
        pool: Some(pool.clone()),
        ..Default::default()
    });
    // Two separately appended packets: the frame spans both segments.
    writer.append(Packet::from(b"0123456789".to_vec())).unwrap();
    writer.append(Packet::from(vec![b'x'; 30])).unwrap();
    writer.flush_blocking().unwrap();
    reader.read_blocking().unwrap();
    let header = reader.take_frame(2).unwrap();
    assert_eq!(&header[..], b"01");
    let frame = reader.take_frame(20).unwrap();
    assert!(is_inline(&frame));
    assert_eq!(&frame[..], &b"23456789xxxxxxxxxxxx"[..]);
    let rest = reader.take_frame(18).unwrap();
    assert!(is_inline(&rest));
    assert_eq!(&rest[..], &[b'x'; 18][..]);
    reader.advance_to(0, 0).unwrap();

    // Past the inline capacity: a pooled copy.
    writer.write_slice(&[5; 100]).unwrap();
    writer.flush_blocking().unwrap();
    reader.read_blocking().unwrap();
    let big = reader.take_frame(Packet::INLINE_CAPACITY + 1).unwrap();
    assert!(!is_inline(&big));
    // A copy threshold below the inline capacity still shares what it says it shares.
    drop((writer, reader, big));
    let (mut writer, mut reader) = pipe_with(PipeOptions {
        pool: Some(pool.clone()),
        copy_threshold: 4,
        ..Default::default()
    });
    writer.write_slice(&[6; 20]).unwrap();
    writer.flush_blocking().unwrap();
    reader.read_blocking().unwrap();
    assert!(is_inline(&reader.take_frame(4).unwrap()));
    assert!(!is_inline(&reader.take_frame(10).unwrap()));
    drop((writer, reader));
    assert_eq!(pool.stats().outstanding, 0);
}

#[test]
fn copy_from_slice_is_inline_when_it_fits() {
    let (n, packet) = counting_alloc::allocations_in(|| Packet::copy_from_slice(b"small frame"));
    assert_eq!(n, 0, "an inline copy allocated {n} times");
    assert!(is_inline(&packet));
    assert_eq!(packet, &b"small frame"[..]);
    let (n, clone) = counting_alloc::allocations_in(|| packet.clone());
    assert_eq!(n, 0, "an inline clone allocated {n} times");
    assert_eq!(clone, packet);
    let long = Packet::copy_from_slice(&[9; 1000]);
    assert!(!is_inline(&long));
    assert_eq!(&long[..], &[9; 1000][..]);
    assert_eq!(Packet::copy_from_slice(&[]).len(), 0);
}

/// One operation on a packet and the `Bytes` it is checked against.
#[derive(Debug, Clone)]
enum Op {
    Slice(usize, usize),
    SplitTo(usize),
    SplitOff(usize),
    Truncate(usize),
    Advance(usize),
    Clone,
    CopyToBytes(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let n = || 0usize..40;
    prop_oneof![
        (n(), n()).prop_map(|(a, b)| Op::Slice(a, b)),
        n().prop_map(Op::SplitTo),
        n().prop_map(Op::SplitOff),
        n().prop_map(Op::Truncate),
        n().prop_map(Op::Advance),
        Just(Op::Clone),
        n().prop_map(Op::CopyToBytes),
    ]
}

proptest! {
    #[test]
    fn inline_packets_behave_as_bytes(
        data in prop::collection::vec(any::<u8>(), 0..=Packet::INLINE_CAPACITY),
        ops in prop::collection::vec(op(), 0..20),
    ) {
        let mut packet = Packet::copy_from_slice(&data);
        prop_assert!(is_inline(&packet));
        let mut model = Bytes::copy_from_slice(&data);
        for op in ops {
            let len = model.len();
            match op {
                Op::Slice(a, b) => {
                    let (a, b) = (a.min(len), b.min(len));
                    let (a, b) = (a.min(b), a.max(b));
                    prop_assert_eq!(&packet.slice(a..b)[..], &model.slice(a..b)[..]);
                    prop_assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| packet.slice(a..len + 1))).is_err());
                }
                Op::SplitTo(at) => {
                    let at = at.min(len);
                    prop_assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| packet.clone().split_to(len + 1))).is_err());
                    prop_assert_eq!(&packet.split_to(at)[..], &model.split_to(at)[..]);
                }
                Op::SplitOff(at) => {
                    let at = at.min(len);
                    prop_assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| packet.clone().split_off(len + 1))).is_err());
                    prop_assert_eq!(&packet.split_off(at)[..], &model.split_off(at)[..]);
                }
                Op::Truncate(n) => {
                    packet.truncate(n);
                    model.truncate(n);
                }
                Op::Advance(n) => {
                    let n = n.min(len);
                    packet.advance(n);
                    model.advance(n);
                }
                Op::Clone => {
                    let copy = packet.clone();
                    prop_assert_eq!(&copy, &packet);
                    prop_assert!(is_inline(&copy));
                    packet = copy;
                }
                Op::CopyToBytes(n) => {
                    let n = n.min(len);
                    prop_assert_eq!(packet.copy_to_bytes(n), model.copy_to_bytes(n));
                }
            }
            prop_assert_eq!(&packet[..], &model[..]);
            prop_assert_eq!(packet.remaining(), model.remaining());
            prop_assert_eq!(packet.chunk(), model.chunk());
            prop_assert_eq!(packet.is_empty(), model.is_empty());
        }
        prop_assert_eq!(packet.clone().into_bytes(), model.clone());
        prop_assert_eq!(Bytes::from(packet), model);
    }
}
