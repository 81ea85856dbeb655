#!/usr/bin/env python3
"""Turn bench/run.sh's raw data into Markdown tables (stdout), and keep README's status
numbers in step with bench/RESULTS.md.

Usage:
  summarize.py RESULTS_DIR [--write bench/RESULTS.md [--readme README.md]]
  summarize.py --status bench/RESULTS.md             print README's status block
  summarize.py --readme README.md bench/RESULTS.md   rewrite README's status block

Reads RESULTS_DIR/{default,large}-BENCH.json and startup.json (hyperfine exports),
rss.tsv (peak RSS in KiB), versions.txt, checks.txt and notes.txt. With --write, also
writes the tables with a header (date, machine, versions) to the given file, and with
--readme then rewrites the status block of README.md from that file.

README's status block (between STATUS_BEGIN and STATUS_END) is a function of
RESULTS.md alone: the geometric-mean rows of its "multiple of C" tables and the run's
date and machine. So it is rewritten whenever RESULTS.md is, and tests/self_contained.rs
checks that README holds exactly what `--status` prints.

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


def take_option(args, name):
    """Removes `name VALUE` from `args` and returns VALUE (None if absent)."""
    if name not in args:
        return None
    i = args.index(name)
    if i + 1 >= len(args):
        sys.exit(__doc__)
    value = args[i + 1]
    del args[i:i + 2]
    return value


def main():
    args = sys.argv[1:]
    status = take_option(args, "--status")
    if status is not None:
        if args:
            sys.exit(__doc__)
        print(status_block(read_file(status)), end="")
        return
    write = take_option(args, "--write")
    readme = take_option(args, "--readme")
    if readme is not None and write is None:
        # summarize.py --readme README.md bench/RESULTS.md
        if len(args) != 1:
            sys.exit(__doc__)
        replace_status(readme, status_block(read_file(args[0])))
        print("wrote the status block of %s" % readme, file=sys.stderr)
        return
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
            ("\n" + text).replace("\n## ", "\n### ")[1:],
            END,
        ]
        replace_section(write, "\n".join(section))
        print("wrote %s" % write, file=sys.stderr)
        if readme is not None:
            replace_status(readme, status_block(read_file(write)))
            print("wrote the status block of %s" % readme, file=sys.stderr)


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


# README.md's status block: written from RESULTS.md by status_block, never by hand.
STATUS_BEGIN = "<!-- status:begin (written by bench/summarize.py from bench/RESULTS.md) -->"
STATUS_END = "<!-- status:end -->"


def read_file(path):
    with open(path) as f:
        return f.read()


def geomean_rows(results_md):
    """{size set: [(engine label, geomean text)]} from the "multiple of C" tables of the
    section bench/run.sh writes into RESULTS.md, in column order."""
    if BEGIN not in results_md or END not in results_md:
        sys.exit("bench/RESULTS.md has no bench/run.sh section (%s ... %s)" % (BEGIN, END))
    section = results_md[results_md.index(BEGIN):results_md.index(END)]
    rows, size, in_ratio_table, header = {}, None, False, None
    for line in section.splitlines():
        heading = line.lstrip("#").strip()
        if line.startswith("#"):
            size = next((s for s in SIZES if heading.lower().startswith(s + " sizes")), None)
            in_ratio_table, header = False, None
        elif line.startswith("CPU time as a multiple of C"):
            in_ratio_table = True
        elif in_ratio_table and size and line.startswith("| bench |"):
            header = cells(line)[1:]
        elif in_ratio_table and size and header and line.startswith("| **geomean** |"):
            values = [v.strip("*") for v in cells(line)[1:]]
            rows[size] = list(zip(header, values))
            in_ratio_table = False
    return rows


def cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def run_facts(results_md):
    """The "- key: value" lines of RESULTS.md's machine-and-versions list."""
    facts = {}
    section = results_md[results_md.find(BEGIN):results_md.find(END)]
    for line in section.splitlines():
        if line.startswith("- ") and ": " in line:
            key, value = line[2:].split(": ", 1)
            facts.setdefault(key, value)
    return facts


def status_block(results_md):
    """README's status block, markers included, for the RESULTS.md text given."""
    rows = geomean_rows(results_md)
    if not rows:
        sys.exit("bench/RESULTS.md has no geometric means to report")
    labels = []
    for values in rows.values():
        for label, _ in values:
            if label not in labels and label != LABEL["c"]:
                labels.append(label)
    table = [["sizes"] + labels]
    for size, values in rows.items():
        by_label = dict(values)
        table.append([size] + [by_label.get(label, "-") for label in labels])
    facts = run_facts(results_md)
    lines = [
        STATUS_BEGIN,
        "CPU time as a multiple of C (gcc -O2; lower is better), geometric mean over the "
        "benchmarks, every engine measured in the same run of `bench/run.sh` on %s "
        "(%s cores, %s); per-benchmark numbers in [`bench/RESULTS.md`](bench/RESULTS.md).\n"
        % (facts.get("date", "an unknown date"), facts.get("nproc", "?"),
           facts.get("cpu", "unknown CPU")),
        "| " + " | ".join(table[0]) + " |",
        "|---|" + "---:|" * len(labels),
    ]
    lines += ["| " + " | ".join(row) + " |" for row in table[1:]]
    lines.append(STATUS_END)
    return "\n".join(lines) + "\n"


def replace_status(path, block):
    """Replaces the status block of README (`path`), which must have the markers."""
    old = read_file(path)
    if STATUS_BEGIN not in old or STATUS_END not in old:
        sys.exit("%s has no status block (%s ... %s)" % (path, STATUS_BEGIN, STATUS_END))
    before = old[:old.index(STATUS_BEGIN)]
    after = old[old.index(STATUS_END) + len(STATUS_END):].removeprefix("\n")
    with open(path, "w") as f:
        f.write(before + block + after)


if __name__ == "__main__":
    main()
