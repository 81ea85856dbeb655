#!/usr/bin/env python3
"""Reads a toyvm profile recorded in lines mode with the real PyPI `vmprof`
package and prints, as one JSON object, the `node.lines` of every node of
its call tree (tests/vmprof_lines.rs checks them).

Usage: read_lines_with_vmprof.py PROFILE

Output: {"samples": N, "nodes": [[depth, name, count, {line: hits}], ...]}
depth-first from get_tree().
"""
import json
import sys

import vmprof


def walk(node, depth, out):
    lines = {str(line): hits for line, hits in node.lines.items()}
    out.append([depth, node.name, node.count, lines])
    for child in sorted(node.children.values(), key=lambda c: -c.count):
        walk(child, depth + 1, out)


def main(path):
    stats = vmprof.read_profile(path)
    nodes = []
    walk(stats.get_tree(), 0, nodes)
    print(json.dumps({"samples": len(stats.profiles), "nodes": nodes}))


if __name__ == "__main__":
    main(sys.argv[1])
