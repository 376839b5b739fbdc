//! Joining packets back together (`OwnedPacket::try_join`, `Packet::try_join`): what the pipe's
//! coalescing relies on, tested here because joining is not public.

use bytes::Bytes;

use crate::{Packet, Pool};

#[test]
fn try_join_undoes_a_split_and_refuses_what_does_not_follow() {
    let pool = Pool::new();
    let data: Vec<u8> = (0..200u8).collect();
    let mut whole = pool.copy_owned(&data).unwrap();
    let (ptr, len) = (whole.as_ptr(), whole.len());
    let mut middle = whole.split_off(50);
    let tail = middle.split_off(100);
    let head = whole;

    // Out of order: the tail does not start where the head ends. Both come back unchanged.
    let mut joined = head.clone();
    let tail = joined.try_join(tail).unwrap_err();
    assert_eq!(&joined[..], &data[..50]);
    assert_eq!(&tail[..], &data[150..]);

    // In order: one window again, the same bytes in place, and the joined-in references dropped.
    joined.try_join(middle).unwrap();
    joined.try_join(tail).unwrap();
    assert_eq!((joined.as_ptr(), joined.len()), (ptr, len));
    assert_eq!(&joined[..], &data[..]);
    drop(head);
    assert!(joined.is_unique(), "the parts' references went with them");
    drop(joined);
    assert_eq!(pool.stats().outstanding, 0);

    // Another block, even with equal bytes: refused.
    let mut a = pool.copy_owned(b"ab").unwrap();
    let b = pool.copy_owned(b"cd").unwrap();
    assert!(!a.is_followed_by(&b));
    assert_eq!(&a.try_join(b).unwrap_err()[..], b"cd");
    assert_eq!(&a[..], b"ab");
}

#[test]
fn packet_try_join_joins_pooled_neighbours_and_empties_only() {
    let pool = Pool::new();
    let mut packet = pool.copy_from_slice(b"hello world").unwrap();
    let tail = packet.split_off(5);
    packet.try_join(tail).unwrap();
    assert_eq!(&packet[..], b"hello world");
    assert!(packet.as_owned().unwrap().is_unique());
    assert!(packet.get_mut().is_some());

    // Empty on either side joins anything.
    packet.try_join(Packet::new()).unwrap();
    let mut empty = Packet::new();
    empty.try_join(Packet::from_static(b"static")).unwrap();
    assert_eq!(&empty[..], b"static");

    // Static slices and `Bytes` never join, even when their memory is adjacent.
    static BOTH: [u8; 4] = *b"abcd";
    let mut left = Packet::from_static(&BOTH[..2]);
    assert_eq!(
        &left.try_join(Packet::from_static(&BOTH[2..])).unwrap_err()[..],
        b"cd"
    );
    let bytes = Bytes::from_static(b"abcd");
    let mut left = Packet::from(bytes.slice(..2));
    assert!(left.try_join(Packet::from(bytes.slice(2..))).is_err());
    assert_eq!(&left[..], b"ab");

    // Nor do inline packets: their bytes live in the value.
    for len in 1..=Packet::INLINE_CAPACITY {
        let data: Vec<u8> = (0..len as u8).collect();
        let mut inline = Packet::copy_from_slice(&data);
        assert!(inline.is_inline());
        let back = inline.try_join(Packet::from_static(b"!")).unwrap_err();
        assert_eq!(&back[..], b"!", "an inline packet joined a static one");
        assert_eq!(&inline[..], &data[..]);
    }
}
