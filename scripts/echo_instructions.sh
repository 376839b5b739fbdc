#!/usr/bin/env bash
# User-space instructions per echoed message of the echo servers: packetpipe's
# (examples/echo_server.rs) against tokio-util's `Framed` + `forward`, each alone in a process under
# valgrind's callgrind, loaded by perf/examples/echo_count.rs over loopback.
#
#   bash scripts/echo_instructions.sh [CONNECTIONS] [OUTSTANDING] [MESSAGES]   # default 16 1 2000
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
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT

count() { # kind messages -> instructions of the server process (runs in a subshell)
    local kind=$1 m=$2 addr server
    # Port 0: the server picks a free port and prints it.
    # Emptied here, before the server starts: its own redirection runs in the background, and
    # the wait below could otherwise read the previous run's address.
    : >"$log/server"
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$exe" serve "$kind" 127.0.0.1:0 \
        >>"$log/server" 2>&1 &
    server=$!
    # The server never exits by itself: stop it however this subshell ends.
    trap "kill $server 2>/dev/null" EXIT # the PID expanded now: \$server is local
    for _ in $(seq 300); do grep -q listening "$log/server" && break; sleep 0.1; done
    addr=$(sed -n 's/^listening on //p' "$log/server")
    if [[ -z "$addr" ]]; then
        echo "the $kind server did not start:" >&2
        cat "$log/server" >&2
        exit 1
    fi
    "$exe" client "$addr" "$connections" "$outstanding" "$m" >/dev/null
    kill -TERM "$server"
    wait "$server" 2>/dev/null || true
    trap - EXIT
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$log/server"
}

echo "echo servers, $connections connections x $outstanding outstanding, 64-byte messages"
printf '%-12s %14s\n' server "instructions/message"
for kind in packetpipe forward; do
    low=$(count "$kind" "$messages")
    high=$(count "$kind" $((3 * messages)))
    printf '%-12s %14d\n' "$kind" $(((high - low) / (2 * messages * connections)))
done
