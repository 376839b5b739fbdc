#!/usr/bin/env python3
"""Memory under attack: resp_server and redis-server through the same rounds, RSS from /proc.

    cargo build --release --features tokio --example resp_server
    python3 scripts/memory_rounds.py [--connections 2000] [--rounds 3] [--resp-server PATH]

Each server runs as a child process on a free loopback port. A round opens N connections that
each send one byte (`*`) and then nothing, reads the server's RSS (held), closes them all, waits a
second and reads it again (closed). After the stalled rounds, N connections each announce a
100 MB bulk (`SET k <100 MB>`) and send 1 KiB of it (held, closed), then the RSS 10 s after the
last close. Prints a Markdown table (MiB); the figures go to BENCHMARKS.md ("Memory under
attack").
"""

import argparse
import os
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESP_SERVER = os.path.join(ROOT, "target", "release", "examples", "resp_server")


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


def wait_listening(port, deadline=10.0):
    end = time.time() + deadline
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def open_connections(port, n, payload):
    clients = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(payload)
        clients.append(s)
    return clients


def ping(port):
    """One good request answered: the server still serves after the round."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"*1\r\n$4\r\nPING\r\n")
        assert s.recv(16) == b"+PONG\r\n"


def held_and_closed(pid, port, n, payload):
    """N connections each send `payload` and stall: RSS while held, and 1 s after they close."""
    clients = open_connections(port, n, payload)
    time.sleep(1.0)
    held = rss_mib(pid)
    for c in clients:
        c.close()
    time.sleep(1.0)
    ping(port)
    return held, rss_mib(pid)


def rounds(pid, port, n, count):
    rows = []
    for r in range(1, count + 1):
        label = f"round {r}: {n} stalled (1 byte) held / closed"
        rows.append((label, *held_and_closed(pid, port, n, b"*")))
    partial = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$104857600\r\n" + b"x" * 1024
    label = f"{n} x `$104857600` + 1 KiB held / closed"
    rows.append((label, *held_and_closed(pid, port, n, partial)))
    time.sleep(9.0)
    rows.append(("10 s after the last close", None, rss_mib(pid)))
    return rows


def run(name, argv, port, n, count):
    env = dict(os.environ)
    env.setdefault("GLIBC_TUNABLES", "glibc.cpu.x86_rep_movsb_threshold=2000000")
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        wait_listening(port)
        start = rss_mib(child.pid)
        return start, rounds(child.pid, port, n, count)
    finally:
        child.kill()
        child.wait()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--resp-server", default=RESP_SERVER, help="the resp_server binary (another build, say)"
    )
    args = parser.parse_args()
    if not os.access(args.resp_server, os.X_OK):
        sys.exit("build it first: cargo build --release --features tokio --example resp_server")
    port = free_port()
    pp = run("resp_server", [args.resp_server, f"127.0.0.1:{port}"], port, args.connections, args.rounds)
    port = free_port()
    redis = run(
        "redis-server",
        ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"],
        port,
        args.connections,
        args.rounds,
    )

    def cell(held, closed):
        return f"{closed:.0f}" if held is None else f"{held:.0f} / {closed:.0f}"

    print("| after | resp_server (MiB) | redis-server (MiB) |")
    print("|---|---:|---:|")
    print(f"| start | {pp[0]:.0f} | {redis[0]:.0f} |")
    for (label, h1, c1), (_, h2, c2) in zip(pp[1], redis[1]):
        print(f"| {label} | {cell(h1, c1)} | {cell(h2, c2)} |")


if __name__ == "__main__":
    main()
