#!/usr/bin/env python3
"""Checks a profile written by perfsupport's vmprof writer with the real
PyPI `vmprof` reader and `vmprofshow`.

Usage: check_profile.py PROFILE EXPECTED.json

EXPECTED.json (written by perfsupport/tests/vmprof_pypi.rs from our own
reader) holds:
  names    {id: name}                 every code name in the file
  chain    [id, ...]                  a call chain root first (outer, middle, inner)
  total    int                        number of samples
  inclusive {name: count}             samples in which each name appears
  vmprofshow  path of the vmprofshow script, or null to use `-m vmprof.show`

Prints one line per check and exits 0 only if all pass.
"""
import json
import re
import subprocess
import sys

import vmprof

ANSI = re.compile(r"\x1b\[[0-9;]*m")
failures = []


def check(ok, what):
    print("%s: %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        failures.append(what)


def main(profile_path, expected_path):
    with open(expected_path) as f:
        expected = json.load(f)
    names = {int(k): v for k, v in expected["names"].items()}
    chain = expected["chain"]
    print("vmprof reader:", vmprof.__file__)

    stats = vmprof.read_profile(profile_path)
    check(stats.interp == "toyvm", "interp is toyvm (got %r)" % stats.interp)
    check(len(stats.profiles) == expected["total"],
          "sample count %d == ours %d" % (len(stats.profiles), expected["total"]))
    for uid, name in names.items():
        check(stats.adr_dict.get(uid) == name,
              "name of %d round-trips (%r)" % (uid, stats.adr_dict.get(uid)))
    check(all(p[0][0] == chain[0] for p in stats.profiles),
          "every stack starts at the outermost code")
    top = dict(stats.top_profile())
    check(top == expected["inclusive"],
          "top_profile %r == ours %r" % (top, expected["inclusive"]))

    tree = stats.get_tree()
    check(tree.name == names[chain[0]] and tree.addr == chain[0],
          "tree root is the outermost code (%r)" % tree.name)
    check(tree.count == expected["total"], "root count %d == total" % tree.count)
    node = tree
    for uid in chain[1:]:
        node = node.children.get(uid)
        if node is None:
            break
    check(node is not None and node.name == names[chain[-1]],
          "call chain %s exists in the tree" % " -> ".join(names[u] for u in chain))

    script = expected.get("vmprofshow")
    cmd = [script] if script else [sys.executable, "-m", "vmprof.show"]
    cmd += [profile_path, "tree"]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    out = ANSI.sub("", p.stdout)
    print("$ %s  (exit %d)" % (" ".join(cmd), p.returncode))
    print(out)
    check(p.returncode == 0 and "Fatal" not in out, "vmprofshow tree succeeds")
    for uid in chain:
        func = names[uid].split(":")[1]
        check(func in out, "vmprofshow tree shows %r" % func)
    # `class:func:line:file` prints as `func ... file:line`.
    _, func, line, file = names[chain[-1]].split(":")
    check("%s:%s" % (file, line) in out, "vmprofshow tree shows %s:%s" % (file, line))

    print("%d failure(s)" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
