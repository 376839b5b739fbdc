//! Model-based property tests of the pipe's contract: random sequences of writer, reader and
//! canceler operations (proptest strategies over the operations of `kit::pipe_model`) run against
//! a real pipe and against the shared reference model, which checks every result (see
//! `tests/kit/pipe_model/mod.rs` for what is checked after each operation and at the end of a
//! case). A full run must also reach every situation of the model's coverage list.
//!
//! Cases: `PIPE_MODEL_CASES` (default 2000).

#[path = "../kit/mod.rs"]
mod kit;
mod regressions;

use kit::pipe_model::*;
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, RngAlgorithm, TestRunner};

// ------------------------------------------------------------------------------------------------
// Strategies

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        Just(Kind::Pooled),
        Just(Kind::PooledSlice),
        Just(Kind::PacketBuf),
        Just(Kind::Bytes),
        Just(Kind::BytesStatic),
        Just(Kind::Vec),
        Just(Kind::Static),
        Just(Kind::Inline),
        Just(Kind::Empty),
    ]
}

fn data_len() -> impl Strategy<Value = usize> {
    prop_oneof![6 => 0usize..24, 3 => 24usize..80, 1 => 80usize..300]
}

fn pick() -> impl Strategy<Value = Pick> {
    (any::<u8>(), any::<u16>()).prop_map(|(sel, raw)| Pick { sel, raw })
}

fn form() -> impl Strategy<Value = ReadForm> {
    prop_oneof![Just(ReadForm::Future), Just(ReadForm::Poll)]
}

fn over() -> impl Strategy<Value = bool> {
    prop::bool::weighted(0.15)
}

fn op() -> impl Strategy<Value = Op> {
    // Completions are rare (about one step in 60 per side) so that most cases spend most of their
    // steps with both ends open; every case ends with a completion anyway.
    prop_oneof![
        // Writer.
        20 => (kind(), data_len(), 0usize..256).prop_map(|(kind, len, off)| Op::Append { kind, len, off }),
        14 => (prop_oneof![0usize..40, 40usize..300], pick(), over())
            .prop_map(|(hint, n, over)| Op::BufferAdvance { hint, n, over }),
        4 => (pick(), over()).prop_map(|(n, over)| Op::Advance { n, over }),
        16 => data_len().prop_map(|len| Op::Write { len }),
        18 => Just(Op::Flush),
        10 => Just(Op::PollFlush),
        1 => Just(Op::WriterComplete),
        1 => Just(Op::WriterCompleteWithError),
        1 => Just(Op::DropWriter),
        // Reader.
        18 => form().prop_map(|form| Op::Read { form }),
        6 => Just(Op::TryRead),
        8 => (pick(), form()).prop_map(|(n, form)| Op::ReadAtLeast { n, form }),
        2 => pick().prop_map(|n| Op::ReadAtLeastAbandoned { n }),
        24 => (pick(), pick(), 0u8..10)
            .prop_map(|(consumed, examined, mode)| Op::AdvanceTo { consumed, examined, mode }),
        8 => (pick(), over()).prop_map(|(n, over)| Op::TakeFrame { n, over }),
        4 => (pick(), over()).prop_map(|(n, over)| Op::TakeFrameChain { n, over }),
        4 => (pick(), pick(), over())
            .prop_map(|(skip, n, over)| Op::TakeFrameAfter { skip, n, over }),
        4 => Just(Op::ConsumeAll),
        1 => Just(Op::ReaderComplete),
        1 => Just(Op::ReaderCompleteWithError),
        1 => Just(Op::DropReader),
        // Cancelers.
        3 => Just(Op::CancelRead),
        3 => Just(Op::CancelFlush),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    (op(), any::<u8>()).prop_map(|(op, gate)| Step { op, gate })
}

fn case_config() -> impl Strategy<Value = CaseConfig> {
    (
        prop_oneof![6 => Just(64usize), 2 => Just(100usize), 1 => Just(0usize), 1 => Just(16usize)],
        prop_oneof![6 => Just(32usize), 1 => Just(0usize), 1 => Just(64usize), 1 => Just(1000usize)],
        prop_oneof![Just(1usize), Just(8), Just(16), Just(64)],
        prop_oneof![Just(0usize), Just(8), Just(32), Just(4096)],
        prop_oneof![Just(16usize), Just(64)],
        prop_oneof![Just(64usize), Just(256), Just(4096)],
        prop_oneof![3 => Just(None), 1 => Just(Some(2usize))],
    )
        .prop_map(
            |(
                pause,
                resume,
                min_segment,
                copy_threshold,
                pool_min_class,
                pool_max_class,
                pool_thread_cache_depth,
            )| CaseConfig {
                pause,
                resume,
                min_segment,
                copy_threshold,
                pool_min_class,
                pool_max_class,
                pool_thread_cache_depth,
            },
        )
}

fn cases() -> u32 {
    std::env::var("PIPE_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000)
}

/// Random operation sequences agree with the model (`PIPE_MODEL_CASES` cases, default 2000).
#[test]
fn pipe_agrees_with_model() {
    let config = ProptestConfig {
        // ChaCha, the default, dominates the run time in debug builds.
        rng_algorithm: RngAlgorithm::XorShift,
        failure_persistence: None,
        max_shrink_iters: 20_000,
        ..ProptestConfig::with_cases(cases())
    };
    let mut runner = TestRunner::new(config);
    let strategy = (case_config(), prop::collection::vec(step(), 1..200));
    if let Err(e) = runner.run(&strategy, |(config, steps)| {
        run_case(&config, &steps);
        Ok(())
    }) {
        panic!("{e}");
    }
    let coverage = COVERAGE.lock().unwrap().clone();
    println!("coverage over {} cases:", cases());
    for (what, n) in &coverage {
        println!("{n:>9}  {what}");
    }
    if cases() >= 1000 {
        let missing: Vec<_> = MUST_COVER
            .iter()
            .filter(|w| !coverage.contains_key(*w))
            .collect();
        assert!(missing.is_empty(), "situations never reached: {missing:?}");
    }
}
