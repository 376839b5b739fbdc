#!/usr/bin/env bash
# User-space instructions per echoed message of the echo servers: packetpipe's
# (examples/echo_server.rs) against tokio-util's `Framed` + `forward`, each alone in a process under
# valgrind's callgrind, loaded by perf/examples/echo_count.rs over loopback.
#
#   bash scripts/echo_instructions.sh [CONNECTIONS] [OUTSTANDING] [MESSAGES]   # default 16 1 2000
#   URING=1 bash scripts/echo_instructions.sh ...   # also the io_uring driver and the io_uring floor
#
# With URING=1 (Linux with io_uring) two more servers run: `uring`, examples/echo_server.rs
# --transport uring (the driver, with PACKETPIPE_UNDER_VALGRIND=1: its waits bounded to 1 ms, since
# valgrind holds the wake of another thread while this one waits in io_uring_enter), and
# `uring-floor`, perf/examples/uring_floor.rs (the least an io_uring echo does: no pipe, no codec).
#
# Each server runs twice, for MESSAGES and 3 x MESSAGES per connection; instructions per message
# are (count(3M) - count(M)) / (2M x CONNECTIONS), which cancels start-up and teardown. Counts do
# not depend on the machine's load, but they do depend on how the messages batch into reads, which
# valgrind's slowdown changes: compare the two servers of one run, not runs at other settings.
# Kernel work (the system calls, the same for both) is not counted. Takes about a minute.
set -euo pipefail
shopt -s inherit_errexit # a failed client inside $(count ...) stops the script
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install -y valgrind)" >&2; exit 2; }

connections=${1:-16}
outstanding=${2:-1}
messages=${3:-2000}
cargo build --release -p packetpipe-perf --example echo_count -q
exe=target/release/examples/echo_count
kinds=(packetpipe forward)
if [[ ${URING:-0} == 1 ]]; then
    cargo build --release --features tokio,io-uring --example echo_server -q
    cargo build --release -p packetpipe-perf --features io-uring --example uring_floor -q
    kinds+=(uring uring-floor)
fi
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT

count() { # kind messages -> instructions of the server process (runs in a subshell)
    local kind=$1 m=$2 addr server
    # Port 0: the server picks a free port and prints it.
    # Emptied here, before the server starts: its own redirection runs in the background, and
    # the wait below could otherwise read the previous run's address.
    : >"$log/server"
    local cmd=("$exe" serve "$kind" 127.0.0.1:0)
    case $kind in
    uring) cmd=(target/release/examples/echo_server 127.0.0.1:0 --transport uring) ;;
    uring-floor) cmd=(target/release/examples/uring_floor 127.0.0.1:0) ;;
    esac
    PACKETPIPE_UNDER_VALGRIND=1 valgrind --tool=callgrind --callgrind-out-file=/dev/null "${cmd[@]}" \
        >>"$log/server" 2>&1 &
    server=$!
    # The server never exits by itself: stop it however this subshell ends.
    trap "kill $server 2>/dev/null" EXIT # the PID expanded now: \$server is local
    for _ in $(seq 300); do grep -q listening "$log/server" && break; sleep 0.1; done
    addr=$(sed -n 's/^listening on \([^ ]*\).*/\1/p' "$log/server")
    if [[ -z "$addr" ]]; then
        echo "the $kind server did not start:" >&2
        cat "$log/server" >&2
        exit 1
    fi
    "$exe" client "$addr" "$connections" "$outstanding" "$m" >/dev/null
    kill -TERM "$server"
    # Valgrind holds signals while an io_uring server waits in io_uring_enter, and has been seen
    # to drop one: a connection ends the wait, and the signal is sent again.
    local tries=0
    while kill -0 "$server" 2>/dev/null; do
        if ((++tries > 100)); then
            kill -9 "$server"
            echo "the $kind server did not stop on SIGTERM: no count" >&2
            exit 1
        fi
        timeout 1 bash -c "exec 3<>/dev/tcp/${addr%:*}/${addr##*:}" 2>/dev/null || true
        sleep 0.2
        kill -TERM "$server" 2>/dev/null || true
    done
    wait "$server" 2>/dev/null || true
    trap - EXIT
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$log/server"
}

echo "echo servers, $connections connections x $outstanding outstanding, 64-byte messages"
printf '%-12s %14s\n' server "instructions/message"
for kind in "${kinds[@]}"; do
    low=$(count "$kind" "$messages")
    high=$(count "$kind" $((3 * messages)))
    printf '%-12s %14d\n' "$kind" $(((high - low) / (2 * messages * connections)))
done
