//! The RESP2 server of `examples/resp_server.rs` on tokio-util's `Framed` (a RESP codec over
//! `BytesMut`) instead of packetpipe: the same parser, commands, store and session loop
//! (`examples/resp/`), so that comparing the two measures the buffer layer alone.
//!
//! ```text
//! cargo run --release -p packetpipe-perf --example resp_server_tokio_util -- [ADDR] [--max-request BYTES]
//! ```
//!
//! Listens on ADDR (default `127.0.0.1:6380`), prints `listening on ADDR` once it accepts, and
//! serves until killed, exactly as `resp_server` does.
#![forbid(unsafe_code)]

#[path = "../../examples/resp/mod.rs"]
mod resp;

fn main() {
    resp::server::main(resp::server::Flavor::TokioUtil);
}
