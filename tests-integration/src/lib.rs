//! Nothing: packetpipe's integration tests are in `tests/` of this package (a package needs a
//! library or binary target of its own).
