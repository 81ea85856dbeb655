#!/usr/bin/env python3
"""Reads a toyvm profile with the real PyPI `vmprof` package and prints what
it found as one JSON object (tests/vmprof_pypi.rs checks it).

Usage: read_with_vmprof.py PROFILE VMPROFSHOW

Output keys:
  version      the installed vmprof version
  interp       stats.interp
  samples      len(stats.profiles)
  roots        the distinct root code names of the samples
  top          {name: samples in which the name appears} (top_profile)
  tree         [[depth, name, count], ...] depth-first from get_tree()
  vmprofshow   `VMPROFSHOW PROFILE tree` output, ANSI colours stripped
"""
import importlib.metadata
import json
import re
import subprocess
import sys

import vmprof


def walk(node, depth, out):
    out.append([depth, node.name, node.count])
    for child in sorted(node.children.values(), key=lambda c: -c.count):
        walk(child, depth + 1, out)


def main(path, vmprofshow):
    stats = vmprof.read_profile(path)
    tree = []
    walk(stats.get_tree(), 0, tree)
    shown = subprocess.run([vmprofshow, path, "tree"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, universal_newlines=True)
    print(json.dumps({
        "version": importlib.metadata.version("vmprof"),
        "interp": stats.interp,
        "samples": len(stats.profiles),
        "roots": sorted({stats.adr_dict.get(p[0][0], "?") for p in stats.profiles}),
        "top": {name: n for name, n in stats.top_profile()},
        "tree": tree,
        "vmprofshow": re.sub(r"\x1b\[[0-9;]*m", "", shown.stdout),
    }))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
