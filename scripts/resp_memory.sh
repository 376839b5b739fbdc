#!/usr/bin/env bash
# Resident memory per key: the RESP example server against redis-server, in the same run.
#
#   scripts/resp_memory.sh [KEYSPACE] [REPEATS]     # defaults: 1000000 keys, 3 repeats
#
# For each value size (1 and 100 bytes) and each server, a fresh server process is started, its
# VmRSS read (/proc/PID/status), then filled with
# `redis-benchmark -t set -r KEYSPACE -n KEYSPACE -d SIZE -P 16` (random keys out of KEYSPACE,
# so about 63% of them distinct), and VmRSS read again once DBSIZE reports the keys:
# (RSS after - RSS before) / DBSIZE is the figure. redis-server runs with persistence off
# (`--save '' --appendonly no`); its INFO memory `used_memory` per key is printed beside.
# Needs redis-server, redis-cli, redis-benchmark (Debian: redis-server redis-tools).
set -euo pipefail
cd "$(dirname "$0")/.."

keys="${1:-1000000}"
repeats="${2:-3}"
export GLIBC_TUNABLES="${GLIBC_TUNABLES:-glibc.cpu.x86_rep_movsb_threshold=2000000}"
cargo build --release --quiet --features tokio --example resp_server
server_bin="${CARGO_TARGET_DIR:-target}/release/examples/resp_server"

rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }

wait_port() {
    for _ in $(seq 200); do
        redis-cli -p "$1" PING >/dev/null 2>&1 && return 0
        sleep 0.05
    done
    echo "server on port $1 did not answer" >&2
    return 1
}

# run NAME PORT SIZE COMMAND...: prints "NAME SIZE bytes-per-key keys"
run() {
    local name="$1" port="$2" size="$3"
    shift 3
    "$@" >/dev/null 2>&1 &
    local pid=$!
    wait_port "$port"
    local before
    before="$(rss_kib "$pid")"
    redis-benchmark -p "$port" -t set -r "$keys" -n "$keys" -d "$size" -P 16 -q >/dev/null
    local dbsize
    dbsize="$(redis-cli -p "$port" DBSIZE)"
    local after
    after="$(rss_kib "$pid")"
    local extra=""
    if [[ "$name" == redis-server ]]; then
        local used
        used="$(redis-cli -p "$port" INFO memory | awk -F: '/^used_memory:/ { print $2 }' | tr -d '\r')"
        extra="$(awk -v u="$used" -v k="$dbsize" 'BEGIN { printf " (used_memory %.0f B per key)", u / k }')"
    fi
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    awk -v n="$name" -v s="$size" -v b="$before" -v a="$after" -v k="$dbsize" -v e="$extra" \
        'BEGIN { printf "%-13s %3d B values: %6.1f B per key over %d keys%s\n", n, s, (a - b) * 1024 / k, k, e }'
}

for size in 1 100; do
    for r in $(seq "$repeats"); do
        run redis-server 6391 "$size" redis-server --port 6391 --save '' --appendonly no
        run packetpipe 6392 "$size" "$server_bin" 127.0.0.1:6392
    done
done
