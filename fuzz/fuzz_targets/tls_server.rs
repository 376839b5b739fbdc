//! The TLS server side (handshake and record layer) on arbitrary input (see
//! `fuzz/src/tls_server.rs`, shared with the replay test).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../src/tls_server.rs"]
mod tls_server;

fuzz_target!(|data: &[u8]| tls_server::run(data));
