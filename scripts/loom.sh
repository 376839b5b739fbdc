#!/usr/bin/env bash
# Loom model checking of packetpipe's cross-thread protocols (loom-tests/), then the mutants.
#
#   scripts/loom.sh                          # suite + every mutant, LOOM_MAX_PREEMPTIONS=2
#   LOOM_MAX_PREEMPTIONS=3 scripts/loom.sh   # a deeper search (much slower)
#   scripts/loom.sh --include-ignored        # extra arguments go to the suite's test harness
#   LOOM_SKIP_MUTANTS=1 scripts/loom.sh      # the suite only
#
# 1. The suite: every model in loom-tests/tests/, built with RUSTFLAGS="--cfg packetpipe_loom" (the
#    crate-specific cfg that swaps std's primitives for loom's in src/sync.rs) in the `loom` cargo
#    profile: release for the library and the models, unoptimized dependencies (see Cargo.toml).
# 2. The mutants: each build adds --cfg packetpipe_mutant="<name>", which puts one realistic bug
#    back into the library (see the `MUTANT` comments in src/), and runs that mutant's
#    `#[should_panic]` test; the script fails unless that test exists and passes, i.e. unless the
#    model catches the bug.
#
# Every build has its own target directory under target/loom/ (RUSTFLAGS differ, so a shared one
# would rebuild everything each time); later runs reuse them. LOOM_TARGET_ROOT overrides the root.
# From scratch the script takes about 2 minutes on 2 idle cores (6 on busy ones), mostly compiling;
# the models themselves run in seconds at LOOM_MAX_PREEMPTIONS=2, about a minute at 3.
set -euo pipefail
cd "$(dirname "$0")/.."

export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-2}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
root="${LOOM_TARGET_ROOT:-target/loom}"

# mutant name -> the model file whose `mutant_<name>` test must catch it
mutants=(
    "relaxed_publish publish_read"
    "no_recheck publish_read"
    "done_before_data close_vs_data"
    "no_recheck_flush backpressure"
    "cancel_no_wake cancel"
    "racy_reclaim parked_tail"
    "stale_waker dropped_futures"
    "short_read_at_least read_at_least_end"
    "take_frame_no_wake take_frame_cycles"
    "stale_no_wake take_frame_cycles"
    "join_no_recheck join"
    "join_wake_no_forward join"
    "close_check_unlocked pool_close"
    "done_flag_first reader_completed"
    "pop_growing_last grow_last"
    "grown_before_link grow_last"
)

start=$SECONDS
echo "=== loom suite (profile loom, LOOM_MAX_PREEMPTIONS=$LOOM_MAX_PREEMPTIONS)"
RUSTFLAGS="--cfg packetpipe_loom" CARGO_TARGET_DIR="$root/suite" \
    cargo test --profile loom -p packetpipe-loom-tests -- "$@"
echo "=== loom suite passed in $((SECONDS - start)) s"

if [[ -n "${LOOM_SKIP_MUTANTS:-}" ]]; then
    exit 0
fi

failed=()
for entry in "${mutants[@]}"; do
    read -r name file <<<"$entry"
    t0=$SECONDS
    echo "=== mutant $name (expect loom-tests/tests/$file.rs::mutant_$name to catch it)"
    log="$(mktemp)"
    # The bare `packetpipe_mutant` too: the models' `#[cfg(not(packetpipe_mutant))]` tests only
    # the name, which `packetpipe_mutant="..."` alone does not set, so without it every mutant
    # build would also build the suite's models (kept from running only by `--exact`).
    if RUSTFLAGS="--cfg packetpipe_loom --cfg packetpipe_mutant --cfg packetpipe_mutant=\"$name\"" \
        CARGO_TARGET_DIR="$root/mutant-$name" \
        cargo test --profile loom -p packetpipe-loom-tests --test "$file" -- --exact "mutant_$name" \
        >"$log" 2>&1 && grep -q "^test mutant_$name - should panic ... ok$" "$log"; then
        echo "    caught ($((SECONDS - t0)) s)"
    else
        echo "    NOT CAUGHT: the model passed with the bug in, or the test is missing; log:"
        sed 's/^/    | /' "$log" | tail -n 60
        failed+=("$name")
    fi
    rm -f "$log"
done

echo "=== loom suite and mutants: $((SECONDS - start)) s"
if ((${#failed[@]})); then
    echo "mutants not caught: ${failed[*]}"
    exit 1
fi
echo "all ${#mutants[@]} mutants caught"
