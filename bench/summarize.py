#!/usr/bin/env python3
"""Turn bench/run.sh's raw data into Markdown tables (stdout).

Usage: summarize.py RESULTS_DIR [--write bench/RESULTS.md]

Reads RESULTS_DIR/{default,large}-BENCH.json and startup.json (hyperfine exports),
rss.tsv (peak RSS in KiB), versions.txt, checks.txt and notes.txt. With --write, also
writes the tables with a header (date, machine, versions) to the given file.

CPU time is user + sys (hyperfine's means): on a shared machine it is steadier than wall
time. "× C" divides an engine's CPU time by the C peer's CPU time for the same benchmark
and size; the geometric mean is over the benchmarks that both ran.
"""
import json
import math
import os
import sys

BENCHES = ["fib", "loop", "calls", "mandelbrot", "spectral", "nbody"]
SIZES = {
    "default": "fib 32, loop 1e7, calls 1e7, mandelbrot 400, spectral 250, nbody 1e5",
    "large": "fib 40, loop 1e8, calls 1e8, mandelbrot 2000, spectral 2000, nbody 5e6",
}
LABEL = {
    "toyvm-interp": "toyvm --no-jit",
    "toyvm": "toyvm",
    "toyvm-jit0": "toyvm --jit-threshold 0",
    "c": "C gcc -O2",
    "luajit": "LuaJIT",
    "luajit-joff": "LuaJIT -joff",
    "lua5.4": "Lua 5.4",
    "node": "node",
    "cpython": "CPython",
}


def load(results, name):
    """One hyperfine export as {engine: {"wall": median s, "cpu": user+sys s}}, or None."""
    path = os.path.join(results, name + ".json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        data = json.load(f)
    return {
        r["command"]: {"wall": r["median"], "cpu": r["user"] + r["system"]}
        for r in data["results"]
    }


def read_text(results, name):
    path = os.path.join(results, name)
    if not os.path.exists(path):
        return ""
    with open(path) as f:
        return f.read()


def seconds(x):
    if x is None:
        return "-"
    if x < 0.0095:
        return "%.1f ms" % (x * 1e3)
    return "%.3f" % x


def ratio(x):
    if x is None:
        return "-"
    if x >= 100:
        return "%.0f" % x
    if x >= 10:
        return "%.1f" % x
    return "%.2f" % x


def geomean(xs):
    xs = [x for x in xs if x is not None and x > 0]
    if not xs:
        return None
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def table(header, rows):
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(out)


def engines_in(datasets):
    """Engine names in first-seen order (run.sh's column order)."""
    seen = []
    for d in datasets:
        for e in d:
            if e not in seen:
                seen.append(e)
    return seen


def size_set(results, size):
    data = {b: load(results, size + "-" + b) for b in BENCHES}
    data = {b: d for b, d in data.items() if d}
    if not data:
        return []
    engines = engines_in(data.values())
    labels = [LABEL.get(e, e) for e in engines]
    out = ["## %s sizes (%s)\n" % (size.capitalize(), SIZES[size])]

    out.append("CPU time (user+sys, mean over the runs) in seconds.\n")
    rows = [[b] + [seconds(d.get(e, {}).get("cpu")) for e in engines] for b, d in data.items()]
    out.append(table(["bench"] + labels, rows) + "\n")

    out.append("CPU time as a multiple of C (lower is better; C = 1).\n")
    rows, per_engine = [], {e: [] for e in engines}
    for b, d in data.items():
        c = d.get("c", {}).get("cpu")
        row = [b]
        for e in engines:
            x = d.get(e, {}).get("cpu")
            r = x / c if (x and c) else None
            per_engine[e].append(r)
            row.append(ratio(r))
        rows.append(row)
    rows.append(["**geomean**"] + ["**%s**" % ratio(geomean(per_engine[e])) for e in engines])
    out.append(table(["bench"] + labels, rows) + "\n")

    out.append("Median wall time in seconds.\n")
    rows = [[b] + [seconds(d.get(e, {}).get("wall")) for e in engines] for b, d in data.items()]
    out.append(table(["bench"] + labels, rows) + "\n")
    return out


def startup_and_memory(results):
    out = []
    startup = load(results, "startup")
    if startup:
        out.append("## Startup\n")
        out.append("`toyvm run examples/scripts/hello.toy` against each peer's empty program "
                   "(prints one line); milliseconds.\n")
        rows = [[LABEL.get(e, e), "%.1f" % (v["wall"] * 1e3), "%.1f" % (v["cpu"] * 1e3)]
                for e, v in startup.items()]
        out.append(table(["engine", "median wall ms", "CPU ms"], rows) + "\n")

    rss = {}
    for line in read_text(results, "rss.tsv").splitlines():
        parts = line.split("\t")
        if len(parts) == 3:
            rss.setdefault(parts[0], {})[parts[1]] = parts[2]
    if rss:
        engines = engines_in(rss.values())
        out.append("## Peak RSS (MiB, one run at the default size; `startup` = hello / empty)\n")
        rows = []
        for b, d in rss.items():
            row = [b]
            for e in engines:
                kib = d.get(e, "-")
                row.append("%.1f" % (int(kib) / 1024) if kib.isdigit() else "-")
            rows.append(row)
        out.append(table(["bench"] + [LABEL.get(e, e) for e in engines], rows) + "\n")
    return out


def main():
    args = sys.argv[1:]
    write = None
    if "--write" in args:
        i = args.index("--write")
        if i + 1 >= len(args):
            sys.exit(__doc__)
        write = args[i + 1]
        del args[i:i + 2]
    if len(args) != 1:
        sys.exit(__doc__)
    results = args[0]

    body = []
    for size in ("default", "large"):
        body += size_set(results, size)
    body += startup_and_memory(results)
    notes = read_text(results, "notes.txt").strip()
    if notes:
        body.append("## Notes from the run\n")
        body.append("\n".join("- " + n.removeprefix("note: ") for n in notes.splitlines()) + "\n")
    checks = [c for c in read_text(results, "checks.txt").splitlines() if c]
    if checks:
        failed = [c for c in checks if not c.startswith("ok")]
        body.append("Output checks against C: %d passed, %d failed (`%s/checks.txt`).\n"
                    % (len(checks) - len(failed), len(failed), results))
    text = "\n".join(body)
    print(text)

    if write:
        versions = read_text(results, "versions.txt").strip()
        section = [
            BEGIN,
            "## Engines side by side (`bench/run.sh`)\n",
            "Written by `bench/run.sh --write`; raw data in `%s/` (not committed). "
            "Re-run: `bench/run.sh --write` (see its header for options).\n" % results,
            "### Machine and versions\n",
            "\n".join("- " + v for v in versions.splitlines()) + "\n",
            text.replace("\n## ", "\n### "),
            END,
        ]
        replace_section(write, "\n".join(section))
        print("wrote %s" % write, file=sys.stderr)


# The runner owns only the part of RESULTS.md between these markers; the rest
# (micro-benchmarks, overhead measurements, commentary) is kept as it is.
BEGIN = "<!-- BEGIN bench/run.sh output -->"
END = "<!-- END bench/run.sh output -->"


def replace_section(path, section):
    try:
        with open(path) as f:
            old = f.read()
    except FileNotFoundError:
        old = "# toyvm benchmark results\n\n"
    if BEGIN in old and END in old:
        before = old[: old.index(BEGIN)]
        after = old[old.index(END) + len(END):]
    else:
        before, after = old.rstrip("\n") + "\n\n", "\n"
    with open(path, "w") as f:
        f.write(before + section + after)


if __name__ == "__main__":
    main()
