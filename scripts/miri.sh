#!/usr/bin/env bash
# Run the tests of packetpipe's unsafe core under Miri, with Stacked Borrows and with Tree Borrows.
#
#   scripts/miri.sh                 # both borrow models, two test binaries at a time
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
# - Smaller sizes where the tests read them: PROPTEST_CASES=2, MIRI_PIPE_FRAMES=60,
#   FUZZ_REPLAY_RANDOM=2; the tests' own `cfg!(miri)` sizes elsewhere.
# - Skipped (SKIP below, each with its reason): tests that take minutes under Miri and cover safe
#   code only, or paths the kept tests cover too.
# - Flags: -Zmiri-disable-isolation (proptest reads the environment and the clock) and, for the
#   second run, -Zmiri-tree-borrows. None of the tests waits on wall-clock time, so no watchdog
#   variant is needed.
#
# The toolchain is pinned (miri is not built for every nightly; 2026-05-16 to -19 have none): the
# script installs it with the miri and rust-src components when missing. Measured on the idle
# 2-core VM (one model per core, each test timed with the harness's `--report-time`): build 25 s;
# Stacked Borrows 580 s of runs, Tree Borrows 890 s (pool.rs 226 / 315 s, packet_refcount 103 /
# 144, fuzz_replay 80 / 136, miri_pipe at 150 frames 63 / 120). The (model, binary) jobs share the
# two cores longest first (below). The log lists every test with its time, so each run's breakdown
# is on record.
set -euo pipefail
cd "$(dirname "$0")/.."

toolchain="${MIRI_TOOLCHAIN:-nightly-2026-05-15}"
models="${MIRI_MODELS:-stacked tree}"
target="${MIRI_TARGET_DIR:-target/miri}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
export PROPTEST_CASES="${PROPTEST_CASES:-2}"
export MIRI_PIPE_FRAMES="${MIRI_PIPE_FRAMES:-60}"
export FUZZ_REPLAY_RANDOM="${FUZZ_REPLAY_RANDOM:-2}"
# A backtrace per caught panic costs seconds under Miri.
export RUST_BACKTRACE=0

# Longest first (Tree Borrows, measured on the 2-core VM: pool 315 s, packet_refcount 144,
# fuzz_replay 136, miri_pipe 120, segments 88, pool_close 63, bounds 27; Stacked Borrows takes
# 0.6-0.7x as long), so that the two cores finish together.
TESTS=(pool packet_refcount fuzz_replay miri_pipe segments pool_close bounds)

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

# The build is shared: MIRIFLAGS only matter when the tests run. Each (model, test binary) pair is
# a job; MIRI_JOBS of them (default 2, one per core) run at once, taken longest first, so the step
# takes about half the two models' summed time rather than the slower model's whole time.
flags_of() {
    case "$1" in
        stacked) echo "-Zmiri-disable-isolation" ;;
        tree) echo "-Zmiri-disable-isolation -Zmiri-tree-borrows" ;;
        *) echo "unknown borrow model $1 (stacked or tree)" >&2; return 2 ;;
    esac
}
queue=()
for t in "${TESTS[@]}"; do
    for model in tree stacked; do
        if [[ " $models " == *" $model "* ]]; then
            queue+=("$model $t")
        fi
    done
done
for model in $models; do
    flags_of "$model" >/dev/null
    echo "=== miri, $model borrows: MIRIFLAGS=\"$(flags_of "$model")\""
done
jobs="${MIRI_JOBS:-2}"
logs_dir="$(mktemp -d)"
declare -A job_of=()
failed=()
finish() {
    local pid status=0
    wait -n -p pid || status=$?
    local job="${job_of[$pid]}" log="$logs_dir/${job_of[$pid]/ /-}.log"
    if ((status == 0)); then
        echo "=== miri, $job: ok"
    else
        echo "=== miri, $job: FAILED"
        failed+=("$job")
    fi
    grep -E "^(test result|     Running|error)|^test .* <[0-9.]+s>$|FAILED|panicked|Undefined Behavior|leak" \
        "$log" | sed 's/^/    /'
    if ((status != 0)); then
        tail -n 80 "$log" | sed 's/^/    | /'
    fi
    unset "job_of[$pid]"
}
t0=$SECONDS
for job in "${queue[@]}"; do
    read -r model t <<<"$job"
    while ((${#job_of[@]} >= jobs)); do
        finish
    done
    MIRIFLAGS="$(flags_of "$model")" CARGO_TARGET_DIR="$target" \
        cargo "+$toolchain" miri test -p packetpipe-tests --test "$t" -- "${harness_args[@]}" \
        >"$logs_dir/$model-$t.log" 2>&1 &
    job_of[$!]="$model $t"
done
while ((${#job_of[@]})); do
    finish
done
rm -rf "$logs_dir"
echo "--- tests ran in $((SECONDS - t0)) s"

echo "=== miri: $((SECONDS - start)) s"
if ((${#failed[@]})); then
    echo "miri failed: ${failed[*]}"
    exit 1
fi
