# gdb script of tests/unwind_stepi.rs: steps every instruction of toy code
# from pending breakpoints and checks, at each program counter, that gdb's
# backtrace (built from the code's unwind info) is the right chain down to
# `main`.
#
# Set before sourcing (`-ex "python ..."`):
#   BREAKS     the toy symbols to stop at, e.g. "toy:jit:outer:stepi.toy:13"
#   STEP_LIMIT most `stepi`s per stop (a long loop is cut there)
#   OUT        where to write the result (JSON)
#   START      "run" natively, "continue" when attached to qemu's gdb stub
#
# The rule checked, instruction by instruction, is the one a correct
# unwinder must keep: the frames older than the innermost one are the same
# (names and return addresses) before and after an instruction, except
#   - after a call into toy code: one frame more, the caller's, at the
#     address after the call;
#   - after a `ret`: one frame less;
# and every backtrace reaches `main` with no unnamed frame. A call into
# the runtime (Rust) is run to its return with `finish`, then the same
# rule holds as for any other instruction. Breakpoints are disabled while
# an activation is stepped, so the runtime's own calls into toy code do
# not stop it.
import json

import gdb

result = {"checked": 0, "errors": [], "pcs": {}, "sizes": {}, "starts": {}}
# "sizes": each region's number of instructions.


def frames():
    """The backtrace, innermost first: (name, pc) pairs."""
    out = []
    frame = gdb.newest_frame()
    while frame is not None:
        out.append((frame.name() or "??", int(frame.pc())))
        frame = frame.older()
    return out


def is_toy(name):
    return name.startswith("toy:")


def instruction(pc):
    """The instruction at pc: (kind, length, text); kind is "call",
    "ret" or "other"."""
    insn = gdb.newest_frame().architecture().disassemble(pc)[0]
    text = insn["asm"].strip()
    mnemonic = text.split()[0] if text else ""
    if mnemonic in ("call", "callq", "bl", "blr"):
        kind = "call"
    elif mnemonic in ("ret", "retq"):
        kind = "ret"
    else:
        kind = "other"
    return kind, insn["length"], text


def show(chain):
    return " <- ".join("%s@%#x" % frame for frame in chain[:8])


def error(message):
    if len(result["errors"]) < 40:
        result["errors"].append(message)


def check(where, text, actual, expected_older):
    """Checks one stop: the frames older than the innermost one, and the
    chain down to main."""
    result["checked"] += 1
    if actual[1:] != expected_older:
        error(
            "%s `%s`: older frames are\n    %s\nexpected\n    %s"
            % (where, text, show(actual[1:]), show(expected_older))
        )
        return False
    names = [name for name, _ in actual]
    if "??" in names or names[-1] != "main":
        error("%s `%s`: the chain does not reach main: %s" % (where, text, show(actual)))
        return False
    return True


def record(name, pc):
    """Counts pc as stepped, and the region's size (gdb's block for it)."""
    result["pcs"].setdefault(name, [])
    if pc not in result["pcs"][name]:
        result["pcs"][name].append(pc)
    if name not in result["sizes"]:
        block = gdb.block_for_pc(pc)
        while block is not None and block.function is None:
            block = block.superblock
        if block is not None:
            arch = gdb.newest_frame().architecture()
            result["starts"][name] = block.start
            result["sizes"][name] = len(arch.disassemble(block.start, block.end - 1))


def step_activation():
    """Steps from a breakpoint stop until the toy code returns into the
    runtime, or STEP_LIMIT steps."""
    before = frames()
    if not check("stop at %s" % before[0][0], "", before, before[1:]):
        return
    for _ in range(STEP_LIMIT):
        name, pc = before[0]
        kind, length, text = instruction(pc)
        record(name, pc)
        where = "%s+%#x" % (name, pc - result["starts"].get(name, pc))
        gdb.execute("stepi", to_string=True)
        after = frames()
        if kind == "ret":
            # The caller's frame is innermost again, at its return address.
            if after[0][1] != before[1][1]:
                error("%s `%s`: returned to %s, not %s" % (where, text, after[0], before[1]))
                return
            if not is_toy(after[0][0]):
                # Back in the runtime: this activation is done. (Only the
                # address is compared: gdb shows the Rust frames inlined at
                # a return address differently once it is the innermost.)
                return
            if not check(where, text, after, before[2:]):
                return
        elif kind == "call" and is_toy(after[0][0]):
            if not check(where, text, after, [(name, pc + length)] + before[1:]):
                return
        elif kind == "call":
            # A call into the runtime: run it to its return.
            gdb.execute("finish", to_string=True)
            after = frames()
            if after[0] != (name, pc + length):
                error("%s `%s`: finish stopped at %s" % (where, text, after[0]))
                return
            if not check(where, text, after, before[1:]):
                return
        else:
            if not is_toy(after[0][0]):
                error("%s `%s`: left toy code for %s" % (where, text, show(after)))
                return
            if not check(where, text, after, before[1:]):
                return
        before = after


gdb.execute("set breakpoint pending on")
gdb.execute("set confirm off")
for symbol in BREAKS:
    gdb.execute("break -function '%s'" % symbol, to_string=True)
gdb.execute(START, to_string=True)
stops = 0
while stops < 50:
    try:
        frame = gdb.newest_frame()
    except gdb.error:
        break  # the program exited
    if not is_toy(frame.name() or ""):
        break
    stops += 1
    # Each breakpoint is stepped from once; others stay for later stops.
    for bp in gdb.breakpoints():
        if bp.location and frame.name() in bp.location:
            bp.enabled = False
    enabled = [bp for bp in gdb.breakpoints() if bp.enabled]
    for bp in enabled:
        bp.enabled = False
    gdb.execute("set scheduler-locking step")
    step_activation()
    gdb.execute("set scheduler-locking off")
    for bp in enabled:
        bp.enabled = True
    if not enabled:
        break
    try:
        gdb.execute("continue", to_string=True)
    except gdb.error:
        break
result["stops"] = stops
with open(OUT, "w") as out:
    json.dump(result, out)
gdb.execute("kill")
