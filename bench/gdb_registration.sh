#!/usr/bin/env bash
# Cost of the GDB JIT interface (`toyvm run --gdb`) on a generated script of
# 5,000 small functions, each called from <main>:
#
#   batching      how the JIT finalizes: `--jit-threshold 0` compiles every
#                 function before the script runs (a few batches, so a few
#                 ELF objects); `--jit-threshold 1` compiles each function on
#                 its second call (about one batch, one object, per function)
#   no --gdb      the run without the interface (the baseline)
#   --gdb         the interface on, no debugger attached (build + publish)
#   --gdb in gdb  the same under `gdb -batch -ex run` (gdb loads every object)
#
# Each figure is the median wall time of RUNS runs, in seconds.
#
# Usage (from anywhere):  bench/gdb_registration.sh
# Environment:
#   RUNS=5            runs per cell
#   FUNCTIONS=5000    functions in the generated script
#   TOYVM=path        default toyvm in Cargo's release directory (built if missing)
# Wall-clock figures: run it on a quiet machine (check `uptime`).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-5}
FUNCTIONS=${FUNCTIONS:-5000}
TOYVM=${TOYVM:-$(tools/cargo-target-dir)/release/toyvm}
[[ -x $TOYVM ]] || cargo build --release --quiet
command -v gdb >/dev/null || { echo "gdb_registration.sh: needs gdb" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

{
    for k in $(seq 0 $((FUNCTIONS - 1))); do
        echo "fn f$k(a: int) -> int { return a * 3 + $k; }"
    done
    echo "let t = 0;"
    echo "for r in 0..2 {"
    for k in $(seq 0 $((FUNCTIONS - 1))); do echo "    t = t + f$k(r);"; done
    echo "}"
    echo "print(t);"
} >"$TMP/many.toy"

# median_time CMD...: the median wall time of RUNS runs of CMD, in seconds.
median_time() {
    local times=()
    for _ in $(seq "$RUNS"); do
        local start end
        start=$(date +%s.%N)
        "$@" >/dev/null 2>&1
        end=$(date +%s.%N)
        times+=("$(awk -v s="$start" -v e="$end" 'BEGIN { print e - s }')")
    done
    printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {printf "%.3f", a[int((NR+1)/2)]}'
}

echo "| batching ($FUNCTIONS functions) | no --gdb | --gdb | --gdb in gdb |"
echo "|---|---|---|---|"
for threshold in 0 1; do
    flags=(run --jit-threshold "$threshold")
    base=$(median_time "$TOYVM" "${flags[@]}" "$TMP/many.toy")
    gdb_flag=$(median_time "$TOYVM" "${flags[@]}" --gdb "$TMP/many.toy")
    debugged=$(median_time gdb -nx -batch -ex run --args "$TOYVM" "${flags[@]}" --gdb "$TMP/many.toy")
    echo "| --jit-threshold $threshold | $base s | $gdb_flag s | $debugged s |"
done
