#!/usr/bin/env bash
# Run the tests of packetpipe's unsafe core under Miri, with Stacked Borrows and with Tree Borrows.
#
#   scripts/miri.sh                 # both borrow models, at the same time (one per core)
#   MIRI_MODELS=tree scripts/miri.sh   # one model: "stacked" or "tree"
#   scripts/miri.sh pool            # extra arguments go to the test harness (a name filter)
#
# Miri interprets the program and reports undefined behaviour: out-of-bounds or use-after-free
# accesses, uninitialized reads, data races, aliasing violations under the chosen borrow model,
# and memory leaks (a leaked block fails the run).
#
# What runs (the tests that drive src/block.rs, the pool and src/pipe/queue.rs):
# - tests-integration/tests/packet_refcount/ (blocks, windows, writers, shared release across threads),
#   tests-integration/tests/pool.rs and tests-integration/tests/pool_close.rs (thread caches, depot, closing), tests-integration/tests/segments.rs and
#   tests-integration/tests/bounds.rs (views over blocks), tests-integration/tests/miri_pipe.rs (two threads streaming through a small,
#   often paused pipe; a reader completing mid-stream; a canceler on a third thread), and
#   tests-integration/tests/fuzz_replay.rs (the fuzz corpus: every misuse path of the pipe, single-threaded).
# - Smaller sizes where the tests read them: PROPTEST_CASES=2, MIRI_PIPE_FRAMES=150,
#   FUZZ_REPLAY_RANDOM=2; the tests' own `cfg!(miri)` sizes elsewhere.
# - Skipped (SKIP below, each with its reason): tests that take minutes under Miri and cover safe
#   code only, or paths the kept tests cover too.
# - Flags: -Zmiri-disable-isolation (proptest reads the environment and the clock) and, for the
#   second run, -Zmiri-tree-borrows. None of the tests waits on wall-clock time, so no watchdog
#   variant is needed.
#
# The toolchain is pinned (miri is not built for every nightly; 2026-05-16 to -19 have none): the
# script installs it with the miri and rust-src components when missing. Measured on the 2-core VM
# (shared with two other builds, so inflated), Stacked Borrows, each test timed with the harness's
# `-Z unstable-options --report-time`: toolchain install and `cargo miri setup` 13 s, build 38 s;
# the other six binaries together 463 s (segments 88 s, fuzz_replay 84 s, miri_pipe 78 s,
# pool_close 50 s, bounds 35 s, packet_refcount the rest); tests-integration/tests/pool.rs 523 s, measured at
# about twice the load of the figures before it (the thread-cache cap test, sized down for Miri,
# 152 s, the two cross-thread steady-state tests 177 s). Tree
# Borrows takes 1.5-2x as long. The two models run at once, so the step takes about as long as
# the slower one. The log lists every test with its time (the harness's --report-time), so each
# run's breakdown is on record.
set -euo pipefail
cd "$(dirname "$0")/.."

toolchain="${MIRI_TOOLCHAIN:-nightly-2026-05-15}"
models="${MIRI_MODELS:-stacked tree}"
target="${MIRI_TARGET_DIR:-target/miri}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
export PROPTEST_CASES="${PROPTEST_CASES:-2}"
export MIRI_PIPE_FRAMES="${MIRI_PIPE_FRAMES:-150}"
export FUZZ_REPLAY_RANDOM="${FUZZ_REPLAY_RANDOM:-2}"
# A backtrace per caught panic costs seconds under Miri.
export RUST_BACKTRACE=0

TESTS=(packet_refcount pool pool_close segments bounds miri_pipe fuzz_replay)

# "test-name  # reason" (passed to every binary as --skip; names are unique across TESTS).
SKIP=(
    "random_operations_on_one_thread  # proptest over blocks up to 1 MiB: minutes per case; the fixed tests of packet_refcount and pool* cover the same unsafe paths"
    "random_operations_across_threads  # as above, with threads"
    "packet_slice_out_of_range_for_every_variant  # ~1 s per caught panic under Miri; the range checks run before any unsafe code"
    "packet_split_and_advance_out_of_range_for_every_variant  # as above"
    "owned_packet_slice_out_of_range  # as above"
    "invalid_sequences_in_every_chunking  # 45 s of safe UTF-8 decoding over every chunking"
)

start=$SECONDS
if ! cargo "+$toolchain" miri --version >/dev/null 2>&1; then
    rustup toolchain install "$toolchain" --profile minimal -c miri,rust-src
fi
cargo "+$toolchain" miri --version
cargo "+$toolchain" miri setup >/dev/null
echo "--- toolchain ready in $((SECONDS - start)) s"

test_args=(-p packetpipe-tests)
for t in "${TESTS[@]}"; do
    test_args+=(--test "$t")
done
# Each test's time in the log (nightly harness option; the toolchain is a nightly).
harness_args=(--test-threads=1 -Z unstable-options --report-time)
for s in "${SKIP[@]}"; do
    read -r name _ <<<"$s"
    harness_args+=(--skip "$name")
done
harness_args+=("$@")

t0=$SECONDS
CARGO_TARGET_DIR="$target" cargo "+$toolchain" miri test "${test_args[@]}" --no-run
echo "--- built in $((SECONDS - t0)) s"

# The build is shared: MIRIFLAGS only matter when the tests run, so both models run at once.
declare -A pids logs
t0=$SECONDS
for model in $models; do
    case "$model" in
        stacked) flags="-Zmiri-disable-isolation" ;;
        tree) flags="-Zmiri-disable-isolation -Zmiri-tree-borrows" ;;
        *) echo "unknown borrow model $model (stacked or tree)"; exit 2 ;;
    esac
    logs[$model]="$(mktemp)"
    echo "=== miri, $model borrows: MIRIFLAGS=\"$flags\""
    MIRIFLAGS="$flags" CARGO_TARGET_DIR="$target" \
        cargo "+$toolchain" miri test "${test_args[@]}" -- "${harness_args[@]}" \
        >"${logs[$model]}" 2>&1 &
    pids[$model]=$!
done

failed=()
for model in $models; do
    if wait "${pids[$model]}"; then
        status=ok
    else
        status=FAILED
        failed+=("$model")
    fi
    echo "=== miri, $model borrows: $status"
    grep -E "^(test result|     Running|error)|^test .* <[0-9.]+s>$|FAILED|panicked|Undefined Behavior|leak" \
        "${logs[$model]}" | sed 's/^/    /'
    if [[ $status == FAILED ]]; then
        tail -n 80 "${logs[$model]}" | sed 's/^/    | /'
    fi
    rm -f "${logs[$model]}"
done
echo "--- tests ran in $((SECONDS - t0)) s"

echo "=== miri: $((SECONDS - start)) s"
if ((${#failed[@]})); then
    echo "miri failed under: ${failed[*]}"
    exit 1
fi
