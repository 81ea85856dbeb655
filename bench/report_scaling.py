#!/usr/bin/env python3
"""`toyvm report` scaling with the number of distinct stacks (issue 11,
item 9: it was quadratic, 200k two-frame stacks took 17.7 s).

Writes vmprof profiles (the format of perfsupport/src/vmprof/format.rs) with
N distinct two-frame stacks `main -> fN` (one sample each), times
`toyvm report FILE` and `toyvm report --folded FILE` on each (best of
REPEAT), and prints a Markdown table with the time per 1,000 stacks: linear
scaling keeps that column flat.

    bench/report_scaling.py [N ...]     # default 50000 100000 200000
"""
import os
import struct
import subprocess
import sys
import tempfile
import time

TOYVM = os.path.join(os.path.dirname(__file__), "..", "target", "release", "toyvm")
REPEAT = 3


def word(v):
    return struct.pack("<q", v)


def string(b):
    return word(len(b)) + b


def profile(n):
    out = bytearray()
    for w in (0, 3, 0, 1000, 0):
        out += word(w)
    name = b"toyvm"
    out += bytes([0x05]) + struct.pack(">h", 6) + bytes([0, len(name)]) + name
    out += bytes([0x06]) + word(0) + word(0) + bytes(8)
    main = 8
    out += bytes([0x02]) + word(main) + string(b"py:<main>:1:scale.toy")
    for i in range(n):
        fid = 16 + 8 * i
        out += bytes([0x02]) + word(fid) + string(b"py:f%d:%d:scale.toy" % (i, i + 2))
        # STACKTRACE: count 1, depth 2, innermost first, thread id 1.
        out += bytes([0x01]) + word(1) + word(2) + word(fid) + word(main) + word(1)
    out += bytes([0x03]) + word(1) + word(0) + bytes(8)
    return bytes(out)


def best(args):
    times = []
    for _ in range(REPEAT):
        t = time.perf_counter()
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        times.append(time.perf_counter() - t)
    return min(times)


def main():
    sizes = [int(a) for a in sys.argv[1:]] or [50_000, 100_000, 200_000]
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    print("| distinct stacks | `report` s | per 1k stacks ms | `--folded` s | per 1k stacks ms |")
    print("|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as d:
        for n in sizes:
            path = os.path.join(d, f"scale-{n}.prof")
            with open(path, "wb") as f:
                f.write(profile(n))
            report = best([TOYVM, "report", path])
            folded = best([TOYVM, "report", "--folded", path])
            print(f"| {n:,} | {report:.2f} | {report / n * 1e6:.2f} | {folded:.2f} | {folded / n * 1e6:.2f} |")


if __name__ == "__main__":
    main()
