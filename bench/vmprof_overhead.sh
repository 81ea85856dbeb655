#!/usr/bin/env bash
# What `toyvm run --vmprof` costs: CPU time (user+sys) of every benchmark in
# examples/scripts/bench without profiling, with `--vmprof FILE` and with `--vmprof FILE
# --vmprof-lines` (lines mode) at the default 1 kHz, in the interpreter (--no-jit) and the
# JIT tier (default tier-up), as a Markdown table. Budget: --vmprof at most +5% for the
# interpreter, +2% for the JIT; --vmprof-lines at most +5% in each tier. Optionally the
# same for CPython with the PyPI vmprof (`python -m vmprof -o FILE`, no lines) on the peers
# in bench/peers/py.
#
# Usage (from anywhere):  bench/vmprof_overhead.sh
# Environment:
#   RUNS=7 WARMUP=1     measured runs (after warm-up runs) of each command
#   BENCHES="fib loop calls mandelbrot spectral nbody"
#   TIERS="interp jit"  which toyvm tiers to measure
#   TOYVM=path          default toyvm in Cargo's release directory (built if missing)
#   VMPROF_PYTHON=path  a python with vmprof installed (default: the test venv
#                       target/vmprof-venv-0.6.0/bin/python if present; "" skips CPython)
#   PEERS=bench/peers   the peer programs (only $PEERS/py/*.py is used here)
# CPU time (user+sys, from getrusage), not wall time: the sampler's cost is CPU, and CPU
# time is far less disturbed by other load on the machine. The profile goes to a temporary file (a real file, not /dev/null,
# so the writer does its real work).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-7}
BENCHES=${BENCHES:-"fib loop calls mandelbrot spectral nbody"}
TIERS=${TIERS:-"interp jit"}
WARMUP=${WARMUP:-1}
TOYVM=${TOYVM:-$(tools/cargo-target-dir)/release/toyvm}
PEERS=${PEERS:-bench/peers}
DEFAULT_PY=target/vmprof-venv-0.6.0/bin/python
VMPROF_PYTHON=${VMPROF_PYTHON-$([[ -x $DEFAULT_PY ]] && echo "$DEFAULT_PY" || echo "")}
[[ -x $TOYVM ]] || cargo build --release --quiet
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# Sizes giving about 1-3 s of CPU per run in each tier.
declare -A INTERP_SIZE=([fib]=37 [loop]=300000000 [calls]=100000000 [mandelbrot]=1200 [spectral]=1000 [nbody]=1000000)
declare -A JIT_SIZE=([fib]=40 [loop]=300000000 [calls]=2000000000 [mandelbrot]=4000 [spectral]=4000 [nbody]=10000000)
declare -A PY_SIZE=([fib]=30 [loop]=10000000 [calls]=5000000 [mandelbrot]=300 [spectral]=200 [nbody]=200000)

# cpu_seconds CMD... -> user+sys seconds of one run (output discarded), from getrusage
# (microseconds; /usr/bin/time only has centiseconds)
cpu_seconds() {
    python3 -c '
import resource, subprocess, sys
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(r.ru_utime + r.ru_stime)' "$@"
}

# measure NAME "PLAIN CMD" "PROFILED CMD" ["LINES CMD"] -> one table row. The commands
# alternate (so slow drifts in machine load hit all alike), WARMUP+RUNS times each, and the
# row compares the medians (robust when a benchmark is bimodal: the interpreter's fib runs
# 0.75 s or 0.85 s from one process to the next, with or without profiling) and, as a
# second opinion, the minima (the runs least disturbed by other load).
measure() {
    local name=$1 cmds=("${@:2}") runs=() i c
    for ((i = 0; i < WARMUP + RUNS; i++)); do
        for c in "${!cmds[@]}"; do
            # shellcheck disable=SC2086 # the commands are word lists
            runs[c]+="$(cpu_seconds ${cmds[c]}) "
        done
    done
    python3 - "$name" "$WARMUP" "${runs[@]}" <<'PY'
import statistics, sys
name, warmup = sys.argv[1], int(sys.argv[2])
series = [[float(x) for x in arg.split()[warmup:]] for arg in sys.argv[3:]]
plain = series[0]
cells = [f"{statistics.median(s):.3f}" for s in series]
for s in series[1:]:
    med = 100 * (statistics.median(s) - statistics.median(plain)) / statistics.median(plain)
    low = 100 * (min(s) - min(plain)) / min(plain)
    cells.append(f"{med:+.1f}% / {low:+.1f}%")
if len(series) == 2:  # no lines mode (CPython): its two columns are empty
    cells = [cells[0], cells[1], "-", cells[2], "-"]
print(f"| {name} | " + " | ".join(cells) + " |")
PY
}

echo "| benchmark | CPU s (median) | with --vmprof | with --vmprof-lines | --vmprof overhead (medians / minima) | --vmprof-lines overhead (medians / minima) |"
echo "|---|---:|---:|---:|---:|---:|"
# toyvm_rows TIER LABEL "FLAGS" SIZES -> one row per benchmark, if TIER is in $TIERS
toyvm_rows() {
    local tier=$1 label=$2 flags=$3 bench script
    local -n sizes=$4
    [[ " $TIERS " == *" $tier "* ]] || return 0
    for bench in $BENCHES; do
        script=examples/scripts/bench/$bench.toy
        measure "$label $bench ${sizes[$bench]}" \
            "$TOYVM run $flags $script ${sizes[$bench]}" \
            "$TOYVM run $flags --vmprof $TMP/p.prof $script ${sizes[$bench]}" \
            "$TOYVM run $flags --vmprof $TMP/p.prof --vmprof-lines $script ${sizes[$bench]}"
    done
}
toyvm_rows interp "toyvm --no-jit" "--no-jit" INTERP_SIZE
toyvm_rows jit "toyvm (JIT)" "" JIT_SIZE
if [[ -n $VMPROF_PYTHON ]]; then
    for bench in $BENCHES; do
        script=$PEERS/py/$bench.py
        [[ -f $script ]] || continue
        measure "CPython + vmprof $bench ${PY_SIZE[$bench]}" \
            "$VMPROF_PYTHON $script ${PY_SIZE[$bench]}" \
            "$VMPROF_PYTHON -m vmprof -o $TMP/py.prof $script ${PY_SIZE[$bench]}"
    done
fi
