#!/usr/bin/env bash
# Where perf puts the JIT's samples: for every benchmark in examples/scripts/bench, run in
# the JIT tier (default tier-up) under `perf record` with `--perf-jitdump`, then
# `perf inject --jit` and `perf report --sort sym,srcline`, and print the share of the
# compiled code's samples (symbols `toy:jit...`) that land on their function's `fn` line,
# with today's line tables and with the old fallback (TOYVM_JIT_OLD_LINE_FALLBACK=1: every
# instruction Cranelift left without a source location on the `fn` line). Budget: at most
# 5% on `fn` lines. Shares of samples, not timings: a busy machine does not change them.
#
# Usage (from anywhere):  bench/line_attribution.sh
# Environment:
#   BENCHES="fib loop calls mandelbrot spectral nbody"
#   TOYVM=path    default target/release/toyvm (built if missing)
#   FREQ=999      perf sampling frequency (cpu-clock)
# A region's symbol ends with its function's `fn` line (`toy:jit:work:/path/loop.toy:2`, an
# OSR variant's with `@PC` after it), so a row is on the `fn` line when its srcline
# `file.toy:N` has that same N. (`<main>`'s `fn` line is line 1.)
set -euo pipefail
cd "$(dirname "$0")/.."
BENCHES=${BENCHES:-"fib loop calls mandelbrot spectral nbody"}
TOYVM=${TOYVM:-target/release/toyvm}
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

# fn_line_share NAME [ENV=VALUE] -> "JIT_SAMPLES FN_LINE_PERCENT"
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
            END { printf "%d %.1f\n", total, total ? 100 * fn / total : 0 }'
    rm -rf "$dir"
}

echo "| benchmark | JIT samples | on \`fn\` lines, old fallback | on \`fn\` lines, now |"
echo "|---|---:|---:|---:|"
for name in $BENCHES; do
    read -r _ old <<<"$(fn_line_share "$name" TOYVM_JIT_OLD_LINE_FALLBACK=1)"
    read -r samples now <<<"$(fn_line_share "$name" "")"
    echo "| $name | $samples | $old% | $now% |"
done
