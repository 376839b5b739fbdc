#!/usr/bin/env bash
# Noise-free guard on the hot paths: instructions per operation under valgrind's callgrind,
# compared with the committed budget (scripts/instruction_budget.txt).
#
#   bash scripts/instructions.sh            # measure, print the table, fail on a rise over 10%
#   bash scripts/instructions.sh --update   # measure and rewrite the budget file
#
# Instruction counts, unlike times, do not depend on the machine's load: the same binary and
# input give the same count whatever else runs, so a 10% rise is a real change in the code, not
# noise. Each path of benches/hot_paths.rs runs N and 3N times; instructions per operation is
# (count(3N) - count(N)) / 2N, which cancels setup, teardown and the first-use costs (thread
# caches, lazy statics). A deliberate rise: run with --update and commit the new budget together
# with the change, saying why in the commit message.
#
# Takes about a minute after the bench build (each path runs under callgrind twice).
set -euo pipefail
cd "$(dirname "$0")/.."

command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install -y valgrind)"; exit 2; }
command -v python3 >/dev/null || { echo "python3 is needed to read cargo's JSON output"; exit 2; }

budget_file=scripts/instruction_budget.txt
tolerance_percent=10
n=2000
update=0
[[ "${1:-}" == "--update" ]] && update=1

exe="$(cargo bench -p packetpipe-perf --bench hot_paths --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    if msg.get("reason") == "compiler-artifact" and msg.get("executable") and msg["target"]["name"] == "hot_paths":
        print(msg["executable"])
')"
[[ -x "$exe" ]] || { echo "could not build benches/hot_paths.rs"; exit 2; }

count() { # path runs -> instructions
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$exe" "$1" "$2" 2>&1 |
        sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}

paths=$("$exe" | sed -n 's/^usage: .*paths: //p' | tr -d ',')
declare -A measured
for path in $paths; do
    low=$(count "$path" "$n")
    high=$(count "$path" $((3 * n)))
    measured[$path]=$(( (high - low) / (2 * n) ))
done

if ((update)); then
    {
        echo "# Instructions per operation of benches/hot_paths.rs under callgrind (scripts/instructions.sh)."
        echo "# Measured with: $(rustc --version), valgrind $(valgrind --version | sed 's/valgrind-//')."
        for path in $paths; do
            echo "$path ${measured[$path]}"
        done
    } >"$budget_file"
    echo "budget written to $budget_file"
fi

failed=0
printf '%-28s %12s %12s %8s\n' path instructions budget change
for path in $paths; do
    budget=$(awk -v p="$path" '$1 == p { print $2 }' "$budget_file" 2>/dev/null || true)
    if [[ -z "$budget" ]]; then
        printf '%-28s %12s %12s %8s\n' "$path" "${measured[$path]}" "-" "new"
        failed=1
        continue
    fi
    change=$(python3 -c "print(f'{(${measured[$path]} - $budget) / $budget * 100:+.1f}%')")
    flag=""
    if (( ${measured[$path]} * 100 > budget * (100 + tolerance_percent) )); then
        flag="  OVER BUDGET"
        failed=1
    fi
    printf '%-28s %12s %12s %8s%s\n' "$path" "${measured[$path]}" "$budget" "$change" "$flag"
done
if ((failed)); then
    echo "instruction guard failed: a path rose more than ${tolerance_percent}% over its budget (or has none);"
    echo "if the rise is deliberate, run 'bash scripts/instructions.sh --update' and commit the budget with the reason"
    exit 1
fi
echo "instruction guard: every path within ${tolerance_percent}% of its budget"
