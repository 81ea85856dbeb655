#!/usr/bin/env bash
# Compile cost against function size: the measurements behind the JIT's
# compile budget (jit/src/translate/limits.rs, MAX_COMPILED_OPS).
#
# For straight-line `main`s of growing size (the `huge` shape of
# bench/large/gen.py, at top level), runs `toyvm run --jit-threshold 0`
# with the budget lifted (TOYVM_JIT_MAX_OPS) and prints the function's size
# in bytecode instructions, its compile time (--jit-stats) and the peak RSS
# of the run minus that of the interpreted run (--no-jit).
#
# Usage: bench/compile_budget.sh [LINES...]   (default 500 1000 2000 4000 8000)
#        SHAPE=branchy bench/compile_budget.sh [LINES...]
# SHAPE=straight (the default): one assignment per line, a single block.
# SHAPE=branchy: one loop with an if/else per line, about 11 instructions
# and 5 blocks a line (the register allocator's harder case).
# Needs a release build (toyvm in Cargo's release directory) and GNU time (/usr/bin/time).
set -euo pipefail
cd "$(dirname "$0")/.."
toyvm=$(tools/cargo-target-dir)/release/toyvm
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
sizes=("$@")
shape=${SHAPE:-straight}
[ ${#sizes[@]} -gt 0 ] || sizes=(500 1000 2000 4000 8000)

peak_kb() { # peak RSS in KB of the command
    /usr/bin/time -f '%M' -o "$dir/time" "$@" > /dev/null 2>> "$dir/stderr"
    cat "$dir/time"
}

printf '| lines | instructions | compile time (ms) | extra peak RSS (MB) |\n'
printf '|------:|-------------:|------------------:|--------------------:|\n'
for n in "${sizes[@]}"; do
    script="$dir/s$n.toy"
    {
        echo 'let x = 1;'
        echo 'let y = 2;'
        for ((k = 0; k < n; k++)); do
            if [ "$shape" = branchy ]; then
                echo "for i in 0..2 { if i % $((k + 2)) == 0 { x = (x + i * $k) & 16777215; } else { y = y - 1; } }"
            elif ((k % 2 == 0)); then
                echo "x = (x * $((k % 13 + 3)) + y) & 16777215;"
            else
                echo "y = (y + x + $k) & 16777215;"
            fi
        done
        echo 'print(x + y);'
    } > "$script"
    ops=$(TOYVM_JIT_MAX_OPS=0 "$toyvm" run --jit-threshold 0 --jit-stats "$script" 2>&1 >/dev/null |
        sed -n 's/^jit-stats: <main>: not compiled: \([0-9]*\) instructions.*/\1/p')
    : > "$dir/stderr"
    base=$(peak_kb "$toyvm" run --no-jit "$script")
    jit=$(TOYVM_JIT_MAX_OPS=100000000 peak_kb "$toyvm" run --jit-threshold 0 --jit-stats "$script")
    us=$(sed -n 's/^jit-stats: <main>: \([0-9]*\) us$/\1/p' "$dir/stderr")
    printf '| %d | %s | %s | %s |\n' "$n" "$ops" \
        "$(awk -v u="${us:-0}" 'BEGIN { printf "%.1f", u / 1000 }')" \
        "$(awk -v a="$jit" -v b="$base" 'BEGIN { printf "%.1f", (a - b) / 1024 }')"
done
