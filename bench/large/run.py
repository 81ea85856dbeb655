#!/usr/bin/env python3
"""Time the large-program benchmarks in every toyvm tier (issue: the JIT in the large).

Usage (from anywhere):  bench/large/run.py [--runs N] [--toyvm PATH] [--shapes a,b]
                                          [--extra NAME=PATH ...]

For each program (the generated shapes of gen.py, plus calc.toy) and each tier
(interpreter `--no-jit`, default tier-up, eager `--jit-threshold 0`) it runs the program
N times (default 3) and prints one Markdown table: the median and the minimum wall time, the median CPU
time (user + sys), the peak RSS (max over runs), the number of compilations and their
total time as `--jit-stats` reports them, and the default tier's wall time as a multiple
of the faster of the other two (the target is at most 1.10). Every run's stdout must equal
the interpreter's, or the script stops with an error.

`--extra NAME=PATH` adds another toyvm binary as more columns of tiers (e.g. the binary
of main before a change), so before/after comparisons come from one run on one machine.

Peak RSS and CPU come from GNU time (`/usr/bin/time -f %M`); wall time is measured here
to the microsecond (GNU time's has 10 ms steps). Each round runs every binary and tier once,
so a change of the machine's speed hits them alike; the table gives medians and minima.
Run it on a quiet machine (`uptime`); 2-3 runs are enough to see 10% effects here.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
import cargo_dirs  # noqa: E402 (bench/cargo_dirs.py)
TIERS = [("interp", ["--no-jit"]), ("default", []), ("eager", ["--jit-threshold", "0"])]
STATS = re.compile(r"^jit-stats: .*: (\d+) us$", re.M)


def run_once(toyvm, flags, script):
    """One run: (stdout, wall s, cpu s, peak KiB, compiles, compile ms)."""
    with tempfile.NamedTemporaryFile("r") as report:
        cmd = ["/usr/bin/time", "-f", "%U %S %M", "-o", report.name,
               toyvm, "run", "--jit-stats"] + flags + [script]
        started = time.perf_counter()
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wall = time.perf_counter() - started
        fields = report.read().split()[-3:]
    if proc.returncode != 0:
        sys.exit("%s: exit %d\n%s" % (" ".join(cmd[5:]), proc.returncode, proc.stderr[-2000:]))
    user, sys_, rss = float(fields[0]), float(fields[1]), int(fields[2])
    times = [int(us) for us in STATS.findall(proc.stderr)]
    return proc.stdout, wall, user + sys_, rss, len(times), sum(times) / 1000.0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--toyvm", default=os.path.join(cargo_dirs.release_dir(), "toyvm"))
    ap.add_argument("--shapes", default="warm,small,fewhot,huge,calc")
    ap.add_argument("--extra", action="append", default=[], help="NAME=PATH of another toyvm")
    args = ap.parse_args()
    binaries = [("", args.toyvm)] + [tuple(e.split("=", 1)) for e in args.extra]
    sys.path.insert(0, HERE)
    import gen

    with tempfile.TemporaryDirectory() as tmp:
        scripts = []
        for shape in args.shapes.split(","):
            if shape == "calc":
                scripts.append(("calc", os.path.join(HERE, "calc.toy")))
            else:
                path = os.path.join(tmp, shape + ".toy")
                with open(path, "w") as f:
                    f.write(gen.SHAPES[shape]())
                scripts.append((shape, path))

        print("| program | binary | tier | wall s | wall min s | CPU s | peak RSS MiB | compiles "
              "| compile ms | default / best other (medians; minima) |")
        print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
        for name, script in scripts:
            # Every binary and tier once per round, so that a change of the
            # machine's speed during the run hits them all alike.
            results = {}
            for _ in range(args.runs):
                for label, toyvm in binaries:
                    for tier, flags in TIERS:
                        results.setdefault((label, tier), []).append(run_once(toyvm, flags, script))
            expected = results[(binaries[0][0], "interp")][0][0]
            for (label, tier), rs in results.items():
                if any(out != expected for out, *_ in rs):
                    sys.exit("%s %s %s: output differs from the interpreter" % (name, label, tier))
            for label, _ in binaries:
                walls, mins = {}, {}
                for tier, _ in TIERS:
                    rs = results[(label, tier)]
                    wall = statistics.median(r[1] for r in rs)
                    cpu = statistics.median(r[2] for r in rs)
                    rss = max(r[3] for r in rs) / 1024.0
                    compiles = rs[0][4]
                    compile_ms = statistics.median(r[5] for r in rs)
                    walls[tier], mins[tier] = wall, min(r[1] for r in rs)
                    ratio = ""
                    if tier == "eager":
                        ratio = "%.2f; %.2f" % (
                            walls["default"] / min(walls["interp"], walls["eager"]),
                            mins["default"] / min(mins["interp"], mins["eager"]))
                    print("| %s | %s | %s | %.3f | %.3f | %.3f | %.1f | %d | %.1f | %s |" % (
                        name, label or "this", tier, wall, mins[tier], cpu, rss, compiles,
                        compile_ms, ratio))
                    sys.stdout.flush()


if __name__ == "__main__":
    main()
