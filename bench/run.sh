#!/usr/bin/env bash
# toyvm benchmark runner: builds the release binary, checks that every benchmark prints
# the same result in toyvm (every tier) as in the C peer, then times toyvm side by side
# with the peer programs (C, LuaJIT, LuaJIT -joff, Lua 5.4, node, CPython) with hyperfine,
# and prints Markdown tables: CPU time (user+sys), CPU time as a multiple of C with a
# geometric mean per engine, startup time and peak RSS.
#
# Usage (from anywhere; paths are relative to the repository root):
#   bench/run.sh                      # default sizes, all six benchmarks
#   bench/run.sh --write              # ... and write bench/RESULTS.md and README's status
#                                     # block, which summarize.py derives from it (or WRITE=1)
#   SIZES=large bench/run.sh          # large sizes: JIT tiers and fast peers only
#   SIZES=both RUNS=10 bench/run.sh
#   BENCHES="fib loop" RUNS=3 bench/run.sh
#
# Environment:
#   RUNS=5 WARMUP=1       hyperfine --runs / --warmup
#   SIZES=default         default | large | both
#   BENCHES="fib loop calls mandelbrot spectral nbody"
#   PEERS=bench/peers     the peer programs (c/ lua/ js/ py/), relative to the repo root
#   RESULTS=bench/results         raw data: hyperfine JSON, outputs, versions (gitignored)
#   SKIP_BUILD=1          use the existing binary
#   TOYVM=path            the toyvm binary (default: toyvm in Cargo's release directory, built here)
#
# Sizes (the defaults of examples/scripts/bench/*.toy and bench/peers/*, and the large sizes):
#   default: fib 32, loop 1e7, calls 1e7, mandelbrot 400, spectral 250, nbody 1e5
#            -> every toyvm tier and every peer
#   large:   fib 40, loop 1e8, calls 1e8, mandelbrot 2000, spectral 2000, nbody 5e6
#            -> the toyvm tiers in TOY_LARGE_TIERS and the fast peers (C, LuaJIT, node)
#
# Output checking: the peers print spectral and nbody results with "%.9f"; the Toy ports
# print int(x * 1e9) instead (Toy has no number formatting). bench/compare.py reads the C
# line's digits as an integer (the '.' removed, i.e. round(x * 1e9)) and accepts the Toy
# line when it differs by at most 1 (int() truncates where printf rounds). Every other line
# (ints) must match exactly. Peers are compared with C exactly.
#
# Needs: cargo, gcc, hyperfine, python3; optional lua5.4, luajit, node (skipped with a
# note when missing):   apt-get install -y hyperfine lua5.4 luajit nodejs gcc
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

RUNS=${RUNS:-5}
WARMUP=${WARMUP:-1}
SIZES=${SIZES:-default}
BENCHES=${BENCHES:-"fib loop calls mandelbrot spectral nbody"}
PEERS=${PEERS:-bench/peers}
RESULTS=${RESULTS:-bench/results}
WRITE=${WRITE:-}
for arg in "$@"; do
  case $arg in
    --write) WRITE=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $arg (see bench/run.sh --help)" >&2; exit 2 ;;
  esac
done

# toyvm tiers: "name=flags" (the flags go between `run` and the script path).
# Edit this one line when tiers change: the interpreter, the default tier-up, and everything
# compiled before it runs.
TOY_TIERS=("toyvm-interp=--no-jit" "toyvm=" "toyvm-jit0=--jit-threshold 0")
# The tiers that are fast enough for the large sizes.
TOY_LARGE_TIERS=("toyvm" "toyvm-jit0")

declare -A DEFAULT_SIZE=([fib]=32 [loop]=10000000 [calls]=10000000 [mandelbrot]=400 [spectral]=250 [nbody]=100000)
declare -A LARGE_SIZE=([fib]=40 [loop]=100000000 [calls]=100000000 [mandelbrot]=2000 [spectral]=2000 [nbody]=5000000)

case $SIZES in
  default) SETS=(default) ;;
  large) SETS=(large) ;;
  both) SETS=(default large) ;;
  *) echo "SIZES must be default, large or both (got '$SIZES')" >&2; exit 2 ;;
esac
for b in $BENCHES; do
  if [[ -z "${DEFAULT_SIZE[$b]:-}" ]]; then echo "unknown benchmark '$b'" >&2; exit 2; fi
done

need() { # tool install-hint
  if ! command -v "$1" >/dev/null; then
    echo "error: $1 is required; install it with: $2" >&2
    exit 1
  fi
}
need cargo "https://rustup.rs"
need hyperfine "apt-get install -y hyperfine"
need python3 "apt-get install -y python3"
need gcc "apt-get install -y gcc"
if [[ ! -d $PEERS/c ]]; then
  echo "error: peer programs not found in $PEERS (set PEERS=dir)" >&2
  exit 1
fi

mkdir -p "$RESULTS/build" "$RESULTS/out"
TOYVM=${TOYVM:-$(tools/cargo-target-dir)/release/toyvm}
NOTES=$RESULTS/notes.txt
: >"$NOTES"
note() { echo "note: $*" | tee -a "$NOTES" >&2; }

echo "== build"
if [[ -z "${SKIP_BUILD:-}" ]]; then
  cargo build --release --quiet
fi
for b in empty $BENCHES; do
  gcc -O2 -o "$RESULTS/build/$b" "$PEERS/c/$b.c" -lm
done

# The python3 on PATH may be a pyenv shim (a bash script adding ~70 ms): resolve it.
PY=$(python3 -c 'import sys; print(sys.executable)')

# Engine name -> command template: %s = benchmark name. Toy tiers first, then the peers.
ENGINES=()
declare -A CMD
for t in "${TOY_TIERS[@]}"; do
  name=${t%%=*}
  flags=${t#*=}
  CMD[$name]="$TOYVM run${flags:+ $flags} examples/scripts/bench/%s.toy"
  # A tier whose flags the binary does not accept yet is skipped, not fatal.
  if "$TOYVM" run ${flags:+$flags} examples/scripts/hello.toy >/dev/null 2>"$RESULTS/out/$name.probe"; then
    ENGINES+=("$name")
  else
    note "skipping $name: 'toyvm run $flags' failed: $(head -1 "$RESULTS/out/$name.probe")"
  fi
done
TOY_ENGINES=("${ENGINES[@]}")
ENGINES+=(c)
CMD[c]="$RESULTS/build/%s"
add_peer() { # name tool command-template install-hint
  if command -v "$2" >/dev/null; then
    ENGINES+=("$1")
    CMD[$1]=$3
  else
    note "skipping $1: $2 not found (install: $4)"
  fi
}
add_peer luajit luajit "luajit $PEERS/lua/%s.lua" "apt-get install -y luajit"
add_peer luajit-joff luajit "luajit -joff $PEERS/lua/%s.lua" "apt-get install -y luajit"
add_peer lua5.4 lua5.4 "lua5.4 $PEERS/lua/%s.lua" "apt-get install -y lua5.4"
add_peer node node "node $PEERS/js/%s.js" "apt-get install -y nodejs"
add_peer cpython "$PY" "$PY $PEERS/py/%s.py" "apt-get install -y python3"

is_toy() { [[ $1 == toyvm* ]]; }
has() { local x; for x in "${@:2}"; do [[ $x == "$1" ]] && return 0; done; return 1; }
engines_for() { # size set -> the engines timed at that size
  local e
  for e in "${ENGINES[@]}"; do
    if [[ $1 == default ]]; then echo "$e"
    elif is_toy "$e" && has "$e" "${TOY_LARGE_TIERS[@]}"; then echo "$e"
    elif has "$e" c luajit node; then echo "$e"
    fi
  done
}
cmd_for() { # engine bench [size]
  local c
  # shellcheck disable=SC2059
  c=$(printf "${CMD[$1]}" "$2")
  echo "$c${3:+ $3}"
}
run_engine() { # engine bench [size]: run that command (the template is a word list: no quoting)
  local c
  c=$(cmd_for "$@")
  # shellcheck disable=SC2086
  $c
}
toy_flags() { # engine -> its flags
  local t
  for t in "${TOY_TIERS[@]}"; do
    if [[ ${t%%=*} == "$1" ]]; then echo "${t#*=}"; fi
  done
}

echo "== versions"
VERSIONS=$RESULTS/versions.txt
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "nproc: $(nproc)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "kernel: $(uname -r)"
  echo "loadavg at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "toyvm: $TOYVM ($("$TOYVM" --version 2>/dev/null || echo 'no --version')), source $(git log -1 --format='%h %s' 2>/dev/null || echo unknown), $(rustc --version)"
  echo "gcc: $(gcc --version | head -1)"
  if has luajit "${ENGINES[@]}"; then echo "luajit: $(luajit -v 2>&1 | head -1)"; fi
  if has lua5.4 "${ENGINES[@]}"; then echo "lua5.4: $(lua5.4 -v 2>&1 | head -1)"; fi
  if has node "${ENGINES[@]}"; then echo "node: $(node --version)"; fi
  echo "cpython: $("$PY" --version 2>&1) ($PY)"
  echo "hyperfine: $(hyperfine --version)"
  echo "runs: $RUNS (warmup $WARMUP)"
} | tee "$VERSIONS"

echo "== check outputs against C"
CHECKS=$RESULTS/checks.txt
: >"$CHECKS"
failed=0
for set in "${SETS[@]}"; do
  for b in $BENCHES; do
    if [[ $set == default ]]; then n=${DEFAULT_SIZE[$b]}; else n=${LARGE_SIZE[$b]}; fi
    ref=$RESULTS/out/$set-$b-c.txt
    run_engine c "$b" "$n" >"$ref"
    for e in $(engines_for "$set"); do
      [[ $e == c ]] && continue
      out=$RESULTS/out/$set-$b-$e.txt
      status=0
      run_engine "$e" "$b" "$n" >"$out" 2>"$out.err" || status=$?
      if [[ $status != 0 ]]; then
        echo "FAIL $set $b $e: exit status $status: $(head -1 "$out.err")" >>"$CHECKS"
        failed=1
        continue
      fi
      mode=exact
      if is_toy "$e"; then mode=toy; fi
      if python3 bench/compare.py "$mode" "$ref" "$out" >>"$CHECKS"; then :; else failed=1; fi
    done
    printf "  %-8s %-10s %-10s %s\n" "$set" "$b" "$n" "$(tr '\n' ' ' <"$ref")"
  done
done
grep -v '^ok' "$CHECKS" >&2 || true
if [[ $failed == 1 ]]; then
  echo "error: some outputs differ from C (see $CHECKS); not timing" >&2
  exit 1
fi

hf() { # json-file, then name/command pairs
  local json=$1
  shift
  hyperfine -N --style basic --warmup "$WARMUP" --runs "$RUNS" --export-json "$json" "$@" \
    2>&1 | grep -E '^Benchmark|Time' || true
}

for set in "${SETS[@]}"; do
  for b in $BENCHES; do
    if [[ $set == default ]]; then n=${DEFAULT_SIZE[$b]}; else n=${LARGE_SIZE[$b]}; fi
    args=()
    for e in $(engines_for "$set"); do args+=(-n "$e" "$(cmd_for "$e" "$b" "$n")"); done
    echo "== hyperfine $set $b $n"
    hf "$RESULTS/$set-$b.json" "${args[@]}"
  done
done

echo "== startup: toyvm run examples/scripts/hello.toy, and the peers' empty programs"
args=()
for e in "${ENGINES[@]}"; do
  if is_toy "$e"; then
    flags=$(toy_flags "$e")
    args+=(-n "$e" "$TOYVM run${flags:+ $flags} examples/scripts/hello.toy")
  else
    args+=(-n "$e" "$(cmd_for "$e" empty)")
  fi
done
hf "$RESULTS/startup.json" "${args[@]}"

echo "== peak RSS (one run each, default sizes): toyvm tiers and Lua 5.4"
RSS=$RESULTS/rss.tsv
: >"$RSS"
rss_engines=("${TOY_ENGINES[@]}")
if has lua5.4 "${ENGINES[@]}"; then rss_engines+=(lua5.4); fi
for e in "${rss_engines[@]}"; do
  if is_toy "$e"; then
    flags=$(toy_flags "$e")
    # shellcheck disable=SC2086
    kib=$(python3 bench/peak_rss.py $TOYVM run $flags examples/scripts/hello.toy || true)
  else
    # shellcheck disable=SC2046
    kib=$(python3 bench/peak_rss.py $(cmd_for "$e" empty) || true)
  fi
  printf "startup\t%s\t%s\n" "$e" "$kib" >>"$RSS"
  for b in $BENCHES; do
    # shellcheck disable=SC2046
    kib=$(python3 bench/peak_rss.py $(cmd_for "$e" "$b" "${DEFAULT_SIZE[$b]}") || true)
    printf "%s\t%s\t%s\n" "$b" "$e" "$kib" >>"$RSS"
  done
done

echo "loadavg at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$VERSIONS"
echo
# shellcheck disable=SC2086 # the options are a word list
python3 bench/summarize.py "$RESULTS" ${WRITE:+--write bench/RESULTS.md --readme README.md} \
  | tee "$RESULTS/summary.md"
