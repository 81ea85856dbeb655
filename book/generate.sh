#!/usr/bin/env bash
# book/generate.sh: regenerate the command output the book shows.
#
# Every chapter that shows output includes a file from book/src/generated/
# ({{#include generated/NAME.txt}}). This script runs the real commands and
# writes those files; commit them together with the change that altered them.
#
#   book/generate.sh            # from anywhere inside the repository
#
# What it runs (from the repository root, so paths print as book/examples/...):
#   * cargo build --release, then `toyvm run` / `toyvm check` / `toyvm disasm`
#     on the scripts in book/examples/ and examples/scripts/;
#   * the perfsupport end-to-end test binary in its child mode, which registers
#     two hand-written x86-64 regions with the perf map and jitdump sinks; the
#     perf map and the jitdump it writes are printed (the dump decoded by the
#     small Python reader below);
#   * `toyvm disasm --jit` of book/examples/fib.toy and `--jit-stats` runs
#     (Tiering and Cranelift);
#   * When code dies: examples/scripts/phases.toy under `--jit-code-limit`
#     (`--jit-stats`; its perf map with and without the quarantine, checked
#     for addresses with two names), and the embed example
#     (examples/embed in Cargo's release directory, built unless EMBED=PATH) at 20 and 200
#     VMs; with perf, the same script under `perf record -k 1` +
#     `perf inject --jit` and reports of its recompiled functions;
#   * `toyvm run --vmprof` and `toyvm report` (tree, --folded, --flamegraph,
#     --lines after `--vmprof-lines`),
#     and the PyPI `vmprofshow` if one is installed (VMPROFSHOW=PATH or on
#     PATH);
#   * if `perf` and `readelf` work: the same child under `perf record -k 1`,
#     `perf inject --jit`, `readelf` of the injected object and a perf report;
#     then toyvm itself: `run --perf` under `perf record -g` (quick start,
#     perf map names), `--no-jit` with and without `--perf` (trampoline
#     stacks), `--perf-jitdump` + `perf inject` (reports by symbol and by
#     srcline, `perf annotate`, `readelf` of the line table, `objdump` of
#     the trampolines) and `toyvm profile`.
#     Without perf, the perf files already in book/src/generated/ are kept.
#
# Flame graphs are real sample data, different on every run: the SVGs in
# book/src/images/ (vmprof-flamegraph.svg, profile-flamegraph.svg) are
# written only when missing or with REGENERATE_IMAGES=1.
#
# The output is stable except for percentages, which the book shows as one
# run measured them (tests/book_truth.rs compares them as placeholders):
# pids, thread ids, timestamps, runtime addresses, compile times and sample
# counts are replaced by placeholders (PID, TID, TIME, ADDR, N...), and
# sample-dependent lists are cut at a threshold and sorted by name. The script is idempotent: it only writes the
# flame graphs as above and book/src/generated/*.txt, and cleans up its
# scratch directory, the perf maps its runs cause in /tmp, and perf's
# build-id cache (kept in the scratch directory).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
# BOOK_OUT=DIR: write the files to DIR instead, and nothing into the book
# (no flame graph either); tests/book_truth.rs compares DIR with the book.
# TOYVM=PATH: use that toyvm binary instead of building one;
# PERF_E2E=PATH likewise for perfsupport's e2e_vm example.
OUT=${BOOK_OUT:-$ROOT/book/src/generated}
CHECK=${BOOK_OUT:+1}
mkdir -p "$OUT"

# Where Cargo builds (CARGO_TARGET_DIR and Cargo configs honoured).
RELEASE="$("$ROOT/tools/cargo-target-dir")/release"
if [[ -z ${TOYVM:-} ]]; then
    echo "generate.sh: building (release)" >&2
    cargo build --release --quiet
    TOYVM="$RELEASE/toyvm"
fi

# say WORD...: prints the command line `$ WORD...` as the book shows it: the
# toyvm binary as `toyvm`, paths in the scratch directory or the repository
# relative, words with spaces or quotes quoted (in double quotes if they hold
# a single quote and nothing double quotes would expand, else in single).
say() {
    local line='$' w
    for w in "$@"; do
        w=${w//"$TOYVM"/toyvm}
        w=${w//"$WORK/"/}
        w=${w//"$WORK"/.}
        w=${w//"$ROOT/"/}
        if [[ $w == *\'* && $w != *[\"\$\`\\]* ]]; then
            w="\"$w\""
        elif [[ $w == *[[:space:]\'\"\$]* || -z $w ]]; then
            w="'${w//\'/\'\\\'\'}'"
        fi
        line+=" $w"
    done
    echo "$line"
}

# Not under /tmp/perf-: perf reads every file below such a path as a perf map.
WORK=$(mktemp -d /tmp/toyvm-book.XXXXXX)
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do rm -f "/tmp/perf-$pid.map"; done
    rm -rf "$WORK"
}
trap cleanup EXIT

# dump_pid DIR: the pid in the name of the one jit-PID.dump in DIR.
dump_pid() {
    local f
    for f in "$1"/jit-*.dump; do
        [[ -e $f ]] || continue
        f=${f##*/jit-}
        echo "${f%.dump}"
    done
}

# note_pids DATA: remember the pids of a perf.data file (their perf maps are
# removed at exit).
note_pids() {
    local pid
    while read -r pid; do PIDS+=("$pid"); done < <(perf script -i "$1" -F pid 2>/dev/null | tr -d ' ' | sort -u)
}

# run_toy FILE.txt CMD...: the command line, its stdout+stderr, its exit status.
run_toy() {
    local file=$1
    shift
    {
        echo "\$ toyvm $*"
        "$TOYVM" "$@" 2>&1 && status=0 || status=$?
        echo "[exit status $status]"
    } >"$OUT/$file"
}

# --- The Toy language ---------------------------------------------------------
run_toy tour.txt run book/examples/tour.toy
run_toy literals.txt run book/examples/literals.toy
run_toy parse.txt run book/examples/parse.toy
run_toy depth.txt run --max-depth 100 book/examples/depth.toy
run_toy runtime-error.txt run examples/scripts/errors.toy
{
    for script in book/examples/errors/*.toy; do
        echo "\$ toyvm check $script"
        "$TOYVM" check "$script" 2>&1 && status=0 || status=$?
        echo "[exit status $status]"
        echo
    done
} >"$OUT/compile-errors.txt"

# --- Bytecode -----------------------------------------------------------------
run_toy disasm-sum.txt disasm book/examples/sum.toy

# --- Tiering and Cranelift ----------------------------------------------------
# `disasm --jit` prints runtime addresses: the absolute column goes, jump and
# call targets inside the region become <+offset>, other addresses ADDR.
strip_jit_addresses() {
    python3 -c '
import re, sys
base = size = None
for line in sys.stdin:
    m = re.match(r"== (\S+) \((\d+) bytes at 0x([0-9a-f]+)\) ==", line)
    if m:
        size, base = int(m.group(2)), int(m.group(3), 16)
        line = line.replace("at 0x" + m.group(3), "at ADDR")
    line = re.sub(r"^  0x[0-9a-f]+ ", "  ", line)
    def target(t):
        a = int(t.group(1), 16)
        if base is not None and base <= a < base + size:
            return f"<+{a - base}>"
        return "ADDR"
    line = re.sub(r"\b([0-9A-F]{9,})h\b", target, line)
    sys.stdout.write(line)
'
}
"$TOYVM" disasm --jit book/examples/fib.toy | strip_jit_addresses >"$WORK/disasm-jit.txt"
# Line tables: a compiled loop's machine code, with the old fallback and today's.
line_table_listing() {
    echo "\$ $1toyvm disasm --jit tests/line_tables/loop.toy   # toy:jit:work, machine code"
    env $1 "$TOYVM" disasm --jit tests/line_tables/loop.toy | strip_jit_addresses |
        awk '/^== / { p = /toy:jit:work:/ } p && m && NF; p && /^-- machine code/ { m = 1 }'
}
line_table_listing "TOYVM_JIT_OLD_LINE_FALLBACK=1 " >"$OUT/line-tables-before.txt"
line_table_listing "" >"$OUT/line-tables-after.txt"
{
    echo "\$ toyvm disasm --jit book/examples/fib.toy   # the native variant of fib, IR part"
    awk '/^== toy:jit:fib:/ { p = 1 } /^-- machine code/ { p = 0 } p' "$WORK/disasm-jit.txt"
} >"$OUT/jit-fib-ir.txt"
{
    echo "\$ toyvm disasm --jit book/examples/fib.toy   # the native variant of fib, machine code"
    awk '/^== toy:jit:fib:/ { p = 1; print; next } /^== / { p = 0 } p && /^-- machine code/ { q = 1 } p && q' \
        "$WORK/disasm-jit.txt" | sed '/^$/d'
} >"$OUT/jit-fib-code.txt"
{
    echo "\$ toyvm disasm --jit book/examples/fib.toy   # the entry shim of fib"
    awk '/^== toy:jit-entry:fib:/ { p = 1 } /^== toy:jit:<main>/ { p = 0 } p' "$WORK/disasm-jit.txt" | sed '/^$/d'
} >"$OUT/jit-fib-shim.txt"
rm -f "$WORK/disasm-jit.txt"
{
    echo "\$ toyvm run --jit-threshold 0 --jit-stats examples/scripts/profile_demo.toy 10 1000"
    echo "  (compile times replaced by N)"
    "$TOYVM" run --jit-threshold 0 --jit-stats examples/scripts/profile_demo.toy 10 1000 2>&1 |
        sed -E 's/: [0-9]+ us$/: N us/'
    echo "\$ toyvm run --jit-stats examples/scripts/profile_demo.toy 10 100000"
    "$TOYVM" run --jit-stats examples/scripts/profile_demo.toy 10 100000 2>&1 |
        sed -E 's/: [0-9]+ us$/: N us/'
} >"$OUT/jit-stats.txt"

# --- When code dies ------------------------------------------------------------
# A literal threshold compiles on the interpreter's thread, so what is
# compiled, evicted and freed is the same on every run.
{
    echo "\$ toyvm run --jit-threshold 10 --jit-code-limit 16K --jit-stats examples/scripts/phases.toy 2>&1 | grep -v -E ' [0-9]+ us\$'"
    "$TOYVM" run --jit-threshold 10 --jit-code-limit 16K --jit-stats examples/scripts/phases.toy 2>&1 |
        grep -v -E ' [0-9]+ us$'
} >"$OUT/code-dies-stats.txt"
# A limit the pinned trampolines fill: one warning, and the run interpreted.
{
    say "$TOYVM" run --perf --jit-code-limit 4K examples/scripts/profile_demo.toy 10 1000
    "$TOYVM" run --perf --jit-code-limit 4K examples/scripts/profile_demo.toy 10 1000 2>&1 &
    pid=$!
    wait "$pid"
    rm -f "/tmp/perf-$pid.map"
} >"$OUT/code-dies-pinned.txt"
# The perf map of the same run, with the quarantine and without it: the
# filter prints the pairs of lines that give one address two names.
# ANCHOR: stale_names
stale_names() {
    python3 - "$1" <<'PY'
import sys
rows = []
for n, line in enumerate(open(sys.argv[1]), 1):
    start, size, name = line.rstrip("\n").split(" ", 2)
    rows.append((int(start, 16), int(size, 16), name, n))
base = min(r[0] for r in rows)
pairs = []
for a in rows:
    for b in rows:
        if b[3] > a[3] and b[0] < a[0] + a[1] and a[0] < b[0] + b[1] and a[2] != b[2]:
            pairs.append((a, b))
print(f"{len(rows)} lines, {len(pairs)} pairs of lines that give an address two names")
if pairs:
    a, b = pairs[0]  # the first line of the map given away, and its first new owner
    for start, size, name, n in (a, b):
        print(f"  line {n}: BASE+{start - base:#x} {size:x} {name}")
PY
}
# ANCHOR_END: stale_names
for quarantine in on off; do
    env=()
    [[ $quarantine == on ]] || env=(TOYVM_NO_QUARANTINE=1)
    env "${env[@]}" "$TOYVM" run --perf --jit-threshold 10 --jit-code-limit 16K examples/scripts/phases.toy >/dev/null &
    pid=$!
    wait "$pid"
    PIDS+=("$pid")
    {
        echo "\$ ${env[*]:+${env[*]} }toyvm run --perf --jit-threshold 10 --jit-code-limit 16K examples/scripts/phases.toy"
        echo "\$ stale_names /tmp/perf-\$PID.map   # book/generate.sh's filter; addresses as offsets from the lowest one (BASE)"
        stale_names "/tmp/perf-$pid.map"
    } >"$OUT/code-dies-map-quarantine-$quarantine.txt"
    rm -f "/tmp/perf-$pid.map"
done
# Many VMs in one process: the mapping count and peak RSS stay flat
# however many VMs run in turn (RSS under 16 MB shown as such).
if [[ -z ${EMBED:-} ]]; then
    cargo build --release --quiet --example embed
    EMBED="$RELEASE/examples/embed"
fi
mkdir -p "$WORK/embed"
{
    for n in 20 200; do
        for perf in "" --perf; do
            cmd=("$EMBED" --jit-threshold 0 $perf --perf-jitdump --perf-dir "$WORK/embed" --gdb --stats "$n"
                tests/embed/alpha.toy tests/embed/beta.toy)
            echo "$(say "${cmd[@]}") 2>&1 >/dev/null | awk '/^embed:/ && \$4 < 16384 && \$6 < 64 { \$4 = \"< 16384\"; \$6 = \"< 64\" } 1'"
            "${cmd[@]}" 2>"$WORK/embed/err" >/dev/null & pid=$!
            wait "$pid"
            PIDS+=("$pid")
            awk '/^embed:/ && $4 < 16384 && $6 < 64 { $4 = "< 16384"; $6 = "< 64" } 1' "$WORK/embed/err"
            rm -f "$WORK"/embed/jit-*.dump "$WORK/embed/err" "/tmp/perf-$pid.map"
        done
    done
} >"$OUT/code-dies-embed.txt"

# --- VMProf-style profiles and toyvm report -------------------------------------
# Sample counts differ from run to run: counts and seconds become
# placeholders in the text files; percentages stay (tests/book_truth.rs
# compares them as placeholders). The flame graph SVG is real data
# and so differs per run: it is written only when missing, or when
# REGENERATE_IMAGES=1 is set.
"$TOYVM" run --vmprof "$WORK/demo.prof" examples/scripts/profile_demo.toy 200000 300 >/dev/null
strip_counts() {
    sed -E -e 's/: [0-9]+ samples/: N samples/' \
        -e 's/\([0-9]+\.[0-9]+ s\)/(N s)/' -e 's|'"$WORK"'/||g'
}
{
    echo "\$ toyvm run --vmprof demo.prof examples/scripts/profile_demo.toy 200000 300"
    echo "\$ toyvm report demo.prof"
    "$TOYVM" report "$WORK/demo.prof" | strip_counts
} >"$OUT/vmprof-report.txt"
{
    echo "\$ toyvm report --folded demo.prof   # stacks under 10% of the samples left out; counts replaced by N"
    # outer's own share (about 2.5%) and the compiler thread's vary from
    # run to run: the threshold stays far from both.
    "$TOYVM" report --folded "$WORK/demo.prof" | grep -v 'jit_compiler' |
        awk '{ n[NR] = $NF; line[NR] = $0; total += $NF }
            END { for (i = 1; i <= NR; i++) if (n[i] * 10 >= total) print line[i] }' | sed -E 's/ [0-9]+$/ N/'
} >"$OUT/vmprof-folded.txt"
# The exports: pprof as `go tool pprof` shows it (when go is installed;
# otherwise the committed output is kept), and the shape of the speedscope
# and Firefox files, rows sorted by name (tests/book_truth.rs compares
# the counts and shares as placeholders).
"$TOYVM" report --format pprof -o "$WORK/demo.pb.gz" "$WORK/demo.prof"
if command -v go >/dev/null; then
    {
        echo "\$ toyvm report --format pprof -o demo.pb.gz demo.prof"
        echo "\$ go tool pprof -top -sample_index=samples demo.pb.gz   # rows sorted by name, <jit compiler> left out"
        (cd "$WORK" && HOME="$WORK" PPROF_TMPDIR="$WORK" go tool pprof -top -sample_index=samples demo.pb.gz 2>/dev/null) |
            grep -v -e '^Time:' -e '^Duration:' -e 'jit compiler' | sed -e 's|'"$WORK"'/||g' | python3 -c 'import re, sys
rows, head = [], []
for line in sys.stdin.read().splitlines():
    m = re.match(r" *[0-9]+ +[0-9.]+% +[0-9.]+% +[0-9]+ +[0-9.]+% +(.*)$", line)
    if m:
        rows.append(line)
    elif not line.startswith("Showing"):
        head.append(line)
print("\n".join(head + sorted(rows, key=lambda r: r.split("%")[-1].strip())))'
    } >"$OUT/vmprof-export-pprof.txt"
fi
"$TOYVM" report --format speedscope -o "$WORK/demo.speedscope.json" "$WORK/demo.prof"
{
    echo "\$ toyvm report --format speedscope -o demo.speedscope.json demo.prof"
    echo "\$ python3 -m json.tool demo.speedscope.json   # abridged: the frame table in full, the samples and weights elided"
    python3 -c 'import json, sys
f = json.load(open(sys.argv[1]))
p = f["profiles"][0]
frames = sorted(f["shared"]["frames"], key=lambda fr: fr["name"])
frames = [fr for fr in frames if fr["name"] != "<jit compiler>"]
for fr in frames:
    fr["file"] = fr.get("file", "").split("/")[-1]
short = {"$schema": f["$schema"], "exporter": "toyvm N", "name": "toyvm profile of profile_demo.toy",
    "shared": {"frames": frames},
    "profiles": [{"type": p["type"], "name": "profile_demo.toy", "unit": p["unit"], "startValue": 0,
        "endValue": "N", "samples": ["[...one stack per distinct stack, root first...]"], "weights": ["N", "..."]}]}
print(json.dumps(short, indent=2))' "$WORK/demo.speedscope.json"
} >"$OUT/vmprof-export-speedscope.txt"
"$TOYVM" report --format firefox -o "$WORK/demo.firefox.json" "$WORK/demo.prof"
{
    echo "\$ toyvm report --format firefox -o demo.firefox.json demo.prof"
    echo "\$ # what is inside: the product line, each thread, its samples and its functions (counts replaced by N)"
    python3 -c 'import json, sys
f = json.load(open(sys.argv[1]))
print("product:", f["meta"]["product"].replace(sys.argv[2] + "/", ""))
print("interval:", f["meta"]["interval"], "ms")
for t in f["threads"][:1]:
    names = sorted(set(t["stringArray"][i] for i in t["funcTable"]["name"]) - {"<jit compiler>"})
    print("thread: main" if t["isMainThread"] else "thread:", "- N samples, one interval apart")
    for n in names:
        print("  function:", n)' "$WORK/demo.firefox.json" "$PWD"
} >"$OUT/vmprof-export-firefox.txt"
rm -f "$WORK/demo.pb.gz" "$WORK/demo.speedscope.json" "$WORK/demo.firefox.json"
# The differential view: the same script interpreted (before) and with the
# JIT (after).
"$TOYVM" run --no-jit --vmprof "$WORK/before.prof" examples/scripts/profile_demo.toy 200000 300 >/dev/null
"$TOYVM" run --vmprof "$WORK/after.prof" examples/scripts/profile_demo.toy 200000 300 >/dev/null
{
    echo "\$ toyvm run --no-jit --vmprof before.prof examples/scripts/profile_demo.toy 200000 300"
    echo "\$ toyvm run --vmprof after.prof examples/scripts/profile_demo.toy 200000 300"
    echo "\$ toyvm report --diff before.prof after.prof   # rows sorted by name, <jit compiler> left out"
    "$TOYVM" report --diff "$WORK/before.prof" "$WORK/after.prof" | grep -v 'jit compiler' | python3 -c 'import re, sys
lines = sys.stdin.read().splitlines()
number = r" +[+-]?[0-9]+\.[0-9]"
rows = []
for line in lines[4:]:
    m = re.match("(?:%s){6}  (.*)$" % number, line)
    if m:
        rows.append(line)
print("\n".join(lines[:4] + sorted(rows, key=lambda r: r.split("  ")[-1])))'
} >"$OUT/vmprof-diff.txt"
(cd "$WORK" && "$TOYVM" report --diff before.prof --flamegraph diff.svg after.prof >/dev/null 2>&1)
if [[ -z $CHECK && (! -e book/src/images/vmprof-diff.svg || ${REGENERATE_IMAGES:-} == 1) ]]; then
    cp "$WORK/diff.svg" book/src/images/vmprof-diff.svg
fi
rm -f "$WORK/before.prof" "$WORK/after.prof" "$WORK/diff.svg"
# Lines mode: the hottest lines of each function.
"$TOYVM" run --vmprof "$WORK/demo-lines.prof" --vmprof-lines examples/scripts/profile_demo.toy 200000 300 >/dev/null
{
    echo "\$ toyvm run --vmprof demo-lines.prof --vmprof-lines examples/scripts/profile_demo.toy 200000 300"
    echo "\$ toyvm report --lines demo-lines.prof   # the hottest lines only: functions and lines under 5% total left out"
    "$TOYVM" report --lines "$WORK/demo-lines.prof" | sed -n '/^Hottest lines/,$p' |
        python3 -c 'import re, sys
# Functions and lines under 5% of the samples left out (a rare sample on
# the compiler thread, a loop header), and the count of lines not shown.
out = []
for part in sys.stdin.read().split("\n\n"):
    lines = part.split("\n")
    m = re.search(r": ([0-9.]+)% total, ", lines[0])
    if m and float(m.group(1)) < 5:
        continue
    out.append("\n".join(l for l in lines if not l.startswith("  (") and not (
        re.match(r" +[0-9.]+% +[0-9.]+% +[0-9]+ ", l) and float(l.split("%")[0]) < 5)))
print("\n\n".join(out).rstrip("\n"))' | strip_counts
} >"$OUT/vmprof-lines-report.txt"
rm -f "$WORK/demo-lines.prof"
# The PyPI vmprof reader, if one is installed (VMPROFSHOW=/path/to/vmprofshow
# or on PATH); otherwise the committed output is kept.
VMPROFSHOW=${VMPROFSHOW:-$(command -v vmprofshow || true)}
if [[ -n $VMPROFSHOW ]]; then
    {
        echo "\$ vmprofshow demo.prof tree   # PyPI vmprof; colours removed"
        (cd "$WORK" && "$VMPROFSHOW" demo.prof tree 2>&1) | sed -E 's/\x1b\[[0-9;]*m//g' |
            grep -v '^WARNING: The profiling completed'
    } >"$OUT/vmprofshow.txt"
fi
if [[ -z $CHECK && (! -e book/src/images/vmprof-flamegraph.svg || ${REGENERATE_IMAGES:-} == 1) ]]; then
    (cd "$WORK" && "$TOYVM" report --flamegraph flamegraph.svg demo.prof >/dev/null)
    cp "$WORK/flamegraph.svg" book/src/images/vmprof-flamegraph.svg
fi
rm -f "$WORK/demo.prof"

# --- perfsupport: the end-to-end test's tiny "VM" (the example e2e_vm) ---------
echo "generate.sh: building perfsupport's e2e_vm example" >&2
if [[ -z ${PERF_E2E:-} ]]; then
    cargo build --release --quiet -p perfsupport --example e2e_vm
fi
E2E=${PERF_E2E:-$RELEASE/examples/e2e_vm}


"$E2E" "$WORK" >"$WORK/child.out"
PID=$(sed -n 's/^pid=//p' "$WORK/child.out")
PIDS+=("$PID")
{
    echo "\$ cat /tmp/perf-\$PID.map"
    sed -E 's/^[0-9a-f]+ /ADDR /' "/tmp/perf-$PID.map"
} >"$OUT/perf-map.txt"
{
    echo "\$ cargo run --release -p perfsupport --example e2e_vm -- .   # writes jit-\$PID.dump"
    echo "\$ toyvm jitdump --redact jit-\$PID.dump"
    "$TOYVM" jitdump --redact "$WORK/jit-$PID.dump"
} >"$OUT/jitdump-records.txt"
rm -f "$WORK/jit-$PID.dump"

# --- perf record + inject (only where perf works) -------------------------------
if command -v perf >/dev/null && command -v readelf >/dev/null &&
    perf record -q -N -e cpu-clock -o /dev/null -- true >/dev/null 2>&1; then
    echo "generate.sh: perf record / inject" >&2
    printf '[buildid]\n\tdir = %s\n' "$WORK/buildid" >"$WORK/perfconfig"
    export PERF_CONFIG="$WORK/perfconfig" DEBUGINFOD_URLS=
    (cd "$WORK" && perf record -q -N -k 1 -e cpu-clock -F 999 \
        --call-graph dwarf -o rec.data -- "$E2E" . >child.out 2>/dev/null)
    PID=$(sed -n 's/^pid=//p' "$WORK/child.out")
    PIDS+=("$PID")
    (cd "$WORK" && perf inject --jit -i rec.data -o inj.data)
    SO="$WORK/jitted-$PID-0.so"
    strip_paths() { sed -e "s|$WORK|WORK|g" -e "s/jitted-$PID-/jitted-PID-/g" -e "s/\b$PID\b/PID/g"; }
    {
        echo "\$ perf inject --jit -i rec.data -o inj.data"
        echo "\$ ls WORK"
        (cd "$WORK" && ls jitted-*.so jit-*.dump) | strip_paths
        echo
        echo "\$ readelf -SW jitted-PID-0.so"
        readelf -SW "$SO" | strip_paths | sed -n '/^Section Headers/,/^Key to Flags/p' | sed '$d'
    } >"$OUT/readelf-sections.txt"
    {
        echo "\$ readelf --debug-dump=frames jitted-PID-0.so"
        readelf --debug-dump=frames "$SO" | strip_paths | sed '/^$/N;/^\n$/D'
    } >"$OUT/readelf-frames.txt"
    {
        echo "\$ readelf --debug-dump=decodedline jitted-PID-0.so"
        readelf --debug-dump=decodedline "$SO" | strip_paths | cat -s
    } >"$OUT/readelf-lines.txt"
    {
        echo "\$ perf script -i inj.data --no-inline -F ip,sym   # first sample in spin called from mid; ip column dropped"
        (cd "$WORK" && perf script -i inj.data --no-inline -F ip,sym >script.txt 2>/dev/null)
        awk 'BEGIN { RS = ""; FS = "\n" } $1 ~ / toy::e2e_spin$/ && $2 ~ / toy::e2e_mid$/ { print; exit }' "$WORK/script.txt" |
            awk '{ $1 = ""; print "   " $0 }'
    } >"$OUT/perf-script-stack.txt"
    {
        echo "\$ perf report -i inj.data --no-inline --no-children --sort dso,sym,srcline -g none --stdio --percent-limit 5"
        echo "  (sorted by object and line)"
        (cd "$WORK" && perf report -i inj.data --no-inline --no-children --sort dso,sym,srcline \
            -g none --stdio --percent-limit 5 2>/dev/null) |
            grep -E 'jitted-' | strip_paths |
            sed -E -e 's/ +$//' -e 's/   +/  /g' | sort -k2
    } >"$OUT/perf-report.txt"

    # The interpreter as perf sees it without trampolines: every Toy frame is
    # one native interp_entry frame, named the same, and each caller's frame
    # continues in the handler of its Call instruction. The sample shown is
    # the first whose innermost frame is the handler of MulF (inner_hot's
    # `float(h & 7) * 0.5`, one of its most frequent instructions) called
    # from interp_entry: the innermost frame of a sample is the handler it
    # landed in, and samples in a handler before its frame is set up lack
    # the interp_entry frame.
    rec=(perf record -q -N -e cpu-clock -F 999 -g -o "$WORK/interp.data" --
        "$TOYVM" run --no-jit examples/scripts/profile_demo.toy 300 100000)
    "${rec[@]}" >/dev/null 2>&1
    perf script -i "$WORK/interp.data" --no-inline -F ip,sym >"$WORK/interp.txt" 2>/dev/null
    {
        say "${rec[@]}"
        echo "\$ perf script -i interp.data --no-inline -F ip,sym   # one sample in inner_hot's MulF; ip column dropped"
        awk 'BEGIN { RS = ""; FS = "\n" }
            { n = 0; for (i = 1; i <= NF; i++) if ($i ~ / vm::interp::interp_entry$/) n++ }
            $1 ~ / vm::interp::handlers::MulF$/ && $2 ~ / vm::interp::interp_entry$/ && n == 4 { print; exit }' "$WORK/interp.txt" |
            awk '{ $1 = ""; print "   " $0 }'
    } >"$OUT/perf-interp-stack.txt"

    # --- The quick start, trampolines, line tables -----------------------------
    # All from the repository root, so region names carry the short path.
    rstrip() { sed -E -e 's/ +$//'; } # trailing blanks (perf pads its columns)
    rec=(perf record -q -g -e cpu-clock -F 999 -o "$WORK/quick.data" --
        "$TOYVM" run --perf examples/scripts/profile_demo.toy 300 100000)
    "${rec[@]}" >"$WORK/quick.out" 2>&1
    {
        say "${rec[@]}"
        cat "$WORK/quick.out"
        echo "\$ perf report -i quick.data --children --sort sym -g none --stdio --percent-limit 3"
        echo "  (toy: and interpreter lines, sorted by name)"
        perf report -i "$WORK/quick.data" --children --sort sym -g none --stdio --percent-limit 3 2>/dev/null |
            grep -E '\[\.\] (toy:|vm::interp::interp_entry$|vm::driver::run$|main$)' | rstrip | sort -k3
    } >"$OUT/quick-perf-report.txt"
    note_pids "$WORK/quick.data"
    {
        echo "\$ cut -d' ' -f3- /tmp/perf-\$PID.map   # the names only"
        for pid in $(perf script -i "$WORK/quick.data" -F pid 2>/dev/null | sort -u | tr -d ' '); do
            if [[ -e /tmp/perf-$pid.map ]]; then cut -d' ' -f3- "/tmp/perf-$pid.map"; fi
        done
    } >"$OUT/quick-perf-map.txt"

    rec=(perf record -q -g -e cpu-clock -F 999 -o "$WORK/tramp.data" --
        "$TOYVM" run --no-jit --perf examples/scripts/profile_demo.toy 300 100000)
    "${rec[@]}" >/dev/null 2>&1
    note_pids "$WORK/tramp.data"
    {
        say "${rec[@]}"
        echo "\$ perf script -i tramp.data --no-inline -F ip,sym   # one sample in inner_hot's MulF; ip column dropped"
        perf script -i "$WORK/tramp.data" --no-inline -F ip,sym >"$WORK/tramp.txt" 2>/dev/null
        awk 'BEGIN { RS = ""; FS = "\n" }
                $1 ~ / vm::interp::handlers::MulF$/ && $2 ~ / vm::interp::interp_entry$/ &&
                $3 ~ / toy:interp:inner_hot:/ { print; exit }' "$WORK/tramp.txt" |
            awk '{ $1 = ""; print "   " $0 }'
    } >"$OUT/perf-trampoline-stack.txt"

    # The jitdump path; --jit-threshold 0 so the hot loop runs compiled, for
    # about half a second: enough samples that the lines above the 5% and
    # 1% limits below are far above them (line 15 has about 16%).
    # In a directory of its own, so the only jit-*.dump there is toyvm's.
    JD="$WORK/jd"
    mkdir -p "$JD"
    # Run from the repository root, so names carry the short script path.
    rec=(perf record -q -k 1 -e cpu-clock -F 999 --call-graph dwarf -o "$JD/jd.data" --
        "$TOYVM" run --jit-threshold 0 --perf-jitdump --perf-dir "$JD"
        examples/scripts/profile_demo.toy 1000 100000)
    "${rec[@]}" >/dev/null 2>&1
    (cd "$JD" && perf inject --jit -i jd.data -o jd-inj.data)
    JPID=$(dump_pid "$JD")
    PIDS+=("$JPID")
    jstrip() { sed -e "s|$JD/||g" -e "s|$JD|.|g" -e "s|$ROOT/||g" -e "s/jitted-$JPID-/jitted-PID-/g" -e "s/-$JPID\b/-PID/g"; }
    {
        say "${rec[@]}"
        echo "\$ cd jd"
        echo "\$ perf inject --jit -i jd.data -o jd-inj.data"
        echo "\$ perf report -i jd-inj.data --no-children --sort dso,sym -g none --stdio --percent-limit 1"
        echo "  (JIT lines only; N in jitted-PID-N.so is the region's code index)"
        (cd "$JD" && perf report -i jd-inj.data --no-children --sort dso,sym -g none --stdio \
            --percent-limit 1 2>/dev/null) | grep -E 'jitted-' | jstrip | rstrip | sed -E 's/   +/  /g' | sort -k2
    } >"$OUT/quick-jitdump-report.txt"
    {
        echo "\$ perf report -i jd-inj.data --no-children --sort sym,srcline -g none --stdio --percent-limit 5"
        echo "  (sorted by line)"
        (cd "$JD" && perf report -i jd-inj.data --no-children --sort sym,srcline -g none --stdio \
            --percent-limit 5 2>/dev/null) | grep -E 'toy:' | jstrip | rstrip | sed -E 's/   +/  /g' | sort -t: -k6n
    } >"$OUT/srcline-report.txt"
    HOT=""
    for so in "$JD"/jitted-*.so; do
        if grep -q 'toy:jit:inner_hot:' "$so"; then HOT=${so##*/}; break; fi
    done
    if [[ -n $HOT ]]; then
        {
            echo "\$ perf annotate -i jd-inj.data --stdio --no-source toy:jit:inner_hot:examples/scripts/profile_demo.toy:11"
            echo "  (the first 70 lines)"
            (cd "$JD" && perf annotate -i jd-inj.data --stdio --no-source \
                "toy:jit:inner_hot:examples/scripts/profile_demo.toy:11" >annotate.txt 2>/dev/null)
            jstrip <"$JD/annotate.txt" | sed -E \
                -e 's/^ *[0-9]+\.[0-9]+ (profile_demo)/    NN.NN \1/' -e 's/\([0-9]+ samples/(N samples/' -e 's/^-{10,}$/------------------------------------------------------------/' \
                -e 's| // profile_demo\.toy:[0-9]+||' -e 's/ +$//' | grep -v '^ *:\?$' |
                awk '/^Sorted summary/ { skip = 1; next } skip && /^ Percent/ { skip = 0 } !skip' | sed -n '1,70p'
        } >"$OUT/perf-annotate.txt"
    fi
    {
        echo "\$ readelf -W --debug-dump=decodedline $(basename "${HOT:-jitted-PID-N.so}" | jstrip)"
        [[ -z $HOT ]] || readelf -W --debug-dump=decodedline "$JD/$HOT" | jstrip | cat -s
    } >"$OUT/readelf-lines-jit.txt"

    # A trampoline as perf inject writes it: exactly the live instructions
    # (toyvm's trampolines differ in one immediate, so none needs a marker).
    TD="$WORK/tramp-jd"
    mkdir -p "$TD"
    rec=(perf record -q -k 1 -e cpu-clock -o "$TD/t.data" -- "$TOYVM" run --no-jit --perf-jitdump
        --perf-dir "$TD" examples/scripts/profile_demo.toy 2 1000)
    "${rec[@]}" >/dev/null 2>&1
    (cd "$TD" && perf inject --jit -i t.data -o ti.data)
    TPID=$(dump_pid "$TD")
    PIDS+=("$TPID")
    {
        say "${rec[@]}"
        echo "\$ cd tramp-jd && perf inject --jit -i t.data -o ti.data"
        echo "\$ objdump -d --no-show-raw-insn jitted-PID-N.so   # each file, prologue to ret; immediates of addresses replaced"
        for so in "$TD"/jitted-*.so; do
            objdump -d --no-show-raw-insn "$so" >"$TD/objdump.txt"
            awk '/>:$/ { p = 1; print; next }
                p && /movabs/ { sub(/\$0x[0-9a-f]+/, "$ADDR") }
                p && /ret/ { print; print ""; p = 0; next }
                p' "$TD/objdump.txt"
        done | sed -e "s/jitted-$TPID-/jitted-PID-/g"
    } >"$OUT/trampoline-objdump.txt"

    # toyvm profile: perf record + inject + report + flame graph in one step.
    # From the repository root, so names carry the short script path.
    prof=("$TOYVM" profile --out "$WORK/toyvm-profile" examples/scripts/profile_demo.toy)
    "${prof[@]}" >"$WORK/prof.out" 2>"$WORK/prof.err" || true
    PPID_=$(dump_pid "$WORK/toyvm-profile/jitdump")
    if [[ -n $PPID_ && -s $WORK/toyvm-profile/report.txt ]]; then
        PIDS+=("$PPID_")
        pstrip() { sed -e "s|$WORK/||g" -e "s|$ROOT/||g" -e "s/jitted-$PPID_-/jitted-PID-/g"; }
        {
            echo "$(say "${prof[@]}")   # perf's own progress lines left out"
            cat "$WORK/prof.out"
            grep '^toyvm profile:' "$WORK/prof.err" | sed "s|$WORK/||g"
            echo "\$ ls toyvm-profile"
            (cd "$WORK/toyvm-profile" && ls)
            echo
            echo "\$ cat toyvm-profile/report.txt"
            echo "  (the top entry and its largest call chain, innermost first; tree drawing, the chain's percentages and"
            echo "  inlined frames left out: perf shows each interpreter frame either as vm::interp::interp_entry"
            echo "  or only as its inlined parts, depending on the sample; here it is always the former)"
            # The chain ends at vm::driver::run: below it perf shows
            # toyvm::main in some runs and elides it (inlined) in others.
            awk '/^ +[0-9.]+%/ { p = 1 } p { print } /vm::driver::run$/ { if (p) exit }' "$WORK/toyvm-profile/report.txt" |
                pstrip | python3 -c 'import re, sys
lines = sys.stdin.read().splitlines()
print(re.sub(r"  +", "  ", lines[0]).rstrip())
last = None
for line in lines[1:]:
    frame = re.sub(r"^[\s|-]*(?:[0-9]+\.[0-9]+%--)?", "", line).rstrip()
    # One interp_entry line per interpreted frame, however perf showed it.
    if not frame or frame.endswith("(inlined)") or frame == "vm::interp::interp_entry":
        continue
    if frame.startswith("toy:interp:"):
        print("        vm::interp::interp_entry")
    if frame != last:  # perf repeats a frame whose inlined part it elides
        print("        " + frame)
    last = frame'
        } >"$OUT/toyvm-profile.txt"
        if [[ -z $CHECK && (! -e book/src/images/profile-flamegraph.svg || ${REGENERATE_IMAGES:-} == 1) ]]; then
            cp "$WORK/toyvm-profile/flamegraph.svg" book/src/images/profile-flamegraph.svg
        fi
    else
        echo "generate.sh: toyvm profile failed; keeping toyvm-profile.txt" >&2
        cat "$WORK/prof.err" >&2
    fi

    # When code dies: a function compiled again after its eviction is a new
    # JIT_CODE_LOAD, so a new jitted-PID-N.so, and perf report shows one
    # row per object; summing the rows by name gives one row per function.
    PD="$WORK/pd"
    mkdir -p "$PD"
    rec=(perf record -q -k 1 -e cpu-clock -F 999 -o "$PD/pd.data" -- "$TOYVM" run --jit-threshold 10
        --jit-code-limit 16K --perf-jitdump --perf-dir "$PD" examples/scripts/phases.toy 30)
    "${rec[@]}" >/dev/null 2>&1
    (cd "$PD" && perf inject --jit -i pd.data -o pd-inj.data)
    DPID=$(dump_pid "$PD")
    PIDS+=("$DPID")
    dstrip() { sed -E -e "s/jitted-$DPID-[0-9]+/jitted-PID-N/g" -e 's/   +/  /g'; }
    {
        say "${rec[@]}"
        echo "\$ cd pd && perf inject --jit -i pd.data -o pd-inj.data"
        echo "\$ ls jitted-*.so | wc -l   # one object per JIT_CODE_LOAD"
        (cd "$PD" && ls jitted-*.so | wc -l)
        echo "\$ grep -l 'toy:jit:phase0:' jitted-*.so | wc -l   # the objects that hold a compile of phase0"
        (cd "$PD" && grep -l 'toy:jit:phase0:' jitted-*.so | wc -l)
        for sort in dso,sym sym; do
            echo "\$ perf report -i pd-inj.data --no-children --sort $sort -g none --stdio | grep 'toy:jit:phase0:' | head -3"
            echo "  (code indexes replaced by N)"
            (cd "$PD" && perf report -i pd-inj.data --no-children --sort "$sort" -g none --stdio 2>/dev/null) |
                grep 'toy:jit:phase0:' | head -3 | rstrip | dstrip
        done
        echo "\$ perf report -i pd-inj.data --no-children --sort dso,sym -g none --stdio |"
        echo "    awk '/toy:jit:/ { p[\$NF] += \$1 } END { for (n in p) if (p[n] >= 2) printf \"%6.2f%%  %s\\n\", p[n], n }' | sort -k2"
        echo "  (the rows summed by name, names with 2% or more)"
        (cd "$PD" && perf report -i pd-inj.data --no-children --sort dso,sym -g none --stdio 2>/dev/null) |
            awk '/toy:jit:/ { p[$NF] += $1 } END { for (n in p) if (p[n] >= 2) printf "%6.2f%%  %s\n", p[n], n }' |
            sort -k2 | rstrip
    } >"$OUT/code-dies-perf-report.txt"
    rm -rf "$PD"
else
    echo "generate.sh: perf or readelf unavailable: keeping the perf outputs already in $OUT" >&2
fi

# Porting chapter: the C mini-JIT's DWARF call chain through its function
# without frame pointer (perfsupport-capi; needs perf, cc and pkg-config).
if command -v perf >/dev/null && command -v cc >/dev/null && command -v pkg-config >/dev/null &&
    perf record -q -N -e cpu-clock -o /dev/null -- true >/dev/null 2>&1; then
    cargo build --release --quiet -p perfsupport-capi
    mkdir -p "$WORK/minijit"
    [[ -e $WORK/perfconfig ]] || printf '[buildid]\n\tdir = %s\n' "$WORK/buildid" >"$WORK/perfconfig"
    cc -O2 -g -fno-omit-frame-pointer examples/c-minijit/minijit.c -o "$WORK/minijit/minijit" \
        $(PKG_CONFIG_PATH="$ROOT/perfsupport-capi" pkg-config --cflags --libs perfsupport)
    {
        echo "\$ perf record -q -k 1 -e cpu-clock --call-graph dwarf -o perf.data ./minijit --jitdump-dir ."
        echo "\$ perf inject --jit -i perf.data -o perf.jit.data"
        echo "\$ perf script -F ip,sym -i perf.jit.data   # the first sample in minijit::leaf; ip column dropped"
        (cd "$WORK/minijit" && PERF_CONFIG="$WORK/perfconfig" perf record -q -k 1 -e cpu-clock --call-graph dwarf \
            -o perf.data ./minijit --jitdump-dir . >/dev/null 2>&1 &&
            PERF_CONFIG="$WORK/perfconfig" perf inject --jit -i perf.data -o perf.jit.data &&
            PERF_CONFIG="$WORK/perfconfig" perf script -F ip,sym -i perf.jit.data 2>/dev/null |
            awk 'BEGIN { RS = "" } !done && /minijit::leaf/ { print; done = 1 }' | sed 's/^[[:space:]]*[0-9a-f]* //')
    } >"$OUT/minijit-dwarf-chain.txt"
    # The packed example: what perfsupport_register_ex reports per layout,
    # and a DWARF stack through four back-to-back functions registered
    # caller first (the order that named nothing right before 0.2).
    cc -O2 -g -fno-omit-frame-pointer examples/c-minijit/packed.c -o "$WORK/minijit/packed" \
        $(PKG_CONFIG_PATH="$ROOT/perfsupport-capi" pkg-config --cflags --libs perfsupport)
    for mode in "" --down --batch --spaced; do
        echo "\$ ./packed --rounds 1${mode:+ $mode}"
        (cd "$WORK/minijit" && ./packed --rounds 1 --jitdump-dir . $mode)
    done >"$OUT/packed-register.txt"
    {
        echo "\$ perf record -q -k 1 -e cpu-clock --call-graph dwarf -o perf.data ./packed --down"
        echo "\$ perf inject --jit -i perf.data -o perf.jit.data"
        echo "\$ perf script -F ip,sym -i perf.jit.data   # the first sample in packed::leaf; ip column dropped"
        (cd "$WORK/minijit" && PERF_CONFIG="$WORK/perfconfig" perf record -q -k 1 -e cpu-clock --call-graph dwarf \
            -o packed.data ./packed --down --rounds 3000 --jitdump-dir . >/dev/null 2>&1 &&
            PERF_CONFIG="$WORK/perfconfig" perf inject --jit -i packed.data -o packed.jit.data &&
            PERF_CONFIG="$WORK/perfconfig" perf script -F ip,sym -i packed.jit.data 2>/dev/null |
            awk 'BEGIN { RS = "" } !done && /packed::leaf/ { print; done = 1 }' | sed 's/^[[:space:]]*[0-9a-f]* //')
    } >"$OUT/packed-dwarf-chain.txt"
    if command -v gdb >/dev/null; then
        # The debugger: PERFSUPPORT_OUTPUT_GDB names the packed frames; a
        # retired function is gone (`--replace`).
        cp examples/c-minijit/packed.mj "$WORK/minijit/"
        session=(-ex 'break host_probe' -ex 'run --rounds 1 --replace --gdb --jitdump-dir .' -ex bt
            -ex 'frame 1' -ex 'set $old = $pc' -ex continue -ex bt -ex 'info symbol $old' ./packed)
        {
            say gdb -nx -batch "${session[@]}"
            echo "  (gdb's notes on threads left out)"
            (cd "$WORK/minijit" && gdb -nx -batch -ex 'set pagination off' -ex 'set width 0' \
                -ex 'set debuginfod enabled off' "${session[@]}" 2>&1 |
                grep -v -e 'libthread_db' -e '^\[Inferior' -e '^\[New Thread' -e '^\[Thread ' |
                sed "s#$ROOT/##g")
        } >"$OUT/gdb-packed.txt"
    fi
    for dump in "$WORK"/minijit/jit-*.dump; do
        pid=${dump##*/jit-}
        rm -f "/tmp/perf-${pid%.dump}.map"
    done
fi

# The Debuggers chapter: gdb through the GDB JIT interface (`run --gdb`).
if command -v gdb >/dev/null; then
    gdb_session() { gdb -nx -batch -ex 'set pagination off' -ex 'set width 0' "$@" 2>&1 |
        grep -v -e '^warning: Missing auto-load' -e '^of file ' -e '^Use `info auto-load' \
            -e 'libthread_db' -e '^\[New Thread' -e '^\[Thread .* exited' -e '^\[Inferior' -e '^Kill the program'; }
    # An explicit threshold, as in tests/gdb.rs: spin compiles on the
    # interpreter's thread at its 1000th call, where the breakpoint is hit.
    session=(-ex 'set breakpoint pending on' -ex "break -function 'toy:jit:spin:tests/gdb/hot.toy:5'"
        -ex run -ex 'info line' -ex list -ex up -ex down -ex finish -ex kill
        --args "$TOYVM" run --gdb --jit-threshold 1000 tests/gdb/hot.toy 100)
    {
        say gdb -nx -batch -ex 'set pagination off' -ex 'set width 0' "${session[@]}"
        echo "  (gdb's notes on auto-loading, threads and the inferior left out)"
        gdb_session "${session[@]}"
    } >"$OUT/gdb-breakpoint.txt"
    for flag in --gdb ""; do
        name=$([[ -n $flag ]] && echo with-gdb || echo without-gdb)
        "$TOYVM" run $flag tests/gdb/hot.toy 1000000000000 >"$WORK/hot.out" &
        hot=$!
        until [[ -s $WORK/hot.out ]]; do sleep 0.1; done
        sleep 0.5
        {
            echo "$(say "$TOYVM" run $flag tests/gdb/hot.toy 1000000000000) &"
            echo "\$ gdb -nx -batch -ex 'set pagination off' -ex 'set width 0' -ex bt -p \$!   # the frames, down to main"
            gdb_session -ex bt -p "$hot" | grep '^#' | sed '/ main () at src\/main.rs/q'
        } >"$OUT/gdb-backtrace-$name.txt"
        kill "$hot"; wait "$hot" 2>/dev/null || true
    done
else
    echo "generate.sh: gdb unavailable: keeping the gdb outputs already in $OUT" >&2
fi

echo "generate.sh: wrote $(find "$OUT" -name "*.txt" | wc -l) files to $OUT" >&2
