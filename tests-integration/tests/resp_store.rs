//! The RESP example's key space: expiry kept apart from the entries, and the packetpipe server's
//! compact kept values (inline, an exactly sized copy, the received packets).
#![allow(dead_code)]

#[path = "../../examples/resp/mod.rs"]
mod resp;

use std::sync::Arc;
use std::time::{Duration, Instant};

use packetpipe::{Packet, PacketChain};
use resp::pipe_server::Stored;
use resp::store::{Condition, Expiry, Kept, Store, Value};

fn bytes_of(kept: &impl Kept) -> Vec<u8> {
    let mut out = Vec::new();
    kept.for_each_chunk(|chunk| out.extend_from_slice(chunk));
    assert_eq!(out.len(), kept.len());
    out
}

fn chain(bytes: &[u8]) -> PacketChain {
    <PacketChain as Value>::copy_from(bytes)
}

/// A chain of `parts` packets holding `len` bytes of `fill`.
fn spanning(len: usize, parts: usize, fill: u8) -> PacketChain {
    let mut chain = PacketChain::new();
    let part = len / parts;
    for i in 0..parts {
        let n = if i + 1 == parts { len - part * i } else { part };
        chain.push(Packet::from(vec![fill; n]));
    }
    chain
}

#[test]
fn a_kept_value_is_no_larger_than_a_packet() {
    assert!(std::mem::size_of::<Stored>() <= std::mem::size_of::<Packet>());
}

#[test]
fn values_are_kept_inline_copied_or_as_their_packets() {
    let mut store: Store<PacketChain> = Store::new(Arc::default());
    let never = (Condition::Always, Expiry::Never);
    store.set(b"one", chain(b"x"), never.0, never.1);
    store.set(b"hundred", chain(&[7; 100]), never.0, never.1);
    store.set(b"large", spanning(100_000, 3, 9), never.0, never.1);
    match store.get(b"one").unwrap() {
        // A clone of an inline packet is a copy, which owns its bytes alone.
        Stored::One(packet) => assert!(
            packet.clone().get_mut().is_some(),
            "a 1-byte value is inline"
        ),
        other => panic!("1 byte kept as {other:?}"),
    }
    match store.get(b"hundred").unwrap() {
        Stored::Copied(bytes) => assert_eq!(&bytes[..], &[7; 100][..]),
        other => panic!("100 bytes kept as {other:?}"),
    }
    let large = store.get(b"large").unwrap();
    assert!(matches!(large, Stored::Spanning(_)), "{large:?}");
    assert_eq!(bytes_of(large), vec![9; 100_000]);
    assert_eq!(store.len(), 3);
}

#[test]
fn a_replacing_value_reuses_the_slot_allocation() {
    let mut store: Store<PacketChain> = Store::new(Arc::default());
    store.set(b"k", chain(&[1; 100]), Condition::Always, Expiry::Never);
    let address = |store: &mut Store<PacketChain>| match store.get(b"k").unwrap() {
        Stored::Copied(bytes) => bytes.as_ptr(),
        Stored::Spanning(chain) => &**chain as *const PacketChain as *const u8,
        other => panic!("kept as {other:?}"),
    };
    let before = address(&mut store);
    store.set(b"k", chain(&[2; 100]), Condition::Always, Expiry::Never);
    assert_eq!(address(&mut store), before, "same length: copied in place");
    assert_eq!(bytes_of(store.get(b"k").unwrap()), vec![2; 100]);
    store.set(b"k", chain(&[3; 101]), Condition::Always, Expiry::Never);
    assert_eq!(bytes_of(store.get(b"k").unwrap()), vec![3; 101]);

    store.set(
        b"k",
        spanning(100_000, 2, 4),
        Condition::Always,
        Expiry::Never,
    );
    let boxed = address(&mut store);
    // A large value in one packet replacing a spanning one stays in the same box.
    let mut one = PacketChain::new();
    one.push(Packet::from(vec![5; 100_000]));
    store.set(b"k", one, Condition::Always, Expiry::Never);
    assert_eq!(address(&mut store), boxed);
    assert_eq!(bytes_of(store.get(b"k").unwrap()), vec![5; 100_000]);
}

#[test]
fn expiry_lives_beside_the_entries() {
    let mut store: Store<PacketChain> = Store::new(Arc::default());
    let past = Instant::now();
    // Expired on arrival: gone for get, contains, remove and DBSIZE once looked at.
    store.set(b"gone", chain(b"v"), Condition::Always, Expiry::At(past));
    store.begin_request();
    assert!(store.get(b"gone").is_none());
    assert!(!store.contains(b"gone"));
    assert!(!store.remove(b"gone"));
    assert_eq!(store.len(), 0);
    // NX on an expired key stores; KEEPTTL on an expired key stores without an expiry.
    store.set(b"nx", chain(b"v"), Condition::Always, Expiry::At(past));
    store.begin_request();
    assert!(store.set(b"nx", chain(b"w"), Condition::IfAbsent, Expiry::Never));
    store.set(b"keep", chain(b"v"), Condition::Always, Expiry::At(past));
    store.begin_request();
    store.set(b"keep", chain(b"w"), Condition::Always, Expiry::Keep);
    assert_eq!(bytes_of(store.get(b"keep").unwrap()), b"w");

    // A live expiry: KEEPTTL and INCR's replace keep it, a plain SET drops it, DEL forgets it.
    let soon = Instant::now() + Duration::from_millis(20);
    for key in [&b"kept"[..], b"incr", b"plain", b"deleted"] {
        store.set(key, chain(b"1"), Condition::Always, Expiry::At(soon));
    }
    store.set(b"kept", chain(b"2"), Condition::Always, Expiry::Keep);
    store.replace(b"incr", chain(b"2"));
    store.set(b"plain", chain(b"2"), Condition::Always, Expiry::Never);
    assert!(store.remove(b"deleted"));
    store.set(b"deleted", chain(b"2"), Condition::Always, Expiry::Never);
    std::thread::sleep(Duration::from_millis(30));
    store.begin_request();
    assert!(store.get(b"kept").is_none(), "KEEPTTL kept the expiry");
    assert!(store.get(b"incr").is_none(), "INCR kept the expiry");
    assert_eq!(bytes_of(store.get(b"plain").unwrap()), b"2");
    assert_eq!(bytes_of(store.get(b"deleted").unwrap()), b"2");
    store.clear();
    assert_eq!(store.len(), 0);
}
