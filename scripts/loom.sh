#!/usr/bin/env bash
# Loom model checking of packetpipe's cross-thread protocols (loom-tests/), then the mutants.
#
#   scripts/loom.sh                          # suite + every mutant, LOOM_MAX_PREEMPTIONS=2
#   LOOM_MAX_PREEMPTIONS=3 scripts/loom.sh   # a deeper search (much slower)
#   scripts/loom.sh --include-ignored        # extra arguments go to the suite's test harness
#   LOOM_SKIP_MUTANTS=1 scripts/loom.sh      # the suite only
#   LOOM_SKIP_SUITE=1 LOOM_MUTANTS="no_recheck racy_reclaim" scripts/loom.sh   # those mutants only
#
# 0. Every mutant patch (loom-tests/mutants/<name>.patch) must apply cleanly to the sources as they
#    are (checked first, for all of them, whatever else is skipped): a patch that no longer applies
#    fails the script, since the bug it describes would otherwise go unchecked.
# 1. The suite: every model in loom-tests/tests/, selected with `--test '*'` (the models are
#    `test = false` in loom-tests/Cargo.toml so that a plain `cargo test` skips them; naming them
#    selects them all the same), built with RUSTFLAGS="--cfg packetpipe_loom" (the crate-specific
#    cfg that swaps std's primitives for loom's in src/sync.rs) in the `loom` cargo profile:
#    release for the library and the models, unoptimized dependencies (see Cargo.toml).
# 2. The mutants: each patch puts one realistic bug back into the library. It is applied to a
#    fresh scratch copy of the repository's files (target/loom/mutants/src/), which is built with
#    `--cfg packetpipe_mutant` (this compiles the models' `mutant_*` tests, and leaves out the
#    suite's), and the patch's model (its `Model:` line) runs its `mutant_<name>` test: a
#    `#[should_panic]` test, so the script fails unless that test exists and passes, i.e. unless
#    the model catches the bug. Every `mutant_*` test in loom-tests/tests/ must have its patch.
#
# The suite and the mutants have a target directory each under target/loom/ (RUSTFLAGS differ, so
# one shared by both would rebuild everything each time); the mutants share theirs, so loom and its
# dependencies are built once for all of them, and each mutant rebuilds only the library and its
# model. That rebuild is what makes a mutant's build its own: cargo names a workspace package's
# artifacts by its path relative to the workspace, so every scratch copy writes the same ones, and
# only the copy's files being newer than them (a fresh copy each time) makes cargo rebuild them.
# LOOM_TARGET_ROOT overrides the root.
# From scratch the script takes about 2 minutes on 2 idle cores (6 on busy ones), mostly compiling;
# the models themselves run in seconds at LOOM_MAX_PREEMPTIONS=2, about a minute at 3.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"

export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-2}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
root="${LOOM_TARGET_ROOT:-target/loom}"
mkdir -p "$root"
root="$(cd "$root" && pwd)"
patches="$repo/loom-tests/mutants"

# The files a scratch copy holds: those git tracks, and the untracked ones it does not ignore (a
# new source file not yet added), as they are in the working tree.
source_files() {
    git -C "$repo" ls-files -z --cached --others --exclude-standard
}

# Fill directory $1 with the working tree's files, then apply patch $2 there. `git apply` is run
# with the scratch's parent as a ceiling: inside the repository's own tree (target/ is in it) it
# would otherwise find the repository and silently skip every path outside the current directory.
stage() {
    local dir="$1" patch="$2"
    rm -rf "$dir"
    mkdir -p "$dir"
    source_files | (cd "$repo" && xargs -0 cp --parents -t "$dir")
    GIT_CEILING_DIRECTORIES="$(dirname "$dir")" git -C "$dir" apply --whitespace=nowarn "$patch"
}

model_of() { # patch -> the model file name its `Model:` line names
    sed -n 's|^Model: loom-tests/tests/\([a-z0-9_]*\)\.rs, test mutant_.*$|\1|p' "$1" | head -n 1
}

start=$SECONDS

echo "=== mutant patches apply (loom-tests/mutants/)"
all=()
for patch in "$patches"/*.patch; do
    all+=("$(basename "$patch" .patch)")
done
broken=()
for name in "${all[@]}"; do
    patch="$patches/$name.patch"
    model="$(model_of "$patch")"
    if [[ -z "$model" || ! -f "$repo/loom-tests/tests/$model.rs" ]]; then
        echo "    $name: no 'Model: loom-tests/tests/<model>.rs, test mutant_$name' line naming a model file"
        broken+=("$name")
    elif ! grep -q "^fn mutant_$name()" "$repo/loom-tests/tests/$model.rs"; then
        echo "    $name: loom-tests/tests/$model.rs has no test mutant_$name"
        broken+=("$name")
    elif ! out="$(stage "$root/apply-check" "$patch" 2>&1)"; then
        echo "    $name: DOES NOT APPLY to the current sources; git apply says:"
        printf '%s\n' "$out" | sed 's/^/    | /'
        broken+=("$name")
    fi
done
rm -rf "$root/apply-check"
# Every mutant test has its patch.
while IFS= read -r test; do
    if [[ ! -f "$patches/${test#mutant_}.patch" ]]; then
        echo "    $test: a mutant test without loom-tests/mutants/${test#mutant_}.patch"
        broken+=("$test")
    fi
done < <(sed -n 's/^fn \(mutant_[a-z0-9_]*\)().*/\1/p' "$repo"/loom-tests/tests/*.rs)
# Every model has its `[[test]]` entry with `test = false` in loom-tests/Cargo.toml, so the
# workspace's plain `cargo test` skips it (it is empty there) while `--test` below selects it.
for file in "$repo"/loom-tests/tests/*.rs; do
    model="$(basename "$file" .rs)"
    if ! grep -q "^name = \"$model\"$" "$repo/loom-tests/Cargo.toml"; then
        echo "    $model: no [[test]] entry (name = \"$model\", test = false) in loom-tests/Cargo.toml"
        broken+=("$model")
    fi
done
if ((${#broken[@]})); then
    echo "mutant patches or model entries broken: ${broken[*]}"
    exit 1
fi
echo "    all ${#all[@]} apply"

if [[ -z "${LOOM_SKIP_SUITE:-}" ]]; then
    echo "=== loom suite (profile loom, LOOM_MAX_PREEMPTIONS=$LOOM_MAX_PREEMPTIONS)"
    RUSTFLAGS="--cfg packetpipe_loom" CARGO_TARGET_DIR="$root/suite" \
        cargo test --profile loom -p packetpipe-loom-tests --test '*' -- "$@"
    echo "=== loom suite passed in $((SECONDS - start)) s"
fi

if [[ -n "${LOOM_SKIP_MUTANTS:-}" ]]; then
    exit 0
fi

selected=("${all[@]}")
if [[ -n "${LOOM_MUTANTS:-}" ]]; then
    read -r -a selected <<<"$LOOM_MUTANTS"
fi
failed=()
for name in "${selected[@]}"; do
    patch="$patches/$name.patch"
    if [[ ! -f "$patch" ]]; then
        echo "=== mutant $name: no loom-tests/mutants/$name.patch"
        failed+=("$name")
        continue
    fi
    model="$(model_of "$patch")"
    t0=$SECONDS
    echo "=== mutant $name (expect loom-tests/tests/$model.rs::mutant_$name to catch it)"
    scratch="$root/mutants/src"
    stage "$scratch" "$patch"
    log="$(mktemp)"
    # Incremental compilation: the scratch copies differ from one another by one patch, so each
    # mutant's build reuses the previous one's work for everything the patch does not touch.
    if (cd "$scratch" && RUSTFLAGS="--cfg packetpipe_loom --cfg packetpipe_mutant" \
        CARGO_TARGET_DIR="$root/mutants/target" CARGO_PROFILE_LOOM_INCREMENTAL=true \
        cargo test --profile loom -p packetpipe-loom-tests --test "$model" -- --exact "mutant_$name") \
        >"$log" 2>&1 && grep -q "^test mutant_$name - should panic ... ok$" "$log"; then
        echo "    caught ($((SECONDS - t0)) s)"
    else
        echo "    NOT CAUGHT: the model passed with the bug in, or the build failed; log:"
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
echo "all ${#selected[@]} mutants caught"
