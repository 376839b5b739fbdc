//! Random operation sequences on a pipe's writer and reader, checked against a byte model (see
//! `fuzz/src/pipe_ops.rs`, shared with the replay test `tests/fuzz_replay.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../src/pipe_ops.rs"]
mod pipe_ops;

fuzz_target!(|data: &[u8]| pipe_ops::run(data));
