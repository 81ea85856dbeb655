#!/usr/bin/env python3
"""Is the interpreter's speed a property of its code, or of where the linker put it?

Usage (from anywhere):  bench/layouts.py [--pads 0,1000,2040,3100] [--runs 5] [--scale 3]
                                        [--benches fib,loop,...] [--work DIR] [--keep]

Builds the release `toyvm` once per *layout*: the same source, with a padding function of
PAD bytes of `nop`s added to the `vm` crate (reached from `run_main` behind a
`black_box(false)`, so it is linked but never runs). The padding moves the interpreter's
code by an unrelated amount, exactly what an unrelated change elsewhere in the crate does.
Then it runs the six benchmarks interpreted (`--no-jit`) in every layout, round-robin so
that a change of machine load hits every layout alike, next to Lua 5.4 and LuaJIT's
interpreter (`luajit -joff`) on the same inputs (`bench/peers/lua`), and prints one
Markdown table: median CPU time (user + sys) per layout, the spread across layouts
(slowest / fastest - 1; the target is at most 10%), and the slowest layout against Lua 5.4
and against LuaJIT -joff (targets: at most 1.0 per benchmark against Lua 5.4, geometric
mean at most 0.9 against LuaJIT -joff, in every layout).

The source is the working tree (uncommitted changes included), copied to WORK/src, and
built with its own target directory WORK/target, seeded from the repository's `target/`
the first time (so only the workspace crates compile: about two minutes a layout on two
cores). WORK defaults to a directory under the system temp dir that is kept between runs
(`--work` to choose); the per-layout binaries stay in WORK for a later look with `nm`.

`--scale` multiplies the benchmarks' default sizes (3: each run takes 0.2-0.5 s, long
enough that process start-up is noise). Every run's output must equal the first layout's.
"""
import argparse
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

import cargo_dirs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCHES = ["fib", "loop", "calls", "mandelbrot", "spectral", "nbody"]
# Default sizes (bench/run.sh) and how each grows with --scale (fib is exponential: +1
# per doubling of the work, roughly; mandelbrot and spectral are quadratic).
DEFAULT = {"fib": 32, "loop": 10_000_000, "calls": 10_000_000, "mandelbrot": 400,
           "spectral": 250, "nbody": 100_000}

# The padding, added as vm/src/layout_pad.rs of the copy.
PAD_MODULE = '''//! Layout padding for bench/layouts.py (not part of toyvm's source).
/// PAD bytes of `nop`s; linked (see `run_main`) but never run.
#[inline(never)]
pub fn pad() {
    // SAFETY: never executed (called behind `black_box(false)`); the
    // bytes are `nop`s and the function returns normally after them.
    unsafe { std::arch::asm!(".skip {n}, 0x90", n = const %d) }
}
'''
RUN_MAIN = "pub fn run_main(vm: &mut Vm<'_>) -> u32 {"
PAD_CALL = RUN_MAIN + "\n    if std::hint::black_box(false) {\n        crate::layout_pad::pad();\n    }"


def size(bench, scale):
    n = DEFAULT[bench]
    if bench == "fib":
        return str(n + round(math.log2(scale) * 1.44))
    if bench in ("mandelbrot", "spectral"):
        return str(round(n * math.sqrt(scale)))
    return str(round(n * scale))


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def copy_source(work):
    """The working tree (tracked and untracked-but-not-ignored files) into WORK/src."""
    src = os.path.join(work, "src")
    if os.path.exists(src):
        shutil.rmtree(src)
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=ROOT, check=True, stdout=subprocess.PIPE).stdout.split(b"\0")
    for f in files:
        if not f:
            continue
        f = f.decode()
        from_ = os.path.join(ROOT, f)
        if not os.path.isfile(from_):
            continue  # deleted in the working tree
        to = os.path.join(src, f)
        os.makedirs(os.path.dirname(to), exist_ok=True)
        shutil.copy2(from_, to)
    return src


def build_layout(work, src, pad):
    """Builds the copy with PAD bytes of padding; returns the binary's path."""
    with open(os.path.join(src, "vm/src/layout_pad.rs"), "w") as f:
        f.write(PAD_MODULE % pad)
    lib = os.path.join(src, "vm/src/lib.rs")
    text = open(lib).read()
    if "mod layout_pad;" not in text:
        open(lib, "w").write(text + "\nmod layout_pad;\n")
    interp = os.path.join(src, "vm/src/interp/mod.rs")
    text = open(interp).read()
    if "layout_pad::pad()" not in text:
        if RUN_MAIN not in text:
            sys.exit("layouts.py: cannot find `%s` in vm/src/interp/mod.rs to add the padding call" % RUN_MAIN)
        open(interp, "w").write(text.replace(RUN_MAIN, PAD_CALL, 1))
    target = os.path.join(work, "target")
    release = cargo_dirs.release_dir()
    if not os.path.exists(target) and os.path.isdir(release):
        print("seeding %s from the repository's build (%s) ..." % (target, release), file=sys.stderr)
        os.makedirs(target)
        # Best effort: a file that a concurrent build replaces is rebuilt.
        subprocess.run(["cp", "-a", release, target])
    print("building layout pad=%d ..." % pad, file=sys.stderr)
    sh(["cargo", "build", "--release", "--quiet", "--bin", "toyvm"], cwd=src,
       env=dict(os.environ, CARGO_TARGET_DIR=target))
    out = os.path.join(work, "toyvm-pad%d" % pad)
    shutil.copy2(os.path.join(target, "release/toyvm"), out)
    return out


def symbol_address(binary, pattern):
    """Address (hex) of the first symbol matching `pattern`, or '?'."""
    nm = subprocess.run(["nm", "-C", binary], stdout=subprocess.PIPE, text=True).stdout
    for line in nm.splitlines():
        if re.search(pattern, line):
            return line.split()[0].lstrip("0")
    return "?"


def cpu_time(cmd):
    with tempfile.NamedTemporaryFile("r") as report:
        proc = subprocess.run(["/usr/bin/time", "-f", "%U %S", "-o", report.name] + cmd,
                              stdout=subprocess.PIPE, text=True)
        user, sys_ = report.read().split()[-2:]
    if proc.returncode != 0:
        sys.exit("%s: exit %d" % (" ".join(cmd), proc.returncode))
    return float(user) + float(sys_), proc.stdout


def fmt(t):
    return "%.3f" % t


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pads", default="0,1000,2040,3100")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--scale", type=float, default=3.0)
    ap.add_argument("--benches", default=",".join(BENCHES))
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "toyvm-layouts"))
    ap.add_argument("--no-build", action="store_true", help="reuse WORK/toyvm-padN binaries")
    args = ap.parse_args()
    pads = [int(p) for p in args.pads.split(",")]
    benches = args.benches.split(",")
    os.makedirs(args.work, exist_ok=True)

    if args.no_build:
        binaries = [os.path.join(args.work, "toyvm-pad%d" % p) for p in pads]
    else:
        src = copy_source(args.work)
        binaries = [build_layout(args.work, src, p) for p in pads]

    peers = []
    for name, cmd in (("Lua 5.4", ["lua5.4"]), ("LuaJIT -joff", ["luajit", "-joff"])):
        if shutil.which(cmd[0]):
            peers.append((name, cmd))
        else:
            print("layouts.py: %s not found; its column stays empty" % cmd[0], file=sys.stderr)

    engines = [("pad %d" % p, [b, "run", "--no-jit"], "toy") for p, b in zip(pads, binaries)]
    engines += [(name, cmd, "lua") for name, cmd in peers]
    times = {(e[0], b): [] for e in engines for b in benches}
    for bench in benches:
        n = size(bench, args.scale)
        script = {"toy": os.path.join(ROOT, "examples/scripts/bench/%s.toy" % bench),
                  "lua": os.path.join(ROOT, "bench/peers/lua/%s.lua" % bench)}
        expected = None
        for _ in range(args.runs):
            for name, cmd, kind in engines:
                t, out = cpu_time(cmd + [script[kind], n])
                if kind == "toy":
                    expected = expected or out
                    if out != expected:
                        sys.exit("layouts.py: %s %s prints %r, first layout %r" % (name, bench, out, expected))
                times[(name, bench)].append(t)
        print("  %s %s done" % (bench, n), file=sys.stderr)

    med = {k: statistics.median(v) for k, v in times.items()}
    layout_names = [e[0] for e in engines if e[2] == "toy"]
    peer_names = [e[0] for e in engines if e[2] == "lua"]
    loadavg = open("/proc/loadavg").read().split()[:3]
    print("Interpreter (`--no-jit`) CPU time in seconds, median of %d runs, sizes %gx the defaults; "
          "load average at the end %s." % (args.runs, args.scale, " ".join(loadavg)))
    print()
    print("| bench | " + " | ".join(layout_names + peer_names)
          + " | spread | slowest / Lua 5.4 | slowest / LuaJIT -joff |")
    print("|---|" + "---:|" * (len(layout_names) + len(peer_names) + 3))
    ratios = {p: [] for p in peer_names}
    for b in benches:
        lay = [med[(n, b)] for n in layout_names]
        row = [fmt(t) for t in lay] + [fmt(med[(p, b)]) for p in peer_names]
        spread = max(lay) / min(lay) - 1
        cells = ["%.1f%%" % (100 * spread)]
        for p in ("Lua 5.4", "LuaJIT -joff"):
            if p in peer_names:
                r = max(lay) / med[(p, b)]
                ratios[p].append(r)
                cells.append("%.2f" % r)
            else:
                cells.append("-")
        print("| %s | %s | %s |" % (b, " | ".join(row), " | ".join(cells)))
    geo = ["-"] * (len(layout_names) + len(peer_names) + 1)
    for p in ("Lua 5.4", "LuaJIT -joff"):
        if ratios.get(p):
            geo.append("**%.2f**" % math.exp(sum(map(math.log, ratios[p])) / len(ratios[p])))
        else:
            geo.append("-")
    print("| geomean | %s |" % " | ".join(geo))
    print()
    print("Where the interpreter landed: " + ", ".join(
        "pad %d: `interp_entry` at 0x%s" % (p, symbol_address(b, r"vm::interp::interp_entry$"))
        for p, b in zip(pads, binaries)) + ".")


if __name__ == "__main__":
    main()
