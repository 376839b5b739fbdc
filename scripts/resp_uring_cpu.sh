#!/usr/bin/env bash
# Server CPU per request (utime+stime from /proc/PID/stat) and requests/s for redis-benchmark
# against: the RESP example on epoll, on io_uring, and redis-server, each started fresh.
# usage: scripts/resp_uring_cpu.sh EXAMPLE_BIN N "redis-benchmark args"
set -euo pipefail
bin=$1; n=$2; shift 2; args="$*"
tck=$(getconf CLK_TCK)
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
run() {
  local name=$1; shift
  "$@" >/dev/null 2>&1 & local pid=$!
  sleep 0.5
  local before=$(cpu $pid)
  local out=$(redis-benchmark -p $port -n $n $args -q 2>/dev/null | tr '\r' '\n' | grep "requests per second" | tail -1)
  local after=$(cpu $pid)
  kill $pid; wait $pid 2>/dev/null || true
  local rps=$(echo "$out" | awk '{print $2}')
  python3 -c "print(f'$name: {float(\"$rps\"):>10.0f} req/s  server CPU {($after-$before)/$tck/$n*1e6:.2f} us/req')"
}
port=6401; run epoll env GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=2000000 $bin 127.0.0.1:$port
port=6402; run uring env GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=2000000 $bin 127.0.0.1:$port --transport uring
port=6403; run redis-server redis-server --port $port --save "" --appendonly no
