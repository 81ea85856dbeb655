#!/usr/bin/env python3
"""A/B: the six benchmarks under two toyvm binaries, in every tier, in one run.

Usage:  bench/ab.py BEFORE AFTER [--runs N] [--size default|large] [--after-flags "FLAGS"]
                    [--bench NAME]...

For every benchmark of examples/scripts/bench and every tier (interpreter `--no-jit`,
default tier-up, eager `--jit-threshold 0`) it runs BEFORE and AFTER alternately N times
(default 5), so that a change of machine load hits both alike, and prints the median and
the minimum CPU time (user + sys of every thread, from GNU time) of each, with
AFTER/BEFORE of the medians, and the same for wall time (measured here, to the
microsecond: the default tier compiles on a second thread, whose CPU time counts in the
first measure and not in the second). Outputs of the two binaries must be identical, or it stops with an error.
`--after-flags` adds flags to AFTER's runs only: one binary against itself with an option
(`bench/ab.py T T --after-flags "--jit-elf --perf-dir /tmp/x"`) shows what the option costs.
This is how a change to vm/ or jit/ shows it did not make any benchmark slower:
keep the binary of main before the change
(cp "$(tools/cargo-target-dir)/release/toyvm" /tmp/toyvm-before).
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCHES = ["fib", "loop", "calls", "mandelbrot", "spectral", "nbody"]
# The sizes bench/run.sh uses (default: every tier; large: the JIT tiers).
SIZES = {
    "default": {"fib": "32", "loop": "10000000", "calls": "10000000", "mandelbrot": "400",
                "spectral": "250", "nbody": "100000"},
    "large": {"fib": "40", "loop": "100000000", "calls": "100000000", "mandelbrot": "2000",
              "spectral": "2000", "nbody": "5000000"},
}
TIERS = [("interp", ["--no-jit"]), ("default", []), ("eager", ["--jit-threshold", "0"])]


def cpu_and_wall(toyvm, flags, script, size):
    """CPU (user + sys) and wall seconds of one run, and its output."""
    with tempfile.NamedTemporaryFile("r") as report:
        started = time.perf_counter()
        proc = subprocess.run(["/usr/bin/time", "-f", "%U %S", "-o", report.name, toyvm, "run"]
                              + flags + [script, size], stdout=subprocess.PIPE, text=True)
        wall = time.perf_counter() - started
        user, sys_ = report.read().split()[-2:]
    if proc.returncode != 0:
        sys.exit("%s %s %s: exit %d" % (toyvm, " ".join(flags), script, proc.returncode))
    return float(user) + float(sys_), wall, proc.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--size", default="default", choices=SIZES)
    ap.add_argument("--after-flags", default="", help="extra flags for AFTER's runs")
    ap.add_argument("--bench", action="append", choices=BENCHES,
                    help="only this benchmark (repeatable; default: all six)")
    args = ap.parse_args()
    tiers = TIERS if args.size == "default" else TIERS[1:]
    print("| benchmark | tier | CPU before median s | after | before min | after min | after/before "
          "| wall before median s | after | before min | after min | after/before |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for bench in args.bench or BENCHES:
        script = os.path.join(ROOT, "examples/scripts/bench", bench + ".toy")
        size = SIZES[args.size][bench]
        for tier, flags in tiers:
            cpu = {"before": [], "after": []}
            wall = {"before": [], "after": []}
            outputs = set()
            for _ in range(args.runs):
                for which in ("before", "after"):
                    extra = args.after_flags.split() if which == "after" else []
                    c, w, out = cpu_and_wall(getattr(args, which), extra + flags, script, size)
                    cpu[which].append(c)
                    wall[which].append(w)
                    outputs.add(out)
            if len(outputs) != 1:
                sys.exit("%s %s: the two binaries print different results" % (bench, tier))
            cells = []
            for times in (cpu, wall):
                b, a = statistics.median(times["before"]), statistics.median(times["after"])
                cells.append("%.3f | %.3f | %.3f | %.3f | %.2f" % (
                    b, a, min(times["before"]), min(times["after"]), a / b if b else 0))
            print("| %s | %s | %s |" % (bench, tier, " | ".join(cells)))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
