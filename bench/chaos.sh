#!/usr/bin/env bash
# Long chaos run for the profiler outputs (tests/chaos.rs): kills runs under
# --perf, --perf-jitdump (inside perf record) and --vmprof at random moments
# with random signals and checks every file left behind.
#
#   bench/chaos.sh [RUNS] [SEED]      # default 300 kills, a time-based seed
#
# The seed is printed; pass it back to replay a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-300}
if [ $# -ge 2 ]; then
    export CHAOS_SEED="$2"
fi
uptime
CHAOS_RUNS=$runs cargo test --release --test chaos -- --nocapture 2>&1 \
    | grep -E '^chaos:|panicked|test result'
