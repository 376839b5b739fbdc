//! Loom models of packetpipe protocols live in `tests/`.
