//! What each operation of the model does to the objects under test, and what it checks.

use super::*;

impl Runner {
    pub(super) fn op_rent(&mut self, headroom: usize, size: usize) {
        let buf = self.pool.rent_with_headroom(headroom, size).unwrap();
        self.count_rent(headroom + size);
        let capacity = buf.capacity();
        match class_size_for(headroom + size) {
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

    pub(super) fn op_copy_from_slice(&mut self, data: Vec<u8>) {
        let packet = self.pool.copy_from_slice(&data).unwrap();
        self.count_rent(data.len().max(1));
        let obj = self.new_owned(packet, data, 0);
        self.objs.push(obj);
    }

    pub(super) fn op_from_vec(&mut self, data: Vec<u8>) {
        self.objs
            .push(Runner::plain_packet(Packet::from(data.clone()), data));
    }

    pub(super) fn op_from_bytes_mut(&mut self, data: Vec<u8>) {
        let mut bytes = BytesMut::with_capacity(data.len() + 8);
        bytes.put_slice(&data);
        self.objs
            .push(Runner::plain_packet(Packet::from(bytes), data));
    }

    pub(super) fn op_from_static(&mut self, a: Index, b: Index) {
        let (start, end) = range_in(STATIC.len(), a, b);
        let packet = if a.index(2) == 0 {
            Packet::from(&STATIC[start..end])
        } else {
            Packet::from(Bytes::from_static(&STATIC[start..end]))
        };
        self.objs
            .push(Runner::plain_packet(packet, STATIC[start..end].to_vec()));
    }

    pub(super) fn op_packet_copy_from_slice(&mut self, data: Vec<u8>) {
        // Inline: held in the value, no block of any pool.
        let packet = Packet::copy_from_slice(&data);
        assert!(
            packet.clone().get_mut().is_some(),
            "a clone of an inline packet is a copy"
        );
        self.objs.push(Runner::plain_packet(packet, data));
    }

    pub(super) fn op_write(&mut self, i: Index, data: Vec<u8>) {
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

    pub(super) fn op_commit(&mut self, i: Index, n: Index, byte: u8) {
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

    pub(super) fn op_buf_truncate(&mut self, i: Index, n: Index) {
        let Some(i) = self.pick(i, is_buf) else {
            return;
        };
        let Obj::Buf(b) = &mut self.objs[i] else {
            unreachable!()
        };
        let n = n.index(b.written.len() + 2);
        b.buf.truncate(n);
        b.written.truncate(n);
        b.tail = b.head + b.written.len();
    }

    pub(super) fn op_prepend(&mut self, i: Index, data: Vec<u8>) {
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

    pub(super) fn op_seal(&mut self, i: Index) {
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

    pub(super) fn op_freeze(&mut self, i: Index) {
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

    pub(super) fn op_clone(&mut self, i: Index) {
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

    pub(super) fn op_slice(&mut self, i: Index, a: Index, b: Index) {
        let Some(i) = self.pick(i, |o| is_owned(o) || is_packet(o)) else {
            return;
        };
        let obj = match &self.objs[i] {
            Obj::Owned(o) => {
                let (start, end) = range_in(o.data.len(), a, b);
                let packet = if a.index(2) == 0 {
                    o.packet.slice(start..end)
                } else {
                    Packet::slice(&o.packet, start..end)
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

    pub(super) fn op_split_to(&mut self, i: Index, n: Index) {
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
                let packet = p.packet.split_to(at);
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

    pub(super) fn op_split_off(&mut self, i: Index, n: Index) {
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
                let packet = p.packet.split_off(at);
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

    pub(super) fn op_truncate(&mut self, i: Index, n: Index) {
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

    pub(super) fn op_advance(&mut self, i: Index, n: Index) {
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

    pub(super) fn op_mutate(&mut self, i: Index, byte: u8) {
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

    pub(super) fn op_into_packet(&mut self, i: Index) {
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
                let packet = o.packet;
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

    pub(super) fn op_into_bytes(&mut self, i: Index) {
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

    pub(super) fn op_push_to_chain(&mut self, i: Index, target: Option<Index>) {
        let Some(i) = self.pick(i, |o| !is_chain(o)) else {
            return;
        };
        let obj = self.objs.swap_remove(i);
        obj.make_inexact();
        let (packet, data, owners) = match obj {
            Obj::Buf(b) => (Packet::from(b.buf), b.written, vec![Arc::new(b.token)]),
            Obj::Owned(o) => (o.packet, o.data, vec![Arc::new(o.token)]),
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

    pub(super) fn op_chain_split_to(&mut self, i: Index, n: Index) {
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

    pub(super) fn op_chain_pop(&mut self, i: Index) {
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

    pub(super) fn op_drop(&mut self, i: Index) {
        let Some(i) = self.pick(i, any_obj) else {
            return;
        };
        drop(self.objs.swap_remove(i));
    }

    pub(super) fn op_send(&mut self, i: Index, worker: Index) {
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
