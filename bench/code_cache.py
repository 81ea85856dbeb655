#!/usr/bin/env python3
"""The bounded code cache under pressure: examples/scripts/phases.toy (eight functions
hot one after another, in rounds) in the default tiering with no code limit, with a limit
above its working set, with limits that hold only a few of its functions, and
interpreted.

Usage:  bench/code_cache.py [--toyvm PATH] [--runs N] [--rounds R] [--size S]

Each round of runs executes every configuration once (so a change of machine load hits
all alike); the table gives the median wall and CPU time (user + sys, GNU time) of each,
its evictions and recompiles (`--jit-stats`), and its wall time as a multiple of no limit
and of `--no-jit`. The targets (issue "code that dies"): a limit above the working set
within noise of no limit; a limit that holds a few of the functions at most 1.10x no
limit; any limit never more than 1.10x `--no-jit`. Every run's stdout must equal the
interpreter's.
"""
import argparse, os, re, statistics, subprocess, sys, time

import cargo_dirs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "examples/scripts/phases.toy")
CONFIGS = [
    ("no limit", []),
    ("limit 1M (above the working set)", ["--jit-code-limit", "1M"]),
    ("limit 32K", ["--jit-code-limit", "32K"]),
    ("limit 16K", ["--jit-code-limit", "16K"]),
    ("limit 12K", ["--jit-code-limit", "12K"]),
    ("--no-jit", ["--no-jit"]),
]


def run(toyvm, flags, args):
    cmd = ["/usr/bin/time", "-f", "%U %S", toyvm, "run", *flags]
    if "--no-jit" not in flags:
        cmd.append("--jit-stats")
    cmd += [SCRIPT, *args]
    start = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{p.stderr}")
    lines = p.stderr.strip().splitlines()
    user, sys_ = map(float, lines[-1].split())
    m = re.search(r"(\d+) evictions, (\d+) recompiles", p.stderr)
    counts = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
    return p.stdout, wall, user + sys_, counts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--toyvm", default=os.path.join(cargo_dirs.release_dir(), "toyvm"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--rounds", default="6")
    ap.add_argument("--size", default="60000")
    a = ap.parse_args()
    args = [a.rounds, a.size]
    results = {name: [] for name, _ in CONFIGS}
    reference = None
    for _ in range(a.runs):
        for name, flags in CONFIGS:
            out, wall, cpu, counts = run(a.toyvm, flags, args)
            if name == "--no-jit":
                reference = reference or out
            results[name].append((wall, cpu, counts, out))
    for name, rs in results.items():
        for r in rs:
            if r[3] != reference:
                sys.exit(f"{name}: output differs from --no-jit")
    med = {n: statistics.median(r[0] for r in rs) for n, rs in results.items()}
    print(f"phases.toy {' '.join(args)}, {a.runs} runs each, {a.toyvm}\n")
    print("| configuration | wall s | CPU s | evictions | recompiles | / no limit | / --no-jit |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, rs in results.items():
        cpu = statistics.median(r[1] for r in rs)
        ev, rc = rs[0][2]
        print(f"| {name} | {med[name]:.3f} | {cpu:.2f} | {ev} | {rc} | "
              f"{med[name] / med['no limit']:.2f} | {med[name] / med['--no-jit']:.2f} |")


if __name__ == "__main__":
    main()
