//! Nothing: packetpipe's benches are in `benches/` and its measurement programs in `examples/` of
//! this package (a package needs a library or binary target of its own).
