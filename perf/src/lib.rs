//! Nothing: packetpipe's criterion benches are the top-level `benches/` (each named in this package's
//! `Cargo.toml`) and its measurement programs are in `examples/` of
//! this package (a package needs a library or binary target of its own).
