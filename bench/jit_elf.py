#!/usr/bin/env python3
"""What `--jit-elf` costs and how it scales (issue 33, item 4).

Usage:  bench/jit_elf.py [--toyvm PATH] [--runs N] [--functions N] [--skip-perf]

1. Compile latency per batch: 100 functions with a loop, each called 3 times
   under `--jit-threshold 2`, so each is compiled (its OSR variant, then the
   whole function) in batches of its own on the interpreter's thread;
   `--jit-stats` gives each batch's time (its code and its finalize: with
   `--jit-elf` the file's DWARF, write and mapping). Median
   and p90 over the 100 functions of each of N processes, then the median
   process; plain, `--perf` (trampolines and a perf map: what `--jit-elf` adds
   besides the files) and `--jit-elf`.
   Then the functions of the six benchmarks (`examples/scripts/bench`),
   compiled eagerly (`--jit-threshold 0`: each function a batch of its own
   when first called): each function's median over N processes, plain,
   `--perf` and `--jit-elf`, summed over a benchmark's functions: what
   batches of a real program's size pay.
2. Scale: `bench/large/gen.py`'s `warm` shape at 20,000 functions of 20,000
   iterations, each called once: eager (`--jit-threshold 0`: one batch) and the
   default tiering (each function hot in its own loop: an OSR batch each,
   compiled on the `toyvm-jit` thread, queued requests grouped). Per run under
   `--jit-elf`: compiles, files written, the most file mappings alive at once
   (polled from /proc/PID/maps every 20 ms), bytes on disk.
3. perf, eager run: `--perf-jitdump` with `perf record -k 1 -g`, `perf inject
   --jit` (files it writes, bytes, seconds) and `perf report`, against
   `--jit-elf` with `perf record -g` and `perf report` (no inject).

Wall-clock figures: run on a quiet machine (check `uptime`).
"""
import argparse
import glob
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench", "large"))
import gen  # noqa: E402  (bench/large/gen.py)

STAT = re.compile(r"^jit-stats: (.*): (\d+) us$")


def latency_script(path):
    with open(path, "w") as f:
        for k in range(100):
            f.write(f"fn f{k}(a: int, b: int) -> int {{\n    let s = 0;\n"
                    f"    for k in 0..a {{ s = s + k * b + {k}; }}\n    return s;\n}}\n")
        f.write("let t = 0;\nfor r in 0..3 {\n")
        for k in range(100):
            f.write(f"    t = t + f{k}(3, r);\n")
        f.write("}\nprint(t);\n")


def run_toyvm(argv):
    """Runs toyvm, failing on an error; removes the perf map `--perf` wrote
    (no perf reads it here, and nothing else would remove it)."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = proc.communicate()
    if "--perf" in argv:
        try:
            os.unlink(f"/tmp/perf-{proc.pid}.map")
        except OSError:
            pass
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, argv, stdout, stderr)
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)


def compile_latency(toyvm, work, runs):
    script = os.path.join(work, "latency.toy")
    latency_script(script)
    modes = [("plain", []), ("--perf", ["--perf"]), ("--jit-elf", ["--jit-elf", "--perf-dir", work])]
    per_mode = {name: [] for name, _ in modes}
    for _ in range(runs):
        for name, flags in modes:
            out = run_toyvm([toyvm, "run", "--jit-threshold", "2", "--jit-stats"] + flags
                            + [script])
            # Each line is one batch: an OSR variant or a whole function.
            times = [int(m.group(2)) for m in map(STAT.match, out.stderr.splitlines())
                     if m and re.match(r"f\d+\b", m.group(1))]
            assert len(times) >= 100, out.stderr[:2000]
            times.sort()
            per_mode[name].append((statistics.median(times), times[len(times) * 9 // 10]))
    print("### Compile latency per batch (one-function batches, `--jit-threshold 2`)\n")
    print("| mode | median us (median process) | p90 us | median / plain |")
    print("|---|---:|---:|---:|")
    plain = None
    for name, _ in modes:
        rows = sorted(per_mode[name])
        median, p90 = rows[len(rows) // 2]
        plain = plain or median
        print(f"| {name} | {median:.0f} | {p90} | {median / plain:.2f} |")
    print()


BENCHMARKS = ["fib", "loop", "calls", "mandelbrot", "spectral", "nbody"]


def benchmark_latency(toyvm, work, runs):
    """Each benchmark function's compile time: plain, `--perf` and `--jit-elf`."""
    modes = [("plain", []), ("perf", ["--perf"]), ("elf", ["--jit-elf", "--perf-dir", work])]
    print("### Compile latency of the six benchmarks' functions (`--jit-threshold 0`)\n")
    print("Sums over each benchmark's functions of each function's median (us). `--perf` and "
          "`--jit-elf` build the trampolines first, so their first function does not pay "
          "Cranelift's warm-up as plain's does: `--jit-elf / --perf` is the files' cost.\n")
    print("| benchmark | functions | plain | --perf | --jit-elf | --jit-elf / plain | "
          "--jit-elf / --perf |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    totals = {name: 0 for name, _ in modes}
    for bench in BENCHMARKS:
        script = os.path.join(ROOT, "examples", "scripts", "bench", f"{bench}.toy")
        per = {name: {} for name, _ in modes}
        for _ in range(runs):
            for name, flags in modes:
                out = run_toyvm([toyvm, "run", "--jit-threshold", "0", "--jit-stats"] + flags
                                + [script, "1"])
                for m in map(STAT.match, out.stderr.splitlines()):
                    if m and "(OSR)" not in m.group(1):
                        per[name].setdefault(m.group(1), []).append(int(m.group(2)))
        names = set.intersection(*(set(per[name]) for name, _ in modes))
        sums = {name: sum(statistics.median(per[name][n]) for n in names) for name, _ in modes}
        for name in totals:
            totals[name] += sums[name]
        print(f"| {bench} | {len(names)} | {sums['plain']:.0f} | {sums['perf']:.0f} | "
              f"{sums['elf']:.0f} | {sums['elf'] / sums['plain']:.2f} | "
              f"{sums['elf'] / sums['perf']:.2f} |")
    print(f"| all | | {totals['plain']:.0f} | {totals['perf']:.0f} | {totals['elf']:.0f} | "
          f"{totals['elf'] / totals['plain']:.2f} | {totals['elf'] / totals['perf']:.2f} |")
    print()


def watch(cmd, files_dir, env=None):
    """Runs cmd; polls /proc/PID/maps for mappings of files in files_dir. Returns
    (wall seconds, peak mappings, stderr)."""
    started = time.perf_counter()
    # stderr to a file: a pipe nobody reads while polling would fill and
    # stop the run (`--jit-stats` writes a line per compile).
    errors = tempfile.TemporaryFile("w+")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=errors, text=True, env=env)
    peak = 0
    maps = f"/proc/{proc.pid}/maps"
    while proc.poll() is None:
        try:
            with open(maps) as f:
                count = sum(1 for line in f if files_dir in line)
            peak = max(peak, count)
        except OSError:
            pass
        time.sleep(0.02)
    status = proc.wait()
    errors.seek(0)
    stderr = errors.read()
    if status != 0:
        sys.exit(f"{cmd}: failed\n{stderr[-2000:]}")
    return time.perf_counter() - started, peak, stderr


def du(paths):
    total = 0
    for p in paths:
        if os.path.isdir(p):
            for root, _, names in os.walk(p):
                total += sum(os.path.getsize(os.path.join(root, n)) for n in names)
        elif os.path.exists(p):
            total += os.path.getsize(p)
    return total


def scale(toyvm, work, functions):
    script = os.path.join(work, "many.toy")
    with open(script, "w") as f:
        f.write(gen.warm(n=functions, iters=20000, calls=1))
    print(f"### {functions:,} functions under `--jit-elf`\n")
    print("| tiering | compiles | files | most mappings at once | mappings per file | "
          "bytes on disk | wall s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, flags in [("eager", ["--jit-threshold", "0"]), ("default", [])]:
        out = os.path.join(work, "elf-" + name)
        os.makedirs(out)
        wall, peak, stderr = watch([toyvm, "run", "--jit-elf", "--perf-dir", out, "--jit-stats"]
                                   + flags + [script], out)
        compiles = sum(1 for line in stderr.splitlines() if STAT.match(line))
        files = glob.glob(os.path.join(out, "toyvm-*", "code-*.so"))
        print(f"| {name} | {compiles:,} | {len(files):,} | {peak:,} | "
              f"{peak / max(len(files), 1):.2f} | {du([out]) / 2**20:.1f} MiB | {wall:.2f} |")
        sys.stdout.flush()
    print()
    return script


def timed(cmd, cwd, env):
    started = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def perf_paths(toyvm, work, script):
    env = dict(os.environ, DEBUGINFOD_URLS="")
    config = os.path.join(work, "perfconfig")
    with open(config, "w") as f:
        f.write(f"[buildid]\n\tdir = {os.path.join(work, 'buildid')}\n")
    env["PERF_CONFIG"] = config
    print("### perf on the eager run: jitdump + `perf inject` against `--jit-elf`\n")
    print("| path | files | bytes | `perf inject` s | `perf report` s | inject + report s |")
    print("|---|---:|---:|---:|---:|---:|")
    # jitdump
    jd = os.path.join(work, "jd")
    os.makedirs(jd)
    subprocess.run(["perf", "record", "-q", "-k", "1", "-g", "-e", "cpu-clock", "-o",
                    "perf.data", toyvm, "run", "--jit-threshold", "0", "--perf-jitdump",
                    "--perf-dir", jd, script], cwd=jd, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    inject = timed(["perf", "inject", "--jit", "-i", "perf.data", "-o", "perf.jit.data"], jd, env)
    report = timed(["perf", "report", "--stdio", "-i", "perf.jit.data"], jd, env)
    injected = glob.glob(os.path.join(jd, "jitted-*.so"))
    dumps = glob.glob(os.path.join(jd, "jit-*.dump"))
    print(f"| `--perf-jitdump` | {len(injected) + len(dumps):,} | "
          f"{du(injected + dumps + [os.path.join(jd, 'perf.jit.data')]) / 2**20:.0f} MiB | "
          f"{inject:.2f} | {report:.2f} | {inject + report:.2f} |")
    sys.stdout.flush()
    # --jit-elf
    el = os.path.join(work, "el")
    os.makedirs(el)
    subprocess.run(["perf", "record", "-q", "-g", "-e", "cpu-clock", "-o", "perf.data", toyvm,
                    "run", "--jit-threshold", "0", "--jit-elf", "--perf-dir", el, script],
                   cwd=el, env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    report = timed(["perf", "report", "--stdio", "-i", "perf.data"], el, env)
    files = glob.glob(os.path.join(el, "toyvm-*", "code-*.so"))
    print(f"| `--jit-elf` | {len(files):,} | "
          f"{du(files + [os.path.join(el, 'perf.data')]) / 2**20:.0f} MiB | - | {report:.2f} | "
          f"{report:.2f} |")
    print()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--toyvm", default=os.path.join(ROOT, "target", "release", "toyvm"))
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--functions", type=int, default=20000)
    ap.add_argument("--skip-perf", action="store_true")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="toyvm-jit-elf-bench.")
    try:
        compile_latency(args.toyvm, work, args.runs)
        benchmark_latency(args.toyvm, work, args.runs)
        script = scale(args.toyvm, work, args.functions)
        if not args.skip_perf and shutil.which("perf"):
            perf_paths(args.toyvm, work, script)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
