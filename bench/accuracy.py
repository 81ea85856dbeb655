#!/usr/bin/env python3
"""Is the profile right? The slowdown experiment, on every profile route.

Usage:  bench/accuracy.py [--toyvm PATH] [--short] [--seconds S] [--pairs N]
                          [--profiles K] [--routes R,R...] [--tiers T,T...]
                          [--experiments E,E...] [--seed N] [--json FILE]

Mytkowicz et al. (PLDI 2010): add a known amount of work in one place and
check that the profile moves as predicted. `toyvm run --slow-line LINE:NANOS`
adds the work (busy CPU time as the line's own code, in every tier); this
harness predicts what each route must then report and checks it.

For each experiment (a program and the lines it slows) and tier (the JIT's
default tiering, and `--no-jit`, where interpreted functions run behind
their trampolines):

1. The VM counts how often control enters each slowed line
   (`--no-jit --slow-line-counts`: a property of the program's run, the
   same in every tier), and NANOS is chosen so the slowdown adds about 40%
   to the run's CPU time (the uniform slowdown takes 100 ns per entry and
   a shorter run instead: see EXPERIMENTS).
2. CPU time without a profiler (the child's user + system time), T0 as the
   program is and T1 slowed, in N pairs of runs made one after the other.
   Every run, timed or profiled, has address-space randomization off and
   a last program argument of random length that the program ignores (the
   layout pad): the interpreter's speed depends on where its data lands,
   and with one layout per command line the difference between the two
   conditions' layouts was a bias of several points (see layout_pad).
   Drawn for every run, the layouts become noise the runs' spread carries.
3. Each route profiles K runs of each condition and reports shares: the
   fraction of all the process's samples whose innermost Toy frame is the
   function (or, for line routes, is at the line), pooled over the K runs.
   The profiled runs and the timing pairs are spread over the same rounds,
   so a phase in which the machine runs the program slower falls on both.
4. The prediction. A fraction phi of the added time T1 - T0 goes to the
   function or line: 1 for the line slowed and its function, and for a
   slowdown of every line by the same NANOS, a function's entries n_f over
   all entries. Then, with r = T0 / T1,
       predicted = (share0 * T0 + phi * (T1 - T0)) / T1 = phi + (share0 - phi) * r
   which for phi = 1 is the issue's (share0 * T0 + (T1 - T0)) / T1 and for
   the uniform slowdown its (share0 * T0 + n_f * NANOS) / T1 with the time
   an entry really added, (T1 - T0) / sum(n), in place of NANOS (printed
   against it: the spin's calibration varies by about 2% between
   processes, and an out-of-order core overlaps a little of a short spin
   with the code around it). Where a route gives the time of an inlined
   callee to its caller (compiled code without `--vmprof-inlined`), phi
   goes to the caller; vmprof's lines then name the call's line.

5. The observer check, printed beside each comparison ("own") and not
   judged: the same prediction with T0 / T1 of the profiled runs
   themselves (vmprof: the process's CPU time; perf: samples x period,
   its cpu-clock counts the program alone). The prediction above assumes
   the profiler leaves the run as it was; where it does not (its signals,
   or a mode that runs other code, slow the program's own code by another
   factor than the slowdown's loop), "own" shows whether the samples are
   still where the run's time went: a difference that "own" does not have
   is the profiler changing the run's speed (an observer effect). One it
   has too is either samples in the wrong place or the profiler changing
   where the slowed run's time goes (its cost landing in other code than
   the slowed line); "own" cannot tell those two apart. The two clocks
   differ: vmprof's CPU time is the whole process's (user and system, its
   writer thread too), perf's is the program's as perf samples it; and
   "own" rests on the K pairs of profiled runs, printed without an
   uncertainty (theirs is that of K timing pairs: see "sd" in the
   summary line).

The tolerance is 3 percentage points. Whether a run could fail it by chance
follows from the uncertainty of the difference d = share1 - predicted,
propagated as NIST TN 1826 (and the GUM it summarizes) does through the
model above, each input a standard uncertainty:
  * sampling: a share s of n samples is a binomial proportion,
    u = sqrt(s (1 - s) / n) (samples at a fixed CPU-time period are no
    more variable than independent ones unless the program's period
    aliases with the sampling period; these programs' phases are long);
  * r: the mean of the N pairs' ratios T0_i / T1_i (a machine slowed down
    for a while slows both runs of a pair alike), u(r) = s_r / sqrt(N), s_r
    their standard deviation (a type A evaluation);
  * the profiled runs are processes of their own, and on a busy or
    virtual machine they differ more than sampling alone makes them (a
    profiled interpreter's CPU time varied by 10% here): u(share0) and
    u(share1) are each the larger of the binomial uncertainty of the K runs'
    pooled samples and the type A one, the standard deviation of the K
    runs' own shares over sqrt(K);
  * so u(pred)^2 = (r u(share0))^2 + ((share0 - phi) u(r))^2 and
    u_c(d)^2 = u(share1)^2 + u(pred)^2;
  * degrees of freedom: a binomial term's are as good as infinite (n is
    thousands), a term set by the K runs' spread has K - 1 (the whole term:
    conservative, and a step where the spread crosses the binomial; a
    pooled estimate of the runs' excess spread over a block's shares would
    give it more: not done), u(r) has N - 1,
    and the combination has the Welch-Satterthwaite effective degrees of
    freedom nu = u_c^4 / sum(u_i^4 / nu_i) (TN 1826 and GUM G.4),
  and a chance failure of the 3-point bound has probability
  p = P(|t_nu| > 3 / u_c), Student's t with nu degrees of freedom (the
  normal distribution where every term is binomial). With few runs the
  t's tails are far heavier: at 3 / u_c = 7, 3e-12 for the normal, 1e-4
  for nu = 8, 6e-3 for nu = 3.
Every comparison must be within 3 points; the sum of the p over all
comparisons bounds the chance that any of them failed by chance, and is
printed. With --short (the CI test) it must be under 1/1000: the harness
measures more (twice at most) while it is not, and fails as too noisy to
judge if it still is not.

Routes: perf-map (`--perf`, frame pointers, function), jitdump (`--perf-jitdump`,
`perf record -k 1`, `perf inject --jit`: function and `srcline`), jit-elf
(`--jit-elf`: function and `srcline`, no inject), vmprof (function),
vmprof-lines (`--vmprof-lines`: line). perf's routes give no line under
`--no-jit` (the trampoline is the function's, not a line's): skipped there.
"""
import argparse
import json
import math
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAMS = os.path.join(ROOT, "bench", "accuracy")

TOLERANCE = 3.0  # percentage points
# vmprof's interval and perf's cpu-clock period. At 100 µs, perf's
# interrupts on this (virtual) machine slowed the program's own code by
# about 3% more than the slowdown's register-only loop, and the slowed
# line's share came out 1.5-2.5 points under the prediction made from
# unprofiled CPU times; at 250 µs and 1 ms the ratios agree.
SAMPLE_PERIOD_US = 250
ADDED = 0.4  # the slowdown adds about this fraction of T0
# The layout pad's length is drawn from [0, LAYOUT_PAD_BYTES): a page, so
# the data after it can land at any offset within one.
LAYOUT_PAD_BYTES = 4096
PAD_RANDOM = random.Random()
# Any one command (a run is about a second, a perf report a few) taking
# longer is a hang: the harness stops and says which command it was.
RUN_TIMEOUT = 600

# Experiments: the program (its first argument, the rounds, is scaled to
# the run time asked for), the lines slowed ("all" for a uniform slowdown),
# and the calls compiled code inlines: callee -> (caller, the line of the
# call). Compiled code gives an inlined callee's time to the caller's frame
# (every route here runs without `--vmprof-inlined`); perf's srcline still
# names the callee's line (the line table maps the inlined code to it),
# vmprof's lines the frame's line, the call.
MIX_INLINES = {"scale": ("work", 14)}
EXPERIMENTS = {
    "mix-other": dict(program="mix.toy", lines=[25], inlined=MIX_INLINES),
    "mix-inlined": dict(program="mix.toy", lines=[8], inlined=MIX_INLINES),
    "calls-leaf": dict(program="calls.toy", lines=[16], inlined={}),
    # Every line by the same 100 ns: mix.toy enters its lines hundreds of
    # millions of times a second, and a spin of a few nanoseconds is mostly
    # overlapped by an out-of-order core with the code around it (the JIT's
    # run then gained nothing), so the run is made short enough that 100 ns
    # per entry makes it about `seconds` long: the spins dominate, and each
    # function's share must follow its entries.
    "mix-uniform": dict(program="mix.toy", lines="all", inlined=MIX_INLINES, nanos=100),
}
SHORT_EXPERIMENTS = ["mix-other"]

TIERS = {"jit": [], "no-jit": ["--no-jit"]}
# Timing pairs per tier. Over random layouts (layout_pad) the interpreter's
# T0/T1 spreads by about 0.03-0.07 from pair to pair, the JIT's by 0.003-0.01;
# a slowed line's prediction carries u(T0/T1) = spread / sqrt(pairs) almost
# whole, so the interpreter takes 48 pairs (u about 0.01, a point) where 8
# give the JIT 0.002. Pairs are cheap: no profiler, no report.
TIMING_PAIRS = {"jit": 8, "no-jit": 48}
# Profiled runs per condition and route, per tier: over random layouts the
# interpreter's shares differ from run to run by more than sampling makes
# them, and that spread over sqrt(runs) is their uncertainty; with 3 runs
# its comparisons had u_c 0.8-2.7 points, with 8 0.4-1.1.
PROFILED_RUNS = {"jit": 3, "no-jit": 8}

ROUTES = ["perf-map", "jitdump", "jit-elf", "vmprof", "vmprof-lines"]
SHORT_ROUTES = ["perf-map", "vmprof", "vmprof-lines"]

TOY_FRAME = re.compile(r"toy:(?:jit|jit-osr|interp|jit-entry)[^:]*:([^:]+):")
SRCLINE = re.compile(r"^\s*(\S+\.toy):(\d+)")


def die(message):
    print(f"accuracy: {message}", file=sys.stderr)
    sys.exit(2)


class Work:
    """A private directory for the runs and perf's build-id cache (never
    under /tmp/perf-: perf reads files there as perf maps)."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="toyvm-accuracy-")
        os.makedirs(os.path.join(self.dir, "buildid"))
        with open(os.path.join(self.dir, "perfconfig"), "w") as f:
            f.write(f"[buildid]\n\tdir = {self.dir}/buildid\n")
        self.env = dict(os.environ, PERF_CONFIG=f"{self.dir}/perfconfig", DEBUGINFOD_URLS="")
        self.made = 0

    def tag(self, route):
        """A new name for one profiled run's files."""
        self.made += 1
        return f"{route}-{self.made}"

    def path(self, name):
        return os.path.join(self.dir, name)

    def fresh_dir(self, name):
        path = self.path(name)
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path)
        return path

    def run(self, argv, check=True):
        shown = " ".join(a if len(a) < 100 else f"<{len(a)}-byte layout pad>" for a in argv)
        try:
            out = subprocess.run(argv, cwd=self.dir, env=self.env, capture_output=True,
                                 text=True, timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            die(f"{shown} ran over {RUN_TIMEOUT} s: a hang, not a measurement")
        if check and out.returncode != 0:
            die(f"{shown} failed ({out.returncode}):\n{out.stderr[-2000:]}")
        return out

    def cpu(self, argv):
        """Runs argv; its CPU time (user + system) in seconds."""
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.run(argv)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)


# --- what the VM knows ------------------------------------------------------


def lines_with_code(toyvm, script):
    """Every line `toyvm disasm` shows code for."""
    out = subprocess.run([toyvm, "disasm", script], capture_output=True, text=True, check=True)
    return sorted({int(m.group(1)) for m in re.finditer(r"^\s+(\d+) \|", out.stdout, re.M)})


def entries(work, toyvm, script, args, lines):
    """{line: (function names, entries)} counted by the interpreter."""
    argv = [toyvm, "run", "--no-jit", "--slow-line-counts"]
    argv += [f"--slow-line={line}:1" for line in lines]
    out = work.run(argv + [script] + args)
    counts = {}
    for m in re.finditer(r"^slow-line: line (\d+) \(([^)]*)\): (\d+) entries$", out.stderr, re.M):
        counts[int(m.group(1))] = (m.group(2).split(", "), int(m.group(3)))
    return counts


# --- the routes ---------------------------------------------------------------


def innermost(frames):
    """The function of the innermost Toy frame of a perf callchain (leaf
    first); None for a sample without one."""
    for sym in frames:
        m = TOY_FRAME.search(sym)
        if m:
            return m.group(1)
    return None


def perf_samples(work, data, srcline):
    """Per sample of perf.data: the function of its innermost Toy frame
    (None outside Toy code); with `srcline`, also per sample the line of
    its leaf (None where that is not a Toy line). Two passes: the lines
    only for the leaf (`-G`), as perf's srcline sort key gives them, since
    resolving every frame of every callchain runs addr2line over toyvm's
    own debug info for minutes."""
    out = work.run(["perf", "script", "-i", data, "-F", "ip,sym", "--no-inline"])
    functions, frames = [], []
    for text in out.stdout.splitlines() + [""]:
        parts = text.split(None, 1)
        if not parts:
            if frames:
                functions.append(innermost(frames))
            frames = []
        elif re.fullmatch(r"[0-9a-f]+", parts[0]):
            frames.append(parts[1] if len(parts) == 2 else "")
    if not srcline:
        return functions, None
    out = work.run(["perf", "script", "-i", data, "-F", "ip,sym,srcline", "-G", "--no-inline"])
    lines = []
    for text in out.stdout.splitlines():
        m = SRCLINE.match(text)
        if m:
            lines[-1] = int(m.group(2))
        elif re.match(r"^\s*[0-9a-f]+ ", text):
            lines.append(None)
    return functions, lines


def remove_perf_maps(work, data):
    """Removes `/tmp/perf-PID.map` of every process in perf.data once it has
    been read: perf needs a map after its process exits, so nothing else
    removes it, and a harness run would leave hundreds (a later process
    given the same pid replaces a stale map; a test asserting no map is
    written must not find one)."""
    out = work.run(["perf", "script", "-i", data, "-F", "pid"], check=False)
    # The runs are over, so each pid's map is theirs, unless the pid was
    # already given to a newer process: rare, and only a map is lost.
    for pid in set(out.stdout.split()):
        if pid.isdigit():
            try:
                os.unlink(f"/tmp/perf-{pid}.map")
            except OSError:
                pass


def perf_route(work, toyvm, route, tier, script, args, slow):
    """Profiles one run with perf: (functions, lines) per sample, and the
    run's CPU time by perf's own clock (samples x period: `cpu-clock`
    counts the program's CPU time, not perf's)."""
    tag = work.tag(route)
    data = work.path(f"{tag}.data")
    record = ["perf", "record", "-q", "-e", "cpu-clock", "-c", str(SAMPLE_PERIOD_US * 1000),
              "-g", "-o", data]
    run = [toyvm, "run"] + TIERS[tier] + slow
    if route == "perf-map":
        run.append("--perf")
    elif route == "jitdump":
        record.insert(2, "-k")
        record.insert(3, "1")
        run += ["--perf-jitdump", "--perf-dir", work.fresh_dir(tag)]
    else:
        run += ["--jit-elf", "--perf-dir", work.fresh_dir(tag)]
    work.run(record + ["--"] + run + [script] + args)
    if route == "jitdump":
        injected = work.path(f"{tag}.jit.data")
        work.run(["perf", "inject", "--jit", "-i", data, "-o", injected])
        data = injected
    # Lines only where the route has them: an interpreted sample's leaf is
    # in toyvm's own code, and resolving those runs addr2line for minutes.
    functions, lines = perf_samples(work, data, srcline=route_gives_lines(route, tier))
    remove_perf_maps(work, data)
    shutil.rmtree(work.path(tag), ignore_errors=True)
    return functions, lines, len(functions) * SAMPLE_PERIOD_US * 1e-6


def vmprof_flags(prof, lines, interval_us=SAMPLE_PERIOD_US):
    """`toyvm run`'s flags for a vmprof profile into `prof`, with lines or not."""
    flags = ["--vmprof", prof, "--vmprof-interval-us", str(interval_us)]
    return flags + (["--vmprof-lines"] if lines else [])


def vmprof_route(work, toyvm, route, tier, script, args, slow):
    """Profiles one run with vmprof: (functions, lines) per sample, and the
    run's CPU time (the process's, as for the timing pairs)."""
    tag = work.tag(route)
    prof = work.path(f"{tag}.prof")
    lines = route == "vmprof-lines"
    argv = [toyvm, "run"] + vmprof_flags(prof, lines) + TIERS[tier] + slow
    cpu = work.cpu(argv + [script] + args)
    header = work.run([toyvm, "report", prof, "--min-percent", "100"]).stdout
    total = int(re.search(r": (\d+) samples", header).group(1))
    folded = work.run([toyvm, "report", "--folded", prof] + (["--lines"] if lines else []))
    functions, at_lines = [], []
    for text in folded.stdout.splitlines():
        stack, count = text.rsplit(" ", 1)
        leaf = stack.split(";")[-1]
        function, line = (leaf.rsplit(":", 1) + [None])[:2] if lines else (leaf, None)
        function = None if function.startswith("<jit") else function
        line = int(line) if line and line.isdigit() else None
        functions += [function] * int(count)
        at_lines += [line] * int(count)
    # Samples without any frame are CPU time too (they are in the total).
    functions += [None] * (total - len(functions))
    at_lines += [None] * (total - len(at_lines))
    return functions, at_lines if lines else None, cpu


def profile(work, toyvm, route, tier, script, args, slow):
    if route.startswith("vmprof"):
        return vmprof_route(work, toyvm, route, tier, script, args, slow)
    return perf_route(work, toyvm, route, tier, script, args, slow)


def route_gives_lines(route, tier):
    return route in ("jitdump", "jit-elf", "vmprof-lines") and not (
        tier == "no-jit" and route in ("jitdump", "jit-elf"))


def route_gives_functions(route):
    return route != "vmprof-lines"


def route_inlines(route, tier):
    """Whether the route gives an inlined callee's time to its caller
    (compiled code: the JIT inlines; the interpreter never does)."""
    return tier == "jit"


def owner(spec, function, inlines):
    """The function a route gives `function`'s time to: its caller if the
    JIT inlines it and the route sees compiled code's frames."""
    callee = spec["inlined"].get(function)
    return callee[0] if callee and inlines else function


def attributed_line(route, tier, line, spec, owner_of):
    """The line a route gives the time of `line` to: vmprof's lines name
    the frame's line, which for code inlined into a compiled caller is the
    call; perf's srcline names the inlined line itself."""
    callee = owner_of.get(line)
    if route == "vmprof-lines" and route_inlines(route, tier) and callee in spec["inlined"]:
        return spec["inlined"][callee][1]
    return line


# --- statistics ---------------------------------------------------------------


def beyond(t, dof):
    """P(|T| > t) for Student's t with `dof` degrees of freedom (any real
    dof > 0; math.inf: the normal distribution). From the regularized
    incomplete beta function, P(|T| > t) = I_x(dof/2, 1/2) with
    x = dof / (dof + t^2)."""
    if dof > 1e7:
        # Here lgamma's cancellation in the beta function's front factor
        # (about dof * 1e-16 relative) would cost more than the t's
        # difference from the normal (2e-6 of p at t = 3).
        return math.erfc(t / math.sqrt(2))
    # x and 1 - x each computed directly: 1 - x is tiny where dof >> t^2.
    return incomplete_beta(dof / 2, 0.5, dof / (dof + t * t), t * t / (dof + t * t))


def incomplete_beta(a, b, x, y):
    """The regularized incomplete beta function I_x(a, b), given x and
    y = 1 - x, by its continued fraction (evaluated with the modified
    Lentz method), which converges quickly for x < (a + 1) / (a + b + 2);
    above that, the symmetry I_x(a, b) = 1 - I_y(b, a)."""
    if x <= 0.0:
        return 0.0
    if y <= 0.0:
        return 1.0
    if x > (a + 1) / (a + b + 2):
        return 1.0 - incomplete_beta(b, a, y, x)
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * math.log(x) + b * math.log(y))
    tiny = 1e-300

    def step(value):
        return value if abs(value) > tiny else tiny

    # The fraction 1 / (1 + d1 / (1 + d2 / (1 + ...))), with
    # d(2m+1) = -(a+m)(a+b+m) x / ((a+2m)(a+2m+1)) and
    # d(2m) = m(b-m) x / ((a+2m-1)(a+2m)).
    c, d = 1.0, 1.0 / step(1.0 - (a + b) * x / (a + 1))
    fraction = d
    for m in range(1, 500):
        even = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        d = 1.0 / step(1.0 + even * d)
        c = step(1.0 + even / c)
        fraction *= d * c
        odd = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        d = 1.0 / step(1.0 + odd * d)
        c = step(1.0 + odd / c)
        fraction *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return math.exp(log_front) * fraction / a


def dof_text(dof):
    """Degrees of freedom as printed: whole, or ">1k" where binomial terms
    set them (then the normal distribution, near enough)."""
    return ">1k" if dof > 1000 else f"{dof:.0f}"


def effective_dof(terms):
    """The Welch-Satterthwaite degrees of freedom of a sum of independent
    variance terms, each (standard uncertainty, its degrees of freedom):
    u_c^4 / sum(u_i^4 / dof_i); a term with infinite dof adds nothing."""
    total = sum(u * u for u, _ in terms)
    # A zero term (one timing pair: no spread, and no degrees of freedom)
    # adds nothing.
    spread = sum(u ** 4 / dof for u, dof in terms if u > 0 and dof > 0 and not math.isinf(dof))
    return total * total / spread if spread > 0 else math.inf


def mean_and_sd(values):
    m = statistics.fmean(values)
    return m, (statistics.stdev(values) if len(values) > 1 else 0.0)


def pooled_share(runs, key):
    """The share `key` picks of all the samples of `runs` (each a list of
    functions or of lines, one per sample), pooled; its standard
    uncertainty, the larger of the binomial one of the pooled samples and
    the type A one, the spread of the runs' own shares over sqrt(K) (a
    profiled run is a process of its own, and on a busy or virtual machine
    processes differ more than sampling alone would make them); and that
    uncertainty's degrees of freedom: K - 1 where the spread sets it,
    infinite where the binomial does (thousands of samples)."""
    n = sum(len(run) for run in runs)
    hits = sum(1 for run in runs for x in run if key(x))
    s = hits / n if n else 0.0
    u, dof = math.sqrt(max(s * (1 - s), 1e-9) / max(n, 1)), math.inf
    each = [sum(1 for x in run if key(x)) / len(run) for run in runs if run]
    if len(each) > 1:
        u_a = statistics.stdev(each) / math.sqrt(len(each))
        if u_a > u:
            u, dof = u_a, len(each) - 1
    return s, u, dof


class Comparison:
    """One share a route reports after the slowdown against its prediction
    (see the module docs for the model and its uncertainty)."""

    def __init__(self, what, phi_added, share0, share1, ratio, r_own):
        """`share0`, `share1` and `ratio` (T0 / T1) are each (value,
        standard uncertainty, degrees of freedom)."""
        (s0, u_s0, dof_s0), (s1, u_s1, dof_s1), (r, u_r, dof_r) = share0, share1, ratio
        self.what = what
        self.share0, self.share1 = s0, s1
        self.predicted = phi_added + (s0 - phi_added) * r
        # The observer check: the same model with T0 / T1 of the profiled
        # runs themselves (see the module docs).
        self.diff_own = s1 - (phi_added + (s0 - phi_added) * r_own)
        # The model's sensitivities times each input's uncertainty.
        terms = [(u_s1, dof_s1), (r * u_s0, dof_s0), ((s0 - phi_added) * u_r, dof_r)]
        self.u_c = math.sqrt(sum(u * u for u, _ in terms))
        self.dof = effective_dof(terms)
        self.diff = s1 - self.predicted
        self.p_chance = beyond(TOLERANCE / 100 / self.u_c, self.dof)
        self.ok = abs(self.diff) * 100 <= TOLERANCE

    def row(self):
        return (f"{self.what:<36} {100 * self.share0:6.1f} {100 * self.predicted:6.1f} "
                f"{100 * self.share1:6.1f} {100 * self.diff:+6.1f} {100 * self.u_c:5.2f} "
                f"{dof_text(self.dof):>5} {self.p_chance:9.1e} {100 * self.diff_own:+6.1f}  "
                f"{'ok' if self.ok else 'FAIL'}")

    def as_dict(self):
        return dict(what=self.what, share0=self.share0, predicted=self.predicted,
                    share1=self.share1, diff=self.diff, u_c=self.u_c,
                    dof=None if math.isinf(self.dof) else self.dof,
                    p_chance=self.p_chance, diff_own=self.diff_own, ok=self.ok)


# --- one experiment -----------------------------------------------------------


def layout_pad():
    """A last program argument of random length, which the programs ignore,
    for one run: it moves where the run's data lands (the argument is on
    the stack and in the heap, and shifts what is allocated after it).

    With address-space randomization off every process of one command line
    has one layout, and the interpreter's speed depends on it: slowed by
    `--slow-line=25:900` under vmprof, `other`'s share was 54.5-55.5% with a
    profile path of 9 to 33 characters and 57.3-58.7% with one of 1 or 41
    to 57, three runs each (one outlier, 40.8). Randomization on kept the
    pattern: it moves the stack by a random multiple of 16 bytes and the
    heap by whole pages, so what decides is where heap data sits within a
    page, which the copies of the command line's strings move. So the
    command lines of the two conditions, which differ by `--slow-line` (and
    the profiled runs' by their flags), measured one layout each, and the
    difference between those layouts became part of the result: the
    interpreted vmprof route read 3 to 6 points under its prediction, with
    the code not slowed 10-14% slower in its slowed runs (Mytkowicz et al.,
    ASPLOS 2009: measurement bias from the environment's size; the cure is
    theirs too, to randomize the setup). With a pad drawn for every run,
    each condition samples many layouts, and what layout does is noise that
    the spread of the runs carries, not a bias. The pad moves data only:
    code layout still differs between the conditions (`--slow-line` adds
    instructions), which the pad cannot randomize."""
    return ["x" * PAD_RANDOM.randrange(LAYOUT_PAD_BYTES)]


def scaled_args(work, toyvm, script, tier, seconds):
    """The program's argument (rounds) for about `seconds` of CPU time."""
    rounds = 4
    while True:
        cpu = work.cpu([toyvm, "run"] + TIERS[tier] + [script, str(rounds)])
        if cpu >= 0.2 or rounds > 1 << 20:
            return [str(max(1, round(rounds * seconds / max(cpu, 1e-3))))]
        rounds *= 4


class Block:
    """One experiment in one tier: its slowdown, its timing pairs and its
    profiled runs, to which `measure` adds."""

    def __init__(self, work, toyvm, name, spec, tier, routes, seconds):
        self.work, self.toyvm, self.name, self.spec, self.tier = work, toyvm, name, spec, tier
        self.routes = routes
        self.script = os.path.join(PROGRAMS, spec["program"])
        self.args = scaled_args(work, toyvm, self.script, tier, seconds)
        code_lines = lines_with_code(toyvm, self.script)
        self.lines = code_lines if spec["lines"] == "all" else spec["lines"]
        self.counts = entries(work, toyvm, self.script, self.args, self.lines)
        self.total_entries = sum(n for _, n in self.counts.values())
        if self.total_entries == 0:
            die(f"{name}: the slowed lines are never entered")
        t_guess = work.cpu(self.command([]))
        if "nanos" in spec:
            # Rounds such that T0 + entries * nanos is about `seconds`.
            self.nanos = spec["nanos"]
            run_time = t_guess + self.total_entries * self.nanos * 1e-9
            self.args = [str(max(1, round(int(self.args[0]) * seconds / run_time)))]
            self.counts = entries(work, toyvm, self.script, self.args, self.lines)
            self.total_entries = sum(n for _, n in self.counts.values())
        else:
            self.nanos = max(1, round(ADDED * t_guess * 1e9 / self.total_entries))
        self.slow = [f"--slow-line={line}:{self.nanos}" for line in self.lines]
        self.owner_of = {line: functions[0] for line, (functions, _) in self.counts.items()}
        self.pairs = []
        self.runs = {route: ([], []) for route in routes}

    def command(self, slow):
        return ([self.toyvm, "run"] + TIERS[self.tier] + slow + [self.script] + self.args
                + layout_pad())

    def measure(self, pairs, profiles):
        """Adds `pairs` timing pairs (T0 then T1, one after the other) and
        `profiles` profiled runs of each condition per route (one before,
        one slowed), spread evenly over the same rounds: a phase in which
        the machine runs the program slower then falls on timing and
        profiles alike (the interpreter's speed here changed more between
        batches of runs than within one)."""
        rounds = max(pairs, profiles)

        def due(i, n):
            """Whether round i takes one of n turns spread over the rounds."""
            return (i * n) // rounds != ((i + 1) * n) // rounds

        for i in range(rounds):
            if due(i, pairs):
                self.pairs.append((self.work.cpu(self.command([])),
                                   self.work.cpu(self.command(self.slow))))
            for route in self.routes if due(i, profiles) else []:
                before, after = self.runs[route]
                before.append(profile(self.work, self.toyvm, route, self.tier, self.script,
                                      self.args + layout_pad(), []))
                after.append(profile(self.work, self.toyvm, route, self.tier, self.script,
                                     self.args + layout_pad(), self.slow))

    def comparisons(self):
        """What each route must report, against what it did."""
        spec, tier = self.spec, self.tier
        t0 = statistics.fmean([a for a, _ in self.pairs])
        t1 = statistics.fmean([b for _, b in self.pairs])
        r, s_r = mean_and_sd([a / b for a, b in self.pairs])
        u_r = s_r / math.sqrt(len(self.pairs))
        self.summary = (f"T0 {t0:.3f} s, T1 {t1:.3f} s, T0/T1 {r:.4f} "
                        f"(sd {s_r:.4f} over {len(self.pairs)} pairs)")
        uniform = spec["lines"] == "all"
        if uniform:
            self.summary += (f"; {self.nanos} ns asked per entry, "
                             f"{1e9 * (t1 - t0) / self.total_entries:.0f} ns added")
        # The fraction of the added time each function (or line) gets: its
        # entries' share of all entries.
        added = {}
        for route in self.routes:
            inlines = route_inlines(route, tier)
            fractions = {}
            if route_gives_functions(route):
                for line, (functions, n) in self.counts.items():
                    key = ("function", owner(spec, functions[0], inlines))
                    fractions[key] = fractions.get(key, 0) + n / self.total_entries
            if route_gives_lines(route, tier) and not uniform:
                for line, (_, n) in self.counts.items():
                    key = ("line", attributed_line(route, tier, line, spec, self.owner_of))
                    fractions[key] = fractions.get(key, 0) + n / self.total_entries
            added[route] = fractions
        result = []
        for route in self.routes:
            before, after = self.runs[route]
            # Profiled runs are made in pairs (before, then after).
            own = [run0[2] / run1[2] for run0, run1 in zip(before, after) if run1[2] > 0]
            r_own = statistics.fmean(own) if own else math.nan
            for (kind, what), fraction in sorted(added[route].items(), key=str):
                pick = 0 if kind == "function" else 1
                runs0 = [run[pick] for run in before]
                runs1 = [run[pick] for run in after]
                share0 = pooled_share(runs0, lambda x: x == what)
                share1 = pooled_share(runs1, lambda x: x == what)
                label = f"{self.name} {tier} {route} " + (f"line {what}" if kind == "line" else what)
                ratio = (r, u_r, len(self.pairs) - 1)
                result.append(Comparison(label, fraction, share0, share1, ratio, r_own))
        return result

    def untouched(self):
        """The premise's check, per function route: how much more CPU time
        the code not slowed took in the slowed runs than in the others
        (each run's share of samples outside the slowed functions times its
        own CPU time). The prediction assumes 0; a few percent here moves
        the slowed function's share by as many points times its complement
        (bench/RESULTS.md: interpreted `work` took 10-14% more in slowed
        vmprof runs, run after run, before each run got a layout of its own)."""
        if self.spec["lines"] == "all":
            return []
        out = []
        for route in self.routes:
            if not route_gives_functions(route):
                continue
            inlines = route_inlines(route, self.tier)
            slowed = {owner(self.spec, functions[0], inlines)
                      for functions, _ in self.counts.values()}
            before, after = self.runs[route]

            def times(run):
                """(outside, inside) the slowed functions, by the run's own CPU time."""
                functions, _, cpu = run
                inside = sum(1 for f in functions if f in slowed)
                n = max(1, len(functions))
                return cpu * (n - inside) / n, cpu * inside / n

            out0, in0 = (statistics.fmean(t) for t in zip(*map(times, before)))
            out1, in1 = (statistics.fmean(t) for t in zip(*map(times, after)))
            asked = self.total_entries * self.nanos * 1e-9
            # Both gains: code not slowed running slower shows as a gain
            # outside; samples given to the wrong code, as a gain inside
            # short of what was asked.
            out.append(f"# {self.name} {self.tier} {route}: code not slowed took "
                       f"{100 * (out1 / out0 - 1):+.1f}% CPU time in the slowed runs "
                       f"({out0:.3f} s, then {out1:.3f} s; the prediction assumes +0); "
                       f"the slowed code gained {in1 - in0:.3f} s of the {asked:.3f} s asked")
        return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--toyvm", default=None)
    parser.add_argument("--short", action="store_true",
                        help="the CI form: fewer experiments and routes, and the chance of a "
                             "false failure must be under 1/1000")
    parser.add_argument("--seconds", type=float, default=None,
                        help="CPU seconds per run before the slowdown (default 1.2, short 1.0)")
    parser.add_argument("--pairs", type=int, default=None,
                        help="timing pairs per experiment and tier (default 8 with the JIT, "
                             "48 with --no-jit)")
    parser.add_argument("--profiles", type=int, default=None,
                        help="profiled runs per condition and route (default 3 with the JIT, "
                             "8 with --no-jit; --short: 4)")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed of the layout pads (default: a random one, printed)")
    parser.add_argument("--routes", default=None)
    parser.add_argument("--tiers", default=None,
                        help="default jit,no-jit; short: jit (the interpreter's CPU time varies "
                             "too much between runs to judge within 3 points in a CI's minutes)")
    parser.add_argument("--experiments", default=None)
    parser.add_argument("--json", default=None)
    opts = parser.parse_args()
    toyvm = absolute(opts.toyvm) if opts.toyvm else default_toyvm()
    routes = (opts.routes.split(",") if opts.routes
              else SHORT_ROUTES if opts.short else ROUTES)
    names = (opts.experiments.split(",") if opts.experiments
             else SHORT_EXPERIMENTS if opts.short else list(EXPERIMENTS))
    tiers = (opts.tiers or ("jit" if opts.short else "jit,no-jit")).split(",")
    seconds = opts.seconds or (1.0 if opts.short else 1.2)
    for r in routes:
        if r not in ROUTES:
            die(f"no route {r} (routes: {', '.join(ROUTES)})")
    for t in tiers:
        if t not in TIERS:
            die(f"no tier {t} (tiers: {', '.join(TIERS)})")
    if any(not r.startswith("vmprof") for r in routes) and not shutil.which("perf"):
        die("perf is not installed: give --routes vmprof,vmprof-lines")
    same_layout_every_run()
    seed = opts.seed if opts.seed is not None else random.SystemRandom().randrange(1 << 32)
    PAD_RANDOM.seed(seed)
    print(f"# layout pads from --seed {seed}")
    work = Work()
    print(f"{'comparison':<36} {'share0':>6} {'pred':>6} {'share1':>6} {'diff':>6} "
          f"{'u_c':>5} {'dof':>5} {'p_chance':>9} {'own':>6}", flush=True)
    results = []
    target = 1e-3 / (len(names) * len(tiers))
    try:
        for name in names:
            for tier in tiers:
                block = Block(work, toyvm, name, EXPERIMENTS[name], tier, routes, seconds)
                pairs = opts.pairs or TIMING_PAIRS[tier]
                profiles = opts.profiles or (4 if opts.short else PROFILED_RUNS[tier])
                block.measure(pairs, profiles)
                comparisons = block.comparisons()
                # The CI form measures more (twice at most) until sampling
                # error alone could fail it with a chance under 1/1000.
                for _ in range(2):
                    if not opts.short or sum(c.p_chance for c in comparisons) < target:
                        break
                    print(f"# {name} {tier}: {block.summary}: chance "
                          f"{sum(c.p_chance for c in comparisons):.1e}, measuring more",
                          flush=True)
                    block.measure(pairs, profiles)
                    comparisons = block.comparisons()
                print(f"# {name} {tier}: rounds {block.args[0]}, {block.nanos} ns x "
                      f"{block.total_entries} entries; {block.summary}", flush=True)
                for c in comparisons:
                    print(c.row(), flush=True)
                for line in block.untouched():
                    print(line, flush=True)
                results += comparisons
    finally:
        work.close()
    failed = [c for c in results if not c.ok]
    chance = sum(c.p_chance for c in results)
    worst = max((abs(c.diff) for c in results), default=0.0)
    print(f"\n{len(results)} comparisons, {len(failed)} outside {TOLERANCE} points; "
          f"largest difference {100 * worst:.1f} points; chance that sampling error alone "
          f"fails one: {chance:.1e}")
    print("verdict: every comparison within 3 points" if not failed else
          f"verdict: {len(failed)} comparisons outside 3 points")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump([c.as_dict() for c in results], f, indent=1)
    if failed:
        sys.exit(1)
    if opts.short and chance >= 1e-3:
        print("too few samples to judge within 3 points with a chance failure under 1/1000: "
              "run longer (--seconds, --pairs, --profiles)")
        sys.exit(1)


def absolute(program):
    """`program` as the runs can start it from their own directory: a path
    made absolute, a bare name left for PATH."""
    return os.path.abspath(program) if os.sep in program else program


def default_toyvm():
    """The release toyvm Cargo built for this checkout, else the `toyvm` on
    PATH (the book's reader runs this in a copy of the repository, with
    toyvm on PATH and no build of its own)."""
    found = subprocess.run([os.path.join(ROOT, "tools", "cargo-target-dir")],
                           capture_output=True, text=True)
    built = os.path.join(found.stdout.strip(), "release", "toyvm")
    if found.returncode == 0 and os.access(built, os.X_OK):
        return built
    on_path = shutil.which("toyvm")
    if on_path is None:
        die("no toyvm: build it (cargo build --release) or give --toyvm PATH")
    return on_path


def same_layout_every_run():
    """Turns address-space randomization off for this process and so for
    every run it starts (personality(2)'s ADDR_NO_RANDOMIZE, inherited
    across fork and exec), so that the layout pad alone chooses each run's
    layout: a run is then reproducible from its command line (the pads come
    from --seed). Randomization on would add random stack offsets and page
    placement, which the interpreter's speed also depends on (about 4% from
    process to process); it did not remove the bias that the pad does
    (see layout_pad)."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    current = libc.personality(0xFFFFFFFF)
    if current == -1 or libc.personality(current | 0x0040000) == -1:
        print("accuracy: cannot turn address-space randomization off; runs vary more",
              file=sys.stderr)


if __name__ == "__main__":
    main()
