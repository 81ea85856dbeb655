#!/usr/bin/env python3
"""stale_names.py MAP: the pairs of lines of a perf map that give one
address two names (code freed and its address reused, with no quarantine).
Addresses print as offsets from the map's lowest one (BASE)."""
# ANCHOR: stale_names
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
# ANCHOR_END: stale_names
