#!/usr/bin/env bash
# book/generate.sh: write today's output of every command the book shows
# into the book.
#
# The chapters' ```console blocks are the one source of the book's commands
# and their output: book/reader.py types them as a reader would (chapter by
# chapter, one fresh bash session each, in a fresh copy of the repository
# with HOME in a temporary directory) and, here with --bless, writes what
# each command printed under it, with pids, addresses, sample counts and
# durations as placeholders. tests/book_truth.rs runs the same script
# without --bless and fails when the book and today's output differ.
# Commit the chapters this rewrites together with the change that altered
# them; a block that abridges its output with `...` is reported instead,
# to be redone by hand.
#
#   book/generate.sh                   # all chapters
#   book/generate.sh tiering.md ...    # some chapters
#
# It builds what the quick start builds (cargo build --release --workspace
# --lib --bins --examples) unless NO_BUILD=1. The vmprofshow commands need
# the PyPI vmprof in a venv: VMPROF_VENV=DIR (default: the venv the tests
# install into Cargo's target directory, when it exists).
#
# Flame graphs are real sample data, different on every run: the SVGs in
# book/src/images/ (vmprof-flamegraph.svg, vmprof-diff.svg,
# profile-flamegraph.svg) are written only with REGENERATE_IMAGES=1.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
TARGET=$("$ROOT/tools/cargo-target-dir")
RELEASE="$TARGET/release"
if [[ -z ${NO_BUILD:-} ]]; then
    echo "generate.sh: building (release)" >&2
    cargo build --release --quiet --workspace --lib --bins --examples
fi
VMPROF_VENV=${VMPROF_VENV:-$TARGET/vmprof-venv-0.6.0}
venv=()
[[ -x $VMPROF_VENV/bin/vmprofshow ]] && venv=(--vmprof-venv "$VMPROF_VENV")

# The aarch64 chapter runs the cross build under qemu (tools/aarch64-tests
# makes it): read when it exists.
ARM64_RELEASE="$TARGET/aarch64-unknown-linux-gnu/release"
arm64=()
[[ -x $ARM64_RELEASE/toyvm ]] && arm64=(--aarch64-release-dir "$ARM64_RELEASE")

python3 book/reader.py --bless --release-dir "$RELEASE" "${venv[@]}" "${arm64[@]}" "$@"

if [[ ${REGENERATE_IMAGES:-} == 1 ]]; then
    # Not under /tmp/perf-: perf reads every file below such a path as a perf map.
    WORK=$(mktemp -d /tmp/toyvm-images.XXXXXX)
    trap 'rm -rf "$WORK"' EXIT
    toyvm=$RELEASE/toyvm
    demo=examples/scripts/profile_demo.toy
    "$toyvm" run --vmprof "$WORK/demo.prof" "$demo" 200000 300 >/dev/null
    "$toyvm" report --flamegraph book/src/images/vmprof-flamegraph.svg "$WORK/demo.prof" >/dev/null
    "$toyvm" run --vmprof "$WORK/after.prof" "$demo" 200000 100 >/dev/null
    "$toyvm" report --diff "$WORK/demo.prof" --flamegraph book/src/images/vmprof-diff.svg \
        "$WORK/after.prof" >/dev/null
    "$toyvm" profile --out "$WORK/profile" "$demo" >/dev/null 2>&1
    cp "$WORK/profile/flamegraph.svg" book/src/images/profile-flamegraph.svg
    echo "generate.sh: wrote the flame graphs in book/src/images/" >&2
fi
