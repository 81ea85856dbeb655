#!/usr/bin/env python3
"""Does profiling change the run? CPU time with and without a slowdown,
per vmprof mode, for the slowdown experiment (bench/accuracy.py).

Usage:  bench/observer.py [--toyvm PATH] [--tier no-jit|jit] [--reps N]
                          [--intervals US,US...] LINE:NANOS SCRIPT ARGS...

The experiment predicts a route's shares from CPU times measured without a
profiler (T0, and T1 with `--slow-line LINE:NANOS`). That holds only if the
profiler slows the program's own code and the slowdown's loop by the same
factor. This measures T0, T1 and T0 / T1 for the program as it is and
under each vmprof mode (`--vmprof`, `--vmprof --vmprof-lines`) at each
sampling interval, the runs interleaved (a machine that slows down for a
while slows every mode alike) with address-space randomization off and a
layout pad drawn for every run, as the harness runs them (without the
pad, each mode's command line is one layout, and the difference between
layouts is what this measured: see accuracy.layout_pad). An interval of
100000 us (10 samples a second) shows what the mode itself does, with
next to no signals.

A mode whose T0 / T1 is lower than the plain run's by d puts the slowed
line about d above the prediction made from the plain runs (for a line
with a small share before; higher by d, below it): that part of a
difference in bench/accuracy.py is the profiler changing the run, not
the samples going to the wrong place.
"""
import argparse
import os
import statistics

from accuracy import (TIERS, Work, absolute, default_toyvm, layout_pad,
                      same_layout_every_run, vmprof_flags)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--toyvm", default=None)
    parser.add_argument("--tier", default="no-jit", choices=list(TIERS))
    parser.add_argument("--reps", type=int, default=6, help="at least 2")
    parser.add_argument("--intervals", default="100000,1000,250")
    parser.add_argument("slow", metavar="LINE:NANOS")
    parser.add_argument("script")
    parser.add_argument("args", nargs="*")
    opts = parser.parse_args()
    if opts.reps < 2:
        parser.error("--reps must be at least 2 (the spread needs two)")
    toyvm = absolute(opts.toyvm) if opts.toyvm else default_toyvm()
    script = os.path.abspath(opts.script)
    same_layout_every_run()
    work = Work()
    prof = work.path("observer.prof")
    modes = {"plain": []}
    for interval in opts.intervals.split(","):
        modes[f"vmprof @{interval} us"] = vmprof_flags(prof, False, interval)
        modes[f"vmprof-lines @{interval} us"] = vmprof_flags(prof, True, interval)
    times = {mode: [] for mode in modes}
    try:
        for _ in range(opts.reps):
            for mode, flags in modes.items():
                run = [toyvm, "run"] + TIERS[opts.tier] + flags
                t0 = work.cpu(run + [script] + opts.args + layout_pad())
                t1 = work.cpu(run + [f"--slow-line={opts.slow}", script] + opts.args
                              + layout_pad())
                times[mode].append((t0, t1))
    finally:
        work.close()
    print("| mode | T0 s | T1 s | T1 - T0 s | T0/T1 | sd | vs plain |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    plain = statistics.fmean(a / b for a, b in times["plain"])
    for mode, pairs in times.items():
        ratios = [a / b for a, b in pairs]
        t0 = statistics.fmean(a for a, _ in pairs)
        t1 = statistics.fmean(b for _, b in pairs)
        r = statistics.fmean(ratios)
        print(f"| {mode} | {t0:.3f} | {t1:.3f} | {t1 - t0:.3f} | {r:.4f} | "
              f"{statistics.stdev(ratios):.4f} | {r - plain:+.4f} |")


if __name__ == "__main__":
    main()
