#!/usr/bin/env python3
"""Run a command once and print its peak resident set size in KiB (used by bench/run.sh).

Usage: peak_rss.py COMMAND [ARGS...]

The command runs under GNU time (`/usr/bin/time -f %M`, apt-get install time), which
reports the child's ru_maxrss. It must not be forked from this Python process directly:
Linux counts the RSS the child had before exec() (a copy of the ~13 MB interpreter) in
ru_maxrss, which would hide the small footprints we want to compare. The command's
stdout is discarded; a non-zero exit status is reported on stderr and makes this print
"-" and exit with status 1.
"""
import os
import subprocess
import sys
import tempfile

TIME = "/usr/bin/time"


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    if not os.access(TIME, os.X_OK):
        print("peak_rss.py: %s not found (apt-get install time)" % TIME, file=sys.stderr)
        print("-")
        sys.exit(1)
    with tempfile.NamedTemporaryFile("r") as report:
        status = subprocess.call([TIME, "-f", "%M", "-o", report.name] + sys.argv[1:],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        lines = report.read().split()
    if status != 0 or not lines:
        print("peak_rss.py: %s exited with %d" % (" ".join(sys.argv[1:]), status), file=sys.stderr)
        print("-")
        sys.exit(1)
    print(lines[-1])


if __name__ == "__main__":
    main()
