//! Arbitrary bytes as a case of the model: the `pipe_ops` fuzz target's input format, shared by
//! the libFuzzer target and the replay of its corpus in `cargo test` (`tests/fuzz_replay/`).
//!
//! Byte 0 and 1 choose the settings; then each operation is 3 bytes, an opcode and two operand
//! bytes `a` and `b` (missing bytes read as 0). At most [`MAX_OPS`] operations run. The format is
//! stable, so that committed inputs keep exercising what they were kept for: the opcodes
//! (`opcode % 21`) are
//!
//! | opcode | operation |
//! |---|---|
//! | 0, 20 | `write_slice` of `size(a, b)` bytes (20: a larger size class) |
//! | 1 | `buffer_mut(size(a, b))` then `advance`, within the space or beyond it |
//! | 2 | `advance` alone, into what is left of the last space |
//! | 3 | `append` of a packet of `size(a, b)` bytes, of one of the nine ownership kinds |
//! | 4, 5 | `flush()` future polled once / `poll_flush` |
//! | 6 | `try_read` |
//! | 7 | `poll_read_buffer` then `last_read` |
//! | 8 | `read_at_least`: the future polled once (`b` even) or `poll_read_at_least` |
//! | 9 | a `read_buffer()` (`b` even) or `read_at_least()` future polled once, dropped if pending |
//! | 10 | `advance_to`, valid or not (`(a + b) % 10` picks the mode) |
//! | 11 | `take_frame` (`b` even) or a header and then a frame (`b` odd, the header's length picked from `b / 2`) |
//! | 12 | `take_frame_chain` |
//! | 13 | `advance_to(len, len)` (everything consumed) |
//! | 14, 15 | the reader's, the writer's `PipeCanceler::cancel` |
//! | 16, 17 | the writer, the reader completes (with an error when `a` is odd) |
//! | 18, 19 | the writer, the reader is dropped |
//!
//! The operand byte `a` is also the step's gate (what a writer operation does to a pending flush).

use super::{run_case, CaseConfig, Kind, Op, Pick, ReadForm, Step};

/// Operations run per input at most (longer inputs are cut).
pub const MAX_OPS: usize = 2000;

/// Decode an input into a case: its settings and its steps.
pub fn decode(data: &[u8]) -> (CaseConfig, Vec<Step>) {
    let byte = |i: usize| data.get(i).copied().unwrap_or(0);
    let (s0, s1) = (byte(0), byte(1));
    let pause = [0, 1, 64, 300, 4096][s0 as usize % 5];
    let config = CaseConfig {
        pause,
        resume: [0, 1, pause / 2, pause, pause + 7][(s0 / 5) as usize % 5],
        min_segment: [1, 16, 64, 1000][s1 as usize % 4],
        copy_threshold: [0, 8, 64, 100_000][(s1 / 4) as usize % 4],
        pool_min_class: 64,
        pool_max_class: 4096,
        pool_thread_cache_depth: Some(2),
    };
    let steps = data
        .get(2..)
        .unwrap_or(&[])
        .chunks(3)
        .take(MAX_OPS)
        .map(|c| {
            let (code, a, b) = (
                c[0],
                c.get(1).copied().unwrap_or(0),
                c.get(2).copied().unwrap_or(0),
            );
            Step {
                op: op(code, a, b),
                gate: a,
            }
        })
        .collect();
    (config, steps)
}

/// Decode and run one input; panics (naming the step) on any disagreement with the model.
pub fn run(data: &[u8]) {
    let (config, steps) = decode(data);
    run_case(&config, &steps);
}

fn op(code: u8, a: u8, b: u8) -> Op {
    const KINDS: [Kind; 9] = [
        Kind::Pooled,
        Kind::Bytes,
        Kind::PooledSlice,
        Kind::Vec,
        Kind::PacketBuf,
        Kind::BytesStatic,
        Kind::Static,
        Kind::Inline,
        Kind::Empty,
    ];
    let form = |x: u8| {
        if x % 2 == 0 {
            ReadForm::Future
        } else {
            ReadForm::Poll
        }
    };
    match code % 21 {
        0 => Op::Write { len: size(a, b) },
        1 => {
            let (n, over) = pick(b >> 2);
            Op::BufferAdvance {
                hint: size(a, b),
                n,
                over,
            }
        }
        2 => {
            let (n, over) = pick(a);
            Op::Advance { n, over }
        }
        3 => Op::Append {
            kind: KINDS[(b >> 2) as usize % KINDS.len()],
            len: size(a, b),
            off: a as usize,
        },
        4 => Op::Flush,
        5 => Op::PollFlush,
        6 => Op::TryRead,
        7 => Op::Read {
            form: ReadForm::Poll,
        },
        8 => Op::ReadAtLeast {
            n: pick(a).0,
            form: form(b),
        },
        9 if b % 2 == 0 => Op::Read {
            form: ReadForm::Future,
        },
        9 => Op::ReadAtLeastAbandoned { n: pick(a).0 },
        10 => Op::AdvanceTo {
            consumed: pick(a).0,
            examined: pick(b).0,
            mode: a.wrapping_add(b) % 10,
        },
        11 if b % 2 == 1 => {
            let (n, over) = pick(a);
            Op::TakeFrameAfter {
                skip: pick(b / 2).0,
                n,
                over,
            }
        }
        11 => {
            let (n, over) = pick(a);
            Op::TakeFrame { n, over }
        }
        12 => {
            let (n, over) = pick(a);
            Op::TakeFrameChain { n, over }
        }
        13 => Op::ConsumeAll,
        14 => Op::CancelRead,
        15 => Op::CancelFlush,
        16 if a % 2 == 1 => Op::WriterCompleteWithError,
        16 => Op::WriterComplete,
        17 if a % 2 == 1 => Op::ReaderCompleteWithError,
        17 => Op::ReaderComplete,
        18 => Op::DropWriter,
        19 => Op::DropReader,
        _ => Op::Write {
            len: size(a, b.wrapping_add(128)),
        },
    }
}

/// A size from two operand bytes: small sizes most of the time, up to ~16 KiB.
fn size(a: u8, b: u8) -> usize {
    match b % 4 {
        0 => a as usize % 8,
        1 => a as usize,
        2 => a as usize * 8,
        _ => (a as usize) << 6,
    }
}

/// A position from one operand byte: 0, the largest valid one, one between, or (`true`) past it.
fn pick(sel: u8) -> (Pick, bool) {
    let pick = Pick {
        sel: match sel % 8 {
            0 => 0,
            1 | 2 => 1,
            _ => 2,
        },
        raw: (sel as u16).wrapping_mul(7919),
    };
    (pick, sel % 8 == 3)
}
