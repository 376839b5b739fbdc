//! PacketChain against a deque of segments.

use super::*;

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
    assert_eq!(chain.iter().len(), model.len());
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
        let pool = Pool::with_options(packetpipe::PoolOptions { thread_cache_depth: 1, ..packetpipe::PoolOptions::default() }).unwrap();
        let mut chain = PacketChain::new();
        let mut model = std::collections::VecDeque::<Vec<u8>>::new();
        let mut heads = Vec::new();
        for (n, op) in ops.into_iter().enumerate() {
            let packet = |data: &[u8]| -> Packet {
                match n % 3 {
                    0 => pool.copy_from_slice(data).unwrap(),
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
