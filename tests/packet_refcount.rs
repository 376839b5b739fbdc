//! Reference counting of pooled blocks, checked against a model.
//!
//! Random sequences of operations over `PacketBuf`, `OwnedPacket`, `Packet` (pooled, `Bytes` from
//! a `Vec`, from a `BytesMut`, from a pooled packet, and static) and `PacketChain`, on one thread
//! and with packets sent to worker threads that use and drop them. After every operation each
//! object's bytes must equal its model (a `Vec<u8>`); where the model knows every handle to a block
//! it also predicts `is_unique`, `get_mut` and `prepend` exactly. After each case every block must
//! be back: `outstanding == 0` and `rents == returns` exactly (a block returned twice would make
//! `returns > rents`), and after a trim every allocated block was freed once.
//!
//! `PROPTEST_CASES` sets the number of cases (default 256 per test).

use std::sync::{mpsc, Arc, Mutex};
use std::thread;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use packetpipe::{ByteSegments, Error, OwnedPacket, Packet, PacketBuf, PacketChain, Pool};
use proptest::prelude::*;
use proptest::sample::Index;

static STATIC: &[u8] = b"static bytes 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKL";

/// The largest pooled class of the pools under test; larger requests are plain allocations.
const MAX_CLASS: usize = 4096;

// ------------------------------------------------------------------------------------------------
// Model of block references

/// Per block: handles the model knows of, and whether it knows all of them. A block stops being
/// exact once a handle goes where the model cannot follow it: another thread, a chain, or a
/// `Bytes` owner (whose clones and empty slices share or drop the reference as `bytes` sees fit).
#[derive(Clone, Default)]
struct Blocks(Arc<Mutex<Vec<BlockModel>>>);

#[derive(Clone, Copy)]
struct BlockModel {
    handles: usize,
    exact: bool,
}

impl Blocks {
    fn new_block(&self) -> usize {
        let mut blocks = self.0.lock().unwrap();
        blocks.push(BlockModel {
            handles: 0,
            exact: true,
        });
        blocks.len() - 1
    }

    fn get(&self, block: usize) -> BlockModel {
        self.0.lock().unwrap()[block]
    }

    fn make_inexact(&self, block: usize) {
        self.0.lock().unwrap()[block].exact = false;
    }

    /// (blocks the model knows to be live, blocks that may be live).
    fn live_bounds(&self) -> (u64, u64) {
        let blocks = self.0.lock().unwrap();
        let sure = blocks.iter().filter(|b| b.exact && b.handles > 0).count() as u64;
        let maybe = blocks.iter().filter(|b| !b.exact || b.handles > 0).count() as u64;
        (sure, maybe)
    }
}

/// One counted handle to a block, as the model sees it. Dropped after the handle it stands for
/// (it is declared after it in every object), so the model never counts fewer handles than exist.
struct Token {
    block: usize,
    blocks: Blocks,
}

impl Token {
    fn new(blocks: &Blocks, block: usize) -> Token {
        blocks.0.lock().unwrap()[block].handles += 1;
        Token {
            block,
            blocks: blocks.clone(),
        }
    }

    fn another(&self) -> Token {
        Token::new(&self.blocks, self.block)
    }

    fn model(&self) -> BlockModel {
        self.blocks.get(self.block)
    }
}

impl Drop for Token {
    fn drop(&mut self) {
        self.blocks.0.lock().unwrap()[self.block].handles -= 1;
    }
}

// ------------------------------------------------------------------------------------------------
// Objects under test, each with its model

enum Obj {
    Buf(BufObj),
    Owned(OwnedObj),
    Packet(PacketObj),
    Chain(ChainObj),
}

struct BufObj {
    buf: PacketBuf,
    token: Token,
    capacity: usize,
    /// Model of the writer: `[0, sealed)` sealed, `[sealed, head)` headroom, `[head, tail)`
    /// written.
    sealed: usize,
    head: usize,
    tail: usize,
    written: Vec<u8>,
}

struct OwnedObj {
    packet: OwnedPacket,
    token: Token,
    data: Vec<u8>,
    /// Offset of the window in its block (its headroom).
    offset: usize,
}

struct PacketObj {
    packet: Packet,
    /// The block and offset, when the packet is a pooled packet the model follows.
    pooled: Option<(Token, usize)>,
    /// Keep counted the blocks this packet may refer to without the model following it exactly
    /// (a `Bytes` owner, a segment popped from a chain); those blocks are inexact.
    owners: Vec<Arc<Token>>,
    data: Vec<u8>,
}

struct ChainObj {
    chain: PacketChain,
    /// Every block pushed into the chain (or the chain it was split from) stays counted while the
    /// chain lives, so the model never counts fewer handles than exist.
    owners: Vec<Arc<Token>>,
    data: Vec<u8>,
}

impl Obj {
    /// Check the object against its model.
    fn check(&self) {
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
                        o.packet.is_unique(),
                        model.handles == 1,
                        "handles {}",
                        model.handles
                    );
                } else if model.handles == 1 {
                    assert!(o.packet.is_unique());
                }
            }
            Obj::Packet(p) => {
                assert_eq!(&p.packet[..], &p.data[..]);
                assert_eq!(p.packet.len(), p.data.len());
                if let Some((token, offset)) = &p.pooled {
                    let owned = p.packet.as_owned().expect("a pooled packet");
                    assert_eq!(owned.headroom(), *offset);
                    let model = token.model();
                    if model.exact {
                        assert_eq!(owned.is_unique(), model.handles == 1);
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
    fn make_inexact(&self) {
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
    fn use_and_drop(self) {
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

// ------------------------------------------------------------------------------------------------
// Operations

#[derive(Debug, Clone)]
enum Op {
    Rent { headroom: usize, size: usize },
    CopyFromSlice(Vec<u8>),
    FromVec(Vec<u8>),
    FromBytesMut(Vec<u8>),
    FromStatic(Index, Index),
    PacketCopyFromSlice(Vec<u8>),
    Write(Index, Vec<u8>),
    Commit(Index, Index, u8),
    BufTruncate(Index, Index),
    Prepend(Index, Vec<u8>),
    Seal(Index),
    Freeze(Index),
    Clone(Index),
    Slice(Index, Index, Index),
    SplitTo(Index, Index),
    SplitOff(Index, Index),
    Truncate(Index, Index),
    Advance(Index, Index),
    Mutate(Index, u8),
    IntoPacket(Index),
    IntoBytes(Index),
    PushToChain(Index, Option<Index>),
    ChainSplitTo(Index, Index),
    ChainPop(Index),
    Drop(Index),
    Send(Index, Index),
}

fn op() -> impl Strategy<Value = Op> {
    let i = any::<Index>;
    let bytes = || prop::collection::vec(any::<u8>(), 0..40);
    let size =
        prop_oneof![8 => 1usize..300, 2 => 300usize..MAX_CLASS + 1, 1 => MAX_CLASS + 1..6000];
    prop_oneof![
        4 => (0usize..40, size).prop_map(|(headroom, size)| Op::Rent { headroom, size }),
        2 => bytes().prop_map(Op::CopyFromSlice),
        1 => bytes().prop_map(Op::FromVec),
        1 => bytes().prop_map(Op::FromBytesMut),
        1 => (i(), i()).prop_map(|(a, b)| Op::FromStatic(a, b)),
        2 => prop::collection::vec(any::<u8>(), 0..=Packet::INLINE_CAPACITY)
            .prop_map(Op::PacketCopyFromSlice),
        4 => (i(), bytes()).prop_map(|(i, d)| Op::Write(i, d)),
        2 => (i(), i(), any::<u8>()).prop_map(|(i, n, b)| Op::Commit(i, n, b)),
        1 => (i(), i()).prop_map(|(i, n)| Op::BufTruncate(i, n)),
        3 => (i(), prop::collection::vec(any::<u8>(), 0..12)).prop_map(|(i, d)| Op::Prepend(i, d)),
        3 => i().prop_map(Op::Seal),
        2 => i().prop_map(Op::Freeze),
        3 => i().prop_map(Op::Clone),
        3 => (i(), i(), i()).prop_map(|(i, a, b)| Op::Slice(i, a, b)),
        3 => (i(), i()).prop_map(|(i, n)| Op::SplitTo(i, n)),
        3 => (i(), i()).prop_map(|(i, n)| Op::SplitOff(i, n)),
        2 => (i(), i()).prop_map(|(i, n)| Op::Truncate(i, n)),
        2 => (i(), i()).prop_map(|(i, n)| Op::Advance(i, n)),
        2 => (i(), any::<u8>()).prop_map(|(i, b)| Op::Mutate(i, b)),
        2 => i().prop_map(Op::IntoPacket),
        1 => i().prop_map(Op::IntoBytes),
        2 => (i(), any::<Option<Index>>()).prop_map(|(i, c)| Op::PushToChain(i, c)),
        1 => (i(), i()).prop_map(|(i, n)| Op::ChainSplitTo(i, n)),
        1 => i().prop_map(Op::ChainPop),
        4 => i().prop_map(Op::Drop),
        3 => (i(), i()).prop_map(|(i, w)| Op::Send(i, w)),
    ]
}

/// Settings of the pool for one case: small caches, so magazines move to and from the depot.
#[derive(Debug, Clone)]
struct PoolSettings {
    cache_depth: usize,
    cache_bytes: usize,
    max_retained_bytes: usize,
    clear_on_return: bool,
}

fn pool_settings() -> impl Strategy<Value = PoolSettings> {
    (
        1usize..6,
        prop::sample::select(vec![256usize, 4096, 64 * 1024]),
        0usize..64 * 1024,
        any::<bool>(),
    )
        .prop_map(
            |(cache_depth, cache_bytes, max_retained_bytes, clear_on_return)| PoolSettings {
                cache_depth,
                cache_bytes,
                max_retained_bytes,
                clear_on_return,
            },
        )
}

struct Runner {
    pool: Pool,
    blocks: Blocks,
    objs: Vec<Obj>,
    workers: Vec<mpsc::Sender<Obj>>,
    rents: u64,
    unpooled: u64,
}

fn is_buf(o: &Obj) -> bool {
    matches!(o, Obj::Buf(_))
}
fn is_owned(o: &Obj) -> bool {
    matches!(o, Obj::Owned(_))
}
fn is_packet(o: &Obj) -> bool {
    matches!(o, Obj::Packet(_))
}
fn is_chain(o: &Obj) -> bool {
    matches!(o, Obj::Chain(_))
}
fn any_obj(_: &Obj) -> bool {
    true
}

/// A range inside `0..=len` from two indices.
fn range_in(len: usize, a: Index, b: Index) -> (usize, usize) {
    let start = a.index(len + 1);
    let end = start + b.index(len - start + 1);
    (start, end)
}

impl Runner {
    fn new(settings: &PoolSettings, threads: usize) -> (Runner, Vec<thread::JoinHandle<()>>) {
        let pool = Pool::builder()
            .min_class_size(64)
            .max_class_size(MAX_CLASS)
            .thread_cache_depth(settings.cache_depth)
            .thread_cache_bytes(settings.cache_bytes)
            .max_retained_bytes(settings.max_retained_bytes)
            .clear_on_return(settings.clear_on_return)
            .build()
            .unwrap();
        let mut workers = Vec::new();
        let mut handles = Vec::new();
        for _ in 0..threads {
            let (tx, rx) = mpsc::channel::<Obj>();
            workers.push(tx);
            handles.push(thread::spawn(move || {
                for obj in rx {
                    obj.use_and_drop();
                }
            }));
        }
        let runner = Runner {
            pool,
            blocks: Blocks::default(),
            objs: Vec::new(),
            workers,
            rents: 0,
            unpooled: 0,
        };
        (runner, handles)
    }

    fn pick(&self, index: Index, filter: fn(&Obj) -> bool) -> Option<usize> {
        let candidates: Vec<usize> = (0..self.objs.len())
            .filter(|&i| filter(&self.objs[i]))
            .collect();
        (!candidates.is_empty()).then(|| candidates[index.index(candidates.len())])
    }

    fn count_rent(&mut self, size: usize) {
        self.rents += 1;
        if self.pool.class_size_for(size).is_none() {
            self.unpooled += 1;
        }
    }

    fn new_owned(&self, packet: OwnedPacket, data: Vec<u8>, offset: usize) -> Obj {
        let token = Token::new(&self.blocks, self.blocks.new_block());
        Obj::Owned(OwnedObj {
            packet,
            token,
            data,
            offset,
        })
    }

    fn plain_packet(packet: Packet, data: Vec<u8>) -> Obj {
        Obj::Packet(PacketObj {
            packet,
            pooled: None,
            owners: Vec::new(),
            data,
        })
    }

    fn apply(&mut self, op: Op) {
        match op {
            Op::Rent { headroom, size } => {
                let buf = self.pool.rent_with_headroom(headroom, size).unwrap();
                self.count_rent(headroom + size);
                let capacity = buf.capacity();
                match self.pool.class_size_for(headroom + size) {
                    Some(class) => assert_eq!(capacity, class),
                    None => assert!(capacity >= headroom + size),
                }
                let token = Token::new(&self.blocks, self.blocks.new_block());
                self.objs.push(Obj::Buf(BufObj {
                    buf,
                    token,
                    capacity,
                    sealed: 0,
                    head: headroom,
                    tail: headroom,
                    written: Vec::new(),
                }));
            }
            Op::CopyFromSlice(data) => {
                let packet = self.pool.copy_from_slice(&data).unwrap();
                self.count_rent(data.len().max(1));
                let obj = self.new_owned(packet, data, 0);
                self.objs.push(obj);
            }
            Op::FromVec(data) => {
                self.objs
                    .push(Runner::plain_packet(Packet::from(data.clone()), data));
            }
            Op::FromBytesMut(data) => {
                let mut bytes = BytesMut::with_capacity(data.len() + 8);
                bytes.put_slice(&data);
                self.objs
                    .push(Runner::plain_packet(Packet::from(bytes), data));
            }
            Op::FromStatic(a, b) => {
                let (start, end) = range_in(STATIC.len(), a, b);
                let packet = if a.index(2) == 0 {
                    Packet::from(&STATIC[start..end])
                } else {
                    Packet::from(Bytes::from_static(&STATIC[start..end]))
                };
                self.objs
                    .push(Runner::plain_packet(packet, STATIC[start..end].to_vec()));
            }
            Op::PacketCopyFromSlice(data) => {
                // Inline: held in the value, no block of any pool.
                let packet = Packet::copy_from_slice(&data);
                assert!(packet.is_inline());
                self.objs.push(Runner::plain_packet(packet, data));
            }
            Op::Write(i, data) => {
                let Some(i) = self.pick(i, is_buf) else {
                    return;
                };
                let Obj::Buf(b) = &mut self.objs[i] else {
                    unreachable!()
                };
                let available = b.capacity - b.tail;
                let result = b.buf.extend_from_slice(&data);
                if data.len() > available {
                    assert_eq!(
                        result,
                        Err(Error::NoSpace {
                            needed: data.len(),
                            available
                        })
                    );
                } else {
                    assert_eq!(result, Ok(()));
                    b.tail += data.len();
                    b.written.extend_from_slice(&data);
                }
            }
            Op::Commit(i, n, byte) => {
                let Some(i) = self.pick(i, is_buf) else {
                    return;
                };
                let Obj::Buf(b) = &mut self.objs[i] else {
                    unreachable!()
                };
                let spare = b.buf.spare_mut();
                assert_eq!(spare.len(), b.capacity - b.tail);
                let n = n.index(spare.len() + 1);
                spare[..n].fill(byte);
                b.buf.commit(n).unwrap();
                b.tail += n;
                b.written.resize(b.written.len() + n, byte);
            }
            Op::BufTruncate(i, n) => {
                let Some(i) = self.pick(i, is_buf) else {
                    return;
                };
                let Obj::Buf(b) = &mut self.objs[i] else {
                    unreachable!()
                };
                let n = n.index(b.written.len() + 2);
                if n == 0 && b.written.len() % 2 == 0 {
                    b.buf.clear();
                } else {
                    b.buf.truncate(n);
                }
                b.written.truncate(n);
                b.tail = b.head + b.written.len();
            }
            Op::Prepend(i, data) => {
                let Some(i) = self.pick(i, |o| is_buf(o) || is_owned(o)) else {
                    return;
                };
                match &mut self.objs[i] {
                    Obj::Buf(b) => {
                        let available = b.head - b.sealed;
                        let result = b.buf.prepend(&data);
                        if data.len() > available {
                            assert_eq!(
                                result,
                                Err(Error::NoHeadroom {
                                    needed: data.len(),
                                    available
                                })
                            );
                        } else {
                            assert_eq!(result, Ok(()));
                            b.head -= data.len();
                            b.written.splice(0..0, data.iter().copied());
                        }
                    }
                    Obj::Owned(o) => {
                        let model = o.token.model();
                        let result = o.packet.prepend(&data);
                        let no_headroom = Error::NoHeadroom {
                            needed: data.len(),
                            available: o.offset,
                        };
                        if model.exact || model.handles == 1 {
                            if model.handles != 1 {
                                assert_eq!(
                                    result,
                                    Err(Error::SharedBlock {
                                        references: model.handles
                                    })
                                );
                            } else if data.len() > o.offset {
                                assert_eq!(result, Err(no_headroom));
                            } else {
                                assert_eq!(result, Ok(()));
                            }
                        } else {
                            match &result {
                                Ok(()) => {}
                                Err(Error::SharedBlock { references }) => assert!(*references >= 2),
                                Err(e) => assert_eq!(e, &no_headroom),
                            }
                        }
                        if result.is_ok() {
                            o.offset -= data.len();
                            o.data.splice(0..0, data.iter().copied());
                        }
                    }
                    _ => unreachable!(),
                }
            }
            Op::Seal(i) => {
                let Some(i) = self.pick(i, is_buf) else {
                    return;
                };
                let Obj::Buf(b) = &mut self.objs[i] else {
                    unreachable!()
                };
                let packet = b.buf.seal();
                let token = b.token.another();
                let data = std::mem::take(&mut b.written);
                let offset = b.head;
                b.sealed = b.tail;
                b.head = b.tail;
                self.objs.push(Obj::Owned(OwnedObj {
                    packet,
                    token,
                    data,
                    offset,
                }));
            }
            Op::Freeze(i) => {
                let Some(i) = self.pick(i, is_buf) else {
                    return;
                };
                let Obj::Buf(b) = self.objs.swap_remove(i) else {
                    unreachable!()
                };
                let packet = b.buf.freeze();
                self.objs.push(Obj::Owned(OwnedObj {
                    packet,
                    token: b.token,
                    data: b.written,
                    offset: b.head,
                }));
            }
            Op::Clone(i) => {
                let Some(i) = self.pick(i, |o| !is_buf(o)) else {
                    return;
                };
                let obj = match &self.objs[i] {
                    Obj::Owned(o) => {
                        let packet = o.packet.clone();
                        Obj::Owned(OwnedObj {
                            packet,
                            token: o.token.another(),
                            data: o.data.clone(),
                            offset: o.offset,
                        })
                    }
                    Obj::Packet(p) => {
                        let packet = p.packet.clone();
                        let pooled = p.pooled.as_ref().map(|(t, offset)| (t.another(), *offset));
                        Obj::Packet(PacketObj {
                            packet,
                            pooled,
                            owners: p.owners.clone(),
                            data: p.data.clone(),
                        })
                    }
                    Obj::Chain(c) => Obj::Chain(ChainObj {
                        chain: c.chain.clone(),
                        owners: c.owners.clone(),
                        data: c.data.clone(),
                    }),
                    Obj::Buf(_) => unreachable!(),
                };
                self.objs.push(obj);
            }
            Op::Slice(i, a, b) => {
                let Some(i) = self.pick(i, |o| is_owned(o) || is_packet(o)) else {
                    return;
                };
                let obj = match &self.objs[i] {
                    Obj::Owned(o) => {
                        let (start, end) = range_in(o.data.len(), a, b);
                        let packet = if a.index(2) == 0 {
                            o.packet.slice(start..end)
                        } else {
                            o.packet.try_slice(start..end).unwrap()
                        };
                        let data = o.data[start..end].to_vec();
                        Obj::Owned(OwnedObj {
                            packet,
                            token: o.token.another(),
                            data,
                            offset: o.offset + start,
                        })
                    }
                    Obj::Packet(p) => {
                        let (start, end) = range_in(p.data.len(), a, b);
                        let packet = p.packet.slice(start..end);
                        let pooled = p
                            .pooled
                            .as_ref()
                            .map(|(t, offset)| (t.another(), offset + start));
                        let data = p.data[start..end].to_vec();
                        Obj::Packet(PacketObj {
                            packet,
                            pooled,
                            owners: p.owners.clone(),
                            data,
                        })
                    }
                    _ => unreachable!(),
                };
                self.objs.push(obj);
            }
            Op::SplitTo(i, n) => {
                let Some(i) = self.pick(i, |o| is_owned(o) || is_packet(o)) else {
                    return;
                };
                let obj = match &mut self.objs[i] {
                    Obj::Owned(o) => {
                        let at = n.index(o.data.len() + 1);
                        let packet = o.packet.split_to(at);
                        let data: Vec<u8> = o.data.drain(..at).collect();
                        let obj = OwnedObj {
                            packet,
                            token: o.token.another(),
                            data,
                            offset: o.offset,
                        };
                        o.offset += at;
                        Obj::Owned(obj)
                    }
                    Obj::Packet(p) => {
                        let at = n.index(p.data.len() + 1);
                        let packet = p.packet.try_split_to(at).unwrap();
                        let data: Vec<u8> = p.data.drain(..at).collect();
                        let pooled = p.pooled.as_mut().map(|(t, offset)| {
                            let head = (t.another(), *offset);
                            *offset += at;
                            head
                        });
                        Obj::Packet(PacketObj {
                            packet,
                            pooled,
                            owners: p.owners.clone(),
                            data,
                        })
                    }
                    _ => unreachable!(),
                };
                self.objs.push(obj);
            }
            Op::SplitOff(i, n) => {
                let Some(i) = self.pick(i, |o| is_owned(o) || is_packet(o)) else {
                    return;
                };
                let obj = match &mut self.objs[i] {
                    Obj::Owned(o) => {
                        let at = n.index(o.data.len() + 1);
                        let packet = o.packet.split_off(at);
                        let data = o.data.split_off(at);
                        Obj::Owned(OwnedObj {
                            packet,
                            token: o.token.another(),
                            data,
                            offset: o.offset + at,
                        })
                    }
                    Obj::Packet(p) => {
                        let at = n.index(p.data.len() + 1);
                        let packet = p.packet.try_split_off(at).unwrap();
                        let data = p.data.split_off(at);
                        let pooled = p
                            .pooled
                            .as_ref()
                            .map(|(t, offset)| (t.another(), offset + at));
                        Obj::Packet(PacketObj {
                            packet,
                            pooled,
                            owners: p.owners.clone(),
                            data,
                        })
                    }
                    _ => unreachable!(),
                };
                self.objs.push(obj);
            }
            Op::Truncate(i, n) => {
                let Some(i) = self.pick(i, |o| is_owned(o) || is_packet(o)) else {
                    return;
                };
                match &mut self.objs[i] {
                    Obj::Owned(o) => {
                        let n = n.index(o.data.len() + 2);
                        o.packet.truncate(n);
                        o.data.truncate(n);
                    }
                    Obj::Packet(p) => {
                        let n = n.index(p.data.len() + 2);
                        p.packet.truncate(n);
                        p.data.truncate(n);
                    }
                    _ => unreachable!(),
                }
            }
            Op::Advance(i, n) => {
                let Some(i) = self.pick(i, |o| !is_buf(o)) else {
                    return;
                };
                match &mut self.objs[i] {
                    Obj::Owned(o) => {
                        let n = n.index(o.data.len() + 1);
                        o.packet.advance(n);
                        o.data.drain(..n);
                        o.offset += n;
                    }
                    Obj::Packet(p) => {
                        let n = n.index(p.data.len() + 1);
                        p.packet.advance(n);
                        p.data.drain(..n);
                        if let Some((_, offset)) = &mut p.pooled {
                            *offset += n;
                        }
                    }
                    Obj::Chain(c) => {
                        let n = n.index(c.data.len() + 1);
                        c.chain.advance(n);
                        c.data.drain(..n);
                    }
                    Obj::Buf(_) => unreachable!(),
                }
            }
            Op::Mutate(i, byte) => {
                let Some(i) = self.pick(i, |o| is_buf(o) || is_owned(o)) else {
                    return;
                };
                match &mut self.objs[i] {
                    Obj::Buf(b) => {
                        b.buf.fill(byte);
                        b.written.fill(byte);
                    }
                    Obj::Owned(o) => {
                        let model = o.token.model();
                        let bytes = o.packet.get_mut();
                        if model.exact || model.handles == 1 {
                            assert_eq!(
                                bytes.is_some(),
                                model.handles == 1,
                                "handles {}",
                                model.handles
                            );
                        }
                        if let Some(bytes) = bytes {
                            bytes.fill(byte);
                            o.data.fill(byte);
                        }
                    }
                    _ => unreachable!(),
                }
            }
            Op::IntoPacket(i) => {
                let Some(i) = self.pick(i, |o| is_buf(o) || is_owned(o)) else {
                    return;
                };
                let obj = match self.objs.swap_remove(i) {
                    Obj::Buf(b) => {
                        let packet = Packet::from(b.buf);
                        let pooled = Some((b.token, b.head));
                        Obj::Packet(PacketObj {
                            packet,
                            pooled,
                            owners: Vec::new(),
                            data: b.written,
                        })
                    }
                    Obj::Owned(o) => {
                        let packet = Packet::from(o.packet);
                        let pooled = Some((o.token, o.offset));
                        Obj::Packet(PacketObj {
                            packet,
                            pooled,
                            owners: Vec::new(),
                            data: o.data,
                        })
                    }
                    _ => unreachable!(),
                };
                self.objs.push(obj);
            }
            Op::IntoBytes(i) => {
                let Some(i) = self.pick(i, |o| is_owned(o) || is_packet(o)) else {
                    return;
                };
                let obj = match self.objs.swap_remove(i) {
                    Obj::Owned(o) => {
                        o.token.blocks.make_inexact(o.token.block);
                        let bytes: Bytes = o.packet.into();
                        assert_eq!(&bytes[..], &o.data[..]);
                        let owners = vec![Arc::new(o.token)];
                        Obj::Packet(PacketObj {
                            packet: Packet::from(bytes),
                            pooled: None,
                            owners,
                            data: o.data,
                        })
                    }
                    Obj::Packet(p) => {
                        let mut owners = p.owners;
                        if let Some((token, _)) = p.pooled {
                            token.blocks.make_inexact(token.block);
                            owners.push(Arc::new(token));
                        }
                        let bytes = p.packet.into_bytes();
                        assert_eq!(&bytes[..], &p.data[..]);
                        Obj::Packet(PacketObj {
                            packet: Packet::from(bytes),
                            pooled: None,
                            owners,
                            data: p.data,
                        })
                    }
                    _ => unreachable!(),
                };
                self.objs.push(obj);
            }
            Op::PushToChain(i, target) => {
                let Some(i) = self.pick(i, |o| !is_chain(o)) else {
                    return;
                };
                let obj = self.objs.swap_remove(i);
                obj.make_inexact();
                let (packet, data, owners) = match obj {
                    Obj::Buf(b) => (Packet::from(b.buf), b.written, vec![Arc::new(b.token)]),
                    Obj::Owned(o) => (Packet::from(o.packet), o.data, vec![Arc::new(o.token)]),
                    Obj::Packet(p) => {
                        let mut owners = p.owners;
                        owners.extend(p.pooled.map(|(token, _)| Arc::new(token)));
                        (p.packet, p.data, owners)
                    }
                    Obj::Chain(_) => unreachable!(),
                };
                match target.and_then(|t| self.pick(t, is_chain)) {
                    Some(c) => {
                        let Obj::Chain(c) = &mut self.objs[c] else {
                            unreachable!()
                        };
                        c.chain.push(packet);
                        c.data.extend_from_slice(&data);
                        c.owners.extend(owners);
                    }
                    None => {
                        let chain = PacketChain::from(packet);
                        self.objs.push(Obj::Chain(ChainObj {
                            chain,
                            owners,
                            data,
                        }));
                    }
                }
            }
            Op::ChainSplitTo(i, n) => {
                let Some(i) = self.pick(i, is_chain) else {
                    return;
                };
                let Obj::Chain(c) = &mut self.objs[i] else {
                    unreachable!()
                };
                let at = n.index(c.data.len() + 1);
                let chain = c.chain.split_to(at);
                let data: Vec<u8> = c.data.drain(..at).collect();
                let owners = c.owners.clone();
                self.objs.push(Obj::Chain(ChainObj {
                    chain,
                    owners,
                    data,
                }));
            }
            Op::ChainPop(i) => {
                let Some(i) = self.pick(i, is_chain) else {
                    return;
                };
                let Obj::Chain(c) = &mut self.objs[i] else {
                    unreachable!()
                };
                let Some(packet) = c.chain.pop_front() else {
                    assert!(c.data.is_empty());
                    return;
                };
                let data: Vec<u8> = c.data.drain(..packet.len()).collect();
                let owners = c.owners.clone();
                self.objs.push(Obj::Packet(PacketObj {
                    packet,
                    pooled: None,
                    owners,
                    data,
                }));
            }
            Op::Drop(i) => {
                let Some(i) = self.pick(i, any_obj) else {
                    return;
                };
                drop(self.objs.swap_remove(i));
            }
            Op::Send(i, worker) => {
                let Some(i) = self.pick(i, any_obj) else {
                    return;
                };
                let obj = self.objs.swap_remove(i);
                if self.workers.is_empty() {
                    drop(obj);
                    return;
                }
                obj.make_inexact();
                let worker = worker.index(self.workers.len());
                self.workers[worker].send(obj).unwrap();
            }
        }
    }

    fn check_all(&self) {
        for obj in &self.objs {
            obj.check();
        }
    }
}

/// Run `ops`; `threads` worker threads receive what `Send` sends (with none, `Send` drops).
fn run(settings: &PoolSettings, ops: Vec<Op>, threads: usize) {
    let (mut runner, handles) = Runner::new(settings, threads);
    for op in ops {
        runner.apply(op);
        runner.check_all();
        if threads == 0 {
            // Everything is on this thread: the statistics are exact at every step.
            let stats = runner.pool.stats();
            let (sure, maybe) = runner.blocks.live_bounds();
            assert!(
                (sure..=maybe).contains(&stats.outstanding),
                "outstanding {} not in {sure}..={maybe}",
                stats.outstanding
            );
            assert_eq!(stats.rents, runner.rents);
            assert!(stats.returns <= stats.rents, "{stats:?}");
        }
    }

    let Runner {
        pool,
        blocks,
        objs,
        workers,
        rents,
        unpooled,
    } = runner;
    drop(objs);
    drop(workers);
    for handle in handles {
        handle.join().unwrap();
    }
    assert!(
        blocks.0.lock().unwrap().iter().all(|b| b.handles == 0),
        "model tokens leaked"
    );

    let stats = pool.stats();
    assert_eq!(stats.rents, rents, "{stats:?}");
    assert_eq!(
        stats.returns, rents,
        "every block returned exactly once: {stats:?}"
    );
    assert_eq!(stats.outstanding, 0, "{stats:?}");
    assert_eq!(stats.unpooled_allocations, unpooled, "{stats:?}");
    pool.trim();
    let stats = pool.stats();
    assert_eq!(stats.retained_bytes, 0, "{stats:?}");
    assert_eq!(
        stats.frees,
        stats.fresh_allocations + stats.unpooled_allocations,
        "{stats:?}"
    );
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(256)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        max_shrink_iters: 4096,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_operations_on_one_thread(
        settings in pool_settings(),
        ops in prop::collection::vec(op(), 1..80),
    ) {
        run(&settings, ops, 0);
    }

    #[test]
    fn random_operations_across_threads(
        settings in pool_settings(),
        ops in prop::collection::vec(op(), 1..80),
        threads in 1usize..4,
    ) {
        run(&settings, ops, threads);
    }
}

// ------------------------------------------------------------------------------------------------
// Fixed scenarios

/// Many threads cloning, slicing and dropping views of the same blocks at once.
#[test]
fn shared_blocks_released_concurrently() {
    let pool = Pool::builder().thread_cache_depth(2).build().unwrap();
    let rounds = if cfg!(miri) { 2 } else { 50 };
    for round in 0..rounds {
        let packets: Vec<OwnedPacket> = (0..64u8)
            .map(|i| pool.copy_from_slice(&[round ^ i; 200]).unwrap())
            .collect();
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let packets: Vec<OwnedPacket> = packets.iter().map(|p| p.slice(t * 10..)).collect();
                thread::spawn(move || {
                    for (i, p) in packets.into_iter().enumerate() {
                        let copies = [p.clone(), p.slice(1..5), p.clone()];
                        assert!(copies
                            .iter()
                            .all(|c| c.iter().all(|&b| b == round ^ i as u8)));
                        drop(p);
                        assert!(!copies[0].is_unique());
                    }
                })
            })
            .collect();
        drop(packets);
        for h in handles {
            h.join().unwrap();
        }
        let stats = pool.stats();
        assert_eq!(
            (stats.rents, stats.returns, stats.outstanding),
            (64 * (round as u64 + 1), 64 * (round as u64 + 1), 0)
        );
    }
}

/// A sealed packet and the buffer it came from, used and dropped on different threads.
#[test]
fn seal_here_write_there() {
    let pool = Pool::new();
    let mut buf = pool.rent(4096).unwrap();
    let mut sealed = Vec::new();
    for i in 0..10u8 {
        buf.put_slice(&[i; 100]);
        sealed.push(buf.seal());
    }
    let writer = thread::spawn(move || {
        for i in 10..20u8 {
            buf.put_slice(&[i; 100]);
            let packet = buf.seal();
            assert!(packet.iter().all(|&b| b == i));
        }
        buf
    });
    let reader = thread::spawn(move || {
        for (i, p) in sealed.iter().enumerate() {
            assert!(p.iter().all(|&b| b == i as u8));
        }
    });
    reader.join().unwrap();
    let buf = writer.join().unwrap();
    assert_eq!(buf.remaining_mut(), 4096 - 2000);
    assert_eq!(pool.stats().outstanding, 1);
    drop(buf);
    let stats = pool.stats();
    assert_eq!((stats.rents, stats.returns, stats.outstanding), (1, 1, 0));
}

/// The display helpers read the same bytes as the model through a chain of mixed packets.
#[test]
fn chain_of_mixed_packets_reads_back() {
    let pool = Pool::new();
    let mut chain = PacketChain::new();
    let mut model = Vec::new();
    for i in 0..20u8 {
        let data = vec![b'a' + i; i as usize + 1];
        model.extend_from_slice(&data);
        match i % 4 {
            0 => chain.push(pool.copy_from_slice(&data).unwrap()),
            1 => chain.push(data),
            2 => chain.push(Bytes::from(data)),
            _ => chain.push(pool.copy_from_slice(&data).unwrap().into_bytes()),
        }
    }
    assert_eq!(chain.to_vec(), model);
    assert_eq!(
        chain.display_lossy().to_string(),
        String::from_utf8(model.clone()).unwrap()
    );
    let head = chain.split_to(100);
    assert_eq!(head.to_vec(), &model[..100]);
    drop(head);
    assert_eq!(chain.to_packet().unwrap().as_slice(), &model[100..]);
    drop(chain);
    assert_eq!(pool.stats().outstanding, 0);
}

// ------------------------------------------------------------------------------------------------
// PacketChain against a deque of segments

#[derive(Debug, Clone)]
enum ChainOp {
    Push(Vec<u8>),
    PushFront(Vec<u8>),
    PopFront,
    SplitTo(Index),
    Advance(Index),
    GetU8,
    CopyToSlice(Index),
    Clear,
}

fn chain_op() -> impl Strategy<Value = ChainOp> {
    let bytes = || prop::collection::vec(any::<u8>(), 0..12);
    prop_oneof![
        5 => bytes().prop_map(ChainOp::Push),
        2 => bytes().prop_map(ChainOp::PushFront),
        2 => Just(ChainOp::PopFront),
        2 => any::<Index>().prop_map(ChainOp::SplitTo),
        2 => any::<Index>().prop_map(ChainOp::Advance),
        1 => Just(ChainOp::GetU8),
        1 => any::<Index>().prop_map(ChainOp::CopyToSlice),
        1 => Just(ChainOp::Clear),
    ]
}

/// Check a chain against its model: the non-empty segments, front to back.
fn check_chain(chain: &PacketChain, model: &std::collections::VecDeque<Vec<u8>>) {
    let flat: Vec<u8> = model.iter().flatten().copied().collect();
    assert_eq!(chain.len(), flat.len());
    assert_eq!(chain.is_empty(), flat.is_empty());
    assert_eq!(chain.segment_count(), model.len());
    assert_eq!(chain.iter().len(), model.len());
    for (packet, segment) in chain.iter().zip(model) {
        assert_eq!(&packet[..], &segment[..]);
    }
    assert_eq!(chain.chunk(), model.front().map_or(&[][..], |s| &s[..]));
    assert_eq!(chain.to_vec(), flat);
    let mut slices = [std::io::IoSlice::new(&[]); 3];
    let n = chain.chunks_vectored(&mut slices);
    assert_eq!(n, model.len().min(3));
    for (slice, segment) in slices[..n].iter().zip(model) {
        assert_eq!(&slice[..], &segment[..]);
    }
}

/// Split the first `at` bytes off the model.
fn model_split_to(model: &mut std::collections::VecDeque<Vec<u8>>, at: usize) -> Vec<Vec<u8>> {
    let mut head = Vec::new();
    let mut want = at;
    while want > 0 {
        let front = model.front_mut().unwrap();
        if front.len() <= want {
            want -= front.len();
            head.push(model.pop_front().unwrap());
        } else {
            head.push(front.drain(..want).collect());
            want = 0;
        }
    }
    head
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    /// Inline storage (up to 4 segments), the spill to the heap and back to empty, front pushes
    /// and splits inside segments, with pooled segments whose blocks must all come back.
    #[test]
    fn chain_matches_a_deque_of_segments(ops in prop::collection::vec(chain_op(), 1..60)) {
        let pool = Pool::builder().thread_cache_depth(1).build().unwrap();
        let mut chain = PacketChain::new();
        let mut model = std::collections::VecDeque::<Vec<u8>>::new();
        let mut heads = Vec::new();
        for (n, op) in ops.into_iter().enumerate() {
            let packet = |data: &[u8]| -> Packet {
                match n % 3 {
                    0 => Packet::from(pool.copy_from_slice(data).unwrap()),
                    1 => Packet::from(data.to_vec()),
                    _ => Packet::from(Bytes::copy_from_slice(data)),
                }
            };
            match op {
                ChainOp::Push(data) => {
                    chain.push(packet(&data));
                    if !data.is_empty() {
                        model.push_back(data);
                    }
                }
                ChainOp::PushFront(data) => {
                    chain.push_front(packet(&data));
                    if !data.is_empty() {
                        model.push_front(data);
                    }
                }
                ChainOp::PopFront => {
                    let popped = chain.pop_front().map(|p| p.to_vec());
                    prop_assert_eq!(popped, model.pop_front());
                }
                ChainOp::SplitTo(at) => {
                    let at = at.index(chain.len() + 1);
                    let head = chain.split_to(at);
                    let expected = model_split_to(&mut model, at);
                    check_chain(&head, &expected.into_iter().collect());
                    heads.push(head);
                }
                ChainOp::Advance(n) => {
                    let n = n.index(chain.len() + 1);
                    chain.advance(n);
                    model_split_to(&mut model, n);
                }
                ChainOp::GetU8 => {
                    if chain.has_remaining() {
                        let expected = model_split_to(&mut model, 1)[0][0];
                        prop_assert_eq!(chain.get_u8(), expected);
                    }
                }
                ChainOp::CopyToSlice(n) => {
                    let mut out = vec![0; n.index(chain.len() + 1)];
                    chain.copy_to_slice(&mut out);
                    let expected: Vec<u8> = model_split_to(&mut model, out.len()).concat();
                    prop_assert_eq!(out, expected);
                }
                ChainOp::Clear => {
                    chain.clear();
                    model.clear();
                }
            }
            check_chain(&chain, &model);
        }
        drop((chain, heads));
        let stats = pool.stats();
        prop_assert_eq!(stats.rents, stats.returns);
        prop_assert_eq!(stats.outstanding, 0);
    }
}

#[test]
fn try_join_undoes_a_split_and_refuses_what_does_not_follow() {
    let pool = Pool::new();
    let data: Vec<u8> = (0..200u8).collect();
    let mut whole = pool.copy_from_slice(&data).unwrap();
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
    let mut a = pool.copy_from_slice(b"ab").unwrap();
    let b = pool.copy_from_slice(b"cd").unwrap();
    assert!(!a.is_followed_by(&b));
    assert_eq!(&a.try_join(b).unwrap_err()[..], b"cd");
    assert_eq!(&a[..], b"ab");
}

#[test]
fn packet_try_join_joins_pooled_neighbours_and_empties_only() {
    let pool = Pool::new();
    let mut packet = Packet::from(pool.copy_from_slice(b"hello world").unwrap());
    let tail = packet.split_off(5);
    packet.try_join(tail).unwrap();
    assert_eq!(&packet[..], b"hello world");
    assert!(packet.as_owned().unwrap().is_unique());

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
}
