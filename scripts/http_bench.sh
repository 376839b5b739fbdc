#!/usr/bin/env bash
# The HTTP/1.1 keep-alive servers under wrk: examples/http_server.rs (packetpipe `Framed`) against
# the same server on tokio-util `Framed` + `BytesMut` (perf/examples/http_server_tokio_util.rs)
# and on hyper 1.x (perf/examples/http_server_hyper.rs), each on one current-thread runtime.
#
#   bash scripts/http_bench.sh [REPEATS] [SECONDS]      # defaults: 3 repeats of 5 s
#
# Two loads, `GET /` (a 13-byte body): plain (`wrk -t1 -c64 -dSECONDS`) and 16 pipelined
# requests per write (the same with `-s perf/http_pipeline.lua`). For each load and repeat the
# servers alternate; each run starts its server afresh pinned to CPU 0 (`taskset -c 0`), runs
# wrk pinned to CPU 1 for a one-second warm-up and then for SECONDS, reads the server's user and
# system CPU time from /proc/PID/stat around the measured run, and stops the server. Requests/s
# is wrk's; CPU per request is the server's ticks over wrk's request count. Prints per-run lines,
# then medians per server and the ratios of the medians to tokio-util's in this run. A run with
# socket errors or a response other than 2xx fails the script.
#
# With strace installed, one more short plain run of the packetpipe server under `strace -c -f`
# prints its system calls per request (strace slows the server, so requests batch differently
# from the timed runs: an indication, not a timing).
#
# With HTTP_TLS=1 the same loads run over TLS: the script makes a self-signed P-256 certificate
# for localhost in its temporary directory, starts the packetpipe server (built with
# `--features tokio,tls`) and the tokio-util server (over tokio-rustls, built with
# `--features tls`) with `--tls CERT KEY`, and wrk asks for `https://ADDR/` (it does not verify
# the certificate). Both sides' TLS is rustls 0.23 with its `ring` provider. hyper is not run in
# this mode.
#
#   HTTP_TLS=1 bash scripts/http_bench.sh [REPEATS] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."

repeats=${1:-3}
seconds=${2:-5}
command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install -y wrk)" >&2; exit 2; }
command -v taskset >/dev/null || { echo "taskset is not installed (util-linux)" >&2; exit 2; }
# glibc's rep-movsb threshold makes 4-64 KiB memcpy slow on these AMD machines; as .ci/run sets it.
export GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=2000000

tls=${HTTP_TLS:-0}
if [[ $tls == 1 ]]; then
    command -v openssl >/dev/null || { echo "openssl is not installed" >&2; exit 2; }
    cargo build -q --release --features tokio,tls --example http_server
    cargo build -q --release -p packetpipe-perf --features tls --example http_server_tokio_util
else
    cargo build -q --release --features tokio --example http_server
    cargo build -q --release -p packetpipe-perf --example http_server_tokio_util --example http_server_hyper
fi
bin=${CARGO_TARGET_DIR:-target}/release/examples
log=$(mktemp -d)
server=""
cleanup() {
    [[ -z $server ]] || kill "$server" 2>/dev/null || true
    rm -rf "$log"
}
trap cleanup EXIT

servers="packetpipe tokio-util hyper"
server_args=()
scheme=http
if [[ $tls == 1 ]]; then
    servers="packetpipe tokio-util"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
        -addext subjectAltName=DNS:localhost,IP:127.0.0.1 -days 2 \
        -keyout "$log/key.pem" -out "$log/cert.pem" 2>/dev/null
    server_args=(--tls "$log/cert.pem" "$log/key.pem")
    scheme=https
fi
declare -A binary=([packetpipe]=http_server [tokio-util]=http_server_tokio_util [hyper]=http_server_hyper)
ticks_per_second=$(getconf CLK_TCK)

start_server() { # name -> sets $server and $addr
    : >"$log/server"
    taskset -c 0 "$bin/${binary[$1]}" 127.0.0.1:0 "${server_args[@]}" >"$log/server" 2>&1 &
    server=$!
    addr=""
    for _ in $(seq 100); do
        addr=$(sed -n 's/^listening on \([0-9.:]*\).*/\1/p' "$log/server")
        [[ -n $addr ]] && return
        sleep 0.05
    done
    echo "the $1 server did not start:" >&2
    cat "$log/server" >&2
    exit 1
}

stop_server() {
    kill "$server"
    wait "$server" 2>/dev/null || true
    server=""
}

cpu_ticks() { # pid -> "utime stime" in clock ticks (fields 14 and 15; the name may hold spaces)
    sed 's/^.*) //' "/proc/$1/stat" | awk '{ print $12, $13 }'
}

run_wrk() { # mode seconds -> wrk's output in $log/wrk
    local script=()
    [[ $1 == pipelined ]] && script=(-s perf/http_pipeline.lua)
    taskset -c 1 wrk -t1 -c64 -d"$2"s "${script[@]}" "$scheme://$addr/" >"$log/wrk" 2>&1
    if grep -qE 'Socket errors|Non-2xx' "$log/wrk"; then
        echo "wrk saw errors against the server at $addr:" >&2
        cat "$log/wrk" >&2
        exit 1
    fi
}

: >"$log/results"
echo "mode server repeat requests/s user-us/request sys-us/request"
for mode in plain pipelined; do
    for repeat in $(seq "$repeats"); do
        for name in $servers; do
            start_server "$name"
            run_wrk "$mode" 1
            read -r user0 sys0 < <(cpu_ticks "$server")
            run_wrk "$mode" "$seconds"
            read -r user1 sys1 < <(cpu_ticks "$server")
            stop_server
            requests=$(sed -n 's/^ *\([0-9]*\) requests in.*/\1/p' "$log/wrk")
            rate=$(sed -n 's/^Requests\/sec: *\([0-9.]*\).*/\1/p' "$log/wrk")
            line=$(awk -v m="$mode" -v s="$name" -v r="$repeat" -v n="$requests" -v q="$rate" \
                -v u=$((user1 - user0)) -v k=$((sys1 - sys0)) -v t="$ticks_per_second" \
                'BEGIN { printf "%s %s %s %.0f %.3f %.3f", m, s, r, q, u * 1e6 / t / n, k * 1e6 / t / n }')
            echo "$line"
            echo "$line" >>"$log/results"
        done
    done
done

echo
over=""
[[ $tls == 1 ]] && over=", over TLS"
echo "Medians of $repeats runs of ${seconds} s (wrk -t1 -c64$over; server on CPU 0, wrk on CPU 1); ratio = server / tokio-util"
echo
echo "| load | server | requests/s | user us/request | system us/request | CPU us/request | requests/s ratio | CPU ratio |"
echo "|---|---|---:|---:|---:|---:|---:|---:|"
awk -v servers="$servers" '
    function median(list,    n, a, i, j, t) {
        n = split(list, a, " ")
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    { key = $1 "/" $2; rate[key] = rate[key] " " $4; user[key] = user[key] " " $5
      sys[key] = sys[key] " " $6; cpu[key] = cpu[key] " " ($5 + $6) }
    END {
        split("plain pipelined", modes, " "); count = split(servers, names, " ")
        for (m = 1; m <= 2; m++) {
            base = modes[m] "/tokio-util"
            for (s = 1; s <= count; s++) {
                key = modes[m] "/" names[s]
                printf "| %s | %s | %.0f | %.3f | %.3f | %.3f | %.2fx | %.2fx |\n", modes[m], names[s],
                    median(rate[key]), median(user[key]), median(sys[key]), median(cpu[key]),
                    median(rate[key]) / median(rate[base]), median(cpu[key]) / median(cpu[base])
            }
        }
    }' "$log/results"

if command -v strace >/dev/null; then
    start_server packetpipe
    strace -c -f -p "$server" -o "$log/strace" &
    tracer=$!
    sleep 0.5
    run_wrk plain 3
    kill -INT "$tracer"
    wait "$tracer" 2>/dev/null || true
    stop_server
    requests=$(sed -n 's/^ *\([0-9]*\) requests in.*/\1/p' "$log/wrk")
    echo
    echo "packetpipe server, plain$over, under strace -c -f ($requests requests): system calls per request"
    # strace -c's columns: % time, seconds, usecs/call, calls, [errors,] syscall.
    awk -v n="$requests" '$4 ~ /^[0-9]+$/ && $NF ~ /^[a-z_0-9]+$/ { printf "  %-16s %.3f\n", $NF, $4 / n }' \
        "$log/strace"
fi
