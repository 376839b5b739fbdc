//! The RESP example's request parser on arbitrary bytes at random segment boundaries (see
//! `fuzz/src/resp_parser.rs`, shared with the replay test).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../src/resp_parser.rs"]
mod resp_parser;

fuzz_target!(|data: &[u8]| resp_parser::run(data));
