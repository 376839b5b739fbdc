#!/usr/bin/env bash
# User-space instructions per request of a RESP server binary under valgrind's callgrind, loaded
# by redis-benchmark over loopback: each binary runs twice, for N and 3 x N requests, and
# instructions per request are (count(3N) - count(N)) / 2N, which cancels start-up and teardown.
# Kernel work is not counted. Counts depend on how requests batch into receives (valgrind's
# slowdown changes that): compare binaries of one run.
#
#   bash scripts/uring_instructions.sh N "redis-benchmark args" BIN [ARGS...] [-- BIN2 [ARGS...]]...
#   e.g. bash scripts/uring_instructions.sh 20000 "-t get -P 16 -c 4" \
#          target/release/examples/resp_server --transport uring
set -euo pipefail
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 2; }
n=$1; bench=$2; shift 2
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT
port=6450
count() { # requests binary args... -> instructions of the server process
    local m=$1; shift
    port=$((port + 1))
    # Emptied before the server starts (its redirection runs in the background): the wait below
    # must not read the previous run's output.
    : >"$log/server"
    GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=2000000 valgrind --tool=callgrind \
        --callgrind-out-file=/dev/null "$@" 127.0.0.1:$port >>"$log/server" 2>&1 &
    local server=$!
    for _ in $(seq 300); do grep -q listening "$log/server" && break; sleep 0.1; done
    # shellcheck disable=SC2086 # the benchmark's arguments are split on purpose
    redis-benchmark -p $port -n "$m" $bench -q >"$log/bench" 2>&1 || {
        kill -9 "$server"; cat "$log/bench" >&2; exit 1; }
    kill -TERM "$server"
    # Valgrind holds signals while the driver waits in io_uring_enter: connections end the wait.
    while kill -0 "$server" 2>/dev/null; do
        timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port" 2>/dev/null || true
        sleep 0.2
    done
    wait "$server" 2>/dev/null || true
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$log/server"
}
while (($#)); do
    cmd=()
    while (($#)) && [[ $1 != -- ]]; do cmd+=("$1"); shift; done
    (($#)) && shift
    low=$(count "$n" "${cmd[@]}")
    high=$(count $((3 * n)) "${cmd[@]}")
    printf '%-60s %8d instructions/request\n' "${cmd[*]}" $(((high - low) / (2 * n)))
done
