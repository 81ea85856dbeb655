#!/usr/bin/env python3
"""Compare one benchmark's output with the C peer's output (used by bench/run.sh).

Usage: compare.py exact|toy REFERENCE OUTPUT

exact: the files must hold the same lines.
toy:   the same number of lines; a reference line with a '.' (printed with "%.9f") is read
       as an integer after removing the '.', i.e. round(x * 1e9), and the Toy line (which
       prints int(x * 1e9), truncating) must be within 1 of it. Other lines must be equal.

Prints "ok ..." or "MISMATCH ..." and exits with status 0 or 1.
"""
import sys


def lines(path):
    with open(path) as f:
        return [line.strip() for line in f.read().splitlines()]


def toy_line_matches(ref, got):
    if "." not in ref:
        return ref == got
    try:
        return abs(int(ref.replace(".", "")) - int(got)) <= 1
    except ValueError:
        return False


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("exact", "toy"):
        sys.exit(__doc__)
    mode, ref_path, out_path = sys.argv[1:]
    ref, got = lines(ref_path), lines(out_path)
    if mode == "exact":
        ok = ref == got
    else:
        ok = len(ref) == len(got) and all(toy_line_matches(r, g) for r, g in zip(ref, got))
    verdict = "ok" if ok else "MISMATCH"
    print(f"{verdict} {out_path}: {' '.join(got)} (C: {' '.join(ref)})")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
