//! The RESP servers of `examples/resp/` with real clients nobody here wrote: `redis-cli` round
//! trips, `redis-benchmark` with pipelining (every request answered) and with 1 MB values, replies
//! byte for byte the same as `redis-server`'s, garbage answered with `-ERR` on a connection that
//! stays up, and a request above the maximum closing its connection. Both servers (packetpipe and
//! tokio-util) run in-process on a free loopback port, packetpipe's also on the io_uring driver
//! (feature `io-uring`) for the real-client tests; `redis-server` runs as a child process on
//! another.
//!
//! Needs Debian's `redis-tools` and `redis-server` (`.ci/run` installs them): without the
//! binaries these tests fail and say so. Every child process and socket read has a deadline.

#[path = "../../examples/resp/mod.rs"]
mod resp;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use resp::parse::encode_request;
use resp::server::{Flavor, ServerHandle};
use resp::Config;

const FLAVORS: [Flavor; 2] = [Flavor::Pipe, Flavor::TokioUtil];

/// The packetpipe server's transports: tokio's epoll reactor, and (feature `io-uring`) the
/// io_uring driver. Where io_uring is unavailable the server falls back to epoll and says so;
/// under `PACKETPIPE_REQUIRE_URING` (CI) that is a failure instead.
fn pipe_transports() -> Vec<Config> {
    let mut configs = vec![Config::default()];
    // Under valgrind (scripts/valgrind.sh) the example's driver waits unbounded for completions,
    // which valgrind's one-thread-at-a-time scheduling can stall: the native run covers it.
    #[cfg(all(feature = "io-uring", target_os = "linux"))]
    if std::env::var_os("PACKETPIPE_UNDER_VALGRIND").is_none() {
        match packetpipe::io::uring::Driver::new() {
            Ok(_) => configs.push(Config {
                uring: true,
                ..Config::default()
            }),
            Err(e) if std::env::var_os("PACKETPIPE_REQUIRE_URING").is_some() => {
                panic!("io_uring is required (PACKETPIPE_REQUIRE_URING) but unavailable: {e}")
            }
            Err(e) => eprintln!("io_uring unavailable ({e}): the io_uring server is not tested"),
        }
    }
    configs
}

/// Every server: both flavors on epoll, and the packetpipe server on io_uring.
fn servers() -> Vec<(Flavor, Config)> {
    let mut servers: Vec<_> = FLAVORS.iter().map(|&f| (f, Config::default())).collect();
    servers.extend(
        pipe_transports()
            .into_iter()
            .skip(1)
            .map(|c| (Flavor::Pipe, c)),
    );
    servers
}

fn require(binary: &str) {
    let found = Command::new(binary)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    assert!(
        found,
        "`{binary}` is missing: install Debian's redis-tools and redis-server \
         (apt-get install -y redis-tools redis-server) to run the RESP client tests"
    );
}

/// Run `command` to completion within `limit`, killing it past that.
fn run_bounded(mut command: Command, limit: Duration) -> Output {
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn a client");
    let id = child.id();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let output = child.wait_with_output();
        let _ = done_tx.send(());
        output
    });
    if done_rx.recv_timeout(limit).is_err() {
        // Past the deadline: kill it (by its id; the waiter thread owns the handle).
        let _ = Command::new("kill").arg("-9").arg(id.to_string()).status();
        let output = waiter.join().unwrap().unwrap();
        panic!(
            "{command:?} did not finish within {limit:?}; output so far:\n{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    waiter.join().unwrap().expect("the client ran")
}

fn redis_cli(addr: SocketAddr, args: &[&str]) -> String {
    let mut command = Command::new("redis-cli");
    command
        .args(["-h", "127.0.0.1", "-p", &addr.port().to_string()])
        .args(args);
    let output = run_bounded(command, Duration::from_secs(20));
    assert!(output.status.success(), "redis-cli {args:?}: {output:?}");
    String::from_utf8(output.stdout).unwrap()
}

/// A raw client: writes requests, reads exactly the replies it expects.
struct Client(TcpStream);

impl Client {
    fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        Client(stream)
    }

    fn send(&mut self, bytes: &[u8]) {
        self.0.write_all(bytes).unwrap();
    }

    /// Read `n` complete replies (simple, error, integer, bulk, or arrays of them), as bytes.
    fn replies(&mut self, n: usize) -> Vec<u8> {
        let mut buf = Vec::new();
        loop {
            if let Some(end) = complete_replies(&buf, n) {
                assert_eq!(end, buf.len(), "more bytes than {n} replies: {buf:?}");
                return buf;
            }
            let mut chunk = [0u8; 64 * 1024];
            let read = self.0.read(&mut chunk).expect("a reply within 20 s");
            assert!(
                read > 0,
                "connection closed after {:?}",
                String::from_utf8_lossy(&buf)
            );
            buf.extend_from_slice(&chunk[..read]);
        }
    }

    /// Everything until the server closes the connection.
    fn until_closed(&mut self) -> Vec<u8> {
        let mut buf = Vec::new();
        self.0
            .read_to_end(&mut buf)
            .expect("the server closes within 20 s");
        buf
    }
}

/// Where `n` complete replies end in `buf`, if they are all there.
fn complete_replies(buf: &[u8], n: usize) -> Option<usize> {
    let mut pos = 0;
    for _ in 0..n {
        pos = reply_end(buf, pos)?;
    }
    Some(pos)
}

fn reply_end(buf: &[u8], pos: usize) -> Option<usize> {
    let line_end = pos + buf.get(pos..)?.windows(2).position(|w| w == b"\r\n")?;
    let header = std::str::from_utf8(&buf[pos + 1..line_end]).ok()?;
    let after = line_end + 2;
    match buf[pos] {
        b'+' | b'-' | b':' => Some(after),
        b'$' => match header.parse::<i64>().ok()? {
            -1 => Some(after),
            len => {
                let end = after + len as usize + 2;
                (buf.len() >= end).then_some(end)
            }
        },
        b'*' => {
            let mut at = after;
            for _ in 0..header.parse::<i64>().ok()?.max(0) {
                at = reply_end(buf, at)?;
            }
            Some(at)
        }
        other => panic!("not a RESP reply: {:?}", other as char),
    }
}

/// `redis-server` on a free loopback port, without persistence; killed on drop.
struct RedisServer {
    addr: SocketAddr,
    child: Child,
    _dir: TempDir,
}

impl RedisServer {
    fn start() -> RedisServer {
        require("redis-server");
        let port = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap().port()
        };
        let dir = TempDir::new("redis-server");
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(&dir.0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(addr).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        RedisServer {
            addr,
            child,
            _dir: dir,
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn redis_cli_round_trips() {
    require("redis-cli");
    for (flavor, config) in servers() {
        let server = ServerHandle::start(flavor, config);
        let cli = |args: &[&str]| redis_cli(server.addr, args);
        assert_eq!(cli(&["PING"]), "PONG\n", "{flavor:?} {config:?}");
        assert_eq!(cli(&["SET", "greeting", "hello world"]), "OK\n");
        assert_eq!(cli(&["GET", "greeting"]), "hello world\n");
        assert_eq!(cli(&["INCR", "counter"]), "1\n");
        assert_eq!(cli(&["INCR", "counter"]), "2\n");
        assert_eq!(
            cli(&["MGET", "greeting", "counter", "missing"]),
            "hello world\n2\n\n"
        );
        assert_eq!(cli(&["EXISTS", "greeting", "missing"]), "1\n");
        assert_eq!(cli(&["DEL", "greeting", "counter", "missing"]), "2\n");
        assert_eq!(cli(&["GET", "greeting"]), "\n");
        assert_eq!(
            cli(&["INCR", "a", "b"]),
            "ERR wrong number of arguments for 'incr' command\n\n"
        );
        // Interactive-style: commands on stdin, after redis-cli's own COMMAND DOCS.
        let mut command = Command::new("redis-cli");
        command.args(["-h", "127.0.0.1", "-p", &server.addr.port().to_string()]);
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"SET k v\nGET k\nECHO \"two words\"\n")
            .unwrap();
        let output = child.wait_with_output().unwrap();
        assert!(output.status.success(), "{output:?}");
        assert_eq!(
            String::from_utf8_lossy(&output.stdout),
            "OK\nv\ntwo words\n"
        );
    }
}

#[test]
fn redis_benchmark_gets_every_request_answered() {
    require("redis-benchmark");
    for config in pipe_transports() {
        redis_benchmark_answered(config);
    }
}

fn redis_benchmark_answered(config: Config) {
    let server = ServerHandle::start(Flavor::Pipe, config);
    // Requests per command (fewer under valgrind: `scripts/valgrind.sh` sets it).
    let requests: u64 = std::env::var("RESP_BENCHMARK_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50_000);
    let requests_arg = requests.to_string();
    let mut command = Command::new("redis-benchmark");
    command
        .args(["-h", "127.0.0.1", "-p", &server.addr.port().to_string()])
        .args([
            "-t",
            "ping,set,get,incr,mset",
            "-n",
            &requests_arg,
            "-P",
            "16",
            "-q",
        ]);
    let output = run_bounded(command, Duration::from_secs(120));
    let text = String::from_utf8_lossy(&output.stdout).replace('\r', "\n");
    assert!(output.status.success(), "{text}\n{output:?}");
    // redis-benchmark exits at the first error reply, and finishes a test only once every
    // request of it is answered.
    for test in [
        "PING_INLINE",
        "PING_MBULK",
        "SET",
        "GET",
        "INCR",
        "MSET (10 keys)",
    ] {
        let line = format!("\n{test}: ");
        assert!(
            text.contains(&line) && text.contains("requests per second"),
            "no result for {test}: {text}"
        );
    }
    assert!(!text.contains("rror"), "{text}");
    // Six tests of `requests` requests, and the two CONFIG GETs redis-benchmark starts with.
    assert_eq!(server.requests(), 6 * requests + 2);
}

#[test]
fn redis_benchmark_with_one_megabyte_values() {
    require("redis-benchmark");
    for config in pipe_transports() {
        one_megabyte_values(config);
    }
}

fn one_megabyte_values(config: Config) {
    let server = ServerHandle::start(Flavor::Pipe, config);
    let mut command = Command::new("redis-benchmark");
    command
        .args(["-h", "127.0.0.1", "-p", &server.addr.port().to_string()])
        .args(["-t", "set,get", "-d", "1000000", "-n", "200", "-q"]);
    let output = run_bounded(command, Duration::from_secs(120));
    let text = String::from_utf8_lossy(&output.stdout).replace('\r', "\n");
    assert!(output.status.success(), "{text}\n{output:?}");
    assert!(
        text.contains("\nSET: ") && text.contains("\nGET: "),
        "{text}"
    );
    assert_eq!(server.requests(), 2 * 200 + 2);
    // The stored value comes back whole (it went into the store as the socket's packets):
    // redis-benchmark's (random bytes) by its length, a patterned one byte for byte.
    let mut client = Client::connect(server.addr);
    client.send(&encode_request(&[b"GET", b"key:__rand_int__"]));
    let reply = client.replies(1);
    assert!(reply.starts_with(b"$1000000\r\n") && reply.len() == 1_000_012);
    let value: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    let request = encode_request(&[b"SET", b"pattern", &value]);
    for piece in request.chunks(100_003) {
        client.send(piece); // arrives in pieces, across segments
    }
    assert_eq!(client.replies(1), b"+OK\r\n");
    client.send(&encode_request(&[b"GET", b"pattern"]));
    let mut expected = b"$1000000\r\n".to_vec();
    expected.extend_from_slice(&value);
    expected.extend_from_slice(b"\r\n");
    assert!(
        client.replies(1) == expected,
        "the 1 MB value came back changed"
    );
}

/// Requests whose replies `redis-server` 7.0 gives byte for byte as the servers here do.
fn differential_script() -> Vec<Vec<u8>> {
    let big = vec![b'z'; 100_000];
    // Between the copy-out size (1 KiB) and the copy threshold (2 KiB): kept as a copy.
    let mid: Vec<u8> = (0..1500u32).map(|i| b'a' + (i % 26) as u8).collect();
    let requests: Vec<Vec<&[u8]>> = vec![
        vec![b"PING"],
        vec![b"PING", b"hello"],
        vec![b"ECHO", b"binary\r\n\0value"],
        vec![b"SET", b"k", b"v"],
        vec![b"GET", b"k"],
        vec![b"GET", b"missing"],
        vec![b"SET", b"k", b"v2", b"NX"],
        vec![b"SET", b"k", b"v3", b"XX"],
        vec![b"SET", b"new", b"v", b"XX"],
        vec![b"SET", b"k", b"v", b"EX", b"100"],
        vec![b"SET", b"k", b"v", b"PX", b"0"],
        vec![b"SET", b"k", b"v", b"EX", b"abc"],
        vec![b"SET", b"k", b"v", b"NX", b"XX"],
        vec![b"SET", b"k", b"v", b"KEEPTTL"],
        vec![b"SET", b"k"],
        vec![b"SET", b"big", &big],
        vec![b"GET", b"big"],
        vec![b"SET", b"mid", &mid],
        vec![b"GET", b"mid"],
        vec![b"SET", b"mid", &mid[..37]],
        vec![b"GET", b"mid"],
        vec![b"MGET", b"k", b"big", b"missing"],
        vec![b"MSET", b"a", b"1", b"b", b"2"],
        vec![b"MSET", b"a", b"1", b"b"],
        vec![b"INCR", b"a"],
        vec![b"INCR", b"k"],
        vec![b"SET", b"max", b"9223372036854775807"],
        vec![b"INCR", b"max"],
        vec![b"SET", b"lead", b"007"],
        vec![b"INCR", b"lead"],
        vec![b"EXISTS", b"a", b"a", b"missing"],
        vec![b"DEL", b"a", b"b", b"missing"],
        vec![b"get", b"k"],
        vec![b"NOSUCH", b"arg1", b"arg2"],
        vec![b"GET"],
        vec![b"CONFIG", b"GET", b"save"],
        vec![b"CONFIG", b"GET", b"appendonly"],
        vec![b"SELECT", b"0"],
        vec![b"FLUSHALL"],
        vec![b"GET", b"k"],
        vec![b"DEL", b"big"],
    ];
    requests.iter().map(|args| encode_request(args)).collect()
}

#[test]
fn same_replies_as_redis_server() {
    let redis = RedisServer::start();
    let script = differential_script();
    let run = |addr: SocketAddr, pipelined: bool| -> Vec<Vec<u8>> {
        let mut client = Client::connect(addr);
        if pipelined {
            client.send(&script.concat());
            let all = client.replies(script.len());
            // Split the replies again, one per request.
            let mut out = Vec::new();
            let mut pos = 0;
            for _ in 0..script.len() {
                let end = reply_end(&all, pos).unwrap();
                out.push(all[pos..end].to_vec());
                pos = end;
            }
            out
        } else {
            script
                .iter()
                .map(|request| {
                    client.send(request);
                    client.replies(1)
                })
                .collect()
        }
    };
    let expected = run(redis.addr, false);
    for flavor in FLAVORS {
        for pipelined in [false, true] {
            let server = ServerHandle::start(flavor, Config::default());
            let got = run(server.addr, pipelined);
            for (i, (want, have)) in expected.iter().zip(&got).enumerate() {
                assert!(
                    want == have,
                    "{flavor:?} (pipelined: {pipelined}), request {i} {:?}: redis-server {:?}, here {:?}",
                    String::from_utf8_lossy(&script[i]),
                    String::from_utf8_lossy(&want[..want.len().min(200)]),
                    String::from_utf8_lossy(&have[..have.len().min(200)]),
                );
            }
        }
    }
}

#[test]
fn garbage_gets_err_and_the_server_stays_up() {
    for flavor in FLAVORS {
        let server = ServerHandle::start(flavor, Config::default());
        let mut client = Client::connect(server.addr);
        client.send(b"*x\r\n*2\r\n$3\r\nGET\r\nfoo\r\n*1\r\n$3\r\nabcdef\r\n$5\r\n*1\r\n$-7x\r\n");
        assert_eq!(
            String::from_utf8(client.replies(5)).unwrap(),
            "-ERR Protocol error: invalid multibulk length\r\n\
             -ERR Protocol error: expected '$', got 'f'\r\n\
             -ERR Protocol error: expected CRLF after bulk data\r\n\
             -ERR unknown command '$5', with args beginning with: \r\n\
             -ERR Protocol error: invalid bulk length\r\n",
            "{flavor:?}"
        );
        // Random binary lines: each an unknown inline command, each answered with an error.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut random = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut lines = Vec::new();
        for _ in 0..200 {
            lines.push(b'a' + (random() % 26) as u8);
            for _ in 0..random() % 300 {
                match (random() % 256) as u8 {
                    b'\n' => {}
                    byte => lines.push(byte),
                }
            }
            lines.push(b'\n');
        }
        client.send(&lines);
        let replies = client.replies(200);
        let errors = replies
            .split(|&b| b == b'\n')
            .filter(|line| line.starts_with(b"-ERR unknown command"))
            .count();
        assert_eq!(errors, 200, "{flavor:?}");
        // The same connection, and a new one, still work.
        client.send(&encode_request(&[b"PING"]));
        assert_eq!(client.replies(1), b"+PONG\r\n");
        let mut other = Client::connect(server.addr);
        other.send(b"PING\r\n");
        assert_eq!(other.replies(1), b"+PONG\r\n");
    }
}

#[test]
fn a_request_above_the_maximum_closes_the_connection() {
    for flavor in FLAVORS {
        let server = ServerHandle::start(
            flavor,
            Config {
                max_request: 1 << 20,
                ..Config::default()
            },
        );
        let mut client = Client::connect(server.addr);
        client.send(b"*1\r\n$4\r\nPING\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2000000\r\n");
        assert_eq!(
            client.until_closed(),
            b"+PONG\r\n-ERR Protocol error: invalid bulk length\r\n",
            "{flavor:?}"
        );
        // One byte more than an inline request may hold (all of it read by the server, so the
        // close is a clean one).
        let mut client = Client::connect(server.addr);
        client.send(&vec![b'a'; resp::parse::MAX_INLINE + 1]);
        assert_eq!(
            client.until_closed(),
            b"-ERR Protocol error: too big inline request\r\n",
            "{flavor:?}"
        );
        // The server goes on.
        let mut other = Client::connect(server.addr);
        other.send(b"PING\r\n");
        assert_eq!(other.replies(1), b"+PONG\r\n");
    }
}

#[test]
fn quit_answers_then_closes() {
    for flavor in FLAVORS {
        let server = ServerHandle::start(flavor, Config::default());
        let mut client = Client::connect(server.addr);
        client.send(b"PING\r\nQUIT\r\nPING\r\n");
        assert_eq!(client.until_closed(), b"+PONG\r\n+OK\r\n", "{flavor:?}");
    }
}
