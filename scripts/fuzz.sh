#!/usr/bin/env bash
# Run every cargo-fuzz target in fuzz/ for a bounded time, starting from the committed seed corpus.
#
#   scripts/fuzz.sh                   # every target for FUZZ_SECS (default 60) seconds, side by side
#   FUZZ_SECS=600 scripts/fuzz.sh     # longer
#   FUZZ_JOBS=1 scripts/fuzz.sh       # one target at a time (each gets a whole core)
#   scripts/fuzz.sh pipe_ops          # only targets whose name contains "pipe_ops"
#
# Targets (fuzz/fuzz_targets/*.rs):
# - pipe_ops: random operation sequences on a pipe's writer and reader (writes, buffer_mut +
#   advance including past the handed-out space, appends, flushes polled once or dropped, reads in
#   every form, advance_to with valid and invalid positions, take_frame, consume_all, cancels,
#   completion with and without an error, dropping either end) checked against the pipe's reference
#   model, the one the proptests of tests-integration/tests/pipe_model/ run (tests-integration/tests/kit/pipe_model/, included by path;
#   the input decoder is tests-integration/tests/kit/pipe_model/input.rs).
# - frame_decoders: LengthDelimited (packets and chains, random builder settings), Lines,
#   Delimited (one delimiter, and any_of a set with a sequence writer) and Passthrough on arbitrary
#   bytes cut at random segment boundaries, against tokio-util's LengthDelimitedCodec, LinesCodec,
#   AnyDelimiterCodec and BytesCodec: the same frames and the same errors (and io::ErrorKinds) at
#   the same point, and the same bytes from the any_of and passthrough encoders
#   (fuzz/src/frame_decoders.rs, the harness the proptests of tests-integration/tests/frame_differential.rs use
#   too). 51,584 runs in 60 s (860/s) on the 2-core VM with a build running on the other core.
# - resp_parser: the RESP example's request parser (examples/resp/, included by path) on arbitrary
#   bytes, whole and cut at random points, through the packetpipe decoder and the tokio-util codec:
#   the same commands and the same fatal errors (fuzz/src/resp_parser.rs). About 4,000 runs/s.
# - tls_server: the TLS server side over a Unix socket pair (the in-place path): arbitrary bytes
#   as the client's handshake, arbitrary bytes in place of records after a real handshake (the
#   connection ends with an error, never cleanly, never a panic or hang), and plaintext sent in
#   records of sizes the input picks (read back exactly, then the clean end)
#   (fuzz/src/tls_server.rs). A handshake per input: a few hundred runs/s.
#
# The committed corpus (fuzz/corpus/<target>/) is only read: new inputs libFuzzer finds go to a
# scratch copy under target/fuzz-work/, so a run never dirties the tree. A crash (a failed check or
# a sanitizer report) fails the script; the input is copied to fuzz/regressions/<target>/ and
# printed in hex, so it can be committed from a CI log too. `cargo test` (tests-integration/tests/fuzz_replay.rs)
# replays every file of fuzz/corpus/ and fuzz/regressions/ through the same checker without
# libFuzzer, so a committed crash input stays a regression test.
#
# Needs: the nightly toolchain pinned below (libFuzzer's -Zsanitizer flags; the same toolchain as
# scripts/miri.sh) and cargo-fuzz, both installed here when missing.
# Inputs run up to 1 KiB (about 340 operations) from the start (-len_control=0): libFuzzer's
# default grows the length limit too slowly for a 60 s run to reach long operation sequences.
# Measured on the 2-core VM: cargo-fuzz install 27 s, first build of the target 25-65 s
# (AddressSanitizer, release with debug assertions), then FUZZ_SECS per target (140-300 runs/s at
# that length); the whole step 86 s in a clean clone with cargo-fuzz installed.
set -euo pipefail
cd "$(dirname "$0")/.."

toolchain="${FUZZ_TOOLCHAIN:-nightly-2026-05-15}"
secs="${FUZZ_SECS:-60}"
filter="${1:-}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

start=$SECONDS
if ! rustup run "$toolchain" rustc --version >/dev/null 2>&1; then
    rustup toolchain install "$toolchain" --profile minimal
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi
cargo fuzz --version
echo "--- tools ready in $((SECONDS - start)) s"

targets=()
for file in fuzz/fuzz_targets/*.rs; do
    target="$(basename "$file" .rs)"
    if [[ -z "$filter" || "$target" == *"$filter"* ]]; then
        targets+=("$target")
    fi
done

# Build every target first (each build uses both cores), then run them side by side: libFuzzer is
# single-threaded, so FUZZ_JOBS targets (default: all of them) share the cores for FUZZ_SECS of
# wall time instead of taking FUZZ_SECS each in turn.
t0=$SECONDS
for target in "${targets[@]}"; do
    (cd fuzz && cargo "+$toolchain" fuzz build "$target")
done
echo "--- built ${#targets[@]} targets in $((SECONDS - t0)) s"

jobs="${FUZZ_JOBS:-${#targets[@]}}"
run() { # target -> runs it for $secs, its log in target/fuzz-work/<target>/log
    local target="$1" work="target/fuzz-work/$1"
    # First directory: where libFuzzer writes new inputs; the committed corpus is read only.
    (cd fuzz && cargo "+$toolchain" fuzz run "$target" "../$work/corpus" "corpus/$target" -- \
        -max_total_time="$secs" -max_len=1024 -len_control=0 -print_final_stats=1 \
        -artifact_prefix="../$work/artifacts/") >"$work/log" 2>&1
}
failed=()
declare -A pids=()
for ((i = 0; i < ${#targets[@]}; i += jobs)); do
    batch=("${targets[@]:i:jobs}")
    t0=$SECONDS
    for target in "${batch[@]}"; do
        work="target/fuzz-work/$target"
        rm -rf "$work"
        mkdir -p "$work/corpus" "$work/artifacts" "fuzz/regressions/$target"
        echo "=== fuzz $target for $secs s (seed corpus: $(ls "fuzz/corpus/$target" | wc -l) files)"
        run "$target" &
        pids[$target]=$!
    done
    for target in "${batch[@]}"; do
        work="target/fuzz-work/$target"
        artifacts="$work/artifacts/"
        if wait "${pids[$target]}"; then
            grep -E "^(#[0-9]+ +DONE|stat::number_of_executed_units)" "$work/log" || true
            echo "=== $target: no crash in $secs s (${#batch[@]} targets side by side, $((SECONDS - t0)) s)"
        else
            tail -n 60 "$work/log"
            for crash in "$artifacts"*; do
                [[ -f "$crash" ]] || continue
                name="$(basename "$crash")"
                cp "$crash" "fuzz/regressions/$target/$name"
                echo "=== $target FAILED: input $crash, copied to fuzz/regressions/$target/$name"
                echo "    (commit it: tests-integration/tests/fuzz_replay.rs replays it in cargo test); hex:"
                od -An -tx1 -v "$crash" | sed 's/^/    /'
            done
            failed+=("$target")
        fi
    done
done

echo "=== fuzz: $((SECONDS - start)) s"
if ((${#failed[@]})); then
    echo "fuzz targets that failed: ${failed[*]}"
    exit 1
fi
