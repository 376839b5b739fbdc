//! The frame decoders on arbitrary bytes at random segment boundaries, against tokio-util's codecs
//! (see `fuzz/src/frame_decoders.rs`, shared with the proptests and the replay test).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../src/frame_decoders.rs"]
mod frame_decoders;

fuzz_target!(|data: &[u8]| frame_decoders::run(data));
