#!/usr/bin/env bash
# The C API's cost against the Rust API (issue 13.8): one perf map entry
# and one jitdump region with unwind info and a line table, both APIs in
# the same process and run (perfsupport-capi/benches/capi_cost.rs). Prints
# a markdown table for bench/RESULTS.md. Take the numbers on a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p perfsupport-capi
cargo bench -q -p perfsupport-capi --bench capi_cost 2>/dev/null
