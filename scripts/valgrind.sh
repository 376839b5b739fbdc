#!/usr/bin/env bash
# Run the library's unit and integration test binaries under valgrind memcheck.
#
#   scripts/valgrind.sh            # every test binary of the workspace (the subset below)
#   scripts/valgrind.sh pipe_model # only binaries whose name contains "pipe_model"
#
# Memcheck fails the run on any error (invalid read/write, use of uninitialised memory, bad free)
# and on definite leaks: --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite.
# "Still reachable" memory (the global pool, thread-locals of the main thread) is not an error.
#
# The subset, so that the whole script runs in a few minutes on 2 cores (valgrind runs code 20-50x
# slower than native), two binaries at a time (VALGRIND_JOBS):
# - every binary built by `cargo test --workspace --all-features --no-run` (the library's unit
#   tests and each file of tests-integration/tests/), debug build, tests run one at a time (--test-threads=1);
# - the loom-tests crate is not among them (its models are `test = false`, and empty without
#   --cfg packetpipe_loom; scripts/loom.sh runs them), and the filter below skips it regardless;
# - randomized tests run fewer cases: PROPTEST_CASES=16, PIPE_MODEL_CASES=50, and the stress
#   tests send STRESS_FRAMES=2000 frames per variant; the io tests move less and drop less (below;
#   each can be overridden from the environment);
# - tests listed in SKIP below are skipped (each with the reason);
# - binaries listed in LEAKS_ON_PURPOSE run without the leak check (every other memcheck error
#   still fails them): their tests forget packets with `mem::forget` to see them reported.
# Doc tests are not run: they are separate rustdoc-built programs, covered natively by
# `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install -y valgrind)"; exit 2; }
command -v python3 >/dev/null || { echo "python3 is needed to read cargo's JSON output"; exit 2; }

export PROPTEST_CASES="${PROPTEST_CASES:-16}"
export PIPE_MODEL_CASES="${PIPE_MODEL_CASES:-50}"
export STRESS_FRAMES="${STRESS_FRAMES:-2000}"
# tests-integration/tests/block_fit.rs: 100 sampled frames of the uniform mix per path instead of 1500.
export BLOCK_FIT_SAMPLES="${BLOCK_FIT_SAMPLES:-100}"
# The io tests: 1 MiB per copy instead of 64, 300 drops per cancel test instead of 10,000, 200 idle
# connections instead of 10,000 (their clients run natively in a child process).
export IO_COPY_BYTES="${IO_COPY_BYTES:-1048576}"
export CANCEL_DROPS="${CANCEL_DROPS:-300}"
export IDLE_CONNECTIONS="${IDLE_CONNECTIONS:-200}"
# The io_uring driver's tests: 100 connections instead of 10,000 and 1,000 (URING_CONNECTIONS,
# URING_FIXED_CHURN), 64 KiB per echo client instead of 1 MiB, 3 s instead of 300 ms to tell a
# client refused by a full fixed-descriptor table from one waiting in the backlog, 1 round of
# round trips instead of 50 before connections go idle (URING_TRAFFIC_ROUNDS), 2 KiB instead of
# 64 KiB sent to each client of the output's routes (URING_ROUTES_BYTES), and each wait
# for completions bounded to 1 ms (PACKETPIPE_UNDER_VALGRIND), since valgrind runs one thread at a
# time and a wake from another thread may wait for the scheduler. The RESP
# server on the driver is left to the native run of tests-integration/tests/resp_clients.rs (under this variable it
# tests the epoll transport only).
# tests-integration/tests/resp_clients.rs: redis-benchmark sends 10,000 requests per command instead
# of 50,000 (at valgrind's ~1/50 speed 50,000 MSETs came near the test's 120 s bound).
export RESP_BENCHMARK_REQUESTS="${RESP_BENCHMARK_REQUESTS:-10000}"
export URING_CONNECTIONS="${URING_CONNECTIONS:-100}"
export URING_ECHO_BYTES="${URING_ECHO_BYTES:-65536}"
export URING_IDLE_CONNECTIONS="${URING_IDLE_CONNECTIONS:-100}"
export URING_FIXED_CHURN="${URING_FIXED_CHURN:-100}"
export URING_REFUSED_WAIT_MS="${URING_REFUSED_WAIT_MS:-3000}"
export URING_TRAFFIC_ROUNDS="${URING_TRAFFIC_ROUNDS:-1}"
export URING_ROUTES_BYTES="${URING_ROUTES_BYTES:-2048}"
export PACKETPIPE_UNDER_VALGRIND=1
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
filter="${1:-}"

# Tests skipped under valgrind: "binary-name test-name-filter  # reason". Filters are passed to the
# test harness as --skip (substring match).
SKIP=(
    "pipe_alloc buffer_mut_advance_flush_read_advance_to_allocates_nothing_per_frame  # ~65 s: frames up to 64 KiB filled and checked byte by byte; the same calls run at small sizes in the other tests"
    "block_fit pooled_bytes_held_per_byte_in_flight_fixed_sizes  # ~35 s: about 220,000 frames (78 sizes, 3 paths); the same writer, reader and pool calls run in the uniform-mix test"
    "io_uring steady_state_messages_allocate_nothing  # 2,500 sequential round trips between a client thread and the driver thread: under valgrind (one thread at a time) each waits for the other's timeslice, and the run did not finish in 5 minutes; natively it asserts 0 allocations per message"
    "io_uring two_drivers_share_a_listener  # two driver threads waiting in io_uring_enter and a client thread: under valgrind the 20 sequential clients did not finish in 5 minutes (each round trip waits for the other threads' timeslices); natively it runs in under a second"
    "echo_server load_generator_gets_every_message_answered  # its 200 ms warm-up is a few ms of native time under valgrind, so a connection's first allocations fall in the measured window; natively (cargo test) it asserts 0 allocations per message, and resp_alloc asserts the same under valgrind"
    "echo_server load_generator_over_tls_gets_every_message_answered  # the same warm-up, and TLS through ring's assembly, whose vector code memcheck cannot follow (see CRYPTO_ASM); the TLS record layer runs under valgrind in tls_records and tls_clients"
)

# Binaries whose tests leak on purpose: "binary-name  # reason".
LEAKS_ON_PURPOSE=(
    "pool_leaks  # forgets packets to check the leak report; each keeps its block and its pool"
)

# Binaries that run `ring`'s assembly (AES-GCM, ChaCha20-Poly1305, the TLS handshakes): memcheck
# cannot follow how its vector code defines bytes, so a record's tag and ciphertext look
# uninitialised where they are compared or sent: "binary-name  # reason". The same reports come
# from inside rustls' own client and record layer in these binaries. They run with
# --undef-value-errors=no: invalid reads and writes, and leaks, are still checked.
CRYPTO_ASM=(
    "tls_clients  # TLS through rustls (ring provider) and the library's ring-based record layer"
    "tls_records  # the same"
    "fuzz_replay  # its tls_server inputs run TLS handshakes and records"
)

echo "=== building test binaries"
json="$(mktemp)"
cargo test --workspace --all-features --no-run --message-format=json >"$json"
mapfile -t binaries < <(python3 - "$json" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
        continue
    if not msg["profile"]["test"] or msg["package_id"].find("loom-tests") >= 0:
        continue
    print(msg["target"]["name"] + " " + msg["executable"])
PY
)
rm -f "$json"

# Valgrind runs a program's threads one at a time, on one core: VALGRIND_JOBS binaries (default
# 2, one per core) run side by side, each with its output in a log printed when it ends.
jobs="${VALGRIND_JOBS:-2}"
logs_dir="$(mktemp -d)"
declare -A names=() starts=() logs=()
run_index=0
failed=()
finish() { # waits for one running binary and reports it
    local pid status=0
    wait -n -p pid || status=$?
    local name="${names[$pid]}"
    cat "${logs[$pid]}"
    if ((status == 0)); then
        echo "=== $name: ok ($((SECONDS - ${starts[$pid]})) s)"
    else
        echo "=== $name: FAILED ($((SECONDS - ${starts[$pid]})) s)"
        failed+=("$name")
    fi
    unset "names[$pid]" "logs[$pid]"
}
start=$SECONDS
for entry in "${binaries[@]}"; do
    read -r name exe <<<"$entry"
    if [[ -n "$filter" && "$name" != *"$filter"* ]]; then
        continue
    fi
    skips=()
    for s in "${SKIP[@]}"; do
        read -r bin test _ <<<"$s"
        if [[ "$bin" == "$name" ]]; then
            skips+=(--skip "$test")
        fi
    done
    leak_check=(--leak-check=full --errors-for-leak-kinds=definite --show-leak-kinds=definite)
    for l in "${LEAKS_ON_PURPOSE[@]}"; do
        read -r bin _ <<<"$l"
        if [[ "$bin" == "$name" ]]; then
            leak_check=(--leak-check=no)
        fi
    done
    for c in "${CRYPTO_ASM[@]}"; do
        read -r bin _ <<<"$c"
        if [[ "$bin" == "$name" ]]; then
            leak_check+=(--undef-value-errors=no)
        fi
    done
    while ((${#names[@]} >= jobs)); do
        finish
    done
    # --fair-sched=yes: valgrind runs one thread at a time, and its default lock lets a thread
    # that spins without blocking (the spin-flag tests of tests-integration/tests/pipe_contract/) take it back
    # again and again while the thread it waits for starves: one round of
    # `completion_is_never_seen_before_the_last_bytes_by_a_spinning_reader` took up to 19 s and
    # failed its 20 s timeout in 1 of 6 runs (2 s with the fair lock, 6 of 6).
    {
        echo "=== valgrind $name ${skips[*]} ${leak_check[*]}"
        valgrind --quiet --fair-sched=yes --error-exitcode=1 "${leak_check[@]}" \
            "$exe" --test-threads=1 "${skips[@]}"
    } >"$logs_dir/$run_index.log" 2>&1 &
    names[$!]="$name"
    logs[$!]="$logs_dir/$run_index.log"
    run_index=$((run_index + 1))
    starts[$!]=$SECONDS
done
while ((${#names[@]})); do
    finish
done
rm -rf "$logs_dir"

echo "=== valgrind: ${#binaries[@]} binaries in $((SECONDS - start)) s"
if ((${#failed[@]})); then
    echo "failed under valgrind: ${failed[*]}"
    exit 1
fi
