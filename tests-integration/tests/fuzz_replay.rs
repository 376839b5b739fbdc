//! The fuzz targets' inputs, replayed without libFuzzer so they run in `cargo test`:
//!
//! - every file under `fuzz/corpus/<target>/` (the committed seed corpus) and
//!   `fuzz/regressions/<target>/` (inputs that once failed: `scripts/fuzz.sh` copies each crash
//!   there, and it stays as a regression test once fixed);
//! - `FUZZ_REPLAY_RANDOM` pseudo-random inputs per target (default 300, fixed seed), so the
//!   checker itself runs on more than the seeds in every `cargo test`.
//!
//! The checking code is the fuzz targets' own, included by path: the pipe's reference model of the
//! test kit (`tests/kit/pipe_model/`, with its input decoder for `pipe_ops`),
//! `fuzz/src/frame_decoders.rs`, `fuzz/src/resp_parser.rs` and `fuzz/src/tls_server.rs`: one decoder and one checker per
//! target, several drivers, and nothing added to the library's API.

use std::path::{Path, PathBuf};

mod kit;

use kit::rng::XorShiftStar;

#[path = "../../fuzz/src/frame_decoders.rs"]
mod frame_decoders;

#[cfg(feature = "tokio")]
#[path = "../../fuzz/src/resp_parser.rs"]
mod resp_parser;

#[cfg(feature = "tls")]
#[path = "../../fuzz/src/tls_server.rs"]
mod tls_server;

/// Every input file of `target` in the corpus and regression directories.
fn inputs(target: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut files = Vec::new();
    for dir in ["corpus", "regressions"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir).join(target)) else {
            continue;
        };
        for entry in entries {
            let path = entry.expect("directory entry").path();
            if path.is_file() && path.file_name().is_some_and(|n| n != ".gitkeep") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// Run `check` on `data`, naming the input if it fails.
fn replay(name: &str, data: &[u8], check: fn(&[u8])) {
    if let Err(panic) = std::panic::catch_unwind(|| check(data)) {
        eprintln!("fuzz replay: input {name} failed");
        std::panic::resume_unwind(panic);
    }
}

fn random_inputs() -> usize {
    std::env::var("FUZZ_REPLAY_RANDOM")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if cfg!(miri) { 2 } else { 300 })
}

/// Deterministic pseudo-random inputs (xorshift64*), 2 to 600 bytes each.
fn random_input(seed: u64) -> Vec<u8> {
    let mut rng = XorShiftStar::new(seed);
    let len = 2 + (rng.next() % 599) as usize;
    (0..len).map(|_| (rng.next() >> 56) as u8).collect()
}

#[test]
fn pipe_ops_corpus_and_regressions_pass() {
    let files = inputs("pipe_ops");
    assert!(
        !files.is_empty(),
        "no committed inputs found under fuzz/corpus/pipe_ops"
    );
    for path in files {
        let data = std::fs::read(&path).expect("read input");
        replay(
            &path.display().to_string(),
            &data,
            kit::pipe_model::input::run,
        );
    }
}

#[test]
fn pipe_ops_random_inputs_pass() {
    for seed in 0..random_inputs() as u64 {
        replay(
            &format!("random seed {seed}"),
            &random_input(seed),
            kit::pipe_model::input::run,
        );
    }
}

#[test]
fn frame_decoders_corpus_and_regressions_pass() {
    let files = inputs("frame_decoders");
    assert!(
        !files.is_empty(),
        "no committed inputs found under fuzz/corpus/frame_decoders"
    );
    for path in files {
        let data = std::fs::read(&path).expect("read input");
        replay(&path.display().to_string(), &data, frame_decoders::run);
    }
}

#[test]
fn frame_decoders_random_inputs_pass() {
    for seed in 0..random_inputs() as u64 {
        replay(
            &format!("random seed {seed}"),
            &random_input(seed ^ 0xF4A3),
            frame_decoders::run,
        );
    }
}

#[test]
#[cfg(feature = "tokio")]
fn resp_parser_corpus_and_regressions_pass() {
    let files = inputs("resp_parser");
    assert!(
        !files.is_empty(),
        "no committed inputs found under fuzz/corpus/resp_parser"
    );
    for path in files {
        let data = std::fs::read(&path).expect("read input");
        replay(&path.display().to_string(), &data, resp_parser::run);
    }
}

#[test]
#[cfg(feature = "tokio")]
fn resp_parser_random_inputs_pass() {
    for seed in 0..random_inputs() as u64 {
        replay(
            &format!("random seed {seed}"),
            &random_input(seed ^ 0x5E59),
            resp_parser::run,
        );
    }
}

#[test]
#[cfg(feature = "tls")]
fn tls_server_corpus_and_regressions_pass() {
    let files = inputs("tls_server");
    assert!(
        !files.is_empty(),
        "no committed inputs found under fuzz/corpus/tls_server"
    );
    for path in files {
        let data = std::fs::read(&path).expect("read input");
        replay(&path.display().to_string(), &data, tls_server::run);
    }
}

#[test]
#[cfg(feature = "tls")]
fn tls_server_random_inputs_pass() {
    // A handshake per input: fewer than the other targets' (each costs a few milliseconds).
    for seed in 0..(random_inputs() / 10).max(3) as u64 {
        replay(
            &format!("random seed {seed}"),
            &random_input(seed ^ 0x7157),
            tls_server::run,
        );
    }
}
