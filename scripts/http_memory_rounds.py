#!/usr/bin/env python3
"""Memory under attack, HTTP/1.1: the example server (examples/http_server.rs, packetpipe) and its
tokio-util twin (perf/examples/http_server_tokio_util.rs) through the same rounds, RSS from /proc.

    cargo build --release --features tokio --example http_server
    cargo build --release -p packetpipe-perf --example http_server_tokio_util
    python3 scripts/http_memory_rounds.py [--connections 2000] [--rounds 3]

Each server runs as a child process on a free loopback port (CARGO_TARGET_DIR's binaries when it
is set). A round opens N connections that each send a partial request head (the request line
and a `Host` line, no blank line) and then nothing, reads the server's RSS (held), closes them
all, waits a second, checks that a `GET /` is still answered and reads the RSS again (closed).
After the stalled rounds, N connections each send a whole head announcing a 16,000,000-byte body
(`POST /echo`, under the servers' 16 MiB limit) and 1 KiB of it (held, closed), then the RSS
10 s after the last close. Prints a Markdown table (MiB).
"""

import argparse
import os
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.path.abspath(os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target"))
SERVERS = {
    "packetpipe": os.path.join(TARGET, "release", "examples", "http_server"),
    "tokio-util": os.path.join(TARGET, "release", "examples", "http_server_tokio_util"),
}
HEAD = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n"
BODY = b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 16000000\r\n\r\n" + b"x" * 1024
RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nHello, World!"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def get(port):
    """One good request answered: the server still serves after the round."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        got = b""
        while len(got) < len(RESPONSE):
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
        assert got == RESPONSE, got


def wait_listening(port, deadline=10.0):
    end = time.time() + deadline
    while time.time() < end:
        try:
            get(port)
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing answers on {port}")


def held_and_closed(pid, port, n, payload):
    """N connections each send `payload` and stall: RSS while held, and 1 s after they close."""
    clients = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(payload)
        clients.append(s)
    time.sleep(1.0)
    held = rss_mib(pid)
    for c in clients:
        c.close()
    time.sleep(1.0)
    get(port)
    return held, rss_mib(pid)


def run(binary, n, count):
    env = dict(os.environ)
    env.setdefault("GLIBC_TUNABLES", "glibc.cpu.x86_rep_movsb_threshold=2000000")
    port = free_port()
    child = subprocess.Popen([binary, f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, env=env)
    try:
        wait_listening(port)
        start = rss_mib(child.pid)
        rows = []
        for r in range(1, count + 1):
            rows.append((f"round {r}: {n} partial heads held / closed",
                         *held_and_closed(child.pid, port, n, HEAD)))
        rows.append((f"{n} x 1 KiB of a 16,000,000-byte body held / closed",
                     *held_and_closed(child.pid, port, n, BODY)))
        time.sleep(9.0)
        rows.append(("10 s after the last close", None, rss_mib(child.pid)))
        return start, rows
    finally:
        child.kill()
        child.wait()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for binary in SERVERS.values():
        if not os.access(binary, os.X_OK):
            sys.exit(f"{binary} is missing: build it first (see the docstring)")
    results = {name: run(binary, args.connections, args.rounds) for name, binary in SERVERS.items()}

    def cell(held, closed):
        return f"{closed:.1f}" if held is None else f"{held:.1f} / {closed:.1f}"

    names = list(SERVERS)
    print("| after | " + " | ".join(f"{name} (MiB)" for name in names) + " |")
    print("|---|" + "---:|" * len(names))
    print("| start | " + " | ".join(f"{results[name][0]:.1f}" for name in names) + " |")
    for i, (label, *_) in enumerate(results[names[0]][1]):
        cells = [cell(*results[name][1][i][1:]) for name in names]
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
