#!/usr/bin/env bash
# Bytes copied per echoed payload byte in the echo servers' processes, over TCP and over TLS:
# packetpipe's (examples/echo_server.rs; over TLS its own `TlsAcceptor`) against tokio-util's
# `Framed` + `forward` (over TLS `tokio-rustls`), each alone in a process, loaded by
# perf/examples/echo_count.rs over loopback.
#
#   bash scripts/tls_copies.sh [SIZES]        # default "1024 16384 65536": payload bytes per frame
#
# How: scripts/memcpy_count.c, preloaded into the server, counts the bytes of each memcpy and
# memmove call of at least 512 bytes (payload copies; smaller ones are headers and moves of
# values). Each server runs twice, for M and 3M messages per connection (4 connections, 1 frame
# outstanding); copies per byte are (bytes(3M) - bytes(M)) / (2M x 4 x SIZE), which cancels
# start-up and the handshakes. Each echoed byte is received once and sent once, so a server that
# copies each byte once on the way in and once on the way out shows 2.00. Copies the kernel makes
# (socket buffers) and those inside the C library are not counted; neither are AEAD passes, which
# read one buffer and write another in the same pass (rustls' sealing) or the same one (in place).
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
sizes=${1:-"1024 16384 65536"}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -shared -fPIC -O2 -fno-builtin -fno-tree-loop-distribute-patterns \
    -o "$tmp/memcpy_count.so" scripts/memcpy_count.c -ldl
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
    -addext subjectAltName=DNS:localhost -addext basicConstraints=critical,CA:FALSE -days 2 \
    -keyout "$tmp/key.pem" -out "$tmp/cert.pem" 2>/dev/null
cargo build -q --release -p packetpipe-perf --features tls --example echo_count
exe=target/release/examples/echo_count
copied() { # kind tls size messages -> bytes the server copied
    local kind=$1 tls=$2 size=$3 m=$4 server addr
    local serve_tls=() client_tls=()
    if [[ $tls == tls ]]; then
        serve_tls=(--tls "$tmp/cert.pem" "$tmp/key.pem")
        client_tls=(--tls "$tmp/cert.pem")
    fi
    : >"$tmp/server"
    LD_PRELOAD="$tmp/memcpy_count.so" "$exe" serve "$kind" 127.0.0.1:0 "${serve_tls[@]}" \
        >>"$tmp/server" 2>&1 &
    server=$!
    for _ in $(seq 100); do grep -q listening "$tmp/server" && break; sleep 0.1; done
    addr=$(sed -n 's/^listening on //p' "$tmp/server")
    "$exe" client "$addr" 4 1 "$m" --size "$size" "${client_tls[@]}" >/dev/null
    kill -TERM "$server"
    wait "$server" || true
    sed -n 's/^memcpy_count: \([0-9]*\) bytes.*/\1/p' "$tmp/server"
}
echo "| transport | payload bytes | packetpipe | tokio-util \`forward\` |"
echo "|---|---:|---:|---:|"
for tls in tcp tls; do
    for size in $sizes; do
        m=$((4 * 1024 * 1024 / size))
        [[ $m -lt 100 ]] && m=100
        row="| $tls | $size |"
        for kind in packetpipe forward; do
            a=$(copied "$kind" "$tls" "$size" "$m")
            b=$(copied "$kind" "$tls" "$size" $((3 * m)))
            row+=" $(python3 -c "print(f'{($b - $a) / (2 * $m * 4 * $size):.2f}')") |"
        done
        echo "$row"
    done
done
