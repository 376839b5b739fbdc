//! Out-of-range arguments give the documented outcome, for every API that takes a range, a count
//! or bytes that must fit:
//!
//! - `slice`, `split_to`, `split_off` and `Buf::advance` panic (std's slice convention) with a
//!   message naming the numbers (the text of `Error::OutOfRange`).
//! - `prepend`, `commit`, `extend_from_slice` and `copy_prefix_to` return an error.
//!
//! After an error or a caught panic the object is unchanged and still usable.

use std::ops::Bound;
use std::panic::{catch_unwind, AssertUnwindSafe};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use packetpipe::{ByteSegments, Error, Operation, Packet, PacketChain, Pool};

const DATA: &[u8] = b"hello";

/// Run `f`, which must panic, and return its panic message.
fn panic_message<R>(f: impl FnOnce() -> R) -> String {
    let payload = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(_) => panic!("expected a panic, but the call returned"),
        Err(payload) => payload,
    };
    if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else if let Some(s) = payload.downcast_ref::<&'static str>() {
        (*s).to_owned()
    } else {
        panic!("panic payload is not a string")
    }
}

fn out_of_range(operation: Operation, start: usize, end: usize, len: usize) -> Error {
    Error::OutOfRange {
        operation,
        start,
        end,
        len,
    }
}

/// Every kind of `Packet`, all holding `DATA`.
fn packets(pool: &Pool) -> Vec<(&'static str, Packet)> {
    let mut bytes_mut = BytesMut::with_capacity(64);
    bytes_mut.extend_from_slice(DATA);
    vec![
        ("pooled", pool.copy_from_slice(DATA).unwrap()),
        (
            "pooled via Bytes",
            Packet::from(pool.copy_from_slice(DATA).unwrap().into_bytes()),
        ),
        ("Vec", Packet::from(DATA.to_vec())),
        ("Bytes::from_static", Packet::from(Bytes::from_static(DATA))),
        ("BytesMut::freeze", Packet::from(bytes_mut)),
        ("&'static [u8]", Packet::from(DATA)),
        ("inline", Packet::copy_from_slice(DATA)),
    ]
}

/// A range as a pair of bounds.
type Range = (Bound<usize>, Bound<usize>);

/// Out-of-range ranges over `DATA` (length 5), with the error each must give and its text.
fn bad_ranges() -> Vec<(Range, Error, &'static str)> {
    use Bound::*;
    vec![
        (
            (Included(2), Excluded(10)),
            out_of_range(Operation::Slice, 2, 10, 5),
            "slice: range 2..10 is out of bounds for length 5",
        ),
        (
            (Included(4), Excluded(2)),
            out_of_range(Operation::Slice, 4, 2, 5),
            "slice: range start 4 is greater than range end 2 (length 5)",
        ),
        (
            (Included(6), Unbounded),
            out_of_range(Operation::Slice, 6, 5, 5),
            "slice: range start 6 is greater than range end 5 (length 5)",
        ),
        (
            (Unbounded, Included(5)),
            out_of_range(Operation::Slice, 0, 6, 5),
            "slice: range 0..6 is out of bounds for length 5",
        ),
        (
            (Excluded(1), Included(9)),
            out_of_range(Operation::Slice, 2, 10, 5),
            "slice: range 2..10 is out of bounds for length 5",
        ),
        (
            (Excluded(5), Unbounded),
            out_of_range(Operation::Slice, 6, 5, 5),
            "slice: range start 6 is greater than range end 5 (length 5)",
        ),
        (
            (Included(usize::MAX), Excluded(usize::MAX)),
            out_of_range(Operation::Slice, usize::MAX, usize::MAX, 5),
            "slice: range 18446744073709551615..18446744073709551615 is out of bounds for length 5",
        ),
    ]
}

#[test]
fn owned_packet_slice_out_of_range() {
    let pool = Pool::new();
    let packet = pool.copy_from_slice(DATA).unwrap();
    for (range, error, message) in bad_ranges() {
        assert_eq!(error.to_string(), message);
        assert_eq!(panic_message(|| packet.slice(range)), message, "{range:?}");
        assert_eq!(&packet[..], DATA);
    }
    // The edges are in range.
    assert_eq!(&packet.slice(5..)[..], b"");
    assert_eq!(&packet.slice(..5)[..], DATA);
    assert_eq!(&packet.slice(0..=4)[..], DATA);
    assert_eq!(&packet.slice(2..2)[..], b"");
    drop(packet);
    assert_eq!(pool.stats().outstanding, 0);
}

#[test]
fn owned_packet_split_out_of_range() {
    let pool = Pool::new();
    let mut packet = pool.copy_from_slice(DATA).unwrap();

    let err = out_of_range(Operation::SplitTo, 0, 6, 5);
    assert_eq!(panic_message(|| packet.split_to(6)), err.to_string());
    assert_eq!(
        err.to_string(),
        "split_to: range 0..6 is out of bounds for length 5"
    );
    assert_eq!(
        panic_message(|| packet.split_to(usize::MAX)),
        "split_to: range 0..18446744073709551615 is out of bounds for length 5"
    );
    assert_eq!(&packet[..], DATA);

    let err = out_of_range(Operation::SplitOff, 0, 6, 5);
    assert_eq!(panic_message(|| packet.split_off(6)), err.to_string());
    assert_eq!(
        err.to_string(),
        "split_off: range 0..6 is out of bounds for length 5"
    );
    assert_eq!(
        panic_message(|| packet.split_off(7)),
        "split_off: range 0..7 is out of bounds for length 5"
    );
    assert_eq!(&packet[..], DATA);

    assert_eq!(
        panic_message(|| packet.advance(6)),
        "cannot advance past `remaining`: 6 <= 5"
    );
    assert_eq!(&packet[..], DATA);
    assert_eq!(packet.headroom(), 0);

    // Still usable, and the edges are in range.
    let tail = packet.split_off(5);
    assert!(tail.is_empty());
    let head = packet.split_to(0);
    assert!(head.is_empty());
    packet.advance(1);
    assert_eq!(&packet[..], b"ello");
    let all = packet.split_to(4);
    assert_eq!(&all[..], b"ello");
    assert!(packet.is_empty());
    packet.advance(0);
    drop((packet, all, head, tail));
    assert_eq!(pool.stats().outstanding, 0);
}

#[test]
fn owned_packet_truncate_beyond_len_is_a_no_op() {
    let pool = Pool::new();
    let mut packet = pool.copy_from_slice(DATA).unwrap();
    packet.truncate(6);
    packet.truncate(usize::MAX);
    assert_eq!(&packet[..], DATA);
    packet.truncate(2);
    assert_eq!(&packet[..], b"he");
}

#[test]
fn packet_slice_out_of_range_for_every_variant() {
    let pool = Pool::new();
    for (kind, packet) in packets(&pool) {
        for (range, error, message) in bad_ranges() {
            assert_eq!(error.to_string(), message);
            assert_eq!(
                panic_message(|| packet.slice(range)),
                message,
                "{kind} {range:?}"
            );
            assert_eq!(&packet[..], DATA, "{kind}");
        }
        assert_eq!(&packet.slice(1..=3)[..], b"ell", "{kind}");
        assert_eq!(&packet.slice(5..5)[..], b"", "{kind}");
    }
    assert_eq!(pool.stats().outstanding, 0);
}

#[test]
fn packet_split_and_advance_out_of_range_for_every_variant() {
    let pool = Pool::new();
    for (kind, mut packet) in packets(&pool) {
        let err = out_of_range(Operation::SplitTo, 0, 6, 5);
        assert_eq!(panic_message(|| packet.split_to(6)), err.to_string());
        assert_eq!(
            panic_message(|| packet.split_to(6)),
            "split_to: range 0..6 is out of bounds for length 5",
            "{kind}"
        );
        assert_eq!(&packet[..], DATA, "{kind}");

        let err = out_of_range(Operation::SplitOff, 0, 9, 5);
        assert_eq!(panic_message(|| packet.split_off(9)), err.to_string());
        assert_eq!(
            panic_message(|| packet.split_off(9)),
            "split_off: range 0..9 is out of bounds for length 5",
            "{kind}"
        );
        assert_eq!(&packet[..], DATA, "{kind}");

        assert_eq!(
            panic_message(|| packet.advance(6)),
            "cannot advance past `remaining`: 6 <= 5",
            "{kind}"
        );
        assert_eq!(&packet[..], DATA, "{kind}");
        assert_eq!(packet.remaining(), 5, "{kind}");

        // Usable afterwards, edges included.
        packet.advance(1);
        let tail = packet.split_off(4);
        assert!(tail.is_empty(), "{kind}");
        let head = packet.split_to(2);
        assert_eq!(&head[..], b"el", "{kind}");
        assert_eq!(&packet[..], b"lo", "{kind}");
        packet.truncate(10);
        assert_eq!(&packet[..], b"lo", "{kind}");
        packet.advance(2);
        assert!(packet.is_empty(), "{kind}");
    }
    assert_eq!(pool.stats().outstanding, 0);
}

#[test]
fn chain_split_advance_and_copy_out_of_range() {
    let pool = Pool::new();
    let mut chain: PacketChain = [
        pool.copy_from_slice(b"abc").unwrap(),
        Packet::from(&b"defg"[..]),
        Packet::from(b"hij".to_vec()),
    ]
    .into_iter()
    .collect();
    let check_unchanged = |chain: &PacketChain| {
        assert_eq!(chain.len(), 10);
        assert_eq!(chain.iter().len(), 3);
        assert_eq!(chain.to_vec(), b"abcdefghij");
    };

    let err = out_of_range(Operation::SplitTo, 0, 11, 10);
    assert_eq!(panic_message(|| chain.split_to(11)), err.to_string());
    assert_eq!(
        panic_message(|| chain.split_to(11)),
        "split_to: range 0..11 is out of bounds for length 10"
    );
    check_unchanged(&chain);

    assert_eq!(
        panic_message(|| chain.advance(11)),
        "cannot advance past `remaining`: 11 <= 10"
    );
    check_unchanged(&chain);

    let mut dst = [0xee_u8; 11];
    let err = chain.copy_prefix_to(&mut dst).unwrap_err();
    assert_eq!(err, out_of_range(Operation::CopyPrefixTo, 0, 11, 10));
    assert_eq!(
        err.to_string(),
        "copy_prefix_to: range 0..11 is out of bounds for length 10"
    );
    assert_eq!(dst, [0xee; 11], "nothing is copied on error");
    check_unchanged(&chain);

    // Usable afterwards; the edges are in range.
    chain.copy_prefix_to(&mut dst[..10]).unwrap();
    assert_eq!(&dst[..10], b"abcdefghij");
    let none = chain.split_to(0);
    assert!(none.is_empty());
    let head = chain.split_to(5);
    assert_eq!(head.to_vec(), b"abcde");
    chain.advance(5);
    assert!(chain.is_empty());
    assert_eq!(chain.iter().len(), 0);
    let err = chain.copy_prefix_to(&mut dst[..1]).unwrap_err();
    assert_eq!(err, out_of_range(Operation::CopyPrefixTo, 0, 1, 0));
    chain.copy_prefix_to(&mut []).unwrap();
    drop(head);
    assert_eq!(pool.stats().outstanding, 0);
}

#[test]
fn copy_prefix_to_out_of_range_for_single_segment_types() {
    let pool = Pool::new();
    let mut dst = [0x55_u8; 6];
    let expected = out_of_range(Operation::CopyPrefixTo, 0, 6, 5);

    let owned = pool.copy_from_slice(DATA).unwrap();
    assert_eq!(owned.copy_prefix_to(&mut dst).unwrap_err(), expected);
    for (kind, packet) in packets(&pool) {
        assert_eq!(
            packet.copy_prefix_to(&mut dst).unwrap_err(),
            expected,
            "{kind}"
        );
    }
    let mut buf = pool.rent(64).unwrap();
    buf.extend_from_slice(DATA).unwrap();
    assert_eq!(buf.copy_prefix_to(&mut dst).unwrap_err(), expected);
    assert_eq!(DATA.copy_prefix_to(&mut dst).unwrap_err(), expected);
    assert_eq!(dst, [0x55; 6]);

    owned.copy_prefix_to(&mut dst[..5]).unwrap();
    assert_eq!(&dst[..5], DATA);
}

#[test]
fn packet_buf_extend_and_commit_past_the_end() {
    let pool = Pool::new();
    let mut buf = pool.rent(64).unwrap();
    assert_eq!(buf.capacity(), 64);
    buf.extend_from_slice(&[7; 60]).unwrap();

    let err = buf.extend_from_slice(b"12345").unwrap_err();
    assert_eq!(
        err,
        Error::NoSpace {
            needed: 5,
            available: 4
        }
    );
    assert_eq!(
        err.to_string(),
        "cannot write 5 bytes: only 4 bytes of space remain in the buffer"
    );
    assert_eq!(&buf[..], &[7; 60][..]);
    assert_eq!(buf.remaining_mut(), 4);

    let err = buf.commit(5).unwrap_err();
    assert_eq!(
        err,
        Error::NoSpace {
            needed: 5,
            available: 4
        }
    );
    let err = buf.commit(usize::MAX).unwrap_err();
    assert_eq!(
        err,
        Error::NoSpace {
            needed: usize::MAX,
            available: 4
        }
    );
    assert_eq!(
        err.to_string(),
        "cannot write 18446744073709551615 bytes: only 4 bytes of space remain in the buffer"
    );
    assert_eq!(buf.len(), 60);
    assert_eq!(buf.spare_mut().len(), 4);

    // `BufMut` follows its trait's convention: panics, writing nothing.
    let message = panic_message(|| buf.put_slice(b"12345"));
    assert!(message.contains('4') && message.contains('5'), "{message}");
    let message = panic_message(|| {
        // SAFETY: the call panics before claiming any byte as written.
        unsafe { buf.advance_mut(5) }
    });
    assert_eq!(message, "cannot advance_mut 5 bytes: only 4 remain");
    assert_eq!(buf.len(), 60);
    assert_eq!(buf.remaining_mut(), 4);

    // Still usable, up to the exact end.
    buf.extend_from_slice(b"ab").unwrap();
    buf.spare_mut()[..2].copy_from_slice(b"cd");
    buf.commit(2).unwrap();
    assert_eq!(buf.remaining_mut(), 0);
    buf.commit(0).unwrap();
    buf.extend_from_slice(b"").unwrap();
    let err = buf.extend_from_slice(b"x").unwrap_err();
    assert_eq!(
        err,
        Error::NoSpace {
            needed: 1,
            available: 0
        }
    );
    let packet = buf.seal();
    assert_eq!(&packet[56..], b"\x07\x07\x07\x07abcd");
    assert_eq!(packet.len(), 64);
    let err = buf.extend_from_slice(b"x").unwrap_err();
    assert_eq!(
        err,
        Error::NoSpace {
            needed: 1,
            available: 0
        }
    );
    assert!(buf.seal().is_empty());
}

#[test]
fn packet_buf_prepend_past_the_headroom() {
    let pool = Pool::new();
    let mut buf = pool.rent(16).unwrap();
    buf.extend_from_slice(b"body").unwrap();
    let err = buf.prepend(b"h").unwrap_err();
    assert_eq!(
        err,
        Error::NoHeadroom {
            needed: 1,
            available: 0
        }
    );
    assert_eq!(
        err.to_string(),
        "cannot prepend 1 bytes: only 0 bytes of headroom are available"
    );
    assert_eq!(&buf[..], b"body");
    buf.prepend(b"").unwrap();

    let mut buf = pool.rent_with_headroom(4, 60).unwrap();
    assert_eq!(buf.headroom(), 4);
    buf.extend_from_slice(b"body").unwrap();
    let err = buf.prepend(b"12345").unwrap_err();
    assert_eq!(
        err,
        Error::NoHeadroom {
            needed: 5,
            available: 4
        }
    );
    assert_eq!(&buf[..], b"body");
    assert_eq!(buf.headroom(), 4);
    buf.prepend(b"23").unwrap();
    assert_eq!(buf.headroom(), 2);
    let err = buf.prepend(b"012").unwrap_err();
    assert_eq!(
        err,
        Error::NoHeadroom {
            needed: 3,
            available: 2
        }
    );
    buf.prepend(b"01").unwrap();
    assert_eq!(&buf[..], b"0123body");
    assert_eq!(buf.headroom(), 0);

    // After sealing, the written bytes are gone and so is the headroom.
    let packet = buf.seal();
    assert_eq!(&packet[..], b"0123body");
    assert_eq!(buf.headroom(), 0);
    buf.extend_from_slice(b"more").unwrap();
    let err = buf.prepend(b"x").unwrap_err();
    assert_eq!(
        err,
        Error::NoHeadroom {
            needed: 1,
            available: 0
        }
    );
    assert_eq!(&buf[..], b"more");
    assert_eq!(
        &packet[..],
        b"0123body",
        "a failed prepend never touches sealed bytes"
    );
}

#[test]
fn owned_packet_prepend_needs_headroom_and_sole_ownership() {
    let pool = Pool::new();
    let mut buf = pool.rent_with_headroom(2, 16).unwrap();
    buf.extend_from_slice(b"payload").unwrap();

    // The buffer still shares the block with the sealed packet.
    let mut packet = buf.seal();
    assert_eq!(packet.headroom(), 2);
    let err = packet.prepend(b"x").unwrap_err();
    assert_eq!(err, Error::SharedBlock { references: 2 });
    assert_eq!(
        err.to_string(),
        "cannot change the block in place: it is shared by 2 references"
    );
    assert!(packet.get_mut().is_none());
    drop(buf);

    let clones = [packet.clone(), packet.slice(1..)];
    let err = packet.prepend(b"x").unwrap_err();
    assert_eq!(err, Error::SharedBlock { references: 3 });
    assert_eq!(&packet[..], b"payload");
    assert_eq!(packet.headroom(), 2);
    drop(clones);

    let err = packet.prepend(b"abc").unwrap_err();
    assert_eq!(
        err,
        Error::NoHeadroom {
            needed: 3,
            available: 2
        }
    );
    assert_eq!(
        err.to_string(),
        "cannot prepend 3 bytes: only 2 bytes of headroom are available"
    );
    assert_eq!(&packet[..], b"payload");
    assert_eq!(packet.headroom(), 2);

    packet.prepend(b"\x00\x07").unwrap();
    assert_eq!(&packet[..], b"\x00\x07payload");
    assert_eq!(packet.headroom(), 0);
    let err = packet.prepend(b"x").unwrap_err();
    assert_eq!(
        err,
        Error::NoHeadroom {
            needed: 1,
            available: 0
        }
    );

    // Headroom of a slice is the distance from the block's start.
    let mut tail = packet.split_off(4);
    drop(packet);
    assert_eq!(tail.headroom(), 4);
    tail.prepend(b"PAYL").unwrap();
    assert_eq!(&tail[..], b"PAYLyload");
    drop(tail);
    assert_eq!(pool.stats().outstanding, 0);
}

#[test]
fn rent_errors_are_errors_not_aborts() {
    let pool = Pool::new();
    let err = pool.rent(0).unwrap_err();
    assert_eq!(err, Error::ZeroSizeRequest);
    assert_eq!(
        err.to_string(),
        "cannot rent a buffer of 0 bytes: the size must be at least 1"
    );
    let err = pool.rent_with_headroom(16, 0).unwrap_err();
    assert_eq!(err, Error::ZeroSizeRequest);

    for (err, asked) in [
        (pool.rent(usize::MAX).unwrap_err(), (usize::MAX, 0)),
        (
            pool.rent_with_headroom(usize::MAX, 1).unwrap_err(),
            (1, usize::MAX),
        ),
        (
            pool.rent_with_headroom(1, usize::MAX).unwrap_err(),
            (usize::MAX, 1),
        ),
        (
            pool.rent_with_headroom(16, usize::MAX - 8).unwrap_err(),
            (usize::MAX - 8, 16),
        ),
    ] {
        let Error::RequestTooLarge {
            requested,
            headroom,
            limit,
        } = err
        else {
            panic!("expected RequestTooLarge, got {err:?}");
        };
        // The numbers as passed, not a sum (which may not fit a usize).
        assert_eq!((requested, headroom), asked);
        assert!(limit < isize::MAX as usize, "{limit}");
        let expected = if headroom == 0 {
            format!(
                "cannot rent a buffer of {requested} bytes: the largest possible request is {limit} bytes"
            )
        } else {
            format!(
                "cannot rent a buffer of {requested} bytes with {headroom} bytes of headroom: the \
                 largest possible request is {limit} bytes, headroom included"
            )
        };
        assert_eq!(err.to_string(), expected);
        let io: std::io::Error = err.into();
        assert_eq!(io.kind(), std::io::ErrorKind::InvalidInput);
    }
    let stats = pool.stats();
    assert_eq!(
        (stats.rents, stats.outstanding),
        (0, 0),
        "failed rents are not counted"
    );
}

#[test]
fn error_conversions_and_pool_config_errors() {
    let io: std::io::Error = Error::AllocationFailed { size: 42 }.into();
    assert_eq!(io.kind(), std::io::ErrorKind::OutOfMemory);
    assert_eq!(io.to_string(), "the system allocator refused 42 bytes");
    let io: std::io::Error = out_of_range(Operation::Slice, 1, 2, 0).into();
    assert_eq!(io.kind(), std::io::ErrorKind::InvalidInput);
    let inner = io
        .get_ref()
        .and_then(|e| e.downcast_ref::<Error>())
        .cloned();
    assert_eq!(inner, Some(out_of_range(Operation::Slice, 1, 2, 0)));

    let err = Pool::with_options(packetpipe::PoolOptions {
        min_class_size: 3000,
        max_class_size: 64,
        ..packetpipe::PoolOptions::default()
    })
    .unwrap_err();
    assert_eq!(
        err,
        Error::InvalidPoolConfig {
            min_class: 4096,
            max_class: 64
        }
    );
    assert_eq!(
        err.to_string(),
        "invalid pool configuration: smallest class 4096 bytes is larger than largest class 64 bytes"
    );
}

#[test]
fn pooled_packet_after_a_panicking_slice_is_unchanged_and_usable() {
    // A packet that is a window in the middle of a block: the bounds are relative to the window.
    let pool = Pool::new();
    let mut buf = pool.rent(64).unwrap();
    buf.extend_from_slice(b"skip").unwrap();
    let skipped = buf.seal();
    buf.extend_from_slice(DATA).unwrap();
    let packet: Packet = buf.freeze();
    drop(skipped);
    assert_eq!(packet.headroom(), 4);
    assert_eq!(
        panic_message(|| packet.slice(0..6)),
        out_of_range(Operation::Slice, 0, 6, 5).to_string()
    );
    let middle = packet.slice(1..4);
    assert_eq!(&middle[..], b"ell");
    assert_eq!(middle.headroom(), 5);
    assert_eq!(
        panic_message(|| middle.slice(..4)),
        out_of_range(Operation::Slice, 0, 4, 3).to_string()
    );
    assert_eq!(&middle.slice(..3)[..], b"ell");
}
