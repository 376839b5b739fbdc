#!/usr/bin/env bash
# End-to-end guard on whole servers: user-space instructions per message of packetpipe's servers
# under valgrind's callgrind, each beside its peer (the same server on tokio-util or std) measured
# in the same run, compared with the committed budget (scripts/e2e_budget.txt). The part guard
# (scripts/instructions.sh) holds each hot path to its budget; this one holds the whole, so a
# regression spread thin over parts, or in the glue between them, cannot creep in.
#
#   bash scripts/e2e_instructions.sh            # measure, print the table, fail on a rise over 5%
#   bash scripts/e2e_instructions.sh --update   # measure and rewrite the budget file
#
# Cases (packetpipe against its peer):
#   echo-16x1     echo, 16 connections, 1 frame of 64 bytes outstanding on each:
#                 examples/echo_server.rs against tokio-util `Framed` + `forward`
#                 (perf/examples/echo_count.rs, as scripts/echo_instructions.sh);
#   echo-16x16    the same with 16 frames outstanding on each connection;
#   rpc-32        blocking length-prefixed RPC, one connection, 32-byte payloads: the blocking
#                 connection against std `BufReader`/`BufWriter` (perf/examples/rpc_blocking.rs's
#                 servers, run by perf/examples/e2e_count.rs);
#   resp-get-P16  `redis-benchmark -t get -P 16 -c 4`: examples/resp_server.rs (the inline
#                 transport, tokio's epoll reactor) against perf/examples/resp_server_tokio_util.rs;
#   lines-4x64    line servers, 4 connections sending 32-byte lines in batches of 64: the `loop`
#                 shape of perf/examples/lines_load.rs, packetpipe `Framed` + `Lines` against
#                 tokio-util `Framed` + `LinesCodec` (run by perf/examples/e2e_count.rs);
#   http-plain-8  HTTP/1.1 `GET /`, 8 keep-alive connections, one request at a time on each:
#                 examples/http_server.rs against tokio-util `Framed` + `BytesMut` with the same
#                 httparse decoder (perf/examples/http_server_tokio_util.rs), loaded by
#                 perf/examples/http_count.rs (every response checked byte for byte);
#   http-P16-8    the same with 16 pipelined requests per write;
#   https-plain-8 http-plain-8 over TLS: the same two servers with `--tls CERT KEY` (the packetpipe
#                 example built with `--features tokio,tls`: records decrypted and encrypted in
#                 place in pooled blocks; the tokio-util twin over tokio-rustls, both rustls 0.23
#                 with its `ring` provider, ALPN `http/1.1`), a self-signed P-256 certificate the
#                 script makes with openssl; `http_count --tls` (rustls' blocking client) does
#                 one full handshake per connection, then the same requests and checks. The
#                 handshakes are the same in the N and 3N runs, so the differencing cancels them:
#                 the count is of the records, the HTTP and the I/O per request;
#   https-P16-8   the same with 16 pipelined requests per write;
#   uring-16x1    echo-16x1's load on the io_uring driver (examples/echo_server.rs --transport uring,
#                 built with `io-uring`) against the io_uring floor (perf/examples/uring_floor.rs:
#                 the same ring set-up, buffers and system calls with no pipe and no codec), both
#                 with PACKETPIPE_UNDER_VALGRIND=1 (their waits bounded to 1 ms: valgrind holds
#                 the wakes and signals of a thread waiting in io_uring_enter); needs a kernel
#                 with io_uring;
#   uring-16x16   the same with 16 frames outstanding on each connection.
#
# E2E_HYPER=1 also counts the same HTTP server on hyper 1.x (perf/examples/http_server_hyper.rs)
# in the http-* cases and prints it below the table (not held to a budget, not written).
#
# How: each server runs alone in a process under callgrind (whole process, every thread; start-up
# included), its client natively in another process (the client's instructions are not counted),
# over loopback, once with N and once with 3N messages per connection; instructions per message
# are (count(3N) - count(N)) / (2N x connections), which cancels start-up, accepting and teardown.
# The servers that serve until killed get SIGTERM once their client has its last reply, and
# callgrind reports the count at the signal. Kernel work (the system calls) is not counted.
#
# Counts do not depend on the machine's load as long as the client keeps up: under valgrind a
# server is ~50x slower than its native client, so each wake of a server finds the same batch
# of requests waiting (every connection's next frame, a whole pipelined batch) run after run. Run
# to run they agree within 0.3% (the peers' within 1%), also at a load average of 6 on 2 cores. They do depend on the build (rustc, the dependencies in Cargo.lock), on the CPU (glibc
# picks its memcpy by the CPU's features) and on valgrind's slowdown (how requests batch): compare
# a run's two servers, or runs of one build on one kind of machine at these settings. A deliberate
# rise: run with --update and commit the new budget together with the change, saying why in the
# commit message. The peers' counts are in the budget too, so that the ratio is on record; they are
# printed with their change and never fail the guard.
#
# Takes about 80 s on a 2-core machine for the first five cases (20 runs under callgrind, 2-12 s
# each), about 30 s more for the two HTTP cases (8 runs) and 18-22 s more for the two HTTPS cases
# (8 runs; the same N as the HTTP cases), about 40 s more for the two io_uring cases (8 runs),
# after building packetpipe and the programs (the TLS programs are a second build of packetpipe,
# with ring and rustls, the io_uring programs a third): about a minute after .ci/run's "benches
# build" step, a few minutes from nothing.
set -euo pipefail
shopt -s inherit_errexit # a failed client inside $(count ...) stops the script
cd "$(dirname "$0")/.."

command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install -y valgrind)" >&2; exit 2; }
command -v redis-benchmark >/dev/null || { echo "redis-benchmark is not installed (apt-get install -y redis-tools)" >&2; exit 2; }
command -v openssl >/dev/null || { echo "openssl is not installed (apt-get install -y openssl)" >&2; exit 2; }
# As .ci/run sets it (glibc's rep-movsb threshold makes 4-64 KiB memcpy ~40x slow on these AMD
# machines): it picks memcpy's code path, so the counts depend on it.
export GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=2000000

budget_file=scripts/e2e_budget.txt
tolerance_percent=5
update=0
case "${1:-}" in
    --update) update=1 ;;
    "") ;;
    *) echo "usage: bash scripts/e2e_instructions.sh [--update]" >&2; exit 2 ;;
esac
all_cases="echo-16x1 echo-16x16 rpc-32 resp-get-P16 lines-4x64 http-plain-8 http-P16-8 https-plain-8 https-P16-8
    uring-16x1 uring-16x16"
# E2E_CASES="rpc-32 lines-4x64": measure and check those only (to look into one; with --update,
# only their rows of the budget are rewritten, the others' kept as they are).
cases=${E2E_CASES:-$all_cases}

# One build of all four programs, so that packetpipe's examples and the peers link the same
# dependencies built with the same features: the bench profile (release's, with line tables) over
# the whole workspace, as `cargo bench --workspace` builds, so that after .ci/run's "benches build"
# step only packetpipe and these programs are compiled. (The bench profile's output is under
# target/release.) One codegen unit for packetpipe and the programs: with 16 (the default), how
# the generic code instantiated in a program (tokio-util's `Framed` as much as packetpipe's) is
# split into units, and so inlined, changes with any change to packetpipe, and moved the peers'
# unchanged servers by up to 4% between two commits of packetpipe; with one unit, 0.2%.
#
# The https-* cases' three programs are built the same way with the `tls` features (packetpipe's
# and packetpipe-perf's), first, and copied aside: the build without them then puts the plain
# programs back under the same names, so the other cases run what they ran without TLS built in.
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT
build() { # extra features, programs
    local features=$1
    shift
    cargo build -q --profile bench --workspace --features "packetpipe/tokio$features" \
        --config 'profile.bench.package.packetpipe.codegen-units=1' \
        --config 'profile.bench.package.packetpipe-perf.codegen-units=1' "$@"
}
bin=${CARGO_TARGET_DIR:-target}/release/examples
tls_bin=$log/tls
build ,packetpipe/tls,packetpipe-perf/tls --example http_server --example http_server_tokio_util --example http_count
mkdir "$tls_bin"
cp "$bin/http_server" "$bin/http_server_tokio_util" "$bin/http_count" "$tls_bin/"
# The uring-* cases' two programs, the same way with the `io-uring` features.
uring_bin=$log/uring
build ,packetpipe/io-uring,packetpipe-perf/io-uring --example echo_server --example uring_floor
mkdir "$uring_bin"
cp "$bin/echo_server" "$bin/uring_floor" "$uring_bin/"
build "" --example resp_server --example resp_server_tokio_util --example echo_count --example e2e_count \
    --example http_server --example http_server_tokio_util --example http_server_hyper --example http_count
# The https-* cases' certificate (as scripts/http_bench.sh makes it).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
    -addext subjectAltName=DNS:localhost,IP:127.0.0.1 -days 2 \
    -keyout "$log/key.pem" -out "$log/cert.pem" 2>/dev/null

declare -A messages=( # N, per connection (redis-benchmark: in all)
    [echo-16x1]=3000 [echo-16x16]=12000 [rpc-32]=20000 [resp-get-P16]=128000 [lines-4x64]=20480
    [http-plain-8]=1500 [http-P16-8]=4800 [https-plain-8]=1500 [https-P16-8]=4800
    [uring-16x1]=3000 [uring-16x16]=12000)
declare -A connections=([echo-16x1]=16 [echo-16x16]=16 [rpc-32]=1 [resp-get-P16]=1 [lines-4x64]=4
    [http-plain-8]=8 [http-P16-8]=8 [https-plain-8]=8 [https-P16-8]=8 [uring-16x1]=16 [uring-16x16]=16)
declare -A peer_name=([echo-16x1]="tokio-util forward" [echo-16x16]="tokio-util forward"
    [rpc-32]="std BufReader/BufWriter" [resp-get-P16]="tokio-util Framed" [lines-4x64]="tokio-util LinesCodec"
    [http-plain-8]="tokio-util Framed + BytesMut" [http-P16-8]="tokio-util Framed + BytesMut"
    [https-plain-8]="tokio-rustls + tokio-util Framed" [https-P16-8]="tokio-rustls + tokio-util Framed"
    [uring-16x1]="io_uring floor" [uring-16x16]="io_uring floor")

server_command() { # case side -> the server's command line, less its address
    case "$1/$2" in
        echo-*/packetpipe) echo "$bin/echo_count serve packetpipe" ;;
        echo-*/peer) echo "$bin/echo_count serve forward" ;;
        rpc-*/packetpipe) echo "$bin/e2e_count serve rpc-packetpipe" ;;
        rpc-*/peer) echo "$bin/e2e_count serve rpc-std" ;;
        resp-*/packetpipe) echo "$bin/resp_server" ;;
        resp-*/peer) echo "$bin/resp_server_tokio_util" ;;
        lines-*/packetpipe) echo "$bin/e2e_count serve lines-packetpipe" ;;
        lines-*/peer) echo "$bin/e2e_count serve lines-tokio-util" ;;
        http-*/packetpipe) echo "$bin/http_server" ;;
        http-*/peer) echo "$bin/http_server_tokio_util" ;;
        http-*/hyper) echo "$bin/http_server_hyper" ;;
        https-*/packetpipe) echo "$tls_bin/http_server --tls $log/cert.pem $log/key.pem" ;;
        https-*/peer) echo "$tls_bin/http_server_tokio_util --tls $log/cert.pem $log/key.pem" ;;
        uring-*/packetpipe) echo "$uring_bin/echo_server --transport uring" ;;
        uring-*/peer) echo "$uring_bin/uring_floor" ;;
    esac
}

client() { # case address messages: load the server, return once every reply is in
    local addr=$2 m=$3
    # A bound on each client: a server that stops answering fails the script instead of hanging it.
    case "$1" in
        echo-16x1 | uring-16x1) timeout 300 "$bin/echo_count" client "$addr" 16 1 "$m" ;;
        echo-16x16 | uring-16x16) timeout 300 "$bin/echo_count" client "$addr" 16 16 "$m" ;;
        rpc-32) timeout 300 "$bin/e2e_count" rpc "$addr" "$m" 32 ;;
        resp-get-P16)
            # redis-benchmark can end without having made its requests (its summary line is missing).
            if ! timeout 300 redis-benchmark -h 127.0.0.1 -p "${addr##*:}" -n "$m" -t get -P 16 -c 4 -q \
                >"$log/bench" 2>&1 || ! grep -q 'GET: .*requests per second' "$log/bench"; then
                cat "$log/bench" >&2
                return 1
            fi ;;
        lines-4x64) timeout 300 "$bin/e2e_count" lines "$addr" 4 "$m" 64 32 ;;
        http-plain-8) timeout 300 "$bin/http_count" "$addr" 8 "$m" 1 ;;
        http-P16-8) timeout 300 "$bin/http_count" "$addr" 8 "$m" 16 ;;
        https-plain-8) timeout 300 "$tls_bin/http_count" --tls "$addr" 8 "$m" 1 ;;
        https-P16-8) timeout 300 "$tls_bin/http_count" --tls "$addr" 8 "$m" 16 ;;
    esac >/dev/null
}

count() { # case side messages -> instructions of the server process (runs in a subshell)
    local name=$1 side=$2 m=$3 addr server out
    # A file of this run's own: a previous run's "listening on" line would name its address.
    out=$(mktemp "$log/server.XXXXXX")
    local env=()
    if [[ $name == uring-* ]]; then env=(PACKETPIPE_UNDER_VALGRIND=1); fi
    # shellcheck disable=SC2046 # the command line is split on purpose
    env "${env[@]}" valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        $(server_command "$name" "$side") 127.0.0.1:0 >"$out" 2>&1 &
    server=$!
    # Whatever way this subshell ends, the server does not outlive it.
    # shellcheck disable=SC2064 # the PID expanded now: $server is local
    trap "kill $server 2>/dev/null" EXIT
    # Up to two minutes: valgrind's start on a loaded machine can take long.
    for _ in $(seq 1200); do
        grep -q listening "$out" && break
        kill -0 "$server" 2>/dev/null || break
        sleep 0.1
    done
    addr=$(sed -n 's/^listening on \([0-9.:]*\).*/\1/p' "$out")
    if [[ -z "$addr" ]]; then
        echo "$name: the $side server did not start:" >&2
        cat "$out" >&2
        exit 1
    fi
    client "$name" "$addr" "$m" || {
        echo "$name: the client against the $side server failed; the server said:" >&2
        cat "$out" >&2
        exit 1
    }
    # The blocking RPC server exits once its connection ends; the others serve until killed.
    [[ $name == rpc-* ]] || kill -TERM "$server"
    # Valgrind holds signals while an io_uring server waits in io_uring_enter, and has been seen to
    # drop one: a connection ends the wait, and the signal is sent again.
    local tries=0
    while [[ $name == uring-* ]] && kill -0 "$server" 2>/dev/null; do
        if ((++tries > 100)); then
            echo "$name: the $side server did not stop on SIGTERM: no count" >&2
            exit 1
        fi
        timeout 1 bash -c "exec 3<>/dev/tcp/${addr%:*}/${addr##*:}" 2>/dev/null || true
        sleep 0.2
        kill -TERM "$server" 2>/dev/null || true
    done
    wait "$server" 2>/dev/null || true
    trap - EXIT
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$out"
}

declare -A measured
start=$SECONDS
for name in $cases; do
    case_start=$SECONDS
    m=${messages[$name]}
    sides="packetpipe peer"
    [[ ${E2E_HYPER:-0} == 1 && $name == http-* ]] && sides="$sides hyper"
    for side in $sides; do
        low=$(count "$name" "$side" "$m")
        high=$(count "$name" "$side" $((3 * m)))
        [[ -n $low && -n $high ]] || { echo "$name: no count from callgrind for the $side server" >&2; exit 1; }
        measured[$name/$side]=$(((high - low) / (2 * m * ${connections[$name]})))
    done
    echo "measured $name in $((SECONDS - case_start)) s"
done
echo "all measured in $((SECONDS - start)) s"

if ((update)); then
    {
        echo "# User-space instructions per message of whole servers under callgrind, packetpipe's and its"
        echo "# peer's (scripts/e2e_instructions.sh); only packetpipe's count is held to the budget."
        echo "# Measured with: $(rustc --version), valgrind $(valgrind --version | sed 's/valgrind-//'),"
        echo "# $(redis-benchmark --version | cut -d' ' -f1-2)."
        echo "# case packetpipe peer"
        for name in $all_cases; do
            if [[ -n ${measured[$name/packetpipe]:-} ]]; then
                echo "$name ${measured[$name/packetpipe]} ${measured[$name/peer]}"
            else
                awk -v c="$name" '$1 == c' "$budget_file"
            fi
        done
    } >"$budget_file.new"
    mv "$budget_file.new" "$budget_file"
    echo "budget written to $budget_file"
fi

change() { # now then -> the change in percent, or "-" without a budget
    [[ -n $2 ]] || { echo "-"; return; }
    awk -v a="$1" -v b="$2" 'BEGIN { printf "%+.1f%%", (a - b) / b * 100 }'
}

echo
for name in $cases; do
    printf '%-14s peer: %s\n' "$name" "${peer_name[$name]}"
done
echo
failed=0
row='%-14s %11s %9s %7s %9s %8s %12s %12s%s\n'
# shellcheck disable=SC2059 # the format is the row's
printf "$row" case packetpipe peer ratio budget change "peer budget" "peer change" ""
for name in $cases; do
    ours=${measured[$name/packetpipe]} theirs=${measured[$name/peer]}
    read -r budget peer_budget < <(awk -v c="$name" '$1 == c { print $2, $3 }' "$budget_file" 2>/dev/null || true) || true
    ratio=$(awk -v a="$ours" -v b="$theirs" 'BEGIN { printf "%.2f", a / b }')
    flag=""
    if [[ -z ${budget:-} ]]; then
        flag="  NO BUDGET"
        failed=1
    elif ((ours * 100 > budget * (100 + tolerance_percent))); then
        flag="  OVER BUDGET"
        failed=1
    fi
    # shellcheck disable=SC2059
    printf "$row" "$name" "$ours" "$theirs" "$ratio" "${budget:--}" "$(change "$ours" "${budget:-}")" \
        "${peer_budget:--}" "$(change "$theirs" "${peer_budget:-}")" "$flag"
done
echo "(instructions per message; ratio = packetpipe / peer; the peers' changes are for information)"
for name in $cases; do
    [[ -n ${measured[$name/hyper]:-} ]] || continue
    echo "$name hyper: ${measured[$name/hyper]} (ratio to the peer $(awk -v a="${measured[$name/hyper]}" \
        -v b="${measured[$name/peer]}" 'BEGIN { printf "%.2f", a / b }'))"
done
if ((failed)); then
    echo "end-to-end guard failed: a packetpipe server rose more than ${tolerance_percent}% over its budget (or has none);"
    echo "if the rise is deliberate, run 'bash scripts/e2e_instructions.sh --update' and commit the budget with the reason"
    exit 1
fi
echo "end-to-end guard: every packetpipe server within ${tolerance_percent}% of its budget"
