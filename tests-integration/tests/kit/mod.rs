//! The shared test kit: helpers several test files use, and the pipe's reference model.
//!
//! A test file takes it with `mod kit;`, a folder target (`tests/<name>/main.rs`) with
//! `#[path = "../kit/mod.rs"] mod kit;` (Cargo builds `tests/*.rs` and `tests/*/main.rs` as test
//! targets, not this directory). Each test binary uses a part of it, so unused items are not
//! warned about here.
//!
//! - [`counting_alloc`]: a counting global allocator (counts once a binary installs it);
//! - [`wake`]: counting and no-op wakers, hand polling, park-until-woken executors;
//! - [`rng`]: small deterministic generators;
//! - [`pipes`]: pipes set up the way several tests need them;
//! - [`net`]: loopback socket pairs for the I/O tests;
//! - [`soak`]: the connection soak's echo application and checking clients (one soak per
//!   transport);
//! - [`pipe_model`]: the pipe's executable reference model and its harness (the proptests of
//!   `tests/pipe_model/`, the `pipe_ops` fuzz target and `tests/fuzz_replay.rs` run it).
#![allow(dead_code)]

pub mod counting_alloc;
pub mod net;
pub mod pipe_model;
pub mod pipes;
pub mod rng;
pub mod soak;
pub mod wake;
