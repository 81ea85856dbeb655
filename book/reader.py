#!/usr/bin/env python3
"""book/reader.py: types the book's commands as a reader would, and checks
that they print what the book shows.

The book is the one source of its commands and their output. Every
```console block of a chapter holds commands (lines that start with `$ `,
continued by lines that start with `> `) and what each prints (the lines
after it). This script runs them:

  * chapter by chapter in SUMMARY.md order, each chapter in one fresh bash
    session (a reader may start at any chapter), as typed, in order;
  * in a fresh copy of the repository (the files git would commit, with
    uncommitted edits) in a temporary directory, with HOME set to a
    temporary directory too, so nothing the commands write (files, perf's
    ~/.debug) touches the checkout or the machine;
  * after the quick start's build step: the copy's `target` holds a link
    named `release` to the build the caller names (--release-dir), and the
    session starts with the PATH the quick start's `export` gives.

It fails on any command that fails where the book shows no
`[exit status N]`, and on any output that differs from the book's under the
normalisation below. With --bless it writes today's output into the book
instead (blocks that abridge with `...` are reported, not rewritten).

What varies from run to run is compared as a placeholder (see `normalise`):
pids (learned from the names of perf maps, jitdumps and the objects perf
inject writes) become PID, runtime addresses ADDR, sample counts and
durations N, and percentages match any percentage. In the book's text,
`...` matches any text within a line, and a line of only `...` any number
of lines (an abridged listing). Runs of blanks compare as two blanks.

A block may carry directives in an HTML comment right above its fence:

  <!-- reader: not-run WHY -->   shown, not run by this script (an
                                 install, a build, a server); listed in the
                                 report, at most MAX_NOT_RUN in the book
  <!-- reader: ignore REGEX -->  lines matching REGEX are left out on both
                                 sides (a row a sample reaches only now and
                                 then)
  <!-- reader: numbers -->       every number compares as N, its sign kept
                                 (sample counts in a table; a change's
                                 direction still counts)

A command whose first word is a tool that is missing (perf, gdb, go, ...)
ends its chapter's session: loudly on a developer machine, and as a failure
when CI=true.

  book/reader.py [--bless] [--release-dir DIR] [--vmprof-venv DIR]
                 [--aarch64-release-dir DIR] [--keep] [CHAPTER.md ...]
"""

import argparse
import glob
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BOOK = os.path.join(ROOT, "book", "src")
# Commands the book shows but the test does not run; the issue that asked
# for this test allows five.
MAX_NOT_RUN = 5
# The longest any one command may take (a perf recording, gdb, a compile).
COMMAND_TIMEOUT = 300
# Tools whose absence skips a chapter (fails it under CI=true).
TOOLS = {"perf", "gdb", "go", "readelf", "objdump", "cc", "pkg-config", "samply",
         "inferno-collapse-perf", "inferno-flamegraph", "eu-stack", "bpftrace",
         "qemu-aarch64-static", "gdb-multiarch"}
# Chapters that run the aarch64 build under qemu: read only when the caller
# names that build (--aarch64-release-dir), as tools/aarch64-tests does
# after it cross-built toyvm; skipped otherwise, their not-run commands
# still counted.
NEEDS_AARCH64 = {"aarch64.md"}
END = "\x1ereader-end"


# --- Reading the book ------------------------------------------------------------

class Command:
    """One `$ ` command of a block and the output the book shows for it."""

    def __init__(self, text, first_line):
        self.text = text          # as typed, `> ` continuations joined by newlines
        self.first_line = first_line  # line number in the chapter (1-based)
        self.shown = []           # the output lines the book shows


class Block:
    """One ```console block: its commands and directives."""

    def __init__(self, chapter, fence_line):
        self.chapter = chapter
        self.fence_line = fence_line  # index of the opening fence (0-based)
        self.end_line = None          # index of the closing fence
        self.commands = []
        self.not_run = None
        self.ignore = []
        self.numbers = False


def chapters():
    """The chapter files in SUMMARY.md order."""
    out = []
    for line in open(os.path.join(BOOK, "SUMMARY.md")):
        m = re.search(r"\]\(([^)]+\.md)\)", line)
        if m:
            out.append(m.group(1))
    return out


DIRECTIVE = re.compile(r"<!--\s*reader:\s*(not-run|ignore|numbers)\b\s*(.*?)\s*-->")


def blocks(chapter):
    """The runnable blocks of a chapter, and its lines."""
    lines = open(os.path.join(BOOK, chapter)).read().split("\n")
    found = []
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```console":
            block = Block(chapter, i)
            j = i - 1
            while j >= 0 and DIRECTIVE.search(lines[j]):
                kind, arg = DIRECTIVE.search(lines[j]).groups()
                if kind == "not-run":
                    block.not_run = arg
                elif kind == "numbers":
                    block.numbers = True
                else:
                    block.ignore.append(re.compile(arg))
                j -= 1
            i += 1
            while lines[i].strip() != "```":
                line = lines[i]
                if line.startswith("$ "):
                    block.commands.append(Command(line[2:], i + 1))
                elif line.startswith("> ") and block.commands and not block.commands[-1].shown:
                    block.commands[-1].text += "\n" + line[2:]
                elif block.commands:
                    block.commands[-1].shown.append(line)
                elif line.strip():
                    raise SystemExit(f"{chapter}:{i + 1}: output before any `$ ` command")
                i += 1
            block.end_line = i
            if block.commands:
                found.append(block)
        i += 1
    return found, lines


# --- Comparing ---------------------------------------------------------------------

PID_NAMES = [r"toyvm-(\d+)/", r"\belfjit-(\d+)\b", r"perf-(\d+)\.map", r"jit-(\d+)\.dump", r"jitted-(\d+)-\d+\.so", r"\[JIT\] tid (\d+)",
             r"\bprocess (\d+)\b", r"\bpid[ =:]+(\d+)\b"]


class Normaliser:
    """Turns one session's output into the book's placeholders."""

    def __init__(self, repo, home, work):
        self.repo, self.home, self.work = repo, home, work
        self.pids = set()

    def learn(self, text):
        for pattern in PID_NAMES:
            for m in re.finditer(pattern, text):
                self.pids.add(m.group(1))

    def __call__(self, text):
        text = text.replace("\r\n", "\n")  # a terminal shows CR LF as a line break
        self.learn(text)
        text = text.replace(self.repo + "/", "").replace(self.repo, ".")
        text = text.replace(self.home, "~").replace(self.work, "WORK")
        for pid in sorted(self.pids, key=len, reverse=True):
            text = re.sub(r"(?<![\w.])%s(?!\w)" % pid, "PID", text)
        text = re.sub(r"\b(?:0x)?[0-9a-fA-F]{8,16}\b", address, text)
        # iced-x86 (`toyvm disasm --jit`) writes hex as 7F3C0A4E5B73h.
        text = re.sub(r"\b[0-9A-F]{8,16}h\b", lambda m: address_h(m.group(0)), text)
        text = re.sub(r"\b\d+ samples\b", "N samples", text)
        text = re.sub(r"\b\d+ signals, \d+ records\b", "N signals, N records", text)
        text = re.sub(r"\b\d+(?:\.\d+)? (us|ms)\b", r"N \1", text)
        text = re.sub(r"\(\d+\.\d+ s\)", "(N s)", text)
        text = re.sub(r"(\[ perf record: Woken up) \d+ times", r"\1 N times", text)
        text = re.sub(r"(\[ perf record: Captured and wrote) \d+\.\d+ MB", r"\1 N MB", text)
        return text


def address(m):
    """A user-space runtime address (2^32 to 2^47) becomes ADDR; offsets,
    small constants and immediates such as -1 (all ones) stay. Without
    `0x`, a number of decimal digits only is an address only with 12 digits
    (a perf map's start such as 558312970000): a program's decimal output
    of another length is kept."""
    token = m.group(0)
    digits = token[2:] if token.startswith("0x") else token
    if not token.startswith("0x"):
        if not re.search(r"[0-9]", digits):
            return token  # a word such as `deadbeef` is not an address
        if digits.isdigit() and len(digits) != 12:
            return token  # a decimal number a program printed
    value = int(digits, 16)
    return "ADDR" if 1 << 32 <= value < 1 << 47 else token


def address_h(token):
    value = int(token[:-1], 16)
    return "ADDR" if 1 << 32 <= value < 1 << 47 else token


def canonical(line, numbers=False):
    """What both sides get: percentages as placeholders, runs of blanks as
    two, no trailing blanks; with `numbers`, every number as N (a sign
    before it stays: the direction of a change is compared)."""
    line = re.sub(r"[+-]?\d+(?:\.\d+)?%", "P%", line)
    if numbers:
        line = re.sub(r"\d+(?:\.\d+)?", "N", line)
        line = re.sub(r" *\bN\b *", "  N  ", line)
    # A rule under a header is as wide as the header, whose counts vary.
    line = re.sub(r"-{10,}", "-" * 10, line)
    # A column of numbers is padded to its widest value: one blank or many.
    line = re.sub(r" *P% *", "  P%  ", line)
    return re.sub(r"  +", "  ", line.rstrip())


def line_matches(shown, actual):
    if "..." not in shown:
        return shown == actual
    parts = [re.escape(p) for p in shown.split("...")]
    return re.fullmatch(".*".join(parts), actual) is not None


def matches(shown, actual):
    """Does `actual` (lines) match `shown` (lines, with `...` wildcards)?"""
    memo = {}

    def go(i, j):
        key = (i, j)
        if key in memo:
            return memo[key]
        if i == len(shown):
            result = j == len(actual)
        elif shown[i].strip() == "...":
            result = any(go(i + 1, k) for k in range(j, len(actual) + 1))
        else:
            result = j < len(actual) and line_matches(shown[i], actual[j]) and go(i + 1, j + 1)
        memo[key] = result
        return result

    sys.setrecursionlimit(max(10000, 4 * (len(shown) + len(actual))))
    return go(0, 0)


def prepare(lines, block):
    out = [canonical(l, block.numbers) for l in lines if not any(r.search(l) for r in block.ignore)]
    while out and not out[-1]:
        out.pop()
    return out


# --- Running ----------------------------------------------------------------------

class Session:
    """One bash, fed the chapter's commands one at a time."""

    def __init__(self, cwd, env):
        self.proc = subprocess.Popen(
            ["bash", "--norc", "--noprofile"], cwd=cwd, env=env, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        self.buffer = b""

    def run(self, text):
        """The command's output (stdout and stderr as a terminal shows them)
        and its exit status."""
        script = "%s\nprintf '\\n%s %%d\\n' $?\n" % (text, END)
        self.proc.stdin.write(script.encode())
        self.proc.stdin.flush()
        deadline = time.monotonic() + COMMAND_TIMEOUT
        marker = re.compile(rb"\n" + END.encode() + rb" (\d+)\n")
        while True:
            m = marker.search(self.buffer)
            if m:
                out = self.buffer[:m.start()]
                self.buffer = self.buffer[m.end():]
                return out.decode(errors="replace"), int(m.group(1))
            left = deadline - time.monotonic()
            if left <= 0:
                return self.buffer.decode(errors="replace") + "\n[timed out]", None
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if ready:
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                if not chunk:
                    return self.buffer.decode(errors="replace") + "\n[bash exited]", None
                self.buffer += chunk

    def close(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


def fresh_copy(dest):
    """The files git would commit, as they are in the working tree."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    for name in files:
        if not name:
            continue
        name = name.decode()
        src = os.path.join(ROOT, name)
        if not os.path.lexists(src):
            continue  # deleted in the working tree
        dst = os.path.join(dest, name)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if os.path.islink(src):
            os.symlink(os.readlink(src), dst)
        elif os.path.isfile(src):
            shutil.copy2(src, dst)


USABLE = {}


def usable(tool):
    """Whether a tool is installed and, for perf, allowed to record."""
    if tool not in USABLE:
        ok = shutil.which(tool) is not None
        if ok and tool == "perf":
            ok = subprocess.run(["perf", "record", "-q", "-N", "-e", "cpu-clock", "-o", "/dev/null",
                                 "--", "true"], capture_output=True).returncode == 0
        USABLE[tool] = ok
    return USABLE[tool]


def missing_tool(text):
    """The first tool the command needs that cannot run here."""
    if "~/vmprof-venv/" in text and not USABLE.get("vmprof-venv"):
        return "vmprofshow (the PyPI vmprof: --vmprof-venv DIR)"
    for word in re.findall(r"(?:^|[|;&(]\s*|\$\()\s*(?:\w+=\S*\s+)*([\w.-]+)", text):
        if word in TOOLS and not usable(word):
            return word
    return None


def run_chapter(chapter, args, work, env, report):
    found, lines = blocks(chapter)
    if not found:
        return
    repo = os.path.join(work, "repo")
    norm = Normaliser(repo, env["HOME"], work)
    maps_before = set(glob.glob("/tmp/perf-*.map"))
    session = Session(repo, env)
    changed = False
    try:
        # Edits go bottom-up so the line numbers above stay right.
        edits = []
        for block in found:
            if block.not_run:
                for c in block.commands:
                    report.not_run.append(f"{chapter}:{c.first_line}: {c.text}  ({block.not_run})")
                continue
            new_block = []
            for c in block.commands:
                tool = missing_tool(c.text)
                if tool:
                    report.skip(f"{chapter}:{c.first_line}: `{tool}` is not installed: "
                                f"the rest of the chapter is not run")
                    return
                out, status = session.run(c.text)
                actual = norm(out).split("\n")
                while actual and not actual[-1].strip():
                    actual.pop()
                if status != 0:
                    actual.append(f"[exit status {status if status is not None else 'none'}]")
                ok = matches(prepare(c.shown, block), prepare(actual, block))
                report.ran += 1
                # An abridged listing (`...` that today's output does not
                # hold as such) is the author's to redo.
                abridged = any("..." in l and l not in actual for l in c.shown)
                new_block.append("$ " + c.text.replace("\n", "\n> "))
                if ok or not args.bless:
                    new_block.extend(c.shown)
                    if not ok:
                        report.fail(f"{chapter}:{c.first_line}: `{first(c.text)}`", c.shown, actual)
                elif abridged:
                    new_block.extend(c.shown)
                    report.fail(f"{chapter}:{c.first_line}: `{first(c.text)}` abridges with `...` "
                                f"and no longer matches: edit by hand", c.shown, actual)
                else:
                    new_block.extend(actual)
                    changed = True
            edits.append((block.fence_line + 1, block.end_line, new_block))
        if args.bless and changed:
            for start, end, new in reversed(edits):
                lines[start:end] = new
            with open(os.path.join(BOOK, chapter), "w") as f:
                f.write("\n".join(lines))
            report.blessed.append(chapter)
    finally:
        session.close()
        cleanup_perf_maps(norm.pids, repo, maps_before)


def first(text):
    line = text.split("\n")[0]
    return line if len(line) < 90 else line[:87] + "..."


def cleanup_perf_maps(pids, repo, maps_before):
    """Removes the perf maps the session's runs left in /tmp: those of the
    pids its output named, of the jitdumps it wrote and of the processes
    its perf recordings sampled, and any other map that appeared during the
    session and whose process is gone (a run whose pid a command kept in a
    variable)."""
    pids = set(pids)
    for path in set(glob.glob("/tmp/perf-*.map")) - maps_before:
        pid = path[len("/tmp/perf-"):-len(".map")]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            pids.add(pid)
    for dirpath, _, files in os.walk(repo):
        for f in files:
            m = re.fullmatch(r"jit-(\d+)\.dump", f)
            if m:
                pids.add(m.group(1))
            elif f.endswith(".data") and shutil.which("perf"):
                r = subprocess.run(["perf", "script", "-i", os.path.join(dirpath, f), "-F", "pid"],
                                   capture_output=True, text=True)
                pids.update(p.strip() for p in r.stdout.split() if p.strip().isdigit())
    for pid in pids:
        try:
            os.remove(f"/tmp/perf-{pid}.map")
        except OSError:
            pass


class Report:
    def __init__(self):
        self.failures, self.skips, self.not_run, self.blessed = [], [], [], []
        self.ran = 0

    def fail(self, what, shown, actual):
        self.failures.append(what + "\n" + diff(shown, actual))

    def skip(self, what):
        if os.environ.get("CI") == "true":
            self.failures.append(what + " (CI=true: every tool must be installed)")
        else:
            self.skips.append(what)


def diff(shown, actual):
    import difflib
    lines = difflib.unified_diff(shown, actual, "the book shows", "today", lineterm="", n=2)
    return "\n".join("    " + l for l in lines)


def self_test():
    """Negative controls: the comparison notices what it must notice."""
    class B:
        ignore, numbers = [], False
    plain, counted = B(), B()
    counted.numbers = True

    def same(shown, actual, block=plain):
        return matches(prepare(shown, block), prepare(actual, block))

    book = ["$ x", "  12.5%  [.] toy:jit:f:a.toy:3", "total 7"]
    checks = [
        ("a block matches itself", same(book, book)),
        ("a column's padding follows its widest value",
         same(["  374 87.38% 87.38%  inner_hot"], ["  54 12.62%   100%  inner_hot"], counted)),
        ("padding and percentages are placeholders",
         same(book, ["$ x", "     9.25%   [.] toy:jit:f:a.toy:3  ", "total 7"])),
        ("a changed name is reported", not same(book, ["$ x", "  12.5%  [.] toy:jit:g:a.toy:3", "total 7"])),
        ("a changed line number is reported", not same(book, ["$ x", "  12.5%  [.] toy:jit:f:a.toy:4", "total 7"])),
        ("a changed count is reported", not same(book, ["$ x", "  12.5%  [.] toy:jit:f:a.toy:3", "total 8"])),
        ("a missing line is reported", not same(book, book[:2])),
        ("an extra line is reported", not same(book, book + ["more"])),
        ("output where the book shows none is reported", not same([], ["a report"])),
        ("no output where the book shows some is reported", not same(["a report"], [])),
        ("`...` abridges lines", same(["a", "...", "z"], ["a", "b", "c", "z"])),
        ("`...` abridges nothing too", same(["a", "...", "z"], ["a", "z"])),
        ("`...` keeps the lines around it", not same(["a", "...", "z"], ["a", "b"])),
        ("`...` inside a line", same(["#...  run () at x.rs:1"], ["#12  run () at x.rs:1"])),
        ("numbers: other counts match", same(["+5.4  middle"], ["+8.2  middle"], counted)),
        ("numbers: the direction counts", not same(["+5.4  middle"], ["-8.2  middle"], counted)),
    ]
    n = Normaliser("/r", "/h", "/w")
    out = n("wrote /tmp/perf-4242.map\npid 4242 at 0x7f00deadbe00 in /r/src/x.rs\n558312970000 b f\n"
            "mov rax,561CD49042F0h\nadd rax,0FFFFFFFFFFFFFFFFh\n151556917\n[JIT] tid 77 f")
    checks += [
        ("pids become PID", "perf-PID.map" in out and "pid PID" in out),
        ("runtime addresses become ADDR", "at ADDR" in out and out.count("ADDR") == 3),
        ("-1 stays -1", "0FFFFFFFFFFFFFFFFh" in out),
        ("a program's decimal output stays", "151556917" in out),
        ("the copy's path goes", "in src/x.rs" in out),
        ("perf's tid becomes PID", "tid PID" in out),
    ]
    session = Session("/", {"PATH": os.environ["PATH"]})
    try:
        out1, status1 = session.run("echo a; false")
        session.run("cd /tmp")
        out2, status2 = session.run("pwd")
    finally:
        session.close()
    checks += [
        ("a command's output and status", out1 == "a\n" and status1 == 1),
        ("one shell per chapter: cd holds", out2.strip() == "/tmp" and status2 == 0),
    ]
    failed = [what for what, ok in checks if not ok]
    for what, ok in checks:
        print(f"reader.py self-test: {'ok  ' if ok else 'FAIL'} {what}")
    sys.exit(1 if failed else 0)


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bless", action="store_true", help="write today's output into the book")
    p.add_argument("--release-dir", help="Cargo's release directory (default: the one "
                   "tools/cargo-target-dir names)")
    p.add_argument("--vmprof-venv", help="a venv with the PyPI vmprof, linked where the book "
                   "installs it (~/vmprof-venv)")
    p.add_argument("--aarch64-release-dir", help="Cargo's release directory of the aarch64 "
                   "cross build, linked as target/aarch64-unknown-linux-gnu/release: reads "
                   "the chapters that need it (" + ", ".join(sorted(NEEDS_AARCH64)) + ")")
    p.add_argument("--keep", action="store_true", help="keep the scratch directory")
    p.add_argument("chapters", nargs="*", help="chapter files (default: all, in SUMMARY.md order)")
    args = p.parse_args()

    release = args.release_dir or os.path.join(
        subprocess.run([os.path.join(ROOT, "tools", "cargo-target-dir")], capture_output=True,
                       text=True, check=True).stdout.strip(), "release")
    release = os.path.abspath(release)
    if not os.path.exists(os.path.join(release, "toyvm")):
        sys.exit(f"reader.py: no toyvm in {release}: build first (cargo build --release "
                 f"--workspace --lib --bins --examples)")
    # Not under /tmp/perf-: perf reads every file below such a path as a perf map.
    work = tempfile.mkdtemp(prefix="toyvm-reader.")
    report = Report()
    try:
        repo, home = os.path.join(work, "repo"), os.path.join(work, "home")
        os.makedirs(repo)
        os.makedirs(home)
        fresh_copy(repo)
        copy_release = os.path.join(repo, "target", "release")
        os.makedirs(os.path.dirname(copy_release))
        os.symlink(release, copy_release)
        if args.aarch64_release_dir:
            arm = os.path.abspath(args.aarch64_release_dir)
            if not os.path.exists(os.path.join(arm, "toyvm")):
                sys.exit(f"reader.py: no toyvm in {arm}: cross-build first (tools/aarch64-tests)")
            copy_arm = os.path.join(repo, "target", "aarch64-unknown-linux-gnu", "release")
            os.makedirs(os.path.dirname(copy_arm))
            os.symlink(arm, copy_arm)
        if args.vmprof_venv:
            os.symlink(os.path.abspath(args.vmprof_venv), os.path.join(home, "vmprof-venv"))
            USABLE["vmprof-venv"] = True
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("CARGO", "RUST", "PERF_", "JITDUMPDIR", "TOYVM"))}
        env.update(HOME=home, LC_ALL="C.UTF-8", TERM="dumb", COLUMNS="200",
                   PATH=f"{copy_release}:{copy_release}/examples:{os.environ['PATH']}")
        # cargo and rustup live under the real HOME; the reader has them on PATH.
        for tool in ("cargo", "rustup"):
            where = shutil.which(tool)
            if where and os.path.dirname(where) not in env["PATH"].split(":"):
                env["PATH"] += ":" + os.path.dirname(where)
        if "RUSTUP_HOME" not in os.environ and os.path.isdir(os.path.expanduser("~/.rustup")):
            env["RUSTUP_HOME"] = os.path.expanduser("~/.rustup")
        for chapter in args.chapters or chapters():
            chapter = os.path.basename(chapter)
            if chapter in NEEDS_AARCH64 and not args.aarch64_release_dir:
                print(f"reader.py: {chapter}: not read here: it runs the aarch64 build "
                      f"(tools/aarch64-tests reads it)", file=sys.stderr, flush=True)
                for block in blocks(chapter)[0]:
                    if block.not_run:
                        report.not_run += [f"{chapter}:{c.first_line}: {c.text}  ({block.not_run})"
                                           for c in block.commands]
                continue
            print(f"reader.py: {chapter}", file=sys.stderr, flush=True)
            run_chapter(chapter, args, work, env, report)
    finally:
        if args.keep:
            print(f"reader.py: kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)

    for s in report.skips:
        print(f"reader.py: SKIPPED {s}", file=sys.stderr)
    print(f"reader.py: {report.ran} commands run; {len(report.not_run)} shown but not run:",
          file=sys.stderr)
    for n in report.not_run:
        print(f"  {n}", file=sys.stderr)
    if len(report.not_run) > MAX_NOT_RUN:
        report.failures.append(f"{len(report.not_run)} commands are marked not-run; at most {MAX_NOT_RUN}")
    for b in report.blessed:
        print(f"reader.py: wrote today's output into {b}", file=sys.stderr)
    for f in report.failures:
        print(f"reader.py: FAILED {f}", file=sys.stderr)
    sys.exit(1 if report.failures else 0)


if __name__ == "__main__":
    main()
