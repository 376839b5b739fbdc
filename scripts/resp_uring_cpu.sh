#!/usr/bin/env bash
# Server CPU per request (utime+stime from /proc/PID/stat, and the user part) and requests/s for
# redis-benchmark against: the RESP example on epoll, on io_uring, and redis-server, each started
# fresh, one after the other.
# usage: scripts/resp_uring_cpu.sh EXAMPLE_BIN N "redis-benchmark args"
# URING_ALSO="LABEL=BIN [ARGS...];..." runs more io_uring servers in the same run (another build,
# or other driver settings), each as `BIN ARGS ADDR --transport uring`.
set -euo pipefail
bin=$1; n=$2; shift 2; args="$*"
tck=$(getconf CLK_TCK)
cpu() { awk '{print $14+$15, $14}' /proc/$1/stat; }
port=6400
run() {
  local name=$1; shift
  port=$((port + 1))
  "$@" >/dev/null 2>&1 & local pid=$!
  sleep 0.5
  local before after
  before=$(cpu $pid)
  # shellcheck disable=SC2086 # the benchmark's arguments are split on purpose
  local out=$(redis-benchmark -p $port -n $n $args -q 2>/dev/null | tr '\r' '\n' | grep "requests per second" | tail -1)
  after=$(cpu $pid)
  kill $pid; wait $pid 2>/dev/null || true
  local rps=$(echo "$out" | awk '{print $2}')
  python3 -c "
b, a = '$before'.split(), '$after'.split()
print(f'$name: {float(\"$rps\"):>10.0f} req/s  server CPU {(int(a[0])-int(b[0]))/$tck/$n*1e6:.2f} us/req (user {(int(a[1])-int(b[1]))/$tck/$n*1e6:.2f})')"
}
tune=GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=2000000
run epoll env $tune "$bin" 127.0.0.1:$((port + 1))
run uring env $tune "$bin" 127.0.0.1:$((port + 1)) --transport uring
IFS=';' read -ra also <<<"${URING_ALSO:-}"
for spec in "${also[@]}"; do
  [[ -z $spec ]] && continue
  # shellcheck disable=SC2086 # BIN and its arguments are split on purpose
  run "${spec%%=*}" env $tune ${spec#*=} 127.0.0.1:$((port + 1)) --transport uring
done
run redis-server redis-server --port $((port + 1)) --save "" --appendonly no
