//! Operations.

use super::*;

#[derive(Debug, Clone)]
pub(crate) enum Op {
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

pub(crate) fn op() -> impl Strategy<Value = Op> {
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
pub(crate) struct PoolSettings {
    pub(crate) cache_depth: usize,
    pub(crate) cache_bytes: usize,
    pub(crate) max_retained_bytes: usize,
    pub(crate) clear_on_return: bool,
}

pub(crate) fn pool_settings() -> impl Strategy<Value = PoolSettings> {
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

pub(crate) struct Runner {
    pub(crate) pool: Pool,
    pub(crate) blocks: Blocks,
    pub(crate) objs: Vec<Obj>,
    pub(crate) workers: Vec<mpsc::Sender<Obj>>,
    pub(crate) rents: u64,
    pub(crate) unpooled: u64,
}

pub(crate) fn is_buf(o: &Obj) -> bool {
    matches!(o, Obj::Buf(_))
}
pub(crate) fn is_owned(o: &Obj) -> bool {
    matches!(o, Obj::Owned(_))
}
pub(crate) fn is_packet(o: &Obj) -> bool {
    matches!(o, Obj::Packet(_))
}
pub(crate) fn is_chain(o: &Obj) -> bool {
    matches!(o, Obj::Chain(_))
}
pub(crate) fn any_obj(_: &Obj) -> bool {
    true
}

/// A range inside `0..=len` from two indices.
pub(crate) fn range_in(len: usize, a: Index, b: Index) -> (usize, usize) {
    let start = a.index(len + 1);
    let end = start + b.index(len - start + 1);
    (start, end)
}

/// The capacity the runner's pool (classes 64 B to `MAX_CLASS`) gives a request of `size` bytes,
/// or `None` if it is not pooled: the powers of two and three sizes evenly between each two (the
/// pool's documented size classes).
pub(crate) fn class_size_for(size: usize) -> Option<usize> {
    const MIN_CLASS: usize = 64;
    let size = size.max(1);
    if size <= MIN_CLASS {
        return Some(MIN_CLASS);
    }
    let power = 1usize << (usize::BITS - 1 - (size - 1).leading_zeros());
    let class = (1..=4)
        .map(|k| power + k * power / 4)
        .find(|&class| class >= size)
        .expect("twice the power of two below is at least the size");
    (class <= MAX_CLASS).then_some(class)
}

impl Runner {
    pub(crate) fn new(
        settings: &PoolSettings,
        threads: usize,
    ) -> (Runner, Vec<thread::JoinHandle<()>>) {
        let pool = Pool::with_options(packetpipe::PoolOptions {
            min_class_size: 64,
            max_class_size: MAX_CLASS,
            thread_cache_depth: settings.cache_depth,
            thread_cache_bytes: settings.cache_bytes,
            max_retained_bytes: settings.max_retained_bytes,
            clear_on_return: settings.clear_on_return,
            ..packetpipe::PoolOptions::default()
        })
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

    pub(crate) fn pick(&self, index: Index, filter: fn(&Obj) -> bool) -> Option<usize> {
        let candidates: Vec<usize> = (0..self.objs.len())
            .filter(|&i| filter(&self.objs[i]))
            .collect();
        (!candidates.is_empty()).then(|| candidates[index.index(candidates.len())])
    }

    pub(crate) fn count_rent(&mut self, size: usize) {
        self.rents += 1;
        if class_size_for(size).is_none() {
            self.unpooled += 1;
        }
    }

    pub(crate) fn new_owned(&self, packet: Packet, data: Vec<u8>, offset: usize) -> Obj {
        let token = Token::new(&self.blocks, self.blocks.new_block());
        Obj::Owned(OwnedObj {
            packet,
            token,
            data,
            offset,
        })
    }

    pub(crate) fn plain_packet(packet: Packet, data: Vec<u8>) -> Obj {
        Obj::Packet(PacketObj {
            packet,
            pooled: None,
            owners: Vec::new(),
            data,
        })
    }

    pub(crate) fn apply(&mut self, op: Op) {
        match op {
            Op::Rent { headroom, size } => self.op_rent(headroom, size),
            Op::CopyFromSlice(data) => self.op_copy_from_slice(data),
            Op::FromVec(data) => self.op_from_vec(data),
            Op::FromBytesMut(data) => self.op_from_bytes_mut(data),
            Op::FromStatic(a, b) => self.op_from_static(a, b),
            Op::PacketCopyFromSlice(data) => self.op_packet_copy_from_slice(data),
            Op::Write(i, data) => self.op_write(i, data),
            Op::Commit(i, n, byte) => self.op_commit(i, n, byte),
            Op::BufTruncate(i, n) => self.op_buf_truncate(i, n),
            Op::Prepend(i, data) => self.op_prepend(i, data),
            Op::Seal(i) => self.op_seal(i),
            Op::Freeze(i) => self.op_freeze(i),
            Op::Clone(i) => self.op_clone(i),
            Op::Slice(i, a, b) => self.op_slice(i, a, b),
            Op::SplitTo(i, n) => self.op_split_to(i, n),
            Op::SplitOff(i, n) => self.op_split_off(i, n),
            Op::Truncate(i, n) => self.op_truncate(i, n),
            Op::Advance(i, n) => self.op_advance(i, n),
            Op::Mutate(i, byte) => self.op_mutate(i, byte),
            Op::IntoPacket(i) => self.op_into_packet(i),
            Op::IntoBytes(i) => self.op_into_bytes(i),
            Op::PushToChain(i, target) => self.op_push_to_chain(i, target),
            Op::ChainSplitTo(i, n) => self.op_chain_split_to(i, n),
            Op::ChainPop(i) => self.op_chain_pop(i),
            Op::Drop(i) => self.op_drop(i),
            Op::Send(i, worker) => self.op_send(i, worker),
        }
    }

    pub(crate) fn check_all(&mut self) {
        for obj in &mut self.objs {
            obj.check();
        }
    }
}

/// Run `ops`; `threads` worker threads receive what `Send` sends (with none, `Send` drops).
pub(crate) fn run(settings: &PoolSettings, ops: Vec<Op>, threads: usize) {
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

pub(crate) fn cases() -> u32 {
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
