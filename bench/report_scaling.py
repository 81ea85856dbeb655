#!/usr/bin/env python3
"""`toyvm report` scaling with the number of distinct stacks (issue 11,
item 9: it was quadratic, 200k two-frame stacks took 17.7 s), and with the
number of samples for every export format (issue 27, item 6).

Writes vmprof profiles (the format of perfsupport/src/vmprof/format.rs) with
N distinct two-frame stacks `main -> fN` (one sample each), times
`toyvm report FILE` and `toyvm report --folded FILE` on each (best of
REPEAT), and prints a Markdown table with the time per 1,000 stacks: linear
scaling keeps that column flat.

    bench/report_scaling.py [N ...]     # default 50000 100000 200000
    bench/report_scaling.py --samples [N ...]   # default 1000000 10000000

`--samples`: profiles of N samples over 300 distinct stacks (depth 2 to
11, in lines mode), each written once and read by `report --format F -o
OUT` for every format; prints the time, the ratio to `--format folded` and
the peak RSS of each. Memory must follow the distinct stacks, not the
samples (Firefox's format is the exception: one entry per sample on its
timeline).
"""
import os
import struct
import subprocess
import sys
import tempfile
import time

import cargo_dirs

TOYVM = os.path.join(cargo_dirs.release_dir(), "toyvm")
REPEAT = 3


def word(v):
    return struct.pack("<q", v)


def string(b):
    return word(len(b)) + b


def preamble(mode):
    """The static header, a version-6 HEADER with `mode` (2: lines) for
    interpreter `toyvm`, and TIME_N_ZONE."""
    out = bytearray()
    for w in (0, 3, 0, 1000, 0):
        out += word(w)
    name = b"toyvm"
    out += bytes([0x05]) + struct.pack(">h", 6) + bytes([mode, len(name)]) + name
    out += bytes([0x06]) + word(0) + word(0) + bytes(8)
    return out


def profile(n):
    out = preamble(0)
    main = 8
    out += bytes([0x02]) + word(main) + string(b"py:<main>:1:scale.toy")
    for i in range(n):
        fid = 16 + 8 * i
        out += bytes([0x02]) + word(fid) + string(b"py:f%d:%d:scale.toy" % (i, i + 2))
        # STACKTRACE: count 1, depth 2, innermost first, thread id 1.
        out += bytes([0x01]) + word(1) + word(2) + word(fid) + word(main) + word(1)
    out += bytes([0x03]) + word(1) + word(0) + bytes(8)
    return bytes(out)


def sample_profile(n, distinct=300):
    """N samples in lines mode over `distinct` stacks, cycling."""
    out = preamble(2)
    functions = 40
    for i in range(functions):
        out += bytes([0x02]) + word(8 + 8 * i) + string(b"toy:f%d:%d:scale.toy" % (i, 10 * i + 1))
    stacks = []
    for s in range(distinct):
        depth = 2 + s % 10
        frames = [8 + 8 * ((s * 7 + k * 13) % functions) for k in range(depth)]
        lines = [10 * ((f - 8) // 8) + 2 + (s + k) % 5 for k, f in enumerate(frames)]
        words = b""
        # Innermost frame first, each frame as `line, id` (format.rs).
        for f, l in reversed(list(zip(frames, lines))):
            words += word(l) + word(f)
        stacks.append(bytes([0x01]) + word(1) + word(2 * depth) + words + word(1))
    chunk = b"".join(stacks)
    out += chunk * (n // distinct)
    out += b"".join(stacks[: n % distinct])
    out += bytes([0x03]) + word(1) + word(0) + bytes(8)
    return bytes(out)


def timed(args):
    """(seconds, peak RSS in MiB) of one run. The run is started by a small
    process of its own: a child forked from this one (which may hold a
    gigabyte of generated profile) would count that memory as its peak."""
    probe = (
        "import os, subprocess, sys, time\n"
        "t = time.perf_counter()\n"
        "p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)\n"
        "_, status, usage = os.wait4(p.pid, 0)\n"
        "print(time.perf_counter() - t, usage.ru_maxrss, status)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe, *args], check=True,
                         capture_output=True, text=True).stdout.split()
    if out[2] != "0":
        raise SystemExit(f"{args}: status {out[2]}")
    return float(out[0]), int(out[1]) / 1024


def print_load():
    print("load: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))


def write_profile(d, name, data):
    """`data` as the file `name` in directory `d`; its path."""
    path = os.path.join(d, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def samples_main(sizes):
    formats = ["folded", "text", "pprof", "speedscope", "firefox"]
    print_load()
    print("| samples | file MiB | format | s | / folded | peak RSS MiB |")
    print("|---:|---:|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as d:
        for n in sizes:
            path = write_profile(d, f"samples-{n}.prof", sample_profile(n))
            size = os.path.getsize(path) / 2**20
            check = subprocess.run([TOYVM, "report", path], check=True, capture_output=True, text=True)
            assert f"{n:,}".replace(",", "") in check.stdout.split("\n")[0].replace(",", ""), check.stdout[:200]
            folded = None
            for fmt in formats:
                out = os.path.join(d, f"out.{fmt}")
                runs = [timed([TOYVM, "report", "--format", fmt, "-o", out, path]) for _ in range(REPEAT)]
                secs = min(r[0] for r in runs)
                rss = max(r[1] for r in runs)
                folded = folded or secs
                print(f"| {n:,} | {size:.0f} | {fmt} | {secs:.2f} | {secs / folded:.2f} | {rss:.0f} |")
                os.remove(out)
            os.remove(path)


def best(args):
    times = []
    for _ in range(REPEAT):
        t = time.perf_counter()
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        times.append(time.perf_counter() - t)
    return min(times)


def main():
    if sys.argv[1:2] == ["--samples"]:
        samples_main([int(a) for a in sys.argv[2:]] or [1_000_000, 10_000_000])
        return
    sizes = [int(a) for a in sys.argv[1:]] or [50_000, 100_000, 200_000]
    print_load()
    print("| distinct stacks | `report` s | per 1k stacks ms | `--folded` s | per 1k stacks ms |")
    print("|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as d:
        for n in sizes:
            path = write_profile(d, f"scale-{n}.prof", profile(n))
            report = best([TOYVM, "report", path])
            folded = best([TOYVM, "report", "--folded", path])
            print(f"| {n:,} | {report:.2f} | {report / n * 1e6:.2f} | {folded:.2f} | {folded / n * 1e6:.2f} |")


if __name__ == "__main__":
    main()
