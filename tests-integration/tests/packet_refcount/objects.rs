//! Objects under test, each with its model.

use super::*;

pub(crate) enum Obj {
    Buf(BufObj),
    Owned(OwnedObj),
    Packet(PacketObj),
    Chain(ChainObj),
}

pub(crate) struct BufObj {
    pub(crate) buf: PacketBuf,
    pub(crate) token: Token,
    pub(crate) capacity: usize,
    /// Model of the writer: `[0, sealed)` sealed, `[sealed, head)` headroom, `[head, tail)`
    /// written.
    pub(crate) sealed: usize,
    pub(crate) head: usize,
    pub(crate) tail: usize,
    pub(crate) written: Vec<u8>,
}

pub(crate) struct OwnedObj {
    pub(crate) packet: Packet,
    pub(crate) token: Token,
    pub(crate) data: Vec<u8>,
    /// Offset of the window in its block (its headroom).
    pub(crate) offset: usize,
}

pub(crate) struct PacketObj {
    pub(crate) packet: Packet,
    /// The block and offset, when the packet is a pooled packet the model follows.
    pub(crate) pooled: Option<(Token, usize)>,
    /// Keep counted the blocks this packet may refer to without the model following it exactly
    /// (a `Bytes` owner, a segment popped from a chain); those blocks are inexact.
    pub(crate) owners: Vec<Arc<Token>>,
    pub(crate) data: Vec<u8>,
}

pub(crate) struct ChainObj {
    pub(crate) chain: PacketChain,
    /// Every block pushed into the chain (or the chain it was split from) stays counted while the
    /// chain lives, so the model never counts fewer handles than exist.
    pub(crate) owners: Vec<Arc<Token>>,
    pub(crate) data: Vec<u8>,
}

impl Obj {
    /// Check the object against its model (`&mut`: a packet's uniqueness is what `get_mut` sees).
    pub(crate) fn check(&mut self) {
        match self {
            Obj::Buf(b) => {
                assert_eq!(&b.buf[..], &b.written[..]);
                assert_eq!(b.buf.len(), b.tail - b.head);
                assert_eq!(b.buf.capacity(), b.capacity);
                assert_eq!(b.buf.headroom(), b.head - b.sealed);
                assert_eq!(b.buf.remaining_mut(), b.capacity - b.tail);
                assert_eq!(b.buf.to_vec(), b.written);
            }
            Obj::Owned(o) => {
                assert_eq!(&o.packet[..], &o.data[..]);
                assert_eq!(o.packet.headroom(), o.offset);
                let model = o.token.model();
                if model.exact {
                    assert_eq!(
                        o.packet.get_mut().is_some(),
                        model.handles == 1,
                        "handles {}",
                        model.handles
                    );
                } else if model.handles == 1 {
                    assert!(o.packet.get_mut().is_some());
                }
            }
            Obj::Packet(p) => {
                assert_eq!(&p.packet[..], &p.data[..]);
                assert_eq!(p.packet.len(), p.data.len());
                if let Some((token, offset)) = &p.pooled {
                    assert_eq!(p.packet.headroom(), *offset);
                    let model = token.model();
                    if model.exact {
                        assert_eq!(p.packet.get_mut().is_some(), model.handles == 1);
                    }
                }
            }
            Obj::Chain(c) => {
                assert_eq!(c.chain.len(), c.data.len());
                assert_eq!(c.chain.to_vec(), c.data);
                assert_eq!(c.chain.remaining(), c.data.len());
                assert!(c.chain.iter().all(|p| !p.is_empty()));
            }
        }
    }

    /// Stop the model predicting uniqueness for the blocks this object refers to.
    pub(crate) fn make_inexact(&self) {
        match self {
            Obj::Buf(b) => b.token.blocks.make_inexact(b.token.block),
            Obj::Owned(o) => o.token.blocks.make_inexact(o.token.block),
            Obj::Packet(p) => {
                if let Some((token, _)) = &p.pooled {
                    token.blocks.make_inexact(token.block);
                }
            }
            Obj::Chain(_) => {} // the blocks of a chain are inexact already
        }
    }

    /// What a worker thread does with an object it received: check it, use it, drop it.
    pub(crate) fn use_and_drop(mut self) {
        self.check();
        match self {
            // Handles made here carry no model token: drop them before the object, whose token
            // keeps the block counted until then.
            Obj::Buf(mut b) => {
                let n = b.buf.remaining_mut().min(7);
                b.buf.put_slice(&b"worker!"[..n]);
                b.written.extend_from_slice(&b"worker!"[..n]);
                let sealed = b.buf.seal();
                assert_eq!(&sealed[..], &b.written[..]);
                let half = sealed.slice(sealed.len() / 2..);
                drop(sealed);
                assert_eq!(&half[..], &b.written[b.written.len() / 2..]);
                drop(half);
                drop(b);
            }
            Obj::Owned(o) => {
                let mut copy = o.packet.clone();
                let head = copy.split_to(copy.len() / 2);
                assert_eq!(&head[..], &o.data[..o.data.len() / 2]);
                assert_eq!(&copy[..], &o.data[o.data.len() / 2..]);
                drop((head, copy));
                drop(o);
            }
            Obj::Packet(p) => {
                let mut copy = p.packet.clone();
                let tail = copy.split_off(copy.len() / 2);
                assert_eq!(&copy[..], &p.data[..p.data.len() / 2]);
                assert_eq!(&tail[..], &p.data[p.data.len() / 2..]);
                drop((tail, copy));
                drop(p);
            }
            Obj::Chain(mut c) => {
                let n = c.data.len() / 2;
                let head = c.chain.split_to(n);
                assert_eq!(head.to_vec(), &c.data[..n]);
                c.chain.advance(c.chain.len());
                assert!(c.chain.is_empty());
            }
        }
    }
}
