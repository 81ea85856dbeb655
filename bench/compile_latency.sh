#!/usr/bin/env bash
# JIT compile latency: what `toyvm run --jit-threshold 0 --jit-stats` reports per compiled
# function (its native function + entry shim if built + its share of the batch finalize).
#
# 1. A generated script of 100 small functions, each with a loop
#    (`fn fK(a: int, b: int) -> int { let s = 0; for k in 0..a { s = s + k * b + K; } return s; }`,
#    K = 0..99) plus a `<main>` calling them once: median and p90 over its 100 functions,
#    per run (one process each), then the best run (lowest median) and the median run.
# 2. Every function of the six examples/scripts/bench/*.toy at threshold 0 (small sizes, they
#    only need to start): the median over the runs of each function's figure.
#
# Usage (from anywhere):  bench/compile_latency.sh
# Environment:
#   RUNS=15           processes per script
#   TOYVM=path        default toyvm in Cargo's release directory (built if missing)
# Wall-clock figures: run it on a quiet machine (check `uptime`) and repeat if in doubt.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-15}
TOYVM=${TOYVM:-$(tools/cargo-target-dir)/release/toyvm}
[[ -x $TOYVM ]] || cargo build --release --quiet
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# The 100-function script.
{
    for k in $(seq 0 99); do
        echo "fn f$k(a: int, b: int) -> int {"
        echo "    let s = 0;"
        echo "    for k in 0..a { s = s + k * b + $k; }"
        echo "    return s;"
        echo "}"
    done
    echo "let t = 0;"
    for k in $(seq 0 99); do echo "t = t + f$k(3, 4);"; done
    echo "print(t);"
} >"$TMP/many.toy"

# run_stats OUT SCRIPT ARGS...: RUNS runs, one `jit-stats` file per run in OUT.
run_stats() {
    local out=$1
    shift
    mkdir -p "$out"
    for r in $(seq 1 "$RUNS"); do
        "$TOYVM" run --jit-threshold 0 --jit-stats "$@" 2>"$out/$r" >/dev/null
    done
}

run_stats "$TMP/many" "$TMP/many.toy"
declare -A SIZE=([fib]=1 [loop]=1 [calls]=1 [mandelbrot]=1 [spectral]=1 [nbody]=1)
for b in fib loop calls mandelbrot spectral nbody; do
    run_stats "$TMP/$b" examples/scripts/bench/$b.toy "${SIZE[$b]}"
done

python3 - "$TMP" "$RUNS" <<'EOF'
import os, re, statistics, sys
tmp, runs = sys.argv[1], int(sys.argv[2])
line = re.compile(r"^jit-stats: (.*): (\d+) us$")

def parse(path):
    """(name, µs) of the whole-function compiles in one run (no OSR lines)."""
    rows = []
    for text in open(path, encoding="utf-8"):
        m = line.match(text.strip())
        if m and " (OSR)" not in m.group(1):
            rows.append((m.group(1), int(m.group(2))))
    return rows

def p90(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(0.9 * (len(xs) - 1))))]

per_run = []
for r in range(1, runs + 1):
    times = [t for name, t in parse(f"{tmp}/many/{r}") if re.fullmatch(r"f\d+", name)]
    if len(times) != 100:
        sys.exit(f"run {r}: {len(times)} functions compiled, expected 100")
    per_run.append((statistics.median(times), p90(times), max(times)))
per_run.sort()
best, mid = per_run[0], per_run[len(per_run) // 2]
print(f"100 small functions, {runs} runs (per run: median / p90 / max over f0..f99, us)")
print(f"  best run:   median {best[0]:.0f}  p90 {best[1]}  max {best[2]}")
print(f"  median run: median {mid[0]:.0f}  p90 {mid[1]}  max {mid[2]}")
print()
print(f"examples/scripts/bench at threshold 0: per function, median of {runs} runs (us)")
for b in ["fib", "loop", "calls", "mandelbrot", "spectral", "nbody"]:
    by_name = {}
    for r in range(1, runs + 1):
        for name, t in parse(f"{tmp}/{b}/{r}"):
            by_name.setdefault(name, []).append(t)
    cells = ", ".join(f"{n} {statistics.median(ts):.0f}" for n, ts in by_name.items())
    print(f"  {b}: {cells}")
EOF
