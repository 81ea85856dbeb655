#!/bin/sh
# Times the interpreter on the peer benchmarks (default sizes): CPU seconds
# (user+sys) per benchmark, best of N runs. Usage: run.sh [TOYRUN] [N]
# Build first: cargo build --release -p vm --example toyrun
dir=$(dirname "$0")
bin=${1:-$dir/../../../target/release/examples/toyrun}
runs=${2:-3}
for b in fib loop calls mandelbrot spectral nbody; do
    best=
    for _ in $(seq "$runs"); do
        t=$( { /usr/bin/time -f "%U %S" "$bin" "$dir/$b.toy" >/dev/null; } 2>&1 | awk '{print $1 + $2}')
        if [ -z "$best" ] || [ "$(echo "$t < $best" | bc)" = 1 ]; then best=$t; fi
    done
    echo "$b $best"
done
