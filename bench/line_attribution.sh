#!/usr/bin/env bash
# Where perf puts the JIT's samples: for every benchmark in examples/scripts/bench, run in
# the JIT tier (default tier-up) under `perf record` with `--perf-jitdump`, then
# `perf inject --jit` and `perf report --sort sym,srcline`, and print the share of the
# compiled code's samples (symbols `toy:jit...`) that land on their function's `fn` line,
# with today's line tables and with the old fallback (TOYVM_JIT_OLD_LINE_FALLBACK=1: every
# instruction Cranelift left without a source location on the `fn` line), then the share
# over all six, pooled and as the mean of the six shares. Budget: at most 5% on `fn` lines
# over the six. Shares of samples, not timings: a busy machine does not change them.
#
# Usage (from anywhere):  bench/line_attribution.sh
# Environment:
#   BENCHES="fib loop calls mandelbrot spectral nbody"
#   TOYVM=path    default toyvm in Cargo's release directory (built if missing)
#   FREQ=999      perf sampling frequency (cpu-clock)
# A region's symbol ends with its function's `fn` line (`toy:jit:work:/path/loop.toy:2`,
# `toy:jit-osr:work:/path/loop.toy:2`), so a row is on the `fn` line when its srcline
# `file.toy:N` has that same N. (`<main>`'s `fn` line is line 1.)
set -euo pipefail
cd "$(dirname "$0")/.."
BENCHES=${BENCHES:-"fib loop calls mandelbrot spectral nbody"}
TOYVM=${TOYVM:-$(tools/cargo-target-dir)/release/toyvm}
FREQ=${FREQ:-999}
[[ -x $TOYVM ]] || cargo build --release --quiet
TOYVM=$(realpath "$TOYVM")
# Not under /tmp/perf-: perf would read files there as perf maps.
TMP=$(mktemp -d /tmp/toyvm-line-attribution.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP/buildid"
printf '[buildid]\n\tdir = %s\n' "$TMP/buildid" >"$TMP/perfconfig"
export PERF_CONFIG=$TMP/perfconfig DEBUGINFOD_URLS=

# Sizes giving about a second of compiled code.
declare -A SIZE=([fib]=36 [loop]=100000000 [calls]=300000000 [mandelbrot]=1500 [spectral]=1500 [nbody]=3000000)

# fn_line_share NAME [ENV=VALUE] -> "JIT_SAMPLES FN_LINE_SAMPLES FN_LINE_PERCENT"
fn_line_share() {
    local name=$1 dir="$TMP/$1$2"
    mkdir -p "$dir"
    (cd "$dir" && env ${2:+"$2"} perf record -q -e cpu-clock -F "$FREQ" -k 1 -o perf.data -- \
        "$TOYVM" run --perf-jitdump --perf-dir "$dir" \
        "$OLDPWD/examples/scripts/bench/$name.toy" "${SIZE[$name]}" >/dev/null &&
        perf inject --jit -i perf.data -o perf.jit.data &&
        perf report --no-inline -i perf.jit.data --stdio --sort sym,srcline -g none -F overhead,sample,sym,srcline 2>/dev/null) |
        awk '
            $4 ~ /^toy:jit/ {
                n = split($4, sym, ":"); fnline = sym[n]; sub(/@.*/, "", fnline)
                m = split($5, src, ":"); line = src[m]
                total += $2; if (line == fnline) fn += $2
            }
            END { printf "%d %d %.1f\n", total, fn, total ? 100 * fn / total : 0 }'
    rm -rf "$dir"
}

echo "| benchmark | JIT samples | on \`fn\` lines, old fallback | on \`fn\` lines, now |"
echo "|---|---:|---:|---:|"
# Totals for the two summary rows: pooled (all samples together, so a benchmark
# weighs by its sample count) and the mean of the six shares (each weighs the same,
# whatever its size).
all_old=0 all_old_fn=0 all=0 all_fn=0 sum_old=0 sum_now=0 n=0
for name in $BENCHES; do
    read -r old_samples old_fn old <<<"$(fn_line_share "$name" TOYVM_JIT_OLD_LINE_FALLBACK=1)"
    read -r samples fn now <<<"$(fn_line_share "$name" "")"
    echo "| $name | $samples | $old% | $now% |"
    all_old=$((all_old + old_samples)) all_old_fn=$((all_old_fn + old_fn))
    all=$((all + samples)) all_fn=$((all_fn + fn))
    sum_old=$(awk -v a="$sum_old" -v b="$old" 'BEGIN { print a + b }')
    sum_now=$(awk -v a="$sum_now" -v b="$now" 'BEGIN { print a + b }')
    n=$((n + 1))
done
awk -v s="$all" -v of="$all_old_fn" -v os="$all_old" -v f="$all_fn" 'BEGIN {
    printf "| all, pooled | %d | %.1f%% | %.1f%% |\n", s, os ? 100 * of / os : 0, s ? 100 * f / s : 0 }'
awk -v n="$n" -v o="$sum_old" -v w="$sum_now" 'BEGIN {
    printf "| mean of the %d shares | | %.1f%% | %.1f%% |\n", n, n ? o / n : 0, n ? w / n : 0 }'
