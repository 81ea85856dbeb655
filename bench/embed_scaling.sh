#!/usr/bin/env bash
# Many VMs in one process (issue 24's target): examples/embed.rs runs N VMs in
# turn, each a fresh VM and JIT compiling its code (--jit-threshold 0), with the
# jitdump and the GDB JIT interface on, alternating two scripts; prints peak RSS
# and the mapping count at exit for 1,000 and for 30,000 VMs, and the ratio of the
# peaks (target: at most 1.25, and the same mapping count).
#
# Usage: bench/embed_scaling.sh [SMALL [LARGE]]     (default 1000 30000)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
SMALL=${1:-1000}
LARGE=${2:-30000}
cargo build --release --quiet --example embed
EMBED="$(tools/cargo-target-dir)/release/examples/embed"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/toyvm-embed-scaling.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
measure() {
    local start end
    start=$(date +%s.%N)
    "$EMBED" --jit-threshold 0 --perf-jitdump --perf-dir "$WORK" --gdb --stats "$1" \
        tests/embed/alpha.toy tests/embed/beta.toy 2>&1 >/dev/null | grep '^embed:'
    end=$(date +%s.%N)
    rm -f "$WORK"/jit-*.dump
    echo "  ($1 VMs, $(echo "$end - $start" | bc) s)"
}
small=$(measure "$SMALL")
large=$(measure "$LARGE")
echo "$SMALL VMs: $small"
echo "$LARGE VMs: $large"
rss() { echo "$1" | sed -E 's/.*peak RSS ([0-9]+) KB.*/\1/' | head -1; }
echo "peak RSS ratio: $(echo "scale=2; $(rss "$large") / $(rss "$small")" | bc)"
