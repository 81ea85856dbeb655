#!/usr/bin/env python3
"""Generate the large-program benchmarks: Toy programs shaped like real code, with
thousands of functions, to measure what the JIT costs and gains outside small kernels.

Usage: gen.py OUTDIR        writes one OUTDIR/<shape>.toy per shape below

Shapes (each prints a checksum, so every tier can be checked against the interpreter):
  warm     5,000 functions, each a 2,000-iteration loop, each called 3 times: every
           function gets warm, none gets hot. The JIT pays a compile per function and
           wins little back.
  small    3,000 two-line functions called from one big function, 1,500 rounds: the
           caller is hot and huge; its callees are tiny inlining candidates.
  fewhot   5,000 cold functions called once each, plus 4 hot functions that do almost
           all the work: the JIT should compile the 4 and leave the rest alone.
  huge     one 20,000-line straight-line function run 20 times: a function too big to
           compile cheaply.
The generator is deterministic (no randomness), so a shape is the same program on every
machine.
"""
import os
import sys


def warm(n=5000, iters=2000, calls=3):
    out = []
    for k in range(n):
        out.append(f"fn w{k}(a: int) -> int {{\n"
                   f"    let s = 0;\n"
                   f"    for i in 0..{iters} {{ s = (s + i * a + {k}) % 1000003; }}\n"
                   f"    return s;\n}}\n")
    out.append("let t = 0;\n")
    out.append(f"for r in 0..{calls} {{\n")
    # A call per line keeps <main> itself ordinary in size.
    for k in range(n):
        out.append(f"    t = (t + w{k}(r + 1)) % 1000003;\n")
    out.append("}\nprint(t);\n")
    return "".join(out)


def small(n=3000, rounds=1500):
    out = []
    for k in range(n):
        out.append(f"fn s{k}(x: int) -> int {{\n    return (x * {k % 7 + 2} + {k}) & 1048575;\n}}\n")
    out.append("fn round(x0: int) -> int {\n    let x = x0;\n")
    for k in range(n):
        out.append(f"    x = s{k}(x);\n")
    out.append("    return x;\n}\n")
    out.append(f"let x = 1;\nfor r in 0..{rounds} {{ x = round(x + r); }}\nprint(x);\n")
    return "".join(out)


def fewhot(cold=5000, hot_iters=200000):
    out = []
    for k in range(cold):
        out.append(f"fn c{k}(a: int) -> int {{\n"
                   f"    let s = a;\n"
                   f"    if s % 3 == 0 {{ s = s + {k}; }} else {{ s = s * 2 + 1; }}\n"
                   f"    return s;\n}}\n")
    out.append("fn h0(n: int) -> int { let s = 0; for i in 0..n { s = (s * 31 + i) % 1000003; } return s; }\n")
    out.append("fn h1(n: int) -> float { let s = 0.0; for i in 0..n { s = s + 1.0 / float(i + 1); } return s; }\n")
    out.append("fn h2(a: [int]) -> int { let s = 0; for i in 0..len(a) { s = s + a[i] * (i & 7); } return s; }\n")
    out.append("fn h3(n: int) -> int { if n < 2 { return n; } return h3(n - 1) + h3(n - 2); }\n")
    out.append("let t = 0;\n")
    for k in range(cold):
        out.append(f"t = (t + c{k}({k})) % 1000003;\n")
    out.append(f"t = (t + h0({hot_iters * 10})) % 1000003;\n")
    out.append(f"t = (t + int(h1({hot_iters * 10}) * 1000.0)) % 1000003;\n")
    out.append("let a = [0; 10000];\nfor i in 0..10000 { a[i] = i * 7 % 101; }\n")
    out.append("for r in 0..300 { t = (t + h2(a)) % 1000003; }\n")
    out.append("t = (t + h3(27)) % 1000003;\nprint(t);\n")
    return "".join(out)


def huge(lines=20000, runs=20):
    out = ["fn big(x0: int) -> int {\n    let x = x0;\n    let y = 1;\n"]
    for k in range(lines):
        if k % 2 == 0:
            out.append(f"    x = (x * {k % 13 + 3} + y) & 16777215;\n")
        else:
            out.append(f"    y = (y + x + {k}) & 16777215;\n")
    out.append("    return x + y;\n}\n")
    out.append(f"let t = 0;\nfor r in 0..{runs} {{ t = (t + big(r)) & 16777215; }}\nprint(t);\n")
    return "".join(out)


SHAPES = {"warm": warm, "small": small, "fewhot": fewhot, "huge": huge}


def main():
    # An option where OUTDIR belongs (`gen.py --help`) is not a directory
    # name: it once left a directory called `--help` in the repository.
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        sys.exit(__doc__)
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    for name, make in SHAPES.items():
        with open(os.path.join(outdir, name + ".toy"), "w") as f:
            f.write(make())


if __name__ == "__main__":
    main()
