//! A RESP2 (Redis protocol) server on packetpipe's duplex connection, for `redis-cli`,
//! `redis-benchmark` and any Redis client.
//!
//! ```text
//! cargo run --release --features tokio --example resp_server -- [ADDR] [--max-request BYTES]
//!     [--transport epoll|uring] [--tls CERT KEY]
//! ```
//!
//! Listens on ADDR (default `127.0.0.1:6380`), prints `listening on ADDR` once it accepts, and
//! serves until killed: PING, ECHO, SET (EX, PX, NX, XX, KEEPTTL), GET, DEL, EXISTS, INCR, MGET,
//! MSET, FLUSHALL, DBSIZE, SELECT 0, QUIT, and enough of CONFIG GET and COMMAND for `redis-benchmark` and
//! `redis-cli`; multibulk and inline requests; pipelining (every complete request in the buffer
//! answered, the replies flushed once). A malformed request is answered `-ERR Protocol error:
//! ...` and the connection goes on; a request larger than `--max-request` (default 512 MiB)
//! is answered with an error and the connection closed.
//!
//! With `--tls CERT KEY` (feature `tls`; PEM files: the certificate chain, then its private key)
//! every connection is TLS (rustls), on the epoll transport only: a client has 10 s to complete
//! the handshake, and is then served as on a plain connection.
//!
//! ```text
//! $ redis-cli -p 6380 SET greeting hello
//! OK
//! $ redis-benchmark -p 6380 -t set,get -n 100000 -P 16 -q
//! $ cargo run --release --features tls --example resp_server -- --tls cert.pem key.pem
//! $ redis-cli --tls --cacert cert.pem -h localhost -p 6380 PING
//! ```
//!
//! How it is built (`examples/resp/`): the socket is a packetpipe duplex connection
//! (`io::tokio::connection_with`); requests come out of a `Frames<RespDecoder>` (a `Decoder`
//! that parses across segment boundaries in place, `resp/pipe_server.rs`); values above 2 KiB
//! are stored as the packets taken out of the socket's pooled blocks and `append`ed back on GET
//! (zero-copy in and out). `perf/examples/resp_server_tokio_util.rs` is the same server on
//! tokio-util's `Framed`.
#![forbid(unsafe_code)]

#[path = "resp/mod.rs"]
mod resp;

fn main() {
    resp::server::main(resp::server::Flavor::Pipe);
}
