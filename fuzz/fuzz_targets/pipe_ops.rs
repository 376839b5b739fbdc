//! Random operation sequences on a pipe's writer and reader, checked against the pipe's reference
//! model: the test kit's (`tests-integration/tests/kit/pipe_model/`, included by path), the one the proptests of
//! `tests-integration/tests/pipe_model/` and the corpus replay of `tests-integration/tests/fuzz_replay.rs` run too. The input format is
//! `tests-integration/tests/kit/pipe_model/input.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

// Every driver uses a part of the model's items. The model takes its waker from the kit's `wake`
// module, its sibling there and here.
#[allow(dead_code)]
#[path = "../../tests-integration/tests/kit/pipe_model/mod.rs"]
mod pipe_model;
#[allow(dead_code)]
#[path = "../../tests-integration/tests/kit/wake.rs"]
mod wake;

fuzz_target!(|data: &[u8]| pipe_model::input::run(data));
