#!/usr/bin/env python3
"""A RESP server against clients that send slowly.

    python3 scripts/resp_trickle.py PORT PID

PORT is a running RESP server's port (`resp_server`, `resp_server_tokio_util` or `redis-server`),
PID its process id (for /proc). Two measurements:

1. CPU: a 2 MB `MSET` of 80,000 keys sent in 250, 1,000 and 2,000 pieces, 2 ms apart: the
   server's CPU time (user + system, /proc ticks) until it answers.
2. Memory: a `SET` of a 1 MB value whose first 2,000 value bytes arrive one per millisecond: the
   server's VmRSS and VmSize growth over those 2,000 bytes (the connection is then closed).
"""
import socket
import sys
import time

port, pid = int(sys.argv[1]), sys.argv[2]


def cpu():
    fields = open(f"/proc/{pid}/stat").read().split(")")[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0


def memory():
    kb = {}
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(("VmRSS", "VmSize")):
            key, value = line.split(":")
            kb[key] = int(value.split()[0])
    return kb


def connect():
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


n = 80000
request = b"".join(
    [b"*%d\r\n$4\r\nMSET\r\n" % (1 + 2 * n)]
    + [b"$11\r\nkey%08d\r\n$1\r\nv\r\n" % i for i in range(n)]
)
for pieces in (250, 1000, 2000):
    step = (len(request) + pieces - 1) // pieces
    s = connect()
    before = cpu()
    for at in range(0, len(request), step):
        s.sendall(request[at : at + step])
        time.sleep(0.002)
    reply = s.recv(100)
    assert reply == b"+OK\r\n", reply
    print(f"MSET of {len(request)} bytes in {pieces} pieces: server CPU {cpu() - before:.2f} s")
    s.sendall(b"FLUSHALL\r\n")
    s.recv(100)
    s.close()

s = connect()
s.sendall(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1000000\r\n")
time.sleep(0.1)
before = memory()
for _ in range(2000):
    s.sendall(b"x")
    time.sleep(0.001)
time.sleep(0.1)
after = memory()
s.close()
print(
    "SET of 1 MB, 2,000 value bytes one per ms: VmRSS %+d kB, VmSize %+d kB"
    % (after["VmRSS"] - before["VmRSS"], after["VmSize"] - before["VmSize"])
)
